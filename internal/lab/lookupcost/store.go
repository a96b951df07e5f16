package lookupcost

import (
	"context"
	"crypto/rand"
	"fmt"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// store is where the two-step design keeps a PaymentIntent's id before confirming it: a
// real UPDATE, committed, on a real table, as an order row would take it.
type store struct {
	admin *pgx.Conn // the maintenance database, to drop ours at the end
	name  string    // ours, lookupcost_<random>
	pool  *pgxpool.Pool
}

// openStore creates a database of the run's own on the server of url, and its table. Its name
// is random so that a run never drops another's on the same server (the smoke test's beside
// `make experiment-lookup`'s).
func openStore(ctx context.Context, url string) (*store, error) {
	admin, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", url, err)
	}
	name := "lookupcost_" + strings.ToLower(rand.Text())
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		_ = admin.Close(ctx)
		return nil, fmt.Errorf("create database %s: %w", name, err)
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		_ = admin.Close(ctx)
		return nil, err
	}
	cfg.ConnConfig.Database = name
	cfg.MaxConns = 16
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		_ = admin.Close(ctx)
		return nil, err
	}
	s := &store{admin: admin, name: name, pool: pool}
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
	_, _ = s.admin.Exec(ctx, "DROP DATABASE IF EXISTS "+s.name+" WITH (FORCE)")
	_ = s.admin.Close(ctx)
}
