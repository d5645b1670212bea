package member_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/internal/kafkatest"
	"github.com/shareq/shareq/internal/member"
)

// wait bounds every wait on a condition: the first share group on a fresh
// Kafka broker can take several seconds to deliver.
const wait = 45 * time.Second

// run is a running Member and everything it reported, the way the
// worker's executor sees it.
type run struct {
	t    testing.TB
	m    *member.Member
	done chan error
	stop context.CancelFunc

	mu         sync.Mutex
	changed    chan struct{}
	deliveries []member.Delivery
	acked      []member.AckResult
	renewals   []member.Renewal
	lost       []member.Key
	closed     bool
	onDelivery func(member.Delivery) // called on the reader goroutine
	// discard: the reader keeps no events (benchmarks, once onDelivery
	// answers them: a million deliveries kept cost the reader's appends
	// and the collector more CPU than the member spends on them).
	discard bool
}

// start runs a member of group on topics until t ends.
func start(t testing.TB, c *kafkatest.Cluster, group string, topics []string, opts ...func(*member.Config)) *run {
	t.Helper()
	cfg := member.Config{
		Client: c.Client(t, kgo.ConnIdleTimeout(10*time.Minute)),
		Group:  group,
		Topics: topics,
	}
	for _, o := range opts {
		o(&cfg)
	}
	m, err := member.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &run{t: t, m: m, done: make(chan error, 1), stop: cancel, changed: make(chan struct{}, 1)}
	var readers sync.WaitGroup
	readers.Add(1)
	go func() {
		defer readers.Done()
		for ev := range m.Events() {
			r.mu.Lock()
			if !r.discard {
				r.deliveries = append(r.deliveries, ev.Deliveries...)
				r.acked = append(r.acked, ev.Acked...)
				r.renewals = append(r.renewals, ev.Renewals...)
				r.lost = append(r.lost, ev.Lost...)
			}
			f := r.onDelivery
			r.mu.Unlock()
			if f != nil {
				for _, d := range ev.Deliveries {
					f(d)
				}
			}
			r.poke()
		}
		r.mu.Lock()
		r.closed = true
		r.mu.Unlock()
		r.poke()
	}()
	go func() { r.done <- m.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-r.done:
		case <-time.After(wait):
			t.Errorf("Run did not return within %v of its context's end", wait)
		}
		readers.Wait()
	})
	return r
}

// discardEvents has the reader keep no more events (run.discard).
func (r *run) discardEvents() {
	r.mu.Lock()
	r.discard = true
	r.deliveries, r.acked, r.renewals, r.lost = nil, nil, nil, nil
	r.mu.Unlock()
}

func (r *run) poke() {
	select {
	case r.changed <- struct{}{}:
	default:
	}
}

// waitFor waits until cond (called with r locked) holds.
func (r *run) waitFor(what string, cond func() bool) {
	r.t.Helper()
	deadline := time.After(wait)
	for {
		r.mu.Lock()
		ok := cond()
		r.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-r.changed:
		case <-time.After(20 * time.Millisecond): // Stats change without events
		case <-deadline:
			r.mu.Lock()
			defer r.mu.Unlock()
			r.t.Fatalf("waited %v for %s: %d deliveries, %d acked, %d renewals, %d lost; stats %+v",
				wait, what, len(r.deliveries), len(r.acked), len(r.renewals), len(r.lost), r.m.Stats())
		}
	}
}

// deliveriesN waits for n deliveries in all and returns them.
func (r *run) deliveriesN(n int) []member.Delivery {
	r.t.Helper()
	r.waitFor(fmt.Sprintf("%d deliveries", n), func() bool { return len(r.deliveries) >= n })
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.deliveries)
}

// ackedN waits for n ack results in all, and fails on any error.
func (r *run) ackedN(n int) []member.AckResult {
	r.t.Helper()
	r.waitFor(fmt.Sprintf("%d ack results", n), func() bool { return len(r.acked) >= n })
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, a := range r.acked {
		if a.Err != nil {
			r.t.Fatalf("ack %v %v: %v", a.Type, a.Key, a.Err)
		}
	}
	return slices.Clone(r.acked)
}

// leave leaves gracefully and waits for Run to return nil.
func (r *run) leave() {
	r.t.Helper()
	r.m.StopFetching()
	select {
	case <-r.m.Quiet():
	case <-time.After(wait):
		r.t.Fatalf("not quiet within %v", wait)
	}
	r.leaveNow()
}

// leaveNow calls Leave, with no StopFetching first, and waits for Run to
// return nil and the events to close.
func (r *run) leaveNow() {
	r.t.Helper()
	r.m.Leave()
	select {
	case err := <-r.done:
		if err != nil {
			r.t.Fatalf("Run after Leave: %v", err)
		}
		r.done <- nil
	case <-time.After(wait):
		r.t.Fatalf("Run did not return within %v of Leave", wait)
	}
	r.waitFor("events closed", func() bool { return r.closed })
}

var produced atomic.Int64

// produce writes n records spread over the topic's partitions, values
// unique to the call.
func produce(t testing.TB, c *kafkatest.Cluster, topic string, partitions int32, n int) {
	t.Helper()
	cl := c.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	batch := produced.Add(1)
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: topic, Partition: int32(i) % partitions, Value: fmt.Appendf(nil, "b%d-v%d", batch, i)}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
}

// waitLag waits until every partition of topic the group has started on
// has lag 0, and at least partitions have started.
func waitLag(t testing.TB, c *kafkatest.Cluster, group, topic string, partitions int) {
	t.Helper()
	deadline := time.Now().Add(wait)
	var last string
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		d, err := c.Admin().DescribeShareGroupOffsets(ctx, group)
		cancel()
		if err == nil && d[group].Err == nil {
			offs := d[group].Offsets[topic]
			ok := len(offs) >= partitions
			for _, o := range offs {
				ok = ok && o.Err == nil && o.Lag == 0
			}
			if ok {
				return
			}
			last = fmt.Sprint(offs)
		} else {
			last = fmt.Sprint(err, d[group].Err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("group %s topic %s: lag not 0 within %v: %s", group, topic, wait, last)
}

func keys(ds []member.Delivery) []member.Key {
	ks := make([]member.Key, len(ds))
	for i, d := range ds {
		ks[i] = d.Key()
	}
	return ks
}

// other is another member of the group: a raw franz-go share consumer.
type other struct {
	t  testing.TB
	cl *kgo.Client
}

func newOther(t testing.TB, c *kafkatest.Cluster, group string, topics ...string) *other {
	return &other{t: t, cl: c.ShareConsumer(t, group, topics)}
}

// poll polls once for at most d and accepts what it got.
func (o *other) poll(d time.Duration) []*kgo.Record {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	recs := o.cl.PollFetches(ctx).Records()
	for _, r := range recs {
		r.Ack(kgo.AckAccept)
	}
	return recs
}

// takeUntil polls, accepting every record, until done holds of all the
// records it got, then flushes its acks.
func (o *other) takeUntil(what string, done func([]*kgo.Record) bool) []*kgo.Record {
	o.t.Helper()
	var got []*kgo.Record
	deadline := time.Now().Add(wait)
	for !done(got) {
		if time.Now().After(deadline) {
			o.t.Fatalf("other member: waited %v for %s; got %v", wait, what, recKeys(got))
		}
		got = append(got, o.poll(time.Second)...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := o.cl.FlushAcks(ctx); err != nil {
		o.t.Fatalf("other member: FlushAcks: %v", err)
	}
	return got
}

func recKeys(rs []*kgo.Record) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = fmt.Sprintf("%d@%d#%d", r.Partition, r.Offset, r.DeliveryCount())
	}
	return out
}
