package order

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// maxSettleBatch bounds one settle statement. Requests are bounded by the
// API pool long before this under any load the pool admits; the bound only
// keeps a statement's size and its row locks modest.
const maxSettleBatch = 64

// settler settles the orders the API charged, many to a statement: while
// one statement is in flight, the settles that arrive wait and go together
// in the next one — one round trip, one statement and one commit for all of
// them (DESIGN.md "Durability" allows the settle to be batched). Nothing
// waits for a batch to fill: at low load every statement holds one order,
// as if there were no batching; under load a batch holds what arrived during
// the previous statement, so it grows with the load and the database's
// latency. A goroutine runs the statements while there are settles to run
// and ends when there are none.
//
// Deferrals are not batched: they insert a job in the same transaction.
// Nor is the worker's settle, which completes its job with it.
type settler struct {
	db      Querier
	async   bool          // see Config.AsyncSettle
	timeout time.Duration // per statement (Config.DBTimeout)

	mu       sync.Mutex
	queue    []*settleCall
	flushing bool // a goroutine is running statements
}

// settleCall is one request waiting for its order's settle.
type settleCall struct {
	ctx  context.Context // the request's: its trace, for the statement's span
	item settleItem
	res  settleResult
	done chan struct{} // closed once res is set
}

func newSettler(db Querier, async bool, timeout time.Duration) *settler {
	return &settler{db: db, async: async, timeout: timeout}
}

// settle settles base as s and records the result as its request's answer
// (see settle in store.go). It returns when the order's statement has run,
// or when ctx ends; the statement then still runs, since the charge it
// records has happened.
func (b *settler) settle(ctx context.Context, base Order, s Settlement) (settleResult, error) {
	c := &settleCall{ctx: ctx, item: settleItem{base: base, to: s, answer: true}, done: make(chan struct{})}
	b.mu.Lock()
	b.queue = append(b.queue, c)
	start := !b.flushing
	b.flushing = true
	b.mu.Unlock()
	if start {
		go b.flush()
	}
	select {
	case <-c.done:
		return c.res, nil
	case <-ctx.Done():
		return settleResult{}, ctx.Err()
	}
}

// flush runs statements until the queue is empty.
func (b *settler) flush() {
	for {
		batch := b.take()
		if len(batch) == 0 {
			return
		}
		b.run(batch)
	}
}

// take removes the next batch from the queue, up to maxSettleBatch calls.
// With the queue empty it ends the flush, under the same lock that settle
// checks it with.
func (b *settler) take() []*settleCall {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.queue) == 0 {
		b.flushing = false
		return nil
	}
	n := min(len(b.queue), maxSettleBatch)
	batch := b.queue[:n:n]
	b.queue = b.queue[n:]
	return batch
}

// run settles one batch and hands every call its result. A statement the
// server refused — a deadlock with another process's statement over two of
// the same orders, a row a constraint rejects — fails every order in it, so
// each is then tried on its own. A lost connection or a timeout is not
// retried: the next statements would meet the same database.
func (b *settler) run(batch []*settleCall) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(batch[0].ctx), b.timeout)
	defer cancel()
	items := make([]settleItem, len(batch))
	for i, c := range batch {
		items[i] = c.item
	}
	results, err := settleAll(ctx, b.db, items, b.async)
	var refused *pgconn.PgError
	if err != nil && len(batch) > 1 && errors.As(err, &refused) {
		for _, c := range batch {
			b.run([]*settleCall{c})
		}
		return
	}
	for i, c := range batch {
		if err != nil {
			c.res = settleResult{err: err}
		} else {
			c.res = results[i]
		}
		trace.SpanFromContext(c.ctx).AddEvent("order settled", trace.WithAttributes(
			attribute.Int("settle.batch_size", len(batch))))
		close(c.done)
	}
}
