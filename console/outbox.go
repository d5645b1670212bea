package console

import (
	"context"
	"errors"
	"net/http"

	"github.com/shareq/shareq/enqueue/pgoutbox"
)

// OutboxDB is the database the outbox page reads (a *pgxpool.Pool).
type OutboxDB = pgoutbox.Querier

// outboxFailingLimit caps the failing rows the outbox page lists.
const outboxFailingLimit = 100

type outboxPage struct {
	Backlog pgoutbox.Backlog
	Failing []pgoutbox.FailingRow
	Limit   int
}

func (s *server) outboxPage(w http.ResponseWriter, r *http.Request) {
	if s.cfg.outbox == nil {
		s.fail(w, r, http.StatusNotFound, errors.New("no outbox: the console was started without a database (console.Outbox, shareq console -database)"))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
	defer cancel()
	b, err := pgoutbox.ReadBacklog(ctx, s.cfg.outbox)
	if err != nil {
		s.fail(w, r, http.StatusBadGateway, err)
		return
	}
	f, err := pgoutbox.Failing(ctx, s.cfg.outbox, outboxFailingLimit)
	if err != nil {
		s.fail(w, r, http.StatusBadGateway, err)
		return
	}
	s.render(w, r, http.StatusOK, "outbox", "Outbox", "outbox", outboxPage{Backlog: b, Failing: f, Limit: outboxFailingLimit})
}
