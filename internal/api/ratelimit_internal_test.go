package api

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"runtime"
	"strconv"
	"testing"
	"time"
)

func limited(t *testing.T, requests int) http.Handler {
	t.Helper()
	cfg := RateLimit{Requests: requests, Window: time.Minute, TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	return clientAddr(cfg.TrustedProxies)(rateLimit(cfg)(ok))
}

func from(h http.Handler, client string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodGet, "/orders/x", nil)
	req.RemoteAddr = "127.0.0.1:5000" // a trusted proxy
	req.Header.Set("X-Forwarded-For", client)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// TestRateLimitRefusesOnlyTheClientOverIt: a client in a loop gets 429s
// with Retry-After and the IETF fields; another, at a normal rate, none.
func TestRateLimitRefusesOnlyTheClientOverIt(t *testing.T) {
	t.Parallel()
	h := limited(t, 30)
	var refusedGreedy, refusedNormal int
	for i := range 300 {
		rec := from(h, "192.0.2.1")
		if rec.Code == http.StatusTooManyRequests {
			refusedGreedy++
			if rec.Header().Get("Retry-After") == "" || rec.Header().Get("Content-Type") != problemContentType {
				t.Fatalf("429 headers %v, want Retry-After and a problem", rec.Header())
			}
		}
		if i%20 == 0 { // 15 requests against a quota of 30
			rec := from(h, "198.51.100.7")
			if rec.Code != http.StatusNoContent {
				refusedNormal++
			}
			if got, want := rec.Header().Get("RateLimit-Policy"), `"per-client";q=30;w=60`; got != want {
				t.Errorf("RateLimit-Policy = %q, want %q", got, want)
			}
			if rec.Header().Get("RateLimit") == "" || rec.Header().Get(remainingHeader) != "" {
				t.Errorf("headers %v: want RateLimit and no X-Ratelimit-*", rec.Header())
			}
		}
	}
	if refusedGreedy != 270 {
		t.Errorf("greedy client refused %d of 300, want 270 (quota 30)", refusedGreedy)
	}
	if refusedNormal != 0 {
		t.Errorf("normal client refused %d times, want 0", refusedNormal)
	}
	// X-Forwarded-For from an untrusted peer is ignored: the peer is the key.
	req := httptest.NewRequest(http.MethodGet, "/orders/x", nil)
	req.RemoteAddr = "203.0.113.9:5000"
	req.Header.Set("X-Forwarded-For", "192.0.2.1")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusNoContent {
		t.Errorf("untrusted peer claiming the greedy client's address = %d, want 204", rec.Code)
	}
}

// TestRateLimitMemoryIsBounded sends one request from each of 100,000
// distinct clients and reports the heap's growth: the counts live in a
// fixed-size sketch, so it must stay near zero.
func TestRateLimitMemoryIsBounded(t *testing.T) {
	h := limited(t, 100)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range 100_000 {
		from(h, "10."+strconv.Itoa(i>>16&255)+"."+strconv.Itoa(i>>8&255)+"."+strconv.Itoa(i&255))
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	growth := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("heap growth after 100,000 distinct clients: %d bytes (limiter's fixed sketch: %d bytes, allocated before)", growth, 2*sketchDepth*sketchWidth*4)
	if growth > 1<<20 {
		t.Errorf("heap grew %d bytes for 100,000 clients, want under 1 MiB", growth)
	}
	runtime.KeepAlive(h)
}
