package member_test

import (
	"runtime"
	"testing"
	"weak"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/internal/kafkatest"
	"github.com/shareq/shareq/internal/member"
)

// A record whose job runs long keeps no other record of its fetch: once
// they are acknowledged and their batches let go, they are garbage. The
// held entries of a fetch come from one slab, which the long job's entry
// keeps alive; an entry lets go of its record when its job ends, or the
// slab would keep every record of the fetch, and with them their decoded
// batches' bytes, past the decoder's limit and MaxBytesInHand.
func TestLongJobKeepsNoOtherRecordOfItsFetch(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t)
	topic, group := c.Topic(t, 1), c.Group(t)
	const batches, size = 5, 40
	produceBatches(t, c, topic, batches, size)
	r := start(t, c, group, []string{topic})
	r.m.Grant(batches * size)
	ds := r.deliveriesN(batches * size)
	var long member.Key
	var others []weak.Pointer[kgo.Record]
	for _, d := range ds {
		switch {
		case d.Record.Offset == batches*size-1:
			long = d.Key() // its job runs on: not acknowledged yet
		case d.Record.Offset < (batches-1)*size: // not of the long job's batch
			others = append(others, weak.Make(d.Record))
			r.m.Ack(d.Key(), member.Accept)
		default:
			r.m.Ack(d.Key(), member.Accept)
		}
	}
	r.ackedN(len(ds) - 1)
	ds = nil
	r.mu.Lock()
	r.deliveries = nil // what the test keeps of them
	r.mu.Unlock()
	runtime.GC()
	runtime.GC()
	kept := 0
	for _, w := range others {
		if w.Value() != nil {
			kept++
		}
	}
	if kept > 0 {
		t.Errorf("%d of the %d acknowledged records of other batches are still reachable while one record of the fetch is held; want none", kept, len(others))
	}
	r.m.Ack(long, member.Accept)
	r.ackedN(batches * size)
}
