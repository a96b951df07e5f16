package lookupcost

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// databaseName is the throwaway database the run creates and drops.
const databaseName = "lookupcost"

// store is where the two-step design keeps a PaymentIntent's id before confirming it: a
// real UPDATE, committed, on a real table, as an order row would take it.
type store struct {
	admin *pgx.Conn // the maintenance database, to drop ours at the end
	pool  *pgxpool.Pool
}

// openStore creates the database afresh on the server of url and its table.
func openStore(ctx context.Context, url string) (*store, error) {
	admin, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", url, err)
	}
	for _, stmt := range []string{"DROP DATABASE IF EXISTS " + databaseName + " WITH (FORCE)", "CREATE DATABASE " + databaseName} {
		if _, err := admin.Exec(ctx, stmt); err != nil {
			_ = admin.Close(ctx)
			return nil, fmt.Errorf("%s: %w", stmt, err)
		}
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		_ = admin.Close(ctx)
		return nil, err
	}
	cfg.ConnConfig.Database = databaseName
	cfg.MaxConns = 16
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		_ = admin.Close(ctx)
		return nil, err
	}
	s := &store{admin: admin, pool: pool}
	if _, err := pool.Exec(ctx, "CREATE TABLE orders (id uuid PRIMARY KEY, payment_intent text)"); err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

// prepare empties the table and inserts the orders' rows, as the orders would exist before
// they are charged.
func (s *store) prepare(ctx context.Context, orders []*trackedOrder) error {
	ids := make([]uuid.UUID, len(orders))
	for i, o := range orders {
		ids[i] = o.id
	}
	if _, err := s.pool.Exec(ctx, "TRUNCATE orders"); err != nil {
		return err
	}
	_, err := s.pool.Exec(ctx, "INSERT INTO orders (id) SELECT unnest($1::uuid[])", ids)
	return err
}

// storeIntent records the order's PaymentIntent on its row: the UPDATE, committed, that the
// pattern adds to every charge.
func (s *store) storeIntent(ctx context.Context, id uuid.UUID, intent string) error {
	tag, err := s.pool.Exec(ctx, "UPDATE orders SET payment_intent = $2 WHERE id = $1", id, intent)
	if err == nil && tag.RowsAffected() != 1 {
		err = fmt.Errorf("order %s: no row to store its PaymentIntent on", id)
	}
	return err
}

func (s *store) close() {
	ctx := context.Background()
	s.pool.Close()
	_, _ = s.admin.Exec(ctx, "DROP DATABASE IF EXISTS "+databaseName+" WITH (FORCE)") // a leftover is dropped by the next run
	_ = s.admin.Close(ctx)
}
