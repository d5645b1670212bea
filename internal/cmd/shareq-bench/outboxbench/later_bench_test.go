package outboxbench

// Jobs for later against River, on the test Postgres (no Kafka: nothing
// is relayed):
//
//	SHAREQ_TEST_DATABASE_URL=$(scripts/postgres.sh url) \
//	  go test -run '^$' -bench 'Scheduled|Unique' -benchtime 3000x ./internal/cmd/shareq-bench/outboxbench/
//
// BenchmarkScheduledEnqueue: a business row and a job due in an hour in
// one transaction, shareq's EnqueueJobTx with pgoutbox.In against River's
// InsertTx with InsertOpts.ScheduledAt.
//
// BenchmarkUniqueEnqueue: the same with a unique job, shareq's
// pgoutbox.Unique(key) against River's unique insert by the same key
// (UniqueOpts.ByArgs on an args type whose one `river:"unique"` field is
// the key): a fresh key every time (each enqueue writes a job), and one
// key every time (each enqueue is a duplicate of a job written before the
// timing, and writes no job).
//
// Both run one transaction at a time and benchParallelism at once,
// interleaved (internal/benchcmp), on one pool, after warmUp transactions
// of each side; both report each side's rate and shareq/river, and check
// at the end what each side wrote.

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/shareq/shareq/enqueue"
	"github.com/shareq/shareq/enqueue/pgoutbox"
	"github.com/shareq/shareq/internal/benchcmp"
)

// warmUp is how many transactions each side runs, untimed, before the
// first timed one: the tables, their indexes and the pool's connections
// (and their prepared statements) warm on both sides alike.
const warmUp = 200

// uniqueArgs is the River job of the unique comparison: River hashes the
// kind and the fields tagged unique (Key alone here) into the job's
// unique key, as shareq is given Key.
type uniqueArgs struct {
	Key  string `json:"key" river:"unique"`
	User string `json:"user"`
	N    int    `json:"n"`
}

func (uniqueArgs) Kind() string { return "shareq_bench_unique" }

// warm runs n transactions of each op, one at a time.
func warm(b *testing.B, n int, ops ...func() error) {
	b.Helper()
	for _, op := range ops {
		for range n {
			if err := op(); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// counts returns the rows of the outbox, of River's jobs and of the
// business table.
func counts(b *testing.B, pool *pgxpool.Pool, riverSchema, where string) (outbox, jobs, users int64) {
	b.Helper()
	err := pool.QueryRow(b.Context(), "SELECT (SELECT count(*) FROM "+pgoutbox.Table+" "+where+"), (SELECT count(*) FROM "+
		pgx.Identifier{riverSchema, "river_job"}.Sanitize()+"), (SELECT count(*) FROM "+UsersTable+")").Scan(&outbox, &jobs, &users)
	if err != nil {
		b.Fatal(err)
	}
	return outbox, jobs, users
}

func BenchmarkScheduledEnqueue(b *testing.B) {
	pool := benchDB(b)
	rc, riverSchema := riverClient(b, pool)
	ctx := b.Context()
	topic := "welcome" // no relay runs: the topic need not exist
	var n, shareqN, riverN atomic.Int64
	shareq := func() error {
		shareqN.Add(1)
		return SignupTx(ctx, pool, int(n.Add(1)), func(tx pgx.Tx, v Signup) error {
			_, err := pgoutbox.EnqueueJobTx(ctx, tx, enqueue.NewJob(topic, v), pgoutbox.In(time.Hour))
			return err
		})
	}
	riv := func() error {
		riverN.Add(1)
		return SignupTx(ctx, pool, int(n.Add(1)), func(tx pgx.Tx, v Signup) error {
			_, err := rc.InsertTx(ctx, tx, v, &river.InsertOpts{ScheduledAt: time.Now().Add(time.Hour)})
			return err
		})
	}
	warm(b, warmUp, riv, shareq)
	for _, par := range []int{1, benchParallelism} {
		b.Run(benchcmp.ParName(par), func(b *testing.B) { benchcmp.Interleave(b, par, "river", riv, "shareq", shareq) })
	}
	// Every job of both sides waits for later.
	outbox, jobs, users := counts(b, pool, riverSchema, "WHERE due_at > now() + interval '50 minutes'")
	var scheduled int64
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{riverSchema, "river_job"}.Sanitize()+
		" WHERE state = 'scheduled' AND scheduled_at > now() + interval '50 minutes'").Scan(&scheduled); err != nil {
		b.Fatal(err)
	}
	if outbox != shareqN.Load() || jobs != riverN.Load() || scheduled != jobs || users != outbox+jobs {
		b.Fatalf("outbox rows due later %d, River jobs %d (scheduled later %d), users %d; want %d, %d and their sum",
			outbox, jobs, scheduled, users, shareqN.Load(), riverN.Load())
	}
}

func BenchmarkUniqueEnqueue(b *testing.B) {
	pool := benchDB(b)
	rc, riverSchema := riverClient(b, pool)
	ctx := b.Context()
	topic := "recompute"
	riverOpts := &river.InsertOpts{UniqueOpts: river.UniqueOpts{ByArgs: true}}
	var n, shareqN, riverN, shareqDup, riverDup atomic.Int64
	// sides returns the two sides of one case, each enqueueing the key
	// that key returns.
	sides := func(key func(n int) string) (shareq, riv func() error) {
		shareq = func() error {
			shareqN.Add(1)
			return SignupTx(ctx, pool, int(n.Add(1)), func(tx pgx.Tx, v Signup) error {
				res, err := pgoutbox.EnqueueJobTx(ctx, tx, enqueue.NewJob(topic, v), pgoutbox.Unique(key(v.N)))
				if res.Duplicate {
					shareqDup.Add(1)
				}
				return err
			})
		}
		riv = func() error {
			riverN.Add(1)
			return SignupTx(ctx, pool, int(n.Add(1)), func(tx pgx.Tx, v Signup) error {
				res, err := rc.InsertTx(ctx, tx, uniqueArgs{Key: key(v.N), User: v.User, N: v.N}, riverOpts)
				if err == nil && res.UniqueSkippedAsDuplicate {
					riverDup.Add(1)
				}
				return err
			})
		}
		return shareq, riv
	}
	for _, tc := range []struct {
		name string
		key  func(n int) string
		dup  bool
	}{
		{"fresh-key", func(n int) string { return fmt.Sprintf("recompute/%d", n) }, false},
		{"duplicate-key", func(int) string { return "recompute/the-one" }, true},
	} {
		shareq, riv := sides(tc.key)
		warm(b, warmUp, riv, shareq)
		for _, par := range []int{1, benchParallelism} {
			b.Run(tc.name+"/"+benchcmp.ParName(par), func(b *testing.B) {
				n0, d0 := shareqN.Load()+riverN.Load(), shareqDup.Load()+riverDup.Load()
				benchcmp.Interleave(b, par, "river", riv, "shareq", shareq)
				ops, dups := shareqN.Load()+riverN.Load()-n0, shareqDup.Load()+riverDup.Load()-d0
				if want := map[bool]int64{false: 0, true: ops}[tc.dup]; dups != want {
					b.Fatalf("%d duplicates in %d enqueues, want %d", dups, ops, want)
				}
			})
		}
	}
	// Each side wrote one job per enqueue that was not a duplicate.
	outbox, jobs, users := counts(b, pool, riverSchema, "")
	if outbox != shareqN.Load()-shareqDup.Load() || jobs != riverN.Load()-riverDup.Load() || users != shareqN.Load()+riverN.Load() {
		b.Fatalf("outbox rows %d, River jobs %d, users %d; want %d, %d and %d",
			outbox, jobs, users, shareqN.Load()-shareqDup.Load(), riverN.Load()-riverDup.Load(), shareqN.Load()+riverN.Load())
	}
}
