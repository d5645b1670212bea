package kafkatest

import (
	"bufio"
	"context"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// crashMemberEnv, set to "seeds|group|topic|n", makes a test binary a
// crash member (see [StartCrashMember]).
const crashMemberEnv = "SHAREQ_KAFKATEST_CRASH_MEMBER"

// crashMemberWait bounds how long a crash member waits for its records,
// and StartCrashMember for it.
const crashMemberWait = 60 * time.Second

// RunCrashMember makes the test binary a crash member when it was started
// as one by [StartCrashMember]; it then never returns. Call it first in
// the TestMain of a package that uses StartCrashMember.
func RunCrashMember() {
	v := os.Getenv(crashMemberEnv)
	if v == "" {
		return
	}
	parts := strings.Split(v, "|")
	seeds, group, topic := strings.Split(parts[0], ","), parts[1], parts[2]
	n, _ := strconv.Atoi(parts[3])
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ShareGroup(group), kgo.ConsumeTopics(topic),
		kgo.ShareMaxRecords(int32(n)), kgo.ShareMaxRecordsStrict(), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		fmt.Println("ERR", err)
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), crashMemberWait)
	defer cancel()
	for ctx.Err() == nil {
		recs := cl.PollRecords(ctx, n).Records()
		if len(recs) == 0 {
			continue
		}
		if len(recs) != n {
			fmt.Println("ERR got", len(recs), "records")
			os.Exit(2)
		}
		held := make([]string, n)
		for i, r := range recs {
			held[i] = strconv.FormatInt(r.Offset, 10) + ":" + hex.EncodeToString(r.Key)
		}
		fmt.Println("HOLDING", strings.Join(held, " "))
		time.Sleep(time.Hour) // until killed
	}
	os.Exit(3)
}

// Held is a record a crash member holds.
type Held struct {
	Offset int64
	Key    string
}

// StartCrashMember runs a crash member: this test binary again, as a
// member of the share group that takes n records of topic in one poll and
// holds them without acknowledging them. It returns the records held and
// a func that kills the member with SIGKILL (as a crash would: its
// connections close, it never acknowledges or leaves) and waits for it to
// exit. The test's TestMain must call [RunCrashMember].
func StartCrashMember(t testing.TB, c *Cluster, group, topic string, n int) (held []Held, kill func()) {
	t.Helper()
	lines, kill := StartChild(t, fmt.Sprintf("%s=%s|%s|%s|%d", crashMemberEnv, strings.Join(c.Seeds, ","), group, topic, n))
	select {
	case line, ok := <-lines:
		if !ok {
			t.Fatal("crash member exited")
		}
		f := strings.Fields(line)
		if len(f) != n+1 || f[0] != "HOLDING" {
			t.Fatalf("crash member: %q, want HOLDING and %d records", line, n)
		}
		for _, h := range f[1:] {
			off, key, _ := strings.Cut(h, ":")
			o, err1 := strconv.ParseInt(off, 10, 64)
			k, err2 := hex.DecodeString(key)
			if err1 != nil || err2 != nil {
				t.Fatalf("crash member: %q", line)
			}
			held = append(held, Held{Offset: o, Key: string(k)})
		}
	case <-time.After(crashMemberWait + 10*time.Second):
		t.Fatal("crash member took nothing")
	}
	return held, kill
}

// StartChild runs this test binary again, with env (NAME=value) added to
// its environment so that its TestMain takes up a child's part (a crash
// member, a worker to kill), and no test of its own. It returns the lines
// the child prints on stdout (buffered; lines beyond the buffer that
// nobody reads are dropped, so a chatty child never blocks) and a func
// that kills the child with SIGKILL, as a crash would (its connections
// close; it never acknowledges or leaves), and waits until it exited and
// its output was read. The kill also runs at the test's cleanup.
func StartChild(t testing.TB, env string) (lines <-chan string, kill func()) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ch := make(chan string, 100)
	read := make(chan struct{})
	go func() { // ends when the child exits and its stdout closes
		defer close(read)
		defer close(ch)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			select {
			case ch <- sc.Text():
			default:
			}
		}
	}()
	var once sync.Once
	kill = func() {
		once.Do(func() {
			_ = cmd.Process.Kill() // SIGKILL
			<-read
			_ = cmd.Wait()
		})
	}
	t.Cleanup(kill)
	return ch, kill
}
