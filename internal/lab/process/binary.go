package process

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// Build compiles the given main packages (e.g. "./cmd/checkout") of the
// module rooted at moduleDir into dir and returns dir. End-to-end tests use
// real binaries where a test must kill a process outright (SIGKILL), which
// an in-process run cannot simulate.
func Build(moduleDir, dir string, pkgs ...string) error {
	args := append([]string{"build", "-o", dir + string(filepath.Separator)}, pkgs...)
	cmd := exec.Command("go", args...)
	cmd.Dir = moduleDir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return &buildError{err: err, output: stderr.String()}
	}
	return nil
}

type buildError struct {
	err    error
	output string
}

func (e *buildError) Error() string { return "go build: " + e.err.Error() + "\n" + e.output }

// StartBinary runs a built binary with exactly env as its environment (plus
// PATH, and no readiness drain unless env sets one), waits for it to log its listen address and answer /health, and
// stops it with SIGTERM when the test ends.
func StartBinary(t testing.TB, path string, args []string, env map[string]string) *Process {
	t.Helper()
	cmd := exec.Command(path, args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	if _, ok := env["SHUTDOWN_DRAIN_DELAY"]; !ok {
		cmd.Env = append(cmd.Env, "SHUTDOWN_DRAIN_DELAY=0s") // as in Start: see testEnv
	}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", path, err)
	}
	p := &Process{done: make(chan struct{}), logs: &logBuffer{}}
	p.cancel = func() { _ = cmd.Process.Signal(syscall.SIGTERM) }
	p.kill = func() { _ = cmd.Process.Kill() }
	addrc := make(chan string, 1)
	go p.watchLogs(pr, addrc)
	go func() {
		defer close(p.done)
		defer pw.Close()
		p.err = cmd.Wait()
	}()
	t.Cleanup(func() {
		p.cancel()
		select {
		case <-p.done:
		case <-time.After(15 * time.Second):
			p.kill()
			<-p.done
		}
	})
	p.awaitListening(t, filepath.Base(path), addrc)
	return p
}

// Kill ends a process started with StartBinary at once, as SIGKILL (an OOM
// kill, a node failure) would: no shutdown code runs.
func (p *Process) Kill() {
	p.kill()
	<-p.done
}
