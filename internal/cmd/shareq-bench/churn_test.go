package main

import (
	"os"
	"strconv"
	"testing"
)

// brokerCPU reads a process's CPU time from /proc/PID/stat (this test
// process's: some, after the race-enabled start-up), and says −1 when no
// process is named or the one named does not exist.
func TestBrokerCPUReadsProcStat(t *testing.T) {
	t.Parallel()
	if got := brokerCPU(strconv.Itoa(os.Getpid())); got <= 0 {
		t.Errorf("brokerCPU(this process) = %v, want above 0", got)
	}
	for _, pid := range []string{"", "0", "not-a-pid"} {
		if got := brokerCPU(pid); got != -1 {
			t.Errorf("brokerCPU(%q) = %v, want -1", pid, got)
		}
	}
}
