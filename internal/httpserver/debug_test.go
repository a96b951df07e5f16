package httpserver

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestDebugListenerServesProfilesOnItsOwnPort: pprof answers on DebugAddr
// and not on the public listener; without DebugAddr nothing serves it.
func TestDebugListenerServesProfilesOnItsOwnPort(t *testing.T) {
	t.Parallel()
	debugLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	debugAddr := debugLn.Addr().String()
	debugLn.Close()

	ctx, cancel := context.WithCancel(context.Background())
	public, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	publicAddr := public.Addr().String()
	public.Close()
	done := make(chan error, 1)
	go func() {
		done <- Serve(ctx, Config{Addr: publicAddr, DebugAddr: debugAddr}, http.NotFoundHandler(), slog.New(slog.DiscardHandler))
	}()
	t.Cleanup(func() { cancel(); <-done })

	get := func(addr string) (int, string) {
		deadline := time.Now().Add(5 * time.Second)
		for {
			resp, err := http.Get("http://" + addr + "/debug/pprof/")
			if err == nil {
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				return resp.StatusCode, string(body)
			}
			if time.Now().After(deadline) {
				t.Fatalf("GET %s: %v", addr, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	if code, body := get(debugAddr); code != http.StatusOK || !strings.Contains(body, "goroutine") {
		t.Errorf("debug listener /debug/pprof/ = %d, want 200 with the profile index", code)
	}
	if code, _ := get(publicAddr); code != http.StatusNotFound {
		t.Errorf("public listener /debug/pprof/ = %d, want 404: profiles are never on the public port", code)
	}
}
