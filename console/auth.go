package console

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
)

// Authenticate makes every request to the console (its pages, its static
// files and its actions) ask fn who sent it: fn returns the user's name,
// which the log line of each action names, and whether the request may
// use the console. A request fn refuses is answered 403 Forbidden with no
// detail, so an application's own middleware should have sent its login
// page or its 401 before the console sees the request; fn is the place
// to read the user that middleware established (from r.Context()).
//
// fn sees every request, so it can let more people read than act: an
// action is a POST (r.Method == http.MethodPost). fn is called from many
// goroutines at once and must be safe for concurrent use. Give
// Authenticate or [BasicAuth], not both.
func Authenticate(fn func(r *http.Request) (who string, ok bool)) Option {
	return optionFunc(func(c *config) { c.auth.fn, c.auth.fnSet = fn, true })
}

// BasicAuth makes every request to the console (its pages, its static
// files and its actions) need HTTP basic auth as user with password; the
// log line of each action names user. Both are compared in constant
// time (as SHA-256 digests, so their lengths do not show either), and a
// request without them, or with a wrong one, is answered 401 with a
// challenge (browsers ask for them) and no detail of what was wrong.
// Basic auth sends the password with every request: beyond the
// loopback, serve the console over TLS. Give BasicAuth or
// [Authenticate], not both.
func BasicAuth(user, password string) Option {
	return optionFunc(func(c *config) { c.auth.user, c.auth.password, c.auth.basicSet = user, password, true })
}

// ActionsWithoutAuthOnNetwork serves the actions without authentication
// to any client that reaches the console, not only to loopback ones:
// anyone who can send it a request can replay, enqueue, reset and pause. Without
// it, a console given [Actions] and neither [Authenticate] nor
// [BasicAuth] shows its actions only to loopback clients (see [Actions]).
// It is for an application whose own middleware in front of the console
// already decides who may act and that cannot tell the console who the
// user is; giving [Authenticate] is better, since it names the user in
// the log. It is the same as "shareq console -actions-without-auth-on-network".
func ActionsWithoutAuthOnNetwork() Option {
	return optionFunc(func(c *config) { c.auth.anyClient = true })
}

// authConfig is what the auth options set.
type authConfig struct {
	fn             func(*http.Request) (string, bool)
	fnSet          bool
	user, password string
	basicSet       bool
	anyClient      bool // ActionsWithoutAuthOnNetwork
}

// validate returns what is wrong with the auth options, each saying what
// to give. actions is whether Actions was given.
func (a *authConfig) validate(actions bool) []error {
	var errs []error
	if a.fnSet && a.fn == nil {
		errs = append(errs, errors.New("Authenticate(nil): give a func that says who sent a request, or leave Authenticate out"))
	}
	if a.basicSet && (a.user == "" || a.password == "") {
		errs = append(errs, errors.New("BasicAuth with an empty user or password: give both"))
	}
	if a.fnSet && a.basicSet {
		errs = append(errs, errors.New("Authenticate and BasicAuth: give one of them, not both"))
	}
	if a.anyClient && (a.fnSet || a.basicSet) {
		errs = append(errs, errors.New("ActionsWithoutAuthOnNetwork with Authenticate or BasicAuth: the actions need authentication already; remove ActionsWithoutAuthOnNetwork"))
	}
	if a.anyClient && !actions {
		errs = append(errs, errors.New("ActionsWithoutAuthOnNetwork without Actions: the console is read-only; give Actions too, or remove ActionsWithoutAuthOnNetwork"))
	}
	return errs
}

// authenticated reports whether the console authenticates its requests.
func (a *authConfig) authenticated() bool { return a.fnSet || a.basicSet }

// whoKey is the context key of the name authenticate found.
type whoKey struct{}

// authenticate wraps h with the authentication the options ask for (none
// without Authenticate or BasicAuth); the user's name goes into the
// request's context for the action log. A refused request is logged at
// Debug only: a browser sends a form's POST without the password first
// and again with it after the 401, which is no action refused.
func (s *server) authenticate(h http.Handler) http.Handler {
	a := &s.cfg.auth
	fn := a.fn
	if a.basicSet {
		fn = basicAuth(a.user, a.password)
	}
	if fn == nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		who, ok := fn(r)
		if ok {
			if who == "" {
				who = "(authenticated, no name given)"
			}
			h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), whoKey{}, who)))
			return
		}
		s.cfg.logger.LogAttrs(r.Context(), slog.LevelDebug, "console: request not authenticated",
			slog.String("method", r.Method), slog.String("path", r.URL.Path), slog.String("from", r.RemoteAddr))
		if a.basicSet {
			w.Header().Set("WWW-Authenticate", `Basic realm="shareq console", charset="UTF-8"`)
			http.Error(w, "authentication required", http.StatusUnauthorized)
			return
		}
		http.Error(w, "forbidden", http.StatusForbidden)
	})
}

// basicAuth returns the authentication of BasicAuth: the comparison
// takes the same time whatever the guess.
func basicAuth(user, password string) func(*http.Request) (string, bool) {
	wantU, wantP := sha256.Sum256([]byte(user)), sha256.Sum256([]byte(password))
	return func(r *http.Request) (string, bool) {
		u, p, ok := r.BasicAuth()
		gotU, gotP := sha256.Sum256([]byte(u)), sha256.Sum256([]byte(p))
		match := subtle.ConstantTimeCompare(gotU[:], wantU[:]) & subtle.ConstantTimeCompare(gotP[:], wantP[:])
		return user, ok && match == 1
	}
}

// errReadOnly refuses an action of a console without Actions.
var errReadOnly = errors.New("the console is read-only: actions are enabled with console.Actions (shareq console -actions)")

// mayAct returns nil when the sender of r may use the actions, else the
// error that says why not and what to do: a read-only console, or an
// unauthenticated console and a client that is not on the loopback.
func (s *server) mayAct(r *http.Request) error {
	switch {
	case !s.cfg.actions:
		return errReadOnly
	case s.cfg.auth.authenticated() || s.cfg.auth.anyClient || fromLoopback(r):
		return nil
	}
	return errors.New("this console has no authentication, so its actions are served to loopback clients only, and this request came from another host or through a proxy: " +
		"give console.Authenticate or console.BasicAuth (shareq console: -auth-user), or open the console from the host it runs on")
}

// fromLoopback reports whether r came from a loopback address and not
// through a proxy. It reads the connection's peer address only: a
// proxy's forwarding headers are anyone's to set, so a request that has
// one is never taken as local (a proxy on the same host would make
// every client look local).
func fromLoopback(r *http.Request) bool {
	for _, h := range []string{"Forwarded", "X-Forwarded-For", "X-Real-Ip"} {
		if r.Header.Get(h) != "" {
			return false
		}
	}
	return peer(r).IsLoopback()
}

// peer returns the address of the connection r came on (the zero Addr
// when the server did not set one).
func peer(r *http.Request) netip.Addr {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	a, _ := netip.ParseAddr(host)
	return a.Unmap()
}

// actor names who sent r for the log: the authenticated user, or
// "anonymous" with where the request came from.
func actor(r *http.Request) string {
	if who, ok := r.Context().Value(whoKey{}).(string); ok {
		return who
	}
	if fromLoopback(r) {
		return "anonymous (loopback)"
	}
	return fmt.Sprintf("anonymous (%s)", r.RemoteAddr)
}

// outcome is what an action did, for its log line: the things it acted
// on and its counts, and its error (nil when it did what was asked).
type outcome struct {
	attrs []slog.Attr
	err   error
}

// failed is the outcome of an action that did not do what was asked.
func failed(err error, attrs ...slog.Attr) outcome { return outcome{attrs: attrs, err: err} }

// done is the outcome of an action that did what was asked.
func done(attrs ...slog.Attr) outcome { return outcome{attrs: attrs} }

// logAction writes the one line of an action: who, what and the outcome
// ("done", "failed" with the error, or "refused" with why).
func (s *server) logAction(r *http.Request, action, result string, o outcome) {
	attrs := append([]slog.Attr{slog.String("who", actor(r)), slog.String("action", action), slog.String("outcome", result)}, o.attrs...)
	if o.err != nil {
		attrs = append(attrs, slog.String("error", o.err.Error()))
	}
	s.cfg.logger.LogAttrs(r.Context(), slog.LevelInfo, "console: action", attrs...)
}
