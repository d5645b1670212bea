package worker

import "errors"

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
