package dbtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// EnvPgBouncer names the variable that points the tests at a pgbouncer
// binary when it is neither on PATH nor at Debian's /usr/sbin/pgbouncer, or,
// set to "docker", makes them run PgBouncer in a container even where a
// binary exists.
const EnvPgBouncer = "PGBOUNCER"

// PgBouncerConfig is what a test may change in the bouncer's configuration.
type PgBouncerConfig struct {
	// PoolMode is pool_mode: "transaction" unless set.
	PoolMode string
	// PoolSize is default_pool_size, the server connections per database
	// and user. Fewer than the client pools' connections (the default, 4)
	// makes clients share server connections, which is what a pooler is
	// for and what breaks anything that assumes a session of its own.
	PoolSize int
	// IgnoreStartupParameters is ignore_startup_parameters.
	IgnoreStartupParameters []string
}

// PgBouncer is a real PgBouncer, a local process or a container, between a
// test and its database.
type PgBouncer struct {
	url string
	log func() string
}

// URL is dbURL (as given to StartPgBouncer) pointing through the bouncer.
func (b *PgBouncer) URL() string { return b.url }

// Log is what PgBouncer has logged so far.
func (b *PgBouncer) Log() string { return b.log() }

// StartPgBouncer runs PgBouncer in front of the server of dbURL (as
// returned by URL) until the test ends. It serves every database of that
// server under its own name and trusts the client, logging in to the
// server as the user and password of dbURL.
//
// The bouncer is a local pgbouncer process when there is a binary
// ($PGBOUNCER, else pgbouncer on PATH, else /usr/sbin/pgbouncer). Without
// one (or with PGBOUNCER=docker) it runs in a container built from
// deploy/pgbouncer/Dockerfile by testcontainers-go, with this test's
// configuration copied in. With neither a binary nor a Docker engine the
// test fails, saying how to get either: PgBouncer support is a feature, and
// a silent skip would let it rot.
func StartPgBouncer(t testing.TB, dbURL string, cfg PgBouncerConfig) *PgBouncer {
	t.Helper()
	if cfg.PoolMode == "" {
		cfg.PoolMode = "transaction"
	}
	if cfg.PoolSize == 0 {
		cfg.PoolSize = 4
	}
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatalf("dbtest: pgbouncer: parse database URL: %v", err)
	}

	var start func(port int) (*PgBouncer, error)
	bin, binErr := pgbouncerBinary()
	switch {
	case binErr == nil:
		dir, err := configDir()
		if err != nil {
			t.Fatalf("dbtest: pgbouncer: %v", err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		start = func(port int) (*PgBouncer, error) { return startPgBouncer(t, bin, dir, u, port, cfg) }
	case errors.Is(binErr, errNoPgBouncerBinary):
		image, err := pgbouncerImage()
		if err != nil {
			t.Fatalf("dbtest: no PgBouncer for the PgBouncer tests. Get one of: a pgbouncer binary (%s), "+
				"or a Docker engine, in which the tests build deploy/pgbouncer/Dockerfile "+
				"(FROM debian:bookworm-slim, apt-get install pgbouncer) with testcontainers-go and run it. "+
				"Binary: %v. Container: %v", howToGetPgBouncer, binErr, err)
		}
		start = func(port int) (*PgBouncer, error) { return startPgBouncerContainer(t, image, u, port, cfg) }
	default:
		t.Fatalf("dbtest: %v", binErr)
	}

	// A free port can be taken by someone else between our probe and
	// PgBouncer's bind; then PgBouncer exits and we try another one.
	var lastErr error
	for range 3 {
		port, err := freePort()
		if err != nil {
			t.Fatalf("dbtest: pgbouncer: %v", err)
		}
		b, err := start(port)
		if err == nil {
			return b
		}
		lastErr = err
	}
	t.Fatalf("dbtest: pgbouncer did not start: %v", lastErr)
	return nil
}

// pgbouncerINI is the configuration of one test's bouncer: listening on
// listenAddr:listenPort, serving every database of the server at
// serverHost:serverPort, with the users of authFile.
func pgbouncerINI(serverHost, serverPort, listenAddr string, listenPort int, authFile string, cfg PgBouncerConfig) string {
	return fmt.Sprintf(`[databases]
* = host=%s port=%s

[pgbouncer]
listen_addr = %s
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
pool_mode = %s
default_pool_size = %d
max_client_conn = 500
ignore_startup_parameters = %s
`, serverHost, serverPort, listenAddr, listenPort, authFile, cfg.PoolMode, cfg.PoolSize,
		strings.Join(cfg.IgnoreStartupParameters, ","))
}

// pgbouncerUsers is the auth_file: auth_type = trust still wants the user
// there; the password is what PgBouncer logs in to the server with.
func pgbouncerUsers(server *url.URL) string {
	password, _ := server.User.Password()
	return fmt.Sprintf("%q %q\n", server.User.Username(), password)
}

func startPgBouncer(t testing.TB, bin, dir string, server *url.URL, port int, cfg PgBouncerConfig) (*PgBouncer, error) {
	host, serverPort, err := net.SplitHostPort(server.Host)
	if err != nil {
		return nil, fmt.Errorf("database URL host %q: %w", server.Host, err)
	}
	ini := pgbouncerINI(host, serverPort, "127.0.0.1", port, filepath.Join(dir, "users.txt"), cfg)
	for name, content := range map[string]string{"users.txt": pgbouncerUsers(server), "pgbouncer.ini": ini} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			return nil, err
		}
	}

	args := []string{filepath.Join(dir, "pgbouncer.ini")}
	if os.Geteuid() == 0 {
		// PgBouncer refuses to run as root (CI runs as root).
		args = append([]string{"-u", "nobody"}, args...)
	}
	cmd := exec.Command(bin, args...)
	log := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	// exited is closed once the process is gone, with its error in waitErr:
	// both waitReady and stop may look.
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	gone := func() error {
		select {
		case <-exited:
			return fmt.Errorf("pgbouncer exited: %w", waitErr)
		default:
			return nil
		}
	}
	stop := func() {
		_ = cmd.Process.Signal(os.Interrupt) // SIGINT: immediate shutdown
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	}

	proxied := *server
	proxied.Host = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	b := &PgBouncer{url: proxied.String(), log: log.String}
	if err := waitReady(proxied, gone); err != nil {
		stop()
		return nil, fmt.Errorf("%w; its log:\n%s", err, log)
	}
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			t.Logf("pgbouncer log:\n%s", log)
		}
	})
	return b, nil
}

// waitReady connects through the bouncer, to the server's admin database,
// until a query gets through or gone reports PgBouncer gone. A new process
// or container is state this test does not own, so polling it is the only
// way to know it is up.
func waitReady(u url.URL, gone func() error) error {
	deadline := time.Now().Add(10 * time.Second)
	u.Path = "/postgres"
	q := u.Query()
	q.Set("default_query_exec_mode", "simple_protocol") // no statements to prepare
	u.RawQuery = q.Encode()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		conn, err := pgx.Connect(ctx, u.String())
		if err == nil {
			_, err = conn.Exec(ctx, "SELECT 1")
			conn.Close(ctx)
		}
		cancel()
		if err == nil {
			return nil
		}
		if gerr := gone(); gerr != nil {
			return gerr
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pgbouncer not answering: %w", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func pgbouncerBinary() (string, error) {
	bin := os.Getenv(EnvPgBouncer)
	if bin == pgbouncerInDocker {
		return "", fmt.Errorf("%w used (%s=%s)", errNoPgBouncerBinary, EnvPgBouncer, bin)
	}
	if bin != "" {
		if _, err := os.Stat(bin); err != nil {
			return "", fmt.Errorf("%s=%s: %w; %s", EnvPgBouncer, bin, err, howToGetPgBouncer)
		}
		return bin, nil
	}
	if bin, err := exec.LookPath("pgbouncer"); err == nil {
		return bin, nil
	}
	// Debian installs it outside a non-root user's PATH.
	const debian = "/usr/sbin/pgbouncer"
	if _, err := os.Stat(debian); err == nil {
		return debian, nil
	}
	return "", fmt.Errorf("%w (%s unset, none on PATH or at %s)", errNoPgBouncerBinary, EnvPgBouncer, debian)
}

// errNoPgBouncerBinary: PGBOUNCER is unset and no binary was found, or it
// is "docker": the bouncer runs in a container.
var errNoPgBouncerBinary = errors.New("no pgbouncer binary")

const howToGetPgBouncer = "install pgbouncer (Debian/Ubuntu: apt-get install pgbouncer; macOS: brew install pgbouncer) " +
	"or set " + EnvPgBouncer + " to its path; `bash .ci/run` installs it when missing"

// configDir makes a directory the unprivileged user PgBouncer switches to
// can read (t.TempDir's parents are private to us).
func configDir() (string, error) {
	dir, err := os.MkdirTemp("", "dbtest-pgbouncer-")
	if err != nil {
		return "", err
	}
	return dir, os.Chmod(dir, 0o755)
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// syncBuffer collects a process's output while tests read it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
