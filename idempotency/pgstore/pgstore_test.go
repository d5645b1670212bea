package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/idempotency"
	"github.com/shareq/shareq/idempotency/pgstore"
	"github.com/shareq/shareq/idempotency/storetest"
	"github.com/shareq/shareq/migrations/pgtest"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	pgtest.URL(t)
	storetest.Run(t, func(t *testing.T) idempotency.Store {
		s, _ := setup(t)
		return s
	})
}

// nopDB satisfies pgstore.DB for tests that never reach the database.
type nopDB struct{ pgstore.DB }

func TestNewOptions(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		db      pgstore.DB
		opts    []pgstore.Option
		wantErr string
	}{
		{name: "defaults", db: nopDB{}},
		{name: "nil option", db: nopDB{}, opts: []pgstore.Option{nil}},
		{name: "table", db: nopDB{}, opts: []pgstore.Option{pgstore.Table("jobs_done")}},
		{name: "schema-qualified table", db: nopDB{}, opts: []pgstore.Option{pgstore.Table("app.jobs_done")}},
		{name: "63-byte table", db: nopDB{}, opts: []pgstore.Option{pgstore.Table(strings.Repeat("t", 63))}},
		{name: "nil DB", wantErr: "pgstore: nil DB"},
		{name: "empty table", db: nopDB{}, opts: []pgstore.Option{pgstore.Table("")}, wantErr: `Table("")`},
		{name: "hyphen", db: nopDB{}, opts: []pgstore.Option{pgstore.Table("jobs-done")}, wantErr: `Table("jobs-done")`},
		{name: "upper case", db: nopDB{}, opts: []pgstore.Option{pgstore.Table("JobsDone")}, wantErr: `Table("JobsDone")`},
		{name: "leading digit", db: nopDB{}, opts: []pgstore.Option{pgstore.Table("1jobs")}, wantErr: `Table("1jobs")`},
		{name: "injection", db: nopDB{}, opts: []pgstore.Option{pgstore.Table("t; DROP TABLE x")}, wantErr: "Table("},
		{name: "quoted", db: nopDB{}, opts: []pgstore.Option{pgstore.Table(`"t"`)}, wantErr: "Table("},
		{name: "three parts", db: nopDB{}, opts: []pgstore.Option{pgstore.Table("a.b.c")}, wantErr: `Table("a.b.c")`},
		{name: "empty schema", db: nopDB{}, opts: []pgstore.Option{pgstore.Table(".t")}, wantErr: `Table(".t")`},
		{name: "64-byte table", db: nopDB{}, opts: []pgstore.Option{pgstore.Table(strings.Repeat("t", 64))}, wantErr: "Table("},
		{name: "sweep batch 0", db: nopDB{}, opts: []pgstore.Option{pgstore.SweepBatch(0)}, wantErr: "SweepBatch(0)"},
		{name: "negative statement timeout", db: nopDB{}, opts: []pgstore.Option{pgstore.StatementTimeout(-time.Second)}, wantErr: "StatementTimeout(-1s)"},
		{
			name: "every error reported",
			opts: []pgstore.Option{pgstore.Table("a-b"), pgstore.SweepBatch(-1)}, wantErr: "nil DB|Table(\"a-b\")|SweepBatch(-1)",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, err := pgstore.New(tt.db, tt.opts...)
			if tt.wantErr == "" {
				if err != nil || s == nil {
					t.Fatalf("New = %v, %v; want a store", s, err)
				}
				return
			}
			if err == nil {
				t.Fatal("New succeeded, want an error")
			}
			for _, want := range strings.Split(tt.wantErr, "|") {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q lacks %q", err, want)
				}
			}
		})
	}
}

func TestTx(t *testing.T) {
	t.Parallel()
	s, pool := setup(t)
	ctx := t.Context()
	if tx := pgstore.Tx(ctx); tx != nil {
		t.Fatalf("Tx of a bare context = %v, want nil", tx)
	}
	claimed, err := s.Claim(ctx, "job-1", func(ctx context.Context) error {
		tx := pgstore.Tx(ctx)
		if tx == nil {
			return errors.New("no transaction in fn's context")
		}
		var inTx int
		if err := tx.QueryRow(ctx, "SELECT count(*) FROM shareq_processed_jobs WHERE key = 'job-1'").Scan(&inTx); err != nil {
			return err
		}
		if inTx != 1 {
			return fmt.Errorf("the claim row is not visible in the transaction (%d rows)", inTx)
		}
		if n := count(t, pool, "SELECT count(*) FROM shareq_processed_jobs WHERE key = 'job-1'"); n != 0 {
			return fmt.Errorf("the claim row is visible outside the transaction before commit (%d rows)", n)
		}
		if idempotency.Tx(ctx) != any(tx) {
			return errors.New("idempotency.Tx and pgstore.Tx disagree")
		}
		return nil
	})
	if err != nil || !claimed {
		t.Fatalf("Claim = %v, %v", claimed, err)
	}
	if n := count(t, pool, "SELECT count(*) FROM shareq_processed_jobs WHERE key = 'job-1'"); n != 1 {
		t.Fatalf("%d claim rows after commit, want 1", n)
	}
}

// sideEffects makes a table the handlers below write to, without a unique
// constraint, so that a second write would show.
func sideEffects(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	if _, err := pool.Exec(t.Context(), "CREATE TABLE sends (job text NOT NULL, attempt int NOT NULL)"); err != nil {
		t.Fatal(err)
	}
}

// send is a handler that records the job in sends through the claim's
// transaction.
func send(ctx context.Context, job *handler.Job) error {
	tx := pgstore.Tx(ctx)
	if tx == nil {
		return handler.Permanent(errors.New("no claim transaction"))
	}
	_, err := tx.Exec(ctx, "INSERT INTO sends (job, attempt) VALUES ($1, $2)", job.ID(), job.DeliveryCount)
	return err
}

func middleware(t *testing.T, s idempotency.Store, opts ...idempotency.Option) handler.Middleware {
	t.Helper()
	mw, err := idempotency.Middleware(s, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return mw
}

func testJob(id string) *handler.Job {
	return &handler.Job{
		Group: "mailers", Topic: "emails", Partition: 0, Offset: 7, DeliveryCount: 1,
		Headers: []handler.Header{{Key: handler.JobIDHeader, Value: []byte(id)}},
	}
}

func wantRetry(t *testing.T, err error) {
	t.Helper()
	var retry *handler.RetryError
	if !errors.As(err, &retry) || retry.Reason != idempotency.ReasonStore {
		t.Fatalf("Handle = %v, want a RetryError with reason %q", err, idempotency.ReasonStore)
	}
	if handler.IsPermanent(err) {
		t.Fatalf("Handle = %v is permanent, want retry", err)
	}
	t.Logf("retried: %v", err)
}

// (a) A job delivered twice, one after the other and at once, writes its
// side effect once.
func TestSideEffectWrittenOnce(t *testing.T) {
	t.Parallel()
	s, pool := setup(t)
	sideEffects(t, pool)
	var dups atomic.Int32
	h := middleware(t, s, idempotency.OnDuplicate(func(*handler.Job, string) { dups.Add(1) }))(handler.Func(send))

	job := testJob("signup-1")
	for i := range 2 {
		if err := h.Handle(t.Context(), job); err != nil {
			t.Fatalf("delivery %d: %v", i+1, err)
		}
	}
	if n := count(t, pool, "SELECT count(*) FROM sends WHERE job = 'signup-1'"); n != 1 {
		t.Fatalf("job delivered twice wrote %d rows, want 1", n)
	}

	// Two deliveries of another job at once: the second waits on the
	// first one's claim row, then finds it claimed.
	slow := handler.Func(func(ctx context.Context, job *handler.Job) error {
		time.Sleep(100 * time.Millisecond)
		return send(ctx, job)
	})
	hs := middleware(t, s, idempotency.OnDuplicate(func(*handler.Job, string) { dups.Add(1) }))(slow)
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for range 2 {
		wg.Go(func() { errs <- hs.Handle(t.Context(), testJob("signup-2")) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("concurrent delivery: %v", err)
		}
	}
	if n := count(t, pool, "SELECT count(*) FROM sends WHERE job = 'signup-2'"); n != 1 {
		t.Fatalf("job delivered twice at once wrote %d rows, want 1", n)
	}
	if dups.Load() != 2 {
		t.Fatalf("OnDuplicate called %d times, want 2", dups.Load())
	}
}

// (b) The database connection dies after the handler wrote its side effect
// and before the commit: the job fails as unavailable (the worker pauses
// and runs it again), nothing was claimed or written, and the next
// delivery writes once.
func TestBackendTerminatedBeforeCommit(t *testing.T) {
	t.Parallel()
	s, pool := setup(t)
	sideEffects(t, pool)
	mw := middleware(t, s)

	killer := handler.Func(func(ctx context.Context, job *handler.Job) error {
		if err := send(ctx, job); err != nil {
			return err
		}
		var pid uint32
		if err := pgstore.Tx(ctx).QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
			return err
		}
		if err := terminate(ctx, t, pool, pid); err != nil {
			return err
		}
		return nil // the handler succeeded; the commit will not
	})
	job := testJob("signup-1")
	wantUnavailable(t, "commit after pg_terminate_backend", mw(killer).Handle(t.Context(), job))
	if n := count(t, pool, "SELECT count(*) FROM shareq_processed_jobs"); n != 0 {
		t.Fatalf("%d claim rows after a failed commit, want 0", n)
	}
	if n := count(t, pool, "SELECT count(*) FROM sends"); n != 0 {
		t.Fatalf("%d side-effect rows after a failed commit, want 0", n)
	}

	job.DeliveryCount = 2
	h := mw(handler.Func(send))
	for i := range 2 {
		if err := h.Handle(t.Context(), job); err != nil {
			t.Fatalf("redelivery %d: %v", i+1, err)
		}
	}
	if n := count(t, pool, "SELECT count(*) FROM sends WHERE attempt = 2"); n != 1 {
		t.Fatalf("redeliveries wrote %d rows, want 1", n)
	}
	if n := count(t, pool, "SELECT count(*) FROM sends"); n != 1 {
		t.Fatalf("%d side-effect rows in all, want 1", n)
	}
}

// terminate ends Postgres backend pid and waits until it is gone.
func terminate(ctx context.Context, t *testing.T, pool *pgxpool.Pool, pid uint32) error {
	var ok bool
	if err := pool.QueryRow(ctx, "SELECT pg_terminate_backend($1)", pid).Scan(&ok); err != nil || !ok {
		return fmt.Errorf("pg_terminate_backend(%d) = %v, %v", pid, ok, err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		if count(t, pool, "SELECT count(*) FROM pg_stat_activity WHERE pid = $1", pid) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("backend %d still alive", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// (b) COMMIT itself fails (a deferred constraint is violated): the job is
// retried with nothing claimed; once the cause is fixed it runs once.
func TestCommitFails(t *testing.T) {
	t.Parallel()
	s, pool := setup(t)
	if _, err := pool.Exec(t.Context(), `
		CREATE TABLE users (id int PRIMARY KEY);
		CREATE TABLE mails (user_id int NOT NULL REFERENCES users DEFERRABLE INITIALLY DEFERRED)`); err != nil {
		t.Fatal(err)
	}
	h := middleware(t, s)(handler.Func(func(ctx context.Context, job *handler.Job) error {
		_, err := pgstore.Tx(ctx).Exec(ctx, "INSERT INTO mails (user_id) VALUES (1)")
		return err
	}))
	job := testJob("mail-1")
	err := h.Handle(t.Context(), job)
	wantRetry(t, err)
	if !strings.Contains(err.Error(), "commit") {
		t.Errorf("error %q does not say the commit failed", err)
	}
	if n := count(t, pool, "SELECT count(*) FROM shareq_processed_jobs"); n != 0 {
		t.Fatalf("%d claim rows after a failed commit, want 0", n)
	}
	if _, err := pool.Exec(t.Context(), "INSERT INTO users VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if err := h.Handle(t.Context(), job); err != nil {
			t.Fatalf("delivery %d after the fix: %v", i+2, err)
		}
	}
	if n := count(t, pool, "SELECT count(*) FROM mails"); n != 1 {
		t.Fatalf("%d rows written, want 1", n)
	}
}

// A handler error rolls back its writes with the claim and comes back
// unchanged.
func TestHandlerErrorRollsBack(t *testing.T) {
	t.Parallel()
	s, pool := setup(t)
	sideEffects(t, pool)
	bad := handler.Permanent(errors.New("image is corrupt"))
	h := middleware(t, s)(handler.Func(func(ctx context.Context, job *handler.Job) error {
		if err := send(ctx, job); err != nil {
			return err
		}
		return bad
	}))
	if err := h.Handle(t.Context(), testJob("img-1")); err != bad {
		t.Fatalf("Handle = %v, want the handler's error %v", err, bad)
	}
	if n := count(t, pool, "SELECT count(*) FROM sends") + count(t, pool, "SELECT count(*) FROM shareq_processed_jobs"); n != 0 {
		t.Fatalf("%d rows left after a failed handler, want 0", n)
	}
}

// A handler whose context is cancelled after it wrote is retried: the
// commit fails on the done context and the writes roll back.
func TestCancelledContextRollsBack(t *testing.T) {
	t.Parallel()
	s, pool := setup(t)
	sideEffects(t, pool)
	ctx, cancel := context.WithCancel(t.Context())
	h := middleware(t, s)(handler.Func(func(ctx context.Context, job *handler.Job) error {
		err := send(ctx, job)
		cancel()
		return err
	}))
	wantRetry(t, h.Handle(ctx, testJob("img-1")))
	if n := count(t, pool, "SELECT count(*) FROM sends") + count(t, pool, "SELECT count(*) FROM shareq_processed_jobs"); n != 0 {
		t.Fatalf("%d rows left after a cancelled handler, want 0", n)
	}
}

// closedPort returns a loopback address nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// silentServer returns a loopback address that accepts connections and
// never answers, like a host behind a dead network.
func silentServer(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns []net.Conn
	)
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	})
	t.Cleanup(func() {
		l.Close()
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return l.Addr().String()
}

// (c) Postgres cannot be reached: the job fails as unavailable without
// running.
func TestUnreachable(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		addr func(t *testing.T) string
	}{
		{"connection refused", closedPort},
		{"no answer within the connect timeout", silentServer},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := pgxpool.ParseConfig("postgres://shareq:shareq@" + tt.addr(t) + "/shareq_test?sslmode=disable")
			if err != nil {
				t.Fatal(err)
			}
			cfg.ConnConfig.ConnectTimeout = 300 * time.Millisecond
			pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer pool.Close()
			s, err := pgstore.New(pool)
			if err != nil {
				t.Fatal(err)
			}
			ran := false
			h := middleware(t, s)(handler.Func(func(context.Context, *handler.Job) error { ran = true; return nil }))
			began := time.Now()
			wantUnavailable(t, "Handle with Postgres unreachable", h.Handle(t.Context(), testJob("j")))
			if ran {
				t.Fatal("handler ran without a claim")
			}
			if d := time.Since(began); d > 5*time.Second {
				t.Fatalf("Handle took %v to give up", d)
			}
			if err := s.Check(t.Context()); err == nil || !strings.HasPrefix(err.Error(), "pgstore: check: ") {
				t.Fatalf("Check = %v, want a pgstore: check: error", err)
			}
		})
	}
}

func TestCheck(t *testing.T) {
	t.Parallel()
	pool, _ := newPool(t)
	ctx := t.Context()
	s, err := pgstore.New(pool)
	if err != nil {
		t.Fatal(err)
	}

	err = s.Check(ctx)
	if !errors.Is(err, pgstore.ErrNoTable) ||
		err.Error() != "pgstore: table shareq_processed_jobs does not exist: apply migrations (migrations.Up)" {
		t.Fatalf("Check without the table = %q, want ErrNoTable saying to apply migrations", err)
	}
	if _, err := s.Claim(ctx, "k", func(context.Context) error { return nil }); !errors.Is(err, pgstore.ErrNoTable) {
		t.Fatalf("Claim without the table = %v, want ErrNoTable", err)
	}
	if _, err := s.Sweep(ctx, time.Now()); !errors.Is(err, pgstore.ErrNoTable) {
		t.Fatalf("Sweep without the table = %v, want ErrNoTable", err)
	}

	if _, err := pool.Exec(ctx, "CREATE TABLE shareq_processed_jobs (key text)"); err != nil {
		t.Fatal(err)
	}
	if err := s.Check(ctx); err == nil || !strings.Contains(err.Error(), "lacks a column") {
		t.Fatalf("Check with no claimed_at column = %v", err)
	}
	if _, err := pool.Exec(ctx, "ALTER TABLE shareq_processed_jobs ADD COLUMN claimed_at timestamptz NOT NULL DEFAULT now()"); err != nil {
		t.Fatal(err)
	}
	// A table from before migration 0004.
	if err := s.Check(ctx); err == nil || !strings.Contains(err.Error(), "lacks a column") {
		t.Fatalf("Check with no cancelled_at column = %v", err)
	}
	if _, err := pool.Exec(ctx, "ALTER TABLE shareq_processed_jobs ADD COLUMN cancelled_at timestamptz"); err != nil {
		t.Fatal(err)
	}
	if err := s.Check(ctx); err == nil || !strings.Contains(err.Error(), "not its primary key") {
		t.Fatalf("Check with key not unique = %v", err)
	}
	if _, err := pool.Exec(ctx, "ALTER TABLE shareq_processed_jobs ADD PRIMARY KEY (key)"); err != nil {
		t.Fatal(err)
	}
	if err := s.Check(ctx); err != nil {
		t.Fatalf("Check on a good table: %v", err)
	}
	if n := count(t, pool, "SELECT count(*) FROM shareq_processed_jobs"); n != 0 {
		t.Fatalf("Check left %d rows behind", n)
	}
}

func TestClaimTx(t *testing.T) {
	t.Parallel()
	s, pool := setup(t)
	ctx := t.Context()
	run := func(key string) bool {
		claimed, err := s.Claim(ctx, key, func(context.Context) error { return nil })
		if err != nil {
			t.Fatal(err)
		}
		return claimed
	}

	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := s.ClaimTx(ctx, tx, "rolled-back"); err != nil || !ok {
		t.Fatalf("ClaimTx = %v, %v", ok, err)
	}
	if ok, err := s.ClaimTx(ctx, tx, "rolled-back"); err != nil || ok {
		t.Fatalf("second ClaimTx in one transaction = %v, %v; want false", ok, err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if !run("rolled-back") {
		t.Fatal("key claimed in a rolled-back transaction is taken")
	}

	tx, err = pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := s.ClaimTx(ctx, tx, "committed"); err != nil || !ok {
		t.Fatalf("ClaimTx = %v, %v", ok, err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if run("committed") {
		t.Fatal("key claimed in a committed transaction is free")
	}
	if _, err := s.ClaimTx(ctx, nil, ""); !errors.Is(err, idempotency.ErrEmptyKey) {
		t.Fatalf("ClaimTx with an empty key = %v, want ErrEmptyKey", err)
	}
}

// A key that holds a cancel (cancelled_at set, as pgoutbox.CancelTx
// writes it) is not claimed and fn does not run: Claim and ClaimTx say
// idempotency.ErrCancelled. A key claimed by a run is a plain duplicate.
func TestClaimOfACancelledKey(t *testing.T) {
	t.Parallel()
	s, pool := setup(t)
	ctx := t.Context()
	if _, err := pool.Exec(ctx, "INSERT INTO shareq_processed_jobs (key, cancelled_at) VALUES ('stopped', now()), ('ran', NULL)"); err != nil {
		t.Fatal(err)
	}
	ran := 0
	fn := func(context.Context) error { ran++; return nil }
	if claimed, err := s.Claim(ctx, "stopped", fn); claimed || !errors.Is(err, idempotency.ErrCancelled) || ran != 0 {
		t.Fatalf("Claim(cancelled key) = %v, %v, fn ran %d times; want false, ErrCancelled, 0", claimed, err, ran)
	}
	if claimed, err := s.Claim(ctx, "ran", fn); claimed || err != nil || ran != 0 {
		t.Fatalf("Claim(claimed key) = %v, %v, fn ran %d times; want false, nil, 0", claimed, err, ran)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if ok, err := s.ClaimTx(ctx, tx, "stopped"); ok || !errors.Is(err, idempotency.ErrCancelled) {
		t.Fatalf("ClaimTx(cancelled key) = %v, %v; want false, ErrCancelled", ok, err)
	}
	// The transaction is still usable: the check is a plain SELECT.
	if ok, err := s.ClaimTx(ctx, tx, "free"); !ok || err != nil {
		t.Fatalf("ClaimTx(free key) after a cancelled one = %v, %v", ok, err)
	}
}

func TestSweepInBatches(t *testing.T) {
	t.Parallel()
	s, pool := setup(t, pgstore.SweepBatch(2))
	ctx := t.Context()
	if _, err := pool.Exec(ctx, `
		INSERT INTO shareq_processed_jobs (key, claimed_at)
		SELECT 'old-' || i, now() - interval '2 days' FROM generate_series(1, 5) i;
		INSERT INTO shareq_processed_jobs (key) VALUES ('new')`); err != nil {
		t.Fatal(err)
	}
	n, err := s.Sweep(ctx, time.Now().Add(-24*time.Hour))
	if err != nil || n != 5 {
		t.Fatalf("Sweep = %d, %v; want 5, nil", n, err)
	}
	if got := count(t, pool, "SELECT count(*) FROM shareq_processed_jobs WHERE key = 'new'"); got != 1 {
		t.Fatal("Sweep removed a new claim")
	}
	if got := count(t, pool, "SELECT count(*) FROM shareq_processed_jobs"); got != 1 {
		t.Fatalf("%d claims left, want 1", got)
	}
}

func TestCustomTable(t *testing.T) {
	t.Parallel()
	pool, schema := newPool(t)
	ctx := t.Context()
	if _, err := pool.Exec(ctx, "CREATE TABLE jobs_done (key text PRIMARY KEY, claimed_at timestamptz NOT NULL DEFAULT now(), cancelled_at timestamptz)"); err != nil {
		t.Fatal(err)
	}
	for _, table := range []string{"jobs_done", schema + ".jobs_done"} {
		s, err := pgstore.New(pool, pgstore.Table(table))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Check(ctx); err != nil {
			t.Fatalf("Check(%s): %v", table, err)
		}
		claimed, err := s.Claim(ctx, "k", func(context.Context) error { return nil })
		if err != nil {
			t.Fatalf("Claim in %s: %v", table, err)
		}
		if want := table == "jobs_done"; claimed != want {
			t.Fatalf("Claim in %s = %v, want %v", table, claimed, want)
		}
	}
	s, err := pgstore.New(pool, pgstore.Table("missing"))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Check(ctx); err == nil || err.Error() != "pgstore: table missing does not exist: apply migrations (migrations.Up)" {
		t.Fatalf("Check(missing) = %v", err)
	}
}
