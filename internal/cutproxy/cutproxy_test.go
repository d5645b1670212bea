package cutproxy

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// echo starts a line echo server and returns its address.
func echo(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var conns []net.Conn
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
			go func() { _, _ = io.Copy(c, c) }()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		<-done
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return ln.Addr().String()
}

func dial(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, bufio.NewReader(c)
}

func roundTrip(t *testing.T, c net.Conn, r *bufio.Reader, line string) {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	defer c.SetDeadline(time.Time{})
	if _, err := io.WriteString(c, line+"\n"); err != nil {
		t.Fatalf("write %q: %v", line, err)
	}
	got, err := r.ReadString('\n')
	if err != nil || got != line+"\n" {
		t.Fatalf("echo of %q: %q, %v", line, got, err)
	}
}

// wantSilence checks that nothing comes back on c within d and that c
// stays open: the read times out rather than failing.
func wantSilence(t *testing.T, c net.Conn, r *bufio.Reader, d time.Duration) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(d))
	defer c.SetReadDeadline(time.Time{})
	got, err := r.ReadString('\n')
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read through a silent proxy: %q, %v; want a timeout with the connection open", got, err)
	}
}

// wantRefused checks that a connection to addr is reset: at its connect
// or at its first read.
func wantRefused(t *testing.T, addr string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return // reset before the connect returned
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read on a cut proxy: %v, want a reset", err)
	}
}

func TestSilenceHoldsBothWaysAndResumeDelivers(t *testing.T) {
	p := New(t, echo(t), false)
	c, r := dial(t, p.Addr())
	roundTrip(t, c, r, "before")

	p.Silence()
	if !p.Silent() {
		t.Fatal("Silent() = false after Silence")
	}
	// A write succeeds (the proxy takes it, as a kernel buffers a write
	// on a dead path) but no answer comes and nothing is closed.
	if _, err := io.WriteString(c, "during\n"); err != nil {
		t.Fatalf("write to a silent proxy: %v", err)
	}
	wantSilence(t, c, r, 300*time.Millisecond)

	// A new connection is accepted and held: its connect succeeds, no
	// byte reaches the server.
	c2, r2 := dial(t, p.Addr())
	if _, err := io.WriteString(c2, "new\n"); err != nil {
		t.Fatalf("write on a held connection: %v", err)
	}
	wantSilence(t, c2, r2, 300*time.Millisecond)
	if p.Held() != 1 {
		t.Fatalf("Held() = %d, want 1", p.Held())
	}

	p.Resume()
	if p.Silent() {
		t.Fatal("Silent() = true after Resume")
	}
	// What was held arrives, in order, on both connections.
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if got, err := r.ReadString('\n'); err != nil || got != "during\n" {
		t.Fatalf("held line after Resume: %q, %v", got, err)
	}
	_ = c2.SetReadDeadline(time.Now().Add(5 * time.Second))
	if got, err := r2.ReadString('\n'); err != nil || got != "new\n" {
		t.Fatalf("held connection's line after Resume: %q, %v", got, err)
	}
	roundTrip(t, c, r, "after")
	if p.Accepted() != 2 {
		t.Fatalf("Accepted() = %d, want 2", p.Accepted())
	}
}

func TestCutEndsSilentConnections(t *testing.T) {
	p := New(t, echo(t), false)
	c, r := dial(t, p.Addr())
	roundTrip(t, c, r, "before")
	p.Silence()
	held, heldR := dial(t, p.Addr())

	p.Cut()
	for _, x := range []struct {
		c net.Conn
		r *bufio.Reader
	}{{c, r}, {held, heldR}} {
		_ = x.c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := x.r.ReadString('\n'); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("read after Cut of a silent proxy: %v, want the connection reset", err)
		}
	}
	// Cut wins over the silence until Restore; Resume alone does not
	// restore.
	p.Resume()
	wantRefused(t, p.Addr())
	p.Restore()
	c4, r4 := dial(t, p.Addr())
	roundTrip(t, c4, r4, "restored")
}

func TestCutAndRestore(t *testing.T) {
	p := New(t, echo(t), true)
	wantRefused(t, p.Addr())
	if p.Refused() != 1 {
		t.Fatalf("Refused() = %d, want 1", p.Refused())
	}
	p.Restore()
	c2, r2 := dial(t, p.Addr())
	roundTrip(t, c2, r2, "up")
}

func TestStartClose(t *testing.T) {
	p, err := Start(echo(t))
	if err != nil {
		t.Fatal(err)
	}
	c, r := dial(t, p.Addr())
	roundTrip(t, c, r, "x")
	p.Silence()
	p.Close()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := r.ReadString('\n'); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read after Close: %v, want the connection ended", err)
	}
}
