package console

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/dlq"
	"github.com/shareq/shareq/enqueue"
	"github.com/shareq/shareq/internal/sharegroup"
)

// replayRow is one replayed job as the replay page lists it.
type replayRow struct {
	Topic     string
	Partition int32
	Offset    int64
	JobID     string
	Reason    string
	To        string
}

// replaySummary ends the replay page.
type replaySummary struct {
	Topic  string
	Stats  dlq.ReplayStats
	Jobs   int // jobs asked for (selection); 0 for a filter
	Force  bool
	Err    string
	Back   string
	Groups []string
}

// replay replays one job, a selection of jobs, or every job matching the
// filter, through dlq.Replay, and streams a row per replayed job as it
// goes. Each job is replayed at most once unless the form forces it: a
// job with a replay marker is passed over and counted.
func (s *server) replay(w http.ResponseWriter, r *http.Request) outcome {
	topic := r.PathValue("topic")
	what := slog.String("topic", topic)
	form := r.PostForm
	force := form.Get("force") != ""
	var runs []dlq.Filter
	switch mode := form.Get("mode"); mode {
	case "jobs":
		for _, j := range form["job"] {
			p, o, ok := strings.Cut(j, ":")
			pn, perr := strconv.ParseInt(p, 10, 32)
			on, oerr := strconv.ParseInt(o, 10, 64)
			if !ok || perr != nil || oerr != nil || pn < 0 || on < 0 {
				err := fmt.Errorf("job %q: want partition:offset", j)
				s.fail(w, r, http.StatusBadRequest, err)
				return failed(err, what)
			}
			runs = append(runs, dlq.Filter{Partitions: []int32{int32(pn)}, Offsets: dlq.OffsetRange{From: on, End: on + 1}})
		}
		if len(runs) == 0 {
			err := errors.New("no job selected: tick the jobs to replay")
			s.fail(w, r, http.StatusBadRequest, err)
			return failed(err, what)
		}
	case "filter":
		f, err := readFilterForm(form).filter()
		if err != nil {
			s.fail(w, r, http.StatusBadRequest, err)
			return failed(err, what)
		}
		runs = []dlq.Filter{f}
	default:
		err := fmt.Errorf("mode %q: want jobs or filter", mode)
		s.fail(w, r, http.StatusBadRequest, err)
		return failed(err, what)
	}
	// With enqueue's partitioner, dlq.Replay produces through cl, and the
	// replays of a selection (one per job) continue one round-robin over
	// each topic's partitions.
	cl, err := s.newClient(enqueue.ProducerOpts()...)
	if err != nil {
		s.fail(w, r, http.StatusInternalServerError, err)
		return failed(err, what)
	}
	defer cl.Close()

	t := s.pages["replay"]
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	rc := http.NewResponseController(w)
	pg := page{Title: "Replay " + topic, Base: s.cfg.prefix, Nav: "topics", Actions: true, Outbox: s.cfg.outbox != nil, CSRF: s.csrfToken(w, r),
		Data: struct{ Topic string }{topic}}
	if err := t.ExecuteTemplate(w, "top", pg); err != nil {
		return failed(err, what)
	}
	_ = t.ExecuteTemplate(w, "replay-start", pg)
	_ = rc.Flush()

	sum := replaySummary{Topic: topic, Force: force, Back: s.cfg.prefix + "/dlq/" + url.PathEscape(topic)}
	if form.Get("mode") == "jobs" {
		sum.Jobs = len(runs)
	}
	ctx := r.Context()
	var pace <-chan time.Time
	if len(runs) > 1 && s.cfg.rate > 0 {
		tick := time.NewTicker(time.Duration(float64(time.Second) / s.cfg.rate))
		defer tick.Stop()
		pace = tick.C
	}
	for i, f := range runs {
		if i > 0 && pace != nil {
			select {
			case <-ctx.Done():
			case <-pace:
			}
		}
		if ctx.Err() != nil {
			break
		}
		opts := []dlq.ReplayOption{
			dlq.ReplayFilter(f), dlq.ReplayRate(s.cfg.rate), dlq.ReplayLogger(s.cfg.logger),
			dlq.ReplayOnRecord(func(p *dlq.Parked) {
				row := replayRow{Topic: p.Topic, Partition: p.Partition, Offset: p.Offset, JobID: p.JobID(), Reason: p.Reason, To: p.SourceTopic}
				if m, ok := p.LastReplay(); ok {
					row.To = fmt.Sprintf("%s/%d/%d", m.Topic, m.Partition, m.Offset)
				}
				_ = t.ExecuteTemplate(w, "replay-row", struct {
					page
					Row replayRow
				}{pg, row})
				_ = rc.Flush()
			}),
		}
		if force {
			opts = append(opts, dlq.ReplayForce())
		}
		st, err := dlq.Replay(ctx, cl, topic, opts...)
		add(&sum.Stats, st)
		if st.Group != "" {
			sum.Groups = append(sum.Groups, st.Group)
		}
		if err != nil {
			sum.Err = err.Error()
			break
		}
	}
	if sum.Err == "" && ctx.Err() != nil {
		sum.Err = "stopped: " + ctx.Err().Error() + " (run the same replay again to finish: it resumes where it stopped)"
	}
	_ = t.ExecuteTemplate(w, "replay-end", struct {
		page
		Sum replaySummary
	}{pg, sum})
	_ = t.ExecuteTemplate(w, "bottom", pg)
	o := done(what, slog.String("mode", form.Get("mode")), slog.Int("replayed", sum.Stats.Replayed),
		slog.Int("already_replayed", sum.Stats.AlreadyReplayed), slog.Bool("force", force))
	if sum.Err != "" {
		o.err = errors.New(sum.Err)
	}
	return o
}

// add sums the counts of b into a.
func add(a *dlq.ReplayStats, b dlq.ReplayStats) {
	a.Read += b.Read
	a.Replayed += b.Replayed
	a.Filtered += b.Filtered
	a.AlreadyReplayed += b.AlreadyReplayed
	a.Malformed += b.Malformed
	a.SourceGone += b.SourceGone
	a.ValueGone += b.ValueGone
}

type enqueueForm struct {
	Topic, Key, ID, Payload string
	JobID                   string
	Err                     string
}

func (s *server) enqueueForm(w http.ResponseWriter, r *http.Request) {
	if err := s.mayAct(r); err != nil {
		s.fail(w, r, http.StatusForbidden, err)
		return
	}
	s.render(w, r, http.StatusOK, "enqueue", "Enqueue a job", "enqueue", enqueueForm{Topic: r.URL.Query().Get("topic"), Payload: "{}"})
}

// enqueue enqueues one job, as "shareq enqueue" does.
func (s *server) enqueue(w http.ResponseWriter, r *http.Request) (o outcome) {
	f := enqueueForm{Topic: strings.TrimSpace(r.PostForm.Get("topic")), Key: r.PostForm.Get("key"), ID: strings.TrimSpace(r.PostForm.Get("id")), Payload: r.PostForm.Get("payload")}
	status := http.StatusOK
	defer func() {
		s.render(w, r, status, "enqueue", "Enqueue a job", "enqueue", f)
		o.attrs = []slog.Attr{slog.String("topic", f.Topic), slog.String("job_id", f.JobID)}
		if f.Err != "" {
			o.err = errors.New(f.Err)
		}
	}()
	switch {
	case f.Topic == "":
		f.Err, status = "name the topic", http.StatusBadRequest
		return
	case !json.Valid([]byte(f.Payload)):
		f.Err, status = "the payload is not valid JSON", http.StatusBadRequest
		return
	}
	var opts []enqueue.Option
	if f.ID != "" {
		opts = append(opts, enqueue.ID(f.ID))
	}
	if f.Key != "" {
		opts = append(opts, enqueue.Key([]byte(f.Key)))
	}
	cl, err := s.newClient(append(enqueue.ProducerOpts(), kgo.UnknownTopicRetries(2))...)
	if err != nil {
		f.Err, status = err.Error(), http.StatusInternalServerError
		return
	}
	defer cl.Close()
	q, err := enqueue.New(cl)
	if err != nil {
		f.Err, status = err.Error(), http.StatusInternalServerError
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
	defer cancel()
	id, err := q.Enqueue(ctx, f.Topic, json.RawMessage(f.Payload), opts...)
	if err != nil {
		f.Err, status = err.Error(), statusOf(err)
		return
	}
	f.JobID = id
	return o
}

type resetPage struct {
	Group, To, Topic string
	Rows             []sharegroup.Row
	Err              string
	Done             bool
}

func (s *server) resetForm(w http.ResponseWriter, r *http.Request) {
	if err := s.mayAct(r); err != nil {
		s.fail(w, r, http.StatusForbidden, err)
		return
	}
	q := r.URL.Query()
	p := resetPage{Group: r.PathValue("group"), To: q.Get("to"), Topic: strings.TrimSpace(q.Get("topic"))}
	status := http.StatusOK
	if p.To != "" {
		ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
		defer cancel()
		if _, err := s.planReset(ctx, &p); err != nil {
			p.Err, status = err.Error(), http.StatusConflict
		}
	}
	s.render(w, r, status, "reset", "Reset "+p.Group, "groups", p)
}

// planReset fills p.Rows with the plan of the reset p describes.
func (s *server) planReset(ctx context.Context, p *resetPage) (sharegroup.Target, error) {
	target, err := sharegroup.ParseTarget(p.To)
	if err != nil {
		return target, err
	}
	adm, _, release, err := s.admin()
	if err != nil {
		return target, err
	}
	defer release()
	p.Rows, err = sharegroup.PlanReset(ctx, adm, p.Group, p.Topic, target)
	return target, err
}

// reset moves an empty group's start offsets, as "shareq reset -yes"
// does, once the form's confirmation names the group.
func (s *server) reset(w http.ResponseWriter, r *http.Request) (o outcome) {
	p := resetPage{Group: r.PathValue("group"), To: r.PostForm.Get("to"), Topic: strings.TrimSpace(r.PostForm.Get("topic"))}
	status := http.StatusOK
	defer func() {
		s.render(w, r, status, "reset", "Reset "+p.Group, "groups", p)
		o.attrs = []slog.Attr{slog.String("group", p.Group), slog.String("to", p.To), slog.String("topic", p.Topic), slog.Int("partitions", len(p.Rows))}
		if p.Err != "" {
			o.err = errors.New(p.Err)
		}
	}()
	ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
	defer cancel()
	if _, err := s.planReset(ctx, &p); err != nil {
		p.Err, status = err.Error(), http.StatusConflict
		return
	}
	if r.PostForm.Get("confirm") != p.Group {
		p.Err, status = "not confirmed: type the group's name to reset it", http.StatusBadRequest
		return
	}
	adm, _, release, err := s.admin()
	if err != nil {
		p.Err, status = err.Error(), http.StatusInternalServerError
		return
	}
	defer release()
	if err := sharegroup.Apply(ctx, adm, p.Group, p.Rows); err != nil {
		p.Err, status = err.Error(), http.StatusConflict
		return
	}
	p.Done = true
	return o
}
