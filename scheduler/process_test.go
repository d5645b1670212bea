package scheduler

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shareq/shareq/enqueue/pgoutbox"
	"github.com/shareq/shareq/migrations/pgtest"
)

// The environment of a child scheduler process (schedulerChild).
const (
	childEnv    = "SHAREQ_SCHEDULER_TEST_CHILD" // "1" in a child
	childURLEnv = "SHAREQ_SCHEDULER_TEST_URL"   // its database, search_path set
	childAppEnv = "SHAREQ_SCHEDULER_TEST_APP"
	childByEnv  = "SHAREQ_SCHEDULER_TEST_BY" // its name, in every firing's value
)

// SoakEnv names the environment variable that makes
// TestKilledAndFrozenSchedulerProcesses the long run (make
// scheduler-soak): its duration, a Go duration ("3m"), with a fault
// every soakKillEvery.
const soakEnv = "SHAREQ_SCHEDULER_SOAK"

const (
	// procInterval is the interval of the child processes' schedules.
	procInterval = 100 * time.Millisecond
	// procRetry is the children's RetryInterval: longer than
	// procInterval, so that most handovers miss firings and the
	// policies have something to do.
	procRetry = time.Second
	// procSession is the children's SessionTimeout: a frozen active
	// process loses the lock that long after its last statement. 40
	// times their CheckInterval, so that a loaded machine's stalls do
	// not lose it.
	procSession = 2 * time.Second
	// procFreezeEvery: every procFreezeEvery-th fault, from the second,
	// is a SIGSTOP of the active process instead of a SIGKILL.
	procFreezeEvery = 3
	// procShort is the run of make test, with procShortKills faults (a
	// kill, then a freeze).
	procShort      = 12 * time.Second
	procShortKills = 2
	// soakKillEvery spaces the faults of the long run.
	soakKillEvery = 15 * time.Second
	// procExtraKills bounds the kills added to make a handover miss a
	// firing.
	procExtraKills = 3
)

// schedulerChild is the main function of a child: a scheduler of two
// schedules at procInterval, one of each missed-firing policy, until
// SIGTERM (Run returns after the firing under way) or SIGKILL. It logs
// as JSON on stderr, which the parent reads (the "scheduler: active"
// line is the moment it took over; msgSessionEnded, that it found its
// session ended after a freeze).
func schedulerChild() int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	// Times in full: slog's own format keeps milliseconds.
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey && a.Value.Kind() == slog.KindTime {
			a.Value = slog.StringValue(a.Value.Time().Format(time.RFC3339Nano))
		}
		return a
	}}))
	pool, err := pgxpool.New(ctx, os.Getenv(childURLEnv))
	if err != nil {
		log.Error("child: pool", slog.Any("err", err))
		return 1
	}
	defer pool.Close()
	by := os.Getenv(childByEnv)
	s, err := New(pool, App(os.Getenv(childAppEnv)), Logger(log),
		RetryInterval(procRetry), CheckInterval(50*time.Millisecond), SessionTimeout(procSession),
		Add(Schedule{Name: "last", Spec: Every(procInterval), Job: byJob("t", by), Missed: RunLast}),
		Add(Schedule{Name: "skip", Spec: Every(procInterval), Job: byJob("t", by), Missed: Skip}))
	if err != nil {
		log.Error("child: New", slog.Any("err", err))
		return 1
	}
	if err := s.Run(ctx); err != nil {
		log.Error("child: Run", slog.Any("err", err))
		return 1
	}
	return 0
}

// logBuffer collects a child's output; the exec package copies into it
// from a goroutine of its own.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// child is one scheduler process, one incarnation of a slot.
type child struct {
	by   string
	cmd  *exec.Cmd
	logs *logBuffer
	done chan struct{} // closed when reaped; err is set then
	err  error
}

// startChild starts a scheduler process named by on the test's schema.
// It is reaped by kill or term, or, whatever happens to the test, by a
// cleanup that kills it first.
func startChild(t *testing.T, url, app, by string) *child {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	c := &child{by: by, logs: &logBuffer{}, done: make(chan struct{})}
	c.cmd = exec.Command(exe)
	c.cmd.Env = append(os.Environ(), childEnv+"=1", childURLEnv+"="+url, childAppEnv+"="+app, childByEnv+"="+by)
	c.cmd.Stdout, c.cmd.Stderr = c.logs, c.logs
	c.cmd.SysProcAttr = childAttr()
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		c.err = c.cmd.Wait()
		close(c.done)
	}()
	t.Cleanup(func() {
		select {
		case <-c.done:
		default:
			_ = c.cmd.Process.Kill()
			<-c.done
		}
		if t.Failed() {
			t.Logf("process %s (%v):\n%s", c.by, c.err, c.logs)
		}
	})
	return c
}

// kill sends SIGKILL and reaps the process.
func (c *child) kill(t *testing.T) {
	t.Helper()
	if err := c.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("kill %s: %v", c.by, err)
	}
	<-c.done // a SIGKILLed process exits at once
}

// term sends SIGTERM and waits, up to waitTimeout, for a clean exit.
func (c *child) term(t *testing.T) {
	t.Helper()
	if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM %s: %v", c.by, err)
	}
	select {
	case <-c.done:
		if c.err != nil {
			t.Errorf("process %s: %v", c.by, c.err)
		}
	case <-time.After(waitTimeout):
		t.Errorf("process %s: still running %v after SIGTERM", c.by, waitTimeout)
	}
}

// signal sends sig (SIGSTOP, SIGCONT) to the process.
func (c *child) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := c.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("%v %s: %v", sig, c.by, err)
	}
}

// msgSessionEnded starts the line a scheduler logs when Postgres ended
// its session after SessionTimeout.
const msgSessionEnded = "scheduler: Postgres ended the lock's session after SessionTimeout"

// activeAt returns the times the process logged that it became the
// active scheduler.
func (c *child) activeAt(t *testing.T) []time.Time {
	return c.logged(t, "scheduler: active")
}

// logged returns the times of the process's log lines whose message
// starts with msg.
func (c *child) logged(t *testing.T, msg string) []time.Time {
	t.Helper()
	var out []time.Time
	sc := bufio.NewScanner(strings.NewReader(c.logs.String()))
	for sc.Scan() {
		var line struct {
			Time time.Time `json:"time"`
			Msg  string    `json:"msg"`
		}
		if json.Unmarshal(sc.Bytes(), &line) == nil && strings.HasPrefix(line.Msg, msg) {
			out = append(out, line.Time)
		}
	}
	return out
}

// procRow is one firing in the outbox, with the start of the
// transaction that enqueued it (created_at, now()).
type procRow struct {
	at, created time.Time
	by          string
}

// procRows returns the firings of schedule, in firing order, and fails t
// when one firing or one job ID is in the outbox twice.
func (b *bundle) procRows(t *testing.T, schedule string) []procRow {
	t.Helper()
	var rows, keys, ids int
	err := b.pool.QueryRow(t.Context(), "SELECT count(*), count(DISTINCT unique_key), count(DISTINCT job_id) FROM "+pgoutbox.Table+
		" WHERE unique_key LIKE $1", "shareq/scheduler/"+b.app+"/"+schedule+"/%").Scan(&rows, &keys, &ids)
	if err != nil {
		t.Fatal(err)
	}
	if rows != keys || rows != ids {
		t.Errorf("schedule %s: %d rows, %d unique keys, %d job IDs: firings enqueued twice", schedule, rows, keys, ids)
	}
	rs, err := b.pool.Query(t.Context(), "SELECT value, created_at FROM "+pgoutbox.Table+" WHERE unique_key LIKE $1 ORDER BY due_at",
		"shareq/scheduler/"+b.app+"/"+schedule+"/%")
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	var out []procRow
	for rs.Next() {
		var v []byte
		var r procRow
		if err := rs.Scan(&v, &r.created); err != nil {
			t.Fatal(err)
		}
		var fv firingValue
		if err := json.Unmarshal(v, &fv); err != nil {
			t.Fatal(err)
		}
		r.at, r.by = fv.At, fv.By
		out = append(out, r)
	}
	if err := rs.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// latest returns the latest firing of schedule in the outbox.
func (b *bundle) latest(t *testing.T, schedule string) (procRow, bool) {
	t.Helper()
	var v []byte
	var r procRow
	err := b.pool.QueryRow(t.Context(), "SELECT value, created_at FROM "+pgoutbox.Table+" WHERE unique_key LIKE $1 ORDER BY due_at DESC LIMIT 1",
		"shareq/scheduler/"+b.app+"/"+schedule+"/%").Scan(&v, &r.created)
	if err != nil {
		return procRow{}, false
	}
	var fv firingValue
	if err := json.Unmarshal(v, &fv); err != nil {
		t.Fatal(err)
	}
	r.at, r.by = fv.At, fv.By
	return r, true
}

// waitUntil polls cond until it holds, or fails t at deadline.
func waitUntil(t *testing.T, deadline time.Time, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond) // polling a condition, not synchronising
	}
}

// procKill is one fault of the active scheduler: a SIGKILL, or a SIGSTOP
// and, once another process has fired, a SIGCONT.
type procKill struct {
	by     string    // the process killed or frozen
	at     time.Time // just before the signal
	frozen bool      // SIGSTOP, not SIGKILL
	woke   time.Time // the SIGCONT
}

func (k procKill) String() string {
	what := "killed"
	if k.frozen {
		what = "frozen"
	}
	return k.by + " " + what + " at " + k.at.Format(time.StampMicro)
}

// Three scheduler processes (the test binary re-executed), two schedules
// at 100 ms (RunLast and Skip); the active one is SIGKILLed at points
// during the run, and restarted as a new process, or, every third fault
// from the second, frozen: SIGSTOP, and SIGCONT once another process has
// fired, which takes SessionTimeout (procSession) plus up to the
// followers' RetryInterval. The woken process must find its session
// ended and go back to trying for the lock (msgSessionEnded), a
// follower; it is not restarted. At the end, from the outbox: every
// firing once; each process's firings contiguous; no firing by a
// faulted process after its fault, nor a handover without a fault (a
// woken process that fired again would be one); and across each fault,
// the firings missed while no scheduler was active are what the
// schedule's policy says (RunLast: all but the last one due by the
// takeover; Skip: all due by the takeover). 12 s with a kill and a
// freeze in make test; SHAREQ_SCHEDULER_SOAK=3m (make scheduler-soak)
// for the long run, a fault every 15 s.
//
// Without SessionTimeout (before it existed) the first freeze failed the
// test: the frozen process's session, its socket open, held the lock,
// and no process fired for the waitTimeout of 60 s.
func TestKilledAndFrozenSchedulerProcesses(t *testing.T) {
	dur, kills := procShort, procShortKills
	if v := os.Getenv(soakEnv); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < procShort {
			t.Fatalf("%s=%q: want a duration of at least %v", soakEnv, v, procShort)
		}
		dur, kills = d, max(procShortKills, int(d/soakKillEvery)-1)
	} else {
		t.Parallel()
	}
	b := setup(t)
	url := pgtest.SchemaURL(t, b.schema)
	incarnation := 0
	children := map[string]*child{}
	slots := map[string]int{}
	running := make([]*child, 3)
	start := func(slot int) {
		incarnation++
		by := fmt.Sprintf("p%d.%d", slot, incarnation)
		c := startChild(t, url, b.app, by)
		children[by], slots[by], running[slot] = c, slot, c
	}
	for slot := range running {
		start(slot)
	}
	t0 := time.Now()
	waitUntil(t, t0.Add(waitTimeout), "a first firing", func() bool { _, ok := b.latest(t, "last"); return ok })
	segment := dur / time.Duration(kills+1)
	var killed []procKill
	// missedSome: a handover missed a firing, so that the policies were
	// put to work. A handover within one interval misses none; when the
	// planned kills all were, up to procExtraKills more follow.
	missedSome := false
	for k := 0; k < kills || !missedSome && k < kills+procExtraKills; k++ {
		// Kill once the active scheduler has fired through the target,
		// at a random point of the RetryInterval after it: of the
		// followers' tries for the lock, and of the firings' interval.
		target := t0.Add(segment * time.Duration(k+1)).Truncate(procInterval)
		waitUntil(t, target.Add(waitTimeout), "the firing at the kill's target", func() bool {
			r, _ := b.latest(t, "last")
			return !r.at.Before(target)
		})
		phase := rand.N(procRetry)
		waitUntil(t, target.Add(waitTimeout), "the kill's moment", func() bool { return time.Now().After(target.Add(phase)) })
		leader, _ := b.latest(t, "last")
		c := children[leader.by]
		kill := procKill{by: leader.by, at: time.Now(), frozen: k%procFreezeEvery == 1}
		ended := len(c.logged(t, msgSessionEnded))
		if kill.frozen {
			c.signal(t, syscall.SIGSTOP)
		} else {
			c.kill(t)
		}
		// On the Skip schedule: the RunLast one's catch-up comes first,
		// alone; and RunLast fills a gap of one firing.
		waitUntil(t, kill.at.Add(waitTimeout), "a firing by another process", func() bool {
			r, _ := b.latest(t, "skip")
			return r.by != kill.by
		})
		if kill.frozen {
			// Woken once another fired: its firings due meanwhile, and
			// those the other fired, fail with its session. It is a
			// follower now, and stays in its slot.
			kill.woke = time.Now()
			c.signal(t, syscall.SIGCONT)
			waitUntil(t, kill.woke.Add(waitTimeout), "the woken process to find its session ended", func() bool {
				return len(c.logged(t, msgSessionEnded)) > ended
			})
		} else {
			// Restarted once another took over: the handover is a
			// follower's, on its RetryInterval (a process just
			// started tries for the lock at once, and would often
			// take over within one interval).
			start(slots[kill.by])
		}
		killed = append(killed, kill)
		rows := b.procRows(t, "skip")
		i := slices.IndexFunc(rows, func(r procRow) bool { return r.by != kill.by && r.at.After(kill.at.Add(-time.Second)) })
		if i > 0 && rows[i].at.Sub(rows[i-1].at) > procInterval {
			missedSome = true
		}
	}
	if !missedSome {
		t.Logf("no handover of %d missed a firing: the policies were not put to work", len(killed))
	}
	end := t0.Add(max(dur, segment*time.Duration(len(killed)+1)))
	waitUntil(t, end.Add(waitTimeout), "the end of the run", func() bool {
		r, _ := b.latest(t, "last")
		return r.at.After(end)
	})
	// The followers first, then the active one, so that no handover
	// follows the run.
	leader, _ := b.latest(t, "last")
	for _, c := range running {
		if c.by != leader.by {
			c.term(t)
		}
	}
	children[leader.by].term(t)
	if t.Failed() {
		return
	}

	var gaps []time.Duration // kill to the next process's takeover
	// freezes: SIGSTOP to the next process's takeover, and to its first
	// firing (the start of its transaction, created_at).
	var freezes, freezeFired []time.Duration
	for _, schedule := range []string{"last", "skip"} {
		policy := map[string]Missed{"last": RunLast, "skip": Skip}[schedule]
		rows := b.procRows(t, schedule)
		missed := 0
		k := 0
		for i := 1; i < len(rows); i++ {
			prev, r := rows[i-1], rows[i]
			if r.by == prev.by {
				if want := procInterval; r.at.Sub(prev.at) != want {
					t.Errorf("%s: process %s fired %v then %v: not contiguous", schedule, r.by, prev.at, r.at)
				}
				continue
			}
			// A handover: the k-th kill, from the killed process to a
			// new active one.
			if k == len(killed) || prev.by != killed[k].by {
				t.Errorf("%s: firings by %s then %s at %v, no fault of %s there (faults %v)", schedule, prev.by, r.by, r.at, prev.by, killed)
				break
			}
			kill := killed[k]
			k++
			if !prev.at.Before(kill.at) {
				t.Errorf("%s: process %s fired %v, not before its fault at %v", schedule, prev.by, prev.at, kill.at)
			}
			// The takeover: the last time the new process logged it
			// became the active one before its first firing.
			var took time.Time
			for _, at := range children[r.by].activeAt(t) {
				if !at.After(r.created) {
					took = at
				}
			}
			if took.IsZero() || took.Before(kill.at) {
				t.Errorf("%s: process %s took over at %v, first firing %v at %v; kill at %v", schedule, r.by, took, r.at, r.created, kill.at)
				continue
			}
			gap := int(r.at.Sub(prev.at)/procInterval) - 1 // firings between them, none enqueued
			missed += gap
			if schedule == "last" && kill.frozen {
				freezes = append(freezes, took.Sub(kill.at))
				freezeFired = append(freezeFired, r.created.Sub(kill.at))
			} else if schedule == "last" {
				gaps = append(gaps, took.Sub(kill.at))
			}
			// Postgres ended the frozen one's session SessionTimeout
			// after its last statement, which was no earlier than the
			// start of its last firing's transaction.
			if kill.frozen && took.Before(prev.created.Add(procSession)) {
				t.Errorf("%s: process %s took over at %v, within SessionTimeout %v of the last firing (at %v) of %s",
					schedule, r.by, took, procSession, prev.created, kill)
			}
			switch {
			case gap == 0:
				// The new process fired the one after the last firing
				// of the killed one: nothing was missed.
			case policy == RunLast:
				// The last firing due by the takeover, at once.
				if r.at.After(took) || !r.at.Add(procInterval).After(kill.at) {
					t.Errorf("RunLast: after the kill at %v and the takeover at %v, first firing %v: want the last one due by the takeover",
						kill.at, took, r.at)
				}
			case policy == Skip:
				// The first firing due after the takeover.
				if !r.at.After(kill.at) || r.at.After(took.Add(procInterval)) {
					t.Errorf("Skip: after the kill at %v and the takeover at %v, first firing %v: want the first one due after the takeover",
						kill.at, took, r.at)
				}
			}
		}
		if k != len(killed) {
			t.Errorf("%s: %d handovers, want one per kill (%d)", schedule, k, len(killed))
		}
		if len(rows) == 0 || !rows[0].at.Before(killed[0].at) || !rows[len(rows)-1].at.After(end) {
			t.Fatalf("%s: %d firings, want some from before the first kill to the end %v", schedule, len(rows), end)
		}
		t.Logf("%s (%s): %d firings from %v to %v, %d kills and %d freezes, 0 duplicates, %d missed in the handovers",
			schedule, policy, len(rows), rows[0].at.Format(time.TimeOnly), rows[len(rows)-1].at.Format(time.TimeOnly),
			len(killed)-len(freezes), len(freezes), missed)
	}
	spread := func(ds []time.Duration) string {
		slices.Sort(ds)
		return fmt.Sprintf("min %v, p50 %v, max %v", ds[0].Round(time.Millisecond), ds[len(ds)/2].Round(time.Millisecond), ds[len(ds)-1].Round(time.Millisecond))
	}
	if len(gaps) > 0 {
		t.Logf("handover gap, SIGKILL to the next process's takeover: %s (%d kills)", spread(gaps), len(gaps))
	}
	if len(freezes) > 0 {
		t.Logf("handover gap, SIGSTOP to the next process's takeover: %s; to its first firing: %s (%d freezes, SessionTimeout %v, RetryInterval %v)",
			spread(freezes), spread(freezeFired), len(freezes), procSession, procRetry)
	}
}
