package e2e

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
)

// cluster is a throwaway PostgreSQL server of the test's own, for a test
// that crashes its database: the shared TEST_DATABASE_URL server must stay
// up for every other test.
type cluster struct {
	bin, dir string
	port     int
	asRoot   bool
}

// startCluster runs initdb and starts the server until the test ends. The
// server binaries come from PG_BIN or the newest /usr/lib/postgresql/*/bin;
// initdb refuses to run as root, so as root the cluster belongs to the
// postgres user (as in .ci/run).
func startCluster(t *testing.T) *cluster {
	t.Helper()
	bin := os.Getenv("PG_BIN")
	if bin == "" {
		found, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
		slices.Sort(found)
		if len(found) > 0 {
			bin = found[len(found)-1]
		}
	}
	if _, err := os.Stat(filepath.Join(bin, "pg_ctl")); err != nil {
		t.Fatalf("this test crashes a PostgreSQL server of its own and needs its binaries (initdb, pg_ctl): "+
			"install PostgreSQL's server package or set PG_BIN to the directory holding them (%v)", err)
	}
	dir, err := os.MkdirTemp("", "checkout-chaos-pg")
	if err != nil {
		t.Fatal(err)
	}
	c := &cluster{bin: bin, dir: dir, port: freePort(t), asRoot: os.Getuid() == 0}
	if c.asRoot {
		pg, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("running as root, the cluster needs the postgres user: %v", err)
		}
		uid, _ := strconv.Atoi(pg.Uid)
		gid, _ := strconv.Atoi(pg.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		_ = c.pgCtl("stop", "-m", "immediate")
		os.RemoveAll(dir)
	})
	if out, err := c.command("initdb", "-D", c.data(), "-A", "trust", "-U", "postgres").CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	if err := c.start(); err != nil {
		t.Fatal(err)
	}
	return c
}

// URL is the database URL of the cluster's postgres database.
func (c *cluster) URL() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", c.port)
}

// addr is the server's host:port.
func (c *cluster) addr() string { return fmt.Sprintf("127.0.0.1:%d", c.port) }

// start starts the server and waits until it accepts connections (after a
// crash, once recovery is done). synchronous_commit stays at its default,
// on: only what checkout itself commits asynchronously (the settle, see
// SETTLE_ASYNC_COMMIT) may be lost to a crash, as in production. fsync
// is off because the crash here is the server's, not the machine's: every
// write the server made is in the OS's page cache, which survives it. A
// standby whose primary went away tries to stream again every 500 ms
// (wal_retrieve_retry_interval, 5 s by default), so a primary restarted
// after a crash finds its synchronous standby back within a second.
func (c *cluster) start() error {
	return c.pgCtl("start", "-w", "-t", "60", "-l", filepath.Join(c.dir, "log"), "-o",
		fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200 -c wal_retrieve_retry_interval=500ms", c.port, c.dir))
}

// crash stops the server the way a crash does (pg_ctl stop -m immediate):
// every backend killed, no checkpoint, recovery from the WAL at the next
// start.
func (c *cluster) crash() error { return c.pgCtl("stop", "-m", "immediate") }

func (c *cluster) pgCtl(args ...string) error {
	out, err := c.command("pg_ctl", append([]string{"-D", c.data()}, args...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("pg_ctl %v: %w\n%s", args, err, out)
	}
	return nil
}

func (c *cluster) data() string { return filepath.Join(c.dir, "data") }

func (c *cluster) command(name string, args ...string) *exec.Cmd {
	path := filepath.Join(c.bin, name)
	if c.asRoot {
		return exec.Command("runuser", append([]string{"-u", "postgres", "--", path}, args...)...)
	}
	return exec.Command(path, args...)
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
