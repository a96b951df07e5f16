package throughput

import (
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

// NewBaseline is the one-transaction baseline the throughput run compares
// the checkout against: what any durable checkout must at least do per
// order. POST /orders decodes the order, inserts its row into the same
// `orders` table and, in the same transaction, a River job with River's
// public InsertTx (scheduled an hour ahead, as the checkout schedules its
// charge job past the synchronous deadline), commits and answers 201 with
// the order. No idempotency key, no provider call, no settle: the ratio
// checkout/baseline is the price of those. jobs may be an insert-only
// client (riverpgxv5.New(pool) with an empty river.Config).
func NewBaseline(pool *pgxpool.Pool, jobs *river.Client[pgx.Tx]) http.Handler {
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
		err = pgx.BeginFunc(r.Context(), pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(r.Context(), `
				INSERT INTO orders (id, status, customer_id, currency, payment_method, items, total)
				VALUES ($1, $2, $3, $4, $5, $6, $7)`,
				o.ID, o.Status, o.CustomerID, o.Currency, o.PaymentMethod, items, o.Total); err != nil {
				return err
			}
			_, err := jobs.InsertTx(r.Context(), tx, BaselineJobArgs{OrderID: o.ID},
				&river.InsertOpts{ScheduledAt: time.Now().Add(time.Hour)})
			return err
		})
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
