package worker

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/internal/member"
)

// The executor's side of priorities, against a fakeMember: which job in
// hand starts next. Topic "t" is the bulk topic of startExecutor; "u" is
// the urgent one, its offsets from 1000 so that the ctl handler tells
// them apart.

// topicDelivery is the delivery of offset off of topic on partition 0.
func topicDelivery(topic string, off int64) member.Delivery {
	return member.Delivery{
		Record:   &kgo.Record{Topic: topic, Offset: off, Key: fmt.Appendf(nil, "k%d", off), Value: []byte("v")},
		Count:    1,
		Deadline: time.Now().Add(lock),
		Lock:     lock,
	}
}

// deliveries returns the deliveries of offsets from..to of topic.
func deliveries(topic string, from, to int64) []member.Delivery {
	var ds []member.Delivery
	for off := from; off <= to; off++ {
		ds = append(ds, topicDelivery(topic, off))
	}
	return ds
}

// urgent reports whether off is one of topic "u"'s offsets.
func urgent(off int64) bool { return off >= 1000 }

// runInOrder finishes the one running job, and each job as it starts
// next, n times in all (Concurrency 1), and returns every offset started
// so far, in order.
func runInOrder(t *testing.T, h *ctl, n int) []int64 {
	t.Helper()
	done := len(h.startedList()) - 1
	for i := done; i < done+n; i++ {
		started := h.startedList()
		if len(started) != i+1 {
			t.Fatalf("after %d jobs finished, %d started: %v", i, len(started), started)
		}
		h.finish(started[i], nil)
	}
	return h.startedList()
}

// With strict order, a job of the urgent topic in hand starts before any
// bulk job in hand, whichever arrived first; the bulk jobs keep their
// order among themselves.
func TestExecutorStrictPriorityStartsUrgentFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newCtl()
		b := startExecutor(t, h, nil, Concurrency(1), Handle("u", h), StrictPriority("u", "t"))
		// Bulk first: offset 1 takes the slot, 2..5 queue.
		b.f.deliver(deliveries("t", 1, 5)...)
		synctest.Wait()
		// Then urgent ones arrive behind them.
		b.f.deliver(deliveries("u", 1000, 1002)...)
		synctest.Wait()
		got := runInOrder(t, h, 8)
		want := []int64{1, 1000, 1001, 1002, 2, 3, 4, 5}
		if !slices.Equal(got, want) {
			t.Errorf("started %v, want %v (the running bulk job, then every urgent one, then the bulk ones in order)", got, want)
		}
		b.stop(t)
	})
}

// Topics StrictPriority does not name come after those it names.
func TestExecutorStrictPriorityUnnamedTopicsComeLast(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newCtl()
		b := startExecutor(t, h, nil, Concurrency(1), Handle("u", h), StrictPriority("u"))
		b.f.deliver(append(deliveries("t", 1, 3), deliveries("u", 1000, 1001)...)...)
		synctest.Wait()
		got := runInOrder(t, h, 5)
		want := []int64{1000, 1001, 1, 2, 3}
		if !slices.Equal(got, want) {
			t.Errorf("started %v, want %v", got, want)
		}
		b.stop(t)
	})
}

// Weights 3:1 over a backlog of both topics in hand: every four starts
// hold three urgent jobs and one bulk job (smooth weighted round robin
// mixes them evenly), and once the urgent topic runs out the bulk one
// takes every slot.
func TestExecutorWeightsShareStarts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newCtl()
		b := startExecutor(t, h, nil, Concurrency(1), Handle("u", h), Priority("u", 3))
		b.f.deliver(append(deliveries("t", 1, 40), deliveries("u", 1000, 1059)...)...)
		synctest.Wait()
		got := runInOrder(t, h, 100)
		for i := 0; i+4 <= 80; i += 4 {
			n := 0
			for _, off := range got[i : i+4] {
				if urgent(off) {
					n++
				}
			}
			if n != 3 {
				t.Fatalf("starts %d..%d: %v hold %d urgent jobs, want 3 (weights 3:1); all: %v", i, i+3, got[i:i+4], n, got)
			}
		}
		for _, off := range got[80:] {
			if urgent(off) {
				t.Fatalf("an urgent job started after the 60 in hand: %v", got)
			}
		}
		b.stop(t)
	})
}

// A topic with nothing in hand saves no share for later: after the urgent
// topic was empty while bulk jobs ran, its new jobs get their weight's
// share, not a burst that starves the bulk topic.
func TestExecutorWeightsSaveNoShare(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newCtl()
		b := startExecutor(t, h, nil, Concurrency(1), Handle("u", h), Priority("t", 2))
		b.f.deliver(deliveries("t", 1, 30)...)
		synctest.Wait()
		runInOrder(t, h, 10)
		b.f.deliver(deliveries("u", 1000, 1009)...)
		synctest.Wait()
		got := runInOrder(t, h, 25)[10:]
		// Weights t 2, u 1: of the 15 starts after the urgent jobs came,
		// 5 are urgent (one in every three), never two in a row.
		n := 0
		for i, off := range got[:15] {
			if urgent(off) {
				n++
				if i > 0 && urgent(got[i-1]) {
					t.Fatalf("two urgent jobs in a row: %v", got)
				}
			}
		}
		if n != 5 {
			t.Errorf("%d urgent jobs of 15 starts (%v), want 5 (weights 1:2)", n, got)
		}
		b.stop(t)
	})
}

// Jobs dropped while queued (their locks lost) are skipped in their lane,
// and the executor's counts stay right.
func TestExecutorPriorityLanesSkipDroppedJobs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newCtl()
		b := startExecutor(t, h, nil, Concurrency(1), Handle("u", h), StrictPriority("u", "t"))
		b.f.deliver(deliveries("t", 1, 3)...)
		synctest.Wait()
		b.f.deliver(deliveries("u", 1000, 1002)...)
		synctest.Wait()
		b.f.push(member.Event{Lost: []member.Key{{Topic: "u", Offset: 1000}, {Topic: "u", Offset: 1001}}})
		synctest.Wait()
		got := runInOrder(t, h, 4)
		want := []int64{1, 1002, 2, 3}
		if !slices.Equal(got, want) {
			t.Errorf("started %v, want %v", got, want)
		}
		if b.x.queued != 0 {
			t.Errorf("%d jobs counted queued with none in hand", b.x.queued)
		}
		b.stop(t)
	})
}

func TestTopicQueuesPickIsFair(t *testing.T) {
	q := newWeightedQueues([]string{"a", "b", "c"}, map[string]int{"a": 5, "b": 2})
	for i := range 800 {
		for _, topic := range []string{"a", "b", "c"} {
			q.push(&xjob{job: handler.Job{Topic: topic, Offset: int64(i)}, state: jobQueued})
		}
	}
	counts := map[string]int{}
	for range 800 {
		j := q.pop()
		j.state = jobRunning
		counts[j.job.Topic]++
	}
	if counts["a"] != 500 || counts["b"] != 200 || counts["c"] != 100 {
		t.Errorf("800 picks: %v, want a 500, b 200, c 100 (weights 5:2:1)", counts)
	}
}

// BenchmarkExecutorNoopPriorities is BenchmarkExecutorNoop (conc=100)
// with priorities configured: the cost of the topics' lanes and the pick.
func BenchmarkExecutorNoopPriorities(b *testing.B) {
	noop := handler.Func(func(context.Context, *handler.Job) error { return nil })
	for _, tc := range []struct {
		name string
		opt  Option
	}{
		{"strict", StrictPriority("u", "t")},
		{"weights", Priority("u", 3)},
	} {
		b.Run(tc.name, func(b *testing.B) {
			cfg := testExecutorConfig(b, nil, Brokers("fake:9092"), Group("g"), Handle("t", noop), Handle("u", noop),
				Concurrency(100), Logger(slog.New(slog.DiscardHandler)), tc.opt)
			e := newBenchMember(b.N, 500)
			x := newExecutor(cfg, e)
			b.ReportAllocs()
			b.ResetTimer()
			runBench(b, x, e)
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
		})
	}
}

// With strict order, the jobs that waited for their topic's pause go
// back to the head of their topic's queue, in order, and an urgent job
// in hand at the resume still starts before them.
func TestExecutorStrictPriorityAfterATopicPause(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newCtl()
		p := startPausable(t, h, Concurrency(1), MaxHold(time.Hour), Handle("u", h), StrictPriority("u", "t"))
		p.f.deliver(deliveries("t", 1, 3)...) // 1 runs, 2 and 3 queue
		synctest.Wait()
		p.set(map[string]string{"t": "bad deploy"}) // 2 and 3 wait for the pause
		p.f.deliver(deliveries("t", 4, 4)...)       // fetched before the pause took effect: waits too
		p.f.deliver(deliveries("u", 1000, 1000)...)
		synctest.Wait()
		h.finish(1, nil) // 1000 starts
		synctest.Wait()
		p.f.deliver(deliveries("u", 1001, 1001)...) // queued behind the running 1000
		synctest.Wait()
		p.set(nil)
		got := runInOrder(t, h, 5)
		want := []int64{1, 1000, 1001, 2, 3, 4}
		if !slices.Equal(got, want) {
			t.Errorf("started %v, want %v (the urgent jobs first, then the paused topic's in order)", got, want)
		}
		p.stop(t)
	})
}
