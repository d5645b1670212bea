package main

import (
	"context"
	"errors"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
)

// coordinatorWait bounds how long a command waits for a group coordinator
// that is not ready: a broker that just started (or took over the group)
// answers COORDINATOR_NOT_AVAILABLE or COORDINATOR_LOAD_IN_PROGRESS until it
// has loaded its group state, which can outlast the client's own retries.
const coordinatorWait = 20 * time.Second

// coordinatorRetryEvery is the pause between two tries.
const coordinatorRetryEvery = 250 * time.Millisecond

// coordinatorNotReady reports whether err says only that the group's
// coordinator cannot answer yet; asking again later can succeed.
func coordinatorNotReady(err error) bool {
	return errors.Is(err, kerr.CoordinatorNotAvailable) ||
		errors.Is(err, kerr.CoordinatorLoadInProgress) ||
		errors.Is(err, kerr.NotCoordinator)
}

// untilCoordinatorReady calls try until it returns nil or an error other
// than a coordinator that is not ready, for at most coordinatorWait; then
// it returns try's last error.
func untilCoordinatorReady(ctx context.Context, try func() error) error {
	deadline := time.Now().Add(coordinatorWait)
	for {
		err := try()
		if err == nil || !coordinatorNotReady(err) || time.Now().Add(coordinatorRetryEvery).After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(coordinatorRetryEvery):
		}
	}
}
