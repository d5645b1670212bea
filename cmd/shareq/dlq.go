package main

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/shareq/shareq/dlq"
	"github.com/shareq/shareq/internal/printable"
)

// Defaults of the dlq subcommands.
const (
	connectTimeout     = 5 * time.Second
	listLimitDefault   = 50
	showPreviewDefault = 4096
	replayRateDefault  = 100
)

const dlqUsage = `usage: shareq dlq <command> [flags]

Inspect jobs parked in a dead-letter topic and move them back to the topic
they came from. TOPIC is a topic the dlq middleware parks jobs in
("<topic>.dlq") or a share group's dead-letter topic that the broker writes
archived records to (Kafka 4.4+, "dlq.<group>"); replay restores a broker
record's job, headers and job ID included, from its source topic.

commands:
  list TOPIC                   list parked jobs, oldest first per partition
  show TOPIC PARTITION OFFSET  show one parked job: envelope, headers, payload
  replay TOPIC                 re-produce parked jobs to their source topic

Flags may come before or after TOPIC. Run 'shareq dlq <command> -h' for its
flags. Offsets are DLQ offsets, per partition; ranges are inclusive.
`

// runDLQ runs "shareq dlq ...": args are what follows "dlq".
func runDLQ(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "-help" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stderr, dlqUsage)
		if len(args) == 0 {
			return errUsage
		}
		return flag.ErrHelp
	}
	switch args[0] {
	case "list":
		return dlqList(ctx, args[1:], stdout, stderr)
	case "show":
		return dlqShow(ctx, args[1:], stdout, stderr)
	case "replay":
		return dlqReplay(ctx, args[1:], stdout, stderr)
	}
	fmt.Fprintf(stderr, "shareq dlq: unknown command %q\n\n%s", args[0], dlqUsage)
	return errUsage
}

// dlqFlags holds the flags the dlq subcommands share.
type dlqFlags struct {
	fs        *flag.FlagSet
	cluster   *clusterFlags
	reason    *string
	source    *string
	partition *int
	from      *string
	to        *string
	offsets   *string
	since     *string
	until     *string
	text      *string
	jobID     *string
}

func newDLQFlags(name, usage string, stderr io.Writer, filter bool) *dlqFlags {
	fs := flag.NewFlagSet("shareq dlq "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	f := &dlqFlags{fs: fs}
	f.cluster = addClusterFlags(fs)
	if filter {
		f.reason = fs.String("reason", "", "only jobs parked with this reason (permanent, decode, panic, delivery-limit, ...)")
		f.source = fs.String("source-topic", "", "only jobs that came from this topic")
		f.partition = fs.Int("partition", -1, "only this DLQ partition; -1 for all")
		f.from = fs.String("from", "", "first DLQ offset, inclusive")
		f.to = fs.String("to", "", "last DLQ offset, inclusive")
		f.offsets = fs.String("offsets", "", "DLQ offset range A-B, A-, -B or A (instead of -from/-to)")
		f.since = fs.String("parked-from", "", "only jobs parked at or after this time (RFC 3339, or 2006-01-02T15:04 in UTC)")
		f.until = fs.String("parked-to", "", "only jobs parked before this time (RFC 3339, or 2006-01-02T15:04 in UTC)")
		f.text = fs.String("text", "", "only jobs whose error or payload contains this text, ignoring case")
		f.jobID = fs.String("job", "", "only the job with this job ID (its shareq-job-id), or parked from this source record (TOPIC/PARTITION/OFFSET)")
	}
	fs.Usage = func() {
		fmt.Fprint(stderr, usage, "\nflags:\n")
		fs.PrintDefaults()
	}
	return f
}

// parse parses args, flags and positional arguments in any order, and
// checks that there are want positional arguments.
func (f *dlqFlags) parse(args []string, want int) ([]string, error) {
	return parseArgs(f.fs, args, want)
}

// parseArgs parses args into fs, flags and positional arguments in any
// order, and checks that there are want positional arguments.
func parseArgs(fs *flag.FlagSet, args []string, want int) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			break
		}
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			pos = append(pos, rest...) // everything after "--" is positional
			break
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
	if len(pos) != want {
		fmt.Fprintf(fs.Output(), "%s: want %d argument(s), got %d %q\n\n", fs.Name(), want, len(pos), pos)
		fs.Usage()
		return nil, errUsage
	}
	return pos, nil
}

// filter builds the dlq.Filter the flags describe.
func (f *dlqFlags) filter() (dlq.Filter, error) {
	var out dlq.Filter
	if f.reason == nil {
		return out, nil
	}
	out.Reason, out.SourceTopic, out.Text, out.JobID = *f.reason, *f.source, *f.text, strings.TrimSpace(*f.jobID)
	for _, t := range []struct {
		flag, v string
		into    *time.Time
	}{{"-parked-from", *f.since, &out.ParkedFrom}, {"-parked-to", *f.until, &out.ParkedTo}} {
		if t.v == "" {
			continue
		}
		v, err := time.Parse(time.RFC3339, t.v)
		if err != nil {
			if v, err = time.Parse("2006-01-02T15:04", t.v); err != nil {
				return out, fmt.Errorf("%s %q: want a time such as 2026-05-01T12:00:00Z (RFC 3339) or 2026-05-01T12:00 (UTC)", t.flag, t.v)
			}
		}
		*t.into = v.UTC()
	}
	if *f.partition < -1 || *f.partition > math.MaxInt32 {
		return out, fmt.Errorf("-partition %d: not a partition number", *f.partition)
	}
	if *f.partition >= 0 {
		out.Partitions = []int32{int32(*f.partition)}
	}
	spec := *f.offsets
	if *f.from != "" || *f.to != "" {
		if spec != "" {
			return out, errors.New("give -offsets or -from/-to, not both")
		}
		spec = *f.from + "-" + *f.to
	}
	r, err := parseOffsetRange(spec)
	if err != nil {
		return out, err
	}
	out.Offsets = r
	return out, nil
}

// parseOffsetRange parses an inclusive DLQ offset range: "A-B", "A-" (A
// onwards), "-B" (up to B), "A" (just A), or "" and "-" (everything).
// Offsets are non-negative decimal numbers.
func parseOffsetRange(s string) (dlq.OffsetRange, error) {
	s = strings.TrimSpace(s)
	num := func(part string) (int64, error) {
		if part == "" || strings.TrimLeft(part, "0123456789") != "" {
			return 0, fmt.Errorf("offset range %q: %q is not an offset (a number from 0)", s, part)
		}
		n, err := strconv.ParseInt(part, 10, 64)
		if err != nil || n == math.MaxInt64 {
			return 0, fmt.Errorf("offset range %q: offset %s is too large", s, part)
		}
		return n, nil
	}
	a, b, isRange := strings.Cut(s, "-")
	if !isRange {
		if s == "" {
			return dlq.OffsetRange{}, nil
		}
		n, err := num(s)
		if err != nil {
			return dlq.OffsetRange{}, err
		}
		return dlq.OffsetRange{From: n, End: n + 1}, nil
	}
	var r dlq.OffsetRange
	if a != "" {
		n, err := num(a)
		if err != nil {
			return dlq.OffsetRange{}, err
		}
		r.From = n
	}
	if b != "" {
		n, err := num(b)
		if err != nil {
			return dlq.OffsetRange{}, err
		}
		if n < r.From {
			return dlq.OffsetRange{}, fmt.Errorf("offset range %q: ends before it starts", s)
		}
		r.End = n + 1
	}
	return r, nil
}

const listUsage = `usage: shareq dlq list TOPIC [flags]

Lists parked jobs in the DLQ topic TOPIC, by partition and offset, up to the
end of each partition when the command starts. REPLAYED says when a job was
last replayed and where to ("-": never; "2x" and more: forced again). A job
the broker dead-lettered shows its real job ID, read back from its source
record; "(unknown: source gone)" when that record no longer exists. A topic
that holds no DLQ records is an error.

-job ID finds one job: the one whose job ID (shareq-job-id) is ID, or the
one parked from the source record ID written TOPIC/PARTITION/OFFSET. The
broker's dead-letter records carry no headers: one matches on the job ID
of its source record, read back from the source topic for every broker
record the other flags select, or, once retention has deleted that
record, on its source TOPIC/PARTITION/OFFSET only.
`

func dlqList(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f := newDLQFlags("list", listUsage, stderr, true)
	limit := f.fs.Int("limit", listLimitDefault, "show at most this many jobs (0 for all)")
	asJSON := f.fs.Bool("json", false, "print a JSON array instead of a table")
	pos, err := f.parse(args, 1)
	if err != nil {
		return err
	}
	filter, err := f.filter()
	if err != nil {
		return err
	}
	if *limit < 0 {
		return fmt.Errorf("-limit %d: must not be negative", *limit)
	}
	cl, err := connect(ctx, f.cluster)
	if err != nil {
		return err
	}
	defer cl.Close()
	ps, err := dlq.List(ctx, cl, pos[0], filter, *limit)
	if err != nil {
		return topicHint(err)
	}
	if *asJSON {
		out := make([]jsonParked, 0, len(ps))
		for i := range ps {
			out = append(out, toJSON(&ps[i], dlq.PreviewBytes))
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PARTITION\tOFFSET\tPARKED AT\tREASON\tDELIVERIES\tSOURCE\tJOB ID\tREPLAYED\tERROR")
	replayed := 0
	for i := range ps {
		p := &ps[i]
		if p.Err != nil {
			fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t\t\t\t\t%s\n", p.Partition, p.Offset, fmtShortTime(p.Timestamp), "(not a DLQ record)", oneLine(p.Err.Error(), 80))
			continue
		}
		if p.Replayed() {
			replayed++
		}
		fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t%d\t%s/%d/%d\t%s\t%s\t%s\n", p.Partition, p.Offset, fmtShortTime(p.ParkedAt), oneLine(p.Reason, 30),
			p.DeliveryCount, p.SourceTopic, p.SourcePartition, p.SourceOffset, oneLine(jobIDText(p), 40), replayText(p), oneLine(p.Error, 80))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	switch {
	case len(ps) == 0:
		fmt.Fprintln(stderr, "no parked jobs match")
	case *limit > 0 && len(ps) == *limit:
		fmt.Fprintf(stderr, "showing the first %d (%d replayed); raise -limit to see more\n", len(ps), replayed)
	default:
		fmt.Fprintf(stderr, "%d parked jobs (%d replayed)\n", len(ps), replayed)
	}
	return nil
}

// jobIDText is p's job ID for a person to read.
func jobIDText(p *dlq.Parked) string {
	if !p.JobIDKnown() {
		return "(unknown: source gone)"
	}
	return p.JobID()
}

// replayText says, in a list's REPLAYED column, whether and when p was
// last replayed and where to.
func replayText(p *dlq.Parked) string {
	m, ok := p.LastReplay()
	if !ok {
		return "-"
	}
	s := fmt.Sprintf("%s -> %s/%d/%d", fmtShortTime(m.At), m.Topic, m.Partition, m.Offset)
	if n := len(p.Replays); n > 1 {
		s = fmt.Sprintf("%dx, last %s", n, s)
	}
	return s
}

const showUsage = `usage: shareq dlq show TOPIC PARTITION OFFSET [flags]

Shows the parked job at OFFSET of PARTITION of the DLQ topic TOPIC: its
envelope, its headers and its key and value (as text, or as a hex dump when
they are not printable text).
`

func dlqShow(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f := newDLQFlags("show", showUsage, stderr, false)
	preview := f.fs.Int("preview", showPreviewDefault, "show at most this many bytes of the value (0 for all)")
	asJSON := f.fs.Bool("json", false, "print JSON instead of text")
	pos, err := f.parse(args, 3)
	if err != nil {
		return err
	}
	partition, err := strconv.ParseInt(pos[1], 10, 32)
	if err != nil || partition < 0 {
		return fmt.Errorf("partition %q: not a partition number", pos[1])
	}
	offset, err := strconv.ParseInt(pos[2], 10, 64)
	if err != nil || offset < 0 {
		return fmt.Errorf("offset %q: not an offset", pos[2])
	}
	if *preview < 0 {
		return fmt.Errorf("-preview %d: must not be negative", *preview)
	}
	cl, err := connect(ctx, f.cluster)
	if err != nil {
		return err
	}
	defer cl.Close()
	p, err := dlq.Get(ctx, cl, pos[0], int32(partition), offset)
	if errors.Is(err, dlq.ErrMarker) {
		return fmt.Errorf("%w: it records a replay of an earlier record of partition %d; 'shareq dlq list' shows each job with its replays", err, partition)
	}
	if err != nil && !errors.Is(err, dlq.ErrMalformed) {
		return topicHint(err)
	}
	p.Err = err
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(toJSON(&p, *preview))
	}
	w := &errWriter{w: stdout}
	w.printf("record       %s\n", p.Location())
	w.printf("timestamp    %s\n", fmtTime(p.Timestamp))
	if p.Err != nil {
		w.printf("NOT A DLQ RECORD: %v\n", p.Err)
	} else {
		w.printf("reason       %s\n", p.Reason)
		if p.Broker {
			restored := "job's own record read back from its source: key, value and headers below are the job's"
			if !p.Restored {
				restored = "its source record is gone: no headers, no job ID; replay passes it over"
			}
			w.printf("written by   the broker (share group dead-letter topic); %s\n", restored)
		}
		w.printf("deliveries   %d\n", p.DeliveryCount)
		w.printf("source       %s/%d/%d\n", p.SourceTopic, p.SourcePartition, p.SourceOffset)
		w.printf("job id       %s\n", jobIDText(&p))
		w.printf("group        %s\n", p.Group)
		w.printf("enqueued     %s\n", fmtTime(p.EnqueuedAt))
		w.printf("first try    %s\n", fmtTime(p.FirstAttemptAt))
		w.printf("last try     %s\n", fmtTime(p.LastAttemptAt))
		w.printf("parked       %s\n", fmtTime(p.ParkedAt))
		w.printf("worker host  %s\n", p.WorkerHost)
		w.printf("error        %s\n", indent(p.Error, "             "))
		if len(p.Replays) == 0 {
			w.printf("replayed     never\n")
		}
		for i, m := range p.Replays {
			label := "replayed"
			if i > 0 {
				label = "  again"
			}
			w.printf("%-12s %s to %s/%d/%d (marker at offset %d)\n", label, fmtTime(m.At), m.Topic, m.Partition, m.Offset, m.Marker)
		}
	}
	w.printf("headers      %d\n", len(p.Headers))
	for _, h := range p.Headers {
		text, enc, _ := payload(h.Value, 256)
		w.printf("  %s: %s%s\n", h.Key, text, encNote(enc))
	}
	keyText, keyEnc, _ := payload(p.Key, 256)
	w.printf("key          (%d bytes%s) %s\n", len(p.Key), encNote(keyEnc), keyText)
	if p.ValueOmitted {
		w.printf("value        (%d bytes) NOT IN THE DLQ: it was too large for the DLQ topic; it is in the source record %s/%d/%d until retention deletes it, and replay reads it from there\n",
			p.ValueSize, p.SourceTopic, p.SourcePartition, p.SourceOffset)
		if p.Stack != "" {
			w.printf("stack\n%s\n", p.Stack)
		}
		return w.err
	}
	valText, valEnc, cut := payload(p.Value, *preview)
	note := ""
	if cut {
		note = fmt.Sprintf(", first %d shown", *preview)
	}
	w.printf("value        (%d bytes%s%s)\n", p.ValueSize, encNote(valEnc), note)
	if valEnc == "hex" {
		w.printf("%s", hex.Dump(p.Value[:min(len(p.Value), limitOr(*preview, len(p.Value)))]))
	} else if valText != "" {
		w.printf("%s\n", valText)
	}
	if p.Stack != "" {
		w.printf("stack\n%s\n", p.Stack)
	}
	return w.err
}

const replayUsage = `usage: shareq dlq replay TOPIC [flags]

Re-produces the parked jobs of the DLQ topic TOPIC that match the flags to
the topics they came from, oldest first per partition, up to the end of each
partition when the command starts. Each job keeps its key, value, headers and
job ID (shareq-job-id; "topic/partition/offset" of its original record when it
had none) and gains a shareq-replayed-from header. A job goes to the partition
'shareq enqueue' would give it: a job with a key to its key's partition, one
without to the next partition of the topic, round-robin, so a backlog is
spread over the topic's partitions and its workers.

Each job is replayed once: after its produce is acknowledged, a marker
record naming the new record is written to the job's DLQ partition, and
later replays, whatever their flags, pass over jobs with a marker ('dlq list'
and 'dlq show' show them as replayed). -force replays them again.

Progress is saved after each job, as offsets committed for a consumer group
on TOPIC (shareq-dlq-replay.TOPIC, plus a hash of the filter flags when
there are any). Interrupt it at any time: running the same command again
resumes where it stopped. A job can be re-produced twice only if the command
dies between producing a job and writing its marker; both copies carry the
same job ID, so the idempotency middleware runs it once.

Writing markers needs Write on TOPIC (also on a broker dead-letter topic).
`

func dlqReplay(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f := newDLQFlags("replay", replayUsage, stderr, true)
	rate := f.fs.Float64("rate", replayRateDefault, "replay at most this many jobs per second (0 for no limit)")
	dryRun := f.fs.Bool("dry-run", false, "list what would be replayed; produce nothing and save no progress")
	group := f.fs.String("group", "", "consumer group that holds the progress (default derived from TOPIC and the filter flags)")
	force := f.fs.Bool("force", false, "replay jobs again even if they were replayed before, starting at the filter's first offset rather than the saved progress")
	pos, err := f.parse(args, 1)
	if err != nil {
		return err
	}
	filter, err := f.filter()
	if err != nil {
		return err
	}
	if *rate < 0 || math.IsNaN(*rate) || math.IsInf(*rate, 0) {
		return fmt.Errorf("-rate %v: must be 0 (no limit) or a positive number", *rate)
	}
	cl, err := connect(ctx, f.cluster)
	if err != nil {
		return err
	}
	defer cl.Close()
	verb := "replayed"
	if *dryRun {
		verb = "would replay"
	}
	w := &errWriter{w: stdout}
	opts := []dlq.ReplayOption{
		dlq.ReplayFilter(filter),
		dlq.ReplayRate(*rate),
		dlq.ReplayProgressGroup(*group),
		dlq.ReplayLogger(slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))),
		dlq.ReplayOnRecord(func(p *dlq.Parked) {
			to := p.SourceTopic
			if m, ok := p.LastReplay(); ok && !*dryRun {
				to = fmt.Sprintf("%s/%d/%d", m.Topic, m.Partition, m.Offset)
			}
			w.printf("%s %s -> %s  job %s  reason %s\n", verb, p.Location(), to, p.JobID(), p.Reason)
		}),
	}
	if *dryRun {
		opts = append(opts, dlq.ReplayDryRun())
	}
	if *force {
		opts = append(opts, dlq.ReplayForce())
	}
	stats, err := dlq.Replay(ctx, cl, pos[0], opts...)
	if stats.Group != "" {
		w.printf("%s %d of %d read (%d filtered out, %d not DLQ records", verb, stats.Replayed, stats.Read, stats.Filtered, stats.Malformed)
		if stats.AlreadyReplayed > 0 {
			w.printf(", %d passed over: replayed before (-force replays them again)", stats.AlreadyReplayed)
		}
		if stats.SourceGone > 0 {
			w.printf(", %d passed over: dead-lettered by the broker, and their source record is gone", stats.SourceGone)
		}
		if stats.ValueGone > 0 {
			w.printf(", %d passed over: parked without their value, and their source record is gone", stats.ValueGone)
		}
		w.printf(")")
		if *dryRun {
			w.printf("; dry run, progress not saved (group %s)\n", stats.Group)
		} else {
			w.printf("; progress in group %s\n", stats.Group)
		}
	}
	if err != nil {
		return topicHint(err)
	}
	return w.err
}

// topicHint adds advice to an error about a missing DLQ topic.
func topicHint(err error) error {
	if errors.Is(err, dlq.ErrNotDLQ) {
		return fmt.Errorf("%w; list that topic instead", err)
	}
	if errors.Is(err, dlq.ErrNoTopic) {
		return fmt.Errorf("%w (a job's DLQ topic is <topic>.dlq unless the worker's dlq.Middleware names another)", err)
	}
	return err
}

// jsonParked is a parked job as "list -json" and "show -json" print it.
type jsonParked struct {
	Topic           string       `json:"topic"`
	Partition       int32        `json:"partition"`
	Offset          int64        `json:"offset"`
	Timestamp       time.Time    `json:"timestamp,omitzero"`
	Reason          string       `json:"reason,omitempty"`
	Broker          bool         `json:"broker,omitempty"`
	Restored        bool         `json:"restored,omitempty"`
	Error           string       `json:"error,omitempty"`
	Stack           string       `json:"stack,omitempty"`
	DeliveryCount   int32        `json:"delivery_count,omitempty"`
	SourceTopic     string       `json:"source_topic,omitempty"`
	SourcePartition int32        `json:"source_partition"`
	SourceOffset    int64        `json:"source_offset"`
	JobID           string       `json:"job_id,omitempty"`
	JobIDUnknown    bool         `json:"job_id_unknown,omitempty"`
	Replayed        bool         `json:"replayed"`
	Replays         []jsonReplay `json:"replays,omitempty"`
	Group           string       `json:"group,omitempty"`
	EnqueuedAt      time.Time    `json:"enqueued_at,omitzero"`
	FirstAttemptAt  time.Time    `json:"first_attempt_at,omitzero"`
	LastAttemptAt   time.Time    `json:"last_attempt_at,omitzero"`
	ParkedAt        time.Time    `json:"parked_at,omitzero"`
	WorkerHost      string       `json:"worker_host,omitempty"`
	Headers         []jsonHeader `json:"headers"`
	Key             string       `json:"key"`
	KeyEncoding     string       `json:"key_encoding"`
	Value           string       `json:"value"`
	ValueEncoding   string       `json:"value_encoding"`
	ValueSize       int          `json:"value_size"`
	ValueTruncated  bool         `json:"value_truncated,omitempty"`
	ParseError      string       `json:"parse_error,omitempty"`
}

// jsonReplay is one replay of a parked job.
type jsonReplay struct {
	At        time.Time `json:"at"`
	Topic     string    `json:"topic"`
	Partition int32     `json:"partition"`
	Offset    int64     `json:"offset"`
	Marker    int64     `json:"marker_offset"`
}

type jsonHeader struct {
	Key      string `json:"key"`
	Value    string `json:"value"`
	Encoding string `json:"encoding"`
}

func toJSON(p *dlq.Parked, preview int) jsonParked {
	j := jsonParked{
		Topic: p.Topic, Partition: p.Partition, Offset: p.Offset, Timestamp: p.Timestamp,
		ValueSize: p.ValueSize, Headers: []jsonHeader{},
	}
	for _, h := range p.Headers {
		v, enc, _ := payload(h.Value, 0)
		j.Headers = append(j.Headers, jsonHeader{Key: h.Key, Value: v, Encoding: enc})
	}
	j.Key, j.KeyEncoding, _ = payload(p.Key, 0)
	j.Value, j.ValueEncoding, _ = payload(p.Value, preview)
	j.ValueTruncated = len(p.Value) < p.ValueSize || preview > 0 && len(p.Value) > preview
	if p.Err != nil {
		j.ParseError = p.Err.Error()
		return j
	}
	j.Reason, j.Error, j.Stack, j.DeliveryCount = p.Reason, p.Error, p.Stack, p.DeliveryCount
	j.Broker, j.Restored = p.Broker, p.Restored
	j.SourceTopic, j.SourcePartition, j.SourceOffset = p.SourceTopic, p.SourcePartition, p.SourceOffset
	j.JobID, j.Group, j.WorkerHost = p.JobID(), p.Group, p.WorkerHost
	if !p.JobIDKnown() {
		j.JobID, j.JobIDUnknown = "", true
	}
	j.Replayed = p.Replayed()
	for _, m := range p.Replays {
		j.Replays = append(j.Replays, jsonReplay{At: m.At, Topic: m.Topic, Partition: m.Partition, Offset: m.Offset, Marker: m.Marker})
	}
	j.EnqueuedAt, j.FirstAttemptAt, j.LastAttemptAt, j.ParkedAt = p.EnqueuedAt, p.FirstAttemptAt, p.LastAttemptAt, p.ParkedAt
	return j
}

// payload renders at most max bytes of b (max 0: all of it) as text when
// it is printable UTF-8, else as hex, and says which and whether it cut.
func payload(b []byte, max int) (s, encoding string, cut bool) {
	if max > 0 && len(b) > max {
		b, cut = b[:max], true
	}
	if printable.Is(b, cut) {
		return string(b), "text", cut
	}
	return hex.EncodeToString(b), "hex", cut
}

func encNote(enc string) string {
	if enc == "hex" {
		return ", hex"
	}
	return ""
}

func limitOr(n, all int) int {
	if n == 0 {
		return all
	}
	return n
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339Nano)
}

func fmtShortTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// oneLine returns the first line of s, cut to max runes.
func oneLine(s string, max int) string {
	s, _, more := strings.Cut(s, "\n")
	if utf8.RuneCountInString(s) > max {
		return string([]rune(s)[:max-1]) + "…"
	}
	if more {
		return s + " …"
	}
	return s
}

func indent(s, prefix string) string {
	return strings.ReplaceAll(s, "\n", "\n"+prefix)
}

// errWriter keeps the first write error.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) printf(format string, args ...any) {
	if e.err == nil {
		_, e.err = fmt.Fprintf(e.w, format, args...)
	}
}
