package member

import (
	"context"
	"errors"
	"log/slog"
	"regexp"
	"testing"
	"testing/synctest"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/shareq/shareq/internal/logbuf"
)

// An operator reads one line when a peer stops answering and one when it
// answers again, however many requests failed between; a coordinator
// that moved is said at Warn only once it has been missing for
// coordinatorGrace, and an answer that it is not the coordinator is not
// "answering again".
func TestNoteReachSaysOnceAndOnlyWhenItLasts(t *testing.T) {
	lines := func(logs *logbuf.Buffer, pattern string) int {
		return len(regexp.MustCompile(pattern).FindAllString(logs.String(), -1))
	}
	dead := errors.New("dial tcp 127.0.0.1:1: connect: connection refused")
	for _, tc := range []struct {
		name  string
		steps []error // one heartbeat outcome a second
		warn  string  // the Warn line expected, once; "": none
		back  int     // "answering again" lines expected
		peer  string  // peerCoordinator unless set
		// backAt is the step answered, before which no "answering
		// again" may be logged (0: the last).
		backAt int
	}{
		{name: "a move within the grace: no line", steps: []error{kerr.NotCoordinator, kerr.CoordinatorLoadInProgress, kerr.CoordinatorNotAvailable, nil}},
		{name: "a move that lasts: one Warn, one Info", warn: `no group coordinator found for 5s`, back: 1,
			steps: []error{kerr.NotCoordinator, kerr.NotCoordinator, kerr.NotCoordinator, kerr.NotCoordinator, kerr.NotCoordinator, kerr.NotCoordinator, kerr.NotCoordinator, kerr.NotCoordinator, nil}},
		{name: "silence, then answers that it is not the coordinator: back only when a heartbeat is answered", warn: `no answer from group coordinator`, back: 1,
			steps: []error{dead, dead, kerr.NotCoordinator, kerr.NotCoordinator, kerr.NotCoordinator, kerr.NotCoordinator, kerr.NotCoordinator, kerr.NotCoordinator, kerr.NotCoordinator, nil}},
		{name: "a fenced member's coordinator answers", warn: `no answer from group coordinator`, back: 1,
			steps: []error{dead, kerr.UnknownMemberID, nil}, backAt: 1},
		{name: "a broker's error code is an answer", peer: peerBroker(2), warn: `no answer from broker 2`, back: 1,
			steps: []error{dead, dead, kerr.NotCoordinator, nil}, backAt: 2},
		{name: "stopping: no line", steps: []error{context.Canceled, nil}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var logs logbuf.Buffer
				m := &Member{log: slog.New(slog.NewTextHandler(&logs, nil))}
				if tc.backAt == 0 {
					tc.backAt = len(tc.steps) - 1
				}
				peer := peerCoordinator
				if tc.peer != "" {
					peer = tc.peer
				}
				for i, err := range tc.steps {
					if i > 0 {
						time.Sleep(time.Second)
					}
					if i == tc.backAt && lines(&logs, `answering again`) != 0 {
						t.Errorf("answering again before step %d; logs:\n%s", i, logs.String())
					}
					m.noteReach(peer, err)
				}
				warns := lines(&logs, `level=WARN`)
				if tc.warn == "" && warns != 0 || tc.warn != "" && (warns != 1 || lines(&logs, regexp.QuoteMeta(tc.warn)) != 1) {
					t.Errorf("want one Warn line %q (none if empty); logs:\n%s", tc.warn, logs.String())
				}
				if n := lines(&logs, `answering again`); n != tc.back {
					t.Errorf("%d lines answering again, want %d; logs:\n%s", n, tc.back, logs.String())
				}
				if len(m.unreach) != 0 {
					t.Errorf("outages left after an answer: %v", m.unreach)
				}
			})
		})
	}
}
