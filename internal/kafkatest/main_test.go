package kafkatest_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if os.Getenv(crashMemberEnv) != "" {
		crashMember() // never returns
	}
	goleak.VerifyTestMain(m)
}
