package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// What the run of the quickstart expects of it (examples/quickstart): it
// reads its brokers from quickstartBrokersEnv, works the topic
// quickstartTopic, and logs quickstartDone with the job's image_id when
// it has made a thumbnail.
const (
	quickstartBrokersEnv = "SHAREQ_BROKERS"
	quickstartTopic      = "images"
	quickstartImage      = "releasecheck"
	quickstartDone       = "thumbnail made"
)

// quickstartTimeoutDefault bounds the run of the quickstart: its start,
// its job and its graceful stop.
const quickstartTimeoutDefault = 60 * time.Second

// runQuickstart runs the quickstart binary bin as a user does after
// building it: against a broker (an in-process kfake one on 127.0.0.1, a
// free port, with the topic quickstartTopic) named in
// quickstartBrokersEnv, with one job enqueued. Once its output has the
// job's quickstartDone line it is interrupted (Ctrl-C), and must then
// exit with status 0. All of it within timeout; else the process is
// killed, and the error carries its output.
func runQuickstart(bin string, timeout time.Duration) error {
	cluster, err := kfake.NewCluster(
		kfake.NumBrokers(1),
		kfake.SeedTopics(1, quickstartTopic),
		kfake.BrokerConfigs(map[string]string{
			// Assign the share group's partitions within a second or
			// two, not kfake's default heartbeat of five.
			"group.share.heartbeat.interval.ms": "1000",
		}),
	)
	if err != nil {
		return fmt.Errorf("start an in-process broker for the quickstart: %w", err)
	}
	defer cluster.Close()
	addr := strings.Join(cluster.ListenAddrs(), ",")
	if err := enqueueQuickstartJob(addr, timeout); err != nil {
		return err
	}
	out := newWatchedOutput(quickstartDone)
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), quickstartBrokersEnv+"="+addr)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	fail := func(format string, args ...any) error {
		return fmt.Errorf("%s=%s %s: %s; its output:\n%s", quickstartBrokersEnv, addr, bin, fmt.Sprintf(format, args...), out)
	}
	select {
	case <-out.seen:
	case err := <-exited:
		return fail("it exited (%v) before it logged %q for the job enqueued on %q", err, quickstartDone, quickstartTopic)
	case <-timer.C:
		_ = cmd.Process.Kill()
		<-exited
		return fail("no %q line within %s of its start for the job enqueued on %q (killed)", quickstartDone, timeout, quickstartTopic)
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		return fail("interrupt it: %v", err)
	}
	select {
	case err := <-exited:
		if err != nil {
			return fail("interrupted, it exited with %v, want a graceful stop and status 0", err)
		}
		return nil
	case <-timer.C:
		_ = cmd.Process.Kill()
		<-exited
		return fail("interrupted, it did not stop within %s of its start (killed)", timeout)
	}
}

// enqueueQuickstartJob produces the job the quickstart must run to the
// broker at addr.
func enqueueQuickstartJob(addr string, timeout time.Duration) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(addr, ",")...))
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	job := fmt.Sprintf(`{"image_id":%q,"width":320}`, quickstartImage)
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: quickstartTopic, Value: []byte(job)}).FirstErr(); err != nil {
		return fmt.Errorf("enqueue the quickstart's job on %q at %s: %w", quickstartTopic, addr, err)
	}
	return nil
}

// A watchedOutput collects a process's output and closes seen once the
// output has a line with want and the quickstart's image ID. It is safe
// for concurrent use (os/exec writes stdout and stderr from two
// goroutines).
type watchedOutput struct {
	want []byte
	seen chan struct{}

	mu   sync.Mutex
	buf  bytes.Buffer
	done bool
}

func newWatchedOutput(want string) *watchedOutput {
	return &watchedOutput{want: []byte(want), seen: make(chan struct{})}
}

func (w *watchedOutput) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if !w.done && hasLineWith(w.buf.Bytes(), w.want, []byte(quickstartImage)) {
		w.done = true
		close(w.seen)
	}
	return len(p), nil
}

// String returns the output so far.
func (w *watchedOutput) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.TrimRight(w.buf.String(), "\n")
}

// hasLineWith reports whether a complete line of out holds every one of
// words.
func hasLineWith(out []byte, words ...[]byte) bool {
	lines := bytes.Split(out, []byte("\n"))
	for _, l := range lines[:len(lines)-1] { // the last is not complete
		if !slices.ContainsFunc(words, func(w []byte) bool { return !bytes.Contains(l, w) }) {
			return true
		}
	}
	return false
}
