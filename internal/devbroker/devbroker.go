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
	opts := []kfake.Opt{
		kfake.NumBrokers(1),
		kfake.Ports(port),
		kfake.BrokerConfigs(map[string]string{
			// kfake sweeps expired locks every 5s by default; sweep
			// often so an abandoned job comes back promptly.
			"share.record.lock.sweep.interval.ms": "500",
		}),
	}
	if len(topics) > 0 {
		opts = append(opts, kfake.SeedTopics(partitions, topics...))
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		return nil, fmt.Errorf("devbroker: start on 127.0.0.1:%d: %w", port, err)
	}
	return c, nil
}
