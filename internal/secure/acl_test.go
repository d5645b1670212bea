package secure_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/shareq/shareq/dlq"
	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/internal/kafkatest"
	"github.com/shareq/shareq/internal/logbuf"
	"github.com/shareq/shareq/worker"
)

// grantLine is the shape of the kafka-acls.sh command a missing-right
// error prints.
var grantLine = regexp.MustCompile(`kafka-acls\.sh --bootstrap-server (\S+) --add --allow-principal 'User:<principal>' --operation (\w+) --(topic|group) (\S+)`)

// TestSecureWorkerACLs: for each ACL a worker needs (docs/security.md),
// a worker granted all the others fails at start with ErrNotAuthorized,
// naming the missing right and the kafka-acls.sh line that grants it;
// the ACL that line describes, granted, lets the same worker start.
func TestSecureWorkerACLs(t *testing.T) {
	t.Parallel()
	bothClusters(t, testWorkerACLs)
}

// bothClusters runs test on kfake with SASL and ACLs (kafkatest.SecureFake)
// and, when SHAREQ_TEST_SECURE names it, on the secure Apache Kafka broker
// (the secure step of scripts/test.sh; the other passes run the kfake half).
func bothClusters(t *testing.T, test func(t *testing.T, s *kafkatest.SecureCluster)) {
	t.Run("kfake", func(t *testing.T) {
		t.Parallel()
		test(t, kafkatest.SecureFake(t))
	})
	if os.Getenv(kafkatest.EnvSecure) == "" {
		return
	}
	t.Run("kafka", func(t *testing.T) {
		t.Parallel()
		test(t, kafkatest.Secure(t))
	})
}

func testWorkerACLs(t *testing.T, s *kafkatest.SecureCluster) {
	for _, tc := range []struct {
		name string
		// acls is the full set for the case, missing the one at drop;
		// extra ACLs are granted and stay (a narrower right than the
		// one missing).
		acls  func(topic, group, dlqTopic string) []kafkatest.ACL
		drop  int
		extra func(topic, group string) []kafkatest.ACL
		opts  func(dlqTopic string) []worker.Option
		right func(topic, group, dlqTopic string) string
		// brokerDLQ: dlqTopic is the group's dead-letter topic on the
		// broker (KIP-1191), dlq.<group>, with the topic config it needs.
		brokerDLQ bool
		// notOnKfake says why the case does not apply to kfake.
		notOnKfake string
	}{
		{name: "Read on the topic",
			acls: base, drop: 0,
			right: func(topic, _, _ string) string { return fmt.Sprintf("Read on topic %q", topic) }},
		{name: "Read on the topic, Describe granted",
			acls: base, drop: 0,
			extra: func(topic, _ string) []kafkatest.ACL {
				return []kafkatest.ACL{{Resource: "topic", Name: topic, Op: "Describe"}}
			},
			right: func(topic, _, _ string) string { return fmt.Sprintf("Read on topic %q", topic) }},
		{name: "Read on the group",
			acls: base, drop: 1,
			right: func(_, group, _ string) string { return fmt.Sprintf("Read on group %q", group) }},
		{name: "Read on the group, Describe granted",
			acls: base, drop: 1,
			extra: func(_, group string) []kafkatest.ACL {
				return []kafkatest.ACL{{Resource: "group", Name: group, Op: "Describe"}}
			},
			right: func(_, group, _ string) string { return fmt.Sprintf("Read on group %q", group) }},
		{name: "DescribeConfigs on the group",
			acls: base, drop: 2, notOnKfake: noGroupConfigACLs,
			right: func(_, group, _ string) string { return fmt.Sprintf("DescribeConfigs on group %q", group) }},
		{name: "AlterConfigs on the group (AutoOffsetReset)",
			acls: withAlter, drop: 3, notOnKfake: noGroupConfigACLs,
			opts:  func(string) []worker.Option { return []worker.Option{worker.AutoOffsetReset("latest")} },
			right: func(_, group, _ string) string { return fmt.Sprintf("AlterConfigs on group %q", group) }},
		{name: "AlterConfigs on the group (DeliveryLimit)",
			acls: withAlter, drop: 3, notOnKfake: noGroupConfigACLs,
			opts:  func(string) []worker.Option { return []worker.Option{worker.DeliveryLimit(7)} },
			right: func(_, group, _ string) string { return fmt.Sprintf("AlterConfigs on group %q", group) }},
		{name: "AlterConfigs on the group (SessionTimeout)",
			acls: withAlter, drop: 3, notOnKfake: noGroupConfigACLs,
			opts:  func(string) []worker.Option { return []worker.Option{worker.SessionTimeout(2 * time.Second)} },
			right: func(_, group, _ string) string { return fmt.Sprintf("AlterConfigs on group %q", group) }},
		{name: "AlterConfigs on the group (AssignmentInterval)",
			acls: withAlter, drop: 3, notOnKfake: noGroupConfigACLs,
			opts:  func(string) []worker.Option { return []worker.Option{worker.AssignmentInterval(50 * time.Millisecond)} },
			right: func(_, group, _ string) string { return fmt.Sprintf("AlterConfigs on group %q", group) }},
		{name: "Write on a RequireTopics DLQ topic",
			acls: withDLQ, drop: 3,
			opts:  func(dlqTopic string) []worker.Option { return []worker.Option{worker.RequireTopics(dlqTopic)} },
			right: func(_, _, dlqTopic string) string { return fmt.Sprintf("Write on topic %q", dlqTopic) }},
		{name: "AlterConfigs on the group (BrokerDLQ)", notOnKfake: noBrokerDLQ,
			acls: withBrokerDLQ, drop: 3, brokerDLQ: true,
			opts:  func(dlqTopic string) []worker.Option { return []worker.Option{worker.BrokerDLQ(dlqTopic)} },
			right: func(_, group, _ string) string { return fmt.Sprintf("AlterConfigs on group %q", group) }},
		{name: "Describe on the BrokerDLQ topic", notOnKfake: noBrokerDLQ,
			acls: withBrokerDLQ, drop: 4, brokerDLQ: true,
			opts:  func(dlqTopic string) []worker.Option { return []worker.Option{worker.BrokerDLQ(dlqTopic)} },
			right: func(_, _, dlqTopic string) string { return fmt.Sprintf("Describe on topic %q", dlqTopic) }},
		{name: "DescribeConfigs on the BrokerDLQ topic", notOnKfake: noBrokerDLQ,
			acls: withBrokerDLQ, drop: 5, brokerDLQ: true,
			opts:  func(dlqTopic string) []worker.Option { return []worker.Option{worker.BrokerDLQ(dlqTopic)} },
			right: func(_, _, dlqTopic string) string { return fmt.Sprintf("DescribeConfigs on topic %q", dlqTopic) }},
	} {
		// Cases for a right this broker does not have are not cases
		// here (docs/security.md says which apply where).
		switch {
		case tc.notOnKfake != "" && s.Fake():
			t.Logf("%s: not on kfake: %s", tc.name, tc.notOnKfake)
			continue
		case tc.brokerDLQ && !s.Fake() && !s.BrokerDLQ:
			t.Logf("%s: the broker has no share-group dead-letter topics (Kafka 4.4+)", tc.name)
			continue
		case strings.Contains(tc.name, "GroupDeliveryLimit") && !s.Fake() && !s.GroupDeliveryLimitConfig:
			t.Logf("%s: the broker has no group config share.delivery.count.limit (Kafka 4.3+)", tc.name)
			continue
		case strings.Contains(tc.name, "AssignmentInterval") && !s.Fake() && !s.GroupDeliveryLimitConfig:
			// The same release (4.3) added both group configs.
			t.Logf("%s: the broker has no group config share.assignment.interval.ms (Kafka 4.3+)", tc.name)
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			topic, dlqTopic, group := s.Topic(t, 1), s.Topic(t, 1), s.Group(t)
			if tc.brokerDLQ {
				dlqTopic = worker.BrokerDLQTopic(group)
				on := "true"
				s.CreateTopic(t, dlqTopic, 1, map[string]*string{"errors.deadletterqueue.group.enable": &on})
			}
			all := tc.acls(topic, group, dlqTopic)
			s.Allow(t, s.Principal(), without(all, tc.drop)...)
			if tc.extra != nil {
				s.Allow(t, s.Principal(), tc.extra(topic, group)...)
			}
			opts := []worker.Option{worker.ClientOpts(s.SCRAMOpts(t)...), worker.Group(group),
				worker.Handle(topic, handler.Func(nopJob))}
			if tc.opts != nil {
				opts = append(opts, tc.opts(dlqTopic)...)
			}
			err, took := startErr(t, 10*time.Second, opts...)
			if !errors.Is(err, worker.ErrNotAuthorized) {
				t.Fatalf("Run = %v, want ErrNotAuthorized", err)
			}
			right := tc.right(topic, group, dlqTopic)
			mustContain(t, "the error", err.Error(), "lacks "+right, "grant it with: kafka-acls.sh")
			m := grantLine.FindStringSubmatch(err.Error())
			if m == nil {
				t.Fatalf("no kafka-acls.sh line in %q", err)
			}
			if m[1] != s.SASLAddr {
				t.Errorf("the line's --bootstrap-server is %s, want the worker's seed %s", m[1], s.SASLAddr)
			}
			granted := kafkatest.ACL{Resource: m[3], Name: m[4], Op: m[2]}
			if granted != all[tc.drop] {
				t.Errorf("the line grants %v, want %v (the ACL removed)", granted, all[tc.drop])
			}
			t.Logf("failed after %v: %v", took.Round(time.Millisecond), err)

			// What the line grants is what was missing.
			s.Allow(t, s.Principal(), granted)
			w, err := worker.New(opts...)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := w.Check(ctx); err != nil {
				t.Fatalf("with %v granted, Check = %v", granted, err)
			}
		})
	}
}

// Where kfake differs (docs/kafka-differences.md).
const (
	noGroupConfigACLs = "kfake does not authorize group configs: DescribeConfigs and AlterConfigs of a group succeed without ACLs"
	noBrokerDLQ       = "kfake has no share-group dead-letter topics (KIP-1191)"
)

// base is the ACL set of a worker: Read on the topic, Read and
// DescribeConfigs on the group (workerACLs, in that order).
func base(topic, group, _ string) []kafkatest.ACL { return workerACLs(topic, group, "") }

func withAlter(topic, group, _ string) []kafkatest.ACL {
	return append(base(topic, group, ""), kafkatest.ACL{Resource: "group", Name: group, Op: "AlterConfigs"})
}

func withDLQ(topic, group, dlqTopic string) []kafkatest.ACL {
	return workerACLs(topic, group, dlqTopic)
}

// withBrokerDLQ: base, AlterConfigs on the group (to point it at its
// dead-letter topic), Describe and DescribeConfigs on that topic.
func withBrokerDLQ(topic, group, dlqTopic string) []kafkatest.ACL {
	return append(withAlter(topic, group, ""),
		kafkatest.ACL{Resource: "topic", Name: dlqTopic, Op: "Describe"},
		kafkatest.ACL{Resource: "topic", Name: dlqTopic, Op: "DescribeConfigs"})
}

// TestSecureDLQWithoutWrite: a worker whose dlq middleware may not write
// its DLQ topic (and that does not name it in RequireTopics) starts, parks
// nothing, and releases the poison job, with an error naming the missing
// Write and the kafka-acls.sh line.
func TestSecureDLQWithoutWrite(t *testing.T) {
	t.Parallel()
	bothClusters(t, testDLQWithoutWrite)
}

func testDLQWithoutWrite(t *testing.T, s *kafkatest.SecureCluster) {
	topic, dlqTopic, group := s.Topic(t, 1), s.Topic(t, 1), s.Group(t)
	s.Allow(t, s.Principal(), workerACLs(topic, group, "")...)
	prod := s.Client(t, s.SCRAMOpts(t)...)
	park, err := dlq.Middleware(prod, dlq.Topic(dlqTopic))
	if err != nil {
		t.Fatal(err)
	}
	rec := newJobs()
	w, err := worker.New(worker.ClientOpts(s.SCRAMOpts(t)...), worker.Group(group), worker.Observers(rec),
		worker.RetryBackoff(nil), worker.Use(park),
		worker.Handle(topic, handler.Func(func(context.Context, *handler.Job) error {
			return handler.Permanent(errors.New("poison"))
		})))
	if err != nil {
		t.Fatal(err)
	}
	stop := kafkatest.Run(t, w.Run)
	produce(t, s, topic, "poison")
	var got worker.Result
	rec.waitFor(t, "the poison job's first outcome", func(_ map[string]int, res []worker.Result) bool {
		if len(res) > 0 {
			got = res[0]
		}
		return len(res) > 0
	})
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if got.Ack != worker.AckRelease {
		t.Errorf("ack %v, want release (the park failed)", got.Ack)
	}
	if got.Err == nil {
		t.Fatal("no error for the failed park")
	}
	want := fmt.Sprintf("lacks Write on topic %q", dlqTopic)
	mustContain(t, "the job's error", got.Err.Error(), "TOPIC_AUTHORIZATION_FAILED", want,
		fmt.Sprintf("kafka-acls.sh --bootstrap-server %s --add --allow-principal 'User:<principal>' --operation Write --topic %s", s.SASLAddr, dlqTopic))

	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	ends, err := s.Admin().ListEndOffsets(ctx, dlqTopic)
	if err != nil {
		t.Fatal(err)
	}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset != 0 {
			t.Errorf("DLQ topic partition %d has end offset %d: something was parked", o.Partition, o.Offset)
		}
	})
}

// TestSecureSnoozeCopies: a worker copies a job snoozed past MaxHold back
// to its topic, which needs Write on the topic. Without it the worker
// warns once at start, naming the topics and what to grant, and the
// snoozed job is released instead (a delivery spent); with it the copy
// runs the job again, on its first delivery.
func TestSecureSnoozeCopies(t *testing.T) {
	t.Parallel()
	bothClusters(t, testSnoozeCopies)
}

func testSnoozeCopies(t *testing.T, s *kafkatest.SecureCluster) {
	for _, write := range []bool{false, true} {
		t.Run(fmt.Sprintf("write=%v", write), func(t *testing.T) {
			topic, group := s.Topic(t, 1), s.Group(t)
			acls := workerACLs(topic, group, "")
			if write {
				acls = append(acls, kafkatest.ACL{Resource: "topic", Name: topic, Op: "Write"})
			}
			s.Allow(t, s.Principal(), acls...)
			var logs logbuf.Buffer
			rec := newJobs()
			w, err := worker.New(worker.ClientOpts(s.SCRAMOpts(t)...), worker.Group(group), worker.Observers(rec),
				worker.Logger(logger(&logs)), worker.MaxHold(time.Second),
				worker.Handle(topic, handler.Func(func(_ context.Context, job *handler.Job) error {
					if job.Snoozes() == 0 {
						return handler.Snooze(2 * time.Second)
					}
					return nil
				})))
			if err != nil {
				t.Fatal(err)
			}
			stop := kafkatest.Run(t, w.Run)
			produce(t, s, topic, "later")
			var got []worker.Result
			rec.waitFor(t, "the snoozed job's end", func(_ map[string]int, res []worker.Result) bool {
				got = res
				if write { // snoozed (once or more: a copy is held until MaxHold too), and succeeded from a copy, reported in either order
					return len(res) >= 2 && slices.ContainsFunc(res, func(r worker.Result) bool { return r.Outcome == worker.OutcomeSucceeded })
				}
				return len(res) >= 1
			})
			if err := stop(); err != nil {
				t.Fatalf("Run: %v", err)
			}
			warned := strings.Count(logs.String(), "the worker may not write topics it handles")
			if write {
				if warned != 0 {
					t.Errorf("warned about Write though it is granted:\n%s", logs.String())
				}
				for _, r := range got {
					if r.Outcome != worker.OutcomeSnoozed && r.Outcome != worker.OutcomeSucceeded {
						t.Errorf("outcome %v (%v) before the run; want snoozed", r.Outcome, r.Err)
					}
				}
				return
			}
			if warned != 1 {
				t.Errorf("%d start-up warnings about Write; want 1:\n%s", warned, logs.String())
			}
			mustContain(t, "the start-up warning", logs.String(), "topics="+topic, "worker.SnoozeVia")
			if got[0].Ack != worker.AckRelease || got[0].Err == nil || !strings.Contains(got[0].Err.Error(), "copy of the snoozed job") {
				t.Errorf("first outcome %+v; want a release for the failed copy", got[0])
			}
		})
	}
}
