package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shareq/shareq/enqueue"
	"github.com/shareq/shareq/enqueue/pgoutbox"
	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/internal/cutproxy"
	"github.com/shareq/shareq/internal/kafkatest"
	"github.com/shareq/shareq/migrations"
	"github.com/shareq/shareq/migrations/pgtest"
)

// waitTimeout bounds every wait on a condition: generous, for a loaded
// CI box.
const waitTimeout = 60 * time.Second

// bundle is a migrated schema and an app name of the test's own (the
// advisory lock is global to the database, the schema is not).
type bundle struct {
	pool   *pgxpool.Pool
	schema string
	app    string
}

func setup(t *testing.T) *bundle {
	t.Helper()
	pool, schema := pgtest.NewPool(t, 8)
	if err := migrations.Up(t.Context(), pool); err != nil {
		t.Fatal(err)
	}
	return &bundle{pool: pool, schema: schema, app: "test-" + schema}
}

// proxiedPool returns a pool on b's schema whose connections go through
// a proxy the test cuts.
func (b *bundle) proxiedPool(t *testing.T) (*pgxpool.Pool, *cutproxy.Proxy) {
	t.Helper()
	u, err := url.Parse(pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	px := cutproxy.New(t, u.Host, false)
	cfg, err := pgxpool.ParseConfig(pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	host, port, _ := strings.Cut(px.Addr(), ":")
	cfg.ConnConfig.Host = host
	fmt.Sscan(port, &cfg.ConnConfig.Port)
	cfg.ConnConfig.RuntimeParams["search_path"] = b.schema
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool, px
}

// testOptions keep failovers and checks short.
func (b *bundle) options(opts ...Option) []Option {
	return append([]Option{App(b.app), Logger(slog.New(slog.DiscardHandler)), RetryInterval(50 * time.Millisecond), CheckInterval(50 * time.Millisecond)}, opts...)
}

// start runs s until t ends (or stop is called), and fails t if Run
// returns an error.
func start(t *testing.T, s *Scheduler) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// waitFor polls cond until it holds, or fails t after waitTimeout.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond) // polling a condition, not synchronising
	}
}

// row is one firing in the outbox.
type row struct {
	schedule string
	at       time.Time
	by       string
	jobID    string
}

type firingValue struct {
	By string    `json:"by"`
	At time.Time `json:"at"`
}

// byJob returns a schedule's Job func recording who fired it.
func byJob(topic, by string) func(context.Context, time.Time) (enqueue.Job, error) {
	return func(_ context.Context, at time.Time) (enqueue.Job, error) {
		return enqueue.NewJob(topic, firingValue{By: by, At: at}), nil
	}
}

// rows returns the outbox rows of the firings, and fails t when one
// firing is in it twice.
func (b *bundle) rows(t *testing.T) []row {
	t.Helper()
	rs, err := b.pool.Query(t.Context(), "SELECT unique_key, value, job_id FROM "+pgoutbox.Table+" ORDER BY due_at, id")
	if err != nil {
		t.Fatal(err)
	}
	var out []row
	seen := map[string]bool{}
	for rs.Next() {
		var key, id string
		var v []byte
		if err := rs.Scan(&key, &v, &id); err != nil {
			t.Fatal(err)
		}
		if seen[key] {
			t.Errorf("firing %s enqueued twice", key)
		}
		seen[key] = true
		rest, ok := strings.CutPrefix(key, "shareq/scheduler/"+b.app+"/")
		if !ok {
			t.Fatalf("unique key %q: not the app's", key)
		}
		name, ts, _ := strings.Cut(rest, "/")
		at, err := time.Parse(time.RFC3339Nano, ts)
		if err != nil {
			t.Fatal(err)
		}
		var fv firingValue
		_ = json.Unmarshal(v, &fv)
		if want := b.app + "/" + name + "/" + ts; id != want {
			t.Errorf("firing %s: job ID %q, want %q", key, id, want)
		}
		out = append(out, row{schedule: name, at: at, by: fv.By, jobID: id})
	}
	if err := rs.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func (b *bundle) count(t *testing.T, schedule string) int {
	t.Helper()
	var n int
	if err := b.pool.QueryRow(t.Context(), "SELECT count(*) FROM "+pgoutbox.Table+" WHERE unique_key LIKE $1", "shareq/scheduler/"+b.app+"/"+schedule+"/%").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	pool, err := pgxpool.New(t.Context(), "postgres://127.0.0.1:1/none")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	ok := Schedule{Name: "a", Spec: Every(time.Second), Topic: "t", Value: 1}
	jobFunc := func(context.Context, time.Time) (enqueue.Job, error) { return enqueue.Job{}, nil }
	for _, tc := range []struct {
		name string
		pool *pgxpool.Pool
		opts []Option
		want string
	}{
		{"nil pool", nil, []Option{Add(ok)}, "nil pool"},
		{"no schedules", pool, nil, "no schedules"},
		{"empty app", pool, []Option{Add(ok), App("")}, "empty App"},
		{"zero retry", pool, []Option{Add(ok), RetryInterval(0)}, "want them positive"},
		{"negative check", pool, []Option{Add(ok), CheckInterval(-1)}, "want them positive"},
		{"zero fire timeout", pool, []Option{Add(ok), FireTimeout(0)}, "want them positive"},
		{"session timeout under twice the check", pool, []Option{Add(ok), CheckInterval(time.Second), SessionTimeout(1999 * time.Millisecond)}, "at least twice CheckInterval"},
		{"sub-millisecond session timeout", pool, []Option{Add(ok), SessionTimeout(20*time.Second + time.Microsecond)}, "whole milliseconds"},
		{"two names", pool, []Option{Add(ok, ok)}, `two schedules named "a"`},
		{"empty name", pool, []Option{Add(Schedule{Spec: Every(time.Second), Topic: "t"})}, "empty name"},
		{"nil spec", pool, []Option{Add(Schedule{Name: "a", Topic: "t"})}, "nil Spec"},
		{"no job", pool, []Option{Add(Schedule{Name: "a", Spec: Every(time.Second)})}, "neither Topic nor Job"},
		{"both", pool, []Option{Add(Schedule{Name: "a", Spec: Every(time.Second), Topic: "t", Job: jobFunc})}, "give one way"},
		{"short interval", pool, []Option{Add(Schedule{Name: "a", Spec: Every(time.Microsecond), Topic: "t"})}, "at least 1ms"},
		{"sub-microsecond", pool, []Option{Add(Schedule{Name: "a", Spec: Every(time.Second + 1), Topic: "t"})}, "whole microseconds"},
		{"policy", pool, []Option{Add(Schedule{Name: "a", Spec: Every(time.Second), Topic: "t", Missed: 7})}, "unknown Missed(7)"},
	} {
		if _, err := New(tc.pool, tc.opts...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: New = %v, want an error with %q", tc.name, err, tc.want)
		}
	}
	if _, err := New(pool, Add(ok), nil); err != nil {
		t.Errorf("valid options: %v", err)
	}
}

// Upcoming lists the next firings of each schedule in time order, from
// a time the test gives.
func TestUpcoming(t *testing.T) {
	t.Parallel()
	pool, err := pgxpool.New(t.Context(), "postgres://127.0.0.1:1/none")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	s, err := New(pool,
		Add(Schedule{Name: "nightly", Spec: MustParseCron("0 3 * * *"), Topic: "t"}),
		Add(Schedule{Name: "hourly", Spec: Every(time.Hour), Topic: "t"}))
	if err != nil {
		t.Fatal(err)
	}
	from := time.Date(2026, 1, 1, 1, 30, 0, 0, time.UTC)
	got := s.Upcoming(from, 2)
	want := []Firing{
		{"hourly", time.Date(2026, 1, 1, 2, 0, 0, 0, time.UTC)},
		{"hourly", time.Date(2026, 1, 1, 3, 0, 0, 0, time.UTC)},
		{"nightly", time.Date(2026, 1, 1, 3, 0, 0, 0, time.UTC)},
		{"nightly", time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)},
	}
	if len(got) != len(want) {
		t.Fatalf("Upcoming = %v, want %v", got, want)
	}
	for i := range want {
		if got[i].Schedule != want[i].Schedule || !got[i].At.Equal(want[i].At) {
			t.Errorf("Upcoming[%d] = %v, want %v", i, got[i], want[i])
		}
	}
}

func TestRunChecksTables(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewPool(t, 2)
	s, err := New(pool, Add(Schedule{Name: "a", Spec: Every(time.Second), Topic: "t"}))
	if err != nil {
		t.Fatal(err)
	}
	err = s.Run(t.Context())
	if err == nil || !strings.Contains(err.Error(), "run the migrations") {
		t.Fatalf("Run without the tables = %v, want an error saying to run the migrations", err)
	}
}

// Two schedulers holding the lock for a moment (simulated: two
// connections fire one firing): the outbox's unique key lets one in.
func TestFiringIsUnique(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s, err := New(b.pool, b.options(Add(Schedule{Name: "a", Spec: Every(time.Hour), Topic: "t", Value: 1}))...)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 1, 1, 3, 0, 0, 0, time.UTC)
	for range 2 {
		pc, err := b.pool.Acquire(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if err := s.fire(t.Context(), pc.Conn(), []Firing{{"a", at}}); err != nil {
			t.Fatal(err)
		}
		pc.Release()
	}
	rows := b.rows(t)
	if len(rows) != 1 || !rows[0].at.Equal(at) {
		t.Fatalf("rows = %v, want the one firing at %v", rows, at)
	}
	var last time.Time
	if err := b.pool.QueryRow(t.Context(), "SELECT last_firing FROM "+StateTable+" WHERE app = $1 AND schedule = 'a'", b.app).Scan(&last); err != nil || !last.Equal(at) {
		t.Fatalf("state: %v, %v; want %v", last, err, at)
	}
	// An earlier firing does not move the state back.
	pc, err := b.pool.Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Release()
	if err := s.fire(t.Context(), pc.Conn(), []Firing{{"a", at.Add(-time.Hour)}}); err != nil {
		t.Fatal(err)
	}
	if err := b.pool.QueryRow(t.Context(), "SELECT last_firing FROM "+StateTable+" WHERE app = $1 AND schedule = 'a'", b.app).Scan(&last); err != nil || !last.Equal(at) {
		t.Fatalf("state after an earlier firing: %v, %v; want %v", last, err, at)
	}
}

// A job that cannot be built skips its firing and no other.
func TestFiringJobError(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s, err := New(b.pool, b.options(
		Add(Schedule{Name: "bad", Spec: Every(time.Hour), Job: func(context.Context, time.Time) (enqueue.Job, error) {
			return enqueue.Job{}, fmt.Errorf("no data")
		}}),
		Add(Schedule{Name: "unencodable", Spec: Every(time.Hour), Topic: "t", Value: func() {}}),
		Add(Schedule{Name: "good", Spec: Every(time.Hour), Topic: "t", Value: 1}))...)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 1, 1, 3, 0, 0, 0, time.UTC)
	if err := pgx.BeginFunc(t.Context(), b.pool, func(pgx.Tx) error { return nil }); err != nil {
		t.Fatal(err)
	}
	pc, err := b.pool.Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Release()
	if err := s.fire(t.Context(), pc.Conn(), []Firing{{"bad", at}, {"unencodable", at}, {"good", at}}); err != nil {
		t.Fatal(err)
	}
	if rows := b.rows(t); len(rows) != 1 || rows[0].schedule != "good" {
		t.Fatalf("rows = %v, want the good firing only", rows)
	}
}

// The active scheduler notices that its connection died, stops leading,
// and leads again once it can connect.
func TestLeadershipLostWithConnection(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pool, px := b.proxiedPool(t)
	s, err := New(pool, b.options(Add(Schedule{Name: "a", Spec: Every(time.Hour), Topic: "t", Value: 1}))...)
	if err != nil {
		t.Fatal(err)
	}
	start(t, s)
	waitFor(t, "leading", s.Leading)
	px.Cut()
	waitFor(t, "leadership lost", func() bool { return !s.Leading() })
	// Its session ended with the connection: another can take the lock.
	other, err := New(b.pool, b.options(Add(Schedule{Name: "a", Spec: Every(time.Hour), Topic: "t", Value: 1}))...)
	if err != nil {
		t.Fatal(err)
	}
	stopOther := start(t, other)
	waitFor(t, "the other leading", other.Leading)
	px.Restore()
	stopOther()
	waitFor(t, "leading again", s.Leading)
}

// A network to Postgres that goes silent under the active scheduler
// (the proxy holds every byte, nothing is closed: from Postgres, like a
// frozen process) holds its session open; Postgres ends it after
// SessionTimeout without a statement, which frees the lock: a follower
// takes over within SessionTimeout plus its RetryInterval, and the
// silenced one, its check bounded by SessionTimeout too, stops leading.
// When the network comes back it finds its session gone and follows,
// and leads again once the other stops. Without the bound the follower
// never took over (the test timed out after waitTimeout).
func TestSilentLeaderLosesLockAfterSessionTimeout(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const timeout = 500 * time.Millisecond
	sched := Add(Schedule{Name: "a", Spec: Every(time.Hour), Topic: "t", Value: 1})
	pool, px := b.proxiedPool(t)
	s, err := New(pool, b.options(sched, SessionTimeout(timeout), FireTimeout(2*time.Second))...)
	if err != nil {
		t.Fatal(err)
	}
	start(t, s)
	waitFor(t, "leading", s.Leading)
	// Its takeover's writes are through (else they would wait out
	// FireTimeout under the silence).
	waitFor(t, "its state row", func() bool {
		var n int
		err := b.pool.QueryRow(t.Context(), "SELECT count(*) FROM "+StateTable+" WHERE app = $1", b.app).Scan(&n)
		return err == nil && n == 1
	})
	other, err := New(b.pool, b.options(sched, SessionTimeout(timeout))...)
	if err != nil {
		t.Fatal(err)
	}
	stopOther := start(t, other)
	silenced := time.Now()
	px.Silence()
	waitFor(t, "the other leading", other.Leading)
	took := time.Since(silenced)
	// Postgres counts SessionTimeout from the silenced one's last
	// statement, a check at most CheckInterval (50 ms) before the silence
	// unless the machine stalled it: half of it is a bound that holds.
	if took < timeout/2 {
		t.Errorf("the other took over %v after the silence, well within SessionTimeout %v", took, timeout)
	}
	waitFor(t, "the silenced one to stop leading", func() bool { return !s.Leading() })
	t.Logf("silence to the follower's takeover: %v (SessionTimeout %v, RetryInterval 50ms)", took.Round(time.Millisecond), timeout)
	px.Resume()
	if st := other.Stats(); st.Elections != 1 {
		t.Errorf("the other's elections: %d, want 1", st.Elections)
	}
	stopOther()
	waitFor(t, "the silenced one leading again", s.Leading)
	if st := s.Stats(); st.Elections != 2 {
		t.Errorf("elections of the silenced one: %d, want 2", st.Elections)
	}
}

// failoverInterval is the interval of the failover tests' schedule.
const failoverInterval = 200 * time.Millisecond

// failover runs three schedulers of one schedule at failoverInterval, and
// kills the active one mid-run (its connection cut), then stops them all;
// it returns the killed one's number, the time of the cut, and the time
// another was seen leading.
func failover(t *testing.T, b *bundle, topic string) (killed int, cutAt, takenAt time.Time) {
	t.Helper()
	type instance struct {
		s    *Scheduler
		px   *cutproxy.Proxy
		stop func()
	}
	var ins []instance
	for i := range 3 {
		pool, px := b.proxiedPool(t)
		s, err := New(pool, b.options(Add(Schedule{Name: "tick", Spec: Every(failoverInterval), Job: byJob(topic, fmt.Sprint(i)), Missed: RunLast}))...)
		if err != nil {
			t.Fatal(err)
		}
		ins = append(ins, instance{s, px, start(t, s)})
	}
	// leader returns the one scheduler that believes it leads, besides
	// skip (the killed one, which learns that it lost the lock only at
	// its next check or firing: the database, not this belief, keeps it
	// from firing), or -1.
	leader := func(skip int) int {
		n, who := 0, -1
		for i, in := range ins {
			if i != skip && in.s.Leading() {
				n, who = n+1, i
			}
		}
		if n > 1 {
			t.Errorf("%d schedulers leading at once", n)
		}
		return who
	}
	// lastFiring is the latest firing committed, from the state row
	// (zero before the first: no row, or a row without a firing).
	lastFiring := func() time.Time {
		var at *time.Time
		err := b.pool.QueryRow(t.Context(), "SELECT last_firing FROM "+StateTable+" WHERE app = $1 AND schedule = 'tick'", b.app).Scan(&at)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			t.Fatal(err)
		}
		if at == nil {
			return time.Time{}
		}
		return *at
	}
	waitFor(t, "a leader", func() bool { return leader(-1) >= 0 })
	waitFor(t, "a firing", func() bool { return !lastFiring().IsZero() })
	first := lastFiring()
	waitFor(t, "10 firings", func() bool { return !lastFiring().Before(first.Add(10 * failoverInterval)) })
	killed = leader(-1)
	cutAt = time.Now()
	ins[killed].px.Cut()
	waitFor(t, "a new leader", func() bool { return leader(killed) >= 0 })
	takenAt = time.Now()
	waitFor(t, "the killed one to see it lost the lock", func() bool { return !ins[killed].s.Leading() })
	waitFor(t, "10 firings after the failover", func() bool { return !lastFiring().Before(takenAt.Add(10 * failoverInterval)) })
	for _, in := range ins {
		in.px.Restore() // for a clean stop
		in.stop()
	}
	return killed, cutAt, takenAt
}

// checkFailover checks the firings of a failover: each once (rows fails
// on a repeat), none by the killed scheduler after its cut, and none
// missing but those RunLast allows: missed while no scheduler was active,
// and not the last such one.
func checkFailover(t *testing.T, rows []row, killed int, cutAt, takenAt time.Time) {
	t.Helper()
	spec := Every(failoverInterval)
	slices.SortFunc(rows, func(a, b row) int { return a.at.Compare(b.at) })
	if len(rows) == 0 || !rows[0].at.Before(cutAt.Add(-5*failoverInterval)) || !rows[len(rows)-1].at.After(takenAt.Add(5*failoverInterval)) {
		t.Fatalf("%d firings, want some from well before the cut (%v) to well after the takeover (%v)", len(rows), cutAt, takenAt)
	}
	have := map[time.Time]bool{}
	for _, r := range rows {
		have[r.at] = true
		if r.by == fmt.Sprint(killed) && r.at.After(cutAt) {
			t.Errorf("firing %v enqueued by the killed scheduler after its cut at %v", r.at, cutAt)
		}
	}
	first, last := rows[0].at, rows[len(rows)-1].at
	missing := 0
	for at := first; !at.After(last); at = spec.Next(at) {
		if have[at] {
			continue
		}
		missing++
		if !at.After(cutAt.Add(-failoverInterval)) || spec.Next(at).After(takenAt) {
			t.Errorf("firing %v missing (cut at %v, taken over by %v)", at, cutAt.Format(time.StampMilli), takenAt.Format(time.StampMilli))
		}
	}
	t.Logf("%d firings from %v to %v, %d missed in the failover (cut at %v, new leader seen %v after)",
		len(rows), first.Format(time.StampMilli), last.Format(time.StampMilli), missing, cutAt.Format(time.StampMilli), takenAt.Sub(cutAt))
}

// Three schedulers at a 200 ms interval, the active one killed (its
// connection cut) mid-run: every firing is in the outbox once.
func TestFailover(t *testing.T) {
	t.Parallel()
	b := setup(t)
	killed, cutAt, takenAt := failover(t, b, "t")
	checkFailover(t, b.rows(t), killed, cutAt, takenAt)
}

// The same with a relay moving the firings to Kafka (kfake, or the
// broker of SHAREQ_TEST_BROKERS): every firing produced once.
func TestFailoverThroughRelay(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := kafkatest.New(t)
	topic := c.Topic(t, 3)
	relay, err := pgoutbox.NewRelay(b.pool, c.Client(t, enqueue.ProducerOpts()...),
		pgoutbox.PollInterval(200*time.Millisecond), pgoutbox.Logger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	stopRelay := kafkatest.Run(t, relay.Run)
	killed, cutAt, takenAt := failover(t, b, topic)
	waitFor(t, "the outbox empty", func() bool { return b.count(t, "tick") == 0 })
	if err := stopRelay(); err != nil {
		t.Fatalf("relay: %v", err)
	}
	n := int(relay.Stats().Produced)
	var rows []row
	seen := map[string]bool{}
	for _, r := range c.Consume(t, topic, n) {
		var id string
		for _, h := range r.Headers {
			if h.Key == handler.JobIDHeader {
				id = string(h.Value)
			}
		}
		if seen[id] {
			t.Errorf("job %s produced twice", id)
		}
		seen[id] = true
		var fv firingValue
		if err := json.Unmarshal(r.Value, &fv); err != nil {
			t.Fatal(err)
		}
		if want := b.app + "/tick/" + fv.At.UTC().Format(time.RFC3339Nano); id != want {
			t.Errorf("job ID %q, want %q", id, want)
		}
		rows = append(rows, row{schedule: "tick", at: fv.At, by: fv.By, jobID: id})
	}
	checkFailover(t, rows, killed, cutAt, takenAt)
}

// The missed-firing policies: a schedule whose state says it last fired
// an hour ago runs its last missed firing once (RunLast) or none
// (Skip); a schedule with no state has missed nothing.
func TestMissedFirings(t *testing.T) {
	t.Parallel()
	b := setup(t)
	before := time.Now()
	hourAgo := before.Add(-time.Hour).Truncate(time.Minute)
	for _, name := range []string{"skip", "last"} {
		if _, err := b.pool.Exec(t.Context(), "INSERT INTO "+StateTable+" (app, schedule, last_firing) VALUES ($1, $2, $3)", b.app, name, hourAgo); err != nil {
			t.Fatal(err)
		}
	}
	s, err := New(b.pool, b.options(
		Add(Schedule{Name: "skip", Spec: Every(time.Minute), Topic: "t", Value: 1, Missed: Skip}),
		Add(Schedule{Name: "last", Spec: Every(time.Minute), Topic: "t", Value: 1, Missed: RunLast}),
		Add(Schedule{Name: "new", Spec: Every(time.Minute), Topic: "t", Value: 1, Missed: RunLast}),
		// Fires soon after the start: once it has, the missed firings
		// were dealt with (that comes first).
		Add(Schedule{Name: "marker", Spec: Every(50 * time.Millisecond), Topic: "t", Value: 1}))...)
	if err != nil {
		t.Fatal(err)
	}
	stop := start(t, s)
	waitFor(t, "a marker firing", func() bool { return b.count(t, "marker") > 0 })
	stop()
	after := time.Now()
	var last []time.Time
	for _, r := range b.rows(t) {
		switch r.schedule {
		case "skip", "new":
			if !r.at.After(before) {
				t.Errorf("schedule %s: firing %v, due before the start (%v): a missed one", r.schedule, r.at, before)
			}
		case "last":
			if !r.at.After(before) {
				last = append(last, r.at)
			}
		}
	}
	if len(last) != 1 {
		t.Fatalf("RunLast: %d missed firings enqueued (%v), want 1", len(last), last)
	}
	if got := last[0]; got.Before(before.Truncate(time.Minute)) || got.After(after) || got.Truncate(time.Minute) != got {
		t.Errorf("RunLast enqueued %v, want the last whole minute before the start (%v)", got, before)
	}
}

// A stall of the active scheduler (its clock jumps an hour: a suspended
// machine) enqueues the firings that fell due, the latest maxDue of each
// schedule, once each.
func TestStall(t *testing.T) {
	t.Parallel()
	b := setup(t)
	spec := Every(time.Second)
	s, err := New(b.pool, b.options(Add(Schedule{Name: "tick", Spec: spec, Topic: "t", Value: 1}))...)
	if err != nil {
		t.Fatal(err)
	}
	base := time.Now().Truncate(time.Second).Add(100 * time.Millisecond)
	var clock atomic.Int64
	clock.Store(base.UnixNano())
	s.now = func() time.Time { return time.Unix(0, clock.Load()) }
	stop := start(t, s)
	waitFor(t, "leading", s.Leading)
	jumped := base.Add(time.Hour)
	clock.Store(jumped.UnixNano())
	waitFor(t, "the firings of the stall", func() bool { return b.count(t, "tick") >= maxDue })
	stop()
	rows := b.rows(t)
	if len(rows) != maxDue {
		t.Fatalf("%d firings enqueued, want %d", len(rows), maxDue)
	}
	want := jumped.Truncate(time.Second).Add(-time.Duration(maxDue-1) * time.Second)
	for i, r := range rows {
		if !r.at.Equal(want) {
			t.Fatalf("firing %d at %v, want %v (the latest %d)", i, r.at, want, maxDue)
		}
		want = spec.Next(want)
	}
}

// Run is for once; a second call fails without disturbing the first.
func TestRunTwice(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s, err := New(b.pool, b.options(Add(Schedule{Name: "a", Spec: Every(time.Hour), Topic: "t", Value: 1}))...)
	if err != nil {
		t.Fatal(err)
	}
	start(t, s)
	waitFor(t, "leading", s.Leading)
	if err := s.Run(t.Context()); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Fatalf("second Run = %v, want an error", err)
	}
	if !s.Leading() {
		t.Fatal("the first Run stopped leading")
	}
}

// A graceful stop ends the session, so another scheduler takes over at
// its next try, without waiting for a timeout.
func TestStopHandsOver(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sched := Schedule{Name: "a", Spec: Every(time.Hour), Topic: "t", Value: 1}
	first, err := New(b.pool, b.options(Add(sched))...)
	if err != nil {
		t.Fatal(err)
	}
	stopFirst := start(t, first)
	waitFor(t, "the first leading", first.Leading)
	second, err := New(b.pool, b.options(Add(sched))...)
	if err != nil {
		t.Fatal(err)
	}
	start(t, second)
	stopFirst()
	if first.Leading() {
		t.Fatal("stopped, and still leading")
	}
	waitFor(t, "the second leading", second.Leading)
}

// The missed-firing policies across a failover with a gap: the active
// scheduler dies, none runs for several firings, then another starts.
// RunLast enqueues the last firing of the gap, Skip none of them; the
// firings before the gap and after the start are all there.
func TestFailoverGap(t *testing.T) {
	t.Parallel()
	for _, policy := range []Missed{RunLast, Skip} {
		t.Run(policy.String(), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			spec := Every(failoverInterval)
			sched := func(by string) Option {
				return Add(Schedule{Name: "tick", Spec: spec, Job: byJob("t", by), Missed: policy})
			}
			pool, px := b.proxiedPool(t)
			first, err := New(pool, b.options(sched("first"))...)
			if err != nil {
				t.Fatal(err)
			}
			stopFirst := start(t, first)
			waitFor(t, "3 firings", func() bool { return b.count(t, "tick") >= 3 })
			px.Cut()
			cutAt := time.Now()
			waitFor(t, "the first to see it lost the lock", func() bool { return !first.Leading() })
			// The gap itself: five firings' time with no scheduler.
			waitFor(t, "a gap of 5 firings", func() bool { return time.Since(cutAt) > 5*failoverInterval })
			startAt := time.Now()
			second, err := New(b.pool, b.options(sched("second"))...)
			if err != nil {
				t.Fatal(err)
			}
			stopSecond := start(t, second)
			waitFor(t, "the second leading", second.Leading)
			ledAt := time.Now()
			waitFor(t, "3 firings after the start", func() bool {
				for _, r := range b.rows(t) {
					if r.at.After(ledAt.Add(2 * failoverInterval)) {
						return true
					}
				}
				return false
			})
			stopSecond()
			px.Restore()
			stopFirst()

			rows := b.rows(t)
			var lastFirst time.Time
			var bySecond []time.Time
			for _, r := range rows {
				switch r.by {
				case "first":
					if r.at.After(cutAt) {
						t.Errorf("first fired %v after its cut at %v", r.at, cutAt)
					}
					lastFirst = r.at
				case "second":
					bySecond = append(bySecond, r.at)
				}
			}
			if lastFirst.IsZero() || len(bySecond) == 0 {
				t.Fatalf("firings: first's last %v, second's %v", lastFirst, bySecond)
			}
			// The second's first firing: the gap's last (RunLast), or
			// the first due after it started (Skip).
			got := bySecond[0]
			switch policy {
			case RunLast:
				// The last due by the moment it took over, between its
				// start and its being seen leading.
				if !spec.Next(got).After(startAt) || got.After(ledAt) {
					t.Errorf("RunLast: first firing of the second %v, want the last one due by its start (%v to %v)", got, startAt.Format(time.StampMilli), ledAt.Format(time.StampMilli))
				}
				if !got.After(spec.Next(lastFirst)) {
					t.Errorf("RunLast: the gap (%v to %v) is not a gap", lastFirst, got)
				}
			case Skip:
				if !got.After(startAt) || got.After(ledAt.Add(failoverInterval)) {
					t.Errorf("Skip: first firing of the second %v, want the first due after its start (%v to %v)", got, startAt.Format(time.StampMilli), ledAt.Format(time.StampMilli))
				}
			}
			// Contiguous before the gap and from the second's first on.
			for i := 1; i < len(bySecond); i++ {
				if want := spec.Next(bySecond[i-1]); !bySecond[i].Equal(want) {
					t.Errorf("second: firing %v after %v, want %v", bySecond[i], bySecond[i-1], want)
				}
			}
			prev := time.Time{}
			for _, r := range rows {
				if r.by != "first" {
					continue
				}
				if !prev.IsZero() && !r.at.Equal(spec.Next(prev)) {
					t.Errorf("first: firing %v after %v", r.at, prev)
				}
				prev = r.at
			}
			t.Logf("%s: first's last firing %v, cut %v, second started %v, its first firing %v",
				policy, lastFirst.Format(time.StampMilli), cutAt.Format(time.StampMilli), startAt.Format(time.StampMilli), got.Format(time.StampMilli))
		})
	}
}
