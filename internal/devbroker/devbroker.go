// Package devbroker starts an in-process Kafka broker (franz-go's kfake)
// for local development and the examples: share groups work on it, nothing
// is written to disk, and it stops with the process.
package devbroker

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kfake"
)

// Start starts a one-node broker listening on 127.0.0.1:port (0 picks a
// free port) with the given topics, each with partitions partitions. Close
// the returned cluster to stop it.
func Start(port int, partitions int32, topics ...string) (*kfake.Cluster, error) {
	return StartTopics(port, Topics{Partitions: partitions, Names: topics})
}

// Topics are topics to create at start, each with Partitions partitions.
type Topics struct {
	Partitions int32
	Names      []string
}

// StartTopics is [Start] with sets of topics of different partition
// counts (jobs topics and their one-partition DLQ topics).
func StartTopics(port int, sets ...Topics) (*kfake.Cluster, error) {
	opts := []kfake.Opt{
		kfake.NumBrokers(1),
		kfake.Ports(port),
		kfake.BrokerConfigs(map[string]string{
			// kfake sweeps expired locks every 5s by default; sweep
			// often so an abandoned job comes back promptly.
			"share.record.lock.sweep.interval.ms": "500",
			// kfake fences silent members at its broker configs and
			// ignores the group's (which the worker sets): give it the
			// worker's default session (worker.SessionTimeoutDefault), so
			// a killed worker's partitions move in seconds here too.
			"group.share.session.timeout.ms":    "6000",
			"group.share.heartbeat.interval.ms": "1000",
		}),
	}
	for _, t := range sets {
		if len(t.Names) > 0 {
			opts = append(opts, kfake.SeedTopics(t.Partitions, t.Names...))
		}
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		return nil, fmt.Errorf("devbroker: start on 127.0.0.1:%d: %w", port, err)
	}
	return c, nil
}
