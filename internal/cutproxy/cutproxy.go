// Package cutproxy is a TCP proxy on 127.0.0.1 that a test cuts, silences
// and restores, to stage an outage of the server behind it (Postgres, a
// Kafka broker) without stopping a server that other tests share.
//
// A cut proxy behaves like a dead server's host: every connection is
// reset and new ones are refused. A silent proxy behaves like a network
// that drops every packet (a firewall, a partition, a dead switch): no
// byte passes in either direction and no side is closed, new connections
// are accepted (the peer's connect succeeds) but never reach the server,
// so a client notices only through its own timeouts. Resume lets
// everything held through again, as TCP delivers what it retransmitted.
package cutproxy

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Proxy forwards connections to its target until Cut, which resets every
// proxied connection (as when the server dies) and makes it refuse new
// ones the same way until Restore, or Silence, which stops every byte
// until Resume. Safe for concurrent use.
type Proxy struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	down   bool
	quiet  chan struct{} // closed while not silent; replaced by Silence
	conns  map[*pair]struct{}
	closed bool

	wg       sync.WaitGroup
	accepted atomic.Int64
	refused  atomic.Int64
	held     atomic.Int64
}

// pair is one proxied connection: the client's side and, once dialled,
// the server's.
type pair struct {
	client, server net.Conn
	dead           chan struct{} // closed by kill
	once           sync.Once
}

func (c *pair) kill() {
	c.once.Do(func() {
		reset(c.client)
		if c.server != nil {
			reset(c.server)
		}
		close(c.dead)
	})
}

// New starts a proxy to target ("host:port"), cut from the start when down
// is true; it stops when t ends.
func New(t testing.TB, target string, down bool) *Proxy {
	t.Helper()
	p, err := Start(target)
	if err != nil {
		t.Fatalf("cutproxy: %v", err)
	}
	if down {
		p.Cut()
	}
	t.Cleanup(p.Close)
	return p
}

// Start starts a proxy to target ("host:port") outside a test (the soak
// runs one per worker); Close stops it.
func Start(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	open := make(chan struct{})
	close(open)
	p := &Proxy{ln: ln, target: target, quiet: open, conns: map[*pair]struct{}{}}
	p.wg.Go(p.accept)
	return p, nil
}

// Close stops the proxy: it stops accepting, resets every connection
// (silent or not) and waits for its goroutines.
func (p *Proxy) Close() {
	_ = p.ln.Close()
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.Cut()
	p.wg.Wait()
}

// Addr returns the address clients connect to.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Cut drops every connection, silent ones too, and refuses new ones until
// Restore.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = true
	for c := range p.conns {
		c.kill()
		delete(p.conns, c)
	}
}

// Restore lets connections through again after Cut.
func (p *Proxy) Restore() {
	p.mu.Lock()
	p.down = false
	p.mu.Unlock()
}

// Silence stops forwarding in both directions without closing anything:
// bytes read from either side are held, the connections stay open, and
// new connections are accepted and held without being dialled to the
// target, until Resume (or Cut).
func (p *Proxy) Silence() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.quiet:
		p.quiet = make(chan struct{})
	default: // already silent
	}
}

// Resume ends a Silence: what was held is delivered, and the connections
// accepted meanwhile are dialled to the target.
func (p *Proxy) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.quiet:
	default:
		close(p.quiet)
	}
}

// Silent reports whether the proxy is silenced.
func (p *Proxy) Silent() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.quiet:
		return false
	default:
		return true
	}
}

// Accepted returns how many connections were proxied.
func (p *Proxy) Accepted() int64 { return p.accepted.Load() }

// Refused returns how many connections were reset because the proxy was
// cut.
func (p *Proxy) Refused() int64 { return p.refused.Load() }

// Held returns how many connections were accepted while the proxy was
// silent and held unanswered.
func (p *Proxy) Held() int64 { return p.held.Load() }

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

// track adds c to the live connections, or reports false when the proxy
// is cut.
func (p *Proxy) track(c *pair) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.down || p.closed {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

// pass waits until the proxy is not silent; it reports false when c was
// killed meanwhile.
func (p *Proxy) pass(c *pair) bool {
	p.mu.Lock()
	quiet := p.quiet
	p.mu.Unlock()
	select {
	case <-quiet:
	case <-c.dead:
		return false
	}
	select {
	case <-c.dead:
		return false
	default:
		return true
	}
}

func (p *Proxy) serve(client net.Conn) {
	c := &pair{client: client, dead: make(chan struct{})}
	if !p.track(c) {
		p.refused.Add(1)
		reset(client)
		return
	}
	defer func() {
		c.kill()
		p.mu.Lock()
		delete(p.conns, c)
		p.mu.Unlock()
	}()
	if p.Silent() {
		p.held.Add(1)
	}
	if !p.pass(c) {
		return
	}
	server, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		return
	}
	p.mu.Lock()
	select {
	case <-c.dead:
		p.mu.Unlock()
		reset(server)
		return
	default:
		c.server = server
	}
	p.mu.Unlock()
	p.accepted.Add(1)
	var done sync.WaitGroup
	done.Go(func() { p.pipe(c, server, client) })
	done.Go(func() { p.pipe(c, client, server) })
	done.Wait()
}

// pipe copies src to dst, holding each chunk while the proxy is silent,
// until either side ends; then it ends both, so neither waits for ever.
func (p *Proxy) pipe(c *pair, dst, src net.Conn) {
	defer func() {
		_ = dst.Close()
		_ = src.Close()
	}()
	buf := make([]byte, 32<<10)
	for {
		if !p.pass(c) {
			return
		}
		n, err := src.Read(buf)
		if n > 0 {
			// Read while not silent, perhaps before Silence: hold it
			// like the rest.
			if !p.pass(c) {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return // EOF or a reset: the side is gone
		}
	}
}
