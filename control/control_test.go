package control_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/control"
	"github.com/shareq/shareq/internal/kafkatest"
)

// newClient returns a control Client on a control topic of the test's
// own, created as EnsureTopic creates it.
func newClient(t *testing.T) (*kafkatest.Cluster, *control.Client) {
	t.Helper()
	c := kafkatest.New(t)
	topic := kafkatest.Name(t, "controls")
	c.CreateTopicWith(t, topic, 1, control.TopicConfigs())
	ctl, err := control.New(c.Client(t), control.Topic(topic))
	if err != nil {
		t.Fatal(err)
	}
	return c, ctl
}

func mustRead(t *testing.T, ctl *control.Client) control.State {
	t.Helper()
	s, err := ctl.Read(context.Background())
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	return s
}

// A pause is read back as written, sorted; a second pause of the same
// topic replaces the first; a resume removes it; a whole-group pause
// pauses every topic of its group and no other group's.
func TestPauseReadResume(t *testing.T) {
	t.Parallel()
	_, ctl := newClient(t)
	ctx := context.Background()
	if s := mustRead(t, ctl); len(s.Pauses) != 0 {
		t.Fatalf("an empty control topic reads as %+v", s)
	}
	at := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	for _, p := range []control.Pause{
		{Group: "mail", Topic: "newsletter", Reason: "provider migration", By: "ana", At: at},
		{Group: "mail", Topic: "newsletter", Reason: "provider migration, day 2", By: "bo", At: at.Add(time.Hour)},
		{Group: "images", Topic: "thumbs", Reason: "bad deploy", By: "ci"},
	} {
		if err := ctl.Pause(ctx, p); err != nil {
			t.Fatalf("Pause(%+v): %v", p, err)
		}
	}
	s := mustRead(t, ctl)
	if len(s.Pauses) != 2 || s.Pauses[0].Group != "images" || s.Pauses[1].By != "bo" || !s.Pauses[1].At.Equal(at.Add(time.Hour)) {
		t.Fatalf("state %+v; want images/thumbs, then mail/newsletter by bo (the second pause)", s.Pauses)
	}
	if s.Pauses[0].At.IsZero() {
		t.Error("Pause left At zero")
	}
	if p, ok := s.Paused("mail", "newsletter"); !ok || p.Reason != "provider migration, day 2" {
		t.Errorf("Paused(mail, newsletter) = %+v, %v", p, ok)
	}
	if _, ok := s.Paused("mail", "resets"); ok {
		t.Error("a topic of a paused topic's group is paused too")
	}
	if err := ctl.Pause(ctx, control.Pause{Group: "mail", Reason: "incident 42", By: "ana"}); err != nil {
		t.Fatal(err)
	}
	s = mustRead(t, ctl)
	if p, ok := s.Paused("mail", "resets"); !ok || !p.Whole() || p.Reason != "incident 42" {
		t.Errorf("with the whole group paused, Paused(mail, resets) = %+v, %v", p, ok)
	}
	if _, ok := s.Paused("images", "other"); ok {
		t.Error("the whole-group pause of mail paused another group")
	}
	for _, r := range [][2]string{{"mail", ""}, {"mail", "newsletter"}, {"mail", "never-paused"}} {
		if err := ctl.Resume(ctx, r[0], r[1]); err != nil {
			t.Fatalf("Resume(%q, %q): %v", r[0], r[1], err)
		}
	}
	s = mustRead(t, ctl)
	if len(s.Of("mail")) != 0 || len(s.Of("images")) != 1 {
		t.Errorf("after the resumes: %+v; want only images paused", s.Pauses)
	}
}

// Watch calls its function with the state read to the end, then once
// per change, and returns nil when its context ends.
func TestWatchFollowsChanges(t *testing.T) {
	t.Parallel()
	_, ctl := newClient(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := ctl.Pause(ctx, control.Pause{Group: "g", Topic: "before", Reason: "r", By: "b"}); err != nil {
		t.Fatal(err)
	}
	states := make(chan control.State, 10)
	done := make(chan error, 1)
	go func() { done <- ctl.Watch(ctx, func(s control.State) { states <- s }) }()
	next := func(what string) control.State {
		t.Helper()
		select {
		case s := <-states:
			return s
		case err := <-done:
			t.Fatalf("Watch returned %v while waiting for %s", err, what)
		case <-time.After(30 * time.Second):
			t.Fatalf("no state for %s in 30s", what)
		}
		return control.State{}
	}
	if s := next("the first state"); len(s.Pauses) != 1 || s.Pauses[0].Topic != "before" {
		t.Fatalf("first state %+v; want the pause written before Watch", s.Pauses)
	}
	if err := ctl.Pause(ctx, control.Pause{Group: "g", Topic: "after", Reason: "r", By: "b"}); err != nil {
		t.Fatal(err)
	}
	if s := next("the pause"); len(s.Pauses) != 2 {
		t.Fatalf("after a pause: %+v", s.Pauses)
	}
	if err := ctl.Resume(ctx, "g", "before"); err != nil {
		t.Fatal(err)
	}
	if s := next("the resume"); len(s.Pauses) != 1 || s.Pauses[0].Topic != "after" {
		t.Fatalf("after a resume: %+v", s.Pauses)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Watch at its context's end: %v", err)
	}
}

// Records the control package does not know (another kind, a newer
// writer's value, a key of another shape) are passed over.
func TestUnknownRecordsArePassedOver(t *testing.T) {
	t.Parallel()
	c, ctl := newClient(t)
	c.Produce(t,
		&kgo.Record{Topic: ctl.Topic(), Key: []byte(`["limit","g","t"]`), Value: []byte(`{"rate":5}`)},
		&kgo.Record{Topic: ctl.Topic(), Key: []byte(`["pause","g","t"]`), Value: []byte(`not json`)},
		&kgo.Record{Topic: ctl.Topic(), Key: []byte(`pause/g/t`), Value: []byte(`{}`)},
	)
	if err := ctl.Pause(context.Background(), control.Pause{Group: "g", Topic: "u", Reason: "r", By: "b"}); err != nil {
		t.Fatal(err)
	}
	if s := mustRead(t, ctl); len(s.Pauses) != 1 || s.Pauses[0].Topic != "u" {
		t.Fatalf("state %+v; want only g/u", s.Pauses)
	}
}

// A missing topic is ErrNoTopic with the command that creates it;
// EnsureTopic creates it, and a second EnsureTopic is no error.
func TestEnsureTopic(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t)
	ctl, err := control.New(c.Client(t), control.Topic(kafkatest.Name(t, "controls")))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	_, err = ctl.Read(ctx)
	if !errors.Is(err, control.ErrNoTopic) || !strings.Contains(err.Error(), "shareq topics create -controls -controls-topic "+ctl.Topic()) {
		t.Fatalf("Read of a missing topic: %v; want ErrNoTopic naming the command", err)
	}
	if err := ctl.Pause(ctx, control.Pause{Group: "g", Reason: "r", By: "b"}); !errors.Is(err, control.ErrNoTopic) {
		t.Fatalf("Pause to a missing topic: %v; want ErrNoTopic", err)
	}
	for range 2 {
		if err := ctl.EnsureTopic(ctx); err != nil {
			t.Fatalf("EnsureTopic: %v", err)
		}
	}
	if err := ctl.Pause(ctx, control.Pause{Group: "g", Reason: "r", By: "b"}); err != nil {
		t.Fatalf("Pause after EnsureTopic: %v", err)
	}
	if s := mustRead(t, ctl); len(s.Pauses) != 1 {
		t.Fatalf("state %+v", s.Pauses)
	}
}

// A pause without a group, reason or author is refused, saying what is
// missing; so are an empty topic name and a nil client.
func TestBadInputIsRefused(t *testing.T) {
	t.Parallel()
	if _, err := control.New(nil); err == nil || !strings.Contains(err.Error(), "kgo.NewClient") {
		t.Errorf("New(nil): %v", err)
	}
	c := kafkatest.New(t)
	if _, err := control.New(c.Client(t), control.Topic("")); err == nil || !strings.Contains(err.Error(), control.DefaultTopic) {
		t.Errorf("Topic(\"\"): %v", err)
	}
	ctl, err := control.New(c.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	err = ctl.Pause(context.Background(), control.Pause{Topic: "t", Reason: " "})
	for _, want := range []string{"Group", "Reason", "By"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Pause without %s: %v", want, err)
		}
	}
	if err := ctl.Resume(context.Background(), "", "t"); err == nil {
		t.Error("Resume without a group: no error")
	}
}
