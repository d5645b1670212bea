package procstat

import (
	"os"
	"testing"
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
