package pgoutbox

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	runSnoozeWorker() // a child process of TestSnoozedJobsSurviveAWorkerKill
	goleak.VerifyTestMain(m)
}
