package console

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"embed"
	"encoding/base64"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// csrfCookie holds the browser's CSRF token; every form carries it too,
// and a POST whose form and cookie disagree is refused.
const csrfCookie = "shareq_console_csrf"

// contentSecurityPolicy allows the console's own stylesheet and nothing
// else: no script, no frame, no form posting elsewhere.
const contentSecurityPolicy = "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// New returns the console: an http.Handler serving its pages under the
// [Prefix] (default "/"). It needs [Client] or [ClientOpts]; it is
// read-only unless given [Actions]. The handler is safe for concurrent
// use; it starts no goroutine of its own (a replay runs within its POST
// request, and stops when the browser goes away).
//
// With [Authenticate] or [BasicAuth] every request is authenticated;
// without either, the application's auth middleware in front of the
// console decides who reads it, and the actions are served to loopback
// clients only (see [Actions]).
func New(opts ...Option) (http.Handler, error) {
	c, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	s := &server{cfg: c, pages: map[string]*template.Template{}, rates: map[string]rateSample{}, now: time.Now}
	if err := s.parseTemplates(); err != nil {
		return nil, err
	}
	static, err := fs.Sub(staticFS, "static")
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", s.overview)
	mux.HandleFunc("GET /groups/{group}", s.group)
	mux.HandleFunc("GET /groups/{group}/reset", s.resetForm)
	mux.HandleFunc("GET /groups/{group}/charts", s.groupCharts)
	mux.HandleFunc("POST /groups/{group}/reset", s.action("reset", s.reset))
	mux.HandleFunc("POST /groups/{group}/pause", s.action("pause", s.pause))
	mux.HandleFunc("POST /groups/{group}/resume", s.action("resume", s.resume))
	mux.HandleFunc("POST /groups/{group}/limit", s.action("limit", s.limit))
	mux.HandleFunc("POST /groups/{group}/limit/clear", s.action("clear-limit", s.clearLimit))
	mux.HandleFunc("GET /topics", s.topics)
	mux.HandleFunc("GET /topics/{topic}/charts", s.topicCharts)
	mux.HandleFunc("GET /workers", s.workers)
	mux.HandleFunc("GET /dlq/{topic}", s.dlqList)
	mux.HandleFunc("POST /dlq/{topic}/replay", s.action("replay", s.replay))
	mux.HandleFunc("GET /dlq/{topic}/{partition}/{offset}", s.job)
	mux.HandleFunc("GET /enqueue", s.enqueueForm)
	mux.HandleFunc("POST /enqueue", s.action("enqueue", s.enqueue))
	mux.HandleFunc("GET /outbox", s.outboxPage)
	mux.HandleFunc("POST /outbox/cancel", s.action("cancel", s.cancelJob))
	mux.HandleFunc("GET /jobs", s.jobSearch)
	mux.HandleFunc("GET /jobs/{id...}", s.jobTimeline)
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	var h http.Handler = mux
	if c.prefix != "" {
		h = http.StripPrefix(c.prefix, mux)
	}
	cop := http.NewCrossOriginProtection()
	return securityHeaders(s.authenticate(cop.Handler(h))), nil
}

// server serves the pages. cfg and pages are set by New and read-only
// after; rates is guarded by mu.
type server struct {
	cfg   *config
	pages map[string]*template.Template

	now func() time.Time // time.Now; tests set another

	mu    sync.Mutex
	rates map[string]rateSample // group → last lag sample, for jobs/s
}

func securityHeaders(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("Content-Security-Policy", contentSecurityPolicy)
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("X-Frame-Options", "DENY")
		hd.Set("Referrer-Policy", "same-origin")
		hd.Set("Cache-Control", "no-store")
		h.ServeHTTP(w, r)
	})
}

// admin returns an admin client and its client, and a func that releases
// them: the application's client when given, else a client of its own.
func (s *server) admin() (*kadm.Client, *kgo.Client, func(), error) {
	if s.cfg.client != nil {
		return kadm.NewClient(s.cfg.client), s.cfg.client, func() {}, nil
	}
	cl, err := s.newClient()
	if err != nil {
		return nil, nil, nil, err
	}
	return kadm.NewClient(cl), cl, cl.Close, nil
}

// newClient returns a client of the request's own, for reads through
// dlq (which must not overlap on one client) and for producing.
func (s *server) newClient(extra ...kgo.Opt) (*kgo.Client, error) {
	opts := s.cfg.clientOpts
	if s.cfg.client != nil {
		opts = s.cfg.client.Opts()
	}
	cl, err := kgo.NewClient(append(append(append([]kgo.Opt{}, opts...), kgo.FetchMaxWait(500*time.Millisecond)), extra...)...)
	if err != nil {
		return nil, fmt.Errorf("console: kafka client: %w", err)
	}
	return cl, nil
}

// page is what every template gets: the page's own data, and what the
// layout needs.
type page struct {
	Title   string
	Base    string // the prefix, for links
	Nav     string // the section the page belongs to
	Actions bool
	Outbox  bool
	CSRF    string
	Data    any
}

func (s *server) parseTemplates() error {
	layout, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html")
	if err != nil {
		return fmt.Errorf("console: templates: %w", err)
	}
	names, err := fs.Glob(templateFS, "templates/*.html")
	if err != nil {
		return err
	}
	for _, n := range names {
		name := strings.TrimSuffix(strings.TrimPrefix(n, "templates/"), ".html")
		if name == "layout" {
			continue
		}
		t, err := template.Must(layout.Clone()).ParseFS(templateFS, n)
		if err != nil {
			return fmt.Errorf("console: template %s: %w", n, err)
		}
		s.pages[name] = t
	}
	return nil
}

// render writes the page name with data; a template error is logged and
// answered with a 500 (the page is rendered to a buffer first).
func (s *server) render(w http.ResponseWriter, r *http.Request, status int, name, title, nav string, data any) {
	var buf bytes.Buffer
	p := page{Title: title, Base: s.cfg.prefix, Nav: nav, Actions: s.mayAct(r) == nil, Outbox: s.cfg.outbox != nil, CSRF: s.csrfToken(w, r), Data: data}
	if err := s.pages[name].ExecuteTemplate(&buf, "layout", p); err != nil {
		s.cfg.logger.Error("console: render", slog.String("page", name), slog.String("error", err.Error()))
		http.Error(w, "console: cannot render the page", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// fail renders an error page. The error text is escaped like any other.
func (s *server) fail(w http.ResponseWriter, r *http.Request, status int, err error) {
	if status >= 500 {
		s.cfg.logger.Warn("console: page failed", slog.String("path", r.URL.Path), slog.String("error", err.Error()))
	}
	s.render(w, r, status, "error", http.StatusText(status), "", err.Error())
}

// statusOf maps an error to the status its page gets.
func statusOf(err error) int {
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return http.StatusGatewayTimeout
	case errors.As(err, new(*notFound)):
		return http.StatusNotFound
	}
	return http.StatusBadGateway
}

// notFound is an error for a missing thing: a 404 page.
type notFound struct{ what string }

func (e *notFound) Error() string { return e.what }

// csrfToken returns the browser's CSRF token, setting a fresh one in a
// cookie when the request has none.
func (s *server) csrfToken(w http.ResponseWriter, r *http.Request) string {
	if c, err := r.Cookie(csrfCookie); err == nil && len(c.Value) >= 32 {
		return c.Value
	}
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	tok := base64.RawURLEncoding.EncodeToString(b)
	path := s.cfg.prefix
	if path == "" {
		path = "/"
	}
	http.SetCookie(w, &http.Cookie{Name: csrfCookie, Value: tok, Path: path, HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	return tok
}

// actionFunc is the handler of an action's POST: it writes the page and
// returns what it did.
type actionFunc func(w http.ResponseWriter, r *http.Request) outcome

// action wraps the handler of the POST of action name: refused when the
// sender may not act (mayAct), or when the form's CSRF token is missing
// or is not the cookie's. Every action, refused or not, is logged in
// one line (logAction).
func (s *server) action(name string, h actionFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := s.mayAct(r); err != nil {
			s.logAction(r, name, "refused", failed(err))
			s.fail(w, r, http.StatusForbidden, err)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, 1<<20)
		if err := r.ParseForm(); err != nil {
			s.logAction(r, name, "refused", failed(err))
			s.fail(w, r, http.StatusBadRequest, fmt.Errorf("form: %w", err))
			return
		}
		c, err := r.Cookie(csrfCookie)
		form := r.PostForm.Get("csrf")
		if err != nil || form == "" || subtle.ConstantTimeCompare([]byte(c.Value), []byte(form)) != 1 {
			err := errors.New("missing or wrong CSRF token: reload the page and submit its form again")
			s.logAction(r, name, "refused", failed(err))
			s.fail(w, r, http.StatusForbidden, err)
			return
		}
		o := h(w, r)
		result := "done"
		if o.err != nil {
			result = "failed"
		}
		s.logAction(r, name, result, o)
	}
}
