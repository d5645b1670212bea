package brokerprobe

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/shareq/shareq/internal/groupcfg"
)

// Driver drives a Member through a variant's steps and notes what it
// acquired. Its methods are called from one goroutine.
type Driver struct {
	M    *Member
	Logf func(format string, args ...any)
	// OnAcquire, when set, is called after each fetch that acquired
	// records, before they are noted.
	OnAcquire func()
	// Report, when set, is called at MakeStall's points ("after the
	// first acks", "after the restart") to report the partition's state.
	Report func(ctx context.Context, when string)

	Accepted    map[int64]bool // offsets accepted
	Redelivered int            // acquisitions of an accepted offset
	MaxAcquired int64          // the highest offset acquired; -1: none
	LastAcquire time.Time
	EmptyFetch  int // empty fetches in a row
}

// NewDriver returns a Driver of m logging through logf.
func NewDriver(m *Member, logf func(format string, args ...any)) *Driver {
	return &Driver{M: m, Logf: logf, Accepted: map[int64]bool{}, MaxAcquired: -1}
}

// Prepare creates topic (one partition) and sets group's configs for the
// probe (earliest, the limit locks, the lock lockMs), and returns the
// topic's ID.
func Prepare(ctx context.Context, cl *kgo.Client, topic, group string, locks, lockMs int) ([16]byte, error) {
	resp, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 1, nil, topic)
	if err != nil {
		return [16]byte{}, fmt.Errorf("create topic: %w", err)
	}
	if resp.Err != nil {
		return [16]byte{}, fmt.Errorf("create topic: %w", resp.Err)
	}
	return resp.ID, groupcfg.Set(ctx, cl, group, map[string]string{
		groupcfg.AutoOffsetReset:         "earliest",
		groupcfg.PartitionMaxRecordLocks: strconv.Itoa(locks),
		groupcfg.RecordLockDurationMs:    strconv.Itoa(lockMs),
	})
}

// ProduceBatches produces batches (record counts) to partition 0 of the
// default produce topic of cl, each its own log batch: cl must linger
// long (kgo.ProducerLinger) and partition manually, as the probe's
// client does. Records are numbered from 0.
func ProduceBatches(ctx context.Context, cl *kgo.Client, batches []int) error {
	n := 0
	for _, size := range batches {
		Produce(ctx, cl, n, size, nil)
		if err := cl.Flush(ctx); err != nil {
			return err
		}
		n += size
	}
	return nil
}

// Produce produces n records numbered from from to partition 0; failed
// reports a failed one.
func Produce(ctx context.Context, cl *kgo.Client, from, n int, failed func(error)) {
	for i := range n {
		cl.Produce(ctx, &kgo.Record{Partition: 0, Value: []byte("probe record " + strconv.Itoa(from+i))}, func(_ *kgo.Record, err error) {
			if err != nil && failed != nil {
				failed(err)
			}
		})
	}
}

// MakeStall runs v's steps on the partition, its records produced and
// the member joined: it acquires what the broker gives, accepts all but
// v's held offsets, then (v.Kill) calls restart, which must SIGKILL the
// broker and start it on its data, and acks what comes in v's way for
// one and a half lock durations and 2 s. A stalling variant leaves the
// partition stalled: no record past the in-flight span is acquired again.
func (d *Driver) MakeStall(ctx context.Context, v Variant, lock time.Duration, restart func(context.Context) error) error {
	ranges, err := d.FetchAll(ctx, 3*time.Second)
	if err != nil {
		return err
	}
	d.Logf("before the kill: acquired %s", FmtRanges(ranges))
	var acks []kmsg.ShareAcknowledgeRequestTopicPartitionAcknowledgementBatch
	var held []int64
	for _, r := range ranges {
		for off := r.FirstOffset; off <= r.LastOffset; off++ {
			if v.Held(off) {
				held = append(held, off)
				continue
			}
			acks = AppendAck(acks, off, 1)
			d.Accepted[off] = true
		}
	}
	if err := d.M.Ack(ctx, acks); err != nil {
		return fmt.Errorf("first acks: %w", err)
	}
	d.Logf("accepted %s; holding %s (acquired, no ack)", FmtAcks(acks), FmtOffsets(held))
	d.report(ctx, "after the first acks")
	if v.Kill {
		d.Logf("SIGKILL the broker, start it on its data")
		if err := restart(ctx); err != nil {
			return err
		}
		d.M.Reset()
		d.Logf("broker back")
		d.report(ctx, "after the restart")
	}
	return d.Drive(ctx, v.After(), lock+lock/2+2*time.Second)
}

func (d *Driver) report(ctx context.Context, when string) {
	if d.Report != nil {
		d.Report(ctx, when)
	}
}

// FetchAll fetches until a fetch acquires nothing or for dur, and
// returns the ranges acquired.
func (d *Driver) FetchAll(ctx context.Context, dur time.Duration) ([]kmsg.ShareFetchResponseTopicPartitionAcquiredRecord, error) {
	var all []kmsg.ShareFetchResponseTopicPartitionAcquiredRecord
	end := time.Now().Add(dur)
	for time.Now().Before(end) {
		got, err := d.Fetch(ctx, nil)
		if err != nil {
			return nil, err
		}
		if len(got) == 0 && len(all) > 0 {
			break
		}
		all = append(all, got...)
	}
	return all, nil
}

// Fetch sends one ShareFetch with acks and notes what it acquired.
func (d *Driver) Fetch(ctx context.Context, acks []kmsg.ShareAcknowledgeRequestTopicPartitionAcknowledgementBatch) ([]kmsg.ShareFetchResponseTopicPartitionAcquiredRecord, error) {
	got, err := d.M.Fetch(ctx, acks)
	if err != nil {
		return nil, err
	}
	if len(got) == 0 {
		d.EmptyFetch++
		return nil, nil
	}
	d.EmptyFetch = 0
	d.LastAcquire = time.Now()
	if d.OnAcquire != nil {
		d.OnAcquire()
	}
	for _, r := range got {
		d.MaxAcquired = max(d.MaxAcquired, r.LastOffset)
		for off := r.FirstOffset; off <= r.LastOffset; off++ {
			if d.Accepted[off] {
				d.Redelivered++
			}
		}
	}
	return got, nil
}

// Drive fetches for dur, acking what it acquired with fn; a held offset
// is not acked (its lock runs out and it is acquired again).
func (d *Driver) Drive(ctx context.Context, fn AckFn, dur time.Duration) error {
	end := time.Now().Add(dur)
	var pending []kmsg.ShareAcknowledgeRequestTopicPartitionAcknowledgementBatch
	for time.Now().Before(end) && ctx.Err() == nil {
		got, err := d.Fetch(ctx, pending)
		pending = nil
		if err != nil {
			if errors.Is(err, ErrRetry) {
				time.Sleep(500 * time.Millisecond)
				continue
			}
			return err
		}
		if len(got) == 0 {
			continue
		}
		var kinds []string
		for _, r := range got {
			for off := r.FirstOffset; off <= r.LastOffset; off++ {
				t := fn(off, r.DeliveryCount)
				if t == 1 {
					d.Accepted[off] = true
				}
				if t != 0 {
					pending = AppendAck(pending, off, t)
				}
			}
			kinds = append(kinds, fmt.Sprintf("%d-%d(delivery %d)", r.FirstOffset, r.LastOffset, r.DeliveryCount))
		}
		d.Logf("acquired %s; acks %s", strings.Join(kinds, " "), FmtAcks(pending))
		// Ack at once (ShareAcknowledge), before the next fetch acquires
		// anything, so the order is the variant's.
		if len(pending) > 0 {
			if err := d.M.Ack(ctx, pending); err != nil {
				d.Logf("ack: %v", err)
			}
			pending = nil
		}
	}
	return ctx.Err()
}

// AppendAck adds offset off acked with typ to acks, merged into the last
// batch when it continues it.
func AppendAck(acks []kmsg.ShareAcknowledgeRequestTopicPartitionAcknowledgementBatch, off int64, typ int8) []kmsg.ShareAcknowledgeRequestTopicPartitionAcknowledgementBatch {
	if n := len(acks); n > 0 && acks[n-1].LastOffset+1 == off && acks[n-1].AcknowledgeTypes[0] == typ {
		acks[n-1].LastOffset = off
		return acks
	}
	b := kmsg.NewShareAcknowledgeRequestTopicPartitionAcknowledgementBatch()
	b.FirstOffset, b.LastOffset, b.AcknowledgeTypes = off, off, []int8{typ}
	return append(acks, b)
}

// FmtAcks is acks as "0-9 accept, 10-10 release".
func FmtAcks(acks []kmsg.ShareAcknowledgeRequestTopicPartitionAcknowledgementBatch) string {
	if len(acks) == 0 {
		return "none"
	}
	kind := map[int8]string{1: "accept", 2: "release", 3: "reject"}
	var parts []string
	for _, a := range acks {
		parts = append(parts, fmt.Sprintf("%d-%d %s", a.FirstOffset, a.LastOffset, kind[a.AcknowledgeTypes[0]]))
	}
	return strings.Join(parts, ", ")
}

// FmtRanges is the acquired ranges rs, shortened past 12.
func FmtRanges(rs []kmsg.ShareFetchResponseTopicPartitionAcquiredRecord) string {
	if len(rs) == 0 {
		return "nothing"
	}
	var parts []string
	for _, r := range rs {
		parts = append(parts, fmt.Sprintf("%d-%d", r.FirstOffset, r.LastOffset))
	}
	if len(parts) > 12 {
		parts = append(parts[:6], "...", parts[len(parts)-1])
	}
	return strings.Join(parts, " ") + fmt.Sprintf(" (%d ranges)", len(rs))
}

// FmtOffsets is offs (sorted) as "first-last".
func FmtOffsets(offs []int64) string {
	if len(offs) == 0 {
		return "nothing"
	}
	return fmt.Sprintf("%d-%d", offs[0], offs[len(offs)-1])
}
