package main

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/shareq/shareq/handler"
)

// What each answer of an endpoint means for the job.
func TestAnswered(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	w := Webhook{ID: "evt-1"}
	for _, tc := range []struct {
		code       int
		retryAfter string
		want       string // "ok", "snooze", "permanent", "key down"
		snooze     time.Duration
	}{
		{code: 200, want: "ok"},
		{code: 204, want: "ok"},
		{code: 429, retryAfter: "3", want: "snooze", snooze: 3 * time.Second},
		{code: 429, want: "snooze", snooze: time.Second},
		{code: 429, retryAfter: now.Add(90 * time.Second).Format(http.TimeFormat), want: "snooze", snooze: 90 * time.Second},
		{code: 429, retryAfter: "999999", want: "snooze", snooze: retryAfterMax},
		{code: 400, want: "permanent"},
		{code: 404, want: "permanent"},
		{code: 410, want: "permanent"},
		{code: 500, want: "key down"},
		{code: 503, want: "key down"},
	} {
		t.Run(fmt.Sprint(tc.code, tc.retryAfter), func(t *testing.T) {
			resp := &http.Response{StatusCode: tc.code, Status: http.StatusText(tc.code), Header: http.Header{}}
			if tc.retryAfter != "" {
				resp.Header.Set("Retry-After", tc.retryAfter)
			}
			err := answered(w, "shop.example:443", resp, now)
			d, snoozed := handler.SnoozeOf(err)
			var got string
			switch {
			case err == nil:
				got = "ok"
			case snoozed:
				got = "snooze"
			case handler.IsPermanent(err):
				got = "permanent"
			case handler.IsKeyUnavailable(err):
				got = "key down"
			default:
				got = "retry"
			}
			if got != tc.want || d != tc.snooze {
				t.Errorf("%d (Retry-After %q) = %v (%s, snooze %v); want %s, snooze %v", tc.code, tc.retryAfter, err, got, d, tc.want, tc.snooze)
			}
		})
	}
}

// A request that got no answer: refused opens the host's breaker; a
// timeout or another network error is retried.
func TestSendFailed(t *testing.T) {
	t.Parallel()
	w := Webhook{ID: "evt-1"}
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	if err := sendFailed(w, refused); !handler.IsKeyUnavailable(err) {
		t.Errorf("connection refused = %v; want handler.KeyUnavailable", err)
	}
	timeout := &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
	for _, err := range []error{timeout, errors.New("connection reset by peer")} {
		got := sendFailed(w, err)
		if got == nil || handler.IsKeyUnavailable(got) || handler.IsPermanent(got) {
			t.Errorf("%v = %v; want a retryable error", err, got)
		}
	}
}

// A job's key is its webhook's host; a value that is no webhook has none.
func TestHost(t *testing.T) {
	t.Parallel()
	for v, want := range map[string]string{
		`{"url":"https://hooks.shop.example/orders"}`: "hooks.shop.example",
		`{"url":"http://127.0.0.1:8080/hooks"}`:       "127.0.0.1:8080",
		`not json`:                                    "",
		`{"url":"://bad"}`:                            "",
	} {
		if got := Host(&handler.Job{Value: []byte(v)}); got != want {
			t.Errorf("Host(%s) = %q; want %q", v, got, want)
		}
	}
}
