package main

// Reproductions of what the soak found (RELIABILITY.md), small enough to
// run on kfake and on the real broker, and a test of the mitigation.

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/dlq"
	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/internal/groupcfg"
	"github.com/shareq/shareq/worker"
)

// member is a raw share-group client that plays another worker of the
// group: it takes the job, and releases it or lets its lock run out.
type member struct {
	t  *testing.T
	cl *kgo.Client
}

func (r *rig) member(t *testing.T) *member {
	return &member{t: t, cl: r.c.ShareConsumer(t, r.group, []string{r.topic}, kgo.ShareMaxRecords(1), kgo.ShareMaxRecordsStrict())}
}

// take polls until it gets the job, and returns it unacknowledged.
func (m *member) take() *kgo.Record {
	m.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for ctx.Err() == nil {
		if recs := m.cl.PollRecords(ctx, 1).Records(); len(recs) > 0 {
			return recs[0]
		}
	}
	m.t.Fatalf("no delivery within 30s")
	return nil
}

// releaseUntil takes the job and releases it until it is on delivery n,
// which it returns unacknowledged.
func (m *member) releaseUntil(n int32) *kgo.Record {
	m.t.Helper()
	for {
		rec := m.take()
		if rec.DeliveryCount() >= n {
			return rec
		}
		rec.Ack(kgo.AckRelease)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_ = m.cl.FlushAcks(ctx)
		cancel()
	}
}

// die models a worker process killed while it held rec: nothing
// acknowledges it, and the broker takes it back when its lock runs out.
func (m *member) die(rec *kgo.Record, lock time.Duration) {
	time.Sleep(time.Until(rec.AcquisitionDeadline()) + lock/2 + time.Second)
	m.cl.Close()
}

// What spare deliveries are for (RELIABILITY.md, issue 1): the dlq
// middleware parks a failing job on its last delivery, and when the worker
// holding that delivery dies (SIGKILL, OOM, node loss) nothing can park
// it: its lock runs out at the delivery limit and the broker archives the
// record, never to deliver it again. The test pins that down, so a change
// in the brokers would show; TestParkBeforeBrokerLimitSurvivesCrash shows
// the job parked when a delivery is left.
func TestCrashOnLastDeliveryArchivesJob(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.produce(t, jobRec("poison", []byte("x")))
	m := r.member(t)
	last := m.releaseUntil(int32(r.c.DeliveryLimit)) // deliveries 1..limit-1 failed and were released
	m.die(last, r.c.LockDuration)

	fails := handler.Func(func(context.Context, *handler.Job) error { return errors.New("poison") })
	stop := r.start(t, fails, nil)
	time.Sleep(2*r.c.LockDuration + 2*time.Second)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if ps, n := r.parked(t), r.obs.Count(0); len(ps) != 0 || n != 0 {
		t.Errorf("after a crash during the job's last delivery (%d): DLQ holds %d records, the worker ran it %d times; want the broker to have archived it (0 and 0)",
			r.c.DeliveryLimit, len(ps), n)
	}
}

// On Kafka 4.4+ the same crash loses nothing: the worker takes up the
// group's dead-letter topic (dlq.<group>, created beforehand), so the
// broker writes the record it archives there, and dlq.Get gives the job
// back with its own headers. Before 4.4 the broker has no such topic and
// TestCrashOnLastDeliveryArchivesJob is the whole story.
func TestCrashOnLastDeliveryBrokerDLQ(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	if !r.c.BrokerDLQ {
		t.Logf("%s %s: no share-group dead-letter topics (Kafka 4.4+): the crash archives the job (TestCrashOnLastDeliveryArchivesJob)", r.c.Kind, r.c.Version)
		return
	}
	brokerDLQ := worker.BrokerDLQTopic(r.group)
	createBrokerDLQ(t, r, brokerDLQ)
	fails := handler.Func(func(context.Context, *handler.Job) error { return errors.New("poison") })
	w, err := worker.New(worker.Brokers(r.c.Seeds...), worker.Group(r.group), worker.Handle(r.topic, fails), worker.Logger(r.logger(t)))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Check(context.Background()); err != nil || w.BrokerDLQTopic() != brokerDLQ { // sets the group's dead-letter topic
		t.Fatalf("Check: %v; broker DLQ %q, want %q", err, w.BrokerDLQTopic(), brokerDLQ)
	}
	r.produce(t, jobRec("poison", []byte("x")))
	m := r.member(t)
	last := m.releaseUntil(int32(r.c.DeliveryLimit))
	m.die(last, r.c.LockDuration)

	cl := r.c.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var ps []dlq.Parked
	for len(ps) == 0 && ctx.Err() == nil {
		var err error
		if ps, err = dlq.List(ctx, cl, brokerDLQ, dlq.Filter{}, 0); err != nil {
			t.Fatal(err)
		}
	}
	if len(ps) != 1 || !ps[0].Broker || ps[0].Reason != handler.ReasonDeliveryLimit || int(ps[0].DeliveryCount) != r.c.DeliveryLimit {
		t.Fatalf("%s holds %+v, want the job dead-lettered by the broker at delivery %d", brokerDLQ, ps, r.c.DeliveryLimit)
	}
	p, err := dlq.Get(ctx, cl, brokerDLQ, ps[0].Partition, ps[0].Offset)
	if err != nil || !p.Restored || p.JobID() != "poison" {
		t.Fatalf("dlq.Get: restored %v, job ID %q (%v); want the job's own record, ID poison", p.Restored, p.JobID(), err)
	}
	if parked := r.parked(t); len(parked) != 0 {
		t.Fatalf("the workers' DLQ holds %d records, want 0 (no worker ran the last delivery)", len(parked))
	}
}

// createBrokerDLQ creates a share-group dead-letter topic.
func createBrokerDLQ(t *testing.T, r *rig, name string) {
	t.Helper()
	r.c.CreateTopicWith(t, name, 1, map[string]*string{groupcfg.TopicDLQGroupEnable: kadm.StringPtr("true")})
}

// The mitigation: park before the broker's limit (dlq.DeliveryLimit
// below share.delivery.count.limit), so a crash during the parking
// delivery leaves deliveries for the job to be parked on.
func TestParkBeforeBrokerLimitSurvivesCrash(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	limit := r.c.DeliveryLimit
	if limit < 3 {
		t.Skipf("delivery limit %d: no room to park before it", limit)
	}
	r.produce(t, jobRec("poison", []byte("x")))
	m := r.member(t)
	rec := m.releaseUntil(int32(limit - 1)) // the parking delivery, under worker.SpareDeliveries(1)
	m.die(rec, r.c.LockDuration)

	park, err := dlq.Middleware(r.cl, dlq.Logger(r.logger(t)))
	if err != nil {
		t.Fatal(err)
	}
	fails := handler.Func(func(context.Context, *handler.Job) error { return errors.New("poison") })
	r.start(t, fails, nil, worker.Use(park), worker.SpareDeliveries(1))
	waitFor(t, 30*time.Second, "the job parked", func() bool { return r.obs.Count(worker.AckAccept) >= 1 })
	ps := r.parked(t)
	if len(ps) < 1 || ps[0].JobID() != "poison" || ps[0].Reason != handler.ReasonDeliveryLimit || int(ps[0].DeliveryCount) != limit {
		t.Fatalf("DLQ = %+v; want the job parked with reason delivery-limit on delivery %d", ps, limit)
	}
}

// Found by the soak (RELIABILITY.md, issue 1): a worker stopped gracefully
// while it held a failing job in its retry backoff on the delivery before
// the last released the job at once. The release made the record available
// while the worker still had share fetches waiting at the broker (it ran
// several members then, "lanes"); one of them acquired it (its last
// delivery), and the stopping worker closed without running it, so the
// broker archived it: the job was neither run, parked nor queued. The
// worker stops fetching, waits for the fetch in flight and runs what it
// brought before it releases held jobs.
func TestStopDuringBackoffKeepsJob(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.produce(t, jobRec("poison", []byte("x")))
	limit := int32(r.c.DeliveryLimit)
	fails := handler.Func(func(_ context.Context, job *handler.Job) error {
		return errors.New("poison")
	})
	stopA := r.start(t, fails, nil, worker.Concurrency(8))
	waitFor(t, 60*time.Second, "delivery limit-1 to fail and be held in backoff", func() bool {
		return r.heldAt(limit - 1)
	})
	if err := stopA(); err != nil {
		t.Fatal(err)
	}
	// Worker B takes over.
	r.start(t, fails, nil)
	deadline := time.Now().Add(2*r.c.LockDuration + 5*time.Second)
	for time.Now().Before(deadline) && len(r.parked(t)) == 0 {
		time.Sleep(500 * time.Millisecond)
	}
	if ps := r.parked(t); len(ps) != 1 {
		t.Errorf("DLQ holds %d records, want 1: the job was lost after worker A stopped while holding delivery %d in retry backoff:\n%s",
			len(ps), limit-1, describe(r.obs.Events()))
	}
}
