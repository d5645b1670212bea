package console

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/shareq/shareq/internal/fleet"
)

// workerRow is a worker on the Workers page.
type workerRow struct {
	fleet.Status
	Age  time.Duration // since its last status
	Down string        // its dependencies down, comma-separated
	// Paused are its topics an operator paused, comma-separated, and
	// PausedWhy each with its reason and who paused it.
	Paused, PausedWhy string
}

type workersPage struct {
	Topic   string
	Group   string // the group the list is narrowed to; "" for all
	Missing bool   // the status topic does not exist
	Workers []workerRow
	Stale   time.Duration // the default bound, for the note
}

// workers serves the Workers page: what "shareq workers" lists, read
// through the same fleet.Read.
func (s *server) workers(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
	defer cancel()
	_, cl, release, err := s.admin()
	if err != nil {
		s.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	defer release()
	page := workersPage{Topic: s.cfg.workersTopic, Group: r.URL.Query().Get("group"), Stale: fleet.StaleAfter * fleet.EveryDefault}
	now := s.now()
	ws, err := fleet.Read(ctx, cl, s.cfg.workersTopic, now)
	switch {
	case errors.Is(err, fleet.ErrNoTopic):
		page.Missing = true
	case err != nil:
		s.fail(w, r, statusOf(err), err)
		return
	}
	if page.Group != "" {
		ws = fleet.OfGroup(ws, page.Group)
	}
	for _, st := range ws {
		row := workerRow{Status: st, Age: fleet.Age(st, now), Down: strings.Join(st.DependenciesDown, ", ")}
		var topics, why []string
		for _, p := range st.Paused {
			topics = append(topics, p.Topic)
			why = append(why, p.Topic+" paused by "+p.By+": "+p.Reason)
		}
		row.Paused, row.PausedWhy = strings.Join(topics, ", "), strings.Join(why, "; ")
		page.Workers = append(page.Workers, row)
	}
	s.render(w, r, http.StatusOK, "workers", "Workers", "workers", page)
}
