package worker_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/shareq/shareq/internal/kafkatest"
)

func TestMain(m *testing.M) {
	kafkatest.RunCrashMember() // returns unless this is a crash member
	runCrashWorker()           // returns unless this is a crash worker
	runFrozenWorker()          // returns unless this is a frozen worker
	runStatusWorker()          // returns unless this is a status worker
	runPauseWorker()           // returns unless this is a pause worker
	goleak.VerifyTestMain(m)
}
