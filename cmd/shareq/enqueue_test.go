package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/enqueue"
)

// jobsCluster starts kfake with a "jobs" topic and returns its -brokers
// flag and a client on it.
func jobsCluster(t *testing.T) (string, *kgo.Client) {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "jobs"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics("jobs"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return strings.Join(c.ListenAddrs(), ","), cl
}

// readOne returns the next record cl consumes.
func readOne(t *testing.T, cl *kgo.Client) *kgo.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatal("no record before the timeout")
		}
		if recs := fs.Records(); len(recs) > 0 {
			return recs[0]
		}
	}
}

func TestEnqueueCommand(t *testing.T) {
	brokers, cl := jobsCluster(t)
	var out, errOut bytes.Buffer
	err := run(t.Context(), []string{"enqueue", "-brokers", brokers, "-id", "job-1", "-key", "k", "jobs", `{"to": "ada"}`}, &out, &errOut)
	if err != nil {
		t.Fatalf("enqueue: %v (%s)", err, errOut.String())
	}
	if got := strings.TrimSpace(out.String()); got != "job-1" {
		t.Fatalf("printed %q, want the job ID job-1", got)
	}
	r := readOne(t, cl)
	if enqueue.RecordID(r) != "job-1" || string(r.Key) != "k" || string(r.Value) != `{"to":"ada"}` {
		t.Fatalf("record: id %q key %q value %s", enqueue.RecordID(r), r.Key, r.Value)
	}

	// From stdin, with a fresh job ID.
	stdin = strings.NewReader(`["from", "stdin"]`)
	t.Cleanup(func() { stdin = nil })
	out.Reset()
	if err := run(t.Context(), []string{"enqueue", "-brokers", brokers, "jobs"}, &out, &errOut); err != nil {
		t.Fatalf("enqueue from stdin: %v (%s)", err, errOut.String())
	}
	r = readOne(t, cl)
	if id := strings.TrimSpace(out.String()); id == "" || enqueue.RecordID(r) != id || string(r.Value) != `["from","stdin"]` {
		t.Fatalf("printed %q; record id %q value %s", id, enqueue.RecordID(r), r.Value)
	}
}

// Flags may follow the arguments, as in the other commands; "--" makes
// a payload that starts with "-" an argument.
func TestEnqueueCommandFlagsAfterArguments(t *testing.T) {
	brokers, cl := jobsCluster(t)
	var out, errOut bytes.Buffer
	if err := run(t.Context(), []string{"enqueue", "jobs", `{"n": 1}`, "-brokers", brokers, "-id", "after-1", "-key", "k"}, &out, &errOut); err != nil {
		t.Fatalf("enqueue TOPIC JSON -brokers X: %v (%s)", err, errOut.String())
	}
	r := readOne(t, cl)
	if enqueue.RecordID(r) != "after-1" || string(r.Key) != "k" || string(r.Value) != `{"n":1}` {
		t.Fatalf("record: id %q key %q value %s", enqueue.RecordID(r), r.Key, r.Value)
	}
	if err := run(t.Context(), []string{"enqueue", "-brokers", brokers, "-id", "neg", "jobs", "--", "-5"}, &out, &errOut); err != nil {
		t.Fatalf("enqueue TOPIC -- -5: %v (%s)", err, errOut.String())
	}
	if r := readOne(t, cl); enqueue.RecordID(r) != "neg" || string(r.Value) != "-5" {
		t.Fatalf("record: id %q value %s; want neg, -5", enqueue.RecordID(r), r.Value)
	}
	errOut.Reset()
	if err := run(t.Context(), []string{"enqueue", "jobs", "{}", "extra", "-brokers", brokers}, &out, &errOut); !errors.Is(err, errUsage) {
		t.Fatalf("three arguments: %v, want the usage error", err)
	}
	if !strings.Contains(errOut.String(), `"extra"`) {
		t.Fatalf("usage output %q does not show the arguments it got", errOut.String())
	}
}

func TestEnqueueCommandErrors(t *testing.T) {
	brokers, _ := jobsCluster(t)
	var out, errOut bytes.Buffer
	if err := run(t.Context(), []string{"enqueue", "-brokers", brokers, "jobs", "{oops"}, &out, &errOut); err == nil || !strings.Contains(err.Error(), "not valid JSON") {
		t.Errorf("invalid JSON: %v", err)
	}
	if err := run(t.Context(), []string{"enqueue", "-brokers", brokers, "nope", "{}"}, &out, &errOut); !errors.Is(err, enqueue.ErrUnknownTopic) {
		t.Errorf("missing topic: %v", err)
	} else if n := strings.Count(err.Error(), "enqueue:"); n != 1 {
		t.Errorf("missing topic: %q says \"enqueue:\" %d times, want once", err, n)
	}
	if err := run(t.Context(), []string{"enqueue"}, &out, &errOut); !errors.Is(err, errUsage) {
		t.Errorf("no topic: %v", err)
	}
}
