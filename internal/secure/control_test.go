package secure_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/shareq/shareq/control"
	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/internal/kafkatest"
	"github.com/shareq/shareq/internal/logbuf"
	"github.com/shareq/shareq/worker"
)

// The rights docs/security.md gives `shareq pause`, `resume` and
// `pauses`: a missing control topic needs Create; a pause needs Write and
// a read of what is written Read, each error naming the right missing.
func TestSecureControl(t *testing.T) {
	t.Parallel()
	bothClusters(t, testControl)
}

func testControl(t *testing.T, s *kafkatest.SecureCluster) {
	ctx := context.Background()
	topic := kafkatest.Name(t, "controls")
	ctl := newControl(t, s, topic)
	s.Allow(t, s.OpsPrincipal(), kafkatest.ACL{Resource: "topic", Name: topic, Op: "Describe"})
	if err := ctl.EnsureTopic(ctx); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("Create on topic %q", topic)) {
		t.Errorf("EnsureTopic without Create: %v; want an error naming Create on topic %q", err, topic)
	}
	s.CreateTopic(t, topic, 1, control.TopicConfigs())
	p := control.Pause{Group: "mailers", Topic: "newsletter", Reason: "ESP migration", By: "ops"}
	if err := ctl.Pause(ctx, p); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("Write on topic %q", topic)) {
		t.Errorf("Pause without Write: %v; want an error naming Write on topic %q", err, topic)
	}
	s.Allow(t, s.OpsPrincipal(), kafkatest.ACL{Resource: "topic", Name: topic, Op: "Write"})
	// A new client, as a new run of the command is: a client whose
	// producer was refused keeps the refusal.
	ctl = newControl(t, s, topic)
	if err := ctl.Pause(ctx, p); err != nil {
		t.Fatalf("Pause with Write: %v", err)
	}
	if _, err := ctl.Read(ctx); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("Read on topic %q", topic)) {
		t.Errorf("Read without Read: %v; want an error naming Read on topic %q", err, topic)
	}
	s.Allow(t, s.OpsPrincipal(), kafkatest.ACL{Resource: "topic", Name: topic, Op: "Read"})
	st, err := ctl.Read(ctx)
	if err != nil {
		t.Fatalf("Read with Read: %v", err)
	}
	if _, ok := st.Paused("mailers", "newsletter"); !ok {
		t.Errorf("state %+v; want the pause", st.Pauses)
	}
}

// newControl is a control client of the ops principal on topic.
func newControl(t *testing.T, s *kafkatest.SecureCluster, topic string) *control.Client {
	t.Helper()
	ctl, err := control.New(s.Client(t, s.OpsSCRAMOpts(t)...), control.Topic(topic))
	if err != nil {
		t.Fatal(err)
	}
	return ctl
}

// TestSecureWorkerControl: a worker follows the control topic with
// Describe and Read on it (docs/security.md); without them (and without
// Create on a missing topic) it runs its jobs unpaused and logs one Warn
// saying how to create the topic and what to grant.
func TestSecureWorkerControl(t *testing.T) {
	t.Parallel()
	bothClusters(t, testWorkerControl)
}

func testWorkerControl(t *testing.T, s *kafkatest.SecureCluster) {
	for _, tc := range []struct {
		name  string
		grant bool // Read on the control topic (which exists)
	}{
		{name: "Read", grant: true},
		{name: "nothing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			topic, group, controls := s.Topic(t, 1), s.Group(t), kafkatest.Name(t, "controls")
			acls := workerACLs(topic, group, "")
			if tc.grant {
				s.CreateTopic(t, controls, 1, control.TopicConfigs())
				acls = append(acls, kafkatest.ACL{Resource: "topic", Name: controls, Op: "Read"})
			}
			s.Allow(t, s.Principal(), acls...)
			var logs logbuf.Buffer
			rec := newJobs()
			w, err := worker.New(worker.ClientOpts(s.SCRAMOpts(t)...), worker.Group(group), worker.Observers(rec),
				worker.Logger(logger(&logs)), worker.ControlTopic(controls),
				worker.Handle(topic, handler.Func(func(context.Context, *handler.Job) error { return nil })))
			if err != nil {
				t.Fatal(err)
			}
			stop := kafkatest.Run(t, w.Run)
			produce(t, s, topic, "a")
			rec.waitFor(t, "the job", func(ran map[string]int, _ []worker.Result) bool { return ran["a"] == 1 })
			const warn = "pause control cannot reach this worker"
			if !tc.grant {
				time.Sleep(3 * time.Second) // the watch looks again after 1 s, then 2 s: no second line
				if err := stop(); err != nil {
					t.Fatalf("Run: %v", err)
				}
				if n := strings.Count(logs.String(), warn); n != 1 {
					t.Errorf("%d lines saying %q, want 1:\n%s", n, warn, logs.String())
				}
				mustContain(t, "the worker's log", logs.String(), "shareq topics create -controls -controls-topic "+controls)
				return
			}
			s.Allow(t, s.OpsPrincipal(), kafkatest.ACL{Resource: "topic", Name: controls, Op: "Write"})
			ctl := newControl(t, s, controls)
			if err := ctl.Pause(context.Background(), control.Pause{Group: group, Topic: topic, Reason: "test", By: "ops"}); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(30 * time.Second)
			for len(w.PausedTopics()) == 0 {
				if time.Now().After(deadline) {
					t.Fatalf("the pause did not reach the worker within 30 s:\n%s", logs.String())
				}
				time.Sleep(20 * time.Millisecond)
			}
			if err := stop(); err != nil {
				t.Fatalf("Run: %v", err)
			}
			if strings.Contains(logs.String(), warn) {
				t.Errorf("warned though Read is granted:\n%s", logs.String())
			}
		})
	}
}
