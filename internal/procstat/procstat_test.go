package procstat

import (
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

func TestMemoryOfOwnProcess(t *testing.T) {
	rss, hwm, err := Memory(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if rss <= 0 || hwm < rss {
		t.Fatalf("VmRSS %d, VmHWM %d: want 0 < RSS <= HWM", rss, hwm)
	}
	// A big allocation touched page by page raises both.
	buf := make([]byte, 64<<20)
	for i := 0; i < len(buf); i += 4096 {
		buf[i] = 1
	}
	rss2, hwm2, err := Memory(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if rss2 < rss+32<<20 || hwm2 < rss2 {
		t.Errorf("after touching 64 MiB: VmRSS %d -> %d, VmHWM %d: want RSS up by at least 32 MiB and HWM >= RSS", rss, rss2, hwm2)
	}
	_ = buf[len(buf)-1]
}

func TestMemoryOfNoProcess(t *testing.T) {
	if _, _, err := Memory(-1); err == nil {
		t.Error("Memory(-1): no error")
	}
}

// CPU follows the process's own rusage: spinning 300 ms of CPU raises
// both by about as much, and a child's time counts in TreeCPU.
func TestCPUOfOwnProcessAndTree(t *testing.T) {
	var ru syscall.Rusage
	rusage := func() time.Duration {
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			t.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	before, err := CPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	ruBefore := rusage()
	spin := time.Now()
	for x := 0; rusage()-ruBefore < 300*time.Millisecond; x++ {
		if time.Since(spin) > time.Minute {
			t.Fatal("300 ms of CPU not used within a minute")
		}
	}
	after, err := CPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// Ticks are 10 ms, and other goroutines of the test binary add some.
	if d := after - before; d < 250*time.Millisecond || d > 2*time.Second {
		t.Errorf("CPU rose %v over 300 ms of spinning", d)
	}
	cmd := exec.Command("sh", "-c", "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done; sleep 30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if ppid, err := Parent(cmd.Process.Pid); err != nil || ppid != os.Getpid() {
		t.Fatalf("Parent of the child: %d, %v; want %d", ppid, err, os.Getpid())
	}
	deadline := time.Now().Add(time.Minute)
	for {
		child, err := CPU(cmd.Process.Pid)
		if err != nil {
			t.Fatal(err)
		}
		tree, err := TreeCPU(os.Getpid())
		if err != nil {
			t.Fatal(err)
		}
		own, _ := CPU(os.Getpid())
		if child >= 50*time.Millisecond {
			if tree < child || tree < own {
				t.Errorf("TreeCPU %v, below its parts: own %v, child %v", tree, own, child)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the child used %v of CPU in a minute", child)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestCPUOfNoProcess(t *testing.T) {
	if _, err := CPU(-1); err == nil {
		t.Error("CPU(-1): no error")
	}
}
