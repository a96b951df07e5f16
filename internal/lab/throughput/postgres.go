package throughput

import (
	"context"
	"fmt"
	"net/url"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// cluster is the PostgreSQL server under test, reached through its
// maintenance database. It must run on this machine: its CPU is read from
// /proc under the postmaster's process id.
type cluster struct {
	admin      *pgxpool.Pool
	url        *url.URL
	postmaster int
}

func openCluster(ctx context.Context, databaseURL string) (*cluster, error) {
	u, err := url.Parse(databaseURL)
	if err != nil {
		return nil, fmt.Errorf("database URL: invalid")
	}
	admin, err := pgxpool.New(ctx, databaseURL)
	if err != nil {
		return nil, fmt.Errorf("connect to the database: %w", err)
	}
	var backend int
	if err := admin.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&backend); err != nil {
		admin.Close()
		return nil, fmt.Errorf("connect to the database: %w", err)
	}
	// A backend is a child of the postmaster.
	s, err := readProcStat("/proc", backend)
	if err != nil {
		admin.Close()
		return nil, fmt.Errorf("backend %d is not a process of this machine (the database must run here: "+
			"its CPU is read from /proc): %w", backend, err)
	}
	return &cluster{admin: admin, url: u, postmaster: s.PPID}, nil
}

func (c *cluster) close() { c.admin.Close() }

// databaseURL is the cluster's URL with another database name.
func (c *cluster) databaseURL(name string) string {
	u := *c.url
	u.Path = "/" + name
	return u.String()
}

func (c *cluster) createDatabase(ctx context.Context, name, template string) error {
	q := `CREATE DATABASE ` + pgx.Identifier{name}.Sanitize()
	if template != "" {
		q += ` TEMPLATE ` + pgx.Identifier{template}.Sanitize()
	}
	if _, err := c.admin.Exec(ctx, q); err != nil {
		return fmt.Errorf("create database %s: %w", name, err)
	}
	return nil
}

func (c *cluster) dropDatabase(ctx context.Context, name string) error {
	if _, err := c.admin.Exec(ctx, `DROP DATABASE IF EXISTS `+pgx.Identifier{name}.Sanitize()+` WITH (FORCE)`); err != nil {
		return fmt.Errorf("drop database %s: %w", name, err)
	}
	return nil
}

// checkpoint starts every run from a fresh checkpoint, so that no run pays
// for a checkpoint the one before left due (and checkpoint_timeout restarts).
func (c *cluster) checkpoint(ctx context.Context) error {
	if _, err := c.admin.Exec(ctx, `CHECKPOINT`); err != nil {
		return fmt.Errorf("checkpoint (the role needs superuser or pg_checkpoint): %w", err)
	}
	return nil
}

// awaitNoSessions waits until no session is connected to database: a
// backend flushes its statistics when it exits, so only then are
// pg_stat_wal and pg_stat_database complete for the run.
func (c *cluster) awaitNoSessions(ctx context.Context, database string, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		var n int
		if err := c.admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = $1`, database).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d sessions still connected to %s after %s", n, database, within)
		}
		time.Sleep(20 * time.Millisecond) // polling the server
	}
}

// pgCounters are the cumulative counters a run is accounted with.
type pgCounters struct {
	WALRecords, WALFPI, WALBytes, WALWrites, WALSyncs int64 // pg_stat_wal: the whole cluster
	Commits, Rollbacks                                int64 // pg_stat_database: the run's database
	// CheckpointLSN is where the latest completed checkpoint starts, from
	// the control file: exact at once, where pg_stat_bgwriter's counts
	// arrive when the checkpointer next reports.
	CheckpointLSN string
}

func (c *cluster) counters(ctx context.Context, database string) (pgCounters, error) {
	var p pgCounters
	err := c.admin.QueryRow(ctx, `
		SELECT w.wal_records, w.wal_fpi, w.wal_bytes::bigint, w.wal_write, w.wal_sync,
		       d.xact_commit, d.xact_rollback, c.checkpoint_lsn::text
		FROM pg_stat_wal w, pg_stat_database d, pg_control_checkpoint() c
		WHERE d.datname = $1`, database).
		Scan(&p.WALRecords, &p.WALFPI, &p.WALBytes, &p.WALWrites, &p.WALSyncs, &p.Commits, &p.Rollbacks, &p.CheckpointLSN)
	if err != nil {
		return p, fmt.Errorf("read pg_stat_wal / pg_stat_database / pg_control_checkpoint: %w", err)
	}
	return p, nil
}

// pgDelta is what happened between two readings of the counters.
type pgDelta struct {
	pgCounters
	// Checkpointed says a checkpoint completed in between.
	Checkpointed bool
}

func (p pgCounters) sub(q pgCounters) pgDelta {
	return pgDelta{Checkpointed: p.CheckpointLSN != q.CheckpointLSN, pgCounters: pgCounters{
		WALRecords: p.WALRecords - q.WALRecords, WALFPI: p.WALFPI - q.WALFPI, WALBytes: p.WALBytes - q.WALBytes,
		WALWrites: p.WALWrites - q.WALWrites, WALSyncs: p.WALSyncs - q.WALSyncs,
		Commits: p.Commits - q.Commits, Rollbacks: p.Rollbacks - q.Rollbacks,
	}}
}

// orderCounts counts the orders a run left in its database, by status.
func (c *cluster) orderCounts(ctx context.Context, database string) (map[string]int64, int64, error) {
	conn, err := pgx.Connect(ctx, c.databaseURL(database))
	if err != nil {
		return nil, 0, err
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT status, count(*) FROM orders GROUP BY status`)
	if err != nil {
		return nil, 0, err
	}
	counts := map[string]int64{}
	var total int64
	for rows.Next() {
		var s string
		var n int64
		if err := rows.Scan(&s, &n); err != nil {
			return nil, 0, err
		}
		counts[s] = n
		total += n
	}
	return counts, total, rows.Err()
}

// settingNames are the server settings the report states: those that decide
// what a commit costs, and what the tool may have had to change.
var settingNames = []string{
	"server_version", "fsync", "synchronous_commit", "full_page_writes", "wal_level", "wal_sync_method",
	"wal_buffers", "shared_buffers", "max_wal_size", "checkpoint_timeout", "max_connections",
	"shared_preload_libraries", "autovacuum", "data_checksums",
}

// settings reads settingNames, and the file system the data directory is on
// (fsync on tmpfs costs nothing, which would make "fsync on" a false claim).
func (c *cluster) settings(ctx context.Context) (map[string]string, error) {
	rows, err := c.admin.Query(ctx, `SELECT name, current_setting(name) FROM pg_settings WHERE name = ANY($1)`, settingNames)
	if err != nil {
		return nil, err
	}
	s, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) ([2]string, error) {
		var kv [2]string
		return kv, r.Scan(&kv[0], &kv[1])
	})
	if err != nil {
		return nil, fmt.Errorf("read pg_settings: %w", err)
	}
	out := map[string]string{}
	for _, kv := range s {
		out[kv[0]] = kv[1]
	}
	var dir string
	if err := c.admin.QueryRow(ctx, `SELECT setting FROM pg_settings WHERE name = 'data_directory'`).Scan(&dir); err == nil && dir != "" {
		out["data_directory_fs"] = fileSystem(dir)
	}
	return out, nil
}

// fileSystem names the file system dir is on, from statfs's magic number.
func fileSystem(dir string) string {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return "unknown (" + err.Error() + ")"
	}
	switch st.Type {
	case 0xEF53:
		return "ext4"
	case 0x58465342:
		return "xfs"
	case 0x9123683E:
		return "btrfs"
	case 0x01021994:
		return "tmpfs"
	case 0x794C7630:
		return "overlayfs"
	default:
		return fmt.Sprintf("0x%X", st.Type)
	}
}
