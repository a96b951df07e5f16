package httpserver

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resilientcheckout/checkout/internal/health"
)

// TestDrainFailsReadinessButKeepsServing stops the server the way SIGTERM
// does and checks the drain: for DrainDelay, /ready answers 503 while
// liveness and business requests are still served (on connections that are
// then closed, so clients reconnect through the load balancer); after it,
// the server stops accepting connections and Serve returns.
func TestDrainFailsReadinessButKeepsServing(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const delay = 5 * time.Second
		s := startServer(t, Config{DrainDelay: delay, ReadinessPath: "/ready"})
		if got := s.get(t, "/ready"); got.status != http.StatusOK {
			t.Fatalf("GET /ready before shutdown = %d, want 200", got.status)
		}

		stopped := time.Now()
		s.stop()
		synctest.Wait()
		if got, want := s.get(t, "/ready"), (response{status: 503, body: `{"status":"shutting_down"}` + "\n", closed: true}); got != want {
			t.Errorf("GET /ready while draining = %+v, want %+v", got, want)
		}
		for _, path := range []string{"/health", "/orders"} {
			if got := s.get(t, path); got.status != http.StatusOK || !got.closed {
				t.Errorf("GET %s while draining = %+v, want 200 with Connection: close", path, got)
			}
		}

		time.Sleep(delay - time.Millisecond)
		synctest.Wait()
		select {
		case err := <-s.done:
			t.Fatalf("Serve returned %v %v after the stop, before the %v drain was over", err, time.Since(stopped), delay)
		default:
		}
		if got := s.get(t, "/orders"); got.status != http.StatusOK {
			t.Errorf("GET /orders at the end of the drain = %d, want 200", got.status)
		}

		if err := <-s.done; err != nil {
			t.Fatalf("Serve = %v, want nil after a clean shutdown", err)
		}
		if got := time.Since(stopped); got != delay {
			t.Errorf("Serve returned %v after the stop, want %v (the drain delay)", got, delay)
		}
		if _, err := s.client.Get("http://checkout/health"); err == nil {
			t.Error("GET /health after shutdown succeeded, want the connection refused")
		}
	})
}

func TestNoDrainDelayShutsDownAtOnce(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := startServer(t, Config{ReadinessPath: "/ready"})
		if got := s.get(t, "/ready"); got.status != http.StatusOK {
			t.Fatalf("GET /ready = %d, want 200", got.status)
		}
		stopped := time.Now()
		s.stop()
		if err := <-s.done; err != nil {
			t.Fatalf("Serve = %v, want nil", err)
		}
		// Fake time: only Shutdown's own poll for idle connections (from
		// 1 ms, net/http's pollIntervalBase) may pass, never a drain delay.
		if got := time.Since(stopped); got > 10*time.Millisecond {
			t.Errorf("Serve returned %v after the stop, want at once (no drain delay)", got)
		}
	})
}

// testServer is serve on an in-memory listener, so the test runs inside a
// synctest bubble with fake time.
type testServer struct {
	client *http.Client
	stop   context.CancelFunc
	done   chan error
}

func startServer(t *testing.T, cfg Config) *testServer {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle("GET /health", health.Liveness())
	mux.Handle("GET /ready", health.Readiness(time.Second, nil)) // no checks: ready
	mux.Handle("GET /orders", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "[]")
	}))

	ln := newPipeListener()
	ctx, cancel := context.WithCancel(context.Background())
	s := &testServer{
		client: &http.Client{Transport: &http.Transport{DialContext: ln.dial}},
		stop:   cancel,
		done:   make(chan error, 1),
	}
	go func() { s.done <- serve(ctx, ln, cfg, mux, slog.New(slog.DiscardHandler)) }()
	t.Cleanup(func() {
		cancel()
		s.client.CloseIdleConnections()
	})
	return s
}

type response struct {
	status int
	body   string
	closed bool // the server sent Connection: close
}

func (s *testServer) get(t *testing.T, path string) response {
	t.Helper()
	resp, err := s.client.Get("http://checkout" + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: read body: %v", path, err)
	}
	return response{status: resp.StatusCode, body: string(body), closed: resp.Close}
}

// pipeListener hands out one end of a net.Pipe per dial.
type pipeListener struct {
	conns     chan net.Conn
	closed    chan struct{}
	closeOnce sync.Once
}

func newPipeListener() *pipeListener {
	return &pipeListener{conns: make(chan net.Conn), closed: make(chan struct{})}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error {
	l.closeOnce.Do(func() { close(l.closed) })
	return nil
}

func (l *pipeListener) Addr() net.Addr { return pipeAddr{} }

func (l *pipeListener) dial(ctx context.Context, _, _ string) (net.Conn, error) {
	server, client := net.Pipe()
	select {
	case l.conns <- server:
		return client, nil
	case <-l.closed:
		return nil, errors.New("connection refused")
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "pipe" }
