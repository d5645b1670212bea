// Package sharegroup describes Kafka share groups and moves their start
// offsets, for the operator tools: the shareq command (status, reset) and
// the console. It asks the brokers through kadm and retries while a
// group's coordinator is not ready.
package sharegroup

import (
	"context"
	"errors"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
)

// CoordinatorWait bounds how long a caller waits for a group coordinator
// that is not ready: a broker that just started (or took over the group)
// answers COORDINATOR_NOT_AVAILABLE or COORDINATOR_LOAD_IN_PROGRESS until it
// has loaded its group state, which can outlast the client's own retries.
const CoordinatorWait = 20 * time.Second

// CoordinatorRetryEvery is the pause between two tries.
const CoordinatorRetryEvery = 250 * time.Millisecond

// CoordinatorNotReady reports whether err says only that the group's
// coordinator cannot answer yet; asking again later can succeed.
func CoordinatorNotReady(err error) bool {
	return errors.Is(err, kerr.CoordinatorNotAvailable) ||
		errors.Is(err, kerr.CoordinatorLoadInProgress) ||
		errors.Is(err, kerr.NotCoordinator)
}

// UntilCoordinatorReady calls try until it returns nil or an error other
// than a coordinator that is not ready, for at most CoordinatorWait; then
// it returns try's last error.
func UntilCoordinatorReady(ctx context.Context, try func() error) error {
	deadline := time.Now().Add(CoordinatorWait)
	for {
		err := try()
		if err == nil || !CoordinatorNotReady(err) || time.Now().Add(CoordinatorRetryEvery).After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(CoordinatorRetryEvery):
		}
	}
}
