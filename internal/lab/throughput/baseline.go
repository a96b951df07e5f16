package throughput

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/resilientcheckout/checkout/internal/health"
)

// BaselinePoolSize is the baseline server's connection pool: 16, the
// checkout API's default worker pool, so both serve at most 16 orders at
// once against the database.
const BaselinePoolSize = 16

// BaselineJobArgs is the baseline's job: the smallest River job that names
// an order. Nothing works it; it exists to be written.
type BaselineJobArgs struct {
	OrderID uuid.UUID `json:"order_id"`
}

// Kind is the River job kind.
func (BaselineJobArgs) Kind() string { return "throughput_baseline" }

// baselineOrder is the request body, decoded as strictly as the checkout
// API decodes it (unknown fields are errors) but checked for nothing else,
// and, with the fields the server sets, the answer.
type baselineOrder struct {
	ID            uuid.UUID      `json:"id"`
	Status        string         `json:"status"`
	CustomerID    string         `json:"customer_id"`
	Currency      string         `json:"currency"`
	PaymentMethod string         `json:"payment_method"`
	Items         []baselineItem `json:"items"`
	Total         int64          `json:"total"`
}

type baselineItem struct {
	SKU       string `json:"sku"`
	Quantity  int64  `json:"quantity"`
	UnitPrice int64  `json:"unit_price"`
}

// Baseline modes: how the baseline writes its transaction.
const (
	// BaselineInsertTx is BEGIN, the order's INSERT, River's InsertTx,
	// COMMIT: four round trips, River's public API.
	BaselineInsertTx = "insert-tx"
	// BaselinePipelined sends the same transaction as one pipelined batch
	// (one round trip), the job row written by hand with the values
	// InsertTx writes for BaselineJobArgs (River's defaults: queue
	// "default", priority 1, 25 attempts, no unique key). It is the
	// stricter yardstick: the checkout's own first write is one statement.
	BaselinePipelined = "pipelined"
)

// BaselineModes lists the modes NewBaseline accepts.
var BaselineModes = []string{BaselineInsertTx, BaselinePipelined}

// NewBaseline is the one-transaction baseline the throughput run compares
// the checkout against: what any durable checkout must at least do per
// order. POST /orders decodes the order, inserts its row into the same
// `orders` table and, in the same transaction, a River job (scheduled an
// hour ahead, as the checkout schedules its charge job past the synchronous
// deadline), commits and answers 201 with the order. No idempotency key, no
// provider call, no settle: the ratio checkout/baseline is the price of
// those. mode is one of BaselineModes; jobs may be an insert-only client
// (riverpgxv5.New(pool) with an empty river.Config).
func NewBaseline(pool *pgxpool.Pool, jobs *river.Client[pgx.Tx], mode string) http.Handler {
	r := chi.NewRouter()
	r.Get("/health", health.Liveness().ServeHTTP)
	r.Post("/orders", func(w http.ResponseWriter, r *http.Request) {
		var o baselineOrder
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&o); err != nil || len(o.Items) == 0 {
			http.Error(w, "malformed order", http.StatusBadRequest)
			return
		}
		for _, it := range o.Items {
			o.Total += it.Quantity * it.UnitPrice
		}
		items, err := json.Marshal(o.Items)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		o.ID, o.Status = uuid.Must(uuid.NewV7()), "pending"
		scheduled := time.Now().Add(time.Hour)
		if mode == BaselinePipelined {
			err = insertPipelined(r.Context(), pool, o, items, scheduled)
		} else {
			err = pgx.BeginFunc(r.Context(), pool, func(tx pgx.Tx) error {
				if _, err := tx.Exec(r.Context(), insertOrder,
					o.ID, o.Status, o.CustomerID, o.Currency, o.PaymentMethod, items, o.Total); err != nil {
					return err
				}
				_, err := jobs.InsertTx(r.Context(), tx, BaselineJobArgs{OrderID: o.ID}, &river.InsertOpts{ScheduledAt: scheduled})
				return err
			})
		}
		if err != nil {
			// The load generator refuses a run with any non-2xx answer.
			http.Error(w, "insert order: "+err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Location", "/orders/"+o.ID.String())
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(o)
	})
	return r
}

const insertOrder = `
	INSERT INTO orders (id, status, customer_id, currency, payment_method, items, total)
	VALUES ($1, $2, $3, $4, $5, $6, $7)`

// insertPipelined writes the order and its job in one transaction sent as a
// single batch. The job row carries what River's InsertTx writes for
// BaselineJobArgs with only ScheduledAt set; cmd/throughput's test compares
// the two rows.
func insertPipelined(ctx context.Context, pool *pgxpool.Pool, o baselineOrder, items []byte, scheduled time.Time) error {
	args, err := json.Marshal(BaselineJobArgs{OrderID: o.ID})
	if err != nil {
		return err
	}
	b := &pgx.Batch{}
	b.Queue(`BEGIN`)
	b.Queue(insertOrder, o.ID, o.Status, o.CustomerID, o.Currency, o.PaymentMethod, items, o.Total)
	b.Queue(`
		INSERT INTO river_job (args, kind, max_attempts, priority, queue, scheduled_at, state)
		VALUES ($1, $2, $3, $4, $5, $6, 'scheduled')`,
		args, BaselineJobArgs{}.Kind(), river.MaxAttemptsDefault, river.PriorityDefault, river.QueueDefault, scheduled)
	b.Queue(`COMMIT`)
	return pool.SendBatch(ctx, b).Close()
}
