package control_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/shareq/shareq/control"
)

func TestParseRate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want control.Rate
		err  string
	}{
		{in: "14/s", want: control.Rate{N: 14, Per: time.Second}},
		{in: "600/m", want: control.Rate{N: 600, Per: time.Minute}},
		{in: "5/h", want: control.Rate{N: 5, Per: time.Hour}},
		{in: " 100/10s ", want: control.Rate{N: 100, Per: 10 * time.Second}},
		{in: "14", err: "want N/s"},
		{in: "x/s", err: "not a whole number"},
		{in: "3/fortnight", err: "not s, m, h or a duration"},
		{in: "0/s", err: "at least 1 job"},
		{in: "3/-1s", err: "must be positive"},
	} {
		got, err := control.ParseRate(tc.in)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("ParseRate(%q) = %v, %v; want an error with %q", tc.in, got, err, tc.err)
		case tc.err == "" && (err != nil || got != tc.want):
			t.Errorf("ParseRate(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
	if s := (control.Rate{N: 14, Per: time.Second}).String(); s != "14/s" {
		t.Errorf("String = %q", s)
	}
}

// A limit is read back with the time its rate takes effect, replaces the
// topic's earlier one as a whole, and ClearLimit removes it; pauses and
// limits of the same topic are apart.
func TestSetLimitReadClear(t *testing.T) {
	t.Parallel()
	_, ctl := newClient(t)
	ctx := context.Background()
	two := 2
	at := time.Now().Truncate(time.Millisecond)
	if err := ctl.SetLimit(ctx, control.Limit{Group: "hooks", Topic: "webhooks", Rate: &control.Rate{N: 50, Per: time.Second},
		KeyConcurrency: &two, Reason: "customer 42 asked", By: "ana", At: at}); err != nil {
		t.Fatal(err)
	}
	if err := ctl.Pause(ctx, control.Pause{Group: "hooks", Topic: "webhooks", Reason: "r", By: "b"}); err != nil {
		t.Fatal(err)
	}
	s := mustRead(t, ctl)
	l, ok := s.Limit("hooks", "webhooks")
	if !ok || l.Rate == nil || *l.Rate != (control.Rate{N: 50, Per: time.Second}) || l.KeyConcurrency == nil || *l.KeyConcurrency != 2 || l.KeyRate != nil {
		t.Fatalf("Limit = %+v, %v", l, ok)
	}
	if !l.From.Equal(at.Add(control.RateSwitch)) {
		t.Errorf("From = %v; want At + RateSwitch", l.From.Sub(at))
	}
	if len(s.Pauses) != 1 || len(s.LimitsOf("hooks")) != 1 {
		t.Errorf("state %+v; want one pause and one limit", s)
	}
	if err := ctl.SetLimit(ctx, control.Limit{Group: "hooks", Topic: "webhooks", KeyRate: &control.Rate{N: 1, Per: time.Second}, Reason: "r", By: "b"}); err != nil {
		t.Fatal(err)
	}
	if l, _ := mustRead(t, ctl).Limit("hooks", "webhooks"); l.Rate != nil || l.KeyConcurrency != nil || l.KeyRate == nil {
		t.Errorf("a second limit did not replace the first as a whole: %+v", l)
	}
	if err := ctl.ClearLimit(ctx, "hooks", "webhooks"); err != nil {
		t.Fatal(err)
	}
	if s := mustRead(t, ctl); len(s.Limits) != 0 || len(s.Pauses) != 1 {
		t.Errorf("after ClearLimit: %+v; want the pause only", s)
	}
}

func TestBadLimitsAreRefused(t *testing.T) {
	t.Parallel()
	_, ctl := newClient(t)
	neg := -1
	for _, tc := range []struct {
		l    control.Limit
		want string
	}{
		{control.Limit{Topic: "t", Rate: &control.Rate{N: 1, Per: time.Second}, Reason: "r", By: "b"}, "Group and Topic"},
		{control.Limit{Group: "g", Topic: "t", Reason: "r", By: "b"}, "use ClearLimit"},
		{control.Limit{Group: "g", Topic: "t", Rate: &control.Rate{N: 0, Per: time.Second}, Reason: "r", By: "b"}, "Rate 0/1s"},
		{control.Limit{Group: "g", Topic: "t", KeyConcurrency: &neg, Reason: "r", By: "b"}, "KeyConcurrency -1"},
		{control.Limit{Group: "g", Topic: "t", KeyRate: &control.Rate{N: 1, Per: time.Second}}, "Reason and By"},
	} {
		if err := ctl.SetLimit(context.Background(), tc.l); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("SetLimit(%+v): %v; want %q", tc.l, err, tc.want)
		}
	}
	if err := ctl.ClearLimit(context.Background(), "g", ""); err == nil {
		t.Error("ClearLimit without a topic: no error")
	}
}
