package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shareq/shareq/enqueue/pgoutbox"
)

// Limits of "jobs list".
const (
	jobsListLimitDefault = 50
	jobsListLimitMax     = 10000
)

const jobsUsage = `usage: shareq jobs <command> [flags]

Inspect and cancel the jobs waiting in the Postgres outbox of
enqueue/pgoutbox (jobs for later: pgoutbox.At, In, Unique), and the
periodic schedules of package scheduler. Every command takes -database
URL (default $SHAREQ_DATABASE_URL) and needs the migrations applied.

commands:
  list                 jobs waiting in the outbox, in due order
  show ID              one job: its outbox rows, its unique key, whether the relay produced it
  schedules            periodic schedules: spec, last and next firing, active scheduler
  cancel ID            withdraw a job from the outbox, or stop it once produced (-claim-key)

Flags may come before or after ID. Run 'shareq jobs <command> -h' for its
flags. Times are UTC; "in 5m" and "5m ago" are relative to Postgres's clock.
`

// runJobs runs "shareq jobs ...": args are what follows "jobs".
func runJobs(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "-help" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stderr, jobsUsage)
		if len(args) == 0 {
			return errUsage
		}
		return flag.ErrHelp
	}
	switch args[0] {
	case "list":
		return jobsList(ctx, args[1:], stdout, stderr)
	case "show":
		return jobsShow(ctx, args[1:], stdout, stderr)
	case "schedules":
		return jobsSchedules(ctx, args[1:], stdout, stderr)
	case "cancel":
		return jobsCancel(ctx, args[1:], stdout, stderr)
	}
	fmt.Fprintf(stderr, "shareq jobs: unknown command %q\n\n%s", args[0], jobsUsage)
	return errUsage
}

// jobsFlags holds the flags every jobs subcommand has.
type jobsFlags struct {
	fs       *flag.FlagSet
	database *string
}

func newJobsFlags(name, usage string, stderr io.Writer) *jobsFlags {
	fs := flag.NewFlagSet("shareq jobs "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	f := &jobsFlags{fs: fs}
	f.database = fs.String("database", os.Getenv(databaseEnv), "Postgres URL; $"+databaseEnv+" sets the default")
	fs.Usage = func() {
		fmt.Fprint(stderr, usage, "\nflags:\n")
		fs.PrintDefaults()
	}
	return f
}

// parse parses args and checks the positional arguments and -database.
func (f *jobsFlags) parse(args []string, want int) ([]string, error) {
	pos, err := parseArgs(f.fs, args, want)
	if err != nil {
		return nil, err
	}
	if *f.database == "" {
		fmt.Fprintf(f.fs.Output(), "%s: -database (or $%s) is required\n\n", f.fs.Name(), databaseEnv)
		f.fs.Usage()
		return nil, errUsage
	}
	return pos, nil
}

// connect opens a small pool on the database.
func (f *jobsFlags) connect(ctx context.Context) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(*f.database)
	if err != nil {
		return nil, fmt.Errorf("-database: %w", err)
	}
	cfg.MaxConns = 2
	cctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(cctx, cfg)
	if err == nil {
		err = pool.Ping(cctx)
	}
	if err != nil {
		if pool != nil {
			pool.Close()
		}
		return nil, fmt.Errorf("cannot reach Postgres (-database): %w", err)
	}
	return pool, nil
}

// tableHint adds advice to an error about a missing table or column.
func tableHint(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && (pe.Code == "42P01" || pe.Code == "42703") {
		return fmt.Errorf("%w (is this shareq's database, and are its migrations applied? migrations.Up creates the tables)", err)
	}
	return err
}

// outboxRow is a row of the outbox as list and show read it.
type outboxRow struct {
	ID            int64
	JobID         string
	Topic         string
	Key           []byte
	Value         []byte // show only
	HeaderKeys    []string
	Due           pgtype.Timestamptz
	Created       time.Time
	Attempts      int
	NextAttempt   time.Time
	LastError     *string
	UniqueKey     *string
	ValueSize     int
	UniqueFor     *time.Duration // show only: the key's period after the produce
	DueIn         time.Duration  // due_at - now() on Postgres's clock; 0 for -infinity
	NextAttemptIn time.Duration
}

// dueText says when r is due, relative to the database's now.
func (r *outboxRow) dueText() string {
	if r.Due.InfinityModifier == pgtype.NegativeInfinity {
		return "due (enqueued before migration 0003)"
	}
	return fmtShortTime(r.Due.Time) + " (" + relText(r.DueIn) + ")"
}

// relText is d from now: "in 5m", "5m ago", "now".
func relText(d time.Duration) string {
	switch {
	case d >= time.Second:
		return "in " + roundText(d)
	case d <= -time.Second:
		return roundText(-d) + " ago"
	}
	return "now"
}

// roundText is d at a precision a person reads: 1h5m, 2d3h, 45s.
func roundText(d time.Duration) string {
	switch {
	case d >= 48*time.Hour:
		d = d.Round(time.Hour)
		days := d / (24 * time.Hour)
		return fmt.Sprintf("%dd%dh", days, (d-days*24*time.Hour)/time.Hour)
	case d >= time.Hour-time.Second/2:
		return strings.TrimSuffix(d.Round(time.Minute).String(), "0s")
	}
	return d.Round(time.Second).String()
}

// attemptsText is the attempts of r, with its next try when it failed.
func (r *outboxRow) attemptsText() string {
	if r.Attempts == 0 {
		return "0"
	}
	return fmt.Sprintf("%d (next try %s)", r.Attempts, relText(r.NextAttemptIn))
}

// cell is s for a table's cell: its first line, cut to max runes, without
// tabs (which would start another column).
func cell(s string, max int) string {
	return oneLine(strings.ReplaceAll(s, "\t", " "), max)
}

func strOr(s *string, none string) string {
	if s == nil || *s == "" {
		return none
	}
	return *s
}

const jobsListUsage = `usage: shareq jobs list [flags]

Lists the jobs waiting in the outbox table (enqueue/pgoutbox), in the
order the relay produces them: by due time, then by insert. A job without
a due time is due at its insert; a relay normally produces it within
milliseconds, so the list mostly shows jobs for later (pgoutbox.At, In)
and jobs whose produce fails (ATTEMPTS, LAST ERROR: the relay retries them
with backoff). UNIQUE KEY is the key of pgoutbox.Unique or UniqueFor.

-due-after and -due-before take a time (RFC 3339: 2026-12-01T18:00:00Z) or
a duration from now (30m, 24h, -1h). Pages: when more jobs match than
-limit, the last line says which -after to give for the next page; each
page is one index range scan from there (the index on due time), however
many jobs wait. With -topic or -failing the scan also passes over the
rows that do not match until it has a page.
`

func jobsList(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f := newJobsFlags("list", jobsListUsage, stderr)
	topic := f.fs.String("topic", "", "only jobs of this topic")
	after := f.fs.String("due-after", "", "only jobs due at or after this time or duration from now")
	before := f.fs.String("due-before", "", "only jobs due before this time or duration from now")
	scheduled := f.fs.Bool("scheduled", false, "only jobs not due yet")
	failing := f.fs.Bool("failing", false, "only jobs whose produce has failed at least once")
	limit := f.fs.Int("limit", jobsListLimitDefault, fmt.Sprintf("show at most this many jobs (1 to %d)", jobsListLimitMax))
	cursor := f.fs.String("after", "", "start after this job: the cursor the previous page printed")
	asJSON := f.fs.Bool("json", false, "print a JSON array instead of a table")
	if _, err := f.parse(args, 0); err != nil {
		return err
	}
	if *limit < 1 || *limit > jobsListLimitMax {
		return fmt.Errorf("-limit %d: want 1 to %d", *limit, jobsListLimitMax)
	}
	lf := listFilter{topic: *topic, scheduled: *scheduled, failing: *failing, limit: *limit}
	now := time.Now()
	for _, b := range []struct {
		flag string
		v    *string
		t    **time.Time
	}{{"-due-after", after, &lf.dueAfter}, {"-due-before", before, &lf.dueBefore}} {
		if *b.v == "" {
			continue
		}
		t, err := parseWhen(*b.v, now)
		if err != nil {
			return fmt.Errorf("%s: %w", b.flag, err)
		}
		*b.t = &t
	}
	if *cursor != "" {
		var err error
		if lf.cursorDue, lf.cursorRow, err = parseCursor(*cursor); err != nil {
			return err
		}
	}
	q, qargs := lf.query()

	pool, err := f.connect(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	rows, err := queryOutbox(ctx, pool, q, false, qargs...)
	if err != nil {
		return tableHint(fmt.Errorf("list the outbox: %w", err))
	}
	more := len(rows) > *limit
	if more {
		rows = rows[:*limit]
	}
	next := ""
	if more {
		next = cursorOf(&rows[len(rows)-1])
	}
	if *asJSON {
		out := make([]jsonOutboxRow, len(rows))
		for i := range rows {
			out[i] = toJSONRow(&rows[i])
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(out); err != nil {
			return err
		}
		if more {
			fmt.Fprintf(stderr, "more jobs match: next page with -after %s\n", next)
		}
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "JOB ID\tTOPIC\tKEY\tDUE\tATTEMPTS\tUNIQUE KEY\tLAST ERROR")
	notDue := 0
	for i := range rows {
		r := &rows[i]
		if r.DueIn > 0 {
			notDue++
		}
		key, _, _ := payload(r.Key, 40)
		switch {
		case r.Key == nil:
			key = "-"
		case len(r.Key) == 0:
			key = `""`
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", cell(r.JobID, 50), r.Topic, cell(key, 40), r.dueText(), r.attemptsText(),
			cell(strOr(r.UniqueKey, "-"), 50), cell(strOr(r.LastError, "-"), 80))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	switch {
	case len(rows) == 0 && *cursor != "":
		fmt.Fprintln(stderr, "no more jobs match")
	case len(rows) == 0:
		fmt.Fprintln(stderr, "no jobs waiting in the outbox match")
	case more:
		fmt.Fprintf(stderr, "showing %d jobs (%d not due yet); more match: next page with -after %s\n", len(rows), notDue, next)
	default:
		fmt.Fprintf(stderr, "%d jobs (%d not due yet)\n", len(rows), notDue)
	}
	return nil
}

// listFilter is what "jobs list" selects.
type listFilter struct {
	topic               string
	dueAfter, dueBefore *time.Time
	scheduled, failing  bool
	cursorDue           string // the -after cursor's due time ("-infinity" or RFC 3339); "" for the first page
	cursorRow           int64
	limit               int
}

// query returns the statement of one page and its arguments: one more row
// than the limit, to tell whether another page follows. Every page is a
// range scan of the index (due_at, id) in its order (TestJobsListPlan).
func (f listFilter) query() (string, []any) {
	var where []string
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	if f.topic != "" {
		where = append(where, "topic = "+arg(f.topic))
	}
	if f.dueAfter != nil {
		where = append(where, "due_at >= "+arg(*f.dueAfter))
	}
	if f.dueBefore != nil {
		where = append(where, "due_at < "+arg(*f.dueBefore))
	}
	if f.scheduled {
		where = append(where, "due_at > now()")
	}
	if f.failing {
		where = append(where, "attempts > 0")
	}
	if f.cursorDue != "" {
		where = append(where, "(due_at, id) > ("+arg(f.cursorDue)+"::text::timestamptz, "+arg(f.cursorRow)+")")
	}
	q := `SELECT id, job_id, topic, key, header_keys, due_at, created_at, attempts, next_attempt_at, last_error, unique_key, octet_length(value),
		CASE WHEN isfinite(due_at) THEN extract(epoch FROM due_at - now()) ELSE 0 END::float8,
		extract(epoch FROM next_attempt_at - now())::float8
		FROM ` + pgoutbox.Table
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	return q + " ORDER BY due_at, id LIMIT " + arg(f.limit+1), args
}

// queryOutbox runs q, which selects the columns of jobsList (and value and
// the unique key's period when withValue).
func queryOutbox(ctx context.Context, pool *pgxpool.Pool, q string, withValue bool, args ...any) ([]outboxRow, error) {
	rs, err := pool.Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	var out []outboxRow
	var r outboxRow
	var dueIn, nextIn float64
	dest := []any{&r.ID, &r.JobID, &r.Topic, &r.Key, &r.HeaderKeys, &r.Due, &r.Created, &r.Attempts, &r.NextAttempt, &r.LastError, &r.UniqueKey, &r.ValueSize, &dueIn, &nextIn}
	if withValue {
		dest = append(dest, &r.Value, &r.UniqueFor)
	}
	_, err = pgx.ForEachRow(rs, dest, func() error {
		r.DueIn = seconds(dueIn)
		r.NextAttemptIn = seconds(nextIn)
		out = append(out, r)
		r = outboxRow{}
		return nil
	})
	return out, err
}

func seconds(f float64) time.Duration { return time.Duration(f * float64(time.Second)) }

// parseWhen parses an RFC 3339 time, or a duration from now.
func parseWhen(s string, now time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(s); err == nil {
		return now.Add(d), nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q: want a time (2026-12-01T18:00:00Z) or a duration from now (30m, -1h)", s)
	}
	return t, nil
}

// cursorOf is the -after of the page after r: its due time and row id.
func cursorOf(r *outboxRow) string {
	due := "-infinity"
	if r.Due.InfinityModifier == pgtype.Finite {
		due = r.Due.Time.UTC().Format(time.RFC3339Nano)
	}
	return due + "/" + strconv.FormatInt(r.ID, 10)
}

func parseCursor(s string) (due string, id int64, err error) {
	due, idText, ok := strings.Cut(s, "/")
	if ok {
		id, err = strconv.ParseInt(idText, 10, 64)
	}
	if due != "-infinity" {
		if _, perr := time.Parse(time.RFC3339Nano, due); perr != nil {
			ok = false
		}
	}
	if !ok || err != nil {
		return "", 0, fmt.Errorf("-after %q: not a cursor a page printed (DUE/ROW)", s)
	}
	return due, id, nil
}

// jsonOutboxRow is a job as "list -json" and "show -json" print it.
type jsonOutboxRow struct {
	Row           int64      `json:"row"`
	JobID         string     `json:"job_id"`
	Topic         string     `json:"topic"`
	Key           *string    `json:"key"`
	KeyEncoding   string     `json:"key_encoding,omitempty"`
	DueAt         *time.Time `json:"due_at"` // null: enqueued before migration 0003, due
	DueInSeconds  float64    `json:"due_in_seconds"`
	CreatedAt     time.Time  `json:"created_at"`
	Attempts      int        `json:"attempts"`
	NextAttemptAt *time.Time `json:"next_attempt_at,omitempty"`
	LastError     *string    `json:"last_error"`
	UniqueKey     *string    `json:"unique_key"`
	Headers       []string   `json:"header_keys"`
	ValueSize     int        `json:"value_size"`
	Value         *string    `json:"value,omitempty"`
	ValueEncoding string     `json:"value_encoding,omitempty"`
	UniqueFor     string     `json:"unique_for,omitempty"`
}

func toJSONRow(r *outboxRow) jsonOutboxRow {
	j := jsonOutboxRow{Row: r.ID, JobID: r.JobID, Topic: r.Topic, DueInSeconds: r.DueIn.Seconds(), CreatedAt: r.Created.UTC(),
		Attempts: r.Attempts, LastError: r.LastError, UniqueKey: r.UniqueKey, Headers: r.HeaderKeys, ValueSize: r.ValueSize}
	if j.Headers == nil {
		j.Headers = []string{}
	}
	if r.Key != nil {
		k, enc, _ := payload(r.Key, 0)
		j.Key, j.KeyEncoding = &k, enc
	}
	if r.Due.InfinityModifier == pgtype.Finite {
		t := r.Due.Time.UTC()
		j.DueAt = &t
	}
	if r.Attempts > 0 {
		t := r.NextAttempt.UTC()
		j.NextAttemptAt = &t
	}
	if r.Value != nil {
		v, enc, _ := payload(r.Value, 0)
		j.Value, j.ValueEncoding = &v, enc
	}
	if r.UniqueFor != nil && *r.UniqueFor > 0 {
		j.UniqueFor = r.UniqueFor.String()
	}
	return j
}

const jobsShowUsage = `usage: shareq jobs show ID [flags]

Shows the job with the ID ID (the ID pgoutbox.EnqueueTx returned, the
shareq-job-id header): its rows in the outbox (an ID reused with
enqueue.ID can have several), with their value, its unique key, whether
the relay produced it within its ProducedRetention, and what 'shareq jobs
cancel ID' would do now. Once produced, only the job's idempotency claim
says whether a worker ran it: give -group and -topic (or -claim-key), as to
jobs cancel, and show reads it. It also lists the job's runs from the job
log (joblog/pgjoblog, docs/job-log.md): each delivery a worker finished,
its outcome, error, result and progress. A job that is in neither the
outbox, the produced jobs nor the job log, and whose claim (when given)
holds nothing, is an error that says what it can have been.
`

// unknownJob says what a job ID that Postgres holds nothing of can have
// been: each case and what it means.
var unknownJob = []struct{ what, means string }{
	{"withdrawn", "cancelled (shareq jobs cancel, pgoutbox.Cancel) before a relay produced it: it never reached Kafka"},
	{"never enqueued", "a wrong ID, or its transaction rolled back (or has not committed yet)"},
	{"produced earlier", "longer ago than the relay's ProducedRetention: it went to Kafka"},
}

// unknownJobText is unknownJob on one line.
var unknownJobText = func() string {
	t := "not in the outbox, and not produced by a relay within its ProducedRetention, so it was "
	for i, c := range unknownJob {
		if i > 0 {
			t += ", or "
		}
		t += c.what + " (" + c.means + ")"
	}
	return t
}()

func jobsShow(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f := newJobsFlags("show", jobsShowUsage, stderr)
	preview := f.fs.Int("preview", showPreviewDefault, "show at most this many bytes of the value (0 for all)")
	keyFlags := addClaimKeyFlags(f.fs, "to read whether a worker ran it")
	asJSON := f.fs.Bool("json", false, "print JSON instead of text")
	pos, err := f.parse(args, 1)
	if err != nil {
		return err
	}
	if *preview < 0 {
		return fmt.Errorf("-preview %d: must not be negative", *preview)
	}
	id := pos[0]
	claimKey, err := keyFlags.resolve(id)
	if err != nil {
		return err
	}
	pool, err := f.connect(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	rows, err := queryOutbox(ctx, pool, `SELECT o.id, o.job_id, o.topic, o.key, o.header_keys, o.due_at, o.created_at, o.attempts, o.next_attempt_at,
		o.last_error, o.unique_key, octet_length(o.value),
		CASE WHEN isfinite(o.due_at) THEN extract(epoch FROM o.due_at - now()) ELSE 0 END::float8,
		extract(epoch FROM o.next_attempt_at - now())::float8, o.value, u.unique_for
		FROM `+pgoutbox.Table+` o LEFT JOIN `+pgoutbox.UniqueTable+` u ON u.key = o.unique_key AND u.job_id = o.job_id
		WHERE o.job_id = $1 ORDER BY o.due_at, o.id`, true, id)
	if err != nil {
		return tableHint(fmt.Errorf("read the outbox: %w", err))
	}
	var producedAt *time.Time
	var producedAgo float64
	err = pool.QueryRow(ctx, `SELECT produced_at, extract(epoch FROM now() - produced_at)::float8 FROM `+pgoutbox.ProducedTable+` WHERE job_id = $1`, id).Scan(&producedAt, &producedAgo)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return tableHint(fmt.Errorf("read the produced jobs: %w", err))
	}
	cl, err := readClaim(ctx, pool, claimKey)
	if err != nil {
		return err
	}
	runs, err := jobLogRuns(ctx, pool, id)
	if err != nil {
		return err
	}
	if len(rows) == 0 && producedAt == nil && len(runs) == 0 && (cl.State == claimUnknown || cl.State == claimNone) {
		return unknownJobError(id, cl)
	}
	cancel := cancelWould(len(rows) > 0, producedAt != nil, cl.State)
	if *asJSON {
		out := struct {
			JobID      string          `json:"job_id"`
			Outbox     []jsonOutboxRow `json:"outbox"`
			ProducedAt *time.Time      `json:"produced_at"`
			ClaimKey   string          `json:"claim_key,omitempty"`
			Claim      string          `json:"claim"` // unknown (no claim key given), none, ran, cancelled
			ClaimAt    *time.Time      `json:"claim_at,omitempty"`
			Cancel     string          `json:"cancel"` // what jobs cancel would do now: withdraw, stop, too-late, done, unknown
			Runs       []jsonRun       `json:"runs"`   // the job log's, newest first
		}{JobID: id, Outbox: []jsonOutboxRow{}, ProducedAt: producedAt, ClaimKey: claimKey, Claim: cl.State, Cancel: cancel, Runs: toJSONRuns(runs)}
		if cl.State == claimRan || cl.State == claimCancelled {
			at := cl.At.UTC()
			out.ClaimAt = &at
		}
		for i := range rows {
			j := toJSONRow(&rows[i])
			if j.Value != nil && *preview > 0 && len(rows[i].Value) > *preview {
				v, enc, _ := payload(rows[i].Value, *preview)
				j.Value, j.ValueEncoding = &v, enc
			}
			out.Outbox = append(out.Outbox, j)
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	w := &errWriter{w: stdout}
	w.printf("job id       %s\n", id)
	if producedAt != nil {
		w.printf("produced     %s (%s ago) by a relay: in Kafka\n", fmtTime(*producedAt), roundText(seconds(producedAgo)))
	} else if len(rows) > 0 {
		w.printf("produced     no\n")
	} else {
		w.printf("produced     not within the relay's ProducedRetention\n")
	}
	if producedAt != nil || cl.State == claimRan || cl.State == claimCancelled {
		w.printf("run          %s\n", cl.runText())
	}
	if len(rows) == 0 {
		w.printf("outbox       not in it\n")
	}
	for i := range rows {
		printOutboxRow(w, &rows[i], i, len(rows), *preview)
	}
	printRuns(w, runs)
	w.printf("cancel       %s\n", cancelText(cancel, id, keyFlags))
	return w.err
}

// runText says whether a worker ran the job, from its claim.
func (c claim) runText() string {
	switch c.State {
	case claimNone:
		return fmt.Sprintf("not yet: no claim under %q", c.Key)
	case claimRan:
		return fmt.Sprintf("yes: a run committed its claim %q at %s (%s ago)", c.Key, fmtTime(c.At), roundText(c.Ago))
	case claimCancelled:
		return fmt.Sprintf("no: cancelled at %s (%s ago), claim %q; a worker claiming with idempotency.Middleware on pgstore accepts it without running it", fmtTime(c.At), roundText(c.Ago), c.Key)
	}
	return "unknown: only its idempotency claim says; give -group and -topic (or -claim-key) to read it"
}

// What jobs cancel would do now (jobs show's cancel line, and its -json).
const (
	cancelWithdraw = "withdraw" // the job waits in the outbox
	cancelStop     = "stop"     // produced, and its claim holds nothing yet
	cancelTooLate  = "too-late" // produced and run
	cancelDone     = "done"     // cancelled already
	cancelUnknown  = "unknown"  // produced, claim not read: stop, or too late if it ran
)

func cancelWould(inOutbox, produced bool, claimState string) string {
	switch {
	case inOutbox:
		return cancelWithdraw
	case claimState == claimRan:
		return cancelTooLate
	case claimState == claimCancelled:
		return cancelDone
	case produced && claimState == claimNone:
		return cancelStop
	}
	return cancelUnknown
}

// cancelText is the cancel line: what to run, only where a cancel can
// still work.
func cancelText(cancel, id string, f claimKeyFlags) string {
	switch cancel {
	case cancelWithdraw:
		return fmt.Sprintf("'shareq jobs cancel %s' withdraws it from the outbox: it never reaches Kafka", id)
	case cancelStop:
		return fmt.Sprintf("'shareq jobs cancel %s %s' stops it: a worker claiming with idempotency.Middleware on pgstore accepts it without running it", id, f.args())
	case cancelTooLate:
		return "too late: it ran"
	case cancelDone:
		return "done already"
	}
	return fmt.Sprintf("possible only if no worker ran it yet: 'shareq jobs show %s -group GROUP -topic TOPIC' reads its claim and says", id)
}

// unknownJobError is the error of jobs show for a job Postgres holds
// nothing of: each case it can have been, and what it means.
func unknownJobError(id string, c claim) error {
	var b strings.Builder
	fmt.Fprintf(&b, "job %s: not in the outbox, and not produced by a relay within its ProducedRetention", id)
	if c.State == claimNone {
		fmt.Fprintf(&b, "; its claim %q holds no run", c.Key)
	}
	b.WriteString(". Postgres holds nothing else of it, so it was one of:")
	for _, u := range unknownJob {
		fmt.Fprintf(&b, "\n  %-17s%s", u.what, u.means)
	}
	b.WriteString("\nThere is nothing left to cancel.")
	return errors.New(b.String())
}

// printOutboxRow prints the i-th of n outbox rows of a job.
func printOutboxRow(w *errWriter, r *outboxRow, i, n, preview int) {
	w.printf("outbox row   %d (%d of %d)\n", r.ID, i+1, n)
	w.printf("  topic      %s\n", r.Topic)
	keyText, keyEnc, _ := payload(r.Key, 256)
	if r.Key == nil {
		w.printf("  key        none\n")
	} else {
		w.printf("  key        (%d bytes%s) %s\n", len(r.Key), encNote(keyEnc), keyText)
	}
	w.printf("  enqueued   %s\n", fmtTime(r.Created))
	w.printf("  due        %s\n", r.dueText())
	w.printf("  attempts   %s\n", r.attemptsText())
	if r.LastError != nil {
		w.printf("  last error %s\n", indent(*r.LastError, "             "))
	}
	switch {
	case r.UniqueKey == nil:
		w.printf("  unique     no\n")
	case r.UniqueFor != nil && *r.UniqueFor > 0:
		w.printf("  unique     %s, and for %s after the relay produces it\n", *r.UniqueKey, r.UniqueFor)
	default:
		w.printf("  unique     %s, while it waits\n", *r.UniqueKey)
	}
	w.printf("  headers    %s\n", strings.Join(r.HeaderKeys, ", "))
	valText, valEnc, cut := payload(r.Value, preview)
	note := ""
	if cut {
		note = fmt.Sprintf(", first %d shown", preview)
	}
	w.printf("  value      (%d bytes%s%s) %s\n", r.ValueSize, encNote(valEnc), note, valText)
}
