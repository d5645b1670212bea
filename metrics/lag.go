package metrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

// Defaults for the options of [NewLagCollector].
const (
	// LagTimeoutDefault bounds one DescribeShareGroupOffsets request.
	// Prometheus's default scrape timeout is 10 s.
	LagTimeoutDefault = 5 * time.Second
	// LagMinIntervalDefault is how long a lag reading is reused before a
	// scrape asks the broker again.
	LagMinIntervalDefault = 5 * time.Second
)

// A LagOption configures [NewLagCollector].
type LagOption interface{ applyLag(*LagCollector) }

type lagOptionFunc func(*LagCollector)

func (f lagOptionFunc) applyLag(c *LagCollector) { f(c) }

// LagTimeout bounds each request to the broker; a request that takes
// longer counts as a scrape error. 0 or less means the default,
// [LagTimeoutDefault].
func LagTimeout(d time.Duration) LagOption {
	return lagOptionFunc(func(c *LagCollector) { c.timeout = d })
}

// LagMinInterval sets how long a reading (or a failure) is reused: scrapes
// within d of the last request to the broker export the same values
// without asking again, so several Prometheus servers or a short scrape
// interval do not load the group coordinator. 0 asks on every scrape.
// Default [LagMinIntervalDefault].
func LagMinInterval(d time.Duration) LagOption {
	return lagOptionFunc(func(c *LagCollector) { c.minInterval = d })
}

// LagTopics names the topics the group consumes, so that partitions the
// group has not started on yet have a lag too: every record in the log
// (high watermark minus log start offset), which is what a group whose
// share.auto.offset.reset is earliest will be delivered. Without it such
// partitions have no series, and neither does a group no worker has
// joined yet: an autoscaler that scales a worker Deployment from zero on
// shareq_share_group_lag_total (KEDA) would never start the first worker.
// Use it only for groups with share.auto.offset.reset=earliest
// ([worker.AutoOffsetReset]("earliest"), the setting for a job queue);
// with latest, records produced before the first fetch are never
// delivered, and this would report a backlog no worker will see.
func LagTopics(topics ...string) LagOption {
	return lagOptionFunc(func(c *LagCollector) { c.topics = append(c.topics, topics...) })
}

// LagLogger sets the logger for failed readings (Warn). Default
// slog.Default().
func LagLogger(l *slog.Logger) LagOption {
	return lagOptionFunc(func(c *LagCollector) { c.log = l })
}

// LagCollector is a prometheus.Collector that exports a share group's
// backlog: on each scrape it describes the group's share-partition offsets
// (DescribeShareGroupOffsets, KIP-932 and KIP-1226, Kafka 4.2+) and exports
//
//	shareq_share_group_lag{group,topic,partition}
//	shareq_share_group_start_offset{group,topic,partition}
//	shareq_share_group_lag_total{group,topic}
//	shareq_lag_scrape_errors_total{group}
//
// It starts no goroutine and has nothing to stop: the broker is asked from
// Collect, at most once per [LagMinInterval], with a [LagTimeout]. Make
// one with [NewLagCollector] and register it with a registry. Several
// collectors for different groups may share a registry (group is a const
// label of each). Safe for concurrent use; concurrent scrapes share one
// request.
//
// # Errors
//
// A failed reading does not fail the scrape (which would hide every other
// metric of the process behind one HTTP 500): it adds one to
// shareq_lag_scrape_errors_total, is logged, and the lag series are left
// out of the scrape until a reading succeeds, so dashboards show a gap
// instead of a stale number. A reading in which only some partitions
// failed exports the others (but no shareq_share_group_lag_total for a
// topic with a failed partition: a partial sum would under-report) and
// also counts one error. A group the
// coordinator does not know (no member has joined yet) is not an error: it
// has no series, unless [LagTopics] names its topics.
//
// # Semantics
//
// The lag of a partition is the broker's count of records between the
// share-partition start offset and the high watermark that are not yet
// acknowledged or archived: records waiting to be delivered, and records
// delivered and still locked (being worked on). A partition whose start
// offset is not yet initialized (no member has fetched from it) has no
// series, unless [LagTopics] names its topic: then its lag is every record
// in its log, and it has no start offset series. The start offset is the one the broker last
// persisted; Apache Kafka may persist it lazily, so it can trail the first
// unacknowledged record (kfake moves it at once). The lag is exact on
// both.
type LagCollector struct {
	adm         *kadm.Client
	group       string
	timeout     time.Duration
	minInterval time.Duration
	log         *slog.Logger
	now         func() time.Time
	topics      []string // LagTopics

	lagDesc   *prometheus.Desc
	startDesc *prometheus.Desc
	totalDesc *prometheus.Desc
	errors    prometheus.Counter

	mu      sync.Mutex
	fetched time.Time // zero until the first reading
	metrics []prometheus.Metric
}

var _ prometheus.Collector = (*LagCollector)(nil)

// NewLagCollector returns a collector of group's lag, read through adm.
// adm is the application's: the collector does not close it. It panics if
// adm is nil or group is empty (programmer errors).
func NewLagCollector(adm *kadm.Client, group string, opts ...LagOption) *LagCollector {
	if adm == nil {
		panic("metrics: NewLagCollector: nil *kadm.Client")
	}
	if group == "" {
		panic("metrics: NewLagCollector: empty group")
	}
	c := &LagCollector{
		adm:         adm,
		group:       group,
		timeout:     LagTimeoutDefault,
		minInterval: LagMinIntervalDefault,
		log:         slog.Default(),
		now:         time.Now,
	}
	for _, o := range opts {
		if o != nil {
			o.applyLag(c)
		}
	}
	if c.timeout <= 0 {
		c.timeout = LagTimeoutDefault
	}
	if c.log == nil {
		c.log = slog.Default()
	}
	groupLabel := prometheus.Labels{"group": group}
	c.lagDesc = prometheus.NewDesc(Namespace+"_share_group_lag",
		"Records of a share-partition not yet acknowledged or archived: waiting for delivery or being worked on.",
		[]string{"topic", "partition"}, groupLabel)
	c.startDesc = prometheus.NewDesc(Namespace+"_share_group_start_offset",
		"The share-partition start offset (SPSO) as last persisted: every record before it is acknowledged or archived.",
		[]string{"topic", "partition"}, groupLabel)
	c.totalDesc = prometheus.NewDesc(Namespace+"_share_group_lag_total",
		"Sum of shareq_share_group_lag over a topic's partitions.",
		[]string{"topic"}, groupLabel)
	c.errors = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace:   Namespace,
		Name:        "lag_scrape_errors_total",
		Help:        "Failed readings of a share group's offsets (DescribeShareGroupOffsets).",
		ConstLabels: groupLabel,
	})
	return c
}

// Describe sends the descriptors of the collector's metrics.
func (c *LagCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.lagDesc
	ch <- c.startDesc
	ch <- c.totalDesc
	c.errors.Describe(ch)
}

// Collect reads the group's offsets, or reuses a reading younger than
// [LagMinInterval], and sends the metrics.
func (c *LagCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	if now := c.now(); c.fetched.IsZero() || now.Sub(c.fetched) >= c.minInterval {
		c.metrics = c.read()
		c.fetched = c.now()
	}
	ms := c.metrics
	c.mu.Unlock()
	for _, m := range ms {
		ch <- m
	}
	ch <- c.errors
}

// read asks the broker and returns the metrics to export; it counts and
// logs a failure.
func (c *LagCollector) read() []prometheus.Metric {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	offsets, err := c.describe(ctx)
	if err != nil {
		c.errors.Inc()
		c.log.Warn("shareq: reading share group lag", "group", c.group, "error", err)
		return nil
	}
	var (
		ms      []prometheus.Metric
		totals  = map[string]int64{}
		partial = map[string]bool{} // topics with a failed partition
		failed  error
		nFailed int
	)
	started := map[string]map[int32]bool{}
	for _, o := range offsets {
		if o.Err == nil && o.StartOffset >= 0 && o.Lag >= 0 {
			if started[o.Topic] == nil {
				started[o.Topic] = map[int32]bool{}
			}
			started[o.Topic][o.Partition] = true
		}
	}
	if len(c.topics) > 0 {
		unstarted, err := c.unstarted(ctx, started)
		if err != nil {
			failed = err
			nFailed++
			for _, t := range c.topics {
				partial[t] = true
			}
		}
		// The estimates replace what the broker says of partitions it
		// has no start offset for.
		keep := offsets[:0]
		for _, o := range offsets {
			if o.Err != nil || started[o.Topic][o.Partition] || !slices.Contains(c.topics, o.Topic) {
				keep = append(keep, o)
			}
		}
		offsets = append(keep, unstarted...)
	}
	for _, o := range offsets {
		if o.Err != nil {
			failed = o.Err
			nFailed++
			partial[o.Topic] = true
			continue
		}
		p := strconv.Itoa(int(o.Partition))
		if o.StartOffset >= 0 {
			ms = append(ms, prometheus.MustNewConstMetric(c.startDesc, prometheus.GaugeValue, float64(o.StartOffset), o.Topic, p))
		}
		if o.Lag >= 0 {
			ms = append(ms, prometheus.MustNewConstMetric(c.lagDesc, prometheus.GaugeValue, float64(o.Lag), o.Topic, p))
			totals[o.Topic] += o.Lag
		}
	}
	topics := make([]string, 0, len(totals))
	for t := range totals {
		if !partial[t] {
			topics = append(topics, t)
		}
	}
	sort.Strings(topics)
	for _, t := range topics {
		ms = append(ms, prometheus.MustNewConstMetric(c.totalDesc, prometheus.GaugeValue, float64(totals[t]), t))
	}
	if failed != nil {
		c.errors.Inc()
		c.log.Warn("shareq: reading share group lag: some partitions failed", "group", c.group, "partitions", nFailed, "error", failed)
	}
	return ms
}

// describe returns the group's share offsets sorted by topic and
// partition; none for a group the coordinator does not know.
func (c *LagCollector) describe(ctx context.Context) ([]kadm.ShareOffset, error) {
	described, err := c.adm.DescribeShareGroupOffsets(ctx, c.group)
	if err != nil {
		return nil, fmt.Errorf("describe share group offsets: %w", err)
	}
	d, ok := described[c.group]
	if !ok {
		return nil, nil
	}
	if d.Err != nil {
		if errors.Is(d.Err, kerr.GroupIDNotFound) {
			return nil, nil
		}
		return nil, fmt.Errorf("describe share group offsets: %w", d.Err)
	}
	return d.Offsets.Sorted(), nil
}

// unstarted returns, for the partitions of the LagTopics that started
// does not list, their whole log as the lag (start offset -1): what a
// group with share.auto.offset.reset=earliest will be delivered. A
// partition whose offsets cannot be listed is returned with its error.
func (c *LagCollector) unstarted(ctx context.Context, started map[string]map[int32]bool) ([]kadm.ShareOffset, error) {
	ends, err := c.adm.ListEndOffsets(ctx, c.topics...)
	if err != nil {
		return nil, fmt.Errorf("list end offsets: %w", err)
	}
	var todo []string // topics with a partition the group has not started on
	ends.Each(func(e kadm.ListedOffset) {
		if !started[e.Topic][e.Partition] && !slices.Contains(todo, e.Topic) {
			todo = append(todo, e.Topic)
		}
	})
	var starts kadm.ListedOffsets
	if len(todo) > 0 {
		if starts, err = c.adm.ListStartOffsets(ctx, todo...); err != nil {
			return nil, fmt.Errorf("list start offsets: %w", err)
		}
	}
	var out []kadm.ShareOffset
	ends.Each(func(e kadm.ListedOffset) {
		if started[e.Topic][e.Partition] {
			return
		}
		o := kadm.ShareOffset{Topic: e.Topic, Partition: e.Partition, StartOffset: -1, Err: e.Err}
		if o.Err == nil {
			if s, ok := starts.Lookup(e.Topic, e.Partition); !ok {
				o.Err = errors.New("no log start offset")
			} else if s.Err != nil {
				o.Err = s.Err
			} else {
				o.Lag = max(e.Offset-s.Offset, 0)
			}
		}
		out = append(out, o)
	})
	// A topic that does not exist has no partitions to list.
	for _, t := range c.topics {
		if _, ok := ends[t]; !ok {
			out = append(out, kadm.ShareOffset{Topic: t, Partition: -1, StartOffset: -1, Err: kerr.UnknownTopicOrPartition})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Topic != out[j].Topic {
			return out[i].Topic < out[j].Topic
		}
		return out[i].Partition < out[j].Partition
	})
	return out, nil
}
