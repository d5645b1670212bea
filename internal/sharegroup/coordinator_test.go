package sharegroup

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

func TestUntilCoordinatorReady(t *testing.T) {
	// What kadm returns once kgo's own retries ran out.
	loading := &kadm.ShardErrors{Name: "ShareGroupDescribe", AllFailed: true, Errs: []kadm.ShardError{{Err: kerr.CoordinatorNotAvailable}}}

	t.Run("retries until the coordinator answers", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			tries := 0
			start := time.Now()
			err := UntilCoordinatorReady(t.Context(), func() error {
				tries++
				switch tries {
				case 1:
					return loading
				case 2:
					return fmt.Errorf("describe: %w", kerr.CoordinatorLoadInProgress)
				case 3:
					return kerr.NotCoordinator
				}
				return nil
			})
			if err != nil || tries != 4 || time.Since(start) != 3*CoordinatorRetryEvery {
				t.Errorf("err %v after %d tries in %v; want nil after 4 tries in %v", err, tries, time.Since(start), 3*CoordinatorRetryEvery)
			}
		})
	})
	t.Run("other errors are returned at once", func(t *testing.T) {
		tries := 0
		err := UntilCoordinatorReady(t.Context(), func() error { tries++; return kerr.GroupIDNotFound })
		if !errors.Is(err, kerr.GroupIDNotFound) || tries != 1 {
			t.Errorf("err %v after %d tries; want GROUP_ID_NOT_FOUND after 1", err, tries)
		}
	})
	t.Run("gives up after CoordinatorWait", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			start := time.Now()
			err := UntilCoordinatorReady(t.Context(), func() error { return loading })
			if err != loading || time.Since(start) > CoordinatorWait || time.Since(start) < CoordinatorWait-CoordinatorRetryEvery {
				t.Errorf("err %v after %v; want the last error after about %v", err, time.Since(start), CoordinatorWait)
			}
		})
	})
	t.Run("stops when the context ends", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), time.Second)
			defer cancel()
			start := time.Now()
			err := UntilCoordinatorReady(ctx, func() error { return loading })
			if err != loading || time.Since(start) != time.Second {
				t.Errorf("err %v after %v; want the last error after 1s", err, time.Since(start))
			}
		})
	})
}
