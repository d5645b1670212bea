package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
)

// startBroker returns the brokers to use: cfg's, or, when there are none,
// those of a broker it starts in this process (stop stops it).
func startBroker(cfg config, con *console, sum *Summary) (brokers []string, stop func(), err error) {
	if len(cfg.Brokers) > 0 {
		return cfg.Brokers, func() {}, nil
	}
	// franz-go's kfake, what shareq dev runs; it sweeps expired locks
	// every 500 ms (5 s by default) so that an abandoned job comes back
	// promptly.
	c, err := kfake.NewCluster(kfake.NumBrokers(1),
		kfake.BrokerConfigs(map[string]string{"share.record.lock.sweep.interval.ms": "500"}))
	if err != nil {
		return nil, nil, err
	}
	brokers = c.ListenAddrs()
	sum.Brokers, sum.Embedded = strings.Join(brokers, ","), true
	con.printf("started an in-process Kafka broker (kfake) on %s", sum.Brokers)
	return brokers, c.Close, nil
}

// prepareCluster creates the topics the example needs, if missing, and
// shortens the embedded broker's locks.
func prepareCluster(ctx context.Context, adm *kadm.Client, con *console, embedded bool) error {
	if embedded {
		if err := shortenLocks(ctx, adm); err != nil {
			return err
		}
	}
	if err := ensureTopic(ctx, adm, con, embedded, topic, partitions); err != nil {
		return err
	}
	return ensureTopic(ctx, adm, con, embedded, dlqTopic, dlqPartitions)
}

// embeddedLock is how long the embedded broker locks a delivered record.
const embeddedLock = 5 * time.Second

// shortenLocks sets the embedded broker's record lock to embeddedLock
// instead of Kafka's 30 s, so that the demo's slow jobs (3 s) outrun half
// their lock and the worker renews it while they run, as it does for a job
// of minutes on a real cluster. On a real cluster, set the group config
// share.record.lock.duration.ms instead (the embedded broker ignores it).
func shortenLocks(ctx context.Context, adm *kadm.Client) error {
	ms := strconv.Itoa(int(embeddedLock / time.Millisecond))
	res, err := adm.AlterBrokerConfigs(ctx, []kadm.AlterConfig{
		{Op: kadm.SetConfig, Name: "group.share.record.lock.duration.ms", Value: &ms},
	})
	if err == nil {
		for _, r := range res {
			if r.Err != nil {
				err = r.Err
				break
			}
		}
	}
	if err != nil {
		return fmt.Errorf("set the embedded broker's lock duration: %w", err)
	}
	return nil
}

// ensureTopic creates the topic name with n partitions and the cluster's
// default replication factor, unless it exists, and returns once the topic
// is in the brokers' metadata with a leader for every partition. shareq
// never creates job topics: that is for whoever runs the cluster (see
// deploy/kafka/init.sh, or shareq topics create), and here for the
// example.
//
// Several processes may start at once on a fresh broker (docker compose
// starts the worker and the producer together): another one creating the
// topic first (TOPIC_ALREADY_EXISTS) is fine, and waiting for the metadata
// keeps the worker's start-up check from finding the topic missing while
// the controller's news spreads.
func ensureTopic(ctx context.Context, adm *kadm.Client, con *console, embedded bool, name string, n int32) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	have, err := adm.ListTopics(ctx, name)
	if err != nil {
		return fmt.Errorf("cannot reach Kafka to list topics: %w (is the broker running? without -brokers the example starts its own)", err)
	}
	if d, ok := have[name]; ok && d.Err == nil && topicReady(d) {
		if !embedded {
			con.printf("topic %s exists (%d partitions)", name, len(d.Partitions))
		}
		return nil
	}
	res, err := adm.CreateTopic(ctx, n, -1, nil, name)
	if err == nil {
		err = res.Err
	}
	created := err == nil
	if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		return fmt.Errorf("create topic %s: %w (create it yourself, or give this client the right to)", name, err)
	}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		md, err := adm.ListTopics(ctx, name)
		if d, ok := md[name]; err == nil && ok && d.Err == nil && topicReady(d) {
			if !embedded && created {
				con.printf("created topic %s (%d partitions)", name, len(d.Partitions))
			} else if !embedded {
				con.printf("topic %s exists (%d partitions)", name, len(d.Partitions))
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("topic %s was created but is not in the brokers' metadata: %w", name, context.Cause(ctx))
		case <-tick.C:
		}
	}
}

// topicReady reports whether every partition of d has a leader.
func topicReady(d kadm.TopicDetail) bool {
	if len(d.Partitions) == 0 {
		return false
	}
	for _, p := range d.Partitions {
		if p.Err != nil || p.Leader < 0 {
			return false
		}
	}
	return true
}
