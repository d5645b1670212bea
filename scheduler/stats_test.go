package scheduler

import (
	"context"
	"testing"
	"time"

	"github.com/shareq/shareq/enqueue"
)

// stateRow is a schedule's row of the state table.
type stateRow struct {
	last, next *time.Time
	spec       *string
	leader     *string
}

func (b *bundle) state(t *testing.T, schedule string) stateRow {
	t.Helper()
	var r stateRow
	err := b.pool.QueryRow(t.Context(), "SELECT last_firing, next_firing, spec, leader FROM "+StateTable+" WHERE app = $1 AND schedule = $2",
		b.app, schedule).Scan(&r.last, &r.next, &r.spec, &r.leader)
	if err != nil {
		t.Fatalf("state of %s: %v", schedule, err)
	}
	return r
}

// The active scheduler counts its firings and how late it enqueued them,
// knows each schedule's next firing while it leads, and records spec,
// next firing and leader in the state table, also of a schedule that has
// not fired yet.
func TestStats(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tick := Every(100 * time.Millisecond)
	hourly := MustParseCron("0 * * * *")
	s, err := New(b.pool, b.options(
		Add(Schedule{Name: "tick", Spec: tick, Topic: "t", Value: 1}),
		Add(Schedule{Name: "hourly", Spec: hourly, Topic: "t", Value: 1}))...)
	if err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.App != b.app || st.Leading || st.Elections != 0 || len(st.Schedules) != 2 || st.Schedules[0].Name != "tick" || st.Schedules[1].Name != "hourly" {
		t.Fatalf("Stats before Run = %+v", st)
	}
	started := time.Now()
	stop := start(t, s)
	waitFor(t, "three firings", func() bool { return s.Stats().Schedules[0].Enqueued >= 3 })
	st := s.Stats()
	if !st.Leading || st.Elections != 1 || st.Errors != 0 {
		t.Fatalf("Stats while leading = %+v, want leading, one election, no errors", st)
	}
	tk, hr := st.Schedules[0], st.Schedules[1]
	if tk.EnqueueDelayCount != tk.Enqueued || tk.EnqueueDelay <= 0 || tk.Duplicates != 0 || tk.Skipped != 0 {
		t.Fatalf("tick = %+v, want a delay per enqueued firing and no duplicates", tk)
	}
	if tk.LastFiring.Before(started) || !tk.NextFiring.After(tk.LastFiring) {
		t.Fatalf("tick: last %v, next %v", tk.LastFiring, tk.NextFiring)
	}
	if want := hourly.Next(started); !hr.NextFiring.Equal(want) && !hr.NextFiring.Equal(hourly.Next(want)) || hr.Enqueued != 0 || !hr.LastFiring.IsZero() {
		t.Fatalf("hourly = %+v, want next %v and nothing fired", hr, want)
	}

	r := b.state(t, "hourly")
	if r.last != nil || r.next == nil || !r.next.Equal(hr.NextFiring) || *r.spec != "0 * * * *" || *r.leader != s.leader {
		t.Fatalf("hourly's state row: last %v, next %v, spec %v, leader %v; want no firing, next %v, its spec, leader %s",
			r.last, r.next, r.spec, r.leader, hr.NextFiring, s.leader)
	}
	stop()
	r = b.state(t, "tick")
	st = s.Stats()
	tk = st.Schedules[0]
	if r.last == nil || !r.last.Equal(tk.LastFiring) || !r.next.Equal(tick.Next(tk.LastFiring)) || *r.spec != "every 100ms" || *r.leader != s.leader {
		t.Fatalf("tick's state row: last %v, next %v, spec %v, leader %v; want last %v", r.last, r.next, *r.spec, *r.leader, tk.LastFiring)
	}
	if b.count(t, "tick") != int(tk.Enqueued) {
		t.Fatalf("%d tick firings in the outbox, %d counted", b.count(t, "tick"), tk.Enqueued)
	}
	if st.Leading || !tk.NextFiring.IsZero() {
		t.Fatalf("after Run: leading %v, next firing %v; want neither", st.Leading, tk.NextFiring)
	}

	// Another scheduler of the app that fires the same firing again finds
	// it enqueued: a duplicate, no job, no delay.
	other, err := New(b.pool, b.options(Add(Schedule{Name: "tick", Spec: tick, Topic: "t", Value: 1}))...)
	if err != nil {
		t.Fatal(err)
	}
	fireOn(t, b, other, Firing{"tick", tk.LastFiring})
	if o := other.Stats().Schedules[0]; o.Duplicates != 1 || o.Enqueued != 0 || o.EnqueueDelayCount != 0 || !o.LastFiring.Equal(tk.LastFiring) {
		t.Fatalf("a repeated firing: %+v, want one duplicate", o)
	}
}

// fireOn fires firings through s on a connection of b's pool.
func fireOn(t *testing.T, b *bundle, s *Scheduler, firings ...Firing) {
	t.Helper()
	pc, err := b.pool.Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Release()
	if err := s.fire(t.Context(), pc.Conn(), firings); err != nil {
		t.Fatal(err)
	}
}

// Skipped firings count as such; a firing transaction that fails counts
// nothing.
func TestStatsSkippedAndRolledBack(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s, err := New(b.pool, b.options(
		Add(Schedule{Name: "bad", Spec: Every(time.Hour), Job: func(context.Context, time.Time) (enqueue.Job, error) {
			return enqueue.Job{}, context.DeadlineExceeded
		}}),
		Add(Schedule{Name: "good", Spec: Every(time.Hour), Topic: "t", Value: 1}))...)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 1, 1, 3, 0, 0, 0, time.UTC)
	fireOn(t, b, s, Firing{"bad", at}, Firing{"good", at})
	st := s.Stats()
	if bad, good := st.Schedules[0], st.Schedules[1]; bad.Skipped != 1 || bad.Enqueued != 0 || !bad.LastFiring.IsZero() || good.Enqueued != 1 || !good.LastFiring.Equal(at) {
		t.Fatalf("Stats = %+v, want bad skipped once, good enqueued once", st)
	}
	// A firing whose transaction fails (here: the state table is gone)
	// is not counted.
	if _, err := b.pool.Exec(t.Context(), "DROP TABLE "+StateTable); err != nil {
		t.Fatal(err)
	}
	pc, err := b.pool.Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Release()
	if err := s.fire(t.Context(), pc.Conn(), []Firing{{"good", at.Add(time.Hour)}}); err == nil {
		t.Fatal("fire without the state table succeeded")
	}
	if good := s.Stats().Schedules[1]; good.Enqueued != 1 || !good.LastFiring.Equal(at) {
		t.Fatalf("after a failed firing: %+v, want it uncounted", good)
	}
}

func TestSpecText(t *testing.T) {
	t.Parallel()
	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		t.Skip(err)
	}
	for _, c := range []struct {
		spec Spec
		want string
	}{
		{Every(90 * time.Second), "every 1m30s"},
		{MustParseCron("0 3 * * *"), "0 3 * * *"},
		{MustParseCron("0 3 * * 1-5").In(paris), "0 3 * * 1-5 (Europe/Paris)"},
		{customSpec{}, "scheduler.customSpec"},
	} {
		if got := SpecText(c.spec); got != c.want {
			t.Errorf("SpecText(%v) = %q, want %q", c.spec, got, c.want)
		}
	}
}

type customSpec struct{}

func (customSpec) Next(t time.Time) time.Time { return t.Add(time.Hour) }
