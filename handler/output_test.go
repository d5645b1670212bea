package handler_test

import (
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/shareq/shareq/handler"
)

func TestSetResult(t *testing.T) {
	var j handler.Job
	if j.Result() != nil {
		t.Fatal("a new job has a result")
	}
	if err := j.SetResult(map[string]int{"width": 512}); err != nil {
		t.Fatal(err)
	}
	if got := string(j.Result()); got != `{"width":512}` {
		t.Fatalf("result %s", got)
	}
	err := j.SetResult(strings.Repeat("x", handler.MaxResultBytes))
	var big *handler.ResultTooBigError
	if !errors.As(err, &big) || big.Size != handler.MaxResultBytes+2 {
		t.Fatalf("too big: err %v", err)
	}
	if err := j.SetResult(func() {}); err == nil {
		t.Fatal("a func encoded")
	}
	if got := string(j.Result()); got != `{"width":512}` {
		t.Fatalf("a failed SetResult changed the result to %s", got)
	}
}

func TestProgress(t *testing.T) {
	var j handler.Job
	if _, ok := j.LastProgress(); ok {
		t.Fatal("a new job has progress")
	}
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() { j.Progress(i*50, "half") })
	}
	wg.Go(func() { _, _ = j.LastProgress() })
	wg.Wait()
	j.Progress(150, strings.Repeat("é", handler.MaxProgressMessage))
	p, ok := j.LastProgress()
	if !ok || p.Percent != 100 || len(p.Message) != handler.MaxProgressMessage || p.At.IsZero() {
		t.Fatalf("progress %d %d bytes %v %v; want 100, the message cut to %d bytes", p.Percent, len(p.Message), p.At, ok, handler.MaxProgressMessage)
	}
	j.Progress(-5, "")
	if p, _ := j.LastProgress(); p.Percent != 0 {
		t.Fatalf("percent %d, want -5 clamped to 0", p.Percent)
	}
}
