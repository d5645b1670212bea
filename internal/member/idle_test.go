package member_test

import (
	"context"
	"testing"
	"time"

	"github.com/shareq/shareq/internal/kafkatest"
	"github.com/shareq/shareq/internal/member"
)

// Idle reports an assigned partition once its session's fetches, asking
// for records, come back with none; an acquisition starts its idle time
// and count over.
func TestIdleReportsPartitionsTheBrokerGivesNothingFrom(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t)
	topic, group := c.Topic(t, 2), c.Group(t)
	produce(t, c, topic, 1, 1) // one record, on partition 0
	r := start(t, c, group, []string{topic}, func(cfg *member.Config) { cfg.MaxWait = 100 * time.Millisecond })
	idle := func(after time.Duration, minEmpty int64) map[int32]member.IdlePartition {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		ps, err := r.m.Idle(ctx, after, minEmpty)
		if err != nil {
			t.Fatalf("Idle: %v", err)
		}
		out := map[int32]member.IdlePartition{}
		for _, p := range ps {
			if p.Topic != topic {
				t.Fatalf("Idle reported %s/%d, not of the topic %s", p.Topic, p.Partition, topic)
			}
			out[p.Partition] = p
		}
		return out
	}

	r.m.Grant(5)
	held := r.deliveriesN(1)[0]
	if held.Key().Partition != 0 {
		t.Fatalf("delivered %v, want the record of partition 0", held.Key())
	}
	r.waitFor("partitions 0 and 1 idle after 3 empty fetches", func() bool { return len(idle(0, 3)) == 2 })
	if ps := idle(0, 0); ps[0].Held != 1 || ps[1].Held != 0 {
		t.Errorf("idle partitions %+v: want partition 0 with its record held, partition 1 with none", ps)
	}
	if ps := idle(time.Hour, 0); len(ps) != 0 {
		t.Errorf("idle for an hour: %v, want none", ps)
	}

	r.m.Ack(held.Key(), member.Accept)
	r.ackedN(1)

	measured := time.Now()
	produce(t, c, topic, 2, 2) // one record on each partition
	for _, d := range r.deliveriesN(3)[1:] {
		r.m.Ack(d.Key(), member.Accept)
	}
	r.ackedN(3)
	for p, ip := range idle(0, 0) {
		if since := time.Since(measured); ip.For >= since {
			t.Errorf("partition %d idle for %v after a record of it was acquired within the last %v", p, ip.For, since)
		}
	}
	r.waitFor("both partitions idle again", func() bool { return len(idle(0, 3)) == 2 })
	r.leave()
}
