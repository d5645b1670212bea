package console_test

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/console"
	"github.com/shareq/shareq/internal/logbuf"
)

// actions returns the "console: action" lines of logs.
func actions(logs *logbuf.Buffer) []string {
	var lines []string
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, `msg="console: action"`) {
			lines = append(lines, line)
		}
	}
	return lines
}

// serveLogged serves b's console made with opts through wrap (nil for
// none), logging at Info into the returned buffer.
func (b *bundle) serveLogged(t *testing.T, wrap func(http.Handler) http.Handler, opts ...console.Option) *logbuf.Buffer {
	t.Helper()
	logs := new(logbuf.Buffer)
	h, err := console.New(append([]console.Option{console.Client(b.cl), console.Logger(slog.New(slog.NewTextHandler(logs, nil)))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	if wrap != nil {
		h = wrap(h)
	}
	b.srv.Close()
	b.srv = httptest.NewServer(h)
	t.Cleanup(b.srv.Close)
	jar, _ := cookiejar.New(nil)
	b.http = &http.Client{Jar: jar, Timeout: 60 * time.Second}
	return logs
}

// fromNetwork makes every request look as if it came from 192.0.2.7
// (TEST-NET-1), not from the loopback.
func fromNetwork(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.RemoteAddr = "192.0.2.7:41000"
		h.ServeHTTP(w, r)
	})
}

// throughProxy adds the header a proxy on the same host adds.
func throughProxy(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Header.Set("X-Forwarded-For", "127.0.0.1")
		h.ServeHTTP(w, r)
	})
}

// withAuth makes b.http send basic auth as user with pass.
func (b *bundle) withAuth(user, pass string) {
	next := b.http.Transport
	if next == nil {
		next = http.DefaultTransport
	}
	b.http.Transport = roundTripFunc(func(r *http.Request) (*http.Response, error) {
		r = r.Clone(r.Context())
		r.SetBasicAuth(user, pass)
		return next.RoundTrip(r)
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestNewValidatesAuthOptions(t *testing.T) {
	t.Parallel()
	cl, err := kgo.NewClient(kgo.SeedBrokers("127.0.0.1:1"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	anyone := func(*http.Request) (string, bool) { return "x", true }
	for _, tc := range []struct {
		name string
		opts []console.Option
		want string
	}{
		{"nil hook", []console.Option{console.Authenticate(nil)}, "Authenticate(nil): give a func"},
		{"no password", []console.Option{console.BasicAuth("ops", "")}, "BasicAuth with an empty user or password"},
		{"no user", []console.Option{console.BasicAuth("", "pw")}, "BasicAuth with an empty user or password"},
		{"both", []console.Option{console.Authenticate(anyone), console.BasicAuth("ops", "pw")}, "give one of them, not both"},
		{"opt-out with auth", []console.Option{console.Actions(), console.BasicAuth("ops", "pw"), console.ActionsWithoutAuthOnNetwork()}, "remove ActionsWithoutAuthOnNetwork"},
		{"opt-out read-only", []console.Option{console.ActionsWithoutAuthOnNetwork()}, "without Actions: the console is read-only"},
	} {
		if _, err := console.New(append([]console.Option{console.Client(cl)}, tc.opts...)...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: New = %v, want an error saying %q", tc.name, err, tc.want)
		}
	}
	for _, opts := range [][]console.Option{
		{console.Actions(), console.BasicAuth("ops", "pw")},
		{console.Actions(), console.Authenticate(anyone)},
		{console.Authenticate(anyone)},
		{console.Actions(), console.ActionsWithoutAuthOnNetwork()},
	} {
		if _, err := console.New(append([]console.Option{console.Client(cl)}, opts...)...); err != nil {
			t.Errorf("valid auth options: %v", err)
		}
	}
}

// Without auth, the actions are served to loopback clients only: a
// client on the network, or one behind a proxy, sees no forms and its
// POSTs are refused, each refusal logged.
func TestActionsWithoutAuthLoopbackOnly(t *testing.T) {
	t.Parallel()
	b := setup(t, console.Actions())
	b.park(t, 0, 1)
	for _, tc := range []struct {
		name string
		wrap func(http.Handler) http.Handler
	}{{"network", fromNetwork}, {"proxy", throughProxy}} {
		logs := b.serveLogged(t, tc.wrap, console.Actions())
		_, page := b.get(t, "/")
		mustContain(t, tc.name+": overview", page, "read-only")
		mustNotContain(t, tc.name+": overview", page, `href="/enqueue"`)
		code, body := b.get(t, "/enqueue")
		if code != http.StatusForbidden || !strings.Contains(body, "loopback clients only") || !strings.Contains(body, "console.Authenticate or console.BasicAuth") {
			t.Errorf("%s: enqueue form: %d\n%s", tc.name, code, body)
		}
		// The page has no form, so no CSRF token: the refusal comes first.
		code, body = b.post(t, "", "/dlq/"+b.dlq+"/replay", url.Values{"mode": {"filter"}})
		if code != http.StatusForbidden || !strings.Contains(body, "loopback clients only") {
			t.Errorf("%s: replay: %d\n%s", tc.name, code, body)
		}
		lines := actions(logs)
		if len(lines) != 1 || !strings.Contains(lines[0], "action=replay outcome=refused") || !strings.Contains(lines[0], "loopback clients only") {
			t.Errorf("%s: action log %q, want one refused replay", tc.name, lines)
		}
	}
	_, body := b.get(t, "/dlq/"+b.dlq+"/0/0")
	mustContain(t, "job after refused replays", body, "Never replayed")

	// From the loopback, as before, and logged as anonymous (loopback).
	logs := b.serveLogged(t, nil, console.Actions())
	code, body := b.post(t, "/enqueue", "/enqueue", url.Values{"topic": {b.topic}, "id": {"loop-1"}, "payload": {"{}"}})
	if code != http.StatusOK || !strings.Contains(body, "loop-1") {
		t.Fatalf("enqueue from the loopback: %d\n%s", code, body)
	}
	want := `msg="console: action" who="anonymous (loopback)" action=enqueue outcome=done topic=` + b.topic + ` job_id=loop-1`
	if lines := actions(logs); len(lines) != 1 || !strings.Contains(lines[0], want) {
		t.Errorf("action log %q, want one line with %q", lines, want)
	}

	// With the opt-out, from the network too, logged with its address.
	logs = b.serveLogged(t, fromNetwork, console.Actions(), console.ActionsWithoutAuthOnNetwork())
	code, body = b.post(t, "/enqueue", "/enqueue", url.Values{"topic": {b.topic}, "id": {"net-1"}, "payload": {"{}"}})
	if code != http.StatusOK || !strings.Contains(body, "net-1") {
		t.Fatalf("enqueue from the network with the opt-out: %d\n%s", code, body)
	}
	want = `who="anonymous (192.0.2.7:41000)" action=enqueue outcome=done`
	if lines := actions(logs); len(lines) != 1 || !strings.Contains(lines[0], want) {
		t.Errorf("action log %q, want one line with %q", lines, want)
	}
}

// BasicAuth guards every page and action, from any address; a missing
// or wrong user or password gets the same 401, which says nothing of
// what was wrong.
func TestBasicAuth(t *testing.T) {
	t.Parallel()
	const user, pass = "ops", "correct horse battery staple"
	b := setup(t)
	logs := b.serveLogged(t, fromNetwork, console.Actions(), console.BasicAuth(user, pass))
	var refusal string
	for _, tc := range []struct{ name, user, pass string }{
		{"none", "", ""},
		{"wrong password", user, "correct horse battery stapl"},
		{"longer password", user, pass + "e"},
		{"wrong user", "op", pass},
		{"swapped", pass, user},
	} {
		for _, path := range []string{"/", "/topics", "/enqueue", "/static/style.css"} {
			req, _ := http.NewRequest(http.MethodGet, b.srv.URL+path, nil)
			if tc.user != "" {
				req.SetBasicAuth(tc.user, tc.pass)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("WWW-Authenticate") != `Basic realm="shareq console", charset="UTF-8"` {
				t.Errorf("%s: GET %s: %d %q", tc.name, path, resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
			}
			if refusal == "" {
				refusal = string(body)
			}
			if string(body) != refusal || string(body) != "authentication required\n" {
				t.Errorf("%s: GET %s: body %q, want the same %q for every refusal", tc.name, path, body, "authentication required\n")
			}
		}
	}
	// A POST without auth is refused, and is no action: a browser sends
	// a form without the password first, and again with it.
	resp, err := http.PostForm(b.srv.URL+"/enqueue", url.Values{"topic": {b.topic}, "payload": {"{}"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("POST without auth: %d", resp.StatusCode)
	}
	if lines := actions(logs); len(lines) != 0 {
		t.Errorf("action log %q after a POST without auth, want none", lines)
	}

	b.withAuth(user, pass)
	code, body := b.get(t, "/")
	mustContain(t, "overview with auth", body, `href="/enqueue"`)
	if code != http.StatusOK || strings.Contains(body, pass) {
		t.Errorf("overview with auth: %d\n%s", code, body)
	}
	code, body = b.post(t, "/enqueue", "/enqueue", url.Values{"topic": {b.topic}, "id": {"auth-1"}, "payload": {"{}"}})
	if code != http.StatusOK || !strings.Contains(body, "auth-1") {
		t.Fatalf("enqueue with auth: %d\n%s", code, body)
	}
	if got := b.jobIDs(t, b.topic, 0, 1); got[0] != "auth-1" {
		t.Errorf("enqueued %v", got)
	}
	lines := actions(logs)
	want := `level=INFO msg="console: action" who=ops action=enqueue outcome=done topic=` + b.topic + ` job_id=auth-1`
	if len(lines) != 1 || !strings.Contains(lines[0], want) {
		t.Errorf("action log %q, want one line with %q", lines, want)
	}
	// A failed action is logged with its error.
	b.post(t, "/enqueue", "/enqueue", url.Values{"topic": {b.topic}, "payload": {"{not json"}})
	if lines := actions(logs); len(lines) != 2 || !strings.Contains(lines[1], `who=ops action=enqueue outcome=failed`) || !strings.Contains(lines[1], `error="the payload is not valid JSON"`) {
		t.Errorf("action log %q, want a second line, the failed enqueue", lines)
	}
	for _, line := range actions(logs) {
		if strings.Contains(line, pass) {
			t.Errorf("the password is in the log: %s", line)
		}
	}
}

// Authenticate names the user the application's middleware established,
// and can let more people read than act.
func TestAuthenticate(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// X-User stands for what the application's middleware put in the
	// request's context.
	hook := func(r *http.Request) (string, bool) {
		who := r.Header.Get("X-User")
		if r.Method == http.MethodPost {
			return who, who == "alice"
		}
		return who, who != ""
	}
	logs := b.serveLogged(t, fromNetwork, console.Actions(), console.Authenticate(hook))
	as := func(who string) {
		b.http.Transport = roundTripFunc(func(r *http.Request) (*http.Response, error) {
			r = r.Clone(r.Context())
			r.Header.Set("X-User", who)
			return http.DefaultTransport.RoundTrip(r)
		})
	}
	if code, body := b.get(t, "/topics"); code != http.StatusForbidden || body != "forbidden\n" {
		t.Errorf("no user: %d %q, want 403 with no detail", code, body)
	}
	as("bob")
	if code, _ := b.get(t, "/topics"); code != http.StatusOK {
		t.Errorf("bob reads: %d", code)
	}
	if code, body := b.post(t, "/enqueue", "/enqueue", url.Values{"topic": {b.topic}, "payload": {"{}"}}); code != http.StatusForbidden || body != "forbidden\n" {
		t.Errorf("bob enqueues: %d %q, want 403 with no detail", code, body)
	}
	as("alice")
	if code, body := b.post(t, "/enqueue", "/enqueue", url.Values{"topic": {b.topic}, "id": {"alice-1"}, "payload": {"{}"}}); code != http.StatusOK || !strings.Contains(body, "alice-1") {
		t.Errorf("alice enqueues: %d\n%s", code, body)
	}
	lines := actions(logs)
	if len(lines) != 1 || !strings.Contains(lines[0], `who=alice action=enqueue outcome=done`) {
		t.Errorf("action log %q, want alice's enqueue", lines)
	}
}
