package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/internal/acl"
	"github.com/shareq/shareq/internal/groupcfg"
)

// BrokerDLQPrefixDefault is the prefix Apache Kafka requires of a share
// group's dead-letter topic name unless the broker config
// errors.deadletterqueue.topic.name.prefix says otherwise.
const BrokerDLQPrefixDefault = "dlq."

// ErrBrokerDLQ: the share group's dead-letter topic asked for with
// [BrokerDLQ] cannot be used; the error says what to create or set.
var ErrBrokerDLQ = errors.New("worker: the share group's dead-letter topic cannot be used")

// BrokerDLQTopic returns the default name of group's dead-letter topic on
// the broker: "dlq.<group>".
func BrokerDLQTopic(group string) string { return BrokerDLQPrefixDefault + group }

// BrokerDLQ names the share group's dead-letter topic on the broker
// (Apache Kafka 4.4+, KIP-1191): the broker writes there every record it
// archives, whether a worker REJECTed it or its deliveries ran out
// however the last one ended, with __dlq.errors.* headers saying where
// it came from and why. It is the safety net under the dlq middleware:
// a job whose last delivery dies with its worker (SIGKILL, OOM, lost
// node) is archived by the broker, and lands there instead of vanishing.
// The failures a handler reports are still parked by the dlq middleware
// with its richer envelope; package dlq and "shareq dlq" read both kinds.
//
// The topic must exist with topic config
// errors.deadletterqueue.group.enable=true and a name that starts with
// the broker's errors.deadletterqueue.topic.name.prefix ("dlq." by
// default). At start the worker checks that and sets the group configs
// errors.deadletterqueue.topic.name to it and
// errors.deadletterqueue.copy.record.enable to true (so the record's key
// and value are kept), writing only what differs.
//
// Without this option the worker uses [BrokerDLQTopic](group) when the
// brokers support it and that topic is ready, or the dead-letter topic
// already configured on the group, and starts without one otherwise,
// saying so once at start: at Info level, with the command that creates
// it, when [BrokerDLQTopic](group) is not there (the broker's dead-letter
// topic is optional); at Warn level, with what to fix, when a topic was
// asked for and cannot take records: the group's configured one, or a
// [BrokerDLQTopic](group) that exists but lacks its config (or whose
// group configs the worker may not set). Brokers older than 4.4 have
// none, and the worker says nothing. With this option, a topic that
// cannot be used, or brokers older than 4.4, fail Run with
// [ErrBrokerDLQ]. BrokerDLQ("") leaves the group's dead-letter
// configuration as it is and says nothing.
func BrokerDLQ(topic string) Option {
	return optionFunc(func(c *config) { c.brokerDLQ, c.brokerDLQSet = topic, true })
}

// BrokerDLQTopic returns the dead-letter topic the broker writes the
// group's archived records to, as the start-up checks found it: "" when
// there is none (brokers before 4.4, a topic not ready, or
// BrokerDLQ("")) or before [Worker.Check] or [Worker.Run] ran.
func (w *Worker) BrokerDLQTopic() string {
	if p := w.brokerDLQ.Load(); p != nil {
		return *p
	}
	return ""
}

// setupBrokerDLQ settles the group's dead-letter topic; current holds the
// group configs describeGroupConfigs found (described is false when it
// could not). It returns an error only for a topic asked for with
// BrokerDLQ.
func (w *Worker) setupBrokerDLQ(ctx context.Context, admin *kgo.Client, current map[string]string, described bool) error {
	explicit := w.cfg.brokerDLQSet
	want := w.cfg.brokerDLQ
	if explicit && want == "" {
		return nil
	}
	configured, supported := current[groupcfg.DLQTopicName]
	log := w.cfg.logger.With("group", w.cfg.group)
	if !supported {
		if explicit {
			why := "the brokers do not know the group config " + groupcfg.DLQTopicName + " (share-group dead-letter topics, KIP-1191, came with Apache Kafka 4.4)"
			if !described {
				why = "the group's configs cannot be read (grant DESCRIBE_CONFIGS on the group)"
			}
			return fmt.Errorf("%w: BrokerDLQ(%q): %s; remove the option, or upgrade the brokers (the dlq middleware parks failed jobs either way)", ErrBrokerDLQ, want, why)
		}
		return nil // older brokers, kfake: nothing to set up
	}
	if !explicit {
		want = configured // an operator's choice wins over the default name
		if want == "" {
			want = BrokerDLQTopic(w.cfg.group)
		}
	}
	if err := w.checkBrokerDLQTopic(ctx, admin, want); err != nil {
		if explicit {
			return fmt.Errorf("%w: BrokerDLQ(%q): %w", ErrBrokerDLQ, want, err)
		}
		logNoBrokerDLQ(log, want, configured != "", err)
		return nil
	}
	set := map[string]string{}
	if configured != want {
		set[groupcfg.DLQTopicName] = want
	}
	if configured != want && current[groupcfg.DLQCopyRecord] != "true" {
		set[groupcfg.DLQCopyRecord] = "true"
	}
	if len(set) > 0 {
		if err := groupcfg.Set(ctx, admin, w.cfg.group, set); err != nil {
			if acl.Denied(err) {
				err = w.notAuthorized(admin, acl.Right{Op: "AlterConfigs", Resource: acl.Group, Name: w.cfg.group},
					fmt.Errorf("setting %s=%s: %w", groupcfg.DLQTopicName, want, err))
			} else {
				err = fmt.Errorf("setting %s=%s failed: %w (set it with kafka-configs.sh --bootstrap-server %s --alter --entity-type groups --entity-name %s --add-config %s=%s,%s=true, or grant ALTER_CONFIGS on the group)",
					groupcfg.DLQTopicName, want, err, w.bootstrapHint(), w.cfg.group, groupcfg.DLQTopicName, want, groupcfg.DLQCopyRecord)
			}
			if explicit {
				return fmt.Errorf("%w: BrokerDLQ(%q): %w", ErrBrokerDLQ, want, err)
			}
			logNoBrokerDLQ(log, want, configured != "", err)
			return nil
		}
	}
	w.brokerDLQ.Store(&want)
	log.Info("the broker writes archived records to the group's dead-letter topic", "topic", want)
	return nil
}

// logNoBrokerDLQ says, once at start, that the broker will not write the
// group's archived records to topic, and how to fix it (err): at Warn
// level when the topic was asked for (configured on the group, or
// created: err is not a topicUnseen), else at Info level, since the
// broker's dead-letter topic is optional and the dlq middleware parks
// failed jobs without it.
func logNoBrokerDLQ(log *slog.Logger, topic string, configured bool, err error) {
	var unseen *topicUnseen
	switch {
	case configured:
		log.Warn("the group's dead-letter topic cannot take records: the broker archives failed records without writing them there",
			"topic", topic, "error", err.Error())
	case errors.As(err, &unseen):
		log.Info("no dead-letter topic on the broker: a job whose last delivery dies with its worker is archived unrecorded",
			"topic", topic, "fix", err.Error())
	default:
		log.Warn("the dead-letter topic on the broker cannot take records: a job whose last delivery dies with its worker is archived unrecorded",
			"topic", topic, "fix", err.Error())
	}
}

// topicUnseen is checkBrokerDLQTopic's error for a topic that is not
// there as far as the worker can tell: it does not exist, the brokers
// refuse its name, or the worker may not describe it.
type topicUnseen struct{ err error }

func (e *topicUnseen) Error() string { return e.err.Error() }
func (e *topicUnseen) Unwrap() error { return e.err }

// checkBrokerDLQTopic returns nil when the broker will write the group's
// archived records to topic, else an error that says how to fix it: a
// *topicUnseen when the topic is not there as far as the worker can tell.
func (w *Worker) checkBrokerDLQTopic(ctx context.Context, admin *kgo.Client, topic string) error {
	prefix := BrokerDLQPrefixDefault
	if m, err := groupcfg.Broker(ctx, admin, groupcfg.BrokerDLQTopicPrefix); err == nil {
		if p, ok := m[groupcfg.BrokerDLQTopicPrefix]; ok {
			prefix = p
		}
	}
	if !strings.HasPrefix(topic, prefix) {
		return &topicUnseen{fmt.Errorf("the brokers take dead-letter topics only with names starting with %q (broker config %s); name it %s%s",
			prefix, groupcfg.BrokerDLQTopicPrefix, prefix, strings.TrimPrefix(topic, BrokerDLQPrefixDefault))}
	}
	adm := kadm.NewClient(admin)
	listed, err := adm.ListTopics(ctx, topic)
	if acl.Denied(err) {
		return &topicUnseen{w.notAuthorized(admin, acl.Right{Op: "Describe", Resource: acl.Topic, Name: topic}, err)}
	}
	if err != nil {
		return fmt.Errorf("cannot list topic %s: %v", topic, err)
	}
	if d, ok := listed[topic]; ok && acl.Denied(d.Err) {
		return &topicUnseen{w.notAuthorized(admin, acl.Right{Op: "Describe", Resource: acl.Topic, Name: topic}, d.Err)}
	}
	if d, ok := listed[topic]; !ok || d.Err != nil {
		shareq := ""
		if topic == BrokerDLQTopic(w.cfg.group) {
			shareq = fmt.Sprintf(" (or shareq topics create -group-dlq %s -brokers %s)", w.cfg.group, w.bootstrapHint())
		}
		return &topicUnseen{fmt.Errorf("topic %s does not exist; create it with kafka-topics.sh --bootstrap-server %s --create --topic %s --config %s=true%s",
			topic, w.bootstrapHint(), topic, groupcfg.TopicDLQGroupEnable, shareq)}
	}
	rcs, err := adm.DescribeTopicConfigs(ctx, topic)
	if err == nil {
		var rc kadm.ResourceConfig
		rc, err = rcs.On(topic, nil)
		if err == nil {
			err = rc.Err
		}
		if err == nil {
			for _, c := range rc.Configs {
				if c.Key == groupcfg.TopicDLQGroupEnable && c.MaybeValue() == "true" {
					return nil
				}
			}
			return fmt.Errorf("topic %s lacks topic config %s=true, so the broker writes nothing to it; set it with kafka-configs.sh --bootstrap-server %s --alter --entity-type topics --entity-name %s --add-config %s=true",
				topic, groupcfg.TopicDLQGroupEnable, w.bootstrapHint(), topic, groupcfg.TopicDLQGroupEnable)
		}
	}
	if acl.Denied(err) {
		return w.notAuthorized(admin, acl.Right{Op: "DescribeConfigs", Resource: acl.Topic, Name: topic}, err)
	}
	return fmt.Errorf("cannot read the configs of topic %s: %v (grant DESCRIBE_CONFIGS on it)", topic, err)
}

// bootstrapHint is the first seed broker, for commands in error messages.
func (w *Worker) bootstrapHint() string {
	if len(w.cfg.brokers) > 0 {
		return w.cfg.brokers[0]
	}
	return "<broker>"
}
