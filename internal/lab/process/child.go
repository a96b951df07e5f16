package process

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// Child is one binary run as a child process by a lab tool (not a test: see
// StartBinary), started with exactly the environment it is given (plus PATH),
// its output in a log file.
type Child struct {
	Name    string
	URL     string // http://127.0.0.1:<port>
	logPath string
	cmd     *exec.Cmd
	done    chan struct{}
	err     error
}

// Launch runs path args… listening on a free loopback port (passed as
// HTTP_ADDR) and waits until it answers GET /health with 200.
func Launch(ctx context.Context, name, path string, args []string, env []string, logPath string) (*Child, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close() // the child holds its own descriptor
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	cmd := exec.Command(path, args...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HTTP_ADDR=" + addr}, env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Child{Name: name, URL: "http://" + addr, logPath: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		p.err = cmd.Wait()
	}()
	if err := p.awaitHealthy(ctx, 30*time.Second); err != nil {
		_ = p.Stop(5 * time.Second)
		return nil, err
	}
	return p, nil
}

// PID is the child's process id.
func (p *Child) PID() int { return p.cmd.Process.Pid }

func (p *Child) awaitHealthy(ctx context.Context, within time.Duration) error {
	if err := awaitHealth(ctx, p.URL, within, p.done, &p.err); err != nil {
		return fmt.Errorf("%s: %w%s", p.Name, err, p.logTail())
	}
	return nil
}

// awaitHealth polls url's GET /health every 20 ms until it answers 200, the
// process exits (done closes, *exitErr then set), ctx ends or within has
// passed. Both launchers use it: it polls another process, not our state.
func awaitHealth(ctx context.Context, url string, within time.Duration, done <-chan struct{}, exitErr *error) error {
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(within)
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"/health", nil)
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("status %d", resp.StatusCode)
		}
		select {
		case <-done:
			return fmt.Errorf("exited before it was healthy (%w)", *exitErr)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("/health not OK within %s (last: %w)", within, err)
		}
	}
}

// Stop sends SIGTERM, as an orchestrator would, and waits for a clean exit;
// after grace it kills the process.
func (p *Child) Stop(grace time.Duration) error {
	select {
	case <-p.done:
		return p.exitError()
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return p.exitError()
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("%s did not stop within %s of SIGTERM; killed%s", p.Name, grace, p.logTail())
	}
}

func (p *Child) exitError() error {
	if p.err != nil {
		return fmt.Errorf("%s exited: %w%s", p.Name, p.err, p.logTail())
	}
	return nil
}

// Exited reports an error if the process is no longer running.
func (p *Child) Exited() error {
	select {
	case <-p.done:
		return fmt.Errorf("%s exited during the run (%w)%s", p.Name, p.err, p.logTail())
	default:
		return nil
	}
}

// logTail is the end of the process's log, for error messages.
func (p *Child) logTail() string {
	b, err := os.ReadFile(p.logPath)
	if err != nil || len(b) == 0 {
		return ""
	}
	const max = 2000
	if len(b) > max {
		b = b[len(b)-max:]
	}
	return "\n--- end of " + p.logPath + " ---\n" + strings.TrimSpace(string(b))
}

// StopAll stops children in reverse start order and joins their errors.
func StopAll(ps []*Child) error {
	var errs []error
	for i := len(ps) - 1; i >= 0; i-- {
		errs = append(errs, ps[i].Stop(20*time.Second))
	}
	return errors.Join(errs...)
}

// freePort asks the kernel for a free loopback port. The port is released
// before the process binds it; on a loopback interface nothing else takes it
// in between in practice, and a process that fails to bind exits, which
// Launch reports.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
