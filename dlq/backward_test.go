package dlq

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/internal/kafkatest"
)

// ListBackward reads newest first in windows and still finds each job's
// replays, whose markers sit above it: read by an earlier (newer) window,
// or, for a read that starts below the high-water mark, read once for
// them; it stops at its scan limit and says so.
func TestListBackward(t *testing.T) {
	t.Parallel()
	b := setupReplay(t, 200)
	ctx := context.Background()
	if _, err := Replay(ctx, b.cl, "jobs.dlq", ReplayFilter(Filter{JobID: "job-4"}), ReplayLogger(quiet)); err != nil {
		t.Fatal(err)
	}
	all, err := List(ctx, b.cl, "jobs.dlq", Filter{JobID: "job-4"}, 0)
	if err != nil || len(all) != 1 || !all[0].Replayed() {
		t.Fatalf("List job-4: %+v, %v", all, err)
	}
	job4 := all[0]

	// Windows of 64 and more, looking for 5 matches: job-4, among the
	// oldest, is in the last window, with its replay.
	bs, err := ListBackward(ctx, b.cl, "jobs.dlq", Filter{JobID: "job-4"}, nil, 5, 0)
	if err != nil || len(bs) != 2 {
		t.Fatalf("ListBackward: %+v, %v", bs, err)
	}
	for _, bk := range bs {
		if bk.More() || bk.Capped || bk.Scanned() != bk.End-bk.Start || bk.End < 64 {
			t.Errorf("partition %d: more %v, capped %v, scanned %d of %d-%d: want it all", bk.Partition, bk.More(), bk.Capped, bk.Scanned(), bk.Start, bk.End)
		}
		if bk.Partition != job4.Partition {
			if len(bk.Jobs) != 0 {
				t.Errorf("partition %d: %+v, want no job", bk.Partition, bk.Jobs)
			}
			continue
		}
		if bk.Reads < 2 || len(bk.Jobs) != 1 || !bk.Jobs[0].Replayed() || bk.Jobs[0].Replays[0] != job4.Replays[0] {
			t.Errorf("job-4's partition: %d windows, jobs %+v, want job-4 with its replay, in 2 windows or more", bk.Reads, bk.Jobs)
		}
	}

	// From just above job-4: the offsets above are read for its marker.
	bs, err = ListBackward(ctx, b.cl, "jobs.dlq", Filter{Partitions: []int32{job4.Partition}}, map[int32]int64{job4.Partition: job4.Offset + 1}, 1, 0)
	if err != nil || len(bs) != 1 || len(bs[0].Jobs) == 0 || bs[0].Jobs[0].Offset != job4.Offset || !bs[0].Jobs[0].Replayed() {
		t.Fatalf("ListBackward from above job-4: %+v, %v", bs, err)
	}

	// A scan limit: the newest 10 offsets a partition, the rest not read.
	bs, err = ListBackward(ctx, b.cl, "jobs.dlq", Filter{JobID: "job-4"}, nil, 1, 10)
	if err != nil || len(bs) != 2 {
		t.Fatalf("ListBackward with a scan limit: %+v, %v", bs, err)
	}
	for _, bk := range bs {
		if len(bk.Jobs) != 0 || !bk.Capped || !bk.More() || bk.Scanned() != 10 {
			t.Errorf("partition %d with a scan limit of 10: %d jobs, capped %v, more %v, scanned %d", bk.Partition, len(bk.Jobs), bk.Capped, bk.More(), bk.Scanned())
		}
	}
}

// A DLQ topic deleted between its check and the listing of its offsets
// (FindParkedAll over a cluster's DLQ topics while another is deleted)
// is reported as ErrNoTopic, which such a search passes over; other
// errors are not.
func TestOffsetsOfATopicDeletedMeanwhileAreErrNoTopic(t *testing.T) {
	for _, err := range []error{kerr.UnknownTopicOrPartition, kerr.UnknownTopicID} {
		if got := offsetsErr("start", "t.dlq", err); !errors.Is(got, ErrNoTopic) || !errors.Is(got, err) {
			t.Errorf("offsetsErr(%v) = %v, want ErrNoTopic and the cause", err, got)
		}
	}
	if got := offsetsErr("end", "t.dlq", kerr.NotLeaderForPartition); errors.Is(got, ErrNoTopic) {
		t.Errorf("offsetsErr(NOT_LEADER) = %v, want no ErrNoTopic", got)
	}
}

// A DLQ topic deleted while it is read (a search over a cluster's DLQ
// topics while another is deleted: the console's job page failed this way,
// waiting its whole request timeout on one) ends the read with ErrNoTopic
// within a few seconds, which FindParkedAll passes over, instead of a
// wait of idleTimeout for records that will never come.
func TestReadATopicDeletedMeanwhileIsErrNoTopic(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t)
	topic := c.Topic(t, 2)
	for i := range 20 {
		c.Produce(t, &kgo.Record{Topic: topic, Partition: int32(i % 2), Value: []byte("v")})
	}
	cl := c.Client(t)
	ctx, cancel := context.WithTimeout(t.Context(), idleTimeout-5*time.Second)
	defer cancel()
	ss, err := markSpans(ctx, kadm.NewClient(cl), topic, &Filter{})
	if err != nil || len(ss) != 2 {
		t.Fatalf("spans: %v, %v", ss, err)
	}
	if _, err := c.Admin().DeleteTopics(ctx, topic); err != nil {
		t.Fatal(err)
	}
	// Gone from the metadata: a fetch from now on reads nothing.
	for err := error(nil); !errors.Is(err, ErrNoTopic); {
		if err = topicExists(ctx, c.Admin(), topic); ctx.Err() != nil {
			t.Fatalf("topic %s still listed: %v", topic, err)
		}
	}
	n := 0
	start := time.Now()
	err = read(ctx, cl, topic, ss, func(*kgo.Record) error { n++; return nil })
	if !errors.Is(err, ErrNoTopic) {
		t.Fatalf("read of a deleted topic: %v (%d records) after %v, want ErrNoTopic", err, n, time.Since(start))
	}
	t.Logf("after %v: %v", time.Since(start), err)
}
