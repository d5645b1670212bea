package dlq

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"reflect"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/enqueue"
	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/internal/acl"
)

// ReplayGroupPrefix starts the name of the consumer group in which
// [Replay] saves its progress.
const ReplayGroupPrefix = "shareq-dlq-replay."

// ReplayLogLimit is how many replayed jobs one [Replay] run logs one by
// one at Info level; the summary at its end counts them all.
const ReplayLogLimit = 100

// A ReplayOption configures [Replay], which validates them all at once.
type ReplayOption interface{ applyReplay(*replayConfig) }

type replayOptionFunc func(*replayConfig)

func (f replayOptionFunc) applyReplay(c *replayConfig) { f(c) }

// replayConfig is what the options of one [Replay] set; newReplayConfig
// validates it and fills in the defaults.
type replayConfig struct {
	Topic          string // the DLQ topic, Replay's argument
	Filter         Filter
	Rate           float64
	DryRun         bool
	Force          bool
	Group          string
	ProduceTimeout time.Duration
	OnRecord       func(p *Parked)
	Logger         *slog.Logger
}

// ReplayFilter selects the parked jobs to replay; by default, and with
// the zero Filter, all. Records it does not select are passed over, and
// progress moves past them.
func ReplayFilter(f Filter) ReplayOption {
	return replayOptionFunc(func(c *replayConfig) { c.Filter = f })
}

// ReplayRate caps replayed records per second; 0, the default, means no
// cap. Records the filter passes over do not count.
func ReplayRate(perSecond float64) ReplayOption {
	return replayOptionFunc(func(c *replayConfig) { c.Rate = perSecond })
}

// ReplayDryRun makes Replay read and filter as a real run would, from
// the saved progress, and report what it would replay, without producing
// or saving progress.
func ReplayDryRun() ReplayOption {
	return replayOptionFunc(func(c *replayConfig) { c.DryRun = true })
}

// ReplayForce replays selected jobs even when they were replayed before
// (they have replay markers), and starts at the filter's first offset
// rather than at the saved progress. Without it, a job is replayed at
// most once, whatever the filters of earlier replays: jobs already
// replayed are passed over and counted in ReplayStats.AlreadyReplayed.
// A forced replay writes markers too, and saves progress as usual: after
// an interrupted forced replay, the same replay without ReplayForce
// finishes the rest.
func ReplayForce() ReplayOption {
	return replayOptionFunc(func(c *replayConfig) { c.Force = true })
}

// ReplayProgressGroup names the consumer group whose committed offsets
// on the DLQ topic hold the replay's progress. Default (and with ""):
// [ReplayGroup](topic, filter), so rerunning the same replay resumes it
// and a replay with another filter starts afresh. Name another group to
// start over.
func ReplayProgressGroup(name string) ReplayOption {
	return replayOptionFunc(func(c *replayConfig) { c.Group = name })
}

// ReplayProduceTimeout bounds re-producing one record, and saving
// progress after it. Default [ProduceTimeoutDefault].
func ReplayProduceTimeout(d time.Duration) ReplayOption {
	return replayOptionFunc(func(c *replayConfig) { c.ProduceTimeout = d })
}

// ReplayOnRecord sets a function called with each selected record after
// it was replayed and its progress saved (in a dry run: after it was
// selected); p.Replays ends with this replay. It runs on Replay's
// goroutine.
func ReplayOnRecord(fn func(p *Parked)) ReplayOption {
	return replayOptionFunc(func(c *replayConfig) { c.OnRecord = fn })
}

// ReplayLogger sets the logger that receives, at Info level, a line per
// replayed job (the first [ReplayLogLimit] of a run, then one line
// saying the rest are not logged one by one) and a summary at the end;
// at Warn, a line for each record of the topic that is not a DLQ
// envelope; at Error, each job that cannot be replayed. Default
// slog.Default().
func ReplayLogger(l *slog.Logger) ReplayOption {
	return replayOptionFunc(func(c *replayConfig) { c.Logger = l })
}

// newReplayConfig applies opts for a replay of topic and validates the
// result: the error lists every wrong option, each with what to give.
func newReplayConfig(topic string, opts []ReplayOption) (replayConfig, error) {
	c := replayConfig{Topic: topic}
	var errs []error
	for i, o := range opts {
		if o == nil {
			errs = append(errs, fmt.Errorf("nil ReplayOption (option %d): remove it or give an option", i))
			continue
		}
		o.applyReplay(&c)
	}
	if c.Topic == "" {
		errs = append(errs, errors.New("no DLQ topic given: name the topic to replay from, such as \"images.dlq\""))
	}
	if c.Rate < 0 || math.IsNaN(c.Rate) || math.IsInf(c.Rate, 0) {
		errs = append(errs, fmt.Errorf("ReplayRate(%v): want 0 (no cap) or a positive number", c.Rate))
	}
	if c.ProduceTimeout < 0 {
		errs = append(errs, fmt.Errorf("ReplayProduceTimeout(%v): want a positive duration, or leave it out for %v", c.ProduceTimeout, ProduceTimeoutDefault))
	}
	if len(errs) > 0 {
		for i, e := range errs {
			errs[i] = fmt.Errorf("dlq: replay: %w", e)
		}
		return c, errors.Join(errs...)
	}
	if c.ProduceTimeout == 0 {
		c.ProduceTimeout = ProduceTimeoutDefault
	}
	if c.Group == "" {
		c.Group = ReplayGroup(c.Topic, c.Filter)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c, nil
}

// ReplayStats reports what [Replay] did. It is valid, as far as the replay
// got, even when Replay returns an error.
type ReplayStats struct {
	// Group is the consumer group holding the progress.
	Group string
	// Read counts DLQ records read, replay markers not included.
	Read int
	// Replayed counts records re-produced to their source topic with
	// their progress saved; in a dry run, records that would be.
	Replayed int
	// Filtered counts records read but not selected by the filter.
	Filtered int
	// AlreadyReplayed counts selected records passed over because an
	// earlier replay replayed them (they have a replay marker; see
	// [ReplayForce]).
	AlreadyReplayed int
	// Malformed counts records that are not DLQ envelopes; they are
	// passed over.
	Malformed int
	// SourceGone counts records the broker wrote to a share group's
	// dead-letter topic (Envelope.Broker) whose source record is gone
	// (retention, a deleted topic): the broker keeps neither the job's
	// headers nor its job ID, so replaying its copy would make a new job
	// the idempotency middleware cannot tell from the original. They are
	// passed over, stay in the DLQ, and are each logged at Error level.
	SourceGone int
	// ValueGone counts jobs parked without their value (too large for the
	// DLQ topic, [HeaderValueOmitted]) whose source record is gone, so
	// their value cannot be read back: they are passed over, and stay in
	// the DLQ. Each is logged at Error level.
	ValueGone int
	// Partitions holds, per DLQ partition read, where the run started,
	// where it stands and where it stops.
	Partitions map[int32]PartitionProgress
}

// PartitionProgress is a replay's position in one DLQ partition.
type PartitionProgress struct {
	// Start is the offset this run started at: the saved progress when
	// there was some (Resumed), else the later of the log start and
	// Filter.Offsets.From.
	Start int64
	// Next is the next offset to read; everything before it is done.
	Next int64
	// End is where this run stops: the high-water mark when the run
	// started (or Filter.Offsets.End when lower). Jobs parked during the
	// run, such as replayed jobs that fail again, are left for the next
	// run.
	End int64
	// Resumed reports whether Start came from saved progress.
	Resumed bool
}

// ReplayGroup returns the default progress group of a replay of topic with
// filter f: "shareq-dlq-replay.<topic>" for the zero filter, else that
// followed by "." and a short hash of the filter.
func ReplayGroup(topic string, f Filter) string {
	g := ReplayGroupPrefix + topic
	if s := f.String(); s != "all" {
		sum := sha256.Sum256([]byte(s))
		g += "." + hex.EncodeToString(sum[:4])
	}
	return g
}

// Replay re-produces parked jobs from a DLQ topic to the topics they came
// from, so the workers run them again. A record the broker wrote to a
// share group's dead-letter topic (Envelope.Broker) is replayed as its
// source record, read back from the source topic with its headers and
// job ID; when that is gone it is passed over and counted in
// ReplayStats.SourceGone. Each job gets its original key,
// value and headers (the envelope headers removed), a [handler.JobIDHeader]
// header (its original one, or "sourcetopic/partition/offset" as
// [handler.Job.ID] computed it when it had none), and a
// [HeaderReplayedFrom] header naming the DLQ record. A job parked without
// its value ([HeaderValueOmitted]) gets the value of its source record,
// read through a second client made from cl's options; when that record
// is gone (retention), the job is passed over and counted in
// ReplayStats.ValueGone. With Filter.JobID set, Replay matches a broker
// record on the job ID of its source record (see [Filter]): at the first
// broker record whose source location is not that ID, it finds the
// topic's records of that job ID as [List] does, reading the source
// records back in batches.
//
// Replay reads each selected partition from the saved progress up to the
// high-water mark it finds at the start, and returns at that mark (it
// does not wait for new records). It first reads that window for replay
// markers, then handles the records one at a time, in offset order
// within a partition: re-produce, wait for the broker's acknowledgement,
// write a replay marker into the record's own DLQ partition (see
// [HeaderReplayedOffset]) and wait for its acknowledgement, then save
// progress by committing the next offset for the consumer group
// of [ReplayProgressGroup] on the DLQ topic. Passed-over records move the progress too,
// saved with the next commit.
//
// Once: a record with a marker was replayed, by this or any earlier
// replay whatever its filter or group, and is passed over unless
// [ReplayForce] is given. Markers live in Kafka beside the records they mark
// (a marker follows its record in the partition, so reading a window of
// a partition up to its end finds the markers of every record in the
// window) and are written by a second client made from cl's options with
// a manual partitioner; the client needs Write on the DLQ topic (also on
// a broker dead-letter topic, "dlq.<group>").
//
// Resuming: cancelling ctx stops Replay before its next record; a record
// already being produced is finished, marked and committed (within
// [ReplayProduceTimeout]) first. Replay then returns ctx's error, and the next
// Replay with the same options continues where it stopped. No job is
// lost: the marker is written, and progress committed, only after the
// job's produce was acknowledged. A job is replayed twice only when
// Replay dies (or its marker's produce fails) between the job's
// acknowledgement and its marker's: the next run finds no marker and
// replays it again. Both copies carry the same job ID, so the idempotency
// middleware's claim row runs it once. At most one job per interruption
// is replayed twice.
//
// Partitions: a replayed job goes where [enqueue] would send it, by
// [enqueue.Partitioner]: a job with a key to its key's partition (murmur2
// of the key, as franz-go's default partitioner and Kafka's Java client
// choose), so jobs of one key stay on one partition in replay order; a job
// without a key to the next partition of its source topic, round-robin
// from a random one, not to the partition it was parked from. A replayed
// backlog is so spread over the topic's partitions, and so over the share
// group's workers, as a burst of enqueued jobs is.
//
// Replay reads through cl, with the conditions given for [List]. It
// produces the jobs through cl when cl was made with
// [enqueue.ProducerOpts] (consecutive Replay calls on it then continue
// one round-robin), else through a client made from cl's options with
// them, closed when Replay returns; either way cl's producer settings
// apply (the default idempotent producer with acks from all replicas is
// right).
func Replay(ctx context.Context, cl *kgo.Client, topic string, opts ...ReplayOption) (ReplayStats, error) {
	c, err := newReplayConfig(topic, opts)
	if err != nil {
		return ReplayStats{}, err
	}
	if err := checkReader(cl, topic); err != nil {
		return ReplayStats{}, err
	}
	adm := kadm.NewClient(cl)
	r := &replayer{read: cl, adm: adm, com: kadmCommitter{adm}}
	if spreads(cl) {
		r.prod = cl
	}
	return r.run(ctx, c)
}

// spreads reports whether cl partitions records as [enqueue.Partitioner]
// does: a replay then produces through cl itself.
func spreads(cl *kgo.Client) bool {
	return reflect.TypeOf(cl.OptValue(kgo.RecordPartitioner)) == reflect.TypeOf(enqueue.Partitioner())
}

// producer returns the producer of replayed jobs: when none was given, a
// client made from the reading client's options with
// [enqueue.ProducerOpts], so that jobs go to the partitions enqueue would
// choose (franz-go's default partitioner would put a whole replay on one
// partition, and so on one worker).
func (rp *replayer) producer() (Producer, error) {
	if rp.prod == nil {
		cl, err := kgo.NewClient(slices.Concat(rp.read.Opts(), enqueue.ProducerOpts())...)
		if err != nil {
			return nil, fmt.Errorf("dlq: replay: client for replayed jobs: %w", err)
		}
		rp.prod, rp.prodClient = cl, cl
	}
	return rp.prod, nil
}

// source returns the client that reads source records, made from the
// reading client's options when first needed (that one is reading the
// DLQ topic).
func (rp *replayer) source() (*kgo.Client, error) {
	if rp.src == nil {
		src, err := kgo.NewClient(rp.read.Opts()...)
		if err != nil {
			return nil, err
		}
		rp.src = src
	}
	return rp.src, nil
}

// restore puts the source record's key, value and headers in a broker
// dead-letter record p.
func (rp *replayer) restore(ctx context.Context, p *Parked) error {
	src, err := rp.source()
	if err != nil {
		return err
	}
	return restore(ctx, src, p)
}

// sourceValue reads the value of a job parked without it from its source
// record.
func (rp *replayer) sourceValue(ctx context.Context, p *Parked) ([]byte, error) {
	src, err := rp.source()
	if err != nil {
		return nil, err
	}
	rec, err := readOne(ctx, src, p.SourceTopic, p.SourcePartition, p.SourceOffset)
	if err != nil {
		return nil, err
	}
	if !bytes.Equal(rec.Key, p.Key) || len(rec.Value) != p.OmittedValueSize {
		return nil, fmt.Errorf("%w: the record at %s is not the job (key or value size differ)", ErrNoRecord, sourceID(p.SourceTopic, p.SourcePartition, p.SourceOffset))
	}
	return rec.Value, nil
}

func (rp *replayer) closeSource() {
	if rp.src != nil {
		rp.src.Close()
		rp.src = nil
	}
	if rp.markClient != nil {
		rp.markClient.Close()
		rp.mark, rp.markClient = nil, nil
	}
	if rp.prodClient != nil {
		rp.prodClient.Close()
		rp.prod, rp.prodClient = nil, nil
	}
}

// committer saves and loads replay progress. The kadm one commits
// offsets for a group that has no members; tests wrap it to fail.
type committer interface {
	fetch(ctx context.Context, group, topic string) (map[int32]int64, error)
	commit(ctx context.Context, group, topic string, offsets map[int32]int64, meta string) error
}

type kadmCommitter struct{ adm *kadm.Client }

func (k kadmCommitter) fetch(ctx context.Context, group, topic string) (map[int32]int64, error) {
	rs, err := k.adm.FetchOffsetsForTopics(ctx, group, topic)
	// A broker whose offsets topic is still being created answers
	// COORDINATOR_NOT_AVAILABLE for a while: wait for it, within reason.
	for try := 0; try < 40 && err != nil && kerr.IsRetriable(err) && ctx.Err() == nil; try++ {
		t := time.NewTimer(250 * time.Millisecond)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
		rs, err = k.adm.FetchOffsetsForTopics(ctx, group, topic)
	}
	if errors.Is(err, kerr.GroupIDNotFound) {
		return nil, nil // no progress saved yet
	}
	if err != nil {
		return nil, err
	}
	out := make(map[int32]int64)
	for p, r := range rs[topic] {
		if r.Err != nil {
			return nil, fmt.Errorf("partition %d: %w", p, r.Err)
		}
		if r.At >= 0 {
			out[p] = r.At
		}
	}
	return out, nil
}

func (k kadmCommitter) commit(ctx context.Context, group, topic string, offsets map[int32]int64, meta string) error {
	var os kadm.Offsets
	for p, at := range offsets {
		os.Add(kadm.Offset{Topic: topic, Partition: p, At: at, LeaderEpoch: -1, Metadata: meta})
	}
	return k.adm.CommitAllOffsets(ctx, group, os)
}

type replayer struct {
	read *kgo.Client
	adm  *kadm.Client
	// prod produces replayed jobs; when nil, a client made from read's
	// options with enqueue's partitioner when first needed (prodClient).
	prod       Producer
	prodClient *kgo.Client
	com        committer
	src        *kgo.Client // reads source records; made when first needed
	// mark writes replay markers to a given partition; when nil, a
	// client with a manual partitioner made from read's options when
	// first needed (markClient).
	mark       Producer
	markClient *kgo.Client
}

// marker returns the producer of replay markers.
func (rp *replayer) marker() (Producer, error) {
	if rp.mark == nil {
		cl, err := kgo.NewClient(slices.Concat(rp.read.Opts(), []kgo.Opt{kgo.RecordPartitioner(kgo.ManualPartitioner())})...)
		if err != nil {
			return nil, err
		}
		rp.mark, rp.markClient = cl, cl
	}
	return rp.mark, nil
}

// run runs a replay; it closes the clients it made on the way out.
func (rp *replayer) run(ctx context.Context, opts replayConfig) (ReplayStats, error) {
	defer rp.closeSource()
	log := opts.Logger
	topic, f := opts.Topic, opts.Filter
	stats := ReplayStats{Group: opts.Group, Partitions: map[int32]PartitionProgress{}}

	ss, err := spans(ctx, rp.adm, topic, &f)
	if err != nil {
		return stats, err
	}
	saved, err := rp.com.fetch(ctx, opts.Group, topic)
	if err != nil {
		return stats, fmt.Errorf("dlq: replay: load progress from group %s: %w", opts.Group, err)
	}
	for p, s := range ss {
		pp := PartitionProgress{Start: s.next, End: s.end}
		if at, ok := saved[p]; ok && !opts.Force {
			switch {
			case at >= s.next:
				pp.Start, pp.Resumed = at, true
				s.next = at
				ss[p] = s
			case at >= f.Offsets.From:
				log.LogAttrs(ctx, slog.LevelWarn, "dlq: replay: records were deleted by retention before they were replayed",
					slog.String("topic", topic), slog.Int("partition", int(p)),
					slog.Int64("saved_progress", at), slog.Int64("log_start", s.next))
			}
		}
		pp.Next = pp.Start
		stats.Partitions[p] = pp
	}

	meta := "shareq dlq replay: " + f.String()
	pending := map[int32]int64{}
	save := func() error {
		if opts.DryRun || len(pending) == 0 {
			return nil
		}
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), opts.ProduceTimeout)
		defer cancel()
		if err := rp.com.commit(cctx, opts.Group, topic, pending, meta); err != nil {
			return err
		}
		clear(pending)
		return nil
	}
	advance := func(r *kgo.Record) {
		pending[r.Partition] = r.Offset + 1
		pp := stats.Partitions[r.Partition]
		pp.Next = r.Offset + 1
		stats.Partitions[r.Partition] = pp
	}
	var pace pacer
	if opts.Rate > 0 && !opts.DryRun {
		pace.interval = time.Duration(float64(time.Second) / opts.Rate)
	}
	ms := marks{}
	if !opts.Force {
		// The markers of the records in ss are after them, up to the
		// high-water mark (past Filter.Offsets.End when it is set).
		wide, err := markSpans(ctx, rp.adm, topic, &f)
		if err != nil {
			return stats, err
		}
		for p, s := range wide {
			if n, ok := ss[p]; ok {
				s.next = n.next
				wide[p] = s
			} else {
				delete(wide, p)
			}
		}
		if ms, err = readMarks(ctx, rp.read, topic, wide); err != nil {
			return stats, fmt.Errorf("dlq: replay: read replay markers of %s: %w", topic, err)
		}
	}
	replayed := func(p *Parked) {
		stats.Replayed++
		switch {
		case stats.Replayed <= ReplayLogLimit:
			attrs := []slog.Attr{slog.String("record", p.Location()), slog.String("job_id", p.JobID()), slog.String("reason", p.Reason)}
			if m, ok := p.LastReplay(); ok && !opts.DryRun {
				attrs = append(attrs, slog.String("to", sourceID(m.Topic, m.Partition, m.Offset)))
			} else {
				attrs = append(attrs, slog.String("to", p.SourceTopic))
			}
			msg := "dlq: replayed job"
			if opts.DryRun {
				msg = "dlq: replay (dry run): would replay job"
			}
			log.LogAttrs(ctx, slog.LevelInfo, msg, attrs...)
		case stats.Replayed == ReplayLogLimit+1:
			log.LogAttrs(ctx, slog.LevelInfo, "dlq: replay: more jobs replayed; not logging each (the summary counts them)",
				slog.Int("limit", ReplayLogLimit))
		}
		if opts.OnRecord != nil {
			opts.OnRecord(p)
		}
	}

	var byID map[string]bool // see brokerJobs; found when first needed
	err = read(ctx, rp.read, topic, ss, func(r *kgo.Record) error {
		if IsMarker(r) {
			advance(r)
			return nil
		}
		stats.Read++
		p, err := Parse(r)
		if err != nil {
			stats.Malformed++
			log.LogAttrs(ctx, slog.LevelWarn, "dlq: replay: passing over a record that is not a DLQ envelope",
				slog.String("record", sourceID(r.Topic, r.Partition, r.Offset)), slog.String("error", err.Error()))
			advance(r)
			return nil
		}
		if f.matchesEnvelope(&p) && f.needsSource(&p) {
			// Its job ID is in its source record: restore it when it is
			// one of the jobs found with that ID.
			if byID == nil {
				if byID, err = rp.brokerJobs(ctx, topic, f); err != nil {
					return err
				}
			}
			if byID[sourceID(p.Topic, p.Partition, p.Offset)] {
				if err := rp.restore(ctx, &p); err != nil && ctx.Err() != nil {
					return ctx.Err()
				}
			}
		}
		if !f.matches(&p) {
			stats.Filtered++
			advance(r)
			return nil
		}
		p.Replays = ms.of(p.Partition, p.Offset)
		if p.Replayed() && !opts.Force {
			stats.AlreadyReplayed++
			advance(r)
			return nil
		}
		if opts.DryRun {
			advance(r)
			replayed(&p)
			return nil
		}
		// Stop between records, never inside one.
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := pace.wait(ctx); err != nil {
			return err
		}
		if p.Broker && !p.Restored {
			if err := rp.restore(ctx, &p); err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				stats.SourceGone++
				log.LogAttrs(ctx, slog.LevelError, "dlq: replay: passing over a job the broker dead-lettered: its source record, with its headers and job ID, cannot be read",
					slog.String("record", p.Location()),
					slog.String("source", sourceID(p.SourceTopic, p.SourcePartition, p.SourceOffset)), slog.String("error", err.Error()))
				advance(r)
				return nil
			}
		}
		if p.ValueOmitted {
			v, err := rp.sourceValue(ctx, &p)
			if err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				stats.ValueGone++
				log.LogAttrs(ctx, slog.LevelError, "dlq: replay: passing over a job parked without its value: its source record cannot be read",
					slog.String("record", p.Location()), slog.String("job_id", p.JobID()),
					slog.String("source", sourceID(p.SourceTopic, p.SourcePartition, p.SourceOffset)), slog.String("error", err.Error()))
				advance(r)
				return nil
			}
			p.Value = v
		}
		prod, err := rp.producer()
		if err != nil {
			return err
		}
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), opts.ProduceTimeout)
		res := prod.ProduceSync(pctx, replayRecord(&p))
		cancel()
		perr := res.FirstErr()
		if perr == nil && len(res) == 0 {
			perr = errors.New("producer returned no result")
		}
		if perr != nil {
			return fmt.Errorf("dlq: replay %s to %s: %w", p.Location(), p.SourceTopic, perr)
		}
		at := res[0].Record
		m, merr := rp.writeMarker(ctx, &p, at, opts.ProduceTimeout)
		advance(r)
		if merr != nil {
			// The job is replayed, but nothing says so: another replay
			// (other filters, another group) replays it again, with the
			// same job ID. Save the progress all the same, so that this
			// one, run again, does not.
			stats.Replayed++
			serr := save()
			return errors.Join(fmt.Errorf("dlq: replayed %s to %s/%d/%d but could not write its replay marker: %w; a replay with other filters may replay it again, with the same job ID %s",
				p.Location(), at.Topic, at.Partition, at.Offset, merr, p.JobID()), serr)
		}
		p.Replays = append(p.Replays, m)
		if err := save(); err != nil {
			stats.Replayed++
			return fmt.Errorf("dlq: replayed %s to %s but could not save progress in group %s: %w; its replay marker keeps a later run from replaying it again",
				p.Location(), p.SourceTopic, opts.Group, err)
		}
		replayed(&p)
		return nil
	})
	if serr := save(); serr != nil {
		err = errors.Join(err, fmt.Errorf("dlq: replay: save progress in group %s: %w", opts.Group, serr))
	}
	if err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		err = fmt.Errorf("dlq: replay stopped, progress saved in group %s (run again to resume): %w", opts.Group, err)
	}
	level, msg := slog.LevelInfo, "dlq: replay done"
	switch {
	case err != nil:
		level, msg = slog.LevelWarn, "dlq: replay stopped early"
	case opts.DryRun:
		msg = "dlq: replay (dry run) done"
	}
	log.LogAttrs(context.WithoutCancel(ctx), level, msg,
		slog.String("topic", topic), slog.String("filter", f.String()), slog.String("group", opts.Group), slog.Bool("force", opts.Force),
		slog.Int("replayed", stats.Replayed), slog.Int("read", stats.Read), slog.Int("already_replayed", stats.AlreadyReplayed),
		slog.Int("filtered", stats.Filtered), slog.Int("malformed", stats.Malformed),
		slog.Int("source_gone", stats.SourceGone), slog.Int("value_gone", stats.ValueGone))
	return stats, err
}

// brokerJobs returns the DLQ locations ("topic/partition/offset") of the
// broker dead-letter records of topic whose source records hold the job
// ID f selects: [List] through the source client (the reading one is
// busy) reads the source records back in batches, where restoring each
// record on its own would read them one by one.
func (rp *replayer) brokerJobs(ctx context.Context, topic string, f Filter) (map[string]bool, error) {
	src, err := rp.source()
	if err != nil {
		return nil, err
	}
	ps, err := List(ctx, src, topic, f, 0)
	if err != nil {
		return nil, fmt.Errorf("dlq: replay: find the broker's dead-letter records of job ID %q: %w", f.JobID, err)
	}
	out := map[string]bool{}
	for i := range ps {
		if ps[i].Broker && ps[i].Restored {
			out[ps[i].Location()] = true
		}
	}
	return out, nil
}

// writeMarker writes the replay marker of p, replayed to at, into p's DLQ
// partition and waits for its acknowledgement.
func (rp *replayer) writeMarker(ctx context.Context, p *Parked, at *kgo.Record, timeout time.Duration) (ReplayMark, error) {
	prod, err := rp.marker()
	if err != nil {
		return ReplayMark{}, err
	}
	now := time.Now()
	mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	res := prod.ProduceSync(mctx, markerRecord(p, at, now))
	err = res.FirstErr()
	if err == nil && len(res) == 0 {
		err = errors.New("producer returned no result")
	}
	if err != nil && acl.Denied(err) {
		var bootstrap string
		if seeds, ok := rp.read.OptValue(kgo.SeedBrokers).([]string); ok && len(seeds) > 0 {
			bootstrap = seeds[0]
		}
		err = fmt.Errorf("%w: %s", err, acl.Missing(acl.Right{Op: "Write", Resource: acl.Topic, Name: p.Topic}, bootstrap, nil))
	}
	if err != nil {
		return ReplayMark{}, err
	}
	mr := res[0].Record
	if mr.Partition != p.Partition {
		return ReplayMark{}, fmt.Errorf("the marker went to partition %d, not %d (the marker producer must partition manually)", mr.Partition, p.Partition)
	}
	return ReplayMark{At: now, Topic: at.Topic, Partition: at.Partition, Offset: at.Offset, Marker: mr.Offset}, nil
}

// replayRecord returns the record that re-queues p in its source topic.
func replayRecord(p *Parked) *kgo.Record {
	hs := make([]kgo.RecordHeader, 0, len(p.Headers)+2)
	hasID := false
	for _, h := range p.Headers {
		switch h.Key {
		case HeaderReplayedFrom:
			continue // replaced below
		case handler.JobIDHeader:
			hasID = hasID || len(h.Value) > 0
		}
		hs = append(hs, h)
	}
	if !hasID {
		hs = append(hs, kgo.RecordHeader{Key: handler.JobIDHeader, Value: []byte(p.JobID())})
	}
	hs = append(hs, kgo.RecordHeader{Key: HeaderReplayedFrom, Value: []byte(p.Location())})
	return &kgo.Record{Topic: p.SourceTopic, Key: p.Key, Value: p.Value, Headers: hs}
}

// pacer spaces calls to wait by interval; the zero pacer never waits.
type pacer struct {
	interval time.Duration
	next     time.Time
}

func (p *pacer) wait(ctx context.Context) error {
	if p.interval <= 0 {
		return nil
	}
	now := time.Now()
	if d := p.next.Sub(now); d > 0 {
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		now = p.next
	}
	p.next = now.Add(p.interval)
	return nil
}
