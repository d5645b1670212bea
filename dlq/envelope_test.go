package dlq

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"
)

func fullEnvelope() Envelope {
	t0 := time.Date(2026, 3, 4, 5, 6, 7, 890, time.UTC)
	return Envelope{
		Reason:          "decode",
		Error:           "decode: unexpected end of JSON input\nsecond line",
		Stack:           "goroutine 1 [running]:\nmain.main()",
		DeliveryCount:   3,
		SourceTopic:     "emails",
		SourcePartition: 4,
		SourceOffset:    1 << 40,
		Group:           "mailers",
		EnqueuedAt:      t0,
		FirstAttemptAt:  t0.Add(time.Second),
		LastAttemptAt:   t0.Add(time.Minute),
		WorkerHost:      "worker-1",
		ParkedAt:        t0.Add(time.Minute + time.Millisecond),
	}
}

func TestEnvelopeRoundTrip(t *testing.T) {
	t.Parallel()
	want := fullEnvelope()
	want.ValueOmitted, want.OmittedValueSize = true, 1_048_000
	got, err := ParseHeaders(want.headers())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, want)
	}
	// Optional headers may be left out.
	min := Envelope{Reason: "permanent", SourceTopic: "t"}
	got, err = ParseHeaders(min.headers())
	if err != nil || !reflect.DeepEqual(got, min) {
		t.Fatalf("minimal round trip: %+v, %v", got, err)
	}
}

func TestParseKeepsJobHeaders(t *testing.T) {
	t.Parallel()
	env := fullEnvelope()
	hs := append([]kgo.RecordHeader{{Key: "shareq-job-id", Value: []byte("j1")}, {Key: "b", Value: nil}}, env.headers()...)
	r := &kgo.Record{Topic: "emails.dlq", Partition: 2, Offset: 9, Key: []byte("k"), Value: []byte("vvv"), Headers: hs}
	p, err := Parse(r)
	if err != nil {
		t.Fatal(err)
	}
	if p.Topic != "emails.dlq" || p.Partition != 2 || p.Offset != 9 || p.ValueSize != 3 || string(p.Key) != "k" {
		t.Errorf("location/payload wrong: %+v", p)
	}
	if len(p.Headers) != 2 || p.Headers[0].Key != "shareq-job-id" || p.Headers[1].Key != "b" {
		t.Errorf("job headers = %v", p.Headers)
	}
	if p.JobID() != "j1" || p.Location() != "emails.dlq/2/9" {
		t.Errorf("JobID %q, Location %q", p.JobID(), p.Location())
	}
	p.Headers = nil
	if p.JobID() != "emails/4/1099511627776" {
		t.Errorf("JobID without header = %q", p.JobID())
	}
}

func TestParseErrors(t *testing.T) {
	t.Parallel()
	base := fullEnvelope().headers()
	with := func(key, value string) []kgo.RecordHeader {
		hs := append([]kgo.RecordHeader(nil), base...)
		return append(hs, kgo.RecordHeader{Key: key, Value: []byte(value)}) // the last one counts
	}
	without := func(key string) []kgo.RecordHeader {
		var hs []kgo.RecordHeader
		for _, h := range base {
			if h.Key != key {
				hs = append(hs, h)
			}
		}
		return hs
	}
	tests := []struct {
		name string
		hs   []kgo.RecordHeader
		want string
	}{
		{"no headers", nil, "header shareq-dlq-reason is missing"},
		{"no reason", without(HeaderReason), "shareq-dlq-reason is missing"},
		{"empty reason", with(HeaderReason, ""), "shareq-dlq-reason is empty"},
		{"no source topic", without(HeaderSourceTopic), "shareq-dlq-source-topic is missing"},
		{"no source partition", without(HeaderSourcePartition), "shareq-dlq-source-partition is missing"},
		{"no source offset", without(HeaderSourceOffset), "shareq-dlq-source-offset is missing"},
		{"bad offset", with(HeaderSourceOffset, "12x"), `header shareq-dlq-source-offset: "12x"`},
		{"negative offset", with(HeaderSourceOffset, "-1"), "negative"},
		{"partition overflow", with(HeaderSourcePartition, "4294967296"), "shareq-dlq-source-partition"},
		{"bad count", with(HeaderDeliveryCount, "three"), "shareq-dlq-delivery-count"},
		{"bad time", with(HeaderParkedAt, "yesterday"), "shareq-dlq-parked-at"},
		{"future version", with(HeaderVersion, "2"), "unsupported envelope version"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := ParseHeaders(tt.hs)
			if err == nil || !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("ParseHeaders error = %v, want ErrMalformed containing %q", err, tt.want)
			}
		})
	}
	if _, err := Parse(nil); !errors.Is(err, ErrMalformed) {
		t.Errorf("Parse(nil) = %v", err)
	}
	_, err := Parse(&kgo.Record{Topic: "x.dlq", Partition: 1, Offset: 5})
	if err == nil || !strings.Contains(err.Error(), "x.dlq/1/5") {
		t.Errorf("Parse error %v does not name the record", err)
	}
}

func TestParseIgnoresUnknownEnvelopeHeaders(t *testing.T) {
	t.Parallel()
	hs := append(fullEnvelope().headers(), kgo.RecordHeader{Key: HeaderPrefix + "added-later", Value: []byte("x")})
	if _, err := ParseHeaders(hs); err != nil {
		t.Fatal(err)
	}
}

func TestTruncate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		max  int
		want string
	}{
		{"short", 10, "short"},
		{"exactly10!", 10, "exactly10!"},
		{strings.Repeat("a", 30), 20, "aaaaa" + truncated}, // the marker is 15 bytes
		{strings.Repeat("é", 20), 20, "éé" + truncated},    // 5 bytes left: cut on a rune boundary
		{"bad \xff byte", 100, "bad \uFFFD byte"},
		{"abcdef", 3, "abc"},
	}
	for _, tt := range tests {
		got := truncate(tt.in, tt.max)
		if got != tt.want || len(got) > tt.max || !utf8.ValidString(got) {
			t.Errorf("truncate(%q, %d) = %q, want %q", tt.in, tt.max, got, tt.want)
		}
	}
}

func FuzzParse(f *testing.F) {
	add := func(hs []kgo.RecordHeader) {
		var keys, values []string
		for _, h := range hs {
			keys = append(keys, h.Key)
			values = append(values, string(h.Value))
		}
		f.Add(strings.Join(keys, "\n"), strings.Join(values, "\n"))
	}
	add(fullEnvelope().headers())
	add((&Envelope{Reason: "permanent", SourceTopic: "t"}).headers())
	add(nil)
	add([]kgo.RecordHeader{{Key: HeaderReason, Value: []byte("x")}, {Key: HeaderSourceOffset, Value: []byte("-0")}})
	add([]kgo.RecordHeader{{Key: HeaderParkedAt, Value: []byte("2026-13-45T99:99:99Z")}, {Key: HeaderVersion, Value: []byte("\xff")}})
	add([]kgo.RecordHeader{{Key: HeaderReason, Value: []byte("x")}, {Key: HeaderSourceTopic, Value: []byte("t")}, {Key: HeaderSourcePartition, Value: []byte("0")},
		{Key: HeaderSourceOffset, Value: []byte("1")}, {Key: HeaderValueOmitted, Value: []byte("-5")}})
	f.Fuzz(func(t *testing.T, keys, values string) {
		ks, vs := strings.Split(keys, "\n"), strings.Split(values, "\n")
		var hs []kgo.RecordHeader
		for i, k := range ks {
			v := ""
			if i < len(vs) {
				v = vs[i]
			}
			hs = append(hs, kgo.RecordHeader{Key: k, Value: []byte(v)})
		}
		p, err := Parse(&kgo.Record{Topic: "d", Headers: hs})
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		// What parses must survive a second round trip unchanged.
		again, err := ParseHeaders(p.Envelope.headers())
		if err != nil {
			t.Fatalf("re-encoded envelope does not parse: %v", err)
		}
		if !sameEnvelope(again, p.Envelope) {
			t.Fatalf("round trip changed the envelope:\n got %+v\nwant %+v", again, p.Envelope)
		}
		for _, h := range p.Headers {
			if strings.HasPrefix(h.Key, HeaderPrefix) {
				t.Fatalf("envelope header %s left among the job headers", h.Key)
			}
		}
	})
}

// sameEnvelope compares envelopes, times by instant (a re-encoded time is
// in UTC).
func sameEnvelope(a, b Envelope) bool {
	for _, pair := range [][2]*time.Time{{&a.EnqueuedAt, &b.EnqueuedAt}, {&a.FirstAttemptAt, &b.FirstAttemptAt}, {&a.LastAttemptAt, &b.LastAttemptAt}, {&a.ParkedAt, &b.ParkedAt}} {
		if !pair[0].Equal(*pair[1]) {
			return false
		}
		*pair[0], *pair[1] = time.Time{}, time.Time{}
	}
	return a == b
}
