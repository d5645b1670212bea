package main

// The customers' webhook endpoints of the demo: HTTP servers on 127.0.0.1,
// one per behaviour. Each notes what it received, for the summary.

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"time"
)

// behaviour is how an endpoint answers.
type behaviour int

const (
	healthy     behaviour = iota // 200 after a short while
	down                         // nothing listens (connection refused) until it comes back; then healthy
	rateLimited                  // 429 with Retry-After to each webhook's first request; then 200
	gone                         // 410 Gone: the customer removed the endpoint
)

func (b behaviour) String() string {
	return [...]string{"healthy", "down, then back", "429 with Retry-After", "410 Gone"}[b]
}

// endpoint is one customer's fake endpoint.
type endpoint struct {
	name       string
	behaviour  behaviour
	url        string
	host       string
	latency    time.Duration // how long a healthy answer takes
	retryAfter int           // seconds, in a 429's Retry-After

	srv *httptest.Server // nil while a down endpoint is down

	mu        sync.Mutex
	delivered map[string]int       // 2xx answers by webhook ID
	limited   map[string]time.Time // when a webhook got its 429
	early     int                  // webhooks retried before their Retry-After was over
	inFlight  int                  // requests being answered
	most      int                  // most requests in flight at once
}

// startEndpoint starts an endpoint that behaves as b; a down one only
// reserves its address (comeBack starts it).
func startEndpoint(name string, b behaviour) (*endpoint, error) {
	e := &endpoint{name: name, behaviour: b, latency: 20 * time.Millisecond, retryAfter: 1,
		delivered: map[string]int{}, limited: map[string]time.Time{}}
	if b == down {
		// Take a free port and let it go: connecting to it is refused
		// until comeBack listens on it again.
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		e.host = ln.Addr().String()
		e.url = "http://" + e.host + "/hooks"
		return e, ln.Close()
	}
	e.srv = httptest.NewServer(http.HandlerFunc(e.serve))
	e.host = e.srv.Listener.Addr().String()
	e.url = e.srv.URL + "/hooks"
	return e, nil
}

// comeBack starts a down endpoint on its address.
func (e *endpoint) comeBack() error {
	if e.srv != nil {
		return nil
	}
	ln, err := net.Listen("tcp", e.host)
	if err != nil {
		return fmt.Errorf("endpoint %s cannot come back on %s: %w", e.name, e.host, err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(e.serve))
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	e.srv = srv
	return nil
}

// close stops the endpoint's server.
func (e *endpoint) close() {
	if e.srv != nil {
		e.srv.Close()
	}
}

// serve answers one webhook as the endpoint's behaviour says.
func (e *endpoint) serve(w http.ResponseWriter, r *http.Request) {
	id := r.Header.Get("Webhook-Id")
	if id == "" || r.Method != http.MethodPost {
		http.Error(w, "POST a webhook with its Webhook-Id", http.StatusBadRequest)
		return
	}
	e.mu.Lock()
	e.inFlight++
	e.most = max(e.most, e.inFlight)
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		e.inFlight--
		e.mu.Unlock()
	}()
	if !e.pause(r) {
		return
	}
	now := time.Now()
	e.mu.Lock()
	defer e.mu.Unlock()
	switch e.behaviour {
	case gone:
		http.Error(w, "no such endpoint", http.StatusGone)
		return
	case rateLimited:
		at, seen := e.limited[id]
		if !seen {
			e.limited[id] = now
			w.Header().Set("Retry-After", strconv.Itoa(e.retryAfter))
			http.Error(w, "slow down", http.StatusTooManyRequests)
			return
		}
		if now.Sub(at) < time.Duration(e.retryAfter)*time.Second {
			e.early++
		}
	}
	e.delivered[id]++
	w.WriteHeader(http.StatusNoContent)
}

// pause takes the endpoint's latency; false if the client gave up first.
func (e *endpoint) pause(r *http.Request) bool {
	t := time.NewTimer(e.latency)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.Context().Done():
		return false
	}
}

// received returns the webhooks the endpoint accepted, the 2xx answers
// beyond one per webhook, and the webhooks retried before their
// Retry-After was over, and the most requests it had in flight at once.
func (e *endpoint) received() (delivered, duplicates, early, most int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, n := range e.delivered {
		delivered++
		duplicates += n - 1
	}
	return delivered, duplicates, e.early, e.most
}
