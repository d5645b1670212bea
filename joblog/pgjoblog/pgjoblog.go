package pgjoblog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/worker"
)

// Defaults of the options.
const (
	// RetentionDefault is how long runs are kept by default.
	RetentionDefault = 7 * 24 * time.Hour
	// BufferDefault is the default number of runs held in memory.
	BufferDefault = 10000
	// FlushEveryDefault is the default time between two writes.
	FlushEveryDefault = 200 * time.Millisecond
	// BatchRowsDefault is the default number of rows of one write.
	BatchRowsDefault = 1000
	// MaxErrorBytes bounds the error text of a run; a longer one is cut.
	MaxErrorBytes = 2048
)

// table is the job log's table (migration 0008).
const table = "shareq_job_runs"

// DB is what the job log needs of Postgres. A *pgxpool.Pool fits.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Run is one finished delivery of a job, as the job log keeps it.
type Run struct {
	// JobID is the job's ID (handler.Job.ID).
	JobID     string
	Topic     string
	Partition int32
	Offset    int64
	// DeliveryCount is the delivery that ran (1 for the first).
	DeliveryCount int32
	// Outcome is worker.Outcome's name: succeeded, retried, parked...
	Outcome string
	// Ack is worker.Ack's name: accept, release or reject.
	Ack string
	// Started and Ended are when the handler started and when the worker
	// acknowledged the record; Started is Ended less Duration.
	Started, Ended time.Time
	// Duration is how long the handler ran (0 when it did not).
	Duration time.Duration
	// Error is the error's text, at most MaxErrorBytes bytes; "" when
	// the job succeeded.
	Error string
	// Worker is the Kafka client ID of the worker that ran the job, ""
	// before the worker's first member snapshot.
	Worker string
	// TraceID is the W3C trace ID of the job's traceparent header, "" when
	// it has none.
	TraceID string
	// Result is the JSON the handler set (handler.Job.SetResult), nil when
	// none.
	Result json.RawMessage
	// Progress is the last progress the handler reported
	// (handler.Job.Progress), nil when none. Its At is not kept: Runs and
	// Recent return it zero.
	Progress *handler.Progress
}

// An Option configures [New], which validates them all at once.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	retention  time.Duration
	buffer     int
	flushEvery time.Duration
	batchRows  int
	logger     *slog.Logger
	errs       []error
}

// Retention is how long runs are kept: Run drops a day's partition once
// its last run is older. Default [RetentionDefault]; at least a day.
func Retention(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if d < 24*time.Hour {
			c.errs = append(c.errs, fmt.Errorf("Retention: %v is under a day (the table keeps whole days); give 24h or more", d))
		}
		c.retention = d
	})
}

// Buffer is the number of runs held in memory before they are written;
// past it the oldest are dropped. Default [BufferDefault].
func Buffer(n int) Option {
	return optionFunc(func(c *config) {
		if n < 1 {
			c.errs = append(c.errs, fmt.Errorf("Buffer: %d; give 1 or more", n))
		}
		c.buffer = n
	})
}

// FlushEvery is the time between two writes. Default [FlushEveryDefault].
func FlushEvery(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if d <= 0 {
			c.errs = append(c.errs, fmt.Errorf("FlushEvery: %v; give a positive duration", d))
		}
		c.flushEvery = d
	})
}

// BatchRows is the most rows of one write; a buffer that reaches it is
// written at once. Default [BatchRowsDefault].
func BatchRows(n int) Option {
	return optionFunc(func(c *config) {
		if n < 1 {
			c.errs = append(c.errs, fmt.Errorf("BatchRows: %d; give 1 or more", n))
		}
		c.batchRows = n
	})
}

// Logger is where the job log says that writing fails, is back, or drops
// rows. Default slog.Default().
func Logger(l *slog.Logger) Option {
	return optionFunc(func(c *config) {
		if l == nil {
			c.errs = append(c.errs, errors.New("Logger: logger is nil"))
		}
		c.logger = l
	})
}

// Log is the job log: a worker.Observer (and worker.MemberObserver, for
// the worker's name) whose rows [Log.Run] writes. Create it with [New].
type Log struct {
	db  DB
	cfg config

	worker atomic.Pointer[string]

	mu      sync.Mutex
	buf     ring
	dropped int64
	full    chan struct{} // a batch is waiting; buffered, 1

	// jobs are the running jobs, for their progress; guarded by mu.
	jobs map[*handler.Job]time.Time // the At of the progress written last

	running atomic.Bool
	now     func() time.Time
}

var (
	_ worker.Observer       = (*Log)(nil)
	_ worker.MemberObserver = (*Log)(nil)
)

// New returns a job log writing to db. Apply migrations.Up to db first.
func New(db DB, opts ...Option) (*Log, error) {
	if db == nil {
		return nil, errors.New("pgjoblog: db is nil; give a *pgxpool.Pool")
	}
	cfg := config{retention: RetentionDefault, buffer: BufferDefault, flushEvery: FlushEveryDefault, batchRows: BatchRowsDefault, logger: slog.Default()}
	for i, o := range opts {
		if o == nil {
			cfg.errs = append(cfg.errs, fmt.Errorf("nil Option (option %d): remove it or give an option", i))
			continue
		}
		o.apply(&cfg)
	}
	if err := errors.Join(cfg.errs...); err != nil {
		return nil, fmt.Errorf("pgjoblog: %w", err)
	}
	l := &Log{db: db, cfg: cfg, buf: newRing(cfg.buffer), jobs: map[*handler.Job]time.Time{}, full: make(chan struct{}, 1), now: time.Now}
	return l, nil
}

// Dropped returns the number of runs lost since New: dropped from a full
// buffer, or left unwritten when Run stopped with Postgres down.
func (l *Log) Dropped() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.dropped
}

// JobFinished appends the run to the buffer; it never waits for Postgres.
func (l *Log) JobFinished(job *handler.Job, res worker.Result) {
	r := runOf(job, res, l.now())
	if w := l.worker.Load(); w != nil {
		r.Worker = *w
	}
	l.mu.Lock()
	delete(l.jobs, job)
	if l.buf.push(r) {
		l.dropped++
	}
	n := l.buf.len()
	l.mu.Unlock()
	if n >= l.cfg.batchRows {
		select {
		case l.full <- struct{}{}:
		default:
		}
	}
}

// runOf is the row of one finished delivery.
func runOf(job *handler.Job, res worker.Result, ended time.Time) Run {
	r := Run{
		JobID: job.ID(), Topic: job.Topic, Partition: job.Partition, Offset: job.Offset,
		DeliveryCount: job.DeliveryCount, Outcome: res.Outcome.String(), Ack: res.Ack.String(),
		Started: ended.Add(-res.Duration), Ended: ended, Duration: res.Duration,
	}
	if res.Err != nil {
		r.Error = truncate(res.Err.Error(), MaxErrorBytes)
	}
	if tp, ok := job.Header("traceparent"); ok {
		r.TraceID = traceID(tp)
	}
	r.Result = job.Result()
	if p, ok := job.LastProgress(); ok {
		r.Progress = &p
	}
	return r
}

// traceID is the trace-id field of a W3C traceparent value
// (version-traceid-spanid-flags), or "" when tp is not one.
func traceID(tp []byte) string {
	if len(tp) < 55 || tp[2] != '-' || tp[35] != '-' {
		return ""
	}
	return string(tp[3:35])
}

// truncate cuts s to at most n bytes, on a rune boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n]
}

// JobStarted notes the running job, whose progress Run writes (at most
// once a second) until the job finishes.
func (l *Log) JobStarted(job *handler.Job) {
	l.mu.Lock()
	l.jobs[job] = time.Time{}
	l.mu.Unlock()
}

// LockRenewed does nothing.
func (l *Log) LockRenewed(*handler.Job, error) {}

// AckFailed does nothing: the record's next delivery is a run of its own.
func (l *Log) AckFailed(string, int32, error) {}

// MemberStats keeps the worker's client ID, written with each run.
func (l *Log) MemberStats(s worker.MemberStats) {
	if w := l.worker.Load(); w == nil || *w != s.ClientID {
		id := s.ClientID
		l.worker.Store(&id)
	}
}
