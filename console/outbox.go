package console

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/shareq/shareq/console/jobinfo"
	"github.com/shareq/shareq/enqueue/pgoutbox"
)

// OutboxDB is the database the outbox and job pages read (a
// *pgxpool.Pool). The job page reads the job log only through a DB that
// is also a pgjoblog.DB, and the outbox page's cancel needs one that is
// a pgoutbox.DB (it begins a transaction): a pool is both.
type OutboxDB = pgoutbox.Querier

// outboxFailingLimit caps the failing rows the outbox page lists;
// outboxScheduledPage is the size of a page of its scheduled jobs.
const (
	outboxFailingLimit  = 100
	outboxScheduledPage = 50
)

type outboxPage struct {
	Backlog   pgoutbox.Backlog
	Failing   []pgoutbox.FailingRow
	Limit     int
	Scheduled jobinfo.Page
	Topic     string // the scheduled jobs' topic filter
	After     string // the page's cursor
	NextURL   string
	Schedules []jobinfo.Schedule
	CanCancel bool   // actions on, and the database can begin a transaction
	Cancelled string // the job the last cancel was of, and its result
	Result    string
}

func init() { funcs["approx"] = approx }

// approx is d at the precision a person plans by: 45s, 12m, 3h, 5h20m,
// 26d, 2d3h.
func approx(d time.Duration) string {
	switch {
	case d >= 48*time.Hour:
		d = d.Round(time.Hour)
		days, hours := d/(24*time.Hour), (d%(24*time.Hour))/time.Hour
		if hours == 0 {
			return fmt.Sprintf("%dd", days)
		}
		return fmt.Sprintf("%dd%dh", days, hours)
	case d >= time.Hour:
		s := strings.TrimSuffix(d.Round(time.Minute).String(), "0s")
		if strings.HasSuffix(s, "h0m") {
			s = strings.TrimSuffix(s, "0m")
		}
		return s
	case d >= time.Minute:
		return strings.TrimSuffix(d.Round(time.Minute).String(), "0s")
	}
	return d.Round(time.Second).String()
}

func (s *server) outboxPage(w http.ResponseWriter, r *http.Request) {
	if s.cfg.outbox == nil {
		s.fail(w, r, http.StatusNotFound, errors.New("no outbox: the console was started without a database (console.Outbox, shareq console -database)"))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
	defer cancel()
	q := r.URL.Query()
	p := outboxPage{Limit: outboxFailingLimit, Topic: strings.TrimSpace(q.Get("topic")), After: q.Get("after"), Cancelled: q.Get("cancelled"), Result: q.Get("result")}
	_, canBegin := s.cfg.outbox.(pgoutbox.DB)
	p.CanCancel = canBegin && s.mayAct(r) == nil
	if p.After != "" {
		if _, _, err := jobinfo.ParseCursor(p.After); err != nil {
			s.fail(w, r, http.StatusBadRequest, err)
			return
		}
	}
	var err error
	if p.Backlog, err = pgoutbox.ReadBacklog(ctx, s.cfg.outbox); err != nil {
		s.fail(w, r, http.StatusBadGateway, err)
		return
	}
	if p.Failing, err = pgoutbox.Failing(ctx, s.cfg.outbox, outboxFailingLimit); err != nil {
		s.fail(w, r, http.StatusBadGateway, err)
		return
	}
	p.Scheduled, err = jobinfo.List(ctx, s.cfg.outbox, jobinfo.ListFilter{Topic: p.Topic, Scheduled: true, After: p.After, Limit: outboxScheduledPage})
	if err != nil {
		s.fail(w, r, http.StatusBadGateway, err)
		return
	}
	if p.Scheduled.Next != "" {
		v := url.Values{"after": {p.Scheduled.Next}}
		if p.Topic != "" {
			v.Set("topic", p.Topic)
		}
		p.NextURL = s.cfg.prefix + "/outbox?" + v.Encode()
	}
	if p.Schedules, err = jobinfo.Schedules(ctx, s.cfg.outbox, ""); err != nil {
		s.fail(w, r, http.StatusBadGateway, err)
		return
	}
	s.render(w, r, http.StatusOK, "outbox", "Outbox", "outbox", p)
}

// cancelJob withdraws a job from the outbox (pgoutbox.Cancel, without a
// claim key: a job the relay produced meanwhile is not stopped) and goes
// back to the outbox page, which says what happened.
func (s *server) cancelJob(w http.ResponseWriter, r *http.Request) outcome {
	id := strings.TrimSpace(r.PostForm.Get("id"))
	attrs := []slog.Attr{slog.String("job_id", id)}
	db, ok := s.cfg.outbox.(pgoutbox.DB)
	switch {
	case s.cfg.outbox == nil:
		err := errors.New("no outbox: the console was started without a database (console.Outbox, shareq console -database)")
		s.fail(w, r, http.StatusNotFound, err)
		return failed(err, attrs...)
	case !ok:
		err := errors.New("the database given to console.Outbox cannot begin a transaction: give a *pgxpool.Pool to cancel jobs")
		s.fail(w, r, http.StatusNotImplemented, err)
		return failed(err, attrs...)
	case id == "" || len(id) > jobIDMax:
		err := fmt.Errorf("name the job to cancel (an ID of 1 to %d bytes)", jobIDMax)
		s.fail(w, r, http.StatusBadRequest, err)
		return failed(err, attrs...)
	}
	ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
	defer cancel()
	res, err := pgoutbox.Cancel(ctx, db, id)
	if err != nil {
		err = jobinfo.TableHint(err)
		s.fail(w, r, statusOf(err), err)
		return failed(err, attrs...)
	}
	attrs = append(attrs, slog.String("result", res.String()))
	http.Redirect(w, r, s.cfg.prefix+"/outbox?"+url.Values{"cancelled": {id}, "result": {res.String()}}.Encode(), http.StatusSeeOther)
	if res != pgoutbox.CancelWithdrawn {
		return failed(fmt.Errorf("not withdrawn: %s", res), attrs...)
	}
	return done(attrs...)
}
