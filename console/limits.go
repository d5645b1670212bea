package console

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/shareq/shareq/control"
)

// limit writes the form's limits of a topic of the group, set at run
// time, by the request's sender, and goes back to the group page.
func (s *server) limit(w http.ResponseWriter, r *http.Request) outcome {
	l, err := limitForm(r)
	attrs := []slog.Attr{slog.String("group", l.Group), slog.String("topic", l.Topic), slog.String("limit", l.String())}
	if err != nil {
		s.fail(w, r, http.StatusBadRequest, err)
		return failed(err, attrs...)
	}
	return s.control(w, r, l.Group, attrs, func(ctx context.Context, ctl *control.Client) error {
		if err := ctl.EnsureTopic(ctx); err != nil {
			return err
		}
		return ctl.SetLimit(ctx, l)
	})
}

// limitForm reads the limit form: empty fields leave the code's value.
func limitForm(r *http.Request) (control.Limit, error) {
	f := func(name string) string { return strings.TrimSpace(r.PostForm.Get(name)) }
	l := control.Limit{Group: r.PathValue("group"), Topic: f("topic"), Reason: f("reason"), By: actor(r) + " via the console", At: time.Now()}
	var errs []error
	if v := f("rate"); v != "" {
		rate, err := control.ParseRate(v)
		errs = append(errs, err)
		l.Rate = &rate
	}
	if v := f("key_rate"); v != "" {
		rate, err := control.ParseRate(v)
		errs = append(errs, err)
		l.KeyRate = &rate
	}
	if v := f("key_concurrency"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			errs = append(errs, fmt.Errorf("key concurrency %q: want 0 (no limit) or a whole number of jobs", v))
		}
		l.KeyConcurrency = &n
	}
	if l.Topic == "" {
		errs = append(errs, errors.New("choose the topic to limit"))
	}
	if l.Rate == nil && l.KeyRate == nil && l.KeyConcurrency == nil {
		errs = append(errs, errors.New("give a rate, a key concurrency or a key rate (Back to the code's limits clears them)"))
	}
	if l.Reason == "" {
		errs = append(errs, errors.New("a limit needs a reason: say why, for whoever finds it"))
	}
	return l, errors.Join(errs...)
}

// clearLimit takes the topic back to the limits its workers' code
// declares, and goes back to the group page.
func (s *server) clearLimit(w http.ResponseWriter, r *http.Request) outcome {
	group, topic := r.PathValue("group"), strings.TrimSpace(r.PostForm.Get("topic"))
	attrs := []slog.Attr{slog.String("group", group), slog.String("topic", topic)}
	return s.control(w, r, group, attrs, func(ctx context.Context, ctl *control.Client) error {
		return ctl.ClearLimit(ctx, group, topic)
	})
}
