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
	return describe(ctx, cl, kmsg.ConfigResourceTypeGroupConfig, group, names)
}

// Broker returns broker-level config values (from any broker).
func Broker(ctx context.Context, cl *kgo.Client, names ...string) (map[string]string, error) {
	return describe(ctx, cl, kmsg.ConfigResourceTypeBroker, "", names)
}

func describe(ctx context.Context, cl *kgo.Client, typ kmsg.ConfigResourceType, name string, names []string) (map[string]string, error) {
	req := kmsg.NewPtrDescribeConfigsRequest()
	res := kmsg.NewDescribeConfigsRequestResource()
	res.ResourceType = typ
	res.ResourceName = name
	if typ == kmsg.ConfigResourceTypeBroker {
		// Ask the broker that answers; an empty name is not valid here.
		meta, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl)
		if err != nil {
			return nil, fmt.Errorf("describe broker configs: %w", err)
		}
		if len(meta.Brokers) == 0 {
			return nil, fmt.Errorf("describe broker configs: no brokers in metadata")
		}
		res.ResourceName = strconv.Itoa(int(meta.Brokers[0].NodeID))
	}
	if len(names) > 0 {
		res.ConfigNames = names
	}
	req.Resources = append(req.Resources, res)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return nil, fmt.Errorf("describe configs of %v %q: %w", typ, name, err)
	}
	out := map[string]string{}
	for _, r := range resp.Resources {
		if err := kerr.ErrorForCode(r.ErrorCode); err != nil {
			return nil, fmt.Errorf("describe configs of %v %q: %w", typ, name, err)
		}
		for _, c := range r.Configs {
			if c.Value != nil {
				out[c.Name] = *c.Value
			}
		}
	}
	return out, nil
}
