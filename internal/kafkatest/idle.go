package kafkatest

import (
	"context"
	"crypto/rand"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// JoinWithoutFetching makes a member of the share group subscribed to
// topics that heartbeats but never fetches, until t ends (then it leaves),
// and returns once the coordinator has assigned it every partition of the
// topics. The group then has partitions the broker keeps no start offset
// for: Apache Kafka lists them with start offset and lag -1, kfake does
// not list them. It is the state of a group whose workers joined but
// never fetched (or, on Kafka, whose share state is not written yet).
func (c *Cluster) JoinWithoutFetching(t testing.TB, group string, partitions int, topics ...string) {
	t.Helper()
	cl := c.Client(t)
	req := kmsg.NewPtrShareGroupHeartbeatRequest()
	req.GroupID = group
	req.MemberID = "idle-" + rand.Text()
	req.SubscribedTopicNames = topics

	// beat sends one heartbeat and returns the number of partitions
	// assigned (-1: no new assignment) and the interval to wait.
	beat := func(ctx context.Context) (int, time.Duration, error) {
		resp, err := req.RequestWith(ctx, cl)
		if err == nil {
			err = kerr.ErrorForCode(resp.ErrorCode)
		}
		if err != nil {
			return -1, 0, err
		}
		req.MemberEpoch = resp.MemberEpoch
		req.SubscribedTopicNames = nil
		assigned := -1
		if a := resp.Assignment; a != nil {
			assigned = 0
			for _, tp := range a.TopicPartitions {
				assigned += len(tp.Partitions)
			}
		}
		return assigned, time.Duration(resp.HeartbeatIntervalMillis) * time.Millisecond, nil
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	wait := 100 * time.Millisecond
	for assigned := -1; assigned != partitions; {
		n, interval, err := beat(ctx)
		switch {
		case kerr.IsRetriable(err): // the coordinator of a new group loads
		case err != nil:
			t.Fatalf("join share group %s: %v", group, err)
		case n >= 0:
			assigned = n
		}
		if interval > 0 {
			wait = min(interval, 100*time.Millisecond)
		}
		if assigned == partitions {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("join share group %s: assigned %d of %d partitions after 30s", group, assigned, partitions)
		case <-time.After(wait):
		}
	}

	// Heartbeat until t ends, then leave.
	hctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-hctx.Done():
				return
			case <-time.After(wait):
			}
			_, _, _ = beat(hctx)
		}
	}()
	t.Cleanup(func() {
		stop()
		<-done
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		req.MemberEpoch = -1
		_, _ = req.RequestWith(ctx, cl)
	})
}
