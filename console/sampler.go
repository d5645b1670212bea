package console

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/internal/sharegroup"
)

// SampleEveryDefault is the default step of [NewSampler]: a sample of
// every share group each 10 seconds.
const SampleEveryDefault = 10 * time.Second

// The sampler's rings: the last hour at the sampler's step, and the last
// day at a minute.
const (
	fineSpan    = time.Hour
	coarseStep  = time.Minute
	coarseSlots = 24 * 60
)

// A Sampler samples the lag and the oldest waiting job of every share
// group at a fixed step, for the charts of the console it is given to
// ([Charts]). It keeps its samples in memory, in two rings per group of
// fixed size: the last hour at its step and the last day at one minute
// (the largest sample of each minute), 24 bytes a sample: 43 KB a group
// at the default step, 121 KB at 1 s; a group not seen for a day is
// forgotten. A restart starts the charts empty.
//
// Each sample describes the groups as the overview page does, and reads
// the first record of each partition's lag (one short fetch per group
// with lag) for the age of the oldest job not done: waiting, or locked
// by a member. Run it for as long as the console serves; it is
// safe for concurrent use.
type Sampler struct {
	cl    *kgo.Client
	every time.Duration
	fine  int // slots of the fine ring: an hour at every

	now func() time.Time // time.Now; tests set another

	mu      sync.Mutex
	groups  map[string]*groupSamples
	lastErr error     // of the latest round, nil when it went through
	lastAt  time.Time // the latest round's time, zero before the first
	started time.Time // the first round's time, zero before it
}

// groupSamples are one group's rings. A slot holds the bucket it was
// written for: a slot whose bucket is not the one looked for is a gap.
type groupSamples struct {
	fine   []sample // at the sampler's step, the last hour
	coarse []sample // a minute each, the last day: the largest values
	seen   time.Time
}

// sample is a bucket's values. The zero value is an empty slot.
type sample struct {
	bucket int64   // the bucket's start, in Unix seconds; 0: empty
	lag    int64   // -1: unknown
	oldest float64 // seconds; -1: unknown (nothing waiting reads 0)
}

// NewSampler returns a sampler that reads the share groups through cl
// (the application's client, which must consume nothing; the sampler
// does not close it) every step, 1 second to 1 minute (0 means
// [SampleEveryDefault]). The step is also how often the chart pages
// refresh.
func NewSampler(cl *kgo.Client, every time.Duration) (*Sampler, error) {
	if every == 0 {
		every = SampleEveryDefault
	}
	var errs []error
	if cl == nil {
		errs = append(errs, errors.New("console: NewSampler: nil client; give the *kgo.Client the console talks through"))
	}
	if every < time.Second || every > time.Minute {
		errs = append(errs, fmt.Errorf("console: NewSampler: every %v; give 1s to 1m, or 0 for %v", every, SampleEveryDefault))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return newSampler(cl, every, time.Now), nil
}

func newSampler(cl *kgo.Client, every time.Duration, now func() time.Time) *Sampler {
	return &Sampler{cl: cl, every: every, fine: int(fineSpan / every), now: now, groups: map[string]*groupSamples{}}
}

// Run samples every step until ctx ends, then returns nil. A round that
// fails is retried at the next step; the charts show its error.
func (s *Sampler) Run(ctx context.Context) error {
	t := time.NewTicker(s.every)
	defer t.Stop()
	for {
		s.sampleOnce(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// sampleParallel bounds the groups one round samples at once.
const sampleParallel = 8

// oldestTimeout bounds the read of a group's oldest records: a
// partition whose record cannot be read in it (its start offset at the
// end of its log for a moment) is left out.
const oldestTimeout = 5 * time.Second

// sampleOnce takes one round: every share group's lag and oldest job,
// sampleParallel groups at a time, all recorded at the round's start.
// A round that outlasts the step delays the next (the ticker drops the
// ticks missed); it gives up after requestTimeout.
func (s *Sampler) sampleOnce(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	at := s.now()
	adm := kadm.NewClient(s.cl)
	listed, err := adm.ListGroupsByType(ctx, []string{"share"})
	groups := listed.Groups()
	errs := make([]error, len(groups)+1)
	errs[len(groups)] = err
	sem := make(chan struct{}, sampleParallel)
	var wg sync.WaitGroup
	for i, name := range groups {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			lag, oldest, err := s.sampleGroup(ctx, adm, name)
			errs[i] = err
			s.record(name, at, lag, oldest)
		})
	}
	wg.Wait()
	s.endRound(at, errors.Join(errs...))
}

// sampleGroup returns the group's total lag (-1 unknown) and the age
// of its oldest job not done, in seconds (-1 unknown). Partitions
// without a start offset yet count as the group page counts them: the
// records waiting for the group when that is known, else nothing.
func (s *Sampler) sampleGroup(ctx context.Context, adm *kadm.Client, group string) (lag int64, oldest float64, err error) {
	g, err := sharegroup.Describe(ctx, adm, group)
	if err != nil {
		return -1, -1, err
	}
	st, err := sharegroup.Gather(ctx, s.cl, g)
	if err != nil {
		return -1, -1, err
	}
	lag = -1
	if len(st.Partitions) > 0 {
		lag = st.LagAtLeast // TotalLag when known; the group page's "≥ N" otherwise
	}
	at, known, err := s.oldestWaiting(ctx, st)
	switch {
	case err != nil:
		return lag, -1, fmt.Errorf("oldest job of %s: %w", group, err)
	case !known:
		return lag, -1, nil
	case at.IsZero():
		return lag, 0, nil // nothing waiting
	}
	return lag, max(0, s.now().Sub(at).Seconds()), nil
}

// oldestWaiting returns the earliest timestamp of the records that
// start the lag of each partition (the record lag records before its
// end): the oldest job not done when jobs finish in about the order they
// came, and the newest such a job can be otherwise. The start offset
// would name the oldest exactly, but Apache Kafka reports it late, for
// seconds to a minute after the jobs before it are done
// (docs/architecture.md, fact 16), while the lag is exact. Partitions
// whose lag is unknown (no start offset yet) are left out: known is
// false when every partition's is. at is zero when no partition has
// lag.
func (s *Sampler) oldestWaiting(ctx context.Context, st *sharegroup.Status) (at time.Time, known bool, err error) {
	starts := map[string]map[int32]kgo.Offset{}
	want := 0
	for _, p := range st.Partitions {
		if p.Lag == nil || p.HighWatermark == nil {
			continue // not started yet
		}
		known = true
		if *p.Lag == 0 {
			continue
		}
		if starts[p.Topic] == nil {
			starts[p.Topic] = map[int32]kgo.Offset{}
		}
		starts[p.Topic][p.Partition] = kgo.NewOffset().At(*p.HighWatermark - *p.Lag)
		want++
	}
	if want == 0 {
		return time.Time{}, known, nil
	}
	cl, err := kgo.NewClient(append(append([]kgo.Opt{}, s.cl.Opts()...),
		kgo.ConsumePartitions(starts), kgo.FetchMaxWait(200*time.Millisecond), kgo.FetchMaxPartitionBytes(64<<10))...)
	if err != nil {
		return time.Time{}, false, err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, oldestTimeout)
	defer cancel()
	type tp struct {
		topic     string
		partition int32
	}
	seen := map[tp]bool{}
	for len(seen) < want {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			if len(seen) > 0 {
				return at, true, nil
			}
			return time.Time{}, false, err
		}
		if err := fs.Err0(); err != nil {
			return time.Time{}, false, err
		}
		fs.EachRecord(func(r *kgo.Record) {
			k := tp{r.Topic, r.Partition}
			if seen[k] {
				return
			}
			seen[k] = true
			if at.IsZero() || r.Timestamp.Before(at) {
				at = r.Timestamp
			}
		})
	}
	return at, true, nil
}

// record keeps a group's sample taken at t: in its fine slot (the
// latest sample of the step wins) and its coarse slot (the largest of
// the minute).
func (s *Sampler) record(group string, t time.Time, lag int64, oldest float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.groups[group]
	if g == nil {
		g = &groupSamples{fine: make([]sample, s.fine), coarse: make([]sample, coarseSlots)}
		s.groups[group] = g
	}
	g.seen = t
	fb := bucketOf(t, s.every)
	g.fine[slotOf(fb, s.every, s.fine)] = sample{bucket: fb, lag: lag, oldest: oldest}
	cb := bucketOf(t, coarseStep)
	c := &g.coarse[slotOf(cb, coarseStep, coarseSlots)]
	if c.bucket != cb {
		*c = sample{bucket: cb, lag: lag, oldest: oldest}
		return
	}
	c.lag, c.oldest = max(c.lag, lag), max(c.oldest, oldest)
}

// endRound notes a round's end, and forgets the groups not seen for a
// day.
func (s *Sampler) endRound(t time.Time, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lastAt, s.lastErr = t, err
	if s.started.IsZero() {
		s.started = t
	}
	for name, g := range s.groups {
		if t.Sub(g.seen) > 24*time.Hour {
			delete(s.groups, name)
		}
	}
}

// bucketOf is the start of the step-long bucket t falls in, in Unix
// seconds.
func bucketOf(t time.Time, step time.Duration) int64 {
	sec := int64(step / time.Second)
	u := t.Unix()
	return u - u%sec
}

func slotOf(bucket int64, step time.Duration, slots int) int {
	return int(bucket / int64(step/time.Second) % int64(slots))
}

// groupHistory is what the charts of a group get from the sampler.
type groupHistory struct {
	lag, oldest []point
	step        time.Duration
	from, to    time.Time
	lastAt      time.Time // the latest round, zero before the first
	lastErr     error
	// since is set when the sampler started within the range: from is
	// then its start, not the range's, so that the samples it has fill
	// the chart (but from is never less than minSpanSteps steps back).
	since bool
}

// minSpanSteps is the fewest steps a chart of the samples spans.
const minSpanSteps = 60

// history returns the group's samples of the last hour (day false, at
// the sampler's step) or the last day (at a minute), oldest first.
func (s *Sampler) history(group string, day bool) groupHistory {
	step, slots := s.every, s.fine
	if day {
		step, slots = coarseStep, coarseSlots
	}
	now := s.now()
	h := groupHistory{step: step, to: now, from: now.Add(-time.Duration(slots) * step)}
	s.mu.Lock()
	defer s.mu.Unlock()
	h.lastAt, h.lastErr = s.lastAt, s.lastErr
	start := s.started
	if floor := now.Add(-minSpanSteps * s.every); start.After(floor) {
		start = floor
	}
	if !s.started.IsZero() && start.After(h.from) {
		h.from, h.since = start, true
	}
	g := s.groups[group]
	if g == nil {
		return h
	}
	ring := g.fine
	if day {
		ring = g.coarse
	}
	sec := int64(step / time.Second)
	last := bucketOf(now, step)
	for b := last - int64(slots-1)*sec; b <= last; b += sec {
		sm := ring[slotOf(b, step, slots)]
		if sm.bucket != b {
			continue
		}
		at := time.Unix(b, 0).UTC()
		if sm.lag >= 0 {
			h.lag = append(h.lag, point{At: at, V: float64(sm.lag)})
		}
		if sm.oldest >= 0 {
			h.oldest = append(h.oldest, point{At: at, V: sm.oldest})
		}
	}
	return h
}
