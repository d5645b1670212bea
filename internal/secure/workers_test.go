package secure_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/internal/fleet"
	"github.com/shareq/shareq/internal/kafkatest"
	"github.com/shareq/shareq/internal/logbuf"
	"github.com/shareq/shareq/worker"
)

// TestSecureWorkerStatus: a worker publishes its status with Write on the
// status topic (which implies Describe; docs/security.md), and shareq
// workers (the console too) reads it with Read (which implies Describe
// too). A worker lacking Write runs its jobs all the same and logs one
// line naming the right it lacks (Describe, with nothing granted) and
// the kafka-acls.sh line that grants it; a reader lacking Read gets an
// error naming it.
func TestSecureWorkerStatus(t *testing.T) {
	t.Parallel()
	bothClusters(t, testWorkerStatus)
}

func testWorkerStatus(t *testing.T, s *kafkatest.SecureCluster) {
	for _, tc := range []struct {
		name    string
		grant   []string // the worker's rights on the status topic
		missing string   // the right its one line names; "": none, it is listed
	}{
		{name: "Write", grant: []string{"Write"}},
		{name: "nothing", missing: "Describe"},
		{name: "Describe only", grant: []string{"Describe"}, missing: "Write"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			topic, group, status := s.Topic(t, 1), s.Group(t), kafkatest.Name(t, "workers")
			s.CreateTopic(t, status, 1, fleet.TopicConfigs())
			acls := workerACLs(topic, group, "")
			for _, op := range tc.grant {
				acls = append(acls, kafkatest.ACL{Resource: "topic", Name: status, Op: op})
			}
			s.Allow(t, s.Principal(), acls...)
			s.Allow(t, s.OpsPrincipal(), kafkatest.ACL{Resource: "topic", Name: status, Op: "Describe"})

			var logs logbuf.Buffer
			rec := newJobs()
			w, err := worker.New(worker.ClientOpts(s.SCRAMOpts(t)...), worker.Group(group), worker.Observers(rec),
				worker.Logger(logger(&logs)), worker.StatusTopic(status), worker.StatusEvery(time.Second),
				worker.Handle(topic, handler.Func(func(context.Context, *handler.Job) error { return nil })))
			if err != nil {
				t.Fatal(err)
			}
			stop := kafkatest.Run(t, w.Run)
			produce(t, s, topic, "a")
			rec.waitFor(t, "the job", func(ran map[string]int, _ []worker.Result) bool { return ran["a"] == 1 })

			reader := s.Client(t, s.OpsSCRAMOpts(t)...)
			if tc.missing == "" {
				// Describe alone does not read: the error names Read, on
				// a status topic with no record too (nothing to fetch).
				empty := kafkatest.Name(t, "empty")
				s.CreateTopic(t, empty, 1, fleet.TopicConfigs())
				s.Allow(t, s.OpsPrincipal(), kafkatest.ACL{Resource: "topic", Name: empty, Op: "Describe"})
				if _, err := fleet.Read(context.Background(), reader, empty, time.Now()); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("Read on topic %q", empty)) {
					t.Errorf("read of an empty topic without Read: %v, want an error naming Read on topic %q", err, empty)
				}
				s.Allow(t, s.OpsPrincipal(), kafkatest.ACL{Resource: "topic", Name: empty, Op: "Read"})
				if ws, err := fleet.Read(context.Background(), reader, empty, time.Now()); err != nil || len(ws) != 0 {
					t.Errorf("read of an empty topic with Read: %+v, %v; want no workers and no error", ws, err)
				}
				// With records, the fetch is refused: wait (with
				// Describe, which lists offsets) for the first status.
				waitWritten(t, s, status)
				_, err := fleet.Read(context.Background(), reader, status, time.Now())
				if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("Read on topic %q", status)) {
					t.Errorf("read without Read: %v, want an error naming Read on topic %q", err, status)
				}
				s.Allow(t, s.OpsPrincipal(), kafkatest.ACL{Resource: "topic", Name: status, Op: "Read"})
				waitListed(t, reader, status, group)
				if err := stop(); err != nil {
					t.Fatalf("Run: %v", err)
				}
				if strings.Contains(logs.String(), "status topic") {
					t.Errorf("logged about the status topic though every right is granted:\n%s", logs.String())
				}
				return
			}
			// The line comes at once for Describe, at the first
			// status for Write; then no more.
			deadline := time.Now().Add(20 * time.Second)
			for !strings.Contains(logs.String(), "status topic "+status) && time.Now().Before(deadline) {
				time.Sleep(50 * time.Millisecond)
			}
			time.Sleep(2 * time.Second) // statuses every second: none may log again
			if err := stop(); err != nil {
				t.Fatalf("Run: %v", err)
			}
			if n := strings.Count(logs.String(), "status topic "+status); n != 1 {
				t.Errorf("%d lines about the status topic, want 1:\n%s", n, logs.String())
			}
			mustContain(t, "the worker's log", logs.String(), fmt.Sprintf("lacks %s on topic", tc.missing),
				fmt.Sprintf("--operation %s --topic %s", tc.missing, status))
		})
	}
}

// waitWritten waits until the status topic has a record.
func waitWritten(t *testing.T, s *kafkatest.SecureCluster, status string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ends, err := s.Admin().ListEndOffsets(context.Background(), status)
		if err == nil {
			err = ends.Error()
		}
		if o, ok := ends.Lookup(status, 0); err == nil && ok && o.Offset > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no status written to %s in 30s (%v)", status, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitListed waits until the group has one worker listed in the status
// topic, read through reader.
func waitListed(t *testing.T, reader *kgo.Client, status, group string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ws, err := fleet.Read(context.Background(), reader, status, time.Now())
		if ws = fleet.OfGroup(ws, group); err == nil && len(ws) == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("workers of %s in %s: %+v (%v), want one", group, status, ws, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
