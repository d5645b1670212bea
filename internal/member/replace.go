package member

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// ReplaceSession opens an empty share session as member memberID of group
// on broker, through cl: a ShareFetch of session epoch 0 naming no
// partition, which acquires nothing and replaces any session that member
// has there. Closing cl afterwards takes the new session away with its
// connection; when the group then has no share session left on the
// broker, the broker drops the group's share partitions from its cache
// and reads their state again at the next fetch, as after a restart
// (RELIABILITY.md, "A partition the broker stops serving"). The member's
// next request finds its session gone and opens a new one. The stall
// heal (worker.HealStalls) and the broker probe's poke remedy send it.
func ReplaceSession(ctx context.Context, cl *kgo.Client, broker int32, group, memberID string) error {
	req := kmsg.NewPtrShareFetchRequest()
	req.GroupID, req.MemberID = &group, &memberID
	req.ShareSessionEpoch = 0
	req.MaxWaitMillis, req.MinBytes, req.MaxBytes, req.MaxRecords, req.BatchSize = 0, 1, 1<<20, 1, 1
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := cl.Broker(int(broker)).RetriableRequest(ctx, req)
	if err != nil {
		return err
	}
	return kerr.ErrorForCode(resp.(*kmsg.ShareFetchResponse).ErrorCode)
}
