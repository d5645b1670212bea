// Package groupcfg reads and sets share-group configuration (Kafka config
// resource type GROUP) and the broker defaults behind it. kadm has no
// helpers for group configs, so this speaks kmsg directly.
package groupcfg

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Group config names shareq reads or sets.
const (
	AutoOffsetReset      = "share.auto.offset.reset"
	DeliveryCountLimit   = "share.delivery.count.limit"
	RecordLockDurationMs = "share.record.lock.duration.ms"
	RenewAckEnable       = "share.renew.acknowledge.enable"
	// SessionTimeoutMs is how long the coordinator keeps a member that
	// stopped heartbeating (a crashed worker) and its partitions.
	SessionTimeoutMs = "share.session.timeout.ms"
	// HeartbeatIntervalMs is the heartbeat interval the coordinator gives
	// the group's members; it must be below SessionTimeoutMs.
	HeartbeatIntervalMs = "share.heartbeat.interval.ms"
	// PartitionMaxRecordLocks is how many records from a share
	// partition's start offset the broker may have in flight (acquired, or
	// done past a record that is not): past it, no record of the
	// partition is acquired until the start offset moves (Kafka's default
	// 2,000, group.share.partition.max.record.locks).
	PartitionMaxRecordLocks = "share.partition.max.record.locks"

	// DLQTopicName names the group's dead-letter topic (Kafka 4.4+,
	// KIP-1191): the broker writes every record it archives there. Empty
	// (the default): none.
	DLQTopicName = "errors.deadletterqueue.topic.name"
	// DLQCopyRecord makes the broker copy the archived record's key and
	// value into its dead-letter record (default false: headers only).
	// The record's own headers are never copied.
	DLQCopyRecord = "errors.deadletterqueue.copy.record.enable"
	// TopicDLQGroupEnable is the TOPIC config that lets share groups
	// write to a topic as their dead-letter topic (default false: the
	// broker logs an error and writes nothing).
	TopicDLQGroupEnable = "errors.deadletterqueue.group.enable"
	// BrokerDLQTopicPrefix is the broker config every dead-letter topic
	// name must start with (default "dlq."; "" for no restriction).
	BrokerDLQTopicPrefix = "errors.deadletterqueue.topic.name.prefix"

	// BrokerDeliveryCountLimit is the broker-wide default of
	// DeliveryCountLimit.
	BrokerDeliveryCountLimit = "group.share.delivery.count.limit"
	// BrokerRecordLockDurationMs is the broker-wide default of
	// RecordLockDurationMs.
	BrokerRecordLockDurationMs = "group.share.record.lock.duration.ms"
	// BrokerMinDeliveryCountLimit and BrokerMaxDeliveryCountLimit bound
	// DeliveryCountLimit (Kafka 4.3+; 2 and 10 by default).
	BrokerMinDeliveryCountLimit = "group.share.min.delivery.count.limit"
	BrokerMaxDeliveryCountLimit = "group.share.max.delivery.count.limit"

	// BrokerPartitionMaxRecordLocks is the broker-wide default of
	// PartitionMaxRecordLocks (2,000).
	BrokerPartitionMaxRecordLocks = "group.share.partition.max.record.locks"

	// BrokerSessionTimeoutMs and BrokerHeartbeatIntervalMs are the
	// broker-wide defaults of SessionTimeoutMs and HeartbeatIntervalMs
	// (45 s and 5 s).
	BrokerSessionTimeoutMs    = "group.share.session.timeout.ms"
	BrokerHeartbeatIntervalMs = "group.share.heartbeat.interval.ms"
	// The broker's bounds of SessionTimeoutMs (45 s to 60 s by default:
	// a default broker refuses a shorter session) and of
	// HeartbeatIntervalMs (5 s to 15 s).
	BrokerMinSessionTimeoutMs    = "group.share.min.session.timeout.ms"
	BrokerMaxSessionTimeoutMs    = "group.share.max.session.timeout.ms"
	BrokerMinHeartbeatIntervalMs = "group.share.min.heartbeat.interval.ms"
	BrokerMaxHeartbeatIntervalMs = "group.share.max.heartbeat.interval.ms"

	// AssignmentIntervalMs is how often at most the coordinator computes
	// the group's assignment (Kafka 4.3+, KIP-1263): a member that joins
	// gets its partitions about this long after. The broker's default is
	// BrokerAssignmentIntervalMs (1 s), bounded by
	// BrokerMinAssignmentIntervalMs and BrokerMaxAssignmentIntervalMs (0
	// and 15 s by default).
	AssignmentIntervalMs          = "share.assignment.interval.ms"
	BrokerAssignmentIntervalMs    = "group.share.assignment.interval.ms"
	BrokerMinAssignmentIntervalMs = "group.share.min.assignment.interval.ms"
	BrokerMaxAssignmentIntervalMs = "group.share.max.assignment.interval.ms"
)

// Set sets group configs with IncrementalAlterConfigs.
func Set(ctx context.Context, cl *kgo.Client, group string, kv map[string]string) error {
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	res := kmsg.NewIncrementalAlterConfigsRequestResource()
	res.ResourceType = kmsg.ConfigResourceTypeGroupConfig
	res.ResourceName = group
	for _, k := range slices.Sorted(maps.Keys(kv)) {
		c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
		c.Name = k
		c.Op = kmsg.IncrementalAlterConfigOpSet
		v := kv[k]
		c.Value = &v
		res.Configs = append(res.Configs, c)
	}
	req.Resources = append(req.Resources, res)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return fmt.Errorf("set configs of group %q: %w", group, err)
	}
	for _, r := range resp.Resources {
		if err := kerr.ErrorForCode(r.ErrorCode); err != nil {
			msg := ""
			if r.ErrorMessage != nil {
				msg = ": " + *r.ErrorMessage
			}
			return fmt.Errorf("set configs %v of group %q: %w%s", slices.Sorted(maps.Keys(kv)), group, err, msg)
		}
	}
	return nil
}

// Describe returns the group's values of the named configs (all when none
// are named). Configs the broker does not know are absent from the map.
func Describe(ctx context.Context, cl *kgo.Client, group string, names ...string) (map[string]string, error) {
	values, _, err := DescribeOwn(ctx, cl, group, names...)
	return values, err
}

// DescribeOwn is [Describe] that also says which of the configs are set
// on the group itself (source GROUP_CONFIG); the others are the broker's
// defaults. Apache Kafka describes those with their values, kfake without.
func DescribeOwn(ctx context.Context, cl *kgo.Client, group string, names ...string) (values map[string]string, own map[string]bool, err error) {
	return describe(ctx, cl, kmsg.ConfigResourceTypeGroupConfig, group, names)
}

// Broker returns broker-level config values (from any broker).
func Broker(ctx context.Context, cl *kgo.Client, names ...string) (map[string]string, error) {
	values, _, err := describe(ctx, cl, kmsg.ConfigResourceTypeBroker, "", names)
	return values, err
}

func describe(ctx context.Context, cl *kgo.Client, typ kmsg.ConfigResourceType, name string, names []string) (map[string]string, map[string]bool, error) {
	req := kmsg.NewPtrDescribeConfigsRequest()
	res := kmsg.NewDescribeConfigsRequestResource()
	res.ResourceType = typ
	res.ResourceName = name
	if typ == kmsg.ConfigResourceTypeBroker {
		// Ask the broker that answers; an empty name is not valid here.
		meta, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl)
		if err != nil {
			return nil, nil, fmt.Errorf("describe broker configs: %w", err)
		}
		if len(meta.Brokers) == 0 {
			return nil, nil, fmt.Errorf("describe broker configs: no brokers in metadata")
		}
		res.ResourceName = strconv.Itoa(int(meta.Brokers[0].NodeID))
	}
	if len(names) > 0 {
		res.ConfigNames = names
	}
	req.Resources = append(req.Resources, res)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return nil, nil, fmt.Errorf("describe configs of %v %q: %w", typ, name, err)
	}
	out, own := map[string]string{}, map[string]bool{}
	for _, r := range resp.Resources {
		if err := kerr.ErrorForCode(r.ErrorCode); err != nil {
			return nil, nil, fmt.Errorf("describe configs of %v %q: %w", typ, name, err)
		}
		for _, c := range r.Configs {
			if c.Value != nil {
				out[c.Name] = *c.Value
				own[c.Name] = c.Source == kmsg.ConfigSourceGroupConfig
			}
		}
	}
	return out, own, nil
}
