package worker_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/internal/groupcfg"
	"github.com/shareq/shareq/internal/logbuf"
	"github.com/shareq/shareq/worker"
)

// AssignmentInterval is validated in New: 0 (leave the group's alone) or
// whole milliseconds up to Kafka's 15 s bound.
func TestAssignmentIntervalValidated(t *testing.T) {
	t.Parallel()
	nop := handler.Func(func(context.Context, *handler.Job) error { return nil })
	valid := []worker.Option{worker.Brokers("127.0.0.1:9092"), worker.Group("g"), worker.Handle("jobs", nop)}
	for d, want := range map[time.Duration]string{
		-time.Millisecond:                       "AssignmentInterval(-1ms): must be from 1ms to 15s",
		15*time.Second + time.Millisecond:       "AssignmentInterval(15.001s): must be from 1ms to 15s",
		100*time.Millisecond + time.Microsecond: "AssignmentInterval(100.001ms): must be whole milliseconds",
	} {
		_, err := worker.New(append(valid, worker.AssignmentInterval(d))...)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("AssignmentInterval(%v): New said %v, want %q", d, err, want)
		}
	}
	for _, d := range []time.Duration{0, time.Millisecond, worker.AssignmentIntervalDefault, 15 * time.Second} {
		if _, err := worker.New(append(valid, worker.AssignmentInterval(d))...); err != nil {
			t.Errorf("AssignmentInterval(%v): %v", d, err)
		}
	}
}

// groupAssignInterval reads the group's share.assignment.interval.ms with
// a DescribeConfigs request of its own: the value, whether the group has
// it set itself, and whether the broker knows the config at all.
func groupAssignInterval(t *testing.T, cl *kgo.Client, group string) (v string, own, known bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req := kmsg.NewPtrDescribeConfigsRequest()
	r := kmsg.NewDescribeConfigsRequestResource()
	r.ResourceType, r.ResourceName = kmsg.ConfigResourceTypeGroupConfig, group
	req.Resources = append(req.Resources, r)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	for _, res := range resp.Resources {
		for _, c := range res.Configs {
			if c.Name != groupcfg.AssignmentIntervalMs {
				continue
			}
			if c.Value != nil {
				v = *c.Value
			}
			return v, c.Source == kmsg.ConfigSourceGroupConfig, true
		}
	}
	return "", false, false
}

// The worker sets its group's assignment interval on brokers that have
// it (Apache Kafka 4.3+): the default on a group with none of its own,
// an explicit value whatever the group had; an operator's setting wins
// over the default, and AssignmentInterval(0) sets nothing. Brokers
// without it (kfake, Kafka 4.2) are left alone, with nothing logged at
// Info level for the default and one Info line for an explicit value.
func TestAssignmentIntervalSet(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	nop := handler.Func(func(context.Context, *handler.Job) error { return nil })
	cl := b.c.Client(t)
	_, _, known := groupAssignInterval(t, cl, b.c.Group(t))
	t.Logf("%s: the broker knows %s: %v", b.c.Kind, groupcfg.AssignmentIntervalMs, known)
	for _, tc := range []struct {
		name     string
		operator string // the group's own value before the worker starts
		opts     []worker.Option
		want     string // the group's own value after Check; "" none
		logged   bool   // a line at Info level or above names the interval
	}{
		{"default", "", nil, "100", false},
		{"explicit", "", []worker.Option{worker.AssignmentInterval(250 * time.Millisecond)}, "250", !known},
		{"explicit over the operator's", "2000", []worker.Option{worker.AssignmentInterval(250 * time.Millisecond)}, "250", !known},
		{"operator's choice kept", "2000", nil, "2000", false},
		{"off", "", []worker.Option{worker.AssignmentInterval(0)}, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if tc.operator != "" && !known {
				t.Skipf("%s: the broker does not know %s, so no operator can set it", b.c.Kind, groupcfg.AssignmentIntervalMs)
			}
			group := b.c.Group(t)
			if tc.operator != "" {
				group = b.c.GroupWith(t, map[string]string{groupcfg.AssignmentIntervalMs: tc.operator})
			}
			var logs logbuf.Buffer
			logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
			w, err := worker.New(append([]worker.Option{worker.Brokers(b.c.Seeds...), worker.Group(group), worker.Handle(b.topic, nop), worker.Logger(logger)}, tc.opts...)...)
			if err != nil {
				t.Fatal(err)
			}
			if err := w.Check(context.Background()); err != nil {
				t.Fatal(err)
			}
			v, own, _ := groupAssignInterval(t, cl, group)
			want := tc.want
			if !known {
				want = ""
			}
			if got := map[bool]string{true: v}[own]; got != want {
				t.Errorf("the group's own %s is %q, want %q", groupcfg.AssignmentIntervalMs, got, want)
			}
			if got := strings.Contains(logs.String(), "assignment interval"); got != tc.logged {
				t.Errorf("a log line names the assignment interval: %v, want %v:\n%s", got, tc.logged, logs.String())
			}
		})
	}
}
