package dbtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/testcontainers/testcontainers-go"
)

// pgbouncerInDocker, as the value of PGBOUNCER, runs the bouncer in a
// container even where a binary exists (to try that path on such a machine).
const pgbouncerInDocker = "docker"

// pgbouncerImageName is the image the tests build from
// deploy/pgbouncer/Dockerfile, the compose demo's PgBouncer. It is kept
// after the run: a rebuild from Docker's layer cache takes a second.
const pgbouncerImageName = "checkout-dbtest-pgbouncer"

// The image is built once per test binary, by the first test that needs it.
var pgbouncerImageBuild struct {
	once sync.Once
	tag  string
	err  error
	// hostNetwork: the engine is on this Linux machine (a Unix socket), so
	// its network mode host is our network.
	hostNetwork bool
}

// pgbouncerImage builds deploy/pgbouncer/Dockerfile (unless this test
// binary already did) and returns the image's tag. It fails fast without a
// Docker engine.
func pgbouncerImage() (string, error) {
	pgbouncerImageBuild.once.Do(func() {
		pgbouncerImageBuild.tag, pgbouncerImageBuild.hostNetwork, pgbouncerImageBuild.err = buildPgBouncerImage()
	})
	return pgbouncerImageBuild.tag, pgbouncerImageBuild.err
}

func buildPgBouncerImage() (tag string, hostNetwork bool, err error) {
	dir, err := pgbouncerDockerfileDir()
	if err != nil {
		return "", false, err
	}
	provider, err := testcontainers.NewDockerProvider()
	if err != nil {
		return "", false, fmt.Errorf("no Docker engine: %w", err)
	}
	defer provider.Close()
	// The first build runs apt-get; later ones come from the layer cache.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// Not provider.DaemonHost: inside a container (/.dockerenv) it answers
	// the gateway's address even for an engine on this container's socket.
	daemon, err := url.Parse(provider.Client().DaemonHost())
	if err != nil {
		return "", false, fmt.Errorf("address of the Docker engine: %w", err)
	}
	hostNetwork = runtime.GOOS == "linux" && daemon.Scheme == "unix"
	var buildLog bytes.Buffer
	tag, err = provider.BuildImage(ctx, &testcontainers.ContainerRequest{FromDockerfile: testcontainers.FromDockerfile{
		Context:        dir,
		Dockerfile:     "Dockerfile",
		Repo:           pgbouncerImageName,
		Tag:            "latest",
		KeepImage:      true,
		BuildLogWriter: &buildLog,
	}})
	if err != nil {
		return "", false, fmt.Errorf("build %s (its base image must be pullable or present locally): %w; build log:\n%s",
			filepath.Join(dir, "Dockerfile"), err, lastLines(buildLog.String(), 30))
	}
	return tag, hostNetwork, nil
}

// pgbouncerDockerfileDir finds deploy/pgbouncer above the working directory
// (a test runs in its package's directory), else above this source file.
func pgbouncerDockerfileDir() (string, error) {
	var starts []string
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	if _, file, _, ok := runtime.Caller(0); ok {
		starts = append(starts, filepath.Dir(file))
	}
	for _, dir := range starts {
		for {
			candidate := filepath.Join(dir, "deploy", "pgbouncer")
			if _, err := os.Stat(filepath.Join(candidate, "Dockerfile")); err == nil {
				return candidate, nil
			}
			parent := filepath.Dir(dir)
			if parent == dir {
				break
			}
			dir = parent
		}
	}
	return "", errors.New("deploy/pgbouncer/Dockerfile not found above the working directory")
}

// Paths of one test's configuration inside its container. The image's
// /etc/pgbouncer holds the compose demo's files, which stay unused.
const (
	containerINI   = "/etc/pgbouncer/dbtest.ini"
	containerUsers = "/etc/pgbouncer/dbtest-users.txt"
	containerPort  = 6432 // with a network of its own
)

// startPgBouncerContainer runs one test's PgBouncer in a container of the
// image, with the configuration pgbouncerINI writes for a local process.
//
// Networking: with a local engine on Linux the container shares the host's
// network (network mode host), so PgBouncer listens on 127.0.0.1:port and reaches the server
// at exactly the host and port of its URL, as a local process would: a
// server on the host's loopback (TEST_DATABASE_URL) and a testcontainers
// PostgreSQL (its port published on the host) alike. Otherwise (Docker
// Desktop runs containers in a VM, whose host network is not ours; a remote
// DOCKER_HOST is another machine) the
// container gets its own network with port 6432 published, and a server on
// the loopback is reached as host.docker.internal (host-gateway).
// Not covered: a test in a container that drives its host's engine through
// a mounted socket (the host network is then the outer host's).
func startPgBouncerContainer(t testing.TB, image string, server *url.URL, port int, cfg PgBouncerConfig) (*PgBouncer, error) {
	host, serverPort, err := net.SplitHostPort(server.Host)
	if err != nil {
		return nil, fmt.Errorf("database URL host %q: %w", server.Host, err)
	}
	hostNetwork := pgbouncerImageBuild.hostNetwork // decided with the image
	listenAddr, listenPort := "127.0.0.1", port
	if !hostNetwork {
		listenAddr, listenPort = "0.0.0.0", containerPort
		if isLoopback(host) {
			host = "host.docker.internal"
		}
	}
	ini := pgbouncerINI(host, serverPort, listenAddr, listenPort, containerUsers, cfg)

	req := testcontainers.ContainerRequest{
		Image: image,
		// The image's entrypoint is pgbouncer; it runs as the package's
		// postgres user, so no -u.
		Cmd: []string{containerINI},
		Files: []testcontainers.ContainerFile{
			{Reader: strings.NewReader(ini), ContainerFilePath: containerINI, FileMode: 0o644},
			{Reader: strings.NewReader(pgbouncerUsers(server)), ContainerFilePath: containerUsers, FileMode: 0o644},
		},
		HostConfigModifier: func(hc *container.HostConfig) {
			if hostNetwork {
				hc.NetworkMode = "host"
			} else {
				hc.ExtraHosts = append(hc.ExtraHosts, "host.docker.internal:host-gateway")
			}
		},
	}
	if !hostNetwork {
		req.ExposedPorts = []string{strconv.Itoa(containerPort) + "/tcp"}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := testcontainers.GenericContainer(ctx, testcontainers.GenericContainerRequest{ContainerRequest: req, Started: true})
	stop := func() { _ = testcontainers.TerminateContainer(c, testcontainers.StopTimeout(time.Second)) }
	if err != nil {
		stop()
		return nil, fmt.Errorf("start a container of %s: %w", image, err)
	}
	// Read on demand, so a test's Log() sees everything logged until then.
	logs := func() string {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		rc, err := c.Logs(ctx)
		if err != nil {
			return fmt.Sprintf("(container log unavailable: %v)", err)
		}
		defer rc.Close()
		var buf bytes.Buffer
		_, _ = io.Copy(&buf, rc)
		return buf.String()
	}
	gone := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		state, err := c.State(ctx)
		if err != nil || state.Running {
			return nil // keep polling until waitReady's deadline
		}
		return fmt.Errorf("pgbouncer container %s, exit code %d", state.Status, state.ExitCode)
	}

	proxied := *server
	if hostNetwork {
		proxied.Host = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	} else {
		h, err := c.Host(ctx)
		if err != nil {
			stop()
			return nil, fmt.Errorf("pgbouncer container host: %w", err)
		}
		p, err := c.MappedPort(ctx, strconv.Itoa(containerPort)+"/tcp")
		if err != nil {
			stop()
			return nil, fmt.Errorf("pgbouncer container port: %w", err)
		}
		proxied.Host = net.JoinHostPort(h, p.Port())
	}
	b := &PgBouncer{url: proxied.String(), log: logs}
	if err := waitReady(proxied, gone); err != nil {
		log := logs()
		stop()
		return nil, fmt.Errorf("%w; its log:\n%s", err, log)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("pgbouncer log (container):\n%s", logs()) // gone with the container
		}
		stop()
	})
	return b, nil
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
