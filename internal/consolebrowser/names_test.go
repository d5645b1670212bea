package consolebrowser_test

import (
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shareq/shareq/internal/groupcfg"
	"github.com/shareq/shareq/internal/kafkatest"
	"github.com/shareq/shareq/migrations"
	"github.com/shareq/shareq/migrations/pgtest"
)

// forDocs reports whether the test takes the docs' screenshots (shots,
// from envScreenshots, is set) on a cluster of its own (kfake), where it
// may use fixed names that read well in them.
func forDocs(c *kafkatest.Cluster, shots string) bool { return shots != "" && c.Kind == "kfake" }

// topicAndGroup returns the topic, created with partitions, and the share
// group the test runs: for the docs the names given, the group reading
// from the earliest offset as the tests' own groups do (group "" for
// none); else fresh names.
func topicAndGroup(t *testing.T, c *kafkatest.Cluster, shots, topic, group string, partitions int32) (string, string) {
	t.Helper()
	if !forDocs(c, shots) {
		if group != "" {
			group = c.Group(t)
		}
		return c.Topic(t, partitions), group
	}
	c.CreateTopic(t, topic, partitions)
	if group != "" {
		c.SetGroupConfig(t, group, map[string]string{groupcfg.AutoOffsetReset: "earliest"})
	}
	return topic, group
}

// migratedPool is a pool on a schema of the test's own with the
// migrations applied.
func migratedPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool, _ := pgtest.NewPool(t, 8)
	if err := migrations.Up(t.Context(), pool); err != nil {
		t.Fatal(err)
	}
	return pool
}
