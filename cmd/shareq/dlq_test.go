package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/dlq"
	"github.com/shareq/shareq/handler"
)

// dlqCluster starts kfake with "jobs" and "jobs.dlq" (one partition each)
// and parks n jobs: job i has value "payload i", job ID "job-i", and
// reason "decode" when i is even, else "permanent". It returns the
// -brokers flag for it.
func dlqCluster(t *testing.T, n int) (*kfake.Cluster, string) {
	t.Helper()
	c, cl := fakeTopics(t, "jobs", "jobs.dlq")
	park, err := dlq.Middleware(cl, dlq.Logger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		reason := handler.ReasonPermanent
		if i%2 == 0 {
			reason = handler.ReasonDecode
		}
		job := &handler.Job{
			Topic: "jobs", Offset: int64(i), Value: fmt.Appendf(nil, "payload %d", i), Key: []byte("k"),
			Headers:   []handler.Header{{Key: handler.JobIDHeader, Value: fmt.Appendf(nil, "job-%d", i)}},
			Timestamp: time.Now(), Group: "workers", DeliveryCount: 1, DeliveryLimit: 5,
		}
		h := handler.Func(func(context.Context, *handler.Job) error {
			return &handler.PermanentError{Reason: reason, Err: fmt.Errorf("failure %d\nsecond line", i)}
		})
		if _, parked := handler.ParkedOf(handler.Chain(h, park).Handle(context.Background(), job)); !parked {
			t.Fatalf("job %d not parked", i)
		}
	}
	return c, strings.Join(c.ListenAddrs(), ",")
}

// fakeTopics starts kfake with the topics (one partition each) and returns
// it with a plain client; both are closed when t ends.
func fakeTopics(t *testing.T, topics ...string) (*kfake.Cluster, *kgo.Client) {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, topics...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return c, cl
}

// dlqRun runs "shareq dlq args..." and returns stdout, stderr and the error.
func dlqRun(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := runDLQ(ctx, args, &out, &errOut)
	return out.String(), errOut.String(), err
}

func TestDLQList(t *testing.T) {
	t.Parallel()
	_, brokers := dlqCluster(t, 5)

	out, _, err := dlqRun(t, "list", "-brokers", brokers, "jobs.dlq")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 6 || !strings.HasPrefix(lines[0], "PARTITION") {
		t.Fatalf("list output:\n%s", out)
	}
	for i, line := range lines[1:] {
		for _, want := range []string{fmt.Sprintf("job-%d", i), fmt.Sprintf("jobs/0/%d", i), fmt.Sprintf("failure %d …", i)} {
			if !strings.Contains(line, want) {
				t.Errorf("row %d %q lacks %q", i, line, want)
			}
		}
	}

	// Flags after the topic, a reason filter and a range.
	out, _, err = dlqRun(t, "list", "jobs.dlq", "--brokers", brokers, "--reason", "decode", "--from", "1", "--to", "4")
	if err != nil {
		t.Fatal(err)
	}
	if rows := strings.Count(out, "\n") - 1; rows != 2 || !strings.Contains(out, "job-2") || !strings.Contains(out, "job-4") {
		t.Fatalf("filtered list (decode, offsets 1-4), want jobs 2 and 4:\n%s", out)
	}

	_, errOut, err := dlqRun(t, "list", "-brokers", brokers, "-limit", "2", "jobs.dlq")
	if err != nil || !strings.Contains(errOut, "showing the first 2") {
		t.Fatalf("limit: %v, stderr %q", err, errOut)
	}
	_, errOut, err = dlqRun(t, "list", "-brokers", brokers, "-reason", "nothing-like-this", "jobs.dlq")
	if err != nil || !strings.Contains(errOut, "no parked jobs match") {
		t.Fatalf("empty list: %v, stderr %q", err, errOut)
	}
}

// The parked-time and text filters, the console's, in list and replay.
func TestDLQTimeAndTextFilters(t *testing.T) {
	t.Parallel()
	before := time.Now().Add(-time.Minute).UTC().Format(time.RFC3339)
	_, brokers := dlqCluster(t, 4)
	after := time.Now().Add(time.Minute).UTC().Format("2006-01-02T15:04")
	out, errOut, err := dlqRun(t, "list", "jobs.dlq", "-brokers", brokers, "-text", "FAILURE 3")
	if err != nil || !strings.Contains(out, "job-3") || strings.Contains(out, "job-1") {
		t.Errorf("list -text: %v\n%s%s", err, out, errOut)
	}
	out, _, err = dlqRun(t, "list", "jobs.dlq", "-brokers", brokers, "-text", "payload 2")
	if err != nil || !strings.Contains(out, "job-2") || strings.Contains(out, "job-3") {
		t.Errorf("list -text on the payload: %v\n%s", err, out)
	}
	out, errOut, err = dlqRun(t, "list", "jobs.dlq", "-brokers", brokers, "-parked-from", before, "-parked-to", after)
	if err != nil || strings.Count(out, "job-") != 4 {
		t.Errorf("list within the parked times: %v\n%s%s", err, out, errOut)
	}
	_, errOut, err = dlqRun(t, "list", "jobs.dlq", "-brokers", brokers, "-parked-from", after)
	if err != nil || !strings.Contains(errOut, "no parked jobs match") {
		t.Errorf("list after the parked times: %v\n%s", err, errOut)
	}
	if _, _, err := dlqRun(t, "list", "jobs.dlq", "-brokers", brokers, "-parked-to", "yesterday"); err == nil || !strings.Contains(err.Error(), "-parked-to") {
		t.Errorf("list -parked-to yesterday: %v", err)
	}
	out, errOut, err = dlqRun(t, "replay", "jobs.dlq", "-brokers", brokers, "-rate", "0", "-text", "failure 1")
	if err != nil || !strings.Contains(out, "replayed 1 of 4 read") || !strings.Contains(out, "job job-1 ") {
		t.Errorf("replay -text: %v\n%s%s", err, out, errOut)
	}
}

func TestDLQListJSON(t *testing.T) {
	t.Parallel()
	_, brokers := dlqCluster(t, 3)
	out, _, err := dlqRun(t, "list", "-brokers", brokers, "-json", "-offsets", "1-", "jobs.dlq")
	if err != nil {
		t.Fatal(err)
	}
	var got []jsonParked
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("list -json is not a JSON array: %v\n%s", err, out)
	}
	if len(got) != 2 {
		t.Fatalf("got %d entries, want 2 (offsets 1-)", len(got))
	}
	j := got[0]
	if j.Offset != 1 || j.JobID != "job-1" || j.Reason != "permanent" || j.SourceTopic != "jobs" || j.SourceOffset != 1 ||
		j.Value != "payload 1" || j.ValueEncoding != "text" || j.ValueSize != 9 || j.Group != "workers" || j.ParkedAt.IsZero() ||
		len(j.Headers) != 1 || j.Headers[0].Key != handler.JobIDHeader {
		t.Fatalf("entry = %+v", j)
	}
}

func TestDLQShow(t *testing.T) {
	t.Parallel()
	c, brokers := dlqCluster(t, 2)
	out, _, err := dlqRun(t, "show", "-brokers", brokers, "jobs.dlq", "0", "1")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"record       jobs.dlq/0/1",
		"reason       permanent",
		"source       jobs/0/1",
		"job id       job-1",
		"group        workers",
		"error        permanent failure (permanent): failure 1\n             second line",
		"  shareq-job-id: job-1",
		"value        (9 bytes)\npayload 1",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("show output lacks %q:\n%s", want, out)
		}
	}

	// A binary value is dumped as hex; a foreign record is shown as such.
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.ProduceSync(context.Background(), &kgo.Record{Topic: "jobs.dlq", Value: []byte{0, 1, 2, 0xff}}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	out, _, err = dlqRun(t, "show", "jobs.dlq", "0", "2", "-brokers", brokers)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "NOT A DLQ RECORD") || !strings.Contains(out, "(4 bytes, hex)") || !strings.Contains(out, "00 01 02 ff") {
		t.Errorf("show of a binary non-DLQ record:\n%s", out)
	}

	out, _, err = dlqRun(t, "show", "-brokers", brokers, "-json", "jobs.dlq", "0", "0")
	var j jsonParked
	if err != nil || json.Unmarshal([]byte(out), &j) != nil || j.JobID != "job-0" || j.Reason != "decode" {
		t.Fatalf("show -json: %v\n%s", err, out)
	}

	if _, _, err := dlqRun(t, "show", "-brokers", brokers, "jobs.dlq", "0", "99"); !errors.Is(err, dlq.ErrNoRecord) {
		t.Errorf("show past the end: %v", err)
	}
}

func TestDLQReplay(t *testing.T) {
	t.Parallel()
	c, brokers := dlqCluster(t, 4)

	out, _, err := dlqRun(t, "replay", "-brokers", brokers, "-dry-run", "-reason", "decode", "jobs.dlq")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(out, "would replay jobs.dlq/0/") != 2 || !strings.Contains(out, "would replay 2 of 4 read (2 filtered out") || !strings.Contains(out, "progress not saved") {
		t.Fatalf("dry run output:\n%s", out)
	}

	out, _, err = dlqRun(t, "replay", "-brokers", brokers, "-rate", "0", "-reason", "decode", "jobs.dlq")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "replayed jobs.dlq/0/0 -> jobs/0/0  job job-0  reason decode") || !strings.Contains(out, "replayed 2 of 4 read") {
		t.Fatalf("replay output:\n%s", out)
	}
	// Run again: progress was saved, nothing left.
	out, _, err = dlqRun(t, "replay", "-brokers", brokers, "-reason", "decode", "jobs.dlq")
	if err != nil || !strings.Contains(out, "replayed 0 of 0 read") {
		t.Fatalf("second replay: %v\n%s", err, out)
	}

	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics("jobs"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var ids []string
	for len(ids) < 2 && ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			for _, h := range r.Headers {
				if h.Key == handler.JobIDHeader {
					ids = append(ids, string(h.Value))
				}
			}
		})
	}
	if strings.Join(ids, ",") != "job-0,job-2" {
		t.Fatalf("source topic holds jobs %v, want job-0,job-2", ids)
	}

	// An unfiltered replay passes over the jobs the filtered one replayed.
	out, _, err = dlqRun(t, "replay", "-brokers", brokers, "jobs.dlq")
	if err != nil || !strings.Contains(out, "replayed 2 of 4 read") || !strings.Contains(out, "2 passed over: replayed before") ||
		!strings.Contains(out, "replayed jobs.dlq/0/1 -> jobs/0/2  job job-1") || strings.Contains(out, "job job-0") {
		t.Fatalf("unfiltered replay after a filtered one: %v\n%s", err, out)
	}
	out, errOut, err := dlqRun(t, "list", "-brokers", brokers, "jobs.dlq")
	if err != nil || !strings.Contains(errOut, "4 parked jobs (4 replayed)") || strings.Count(out, " -> jobs/0/") != 4 || strings.Contains(out, "not a DLQ record") {
		t.Fatalf("list after the replays: %v, %s\n%s", err, errOut, out)
	}
	// -force replays a job again; show lists both replays.
	out, _, err = dlqRun(t, "replay", "-brokers", brokers, "-force", "-offsets", "0", "jobs.dlq")
	if err != nil || !strings.Contains(out, "replayed jobs.dlq/0/0 -> jobs/0/4  job job-0") {
		t.Fatalf("forced replay: %v\n%s", err, out)
	}
	out, _, err = dlqRun(t, "show", "-brokers", brokers, "jobs.dlq", "0", "0")
	if err != nil || !strings.Contains(out, "replayed     ") || !strings.Contains(out, "to jobs/0/0 (marker at offset") || !strings.Contains(out, "  again") || !strings.Contains(out, "to jobs/0/4") {
		t.Fatalf("show of a job replayed twice: %v\n%s", err, out)
	}
	out, _, err = dlqRun(t, "list", "-brokers", brokers, "-json", "-offsets", "0-1", "jobs.dlq")
	var got []jsonParked
	if err != nil || json.Unmarshal([]byte(out), &got) != nil || len(got) != 2 || !got[0].Replayed || len(got[0].Replays) != 2 ||
		got[0].Replays[1].Offset != 4 || got[1].Replays[0].Topic != "jobs" || got[1].Replays[0].Offset != 2 {
		t.Fatalf("list -json after the replays: %v\n%s", err, out)
	}
	// The marker itself is no job.
	if _, _, err := dlqRun(t, "show", "-brokers", brokers, "jobs.dlq", "0", "4"); !errors.Is(err, dlq.ErrMarker) {
		t.Fatalf("show of a marker: %v, want ErrMarker", err)
	}
	// The source topic is not a DLQ topic.
	_, _, err = dlqRun(t, "list", "-brokers", brokers, "jobs")
	if !errors.Is(err, dlq.ErrNotDLQ) || !strings.Contains(err.Error(), "jobs.dlq") {
		t.Fatalf("list of the source topic: %v, want ErrNotDLQ naming jobs.dlq", err)
	}
}

func TestDLQErrors(t *testing.T) {
	t.Parallel()
	_, brokers := dlqCluster(t, 0)
	tests := []struct {
		name string
		args []string
		want string // in the error, or in stderr for usage errors
	}{
		{"unreachable brokers", []string{"list", "-brokers", "127.0.0.1:1", "jobs.dlq"}, "cannot reach brokers 127.0.0.1:1"},
		{"no brokers", []string{"list", "-brokers", " , ", "jobs.dlq"}, "no brokers given"},
		{"missing topic", []string{"list", "-brokers", brokers, "nope.dlq"}, "topic does not exist: nope.dlq"},
		{"missing topic replay", []string{"replay", "-brokers", brokers, "nope.dlq"}, "topic does not exist: nope.dlq"},
		{"missing topic show", []string{"show", "-brokers", brokers, "nope.dlq", "0", "0"}, "topic does not exist: nope.dlq"},
		{"no topic", []string{"list", "-brokers", brokers}, "want 1 argument(s), got 0"},
		{"extra argument", []string{"replay", "-brokers", brokers, "a", "b"}, "want 1 argument(s), got 2"},
		{"show arguments", []string{"show", "jobs.dlq", "0"}, "want 3 argument(s)"},
		{"bad partition", []string{"show", "jobs.dlq", "x", "0"}, `partition "x"`},
		{"bad offset", []string{"show", "jobs.dlq", "0", "1.5"}, `offset "1.5"`},
		{"bad range", []string{"list", "-offsets", "9-3", "jobs.dlq"}, "ends before it starts"},
		{"range twice", []string{"list", "-offsets", "1-3", "-from", "2", "jobs.dlq"}, "not both"},
		{"bad rate", []string{"replay", "-rate", "-3", "jobs.dlq"}, "-rate -3"},
		{"unknown command", []string{"purge", "jobs.dlq"}, `unknown command "purge"`},
		{"unknown flag", []string{"list", "-bogus", "jobs.dlq"}, "flag provided but not defined: -bogus"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, errOut, err := dlqRun(t, tt.args...)
			if err == nil {
				t.Fatalf("no error; stderr %q", errOut)
			}
			if !strings.Contains(err.Error(), tt.want) && !strings.Contains(errOut, tt.want) {
				t.Fatalf("error %q, stderr %q; want %q", err, errOut, tt.want)
			}
		})
	}
	if _, errOut, err := dlqRun(t); !errors.Is(err, errUsage) || !strings.Contains(errOut, "shareq dlq <command>") {
		t.Errorf("no command: %v %q", err, errOut)
	}
	if _, errOut, err := dlqRun(t, "replay", "-h"); !errors.Is(err, flag.ErrHelp) || !strings.Contains(errOut, "resumes where it stopped") {
		t.Errorf("replay -h: %v %q", err, errOut)
	}
}

func TestDLQBrokersFromEnvironment(t *testing.T) {
	// Not parallel: it sets the environment.
	_, brokers := dlqCluster(t, 1)
	t.Setenv(brokersEnv, brokers)
	out, _, err := dlqRun(t, "list", "jobs.dlq")
	if err != nil || !strings.Contains(out, "job-0") {
		t.Fatalf("list with $%s: %v\n%s", brokersEnv, err, out)
	}
}

func TestParseOffsetRange(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		want    dlq.OffsetRange
		wantErr string
	}{
		{"", dlq.OffsetRange{}, ""},
		{"-", dlq.OffsetRange{}, ""},
		{"7", dlq.OffsetRange{From: 7, End: 8}, ""},
		{"0", dlq.OffsetRange{From: 0, End: 1}, ""},
		{"3-9", dlq.OffsetRange{From: 3, End: 10}, ""},
		{" 3-3 ", dlq.OffsetRange{From: 3, End: 4}, ""},
		{"5-", dlq.OffsetRange{From: 5}, ""},
		{"-5", dlq.OffsetRange{End: 6}, ""},
		{"9-3", dlq.OffsetRange{}, "ends before it starts"},
		{"a-3", dlq.OffsetRange{}, "not an offset"},
		{"+3", dlq.OffsetRange{}, "not an offset"},
		{"1--3", dlq.OffsetRange{}, "not an offset"},
		{"1-2-3", dlq.OffsetRange{}, "not an offset"},
		{"1 - 3", dlq.OffsetRange{}, "not an offset"},
		{"99999999999999999999", dlq.OffsetRange{}, "too large"},
		{"9223372036854775807", dlq.OffsetRange{}, "too large"},
	}
	for _, tt := range tests {
		got, err := parseOffsetRange(tt.in)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("parseOffsetRange(%q) = %v, %v; want error %q", tt.in, got, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("parseOffsetRange(%q) = %+v, %v; want %+v", tt.in, got, err, tt.want)
		}
	}
}

func FuzzParseOffsetRange(f *testing.F) {
	for _, s := range []string{"", "-", "7", "3-9", "5-", "-5", "9-3", "1--3", "+1", "9223372036854775806", "00-01"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := parseOffsetRange(s)
		if err != nil {
			return
		}
		if r.From < 0 || r.End < 0 || (r.End != 0 && r.End <= r.From) {
			t.Fatalf("parseOffsetRange(%q) = %+v: not a valid range", s, r)
		}
		again, err := parseOffsetRange(r.String())
		if err != nil || again != r {
			t.Fatalf("round trip of %q via %q: %+v, %v; want %+v", s, r.String(), again, err, r)
		}
	})
}

func TestPayload(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in       []byte
		max      int
		want     string
		encoding string
		cut      bool
	}{
		{[]byte("hello\nworld"), 0, "hello\nworld", "text", false},
		{[]byte("héllo"), 2, "h\xc3", "text", true}, // cut inside a rune: still text
		{[]byte{0, 1}, 0, "0001", "hex", false},
		{[]byte("a\x1bb"), 0, "611b62", "hex", false},
		{[]byte("\xff"), 0, "ff", "hex", false},
		{nil, 0, "", "text", false},
	}
	for _, tt := range tests {
		s, enc, cut := payload(tt.in, tt.max)
		if s != tt.want || enc != tt.encoding || cut != tt.cut {
			t.Errorf("payload(%q, %d) = %q, %s, %v; want %q, %s, %v", tt.in, tt.max, s, enc, cut, tt.want, tt.encoding, tt.cut)
		}
	}
}

// Records the broker writes to a share group's dead-letter topic (Kafka
// 4.4): listed, shown with their job's own record read back from the
// source topic, and replayed; one whose source is gone is passed over.
func TestDLQBrokerRecords(t *testing.T) {
	t.Parallel()
	c, cl := fakeTopics(t, "jobs", "dlq.workers")
	brokerRec := func(offset, message string) *kgo.Record {
		h := func(k, v string) kgo.RecordHeader { return kgo.RecordHeader{Key: k, Value: []byte(v)} }
		return &kgo.Record{Topic: "dlq.workers", Headers: []kgo.RecordHeader{
			h(dlq.BrokerHeaderTopic, "jobs"), h(dlq.BrokerHeaderPartition, "0"), h(dlq.BrokerHeaderOffset, offset),
			h(dlq.BrokerHeaderGroup, "workers"), h(dlq.BrokerHeaderDeliveryCount, "1"), h(dlq.BrokerHeaderMessage, message),
		}}
	}
	ctx := context.Background()
	if err := cl.ProduceSync(ctx,
		&kgo.Record{Topic: "jobs", Key: []byte("k"), Value: []byte("payload"), Headers: []kgo.RecordHeader{{Key: handler.JobIDHeader, Value: []byte("job-7")}}},
		brokerRec("0", dlq.BrokerMessageRejected),
		brokerRec("5", dlq.BrokerMessageDeliveryLimit),
	).FirstErr(); err != nil {
		t.Fatal(err)
	}
	brokers := strings.Join(c.ListenAddrs(), ",")

	// list shows the real job ID, read back from the source record.
	out, _, err := dlqRun(t, "list", "-brokers", brokers, "dlq.workers")
	if err != nil || !strings.Contains(out, "rejected") || !strings.Contains(out, "delivery-limit") || !strings.Contains(out, "jobs/0/5") ||
		!strings.Contains(out, "job-7") || !strings.Contains(out, "(unknown: source gone)") {
		t.Fatalf("list: %v\n%s", err, out)
	}
	out, _, err = dlqRun(t, "list", "-brokers", brokers, "-json", "dlq.workers")
	var got []jsonParked
	if err != nil || json.Unmarshal([]byte(out), &got) != nil || len(got) != 2 || got[0].JobID != "job-7" || !got[0].Restored ||
		got[1].JobID != "" || !got[1].JobIDUnknown {
		t.Fatalf("list -json: %v\n%s", err, out)
	}
	out, _, err = dlqRun(t, "show", "-brokers", brokers, "dlq.workers", "0", "0")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"reason       rejected", "written by   the broker", "job id       job-7", "error        Offset rejected by client.", "payload"} {
		if !strings.Contains(out, want) {
			t.Errorf("show lacks %q:\n%s", want, out)
		}
	}
	out, _, err = dlqRun(t, "show", "-brokers", brokers, "dlq.workers", "0", "1")
	if err != nil || !strings.Contains(out, "source record is gone") {
		t.Errorf("show of a record whose source is gone: %v\n%s", err, out)
	}
	out, _, err = dlqRun(t, "replay", "-brokers", brokers, "dlq.workers")
	if err != nil || !strings.Contains(out, "1 passed over: dead-lettered by the broker, and their source record is gone") {
		t.Fatalf("replay: %v\n%s", err, out)
	}
	// The broker's dead-letter topic takes the marker too.
	out, _, err = dlqRun(t, "list", "-brokers", brokers, "dlq.workers")
	if err != nil || !strings.Contains(out, "-> jobs/0/1") || strings.Count(out, "\n") != 3 {
		t.Fatalf("list after the replay: %v\n%s", err, out)
	}
}
