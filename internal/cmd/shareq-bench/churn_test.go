package main

import (
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// brokerCPU reads a process's CPU time from /proc/PID/stat (this test
// process's, once it has used 50 ms: the kernel counts in 10 ms ticks,
// and a test run alone may start below one), and says −1 when no process
// is named or the one named does not exist.
func TestBrokerCPUReadsProcStat(t *testing.T) {
	t.Parallel()
	var ru syscall.Rusage
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); {
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			t.Fatal(err)
		}
		if time.Duration(ru.Utime.Nano()+ru.Stime.Nano()) >= 50*time.Millisecond {
			break
		}
	}
	if got := brokerCPU(strconv.Itoa(os.Getpid())); got <= 0 {
		t.Errorf("brokerCPU(this process) = %v, want above 0", got)
	}
	for _, pid := range []string{"", "0", "not-a-pid"} {
		if got := brokerCPU(pid); got != -1 {
			t.Errorf("brokerCPU(%q) = %v, want -1", pid, got)
		}
	}
}
