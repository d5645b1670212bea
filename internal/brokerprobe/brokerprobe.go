// Package brokerprobe is what shareq's broker probe (shareq-soak
// -broker-probe, make soak-broker-probe) and the tests that need a share
// partition stalled on a real Apache Kafka broker share: a private
// broker run by scripts/kafka-cluster.sh that can be SIGKILLed and
// started again on its data ([Cluster]), a share-group member that
// speaks the protocol itself, so that every offset it holds, accepts or
// releases is its caller's choice ([Member]), the probe's variants
// ([Variants]) and the steps that make a variant's stall ([Driver]).
// RELIABILITY.md, "A partition the broker stops serving", has what the
// probe found.
package brokerprobe

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// Script runs scripts/name of the repository at repo with args (and env
// added to the process's environment) and returns its stdout. Its stderr
// (the scripts' progress messages) is in the error on failure.
func Script(ctx context.Context, repo string, env []string, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(repo, "scripts", name), args...)
	cmd.Dir = repo
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.Stdin = nil
	// The scripts start servers with setsid; killing the script on ctx's
	// end must not kill them, and it does not.
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("scripts/%s %s: %w\n%s", name, strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

// Cluster is an Apache Kafka cluster of scripts/kafka-cluster.sh: Nodes
// nodes, node N listening on 127.0.0.1:PortBase+100*N, its data under
// Dir (the script's default when empty).
type Cluster struct {
	Nodes    int
	PortBase int
	Dir      string
}

// Env is the environment scripts/kafka-cluster.sh takes c from.
func (c Cluster) Env() []string {
	env := []string{"KAFKA_CLUSTER_NODES=" + strconv.Itoa(c.Nodes), "KAFKA_CLUSTER_PORT_BASE=" + strconv.Itoa(c.PortBase)}
	if c.Dir != "" {
		env = append(env, "KAFKA_CLUSTER_DIR="+c.Dir)
	}
	return env
}

// Script runs scripts/kafka-cluster.sh of repo on c with args.
func (c Cluster) Script(ctx context.Context, repo string, args ...string) (string, error) {
	return Script(ctx, repo, c.Env(), "kafka-cluster.sh", args...)
}

// Seeds returns c's addresses.
func (c Cluster) Seeds(ctx context.Context, repo string) ([]string, error) {
	out, err := c.Script(ctx, repo, "seeds")
	if err != nil {
		return nil, err
	}
	return strings.Split(strings.TrimSpace(out), ","), nil
}

// Stop stops node n (SIGKILL when kill, else SIGTERM, a controlled
// shutdown), keeping its data.
func (c Cluster) Stop(ctx context.Context, repo string, n int, kill bool) error {
	args := []string{"stop", strconv.Itoa(n)}
	if kill {
		args = append(args, "--kill")
	}
	_, err := c.Script(ctx, repo, args...)
	return err
}

// Start starts stopped node n on its data and waits until it serves.
func (c Cluster) Start(ctx context.Context, repo string, n int) error {
	_, err := c.Script(context.WithoutCancel(ctx), repo, "start", strconv.Itoa(n))
	return err
}

// ServerLog is node n's server.log.
func (c Cluster) ServerLog(n int) string {
	return filepath.Join(c.Dir, "node-"+strconv.Itoa(n), "server.log")
}
