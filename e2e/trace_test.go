package e2e

import (
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/resilientcheckout/checkout/internal/database/dbtest"
	"github.com/resilientcheckout/checkout/internal/lab/process"
)

// TestDeferredOrderTraceAcrossProcesses runs checkout, worker and
// paymentsim as processes exporting OTLP/HTTP — configured only by the
// OTEL_* variables, as in the observability profile — to a collector in
// the test, places one order while the provider is down, heals it, and
// checks that the worker's charge arrives linked to the customer's
// POST /orders trace. With -v it prints the span trees (the README's
// Tracing section shows one such run).
func TestDeferredOrderTraceAcrossProcesses(t *testing.T) {
	t.Parallel()
	col := startCollector(t)
	sim := process.StartBinary(t, binary("paymentsim"), nil, map[string]string{"HTTP_ADDR": "127.0.0.1:0"})
	env := map[string]string{
		"HTTP_ADDR": "127.0.0.1:0", "DATABASE_URL": dbtest.URL(t), "STRIPE_API_BASE": sim.URL,
		"OTEL_EXPORTER_OTLP_ENDPOINT": col.url,
		"OTEL_BSP_SCHEDULE_DELAY":     "100", // ms: export soon after the spans end
	}
	process.StartBinary(t, binary("worker"), nil, env)
	checkout := process.StartBinary(t, binary("checkout"), nil, env)

	fault(t, sim.URL, http.MethodPost, `{"down":true}`)
	id, status := placeOrder(checkout.URL, "trace-e2e-1")
	if status != http.StatusAccepted || id == "" {
		t.Fatalf("POST /orders with the provider down: %d, want 202", status)
	}
	// The charge job is due after at least 500 ms (order.Service's probe
	// delay): healing now lets the worker's first attempt succeed.
	fault(t, sim.URL, http.MethodDelete, "")

	var request, work *span
	deadline := time.Now().Add(30 * time.Second)
	for {
		spans := col.spans()
		request, work = nil, nil
		for _, s := range spans {
			if s.service == "checkout" && s.name == "POST /orders" && s.event("payment deferred")["order.id"] == id {
				request = s
			}
		}
		if request != nil {
			for _, s := range spans {
				if s.service == "worker" && s.name == "river.work/charge_order" && s.linksTo(request.traceID) {
					work = s
				}
			}
		}
		if work != nil && len(col.trace(work.traceID)) > 1 && hasChild(col.trace(work.traceID), work, "POST /v1/payment_intents") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no worker span linked to the POST /orders trace of order %s within 30 s; spans:\n%s", id, tree(spans))
		}
		time.Sleep(100 * time.Millisecond)
	}
	api := col.trace(request.traceID)
	for _, name := range []string{"POST /v1/payment_intents", "river.insert_many"} {
		if !hasChild(api, request, name) {
			t.Errorf("checkout's trace has no %q under POST /orders:\n%s", name, tree(api))
		}
	}
	t.Logf("checkout's trace:\n%s\nworker's trace (its charge started %v after POST /orders):\n%s",
		tree(api), work.start.Sub(request.start).Round(time.Millisecond), tree(col.trace(work.traceID)))
}

func fault(t *testing.T, simURL, method, body string) {
	t.Helper()
	req, err := http.NewRequest(method, simURL+"/admin/faults", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode >= 300 {
		t.Fatalf("%s /admin/faults: %d", method, resp.StatusCode)
	}
}

// collector is a minimal OTLP/HTTP trace receiver (protobuf encoding, as
// the exporter sends by default), standing in for Jaeger's OTLP port.
type collector struct {
	url string
	mu  sync.Mutex
	all []*span
}

type span struct {
	service, name       string
	traceID, id, parent string
	start, end          time.Time
	links               []string // trace/span
	events              []*tracepb.Span_Event
	status              string
	attrs               map[string]string
}

func startCollector(t *testing.T) *collector {
	t.Helper()
	c := &collector{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" {
			http.Error(w, "want protobuf on /v1/traces", http.StatusUnsupportedMediaType)
			return
		}
		body, err := io.ReadAll(r.Body)
		var req coltracepb.ExportTraceServiceRequest
		if err == nil {
			err = proto.Unmarshal(body, &req)
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		c.add(&req)
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	t.Cleanup(srv.Close)
	c.url = srv.URL
	return c
}

func (c *collector) add(req *coltracepb.ExportTraceServiceRequest) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		service := ""
		for _, a := range rs.GetResource().GetAttributes() {
			if a.GetKey() == "service.name" {
				service = a.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				sp := &span{
					service: service, name: s.GetName(),
					traceID: hex.EncodeToString(s.GetTraceId()), id: hex.EncodeToString(s.GetSpanId()),
					parent: hex.EncodeToString(s.GetParentSpanId()),
					start:  time.Unix(0, int64(s.GetStartTimeUnixNano())), end: time.Unix(0, int64(s.GetEndTimeUnixNano())),
					events: s.GetEvents(), status: s.GetStatus().GetCode().String(), attrs: map[string]string{},
				}
				for _, l := range s.GetLinks() {
					sp.links = append(sp.links, hex.EncodeToString(l.GetTraceId())+"/"+hex.EncodeToString(l.GetSpanId()))
				}
				for _, a := range s.GetAttributes() {
					sp.attrs[a.GetKey()] = anyValue(a.GetValue())
				}
				c.all = append(c.all, sp)
			}
		}
	}
}

func (c *collector) spans() []*span {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.all)
}

func (c *collector) trace(id string) []*span {
	var out []*span
	for _, s := range c.spans() {
		if s.traceID == id {
			out = append(out, s)
		}
	}
	return out
}

func (s *span) event(name string) map[string]string {
	for _, e := range s.events {
		if e.GetName() == name {
			m := map[string]string{}
			for _, a := range e.GetAttributes() {
				m[a.GetKey()] = anyValue(a.GetValue())
			}
			return m
		}
	}
	return nil
}

func (s *span) linksTo(traceID string) bool {
	for _, l := range s.links {
		if strings.HasPrefix(l, traceID+"/") {
			return true
		}
	}
	return false
}

func hasChild(spans []*span, parent *span, name string) bool {
	for _, s := range spans {
		if s.parent == parent.id && s.name == name {
			return true
		}
	}
	return false
}

func anyValue(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return fmt.Sprint(x.IntValue)
	case *commonpb.AnyValue_BoolValue:
		return fmt.Sprint(x.BoolValue)
	case *commonpb.AnyValue_DoubleValue:
		return fmt.Sprint(x.DoubleValue)
	}
	return v.String()
}

// tree renders spans as indented trees, one per trace: name, service,
// start offset and duration, status, links and events.
func tree(spans []*span) string {
	byParent := map[string][]*span{}
	ids := map[string]bool{}
	for _, s := range spans {
		ids[s.id] = true
	}
	var roots []*span
	for _, s := range spans {
		if s.parent == "" || !ids[s.parent] {
			roots = append(roots, s)
		} else {
			byParent[s.parent] = append(byParent[s.parent], s)
		}
	}
	byStart := func(a, b *span) int { return a.start.Compare(b.start) }
	slices.SortFunc(roots, byStart)
	var b strings.Builder
	var walk func(s *span, depth int, t0 time.Time)
	walk = func(s *span, depth int, t0 time.Time) {
		fmt.Fprintf(&b, "%s%-*s %-8s +%6.1fms %7.1fms", strings.Repeat("  ", depth), 34-2*depth, s.name, s.service,
			float64(s.start.Sub(t0).Microseconds())/1000, float64(s.end.Sub(s.start).Microseconds())/1000)
		if code := s.attrs["http.response.status_code"]; code != "" {
			fmt.Fprintf(&b, "  %s", code)
		}
		if s.status == "STATUS_CODE_ERROR" {
			b.WriteString("  error")
		}
		fmt.Fprintf(&b, "  span %s", s.id)
		for _, l := range s.links {
			fmt.Fprintf(&b, "  link→ %s", l)
		}
		b.WriteByte('\n')
		for _, e := range s.events {
			fmt.Fprintf(&b, "%s  · event %q", strings.Repeat("  ", depth), e.GetName())
			for _, a := range e.GetAttributes() {
				if v := anyValue(a.GetValue()); len(v) <= 40 {
					fmt.Fprintf(&b, " %s=%s", a.GetKey(), v)
				}
			}
			b.WriteByte('\n')
		}
		children := byParent[s.id]
		slices.SortFunc(children, byStart)
		for _, c := range children {
			walk(c, depth+1, t0)
		}
	}
	for _, r := range roots {
		fmt.Fprintf(&b, "trace %s\n", r.traceID)
		walk(r, 1, r.start)
	}
	return b.String()
}
