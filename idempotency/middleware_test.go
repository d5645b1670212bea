package idempotency_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/idempotency"
)

// fakeStore records the keys it is asked to claim and fails as told.
type fakeStore struct {
	mu   sync.Mutex
	keys []string

	beginErr  error // returned before fn runs
	commitErr error // returned after fn succeeded
	tx        any   // put in fn's context
	duplicate bool  // report the key as claimed without running fn
	cancelled bool  // report the key as cancelled without running fn
	noClaim   bool  // run fn, then report no claim and no error (a broken store)
	fnDown    bool  // fn's error came from a dead connection: wrap it in handler.Unavailable
}

func (s *fakeStore) Claim(ctx context.Context, key string, fn func(context.Context) error) (bool, error) {
	s.mu.Lock()
	s.keys = append(s.keys, key)
	s.mu.Unlock()
	switch {
	case s.beginErr != nil:
		return false, s.beginErr
	case s.duplicate:
		return false, nil
	case s.cancelled:
		return false, fmt.Errorf("fake: key %q: %w", key, idempotency.ErrCancelled)
	}
	if err := fn(idempotency.WithTx(ctx, s.tx)); err != nil {
		if s.commitErr != nil {
			// A store whose rollback also failed: the handler's error
			// must still win.
			return false, errors.Join(err, errors.New("rollback failed"))
		}
		if s.fnDown {
			return false, handler.Unavailable("db", err)
		}
		return false, err
	}
	if s.commitErr != nil {
		return false, s.commitErr
	}
	return !s.noClaim, nil
}

func (s *fakeStore) lastKey(t *testing.T) string {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.keys) == 0 {
		t.Fatal("store was not asked to claim a key")
	}
	return s.keys[len(s.keys)-1]
}

func mustMiddleware(t *testing.T, s idempotency.Store, opts ...idempotency.Option) handler.Middleware {
	t.Helper()
	mw, err := idempotency.Middleware(s, opts...)
	if err != nil {
		t.Fatalf("Middleware: %v", err)
	}
	return mw
}

// counting returns a handler that counts its runs and returns err.
func counting(err error) (handler.Handler, func() int) {
	var mu sync.Mutex
	n := 0
	h := handler.Func(func(context.Context, *handler.Job) error {
		mu.Lock()
		n++
		mu.Unlock()
		return err
	})
	return h, func() int { mu.Lock(); defer mu.Unlock(); return n }
}

func job(headers ...handler.Header) *handler.Job {
	return &handler.Job{Group: "thumbs", Topic: "images", Partition: 3, Offset: 1042, Headers: headers}
}

func jobID(v string) handler.Header {
	return handler.Header{Key: handler.JobIDHeader, Value: []byte(v)}
}

func sha(s string) string {
	sum := sha256.Sum256([]byte(s))
	return "sha256:" + hex.EncodeToString(sum[:])
}

func TestMiddlewareKey(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", idempotency.MaxKeyLen)
	tests := []struct {
		name string
		job  *handler.Job
		opts []idempotency.Option
		want string
	}{
		{"job-id header", job(jobID("order-7")), nil, "thumbs/images/order-7"},
		{"no header: topic/partition/offset", job(), nil, "thumbs/images/images/3/1042"},
		{"empty header: topic/partition/offset", job(jobID("")), nil, "thumbs/images/images/3/1042"},
		{"other headers only", job(handler.Header{Key: "trace", Value: []byte("x")}), nil, "thumbs/images/images/3/1042"},
		{"last job-id header wins", job(jobID("a"), jobID("b")), nil, "thumbs/images/b"},
		{"no group", &handler.Job{Topic: "images", Headers: []handler.Header{jobID("order-7")}}, nil, "images/order-7"},
		{"fixed prefix", job(jobID("order-7")), []idempotency.Option{idempotency.KeyPrefix("billing:")}, "billing:order-7"},
		{"empty prefix", job(jobID("order-7")), []idempotency.Option{idempotency.KeyPrefix("")}, "order-7"},
		{"empty prefix, no header", job(), []idempotency.Option{idempotency.KeyPrefix("")}, "images/3/1042"},
		{
			"KeyFunc",
			&handler.Job{Group: "g", Topic: "t", Key: []byte("user-9")},
			[]idempotency.Option{idempotency.KeyFunc(func(j *handler.Job) string { return "user:" + string(j.Key) })},
			"g/t/user:user-9",
		},
		{"NUL in header is hashed", job(jobID("a\x00b")), nil, sha("thumbs/images/a\x00b")},
		{"invalid UTF-8 in header is hashed", job(jobID("a\xffb")), nil, sha("thumbs/images/a\xffb")},
		{"key of MaxKeyLen kept", job(jobID(long[len("thumbs/images/"):])), nil, "thumbs/images/" + long[len("thumbs/images/"):]},
		{"key over MaxKeyLen hashed", job(jobID(long)), nil, sha("thumbs/images/" + long)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := &fakeStore{}
			h, runs := counting(nil)
			if err := mustMiddleware(t, s, tt.opts...)(h).Handle(t.Context(), tt.job); err != nil {
				t.Fatalf("Handle: %v", err)
			}
			if got := s.lastKey(t); got != tt.want {
				t.Errorf("key = %q, want %q", got, tt.want)
			}
			if runs() != 1 {
				t.Errorf("handler ran %d times, want 1", runs())
			}
		})
	}
}

func TestMiddlewareEmptyKeyIsPermanent(t *testing.T) {
	t.Parallel()
	s := &fakeStore{}
	h, runs := counting(nil)
	mw := mustMiddleware(t, s, idempotency.KeyPrefix("p/"), idempotency.KeyFunc(func(*handler.Job) string { return "" }))
	err := mw(h).Handle(t.Context(), job())
	if !handler.IsPermanent(err) || !errors.Is(err, idempotency.ErrEmptyKey) {
		t.Fatalf("Handle with an empty key = %v, want a permanent ErrEmptyKey", err)
	}
	if runs() != 0 || len(s.keys) != 0 {
		t.Fatalf("handler ran %d times and store saw %q; want neither", runs(), s.keys)
	}
}

func TestMiddlewareRunsJobOnce(t *testing.T) {
	t.Parallel()
	s := idempotency.NewMemoryStore()
	var dups []string
	h, runs := counting(nil)
	hh := mustMiddleware(t, s, idempotency.OnDuplicate(func(j *handler.Job, key string) {
		dups = append(dups, key)
	}))(h)

	first := job(jobID("order-7"))
	copyOfIt := &handler.Job{Group: "thumbs", Topic: "images", Partition: 0, Offset: 9, Headers: []handler.Header{jobID("order-7")}}
	for i, j := range []*handler.Job{first, first, copyOfIt} {
		if err := hh.Handle(t.Context(), j); err != nil {
			t.Fatalf("delivery %d: %v", i+1, err)
		}
	}
	if runs() != 1 {
		t.Fatalf("handler ran %d times over three deliveries of one job, want 1", runs())
	}
	if want := []string{"thumbs/images/order-7", "thumbs/images/order-7"}; strings.Join(dups, ",") != strings.Join(want, ",") {
		t.Fatalf("OnDuplicate saw %q, want %q", dups, want)
	}
	if !s.Claimed("thumbs/images/order-7") {
		t.Fatal("key not claimed")
	}
}

func TestMiddlewareHandlerErrorIsUnchanged(t *testing.T) {
	t.Parallel()
	plain := errors.New("upstream 503")
	tests := []struct {
		name string
		err  error
	}{
		{"permanent", handler.Permanent(errors.New("bad image"))},
		{"plain", plain},
		{"retry", handler.Retry("rate-limited", plain)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := idempotency.NewMemoryStore()
			failing, _ := counting(tt.err)
			if err := mustMiddleware(t, s)(failing).Handle(t.Context(), job()); err != tt.err {
				t.Fatalf("Handle = %v, want the handler's error itself (%v)", err, tt.err)
			}
			ok, runs := counting(nil)
			if err := mustMiddleware(t, s)(ok).Handle(t.Context(), job()); err != nil || runs() != 1 {
				t.Fatalf("next delivery after a failure: err=%v runs=%d, want the handler to run", err, runs())
			}
		})
	}
}

func TestMiddlewareHandlerErrorWinsOverRollbackError(t *testing.T) {
	t.Parallel()
	boom := handler.Permanent(errors.New("boom"))
	s := &fakeStore{commitErr: errors.New("connection lost")}
	h, _ := counting(boom)
	if err := mustMiddleware(t, s)(h).Handle(t.Context(), job()); err != boom {
		t.Fatalf("Handle = %v, want the handler's error %v", err, boom)
	}
}

func TestMiddlewareStoreFailureRetries(t *testing.T) {
	t.Parallel()
	unreachable := errors.New("dial tcp 127.0.0.1:1: connection refused")
	commitLost := errors.New("unexpected EOF during COMMIT")
	tests := []struct {
		name    string
		store   *fakeStore
		wantRan int
		wantErr error
	}{
		{"begin fails", &fakeStore{beginErr: unreachable}, 0, unreachable},
		{"commit fails", &fakeStore{commitErr: commitLost}, 1, commitLost},
		{"store runs fn but reports no claim", &fakeStore{noClaim: true}, 1, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h, runs := counting(nil)
			err := mustMiddleware(t, tt.store)(h).Handle(t.Context(), job())
			var retry *handler.RetryError
			if !errors.As(err, &retry) || retry.Reason != idempotency.ReasonStore {
				t.Fatalf("Handle = %v, want a RetryError with reason %q", err, idempotency.ReasonStore)
			}
			if handler.IsPermanent(err) {
				t.Fatalf("store failure %v is permanent", err)
			}
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Fatalf("Handle = %v, want it to wrap %v", err, tt.wantErr)
			}
			if !strings.Contains(err.Error(), `"thumbs/images/images/3/1042"`) {
				t.Errorf("error %q does not name the key", err)
			}
			if runs() != tt.wantRan {
				t.Fatalf("handler ran %d times, want %d", runs(), tt.wantRan)
			}
		})
	}
}

func TestMiddlewareStoreDownIsUnavailable(t *testing.T) {
	t.Parallel()
	refused := errors.New("dial tcp 127.0.0.1:1: connection refused")
	reset := errors.New("read: connection reset by peer")
	tests := []struct {
		name    string
		store   *fakeStore
		handler error // what the handler returns
		wantRan int
		wantErr error
	}{
		{"begin fails", &fakeStore{beginErr: handler.Unavailable("db", refused)}, nil, 0, refused},
		{"commit fails", &fakeStore{commitErr: handler.Unavailable("db", reset)}, nil, 1, reset},
		{"handler's statement died with the connection", &fakeStore{fnDown: true}, reset, 1, reset},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h, runs := counting(tt.handler)
			err := mustMiddleware(t, tt.store)(h).Handle(t.Context(), job())
			var u *handler.UnavailableError
			if !errors.As(err, &u) || u.Dependency != "db" || !errors.Is(err, tt.wantErr) {
				t.Fatalf("Handle = %v, want an UnavailableError of db wrapping %v", err, tt.wantErr)
			}
			if handler.IsPermanent(err) || handler.ReasonOf(err) != handler.ReasonUnavailable {
				t.Fatalf("Handle = %v: permanent %v, reason %q; want reason %q", err, handler.IsPermanent(err), handler.ReasonOf(err), handler.ReasonUnavailable)
			}
			if runs() != tt.wantRan {
				t.Fatalf("handler ran %d times, want %d", runs(), tt.wantRan)
			}
		})
	}
}

func TestMiddlewareDuplicateFromStore(t *testing.T) {
	t.Parallel()
	s := &fakeStore{duplicate: true}
	h, runs := counting(errors.New("must not run"))
	called := 0
	mw := mustMiddleware(t, s, idempotency.OnDuplicate(func(*handler.Job, string) { called++ }))
	if err := mw(h).Handle(t.Context(), job()); err != nil || runs() != 0 || called != 1 {
		t.Fatalf("duplicate: err=%v runs=%d OnDuplicate calls=%d, want nil, 0, 1", err, runs(), called)
	}
}

// A key that holds a cancel: a CancelledError (ACCEPT, reported as
// cancelled) without running the handler, and not a duplicate.
func TestMiddlewareCancelledFromStore(t *testing.T) {
	t.Parallel()
	s := &fakeStore{cancelled: true}
	h, runs := counting(errors.New("must not run"))
	dups := 0
	mw := mustMiddleware(t, s, idempotency.OnDuplicate(func(*handler.Job, string) { dups++ }))
	err := mw(h).Handle(t.Context(), job())
	if !handler.IsCancelled(err) || !errors.Is(err, idempotency.ErrCancelled) || runs() != 0 || dups != 0 {
		t.Fatalf("cancelled: err=%v runs=%d OnDuplicate calls=%d, want a CancelledError wrapping ErrCancelled, 0, 0", err, runs(), dups)
	}
	// A duplicate is not cancelled.
	if err := mustMiddleware(t, &fakeStore{duplicate: true})(h).Handle(t.Context(), job()); err != nil {
		t.Fatalf("duplicate: err=%v, want nil", err)
	}
}

// Key is the key Middleware claims with its defaults.
func TestKey(t *testing.T) {
	t.Parallel()
	for _, j := range []*handler.Job{job(jobID("order-7")), {Topic: "images", Headers: []handler.Header{jobID("order-7")}}, job(jobID("a\x00b"))} {
		s := &fakeStore{}
		h, _ := counting(nil)
		if err := mustMiddleware(t, s)(h).Handle(t.Context(), j); err != nil {
			t.Fatal(err)
		}
		if got, want := idempotency.Key(j.Group, j.Topic, j.ID()), s.lastKey(t); got != want {
			t.Errorf("Key(%q, %q, %q) = %q, Middleware claimed %q", j.Group, j.Topic, j.ID(), got, want)
		}
	}
}

func TestMiddlewarePassesTxToHandler(t *testing.T) {
	t.Parallel()
	s := &fakeStore{tx: "tx-1"}
	var got any
	h := handler.Func(func(ctx context.Context, _ *handler.Job) error {
		got = idempotency.Tx(ctx)
		return nil
	})
	if err := mustMiddleware(t, s)(h).Handle(t.Context(), job()); err != nil {
		t.Fatal(err)
	}
	if got != "tx-1" {
		t.Fatalf("handler saw Tx(ctx) = %v, want the store's tx-1", got)
	}
}

func TestMiddlewarePanicPropagatesAndFreesKey(t *testing.T) {
	t.Parallel()
	s := idempotency.NewMemoryStore()
	mw := mustMiddleware(t, s)
	func() {
		defer func() {
			if r := recover(); r != "kaboom" {
				t.Fatalf("recovered %v, want the handler's panic", r)
			}
		}()
		_ = mw(handler.Func(func(context.Context, *handler.Job) error { panic("kaboom") })).Handle(t.Context(), job())
	}()
	h, runs := counting(nil)
	if err := mw(h).Handle(t.Context(), job()); err != nil || runs() != 1 {
		t.Fatalf("delivery after a panic: err=%v runs=%d, want the handler to run", err, runs())
	}
}

func TestMiddlewareOptions(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		store   idempotency.Store
		opts    []idempotency.Option
		wantErr []string
		wantIs  error
	}{
		{"defaults", idempotency.NewMemoryStore(), nil, nil, nil},
		{"nil option ignored", idempotency.NewMemoryStore(), []idempotency.Option{nil}, nil, nil},
		{"nil OnDuplicate is none", idempotency.NewMemoryStore(), []idempotency.Option{idempotency.OnDuplicate(nil)}, nil, nil},
		{"nil store", nil, nil, []string{"idempotency: nil store"}, idempotency.ErrNilStore},
		{"nil KeyFunc", idempotency.NewMemoryStore(), []idempotency.Option{idempotency.KeyFunc(nil)}, []string{"idempotency: KeyFunc: nil function"}, nil},
		{
			"every error reported", nil, []idempotency.Option{idempotency.KeyFunc(nil)},
			[]string{"idempotency: nil store", "idempotency: KeyFunc: nil function"}, idempotency.ErrNilStore,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			mw, err := idempotency.Middleware(tt.store, tt.opts...)
			if len(tt.wantErr) == 0 {
				if err != nil || mw == nil {
					t.Fatalf("Middleware = %v, %v; want a middleware", mw, err)
				}
				return
			}
			if err == nil || mw != nil {
				t.Fatalf("Middleware = %v, %v; want an error", mw, err)
			}
			for _, want := range tt.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q lacks %q", err, want)
				}
			}
			if tt.wantIs != nil && !errors.Is(err, tt.wantIs) {
				t.Errorf("error %v is not %v", err, tt.wantIs)
			}
		})
	}
}

// sizedStore is a store with a limit on the claims it holds at once.
type sizedStore struct {
	fakeStore
	slots int
}

func (s *sizedStore) CheckConcurrency(n int) error {
	if n > s.slots {
		return fmt.Errorf("sized: %d slots for %d jobs", s.slots, n)
	}
	return nil
}

// The handler Middleware returns passes the worker's start-up question
// (worker.ConcurrencyChecker) on to a store that can answer it, and says
// nothing for one that cannot.
func TestMiddlewareAsksTheStoreAboutConcurrency(t *testing.T) {
	t.Parallel()
	type checker interface{ CheckConcurrency(int) error }
	nop := handler.Func(func(context.Context, *handler.Job) error { return nil })
	ask := func(s idempotency.Store, n int) error {
		mw, err := idempotency.Middleware(s)
		if err != nil {
			t.Fatal(err)
		}
		cc, ok := mw(nop).(checker)
		if !ok {
			t.Fatalf("the handler of Middleware(%T) has no CheckConcurrency", s)
		}
		return cc.CheckConcurrency(n)
	}
	sized := &sizedStore{slots: 3}
	if err := ask(sized, 3); err != nil {
		t.Errorf("3 jobs on 3 slots: %v", err)
	}
	if err := ask(sized, 10); err == nil || err.Error() != "sized: 3 slots for 10 jobs" {
		t.Errorf("10 jobs on 3 slots: %v, want the store's error", err)
	}
	if err := ask(idempotency.NewMemoryStore(), 1000); err != nil {
		t.Errorf("a store without CheckConcurrency: %v, want nil", err)
	}
}
