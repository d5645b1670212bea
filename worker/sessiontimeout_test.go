package worker_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/internal/groupcfg"
	"github.com/shareq/shareq/internal/kafkatest"
	"github.com/shareq/shareq/internal/logbuf"
	"github.com/shareq/shareq/worker"
)

// defaultBroker gives kfake the session bounds and defaults of a default
// Apache Kafka broker (GroupCoordinatorConfig): a session of 45 s to
// 60 s, a heartbeat of 5 s to 15 s.
var defaultBroker = []kafkatest.Option{
	kafkatest.BrokerConfig(groupcfg.BrokerSessionTimeoutMs, "45000"),
	kafkatest.BrokerConfig(groupcfg.BrokerMinSessionTimeoutMs, "45000"),
	kafkatest.BrokerConfig(groupcfg.BrokerMaxSessionTimeoutMs, "60000"),
	kafkatest.BrokerConfig(groupcfg.BrokerHeartbeatIntervalMs, "5000"),
	kafkatest.BrokerConfig(groupcfg.BrokerMinHeartbeatIntervalMs, "5000"),
	kafkatest.BrokerConfig(groupcfg.BrokerMaxHeartbeatIntervalMs, "15000"),
}

// A session timeout the brokers' bounds refuse: the worker logs one line
// with the failover time the group keeps and the broker settings that
// allow what it asked for, leaves the group's session timeout alone (the
// nearest allowed value is no shorter than what it has), and runs jobs.
// The real test broker lowers the minimums to 1 s and 100 ms, so there
// only the maximum refuses; kfake is given a default broker's bounds.
func TestSessionTimeoutRefusedLoggedOnce(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		opts  []worker.Option
		fix   []string
		below bool // refused by the minimums
	}{
		{"the default below a default broker's minimum", nil,
			[]string{groupcfg.BrokerMinSessionTimeoutMs + "=6000", groupcfg.BrokerMinHeartbeatIntervalMs + "=1000"}, true},
		{"above the maximum", []worker.Option{worker.SessionTimeout(2 * time.Minute)},
			[]string{groupcfg.BrokerMaxSessionTimeoutMs + "=120000", groupcfg.BrokerMaxHeartbeatIntervalMs + "=20000"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, 1, defaultBroker...)
			if tc.below && kafkatest.Real() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				m, err := groupcfg.Broker(ctx, b.c.Client(t), groupcfg.BrokerMinSessionTimeoutMs)
				if err != nil {
					t.Fatal(err)
				}
				if m[groupcfg.BrokerMinSessionTimeoutMs] != "45000" {
					t.Skipf("the broker allows sessions down to %s ms (group.share.min.session.timeout.ms; the test broker's is 1000): kfake plays a default broker here, and RELIABILITY.md has a default broker's figures", m[groupcfg.BrokerMinSessionTimeoutMs])
				}
			}
			var logs logbuf.Buffer
			logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
			b.produce(t, "job")
			b.start(t, handler.Func(func(context.Context, *handler.Job) error { return nil }), append(tc.opts, worker.Logger(logger))...)
			b.obs.WaitFor(t, 30*time.Second, "the job", func(fs []finished) bool { return count(fs, "job", worker.AckAccept) == 1 })

			var lines []string
			for _, l := range strings.Split(logs.String(), "\n") {
				if strings.Contains(l, "do not allow the session timeout") {
					lines = append(lines, l)
				}
			}
			if len(lines) != 1 {
				t.Fatalf("%d lines say the session timeout is refused, want 1:\n%s", len(lines), logs.String())
			}
			for _, want := range append(tc.fix, "failover_within=", "level=WARN") {
				if !strings.Contains(lines[0], want) {
					t.Errorf("the line does not name %q:\n%s", want, lines[0])
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, own, err := groupcfg.DescribeOwn(ctx, b.c.Client(t), b.group, groupcfg.SessionTimeoutMs, groupcfg.HeartbeatIntervalMs)
			if err != nil {
				t.Fatal(err)
			}
			if own[groupcfg.SessionTimeoutMs] || own[groupcfg.HeartbeatIntervalMs] {
				t.Errorf("the worker set the group's session configs; nothing shorter was allowed, so it should leave them")
			}
		})
	}
}

// The default session timeout is set on a group whose session is longer
// and that has none of its own; an operator's setting on the group wins
// over it, and a shorter broker default (the test brokers' 3 s) is kept.
func TestSessionTimeoutDefault(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	nop := handler.Func(func(context.Context, *handler.Job) error { return nil })
	check := func(t *testing.T, group string) {
		t.Helper()
		w, err := worker.New(worker.Brokers(b.c.Seeds...), worker.Group(group), worker.Handle(b.topic, nop), worker.Logger(slog.New(slog.DiscardHandler)))
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Check(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	own := func(t *testing.T, group string) map[string]string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		v, own, err := groupcfg.DescribeOwn(ctx, b.c.Client(t), group, groupcfg.SessionTimeoutMs, groupcfg.HeartbeatIntervalMs)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for k := range own {
			if own[k] {
				out[k] = v[k]
			}
		}
		return out
	}
	t.Run("shorter broker default kept", func(t *testing.T) {
		g := b.c.Group(t)
		check(t, g)
		if got := own(t, g); len(got) != 0 {
			t.Errorf("group configs %v set; the broker's 3 s is already shorter than the default", got)
		}
	})
	t.Run("operator's choice kept", func(t *testing.T) {
		g := b.c.GroupWith(t, map[string]string{groupcfg.SessionTimeoutMs: "20000", groupcfg.HeartbeatIntervalMs: "2000"})
		check(t, g)
		if got := own(t, g); got[groupcfg.SessionTimeoutMs] != "20000" || got[groupcfg.HeartbeatIntervalMs] != "2000" {
			t.Errorf("group configs %v, want the operator's 20000 and 2000", got)
		}
	})
	t.Run("longer session shortened", func(t *testing.T) {
		// A broker whose default is Kafka's 45 s but whose minimum
		// allows the default: kfake only (the test broker's default is
		// 3 s, and its broker configs are static).
		if kafkatest.Real() {
			t.Skip("the test broker's default session is 3 s, below the default; kfake plays a broker with a 45 s default here")
		}
		c := kafkatest.New(t, kafkatest.BrokerConfig(groupcfg.BrokerSessionTimeoutMs, "45000"), kafkatest.BrokerConfig(groupcfg.BrokerHeartbeatIntervalMs, "5000"))
		bb := &bundle{c: c, topic: c.Topic(t, 1), group: c.Group(t)}
		w, err := worker.New(worker.Brokers(c.Seeds...), worker.Group(bb.group), worker.Handle(bb.topic, nop), worker.Logger(slog.New(slog.DiscardHandler)))
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Check(context.Background()); err != nil {
			t.Fatal(err)
		}
		wantGroupConfigs(t, c, bb.group, map[string]string{groupcfg.SessionTimeoutMs: "6000", groupcfg.HeartbeatIntervalMs: "1000"})
	})
}

// DeliveryLimit beyond the brokers' maximum fails the start with an
// error that names the broker config, on a broker that reports its bound
// (Kafka 4.3+) and on one that does not (kfake: held to Kafka's default
// of 10, as a production broker would be); a broker whose bound allows it
// takes it.
func TestDeliveryLimitBrokerBound(t *testing.T) {
	t.Parallel()
	nop := handler.Func(func(context.Context, *handler.Job) error { return nil })
	checkWith := func(t *testing.T, c *kafkatest.Cluster, n int) error {
		t.Helper()
		w, err := worker.New(worker.Brokers(c.Seeds...), worker.Group(c.Group(t)), worker.Handle(c.Topic(t, 1), nop),
			worker.DeliveryLimit(n), worker.Logger(slog.New(slog.DiscardHandler)))
		if err != nil {
			t.Fatal(err)
		}
		return w.Check(context.Background())
	}
	c := kafkatest.New(t)
	err := checkWith(t, c, 20)
	if err == nil || !strings.Contains(err.Error(), "DeliveryLimit(20)") || !strings.Contains(err.Error(), groupcfg.BrokerMaxDeliveryCountLimit) ||
		!strings.Contains(err.Error(), "maximum of 10") {
		t.Fatalf("DeliveryLimit(20) on %s: Check = %v, want an error naming the maximum of 10 and %s", c.Kind, err, groupcfg.BrokerMaxDeliveryCountLimit)
	}
	t.Logf("%s: %v", c.Kind, err)
	if kafkatest.Real() {
		return // the test broker's maximum is Kafka's 10; it is not a dynamic config
	}
	raised := kafkatest.New(t, kafkatest.BrokerConfig(groupcfg.BrokerMaxDeliveryCountLimit, "20"))
	if err := checkWith(t, raised, 20); err != nil {
		t.Fatalf("DeliveryLimit(20) with %s=20: %v", groupcfg.BrokerMaxDeliveryCountLimit, err)
	}
}
