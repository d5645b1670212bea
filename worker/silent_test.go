package worker_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/internal/cutproxy"
	"github.com/shareq/shareq/internal/logbuf"
	"github.com/shareq/shareq/worker"
)

// viaProxy returns a client option that sends every broker connection of
// a single-broker cluster through p.
func viaProxy(p *cutproxy.Proxy) kgo.Opt {
	return kgo.Dialer(func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, p.Addr())
	})
}

// waitLog waits until the log holds a line containing s, and returns
// when it saw it.
func waitLog(t *testing.T, logs *logbuf.Buffer, s string, timeout time.Duration) time.Time {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !strings.Contains(logs.String(), s) {
		if time.Now().After(deadline) {
			t.Fatalf("no log line %q within %v; logs:\n%s", s, timeout, logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	return time.Now()
}

// waitKeys waits until the jobs with keys have been accepted.
func waitKeys(t *testing.T, b *bundle, timeout time.Duration, keys ...string) {
	t.Helper()
	b.obs.WaitFor(t, timeout, "jobs "+strings.Join(keys, ","), func(es []finished) bool {
		for _, k := range keys {
			if count(es, k, worker.AckAccept) == 0 {
				return false
			}
		}
		return true
	})
}

// A worker whose network to its broker goes silent (no byte passes,
// nothing is closed) for longer than the record lock and the session
// timeout: it notices within a bound set by its request timeouts, not the
// OS's TCP timeout, says so in one line, says so again when the broker
// answers, and then runs every job, the ones produced while silent too.
func TestSilentBrokerDetectedAndRecovered(t *testing.T) {
	t.Parallel()
	b := setup(t, 2)
	px := cutproxy.New(t, b.c.Seeds[0], false)
	var logs logbuf.Buffer
	out := io.Writer(&logs)
	if testing.Verbose() {
		out = io.MultiWriter(&logs, os.Stderr)
	}
	log := slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{Level: slog.LevelDebug}))

	var mu sync.Mutex
	runs := map[string]int{}
	release := make(chan struct{})
	h := handler.Func(func(ctx context.Context, job *handler.Job) error {
		mu.Lock()
		runs[string(job.Key)]++
		first := runs[string(job.Key)] == 1
		mu.Unlock()
		if string(job.Key) == "held" && first {
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
		return nil
	})
	b.start(t, h, worker.SessionTimeout(2*time.Second), worker.ClientOpts(viaProxy(px)), worker.Logger(log))
	b.produce(t, "a1", "a2", "a3")
	waitKeys(t, b, 60*time.Second, "a1", "a2", "a3")
	b.produce(t, "held")
	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		n := runs["held"]
		mu.Unlock()
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("job held did not start")
		}
		time.Sleep(10 * time.Millisecond)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	session, heartbeat, _ := groupTimers(ctx, t, b)
	cancel()
	// franz-go's read deadline (kgo.RequestTimeoutOverhead, 10 s by
	// default, plus the fetch's MaxWait) bounds the wait for an answer;
	// loosely: the session timeout plus twice that.
	const requestTimeout = 10 * time.Second
	bound := session + 2*requestTimeout
	// Longer than the lock and the session timeout, and than the wait for
	// an answer: the worker is fenced and its locks expire while silent.
	silence := b.c.LockDuration + session + requestTimeout + 2*time.Second
	silenced := time.Now()
	px.Silence()
	close(release)
	noticed := waitLog(t, &logs, "member: no answer from broker", bound)
	t.Logf("%s: silence noticed after %v (lock %v, session %v, heartbeat %v)", b.c.Kind, noticed.Sub(silenced).Round(time.Millisecond), b.c.LockDuration, session, heartbeat)
	b.produce(t, "b1", "b2", "b3")
	time.Sleep(time.Until(silenced.Add(silence))) // the fault's length, not a wait for a condition
	px.Resume()
	resumed := time.Now()
	waitKeys(t, b, 2*time.Minute, "b1", "b2", "b3", "held")
	back := waitLog(t, &logs, "answering again", 30*time.Second)
	t.Logf("%s: jobs produced while silent ran, and the worker said its broker answers again %v after Resume", b.c.Kind, back.Sub(resumed).Round(time.Millisecond))
	// One line for the outage and one for the recovery, per peer,
	// however many requests failed meanwhile.
	waitLog(t, &logs, "group coordinator answering again", 30*time.Second)
	for _, line := range []string{`member: no answer from broker \d+;`, `member: broker \d+ answering again`,
		`member: no answer from group coordinator;`, `member: group coordinator answering again`} {
		if n := len(regexp.MustCompile(line).FindAllString(logs.String(), -1)); n != 1 {
			t.Fatalf("%d log lines %q, want 1; logs:\n%s", n, line, logs.String())
		}
	}
	// Each attribute once a line: the member's lines named the group
	// twice (the worker's logger and the member's).
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Count(line, " group=") > 1 {
			t.Fatalf("a log line names its group twice: %s", line)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for k, n := range runs {
		// The job whose ACCEPT the silence swallowed runs again (its
		// lock expired on the broker); every other ran once.
		if n != 1 && k != "held" {
			t.Fatalf("job %s ran %d times, want 1", k, n)
		}
	}
}
