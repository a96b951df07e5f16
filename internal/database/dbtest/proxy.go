package dbtest

import (
	"io"
	"net"
	"net/url"
	"sync"
	"testing"
)

// Proxy is a TCP proxy between a process under test and its database, so a
// test can take "the database" away and give it back without stopping the
// PostgreSQL server that other tests share.
//
// Cut behaves like a database host that vanished from the network: open
// connections break and new ones are accepted but never answered, so
// clients must rely on their own timeouts, which is the harder case for
// them than a refused connection.
type Proxy struct {
	ln     net.Listener
	target string // host:port of the real server
	url    string

	mu    sync.Mutex
	cut   bool
	conns map[net.Conn]struct{} // every open client and server side
}

// NewProxy starts a proxy in front of the server of dbURL (as returned by
// URL) and stops it when the test ends.
func NewProxy(t testing.TB, dbURL string) *Proxy {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatalf("dbtest: proxy: parse database URL: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("dbtest: proxy: listen: %v", err)
	}
	p := &Proxy{ln: ln, target: u.Host, conns: map[net.Conn]struct{}{}}
	proxied := *u
	proxied.Host = ln.Addr().String()
	p.url = proxied.String()
	go p.accept()
	t.Cleanup(p.close)
	return p
}

// URL is the database URL pointing through the proxy.
func (p *Proxy) URL() string { return p.url }

// Cut closes every open connection and blackholes new ones until Restore.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	p.closeAllLocked()
}

// Restore forwards new connections to the database again. Connections
// accepted while cut stay dead (they are closed), as they would be after a
// real outage.
func (p *Proxy) Restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = false
	p.closeAllLocked()
}

func (p *Proxy) close() {
	p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closeAllLocked()
}

func (p *Proxy) closeAllLocked() {
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
}

// track registers c so Cut, Restore and the test's end close it, and
// reports whether the proxy forwards traffic right now. Checking and
// registering under one lock means no connection slips past a Cut.
func (p *Proxy) track(c net.Conn) (forwarding bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.conns[c] = struct{}{}
	return !p.cut
}

func (p *Proxy) accept() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return // listener closed
		}
		if p.track(client) {
			go p.forward(client)
		}
		// Otherwise blackholed: held open, never answered, closed by Restore.
	}
}

func (p *Proxy) forward(client net.Conn) {
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		client.Close()
		return
	}
	if !p.track(server) {
		server.Close() // cut while dialling
		client.Close()
		return
	}
	go func() {
		_, _ = io.Copy(server, client)
		server.Close()
	}()
	_, _ = io.Copy(client, server)
	client.Close()
}
