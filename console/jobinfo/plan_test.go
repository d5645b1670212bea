package jobinfo

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shareq/shareq/enqueue/pgoutbox"
	"github.com/shareq/shareq/migrations"
	"github.com/shareq/shareq/migrations/pgtest"
)

// testDB is a pool on a schema of its own with the migrations applied.
func testDB(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool, _ := pgtest.NewPool(t, 4)
	if err := migrations.Up(t.Context(), pool); err != nil {
		t.Fatal(err)
	}
	return pool
}

// Every page of the list, filtered or not, first or later, is a range
// scan of the index on (due_at, id) in its order, without a sort and
// without reading the table through: a page of 50 from 20,000 rows reads
// a few blocks. A page of failing jobs may instead read the failing rows
// through their own index (migration 0007's, on attempts > 0) and sort
// them: its cost is the failing rows', not the table's.
func TestListPlan(t *testing.T) {
	t.Parallel()
	pool := testDB(t)
	ctx := t.Context()
	if _, err := pool.Exec(ctx, `INSERT INTO `+pgoutbox.Table+` (topic, value, job_id, due_at, attempts)
		SELECT CASE WHEN i % 10 = 0 THEN 'emails' ELSE 'reports' END, '\x00', 'job-' || i, now() + i * interval '1 second', (i % 100 = 0)::int
		FROM generate_series(1, 20000) AS i`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "ANALYZE "+pgoutbox.Table); err != nil {
		t.Fatal(err)
	}
	soon, later := time.Now().Add(time.Hour), time.Now().Add(2*time.Hour)
	for _, c := range []struct {
		name      string
		f         ListFilter
		maxBlocks int64 // 0: not checked
		failing   bool  // the index of the failing rows and a sort will do
	}{
		{"first page", ListFilter{Limit: 50}, 10, false},
		{"a later page", ListFilter{Limit: 50, After: later.UTC().Format(time.RFC3339Nano) + "/7000"}, 10, false},
		{"due between", ListFilter{Limit: 50, DueAfter: &soon, DueBefore: &later}, 10, false},
		{"scheduled", ListFilter{Limit: 50, Scheduled: true}, 10, false},
		{"a topic", ListFilter{Limit: 50, Topic: "emails"}, 0, false},
		{"failing", ListFilter{Limit: 50, Failing: true}, 0, true},
	} {
		q, args, err := c.f.query()
		if err != nil {
			t.Fatal(err)
		}
		var plan []map[string]any
		if err := pool.QueryRow(ctx, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+q, args...).Scan(&plan); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		top := plan[0]["Plan"].(map[string]any)
		var nodes []string
		var walk func(n map[string]any)
		walk = func(n map[string]any) {
			nodes = append(nodes, fmt.Sprintf("%v %v", n["Node Type"], n["Index Name"]))
			for _, ch := range asSlice(n["Plans"]) {
				walk(ch.(map[string]any))
			}
		}
		walk(top)
		if c.failing && slices.Contains(nodes, "Bitmap Index Scan shareq_outbox_retry_idx") && !slices.ContainsFunc(nodes, func(n string) bool {
			return strings.HasPrefix(n, "Seq Scan")
		}) {
			t.Logf("%s: %v, through the failing rows' index", c.name, nodes)
		} else if !slices.Contains(nodes, "Index Scan shareq_outbox_due_idx") || slices.ContainsFunc(nodes, func(n string) bool {
			return strings.HasPrefix(n, "Seq Scan") || strings.HasPrefix(n, "Sort") || strings.HasPrefix(n, "Bitmap")
		}) {
			t.Errorf("%s: plan %v, want a scan of shareq_outbox_due_idx only", c.name, nodes)
		}
		blocks := int64(top["Shared Hit Blocks"].(float64) + top["Shared Read Blocks"].(float64))
		if c.maxBlocks > 0 && blocks > c.maxBlocks {
			t.Errorf("%s: read %d blocks, want at most %d", c.name, blocks, c.maxBlocks)
		}
		t.Logf("%s: %v, %d blocks", c.name, nodes, blocks)
	}
}

func asSlice(v any) []any {
	s, _ := v.([]any)
	return s
}
