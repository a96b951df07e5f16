package throughput

import (
	"context"
	"fmt"
	"strings"
)

// Statement is one normalized statement's work in a run, per order, from
// pg_stat_statements (loaded with shared_preload_libraries; off unless
// Config.Statements is set, as it costs a little on every statement).
type Statement struct {
	Query      string  `json:"query"`
	Calls      float64 `json:"calls_per_order"`
	Rows       float64 `json:"rows_per_order"`
	WALRecords float64 `json:"wal_records_per_order"`
	WALFPI     float64 `json:"wal_fpi_per_order"`
	WALBytes   float64 `json:"wal_bytes_per_order"`
	ExecMS     float64 `json:"exec_ms_per_order"`
}

// enableStatements makes pg_stat_statements readable; it fails, saying why,
// when the library is not preloaded.
func (c *cluster) enableStatements(ctx context.Context) error {
	if _, err := c.admin.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements`); err != nil {
		return fmt.Errorf("pg_stat_statements: %w", err)
	}
	if _, err := c.admin.Exec(ctx, `SELECT 1 FROM pg_stat_statements LIMIT 1`); err != nil {
		return fmt.Errorf("pg_stat_statements (start the server with shared_preload_libraries=pg_stat_statements; "+
			"scripts/throughput does with STATEMENTS=1): %w", err)
	}
	return nil
}

// resetStatements forgets what earlier statements in database did.
func (c *cluster) resetStatements(ctx context.Context, database string) error {
	_, err := c.admin.Exec(ctx, `SELECT pg_stat_statements_reset(0, (SELECT oid FROM pg_database WHERE datname = $1), 0)`, database)
	if err != nil {
		return fmt.Errorf("reset pg_stat_statements: %w", err)
	}
	return nil
}

// statements lists database's statements, most WAL first, then most time,
// as totals; perOrder divides them.
func (c *cluster) statements(ctx context.Context, database string) ([]Statement, error) {
	rows, err := c.admin.Query(ctx, `
		SELECT query, calls, rows, wal_records, wal_fpi, wal_bytes::float8, total_exec_time
		FROM pg_stat_statements
		WHERE dbid = (SELECT oid FROM pg_database WHERE datname = $1)
		ORDER BY wal_records DESC, total_exec_time DESC`, database)
	if err != nil {
		return nil, fmt.Errorf("read pg_stat_statements: %w", err)
	}
	defer rows.Close()
	var out []Statement
	for rows.Next() {
		var s Statement
		var calls, nrows, records, fpi int64
		if err := rows.Scan(&s.Query, &calls, &nrows, &records, &fpi, &s.WALBytes, &s.ExecMS); err != nil {
			return nil, err
		}
		s.Query = strings.Join(strings.Fields(s.Query), " ")
		s.Calls, s.Rows, s.WALRecords, s.WALFPI = float64(calls), float64(nrows), float64(records), float64(fpi)
		out = append(out, s)
	}
	return out, rows.Err()
}

// perOrder divides every statement's totals by orders.
func perOrder(ss []Statement, orders int64) []Statement {
	n := float64(max(orders, 1))
	for i := range ss {
		s := &ss[i]
		s.Calls, s.Rows, s.WALRecords, s.WALFPI, s.WALBytes, s.ExecMS =
			s.Calls/n, s.Rows/n, s.WALRecords/n, s.WALFPI/n, s.WALBytes/n, s.ExecMS/n
	}
	return ss
}
