package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/shareq/shareq/internal/brokerprobe"
)

// services starts, restarts and stops the test services through the
// repository's scripts, and remembers which ones it started so that it
// stops only those.
type services struct {
	repo string

	startedPG    bool
	startedKafka bool
	pgDown       bool // a restart stopped Postgres and has not started it again
	clusters     []*cluster
	// brokerDown is set while the single test broker is down for a
	// restart, so close can bring back a broker it took away.
	brokerDown *brokerProc
}

// script runs scripts/NAME with args and returns its stdout. Its stderr
// (the scripts' progress messages) is returned in the error on failure.
func (s *services) script(ctx context.Context, name string, args ...string) (string, error) {
	return s.scriptEnv(ctx, nil, name, args...)
}

// scriptEnv is script with extra environment variables.
func (s *services) scriptEnv(ctx context.Context, env []string, name string, args ...string) (string, error) {
	return brokerprobe.Script(ctx, s.repo, env, name, args...)
}

// ensurePG reuses a running test Postgres or starts one, and returns its URL.
func (s *services) ensurePG(ctx context.Context) (string, error) {
	if _, err := s.script(ctx, "postgres.sh", "status"); err != nil {
		fmt.Println("shareq-soak: starting Postgres (scripts/postgres.sh up)")
		if _, err := s.script(ctx, "postgres.sh", "up"); err != nil {
			return "", err
		}
		s.startedPG = true
	}
	out, err := s.script(ctx, "postgres.sh", "url")
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(out), nil
}

// ensureKafka reuses the running single-node test broker or starts one,
// and returns its address.
func (s *services) ensureKafka(ctx context.Context) (string, error) {
	if _, err := s.script(ctx, "kafka.sh", "status"); err != nil {
		fmt.Println("shareq-soak: starting the test broker (scripts/kafka.sh up)")
		if _, err := s.script(ctx, "kafka.sh", "up"); err != nil {
			return "", err
		}
		s.startedKafka = true
	}
	out, err := s.script(ctx, "kafka.sh", "env")
	if err != nil {
		return "", err
	}
	for line := range strings.Lines(out) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "SHAREQ_TEST_KAFKA="); ok {
			return v, nil
		}
	}
	return "", fmt.Errorf("scripts/kafka.sh env printed no SHAREQ_TEST_KAFKA: %q", out)
}

// cluster is a cluster run by scripts/kafka-cluster.sh.
type cluster struct {
	name string
	brokerprobe.Cluster

	started bool         // the soak started it, and stops it at the end
	down    map[int]bool // nodes a fault stopped and has not started again
}

// The clusters the soak uses: the 3-node one of the cluster3 phase, and
// the private single broker of -own-broker.
//
// The 3-node cluster listens on KAFKA_CLUSTER_PORT_BASE + 100, + 200 and
// + 300 (and the port after each), as scripts/kafka-cluster.sh does:
// 19192, 19292 and 19392 unless the environment sets another base.
func cluster3() *cluster {
	base := 19092
	if v, err := strconv.Atoi(os.Getenv("KAFKA_CLUSTER_PORT_BASE")); err == nil && v > 0 {
		base = v
	}
	return &cluster{name: "3-node cluster", Cluster: brokerprobe.Cluster{Nodes: 3, PortBase: base}}
}

// ownBroker is the private broker of -own-broker on portBase. Its
// directory is its port base's, so that soaks on other port bases (the
// flag's advice on a shared machine) never share, and wipe, its data.
func ownBroker(cache string, portBase int) *cluster {
	return &cluster{name: "private broker", Cluster: brokerprobe.Cluster{Nodes: 1, PortBase: portBase, Dir: filepath.Join(cache, "kafka-own-"+strconv.Itoa(portBase))}}
}

func (s *services) clusterScript(ctx context.Context, c *cluster, args ...string) (string, error) {
	return c.Script(ctx, s.repo, args...)
}

// ensureCluster reuses the running cluster c or starts it, and returns its
// seed addresses.
func (s *services) ensureCluster(ctx context.Context, c *cluster) ([]string, error) {
	s.clusters = append(s.clusters, c)
	if _, err := s.clusterScript(ctx, c, "status"); err != nil {
		fmt.Printf("shareq-soak: starting the %s (scripts/kafka-cluster.sh up)\n", c.name)
		if _, err := s.clusterScript(ctx, c, "up"); err != nil {
			return nil, err
		}
		c.started = true
	}
	out, err := s.clusterScript(ctx, c, "seeds")
	if err != nil {
		return nil, err
	}
	return strings.Split(strings.TrimSpace(out), ","), nil
}

// stopNode stops node n of c (SIGKILL when kill, else SIGTERM, a
// controlled shutdown); its data is kept.
func (s *services) stopNode(ctx context.Context, c *cluster, n int, kill bool) error {
	args := []string{"stop", strconv.Itoa(n)}
	if kill {
		args = append(args, "--kill")
	}
	if c.down == nil {
		c.down = map[int]bool{}
	}
	c.down[n] = true
	_, err := s.clusterScript(ctx, c, args...)
	return err
}

// startNode starts stopped node n of c on its data and waits until it
// serves.
func (s *services) startNode(ctx context.Context, c *cluster, n int) error {
	if _, err := s.clusterScript(context.WithoutCancel(ctx), c, "start", strconv.Itoa(n)); err != nil {
		return err
	}
	delete(c.down, n)
	return nil
}

// close brings back a broker a fault left down and stops the services the
// soak started. It runs at exit, also after an interrupt, so it uses its
// own time bound.
func (s *services) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s.restore(ctx)
	for _, c := range s.clusters {
		if c.started {
			fmt.Printf("shareq-soak: stopping the %s it started\n", c.name)
			if _, err := s.clusterScript(ctx, c, "down"); err != nil {
				fmt.Fprintln(os.Stderr, "shareq-soak:", err)
			}
		}
	}
	if s.startedKafka {
		fmt.Println("shareq-soak: stopping the test broker it started")
		if _, err := s.script(ctx, "kafka.sh", "down"); err != nil {
			fmt.Fprintln(os.Stderr, "shareq-soak:", err)
		}
	}
	if s.startedPG {
		fmt.Println("shareq-soak: stopping Postgres it started")
		if _, err := s.script(ctx, "postgres.sh", "down"); err != nil {
			fmt.Fprintln(os.Stderr, "shareq-soak:", err)
		}
	}
}

// restore brings back what a fault left down: the test broker, cluster
// nodes, Postgres. It runs after every phase and at exit.
func (s *services) restore(ctx context.Context) {
	if b := s.brokerDown; b != nil {
		fmt.Println("shareq-soak: bringing back the test broker a restart left down")
		if err := b.start(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "shareq-soak:", err)
		}
		s.brokerDown = nil
	}
	for _, c := range s.clusters {
		for n := range c.down {
			fmt.Printf("shareq-soak: bringing back node %d of the %s, which a fault left down\n", n, c.name)
			if _, err := s.clusterScript(ctx, c, "start", strconv.Itoa(n)); err != nil {
				fmt.Fprintln(os.Stderr, "shareq-soak:", err)
			}
			delete(c.down, n)
		}
	}
	if s.pgDown {
		fmt.Println("shareq-soak: bringing back Postgres, which a restart left down")
		if _, err := s.script(ctx, "postgres.sh", "up"); err != nil {
			fmt.Fprintln(os.Stderr, "shareq-soak:", err)
		}
		s.pgDown = false
	}
}

func (s *services) cacheDir() string {
	if d := os.Getenv("SHAREQ_CACHE_DIR"); d != "" {
		return d
	}
	return filepath.Join(s.repo, ".cache")
}

// restartPG restarts the test Postgres with scripts/postgres.sh down and
// up, which keep its data directory, and returns how long it was down.
func (s *services) restartPG(ctx context.Context, downFor time.Duration) (time.Duration, error) {
	start := time.Now()
	s.pgDown = true
	if _, err := s.script(ctx, "postgres.sh", "down"); err != nil {
		return 0, err
	}
	time.Sleep(downFor)
	if _, err := s.script(context.WithoutCancel(ctx), "postgres.sh", "up"); err != nil {
		return time.Since(start), err
	}
	s.pgDown = false
	return time.Since(start), nil
}

// brokerProc is the single-node test broker as scripts/kafka.sh started
// it: the soak restarts it in place, with the same command line, data
// directory and pid file, so kafka.sh still recognises it afterwards.
// (kafka.sh up would wipe its data; it has no restart.)
type brokerProc struct {
	oldPID    int // the process the soak stopped
	pidFile   string
	serverLog string
	outFile   string
	addr      string
	argv      []string
	env       []string
	dir       string
}

// findTestBroker reads the running test broker's process from kafka.sh's
// pid file.
func (s *services) findTestBroker(addr string) (*brokerProc, error) {
	cache := s.cacheDir()
	b := &brokerProc{
		pidFile:   filepath.Join(cache, "kafka.pid"),
		serverLog: filepath.Join(cache, "kafka-run", "server.log"),
		outFile:   filepath.Join(cache, "kafka-run", "kafka.out"),
		addr:      addr,
	}
	pid, err := b.pid()
	if err != nil {
		return nil, err
	}
	b.oldPID = pid
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return nil, fmt.Errorf("test broker pid %d: %w", pid, err)
	}
	b.argv = strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00")
	props := filepath.Join(cache, "kafka-run", "server.properties")
	if !strings.Contains(strings.Join(b.argv, " "), "kafka.Kafka "+props) {
		return nil, fmt.Errorf("pid %d in %s is not the test broker (command line %q)", pid, b.pidFile, b.argv)
	}
	if env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid)); err == nil {
		b.env = strings.Split(strings.TrimRight(string(env), "\x00"), "\x00")
	}
	if dir, err := os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid)); err == nil {
		b.dir = dir
	}
	return b, nil
}

func (b *brokerProc) pid() (int, error) {
	raw, err := os.ReadFile(b.pidFile)
	if err != nil {
		return 0, fmt.Errorf("test broker pid file: %w", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("test broker pid file %s: %q", b.pidFile, raw)
	}
	return pid, nil
}

// kill stops the broker with sig and waits for the process to go.
func (b *brokerProc) kill(sig syscall.Signal) error {
	pid, err := b.pid()
	if err != nil {
		return err
	}
	if err := syscall.Kill(pid, sig); err != nil {
		return fmt.Errorf("kill test broker %d: %w", pid, err)
	}
	deadline := time.Now().Add(60 * time.Second)
	// Gone means reaped, or a zombie with no thread left: the thread group
	// leader of a multithreaded process (a JVM) shows as a zombie while its
	// other threads still exit and its sockets are still open.
	for syscall.Kill(pid, 0) == nil && !zombie(pid) {
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			return fmt.Errorf("test broker %d did not exit within 60s of %v; killed", pid, sig)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// And its listener closed.
	for portOpen(b.addr) {
		if time.Now().After(deadline) {
			return fmt.Errorf("test broker %d exited, but %s still accepts connections 60s after %v", pid, b.addr, sig)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil
}

// zombie reports whether pid has exited and waits to be reaped: a zombie
// with a single task left.
func zombie(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// /proc/PID/stat: "pid (comm) S ...": the state follows the last ')'.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 || i+2 >= len(stat) || stat[i+2] != 'Z' {
		return false
	}
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	return err != nil || len(tasks) <= 1
}

// start relaunches the broker with its recorded command line, in its own
// session like kafka.sh does, writes the pid file, and waits until the
// broker logs that it started and accepts connections.
func (b *brokerProc) start(ctx context.Context) error {
	// Someone else may have started a broker while this one was down (a
	// concurrent make test runs scripts/kafka.sh up when it finds none,
	// and that wipes the data): then leave theirs, and their pid file, alone.
	if pid, err := b.pid(); err == nil && pid != b.oldPID {
		return fmt.Errorf("while the soak restarted the test broker, another process started one (pid %d, per %s): its data was wiped, and the soak's topic with it; run the soak with -own-broker on a shared machine", pid, b.pidFile)
	}
	if portOpen(b.addr) {
		return fmt.Errorf("while the soak restarted the test broker, another process took %s; run the soak with -own-broker on a shared machine", b.addr)
	}
	logStart := fileSize(b.serverLog)
	out, err := os.OpenFile(b.outFile, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	defer out.Close()
	cmd := exec.Command(b.argv[0], b.argv[1:]...)
	cmd.Env = b.env
	cmd.Dir = b.dir
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("relaunch test broker: %w", err)
	}
	go func() { _ = cmd.Wait() }() // reap it if it exits while the soak runs
	if err := os.WriteFile(b.pidFile, []byte(strconv.Itoa(cmd.Process.Pid)+"\n"), 0o644); err != nil {
		return err
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if started(b.serverLog, logStart) && portOpen(b.addr) {
			return nil
		}
		if syscall.Kill(cmd.Process.Pid, 0) != nil {
			return fmt.Errorf("relaunched test broker exited during start-up (see %s)", b.serverLog)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("relaunched test broker did not start within 2m (see %s)", b.serverLog)
		}
		select {
		case <-ctx.Done():
			// Keep waiting a little: a broker half started is worse than
			// a late return.
			if time.Now().After(deadline.Add(-time.Minute)) {
				return ctx.Err()
			}
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func fileSize(path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return st.Size()
}

// started reports whether the log at path says "Kafka Server started"
// after byte offset from.
func started(path string, from int64) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	if _, err := f.Seek(from, 0); err != nil {
		return false
	}
	buf := make([]byte, 1<<20)
	var tail []byte
	for {
		n, err := f.Read(buf)
		chunk := append(tail, buf[:n]...)
		if bytes.Contains(chunk, []byte("Kafka Server started")) {
			return true
		}
		if len(chunk) > 64 {
			tail = append([]byte(nil), chunk[len(chunk)-64:]...)
		}
		if err != nil {
			return false
		}
	}
}

func portOpen(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// restartTestBroker crashes the single test broker (SIGKILL, or SIGTERM
// for a clean stop) and starts it again on its data; it returns how long
// the broker was unavailable.
func (s *services) restartTestBroker(ctx context.Context, addr string, sig syscall.Signal) (time.Duration, error) {
	b, err := s.findTestBroker(addr)
	if err != nil {
		return 0, err
	}
	start := time.Now()
	s.brokerDown = b
	if err := b.kill(sig); err != nil {
		return 0, err
	}
	if err := b.start(context.WithoutCancel(ctx)); err != nil {
		return time.Since(start), err
	}
	s.brokerDown = nil
	return time.Since(start), nil
}
