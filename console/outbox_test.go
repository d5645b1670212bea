package console_test

import (
	"net/http"
	"testing"

	"github.com/shareq/shareq/console"
	"github.com/shareq/shareq/enqueue"
	"github.com/shareq/shareq/enqueue/pgoutbox"
	"github.com/shareq/shareq/migrations"
	"github.com/shareq/shareq/migrations/pgtest"
)

// TestOutboxPage shows the outbox's backlog and its failing rows, with
// their errors escaped: the relay's error text is the broker's, but a
// topic name is the application's.
func TestOutboxPage(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewPool(t, 4)
	if err := migrations.Up(t.Context(), pool); err != nil {
		t.Fatal(err)
	}
	b := setup(t, console.Outbox(pool))
	tx, err := pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"row-1", "row-2"} {
		if _, err := pgoutbox.EnqueueTx(t.Context(), tx, b.topic, map[string]int{"n": 1}, enqueue.ID(id)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	// What the relay records when a produce fails.
	if _, err := pool.Exec(t.Context(), `UPDATE `+pgoutbox.Table+` SET attempts = 3, last_error = $1 WHERE job_id = 'row-2'`, "produce: <b>broker</b> said no"); err != nil {
		t.Fatal(err)
	}
	code, body := b.get(t, "/outbox")
	if code != http.StatusOK {
		t.Fatalf("outbox: %d\n%s", code, body)
	}
	mustContain(t, "outbox", body, `<dd id="outbox-rows">2</dd>`, "row-2", "produce: &lt;b&gt;broker&lt;/b&gt; said no", `href="/outbox"`)
	mustNotContain(t, "outbox", body, "row-1", "<b>broker")
}
