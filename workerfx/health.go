package workerfx

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"

	"go.uber.org/fx"

	"github.com/shareq/shareq/worker"
	"github.com/shareq/shareq/workerfx/internal/fxrun"
)

// healthGroup is the value group of the app's workers, as [Health] reads
// them and as they stop together.
const healthGroup = "shareq.health"

// The states of a worker in a [HealthReport].
const (
	// StateStarting: the app has not started the worker yet (or its
	// start-up checks are running).
	StateStarting = "starting"
	// StateRunning: Worker.Run is running.
	StateRunning = "running"
	// StateStopped: Worker.Run has returned (Worker.Stopped is closed);
	// WorkerHealth.Error says why, empty after a graceful stop.
	StateStopped = "stopped"
)

// runState is one of the app's workers as the module runs it: started
// is set when Worker.Run is called, by the module's goroutine; stop
// cancels Run, from the OnStop hook of any of the app's workers.
type runState struct {
	name    string
	w       *worker.Worker
	started atomic.Bool
	stop    fxrun.Handle
}

// HealthModule provides a *[Health]: an http.Handler reporting the state
// of every worker of the app ([Module]'s and [Named]'s). The app mounts
// it where it serves HTTP (it owns the server):
//
//	fx.Invoke(func(mux *http.ServeMux, h *workerfx.Health) { mux.Handle("/healthz", h) })
var HealthModule = fx.Module("shareq.health", fx.Provide(newHealth))

// healthParams are the inputs of newHealth: the app's workers, from
// [Module] and [Named].
type healthParams struct {
	fx.In

	Workers []*runState `group:"shareq.health"`
}

// newHealth returns the health handler of the app's workers.
func newHealth(p healthParams) *Health {
	ws := slices.Clone(p.Workers)
	slices.SortFunc(ws, func(a, b *runState) int { return strings.Compare(a.name, b.name) })
	return &Health{workers: ws}
}

// Health is an http.Handler that reports the app's workers: 200 when
// every worker is running, else 503 (a worker still starting, or
// stopped), with a JSON [HealthReport] body. It suits a readiness probe;
// a worker that stops by itself also shuts the app down (see the package
// documentation), so a liveness probe sees the process exit. Safe for
// concurrent use.
type Health struct {
	workers []*runState // sorted by name; fixed after newHealth
}

// HealthReport is the body [Health] serves.
type HealthReport struct {
	// OK is true when every worker is running (HTTP 200).
	OK      bool           `json:"ok"`
	Workers []WorkerHealth `json:"workers"`
}

// WorkerHealth is one worker's state in a [HealthReport].
type WorkerHealth struct {
	// Name is the worker's name in the app ("" for [Module]'s).
	Name string `json:"name"`
	// Group is its share group.
	Group string `json:"group"`
	// State is StateStarting, StateRunning or StateStopped.
	State string `json:"state"`
	// Error is why a stopped worker stopped (Worker.Err); empty after a
	// graceful stop, and while it runs.
	Error string `json:"error,omitempty"`
}

// Report returns the workers' states, as ServeHTTP serves them.
func (h *Health) Report() HealthReport {
	r := HealthReport{OK: true, Workers: make([]WorkerHealth, 0, len(h.workers))}
	for _, s := range h.workers {
		wh := s.health()
		r.OK = r.OK && wh.State == StateRunning
		r.Workers = append(r.Workers, wh)
	}
	return r
}

// health reads one worker's state from Worker.Stopped and Worker.Err.
// A worker that runs but cannot reach a dependency (a broker, its store)
// is reported running: when the worker exposes that state, this is the
// one place to read it and report it (with a state of its own, and
// whether it fails the report).
func (s *runState) health() WorkerHealth {
	wh := WorkerHealth{Name: s.name, Group: s.w.Group(), State: StateStarting}
	select {
	case <-s.w.Stopped():
		wh.State = StateStopped
		if err := s.w.Err(); err != nil {
			wh.Error = err.Error()
		}
	default:
		if s.started.Load() {
			wh.State = StateRunning
		}
	}
	return wh
}

// ServeHTTP writes the [HealthReport] as JSON, with status 200 when OK,
// else 503.
func (h *Health) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	r := h.Report()
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	if !r.OK {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	_ = json.NewEncoder(w).Encode(r)
}
