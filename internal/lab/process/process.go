// Package process starts the binaries of the stack for tests and lab tools:
// a binary's real wiring — its run function — inside a test (Start), or a
// built binary as a child process (StartBinary), on port :0, with the
// environment given as a map, logs captured, and a clean shutdown when the
// test ends; and, for a lab tool outside a test, a built binary with its
// log in a file (Launch). Every cmd/* exposes run so that its tests exercise
// the same wiring the binary runs.
package process

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// RunFunc is the signature every cmd/*/main.go's run function has.
type RunFunc func(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error

// Process is a running binary.
type Process struct {
	// URL is the base URL of the process's HTTP server, e.g.
	// http://127.0.0.1:41234.
	URL string

	cancel func() // asks the process to stop, as SIGTERM does
	kill   func() // binaries only: SIGKILL
	done   chan struct{}
	err    error
	logs   *logBuffer
}

// testEnv looks variables up in env, where a test that does not set
// SHUTDOWN_DRAIN_DELAY gets no readiness drain: its 5 s default would be
// added to every test's cleanup, and nothing routes traffic to a test's
// process. Tests of the drain set it.
func testEnv(env map[string]string) func(string) string {
	return func(k string) string {
		if v, ok := env[k]; ok || k != "SHUTDOWN_DRAIN_DELAY" {
			return v
		}
		return "0s"
	}
}

// Start runs run(ctx, args, env, …) in a goroutine and waits until the
// process logs its listen address and answers /health. The process is
// stopped (its context cancelled, as SIGTERM would) when the test ends.
func Start(t testing.TB, run RunFunc, args []string, env map[string]string) *Process {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	p := &Process{cancel: cancel, done: make(chan struct{}), logs: &logBuffer{}}
	pr, pw := io.Pipe()
	addrc := make(chan string, 1)
	go p.watchLogs(pr, addrc)
	go func() {
		defer close(p.done)
		defer pw.Close()
		p.err = run(ctx, args, testEnv(env), pw, pw)
	}()
	t.Cleanup(func() {
		if err := p.Stop(); err != nil {
			t.Errorf("%s stopped with error: %v\nlogs:\n%s", args[0], err, p.Logs())
		}
	})

	p.awaitListening(t, args[0], addrc)
	return p
}

func (p *Process) awaitListening(t testing.TB, name string, addrc <-chan string) {
	t.Helper()
	select {
	case addr := <-addrc:
		p.URL = "http://" + loopback(addr)
	case <-p.done:
		t.Fatalf("%s exited before listening: %v\nlogs:\n%s", name, p.err, p.Logs())
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not log a listen address within 30 s\nlogs:\n%s", name, p.Logs())
	}
	p.waitHealthy(t, name)
}

// loopback turns a wildcard listen address ("[::]:8080") into one a client
// can dial.
func loopback(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || (host != "" && host != "::" && host != "0.0.0.0") {
		return addr
	}
	return net.JoinHostPort("127.0.0.1", port)
}

// Stop cancels the process's context and waits for run to return.
func (p *Process) Stop() error {
	p.cancel()
	<-p.done
	return p.err
}

// Logs returns everything the process wrote so far.
func (p *Process) Logs() string { return p.logs.String() }

func (p *Process) waitHealthy(t testing.TB, name string) {
	t.Helper()
	if err := awaitHealth(context.Background(), p.URL, 10*time.Second, p.done, &p.err); err != nil {
		t.Fatalf("%s: %v\nlogs:\n%s", name, err, p.Logs())
	}
}

// watchLogs copies the process output into the buffer and reports the first
// `"msg":"listening"` line's address.
func (p *Process) watchLogs(r io.Reader, addrc chan<- string) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	reported := false
	for sc.Scan() {
		line := sc.Bytes()
		p.logs.Write(append(line, '\n'))
		if reported || !bytes.Contains(line, []byte(`"listening"`)) {
			continue
		}
		var entry struct {
			Msg  string `json:"msg"`
			Addr string `json:"addr"`
		}
		if json.Unmarshal(line, &entry) == nil && entry.Msg == "listening" {
			addrc <- entry.Addr
			reported = true
		}
	}
	_, _ = io.Copy(io.Discard, r)
}

type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
