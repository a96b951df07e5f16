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
// them than a refused connection. Refuse behaves like a host whose
// PostgreSQL is not listening (yet): connections are refused at once.
type Proxy struct {
	t      testing.TB
	addr   string // the proxy's own host:port, kept across Refuse
	target string // host:port of the real server
	url    string

	mu    sync.Mutex
	ln    net.Listener // nil while refusing
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
	p := &Proxy{t: t, ln: ln, addr: ln.Addr().String(), target: u.Host, conns: map[net.Conn]struct{}{}}
	proxied := *u
	proxied.Host = p.addr
	p.url = proxied.String()
	go p.accept(ln)
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

// Refuse stops listening, so new connections are refused, as by a server
// that has not started yet (or a fresh PostgreSQL container whose first
// initialisation listens on its Unix socket only), and closes the open
// ones. Restore listens on the same port again.
func (p *Proxy) Refuse() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	p.closeAllLocked()
}

// Restore forwards new connections to the database again, after Cut or
// Refuse. Connections accepted while cut stay dead (they are closed), as
// they would be after a real outage. Call it from the test's goroutine: it
// fails the test if the port cannot be taken again.
func (p *Proxy) Restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = false
	p.closeAllLocked()
	if p.ln == nil {
		ln, err := net.Listen("tcp", p.addr)
		if err != nil {
			p.t.Fatalf("dbtest: proxy: listen on %s again: %v", p.addr, err)
		}
		p.ln = ln
		go p.accept(ln)
	}
}

func (p *Proxy) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
	}
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

func (p *Proxy) accept(ln net.Listener) {
	for {
		client, err := ln.Accept()
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
