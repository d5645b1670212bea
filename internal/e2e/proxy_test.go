package e2e_test

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// proxy is a TCP proxy on 127.0.0.1 in front of Postgres that a test can
// cut and restore, to stage a database outage without stopping the server
// that other tests share. Cut closes every proxied connection (with a
// reset, as when the server dies) and makes the proxy refuse new ones the
// same way until Restore.
type proxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	down  bool
	conns map[net.Conn]struct{}

	wg       sync.WaitGroup
	accepted atomic.Int64 // connections proxied
	refused  atomic.Int64 // connections reset while down
}

// newProxy starts a proxy to target ("host:port"), stopped when t ends.
func newProxy(t testing.TB, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("proxy: %v", err)
	}
	p := &proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

// Addr returns the address clients connect to.
func (p *proxy) Addr() string { return p.ln.Addr().String() }

// Cut drops every connection and refuses new ones until Restore.
func (p *proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = true
	for c := range p.conns {
		reset(c)
		delete(p.conns, c)
	}
}

// Restore lets connections through again.
func (p *proxy) Restore() {
	p.mu.Lock()
	p.down = false
	p.mu.Unlock()
}

func (p *proxy) close() {
	_ = p.ln.Close()
	p.Cut()
	p.wg.Wait()
}

// reset closes c with an RST rather than a FIN, as a dead server's host
// does, so the peer's next read or write fails at once.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

func (p *proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

// track adds c to the live connections, or reports false when the proxy
// is down.
func (p *proxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.down {
		return false
	}
	for _, c := range cs {
		p.conns[c] = struct{}{}
	}
	return true
}

func (p *proxy) untrack(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		delete(p.conns, c)
	}
}

func (p *proxy) serve(client net.Conn) {
	defer p.wg.Done()
	if !p.track() {
		p.refused.Add(1)
		reset(client)
		return
	}
	server, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		reset(client)
		return
	}
	if !p.track(client, server) {
		p.refused.Add(1)
		reset(client)
		reset(server)
		return
	}
	p.accepted.Add(1)
	var done sync.WaitGroup
	pipe := func(dst, src net.Conn) {
		defer done.Done()
		_, _ = io.Copy(dst, src)
		// One direction ended: end both, so neither side waits forever.
		_ = dst.Close()
		_ = src.Close()
	}
	done.Add(2)
	go pipe(server, client)
	go pipe(client, server)
	done.Wait()
	p.untrack(client, server)
}
