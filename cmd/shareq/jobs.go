package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shareq/shareq/console/jobinfo"
	"github.com/shareq/shareq/dlq"
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
  show ID              one job: its outbox rows, whether the relay produced it, its runs, its DLQ records
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
func tableHint(err error) error { return jobinfo.TableHint(err) }

// outboxRow is a row of the outbox as list and show read it.
type outboxRow = jobinfo.OutboxRow

// dueText says when r is due, relative to the database's now.
func dueText(r *outboxRow) string {
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
func attemptsText(r *outboxRow) string {
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
	lf := jobinfo.ListFilter{Topic: *topic, Scheduled: *scheduled, Failing: *failing, Limit: *limit}
	now := time.Now()
	for _, b := range []struct {
		flag string
		v    *string
		t    **time.Time
	}{{"-due-after", after, &lf.DueAfter}, {"-due-before", before, &lf.DueBefore}} {
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
		if _, _, err := jobinfo.ParseCursor(*cursor); err != nil {
			return fmt.Errorf("-after: %w", err)
		}
		lf.After = *cursor
	}

	pool, err := f.connect(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	page, err := jobinfo.List(ctx, pool, lf)
	if err != nil {
		return err
	}
	rows, next := page.Rows, page.Next
	more := next != ""
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
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", cell(r.JobID, 50), r.Topic, cell(key, 40), dueText(r), attemptsText(r),
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
its outcome, error, result and progress. With -dlq (and the connection
flags of the dlq commands, -brokers...) it searches DLQ topics for the
job, as 'shareq dlq list -job ID' does, and lists its records there with
their replays: -dlq all searches every topic named *.dlq or dlq.*. It
reads each topic newest first and stops after -dlq-scan records of it
(20000 by default, shared among its partitions), and says so of a topic
whose older records it did not search; -dlq-scan 0 reads them all. A job
that is in neither the outbox, the produced jobs, the job log nor the DLQ
topics searched, and whose claim (when given) holds nothing, is an error
that says what it can have been.
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
	dlqTopics := f.fs.String("dlq", "", "search these DLQ topics for the job (comma-separated), or \"all\" for every DLQ topic of the cluster; with the connection flags")
	dlqScan := f.fs.Int("dlq-scan", jobinfo.ScanLimitDefault, "with -dlq, read at most this many records of each DLQ topic, newest first (0 for all)")
	cluster := addClusterFlags(f.fs)
	asJSON := f.fs.Bool("json", false, "print JSON instead of text")
	pos, err := f.parse(args, 1)
	if err != nil {
		return err
	}
	if *preview < 0 {
		return fmt.Errorf("-preview %d: must not be negative", *preview)
	}
	if *dlqScan < 0 {
		return fmt.Errorf("-dlq-scan %d: must not be negative (0 reads each DLQ topic whole)", *dlqScan)
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
	job, err := jobinfo.Find(ctx, pool, id, claimKey)
	if err != nil {
		return err
	}
	parked, searched, err := findParked(ctx, cluster, *dlqTopics, id, *dlqScan)
	if err != nil {
		return err
	}
	if !job.Found() && len(parked) == 0 {
		return unknownJobError(id, job.Claim, searched)
	}
	cancel := cancelWould(len(job.Outbox) > 0, job.ProducedAt != nil, job.Claim.State)
	if *asJSON {
		return printShowJSON(stdout, &job, parked, searched, cancel, *preview)
	}
	w := &errWriter{w: stdout}
	w.printf("job id       %s\n", id)
	if job.ProducedAt != nil {
		w.printf("produced     %s (%s ago) by a relay: in Kafka\n", fmtTime(*job.ProducedAt), roundText(job.ProducedAgo))
	} else if len(job.Outbox) > 0 {
		w.printf("produced     no\n")
	} else {
		w.printf("produced     not within the relay's ProducedRetention\n")
	}
	if job.ProducedAt != nil || job.Claim.State == jobinfo.ClaimRan || job.Claim.State == jobinfo.ClaimCancelled {
		w.printf("run          %s\n", runText(job.Claim))
	}
	if len(job.Outbox) == 0 {
		w.printf("outbox       not in it\n")
	}
	for i := range job.Outbox {
		printOutboxRow(w, &job.Outbox[i], i, len(job.Outbox), *preview)
	}
	printRuns(w, job.Runs)
	printParked(w, parked, searched)
	w.printf("cancel       %s\n", cancelText(cancel, id, keyFlags))
	return w.err
}

// printShowJSON prints what jobs show -json prints.
func printShowJSON(stdout io.Writer, job *jobinfo.Job, parked []dlq.Parked, searched []jobinfo.Search, cancel string, preview int) error {
	out := struct {
		JobID      string          `json:"job_id"`
		Outbox     []jsonOutboxRow `json:"outbox"`
		ProducedAt *time.Time      `json:"produced_at"`
		ClaimKey   string          `json:"claim_key,omitempty"`
		Claim      string          `json:"claim"` // unknown (no claim key given), none, ran, cancelled
		ClaimAt    *time.Time      `json:"claim_at,omitempty"`
		Cancel     string          `json:"cancel"`     // what jobs cancel would do now: withdraw, stop, too-late, done, unknown
		Runs       []jsonRun       `json:"runs"`       // the job log's, newest first
		DLQTopics  []string        `json:"dlq_topics"` // the DLQ topics searched (-dlq); null when not searched
		DLQSearch  []jsonSearch    `json:"dlq_search"` // how far each was searched; null when not searched
		DLQ        []jsonParked    `json:"dlq"`        // its records in them, by topic
	}{JobID: job.ID, Outbox: []jsonOutboxRow{}, ProducedAt: job.ProducedAt, ClaimKey: job.Claim.Key, Claim: string(job.Claim.State), Cancel: cancel,
		Runs: toJSONRuns(job.Runs), DLQ: []jsonParked{}}
	if searched != nil {
		out.DLQTopics, out.DLQSearch = jobinfo.Names(searched), []jsonSearch{}
	}
	for _, s := range searched {
		out.DLQSearch = append(out.DLQSearch, jsonSearch{Topic: s.Topic, Scanned: s.Scanned, OlderNotSearched: s.Partial})
	}
	if job.Claim.State == jobinfo.ClaimRan || job.Claim.State == jobinfo.ClaimCancelled {
		at := job.Claim.At.UTC()
		out.ClaimAt = &at
	}
	for i := range job.Outbox {
		r := &job.Outbox[i]
		j := toJSONRow(r)
		if j.Value != nil && preview > 0 && len(r.Value) > preview {
			v, enc, _ := payload(r.Value, preview)
			j.Value, j.ValueEncoding = &v, enc
		}
		out.Outbox = append(out.Outbox, j)
	}
	for i := range parked {
		out.DLQ = append(out.DLQ, toJSON(&parked[i], dlq.PreviewBytes))
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

// jsonSearch is how far jobs show -json searched one DLQ topic.
type jsonSearch struct {
	Topic            string `json:"topic"`
	Scanned          int64  `json:"scanned"`            // the records read, newest first
	OlderNotSearched bool   `json:"older_not_searched"` // it stopped at -dlq-scan before the topic's oldest records
}

// findParked searches the DLQ topics of -dlq for job id, reading at most
// scan records of each (0: all): none when -dlq is "", every DLQ topic of
// the cluster for "all". It returns how far it searched each topic, nil
// when it searched none.
func findParked(ctx context.Context, c *clusterFlags, topics, id string, scan int) ([]dlq.Parked, []jobinfo.Search, error) {
	if topics == "" {
		return nil, nil, nil
	}
	cl, err := connect(ctx, c)
	if err != nil {
		return nil, nil, fmt.Errorf("-dlq: %w", err)
	}
	defer cl.Close()
	if topics == "all" {
		ps, searched, err := jobinfo.FindParkedAll(ctx, cl, id, scan)
		if err != nil {
			return nil, nil, topicHint(err)
		}
		return ps, searched, nil
	}
	var names []string
	for t := range strings.SplitSeq(topics, ",") {
		if t = strings.TrimSpace(t); t != "" {
			names = append(names, t)
		}
	}
	ps, searched, err := jobinfo.FindParked(ctx, cl, names, id, scan)
	if err != nil {
		return nil, nil, topicHint(err)
	}
	return ps, searched, nil
}

// printParked prints the job's records in the DLQ topics searched, and
// which topics it searched only the newest records of.
func printParked(w *errWriter, ps []dlq.Parked, searched []jobinfo.Search) {
	names := strings.Join(jobinfo.Names(searched), ", ")
	switch {
	case searched == nil:
		w.printf("dlq          not searched: give -dlq all (or -dlq TOPIC,...) and the connection flags\n")
		return
	case len(searched) == 0:
		w.printf("dlq          the cluster has no DLQ topic\n")
		return
	case len(ps) == 0:
		w.printf("dlq          not in %s\n", names)
	default:
		w.printf("dlq          %d record(s) in %s\n", len(ps), names)
	}
	for i := range searched {
		if n := searched[i].NotSearched(); n != "" {
			w.printf("  %s (-dlq-scan)\n", n)
		}
	}
	for i := range ps {
		p := &ps[i]
		w.printf("  %s  parked in %s/%d@%d  reason %s  delivery %d\n", fmtTime(p.ParkedAt), p.Topic, p.Partition, p.Offset, oneLine(p.Reason, 40), p.DeliveryCount)
		if p.Error != "" {
			w.printf("    error    %s\n", cell(p.Error, 200))
		}
		for _, m := range p.Replays {
			w.printf("    replayed %s -> %s/%d@%d\n", fmtTime(m.At), m.Topic, m.Partition, m.Offset)
		}
	}
}

// runText says whether a worker ran the job, from its claim.
func runText(c jobinfo.Claim) string {
	switch c.State {
	case jobinfo.ClaimNone:
		return fmt.Sprintf("not yet: no claim under %q", c.Key)
	case jobinfo.ClaimRan:
		return fmt.Sprintf("yes: a run committed its claim %q at %s (%s ago)", c.Key, fmtTime(c.At), roundText(c.Ago))
	case jobinfo.ClaimCancelled:
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

func cancelWould(inOutbox, produced bool, claimState jobinfo.ClaimState) string {
	switch {
	case inOutbox:
		return cancelWithdraw
	case claimState == jobinfo.ClaimRan:
		return cancelTooLate
	case claimState == jobinfo.ClaimCancelled:
		return cancelDone
	case produced && claimState == jobinfo.ClaimNone:
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
func unknownJobError(id string, c jobinfo.Claim, searched []jobinfo.Search) error {
	var b strings.Builder
	fmt.Fprintf(&b, "job %s: not in the outbox, and not produced by a relay within its ProducedRetention", id)
	if c.State == jobinfo.ClaimNone {
		fmt.Fprintf(&b, "; its claim %q holds no run", c.Key)
	}
	if len(searched) > 0 {
		fmt.Fprintf(&b, "; not in the DLQ topics %s", strings.Join(jobinfo.Names(searched), ", "))
	}
	for i := range searched {
		if n := searched[i].NotSearched(); n != "" {
			fmt.Fprintf(&b, " (%s: give -dlq-scan 0 to read it whole)", n)
		}
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
	w.printf("  due        %s\n", dueText(r))
	w.printf("  attempts   %s\n", attemptsText(r))
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
