package worker

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/internal/member"
)

var _ groupMember = (*fakeMember)(nil)

// fakeMember is a share-group member played by the test: it records what
// the executor asks for (Grant, Ack, Renew, StopFetching, Leave, in order)
// and the test pushes Events. Quiet closes on StopFetching unless
// manualQuiet; Events closes on Leave.
type fakeMember struct {
	events chan member.Event
	quiet  chan struct{}

	mu          sync.Mutex
	manualQuiet bool
	granted     int
	grants      []int
	delivered   int
	acks        map[member.Key][]member.AckType
	acked       int
	renewsAsked []member.Key // not yet answered
	renewed     []member.Key // every key Renew was called with
	calls       []string     // "stop", "quiet", "leave", "ack <type> <key>"
	stopped     bool
	quietClosed bool
	left        bool
	closed      bool
	stats       member.Stats
	paused      []string  // the topics of the last PauseTopics
	beat        time.Time // Standing's last heartbeat answered (setStanding)
	fences      int64     // Standing's fencings
}

func newFakeMember() *fakeMember {
	return &fakeMember{
		events: make(chan member.Event),
		quiet:  make(chan struct{}),
		acks:   make(map[member.Key][]member.AckType),
	}
}

func (f *fakeMember) Events() <-chan member.Event { return f.events }

func (f *fakeMember) Standing() (time.Time, int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.beat, f.fences
}

// setStanding sets what Standing reports: the last heartbeat answered
// (zero: never) and the fencings so far.
func (f *fakeMember) setStanding(beat time.Time, fences int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.beat, f.fences = beat, fences
}

func (f *fakeMember) Quiet() <-chan struct{} { return f.quiet }

func (f *fakeMember) Grant(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if n <= 0 {
		panic(fmt.Sprintf("Grant(%d)", n))
	}
	f.granted += n
	f.grants = append(f.grants, n)
}

func (f *fakeMember) Ack(k member.Key, t member.AckType) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.acks[k] = append(f.acks[k], t)
	f.acked++
	f.calls = append(f.calls, fmt.Sprintf("ack %v %v", t, k))
}

func (f *fakeMember) Renew(keys ...member.Key) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.renewsAsked = append(f.renewsAsked, keys...)
	f.renewed = append(f.renewed, keys...)
}

func (f *fakeMember) StopFetching() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stopped = true
	f.calls = append(f.calls, "stop")
	if !f.manualQuiet {
		f.closeQuietLocked()
	}
}

func (f *fakeMember) PauseTopics(topics []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.paused = append([]string(nil), topics...)
	f.calls = append(f.calls, fmt.Sprintf("pause %v", topics))
}

func (f *fakeMember) Leave() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.left = true
	f.calls = append(f.calls, "leave")
	if !f.closed {
		f.closed = true
		close(f.events)
	}
}

func (f *fakeMember) Stats() member.Stats {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stats
}

func (f *fakeMember) closeQuietLocked() {
	if !f.quietClosed {
		f.quietClosed = true
		f.calls = append(f.calls, "quiet")
		close(f.quiet)
	}
}

// closeQuiet closes Quiet (with manualQuiet) and lets the executor settle.
func (f *fakeMember) closeQuiet() {
	f.mu.Lock()
	f.closeQuietLocked()
	f.mu.Unlock()
	synctest.Wait()
}

// push hands ev to the executor and lets it settle.
func (f *fakeMember) push(ev member.Event) {
	f.mu.Lock()
	f.delivered += len(ev.Deliveries)
	f.mu.Unlock()
	f.events <- ev
	synctest.Wait()
}

// deliver pushes deliveries in one event.
func (f *fakeMember) deliver(ds ...member.Delivery) { f.push(member.Event{Deliveries: ds}) }

// fail closes Events as a member that stopped on its own would.
func (f *fakeMember) fail() {
	f.mu.Lock()
	f.closed = true
	close(f.events)
	f.mu.Unlock()
	synctest.Wait()
}

// credit is what the executor granted and no delivery used yet.
func (f *fakeMember) credit() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.granted - f.delivered
}

// inHand is what the executor granted and has not acknowledged: records
// it holds plus credit not yet used.
func (f *fakeMember) inHand() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.granted - f.acked
}

func (f *fakeMember) grantList() []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]int(nil), f.grants...)
}

// acksOf returns the acknowledgements sent for offset off of topic t.
func (f *fakeMember) acksOf(off int64) []member.AckType {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]member.AckType(nil), f.acks[key(off)]...)
}

func (f *fakeMember) callList() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

func (f *fakeMember) renewedKeys() []member.Key {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]member.Key(nil), f.renewed...)
}

func (f *fakeMember) setStats(s member.Stats) {
	f.mu.Lock()
	f.stats = s
	f.mu.Unlock()
}

func (f *fakeMember) hasLeft() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.left
}

func (f *fakeMember) hasStopped() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stopped
}

// answerRenewals answers every renewal asked for and not answered yet:
// with err, or (err nil) with a deadline of now plus lock.
func (f *fakeMember) answerRenewals(lock time.Duration, err error) int {
	f.mu.Lock()
	keys := f.renewsAsked
	f.renewsAsked = nil
	f.mu.Unlock()
	if len(keys) == 0 {
		return 0
	}
	ev := member.Event{}
	for _, k := range keys {
		r := member.Renewal{Key: k, Err: err}
		if err == nil {
			r.Deadline = time.Now().Add(lock)
		}
		ev.Renewals = append(ev.Renewals, r)
	}
	f.push(ev)
	return len(keys)
}

// key is the Key of offset off of topic "t", partition 0.
func key(off int64) member.Key { return member.Key{Topic: "t", Offset: off} }

// delivery is the delivery of offset off of topic "t", partition 0, with
// the given delivery count and a lock of lock from now.
func delivery(off int64, count int32, lock time.Duration) member.Delivery {
	return member.Delivery{
		Record:   &kgo.Record{Topic: "t", Offset: off, Key: fmt.Appendf(nil, "k%d", off), Value: []byte("v")},
		Count:    count,
		Deadline: time.Now().Add(lock),
		Lock:     lock,
	}
}

// benchMember is a member that delivers batches of records as fast as the
// executor grants credit, for benchmarks. Its pump goroutine is the only
// sender on events and closes it after Leave.
type benchMember struct {
	events chan member.Event
	quiet  chan struct{}
	kick   chan struct{} // capacity 1: credit or a stop arrived

	mu      sync.Mutex
	credit  int
	stop    bool
	leave   bool
	acks    int
	allAck  chan struct{}
	want    int
	offset  int64
	rtt     time.Duration
	batch   int
	stopped bool
}

var _ groupMember = (*benchMember)(nil)

func newBenchMember(want, batch int) *benchMember {
	return &benchMember{
		events: make(chan member.Event, 4),
		quiet:  make(chan struct{}),
		kick:   make(chan struct{}, 1),
		allAck: make(chan struct{}),
		want:   want,
		batch:  batch,
		rtt:    time.Millisecond,
	}
}

func (b *benchMember) Events() <-chan member.Event { return b.events }

func (b *benchMember) Standing() (time.Time, int64) { return time.Time{}, 0 }
func (b *benchMember) Quiet() <-chan struct{}       { return b.quiet }
func (b *benchMember) Renew(...member.Key)          {}
func (b *benchMember) Stats() member.Stats          { return member.Stats{FetchRTT: b.rtt} }

func (b *benchMember) signal() {
	select {
	case b.kick <- struct{}{}:
	default:
	}
}

func (b *benchMember) Grant(n int) {
	b.mu.Lock()
	b.credit += n
	b.mu.Unlock()
	b.signal()
}

func (b *benchMember) Ack(member.Key, member.AckType) {
	b.mu.Lock()
	b.acks++
	if b.acks == b.want {
		close(b.allAck)
	}
	b.mu.Unlock()
}

func (b *benchMember) StopFetching() {
	b.mu.Lock()
	b.stop = true
	b.mu.Unlock()
	b.signal()
}

func (b *benchMember) PauseTopics([]string) {}

func (b *benchMember) Leave() {
	b.mu.Lock()
	b.leave = true
	b.mu.Unlock()
	b.signal()
}

// pump delivers records while there is credit and records left, closes
// quiet once stopped, and closes events after Leave.
func (b *benchMember) pump() {
	for range b.kick {
		for {
			b.mu.Lock()
			if b.leave {
				b.mu.Unlock()
				close(b.events)
				return
			}
			if b.stop && !b.stopped {
				b.stopped = true
				close(b.quiet)
			}
			n := min(b.credit, b.batch, b.want-int(b.offset))
			if b.stop || n <= 0 {
				b.mu.Unlock()
				break
			}
			b.credit -= n
			first := b.offset
			b.offset += int64(n)
			b.mu.Unlock()
			ev := member.Event{Deliveries: make([]member.Delivery, n)}
			deadline := time.Now().Add(time.Minute)
			for i := range ev.Deliveries {
				ev.Deliveries[i] = member.Delivery{
					Record:   &kgo.Record{Topic: "t", Offset: first + int64(i)},
					Count:    1,
					Deadline: deadline,
					Lock:     time.Minute,
				}
			}
			b.events <- ev
		}
	}
}

// runBench runs an executor on a benchMember until every record is
// acknowledged.
func runBench(tb testing.TB, x *executor, b *benchMember) {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); b.pump() }()
	go func() { defer wg.Done(); x.run(ctx) }()
	<-b.allAck
	cancel()
	wg.Wait()
}
