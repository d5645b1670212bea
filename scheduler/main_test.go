package scheduler

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// The test binary re-executed by TestKilledAndFrozenSchedulerProcesses as one
	// of its scheduler processes.
	if os.Getenv(childEnv) == "1" {
		os.Exit(schedulerChild())
	}
	goleak.VerifyTestMain(m)
}
