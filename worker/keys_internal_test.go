package worker

import (
	"context"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/internal/member"
)

// keyRuns is a handler for key-limit tests: the job of record key
// "<key>-<n>" runs until the test releases it (release), a job whose
// record key ends in "-snooze" snoozes once for a second first; it
// counts the runs of each key at once.
type keyRuns struct {
	mu      sync.Mutex
	running map[string]int
	most    map[string]int
	gates   map[string]chan struct{}
}

func newKeyRuns() *keyRuns {
	return &keyRuns{running: map[string]int{}, most: map[string]int{}, gates: map[string]chan struct{}{}}
}

func (r *keyRuns) gate(rk string) chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	g := r.gates[rk]
	if g == nil {
		g = make(chan struct{})
		r.gates[rk] = g
	}
	return g
}

func (r *keyRuns) Handle(ctx context.Context, job *handler.Job) error {
	rk := string(job.Key)
	if strings.HasSuffix(rk, "-snooze") && job.Snoozes() == 0 {
		return handler.Snooze(time.Second)
	}
	k := keyPrefix(job)
	r.mu.Lock()
	r.running[k]++
	r.most[k] = max(r.most[k], r.running[k])
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.running[k]--
		r.mu.Unlock()
	}()
	select {
	case <-r.gate(rk):
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// release lets the job of record key rk end and the executor settle.
func (r *keyRuns) release(rk string) {
	close(r.gate(rk))
	synctest.Wait()
}

func (r *keyRuns) mostOf(k string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.most[k]
}

// keyPrefix is the limit key of a job: its record key up to the first '-'.
func keyPrefix(job *handler.Job) string {
	k, _, _ := strings.Cut(string(job.Key), "-")
	return k
}

// keyedDelivery is the first delivery of offset off of topic "t" with
// record key rk.
func keyedDelivery(off int64, rk string) member.Delivery {
	d := delivery(off, 1, lock)
	d.Record = &kgo.Record{Topic: "t", Offset: off, Key: []byte(rk), Value: []byte("v")}
	return d
}

// A snoozed job keeps its key's state: when it is due it waits for the
// job of its key that arrived meanwhile (Keys.Concurrency 1), instead of
// running beside it on a state of its own. (The key's state was dropped
// once no job of it ran or waited, and the snoozed job kept the dropped
// one: the webhooks example saw 3 requests at once to a host limited to
// 2.)
func TestSnoozedJobCountsAgainstTheKeyOfNewerJobs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newKeyRuns()
		b := startExecutor(t, r, nil, Concurrency(4), KeyLimit("t", Keys{Key: keyPrefix, Concurrency: 1}))
		b.f.deliver(keyedDelivery(1, "a-snooze")) // snoozed for 1 s; nothing of key a runs or waits
		synctest.Wait()
		b.f.deliver(keyedDelivery(2, "a-2")) // runs until released
		synctest.Wait()
		time.Sleep(time.Second + time.Millisecond) // the snooze is due
		synctest.Wait()
		if got := r.mostOf("a"); got != 1 {
			t.Errorf("%d jobs of key a ran at once while the newer one ran; want 1 (Keys.Concurrency)", got)
		}
		r.release("a-2")
		wantAcks(t, b.f, 2, member.Accept)
		r.release("a-snooze")
		wantAcks(t, b.f, 1, member.Accept)
		if got := r.mostOf("a"); got != 1 {
			t.Errorf("%d jobs of key a ran at once; want 1", got)
		}
		if n := len(b.x.keys); n != 0 {
			t.Errorf("%d key states left after every job ended; want 0", n)
		}
		b.stop(t)
	})
}

// A job queued for a handler slot keeps its key's state too: a job of
// its key that arrives after the key's last running job ended waits for
// it, and the two never run at once.
func TestQueuedJobCountsAgainstTheKeyOfNewerJobs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newKeyRuns()
		b := startExecutor(t, r, nil, Concurrency(2), KeyLimit("t", Keys{Key: keyPrefix, Concurrency: 1}))
		b.f.deliver(keyedDelivery(1, "a-1"), keyedDelivery(2, "x-1")) // both run: the two slots
		synctest.Wait()
		b.f.deliver(keyedDelivery(3, "x-2"), keyedDelivery(4, "a-2")) // queued for a slot
		synctest.Wait()
		r.release("a-1") // key a has nothing running or waiting; x-2 takes the slot
		b.f.deliver(keyedDelivery(5, "a-3"))
		synctest.Wait()
		r.release("x-1") // a-2 takes the slot
		r.release("x-2") // a-3 may not: a-2 runs
		if got := r.mostOf("a"); got != 1 {
			t.Errorf("%d jobs of key a ran at once; want 1 (Keys.Concurrency)", got)
		}
		r.release("a-2")
		r.release("a-3")
		for off := int64(1); off <= 5; off++ {
			wantAcks(t, b.f, off, member.Accept)
		}
		if got := r.mostOf("a"); got != 1 {
			t.Errorf("%d jobs of key a ran at once; want 1", got)
		}
		if n := len(b.x.keys); n != 0 {
			t.Errorf("%d key states left after every job ended; want 0", n)
		}
		b.stop(t)
	})
}
