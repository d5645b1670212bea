package idempotency

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/shareq/shareq/handler"
)

// ReasonStore is the [handler.RetryError] reason of a job released because
// its claim could not be made or committed.
const ReasonStore = "idempotency-store"

// MaxKeyLen is the longest key, in bytes, that [Middleware] hands to a
// [Store] as it is. A longer key, or one that is not valid UTF-8 or holds a
// NUL byte (job-id headers come from producers and can hold anything), is
// replaced by "sha256:" and the hex SHA-256 of its bytes, which a text
// primary key can always hold.
const MaxKeyLen = 512

// An Option configures [Middleware].
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	keyFunc     func(*handler.Job) string
	prefix      string
	prefixSet   bool
	onDuplicate func(*handler.Job, string)

	errs []error
}

// KeyFunc sets how a job's key is derived, before the prefix (see
// [KeyPrefix]) is put in front of it. f must return the same key for
// every delivery of a job, and for every copy of it when a producer can
// write a job twice; an empty key makes the job fail permanently with
// [ErrEmptyKey]. Default: [handler.Job.ID], which is the producer's
// shareq-job-id header when present and non-empty, else
// "topic/partition/offset".
func KeyFunc(f func(job *handler.Job) string) Option {
	return optionFunc(func(c *config) {
		if f == nil {
			c.errs = append(c.errs, errors.New("KeyFunc: nil function"))
			return
		}
		c.keyFunc = f
	})
}

// KeyPrefix puts p in front of every key in place of the default prefix.
//
// Keys must be unique among all jobs that share a claim table, or one job
// is skipped as a duplicate of another. The default prefix scopes keys to
// the job's share group and topic, "group/topic/" ("topic/" when the job
// carries no group), so two groups that consume the same topic each run
// its jobs once, and one job ID used on two topics names two jobs. The
// default key of a record without a job-id header is therefore
// "group/topic/topic/partition/offset".
//
// Set a fixed prefix to keep claims valid across a renamed group or topic,
// to let jobs moved between topics (a retry topic and its main topic)
// share claims, or "" when the [KeyFunc] already yields keys unique across
// the table.
func KeyPrefix(p string) Option {
	return optionFunc(func(c *config) { c.prefix, c.prefixSet = p, true })
}

// OnDuplicate sets a function called, with the job and its key, each time
// the middleware accepts a job without running its handler because its key
// was already claimed; use it to count suppressed duplicates. It is called
// on the handler's goroutine, so it must be safe for concurrent use and
// return quickly. Default: none. The last OnDuplicate given wins.
func OnDuplicate(f func(job *handler.Job, key string)) Option {
	return optionFunc(func(c *config) { c.onDuplicate = f })
}

// Middleware returns a middleware that runs each job's handler at most
// once per key to completion, inside a claim made by store. It returns
// [ErrNilStore] for a nil store and an error for an invalid option.
//
// For each job the middleware derives the key (see [KeyFunc] and
// [KeyPrefix]) and calls store.Claim with the rest of the chain as fn. The
// handler finds the claim's transaction with [Tx] (or pgstore.Tx). The
// outcome:
//
//   - key free, handler returns nil, claim committed: nil (ACCEPT).
//   - key already claimed: nil (ACCEPT) without running the handler;
//     [OnDuplicate] is told.
//   - key holds a cancel (the store returns [ErrCancelled]: with
//     pgstore, pgoutbox.CancelTx recorded one): a [*handler.CancelledError]
//     wrapping it, without running the handler: the worker ACCEPTs the
//     record and reports the job as cancelled. [OnDuplicate] is not told.
//   - handler returns an error: the claim is rolled back and the error is
//     returned unchanged (a [handler.Permanent] error stays permanent).
//   - the store fails, including a commit that failed or whose outcome is
//     unknown: [handler.Retry] with reason [ReasonStore], so the job is
//     released and delivered again; see the package documentation for why
//     that is safe.
//   - the store is down (its error is a [handler.UnavailableError], as
//     pgstore's are while Postgres is unreachable or failing over, also
//     when the handler's own error came from the dead connection): that
//     error, so the worker pauses and holds the job instead of spending
//     its deliveries, and runs it again on the same delivery once the
//     store is back.
//   - a panic in the handler rolls back the claim and propagates, for a
//     recovery middleware further out.
//
// Put it inside middleware that may end a job early (timeouts, DLQ
// parking), so that their outcome is decided with the claim in view, and
// keep the handler's context: the claim's transaction is in it.
//
// A store that also has the method CheckConcurrency(concurrency int) error
// (pgstore's Store: is its connection pool large enough?) is asked by the
// worker at start, through the handlers the middleware returns, whether it
// can hold a claim for each job the worker runs at once; the worker logs
// the error at Warn level (see worker.ConcurrencyChecker). Give the
// middleware to worker.Handle or worker.Use, or pass the handler it
// returned to worker.Handle, for the worker to find it.
func Middleware(store Store, opts ...Option) (handler.Middleware, error) {
	c, err := newConfig(store == nil, opts)
	if err != nil {
		return nil, err
	}
	return func(next handler.Handler) handler.Handler {
		return &claimHandler{c: c, store: store, next: next}
	}, nil
}

// newConfig applies opts, and returns their errors ([ErrNilStore] first
// when nilStore).
func newConfig(nilStore bool, opts []Option) (*config, error) {
	c := &config{keyFunc: (*handler.Job).ID}
	for _, o := range opts {
		if o != nil {
			o.apply(c)
		}
	}
	errs := c.errs
	if nilStore {
		errs = append([]error{ErrNilStore}, errs...)
	}
	if len(errs) > 0 {
		for i, e := range errs {
			if !errors.Is(e, ErrNilStore) {
				errs[i] = fmt.Errorf("idempotency: %w", e)
			}
		}
		return nil, errors.Join(errs...)
	}
	return c, nil
}

// claimHandler is next wrapped in claims: the handler [Middleware]
// returns.
type claimHandler struct {
	c     *config
	store Store
	next  handler.Handler
}

func (h *claimHandler) Handle(ctx context.Context, job *handler.Job) error {
	return h.c.handle(ctx, h.store, h.next, job)
}

// CheckConcurrency passes the worker's start-up question on to the store,
// when the store can answer it (pgstore's checks its connection pool):
// whether it can hold a claim for each of concurrency jobs at once. The
// worker asks it of each handler and middleware layer it runs
// (worker.ConcurrencyChecker) and logs an error at Warn level.
func (h *claimHandler) CheckConcurrency(concurrency int) error {
	if s, ok := h.store.(interface{ CheckConcurrency(concurrency int) error }); ok {
		return s.CheckConcurrency(concurrency)
	}
	return nil
}

func (c *config) handle(ctx context.Context, store Store, next handler.Handler, job *handler.Job) error {
	key, err := c.key(job)
	if err != nil {
		return handler.Permanent(err)
	}
	var (
		ran        bool
		handlerErr error
	)
	claimed, err := store.Claim(ctx, key, func(ctx context.Context) error {
		ran = true
		handlerErr = next.Handle(ctx, job)
		return handlerErr
	})
	switch {
	case ran && handlerErr != nil:
		// The handler failed; the store rolled back. Its error is the
		// outcome, whatever the rollback said, unless the store found
		// that it failed because the store itself went down.
		if handler.IsUnavailable(err) && !handler.IsUnavailable(handlerErr) {
			return err
		}
		return handlerErr
	case !ran && errors.Is(err, ErrCancelled):
		// The job was cancelled before it ran: done with, not run.
		return handler.Cancelled(fmt.Errorf("idempotency: claim %q: %w", key, err))
	case handler.IsUnavailable(err):
		// The store is down: every job would fail the same way. The
		// worker pauses instead of spending deliveries.
		return fmt.Errorf("idempotency: claim %q: %w", key, err)
	case err != nil:
		return handler.Retry(ReasonStore, fmt.Errorf("idempotency: claim %q: %w", key, err))
	case !claimed && ran:
		// The store broke its contract: it ran the handler but reports no
		// claim. Without a committed claim the job must not be accepted.
		return handler.Retry(ReasonStore, fmt.Errorf("idempotency: claim %q: store ran the handler but reported no claim", key))
	case !claimed:
		if c.onDuplicate != nil {
			c.onDuplicate(job, key)
		}
	}
	return nil
}

// Key returns the key [Middleware] claims for a job with ID jobID of
// share group group on topic, with the default [KeyFunc] and [KeyPrefix]:
// "group/topic/jobID" ("topic/jobID" for an empty group), hashed as
// [MaxKeyLen] says when it cannot be stored as it is. The job ID is the
// producer's shareq-job-id header (enqueue sets it). Give it to
// pgoutbox.ClaimKey to cancel a produced job.
func Key(group, topic, jobID string) string {
	job := &handler.Job{Group: group, Topic: topic}
	return storableKey(defaultPrefix(job) + jobID)
}

// key derives the key of job: prefix plus KeyFunc's key, hashed when it
// cannot be stored as it is.
func (c *config) key(job *handler.Job) (string, error) {
	k := c.keyFunc(job)
	if k == "" {
		return "", fmt.Errorf("idempotency: job %s: %w", job.ID(), ErrEmptyKey)
	}
	p := c.prefix
	if !c.prefixSet {
		p = defaultPrefix(job)
	}
	return storableKey(p + k), nil
}

func defaultPrefix(job *handler.Job) string {
	if job.Group == "" {
		return job.Topic + "/"
	}
	return job.Group + "/" + job.Topic + "/"
}

func storableKey(k string) string {
	if len(k) <= MaxKeyLen && utf8.ValidString(k) && !strings.ContainsRune(k, 0) {
		return k
	}
	sum := sha256.Sum256([]byte(k))
	return "sha256:" + hex.EncodeToString(sum[:])
}
