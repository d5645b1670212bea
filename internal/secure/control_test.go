package secure_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/shareq/shareq/control"
	"github.com/shareq/shareq/internal/kafkatest"
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
