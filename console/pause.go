package console

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/control"
	"github.com/shareq/shareq/internal/sharegroup"
)

// pauseView is what the group page shows of the control topic: the
// group's pauses and limits set at run time.
type pauseView struct {
	Pauses []control.Pause
	Limits []control.Limit
	Err    string   // the control topic could not be read
	Topics []string // the group's topics, for the forms
}

// pausesOf reads the pauses of group from the control topic; a missing
// topic means nothing was ever paused.
func (s *server) pausesOf(ctx context.Context, cl *kgo.Client, st *sharegroup.Status) pauseView {
	v := pauseView{Topics: topicsOf(st)}
	ctl, err := control.New(cl, control.Topic(s.cfg.controlTopic))
	if err != nil {
		v.Err = err.Error()
		return v
	}
	state, err := ctl.Read(ctx)
	switch {
	case errors.Is(err, control.ErrNoTopic):
	case err != nil:
		v.Err = err.Error()
	default:
		v.Pauses, v.Limits = state.Of(st.Group), state.LimitsOf(st.Group)
	}
	return v
}

// topicsOf returns the topics of the group's partitions and members'
// assignments, sorted.
func topicsOf(st *sharegroup.Status) []string {
	var ts []string
	for _, p := range st.Partitions {
		ts = append(ts, p.Topic)
	}
	for _, m := range st.Members {
		for _, a := range m.Assigned {
			ts = append(ts, a.Topic)
		}
	}
	slices.Sort(ts)
	return slices.Compact(ts)
}

// pause writes the form's pause of a topic of the group (the whole
// group with no topic), by the request's sender, and goes back to the
// group page.
func (s *server) pause(w http.ResponseWriter, r *http.Request) outcome {
	p := control.Pause{
		Group:  r.PathValue("group"),
		Topic:  strings.TrimSpace(r.PostForm.Get("topic")),
		Reason: strings.TrimSpace(r.PostForm.Get("reason")),
		By:     actor(r) + " via the console",
	}
	attrs := []slog.Attr{slog.String("group", p.Group), slog.String("topic", p.Topic), slog.String("reason", p.Reason)}
	if p.Reason == "" {
		err := errors.New("a pause needs a reason: say why, for whoever finds it (shareq pauses, the workers' logs, this page)")
		s.fail(w, r, http.StatusBadRequest, err)
		return failed(err, attrs...)
	}
	return s.control(w, r, p.Group, attrs, func(ctx context.Context, ctl *control.Client) error {
		if err := ctl.EnsureTopic(ctx); err != nil {
			return err
		}
		return ctl.Pause(ctx, p)
	})
}

// resume ends the form's pause and goes back to the group page.
func (s *server) resume(w http.ResponseWriter, r *http.Request) outcome {
	group, topic := r.PathValue("group"), strings.TrimSpace(r.PostForm.Get("topic"))
	attrs := []slog.Attr{slog.String("group", group), slog.String("topic", topic)}
	return s.control(w, r, group, attrs, func(ctx context.Context, ctl *control.Client) error {
		return ctl.Resume(ctx, group, topic)
	})
}

// control runs do with a control client and redirects to the group's
// page (which shows the new state), or shows do's error.
func (s *server) control(w http.ResponseWriter, r *http.Request, group string, attrs []slog.Attr, do func(context.Context, *control.Client) error) outcome {
	ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
	defer cancel()
	_, cl, release, err := s.admin()
	if err != nil {
		s.fail(w, r, http.StatusInternalServerError, err)
		return failed(err, attrs...)
	}
	defer release()
	ctl, err := control.New(cl, control.Topic(s.cfg.controlTopic))
	if err == nil {
		err = do(ctx, ctl)
	}
	if err != nil {
		s.fail(w, r, statusOf(err), err)
		return failed(err, attrs...)
	}
	http.Redirect(w, r, s.cfg.prefix+"/groups/"+url.PathEscape(group), http.StatusSeeOther)
	return done(attrs...)
}
