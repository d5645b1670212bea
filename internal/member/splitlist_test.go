package member_test

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/internal/kafkatest"
	"github.com/shareq/shareq/internal/member"
)

// An ACCEPT of a record whose lock ran out while the member held it, and
// that another member took and accepted meanwhile: alone it is refused
// (INVALID_RECORD_STATE), but sent with acks of records the member holds
// it is answered with the partition's list as applied, on kfake and on
// Kafka alike. A broker's OK for a list is therefore not proof that each
// of its records was the member's (the executor decides a late job's
// outcome on its own lock deadline for this reason, worker/executor_outcomes.go).
func TestAckOfARecordTakenOverIsRefusedAloneAndAnsweredOKInAList(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t)
	topic := c.Topic(t, 1)
	group, lock := shortLockGroup(t, c)
	const n = 16
	produce(t, c, topic, 1, n)
	r := start(t, c, group, []string{topic})
	r.m.Grant(n)
	ds := r.deliveriesN(n)
	alone, inList := ds[n-4].Key(), ds[n-3].Key() // offsets 12 and 13
	var kept []member.Key
	for _, d := range ds {
		if d.Key() != alone && d.Key() != inList {
			kept = append(kept, d.Key())
		}
	}

	// Every other record is renewed at a third of the lock, so that only
	// these two locks run out and the other member can take them.
	stop := make(chan struct{})
	var renewing sync.WaitGroup
	renewing.Add(1)
	go func() {
		defer renewing.Done()
		tick := time.NewTicker(lock / 3)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				r.m.Renew(kept...)
			}
		}
	}()
	o := newOther(t, c, group, topic)
	took := o.takeUntil("the two records whose lock ran out", func(rs []*kgo.Record) bool { return len(rs) >= 2 })
	close(stop)
	renewing.Wait()
	if got := fmt.Sprint(recOffsets(took)); got != fmt.Sprint([]int64{alone.Offset, inList.Offset}) {
		t.Fatalf("the other member took %v, want offsets %d and %d only (the others were renewed)", recKeys(took), alone.Offset, inList.Offset)
	}

	r.m.Ack(alone, member.Accept)
	r.waitFor("the lone ack's answer", func() bool { return len(r.acked) >= 1 })
	r.mu.Lock()
	first := r.acked[0]
	r.mu.Unlock()
	if first.Key != alone || !errors.Is(first.Err, kerr.InvalidRecordState) {
		t.Fatalf("the lone ACCEPT of a record taken over: %+v, want INVALID_RECORD_STATE", first)
	}
	for _, d := range ds {
		if d.Key() != alone {
			r.m.Ack(d.Key(), member.Accept)
		}
	}
	r.waitFor(fmt.Sprintf("%d ack results", n), func() bool { return len(r.acked) >= n })
	r.mu.Lock()
	acked := slices.Clone(r.acked[1:])
	r.mu.Unlock()
	for _, a := range acked {
		if a.Err != nil {
			t.Errorf("ACCEPT of %v in the list: %v, want it answered as applied", a.Key, a.Err)
		}
	}
	waitLag(t, c, group, topic, 1)
}

func recOffsets(rs []*kgo.Record) []int64 {
	out := make([]int64, len(rs))
	for i, r := range rs {
		out[i] = r.Offset
	}
	slices.Sort(out)
	return out
}
