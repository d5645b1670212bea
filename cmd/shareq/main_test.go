package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestUsage(t *testing.T) {
	var out, errOut bytes.Buffer
	if err := run(context.Background(), nil, &out, &errOut); !errors.Is(err, errUsage) {
		t.Fatalf("no command: %v", err)
	}
	if !strings.Contains(errOut.String(), "dev") {
		t.Fatalf("usage does not list dev: %s", errOut.String())
	}
	errOut.Reset()
	if err := run(context.Background(), []string{"nope"}, &out, &errOut); !errors.Is(err, errUsage) || !strings.Contains(errOut.String(), `unknown command "nope"`) {
		t.Fatalf("unknown command: %v %s", err, errOut.String())
	}
}

func TestDevServesShareGroups(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	cl2, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	consoleAddr := cl2.Addr().String()
	cl2.Close()

	ctx, cancel := context.WithCancel(context.Background())
	var out, errOut bytes.Buffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"dev", "-port", strconv.Itoa(port), "-topics", "jobs", "-partitions", "2", "-console", consoleAddr}, &out, &errOut)
	}()
	addr := "127.0.0.1:" + strconv.Itoa(port)
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		t.Fatal(err)
	}
	pctx, pcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer pcancel()
	for {
		if err = cl.ProduceSync(pctx, &kgo.Record{Topic: "jobs", Value: []byte("x")}).FirstErr(); err == nil || pctx.Err() != nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		cl.Close()
		t.Fatalf("produce to dev broker: %v", err)
	}
	// Each topic's DLQ topic is there too (1 partition), so a worker that
	// requires it starts.
	got := partitionsOf(t, kadm.NewClient(cl), "jobs", "jobs.dlq")
	cl.Close()
	if got["jobs"] != 2 || got["jobs.dlq"] != 1 {
		t.Errorf("dev created %v partitions, want jobs 2 and jobs.dlq 1", got)
	}
	if err := checkWorker(t, []string{addr}, "jobs"); err != nil {
		t.Errorf("a worker requiring jobs.dlq on the dev broker: %v", err)
	}
	// The console is served too, with actions, once the broker is up.
	var page string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		resp, err := http.Get("http://" + consoleAddr + "/topics")
		if err != nil {
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		page = string(b)
		break
	}
	if !strings.Contains(page, `href="/dlq/jobs.dlq"`) || !strings.Contains(page, `href="/enqueue"`) {
		t.Errorf("dev console's topics page: want jobs.dlq and the enqueue action\n%s", page)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("dev: %v (%s)", err, errOut.String())
	}
	if !strings.Contains(out.String(), "listening on "+addr) || !strings.Contains(out.String(), "jobs.dlq") ||
		!strings.Contains(out.String(), "shareq console on http://"+consoleAddr+"/ (actions enabled)") {
		t.Fatalf("output: %s", out.String())
	}
}
