// Package cutproxy is a TCP proxy on 127.0.0.1 that a test cuts and
// restores, to stage an outage of the server behind it (Postgres, a Kafka
// seed broker) without stopping a server that other tests share.
package cutproxy

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Proxy forwards connections to its target until Cut, which resets every
// proxied connection (as when the server dies) and makes it refuse new
// ones the same way until Restore. Safe for concurrent use.
type Proxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	down  bool
	conns map[net.Conn]struct{}

	wg       sync.WaitGroup
	accepted atomic.Int64
	refused  atomic.Int64
}

// New starts a proxy to target ("host:port"), cut from the start when down
// is true; it stops when t ends.
func New(t testing.TB, target string, down bool) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("cutproxy: %v", err)
	}
	p := &Proxy{ln: ln, target: target, down: down, conns: map[net.Conn]struct{}{}}
	p.wg.Go(p.accept)
	t.Cleanup(func() {
		_ = ln.Close()
		p.Cut()
		p.wg.Wait()
	})
	return p
}

// Addr returns the address clients connect to.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Cut drops every connection and refuses new ones until Restore.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = true
	for c := range p.conns {
		reset(c)
		delete(p.conns, c)
	}
}

// Restore lets connections through again.
func (p *Proxy) Restore() {
	p.mu.Lock()
	p.down = false
	p.mu.Unlock()
}

// Accepted returns how many connections were proxied.
func (p *Proxy) Accepted() int64 { return p.accepted.Load() }

// Refused returns how many connections were reset because the proxy was
// cut.
func (p *Proxy) Refused() int64 { return p.refused.Load() }

// reset closes c with an RST rather than a FIN, as a dead server's host
// does, so the peer's next read or write fails at once.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

func (p *Proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		p.wg.Go(func() { p.serve(c) })
	}
}

// track adds cs to the live connections, or reports false when the proxy
// is cut.
func (p *Proxy) track(cs ...net.Conn) bool {
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

func (p *Proxy) serve(client net.Conn) {
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
		_, _ = io.Copy(dst, src)
		// One direction ended: end both, so neither side waits for ever.
		_ = dst.Close()
		_ = src.Close()
	}
	done.Go(func() { pipe(server, client) })
	done.Go(func() { pipe(client, server) })
	done.Wait()
	p.mu.Lock()
	delete(p.conns, client)
	delete(p.conns, server)
	p.mu.Unlock()
}
