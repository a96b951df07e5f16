package order

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// maxBatch bounds one pipeline of statements. The API pool (16 requests by
// default) bounds a batch long before this; the bound only keeps a
// pipeline's size and its row locks modest when the pool is made large.
const maxBatch = 64

// batcher runs the statements of concurrent requests together: while one
// pipeline is in flight, the calls that arrive wait and go together in the
// next one — one round trip and one implicit transaction, so one commit,
// for all of them. Nothing waits for a batch to fill: at low load every
// pipeline holds one call, as if there were no batching; under load a batch
// holds what arrived during the previous round trip, so it grows with the
// load and the database's latency. A goroutine runs the pipelines while
// there are calls and ends when there are none.
//
// A pipeline the server rejects — a row a constraint refuses, a deadlock
// with another process's pipeline over two of the same rows — fails every
// call in it, so each is then run on its own: one bad row fails only its
// request. A database that is unavailable (lost connection, timeout,
// shutdown) is not retried that way: the next statements would meet it too.
type batcher[C any] struct {
	// run runs the statements of calls as one pipeline (or, for one call,
	// one statement) and records each call's result; an error is the
	// pipeline's, for all of them.
	run     func(ctx context.Context, calls []*batchCall[C]) error
	timeout time.Duration // per pipeline (Config.DBTimeout)
	event   string        // the span event each call's request gets
	// sendAbandoned: a call whose request stopped waiting is still sent
	// (a settle: the charge it records happened). Without, a call is only
	// sent while its request can wait for the outcome (minLeft), a queued
	// call whose request leaves is withdrawn, and a request whose call was
	// sent waits for the outcome: a first write's request that answers 503
	// ("nothing was stored") must not have its order stored after all.
	sendAbandoned bool
	// minLeft: without sendAbandoned, a call is only taken into a pipeline
	// while its request has at least this long left to wait for it. A call
	// with less is answered errNotSent, never sent.
	minLeft time.Duration

	mu       sync.Mutex
	queue    []*batchCall[C]
	flushing bool // a goroutine is running pipelines
}

// batchCall is one request's statement waiting in a batcher.
type batchCall[C any] struct {
	ctx  context.Context // the request's: its deadline and its trace
	in   C               // the statement's arguments and, once done, its result
	err  error           // the pipeline's error, if it failed
	sent bool            // taken into a pipeline; under the batcher's mu
	done chan struct{}   // closed once in and err are final
}

// do queues in and waits for its pipeline, or for ctx to end (see
// sendAbandoned for what happens to the call then).
func (b *batcher[C]) do(ctx context.Context, in C) (C, error) {
	c := &batchCall[C]{ctx: ctx, in: in, done: make(chan struct{})}
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
		return c.in, c.err
	case <-ctx.Done():
	}
	if !b.sendAbandoned && !b.withdraw(c) {
		<-c.done // sent: the server ends its pipeline in time (claimer)
		return c.in, c.err
	}
	return in, ctx.Err()
}

// withdraw takes c out of the queue unless a pipeline has taken it.
func (b *batcher[C]) withdraw(c *batchCall[C]) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if c.sent {
		return false
	}
	b.queue = slices.DeleteFunc(b.queue, func(q *batchCall[C]) bool { return q == c })
	return true
}

// flush runs pipelines until the queue is empty.
func (b *batcher[C]) flush() {
	for {
		batch := b.take()
		if len(batch) == 0 {
			return
		}
		b.runBatch(batch)
	}
}

// take removes the next batch from the queue, up to maxBatch calls, and
// marks them sent. A call whose request can no longer wait for a pipeline
// (minLeft) is taken out and answered errNotSent instead. With the queue
// empty it ends the flush, under the same lock that do checks it with.
func (b *batcher[C]) take() []*batchCall[C] {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.sendAbandoned {
		b.queue = slices.DeleteFunc(b.queue, func(c *batchCall[C]) bool {
			if b.canWait(c) {
				return false
			}
			c.err = errNotSent
			close(c.done)
			return true
		})
	}
	if len(b.queue) == 0 {
		b.flushing = false
		return nil
	}
	n := min(len(b.queue), maxBatch)
	batch := slices.Clone(b.queue[:n])
	b.queue = slices.Delete(b.queue, 0, n)
	for _, c := range batch {
		c.sent = true
	}
	return batch
}

// canWait reports whether c's request has minLeft to wait for a pipeline.
func (b *batcher[C]) canWait(c *batchCall[C]) bool {
	if c.ctx.Err() != nil {
		return false
	}
	d, ok := c.ctx.Deadline()
	return !ok || time.Until(d) >= b.minLeft
}

// errNotSent answers a call that was never sent because its request could
// no longer wait for the outcome: nothing was written for it.
var errNotSent = fmt.Errorf("not sent, the request's deadline is too close: %w", context.DeadlineExceeded)

// runBatch runs one batch and completes every call in it. The pipeline has
// its own timeout, whatever the deadlines of the requests in it: one
// request's deadline never bounds another's write.
func (b *batcher[C]) runBatch(batch []*batchCall[C]) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(batch[0].ctx), b.timeout)
	defer cancel()
	err := b.run(ctx, batch)
	if len(batch) > 1 && rejected(err) {
		for _, c := range batch {
			b.runBatch([]*batchCall[C]{c})
		}
		return
	}
	for _, c := range batch {
		c.err = err
		if span := trace.SpanFromContext(c.ctx); span.IsRecording() {
			span.AddEvent(b.event, trace.WithAttributes(attribute.Int("batch_size", len(batch))))
		}
		close(c.done)
	}
}

// rejected reports whether the server refused a statement for what it
// would write — bad data, a constraint, a deadlock or serialization
// failure — rather than being unavailable; only then may the statements of
// a pipeline fare differently one by one.
func rejected(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	return pgerrcode.IsDataException(pgErr.Code) || pgerrcode.IsIntegrityConstraintViolation(pgErr.Code) ||
		pgErr.Code == pgerrcode.DeadlockDetected || pgErr.Code == pgerrcode.SerializationFailure
}

// settler settles the orders the API charged, many to a pipeline (batcher;
// docs/design.md, "Settles" allows the settle to be batched). Deferrals are
// not batched: they insert a job in the same transaction. Nor is the
// worker's settle, which completes its job with it.
type settler struct {
	b batcher[settleOp]
}

// settleOp is one settle: the order and settlement, then its result.
type settleOp struct {
	item settleItem
	res  settleResult
}

func newSettler(db Querier, async bool, timeout time.Duration) *settler {
	run := func(ctx context.Context, calls []*batchCall[settleOp]) error {
		items := make([]settleItem, len(calls))
		for i, c := range calls {
			items[i] = c.in.item
		}
		results, err := settleAll(ctx, db, items, async)
		if err != nil {
			return err
		}
		for i, c := range calls {
			c.in.res = results[i]
		}
		return nil
	}
	return &settler{b: batcher[settleOp]{run: run, timeout: timeout, event: "order settled", sendAbandoned: true}}
}

// settle settles base as s and records the result as its request's answer
// (see settle in store.go). It returns when the order's pipeline has run,
// or when ctx ends; the pipeline then still runs, since the charge it
// records has happened.
func (s *settler) settle(ctx context.Context, base Order, to Settlement) (settleResult, error) {
	op, err := s.b.do(ctx, settleOp{item: settleItem{base: base, to: to, answer: true}})
	return op.res, err
}

// claimer runs the first writes of concurrent requests — key claim and
// pending order — many to a pipeline (batcher). Each request goes on to
// charge only once the pipeline holding its order has committed,
// synchronously, so batching changes no durability rule: the order is
// stored before the provider is called.
//
// A request that answers 503 promises that nothing was stored (docs/design.md,
// "A 503 stores nothing"). A first write commits only once checkout has
// seen every statement succeed and sends COMMIT (insertOrdersWithKeys), so
// a pipeline that fails, or is abandoned, stores nothing. And the answer
// comes while its request still waits for it: each pipeline's statements
// run under a server-side statement_timeout (claimBound, a third of the
// pipeline's timeout), and a call is only sent while its request has half
// as long again left (minLeft), so a statement waiting on a lock is
// cancelled by the server and the request told before it gives up. A
// pipeline is never bounded by a request's deadline, so one request's
// deadline never cuts another's write short. Only a COMMIT sent and not
// answered (a connection lost at that moment, a synchronous standby that
// does not confirm) leaves the outcome unknown, and the request says so.
type claimer struct {
	b batcher[claimOp]
}

func newClaimer(db *pgxpool.Pool, timeout time.Duration) *claimer {
	bound := claimBound(timeout)
	run := func(ctx context.Context, calls []*batchCall[claimOp]) error {
		ops := make([]*claimOp, len(calls))
		for i, c := range calls {
			ops[i] = &c.in
		}
		conn, err := db.Acquire(ctx)
		if err != nil {
			return fmt.Errorf("%w: %w", errNotSent, err)
		}
		defer conn.Release()
		return insertOrdersWithKeys(ctx, conn.Conn(), ops, bound)
	}
	return &claimer{b: batcher[claimOp]{run: run, timeout: timeout, event: "order stored", minLeft: bound + bound/2}}
}

// claimBound is the server-side bound of one first-write pipeline's
// statements: a third of the pipeline's client-side timeout, so a request
// that waited behind one bounded pipeline still has time for its own.
func claimBound(timeout time.Duration) time.Duration { return timeout / 3 }

// claim runs op's first write (see insertOrdersWithKeys) and returns op with
// its outcome once the pipeline holding it has committed or failed. A claim
// whose request cannot wait for a pipeline any more (ctx ends, or is about
// to) is never sent; one already sent is waited for: the server ends it in
// time. Its error wraps errNotSent, errOutcomeUnknown, or the server's.
func (c *claimer) claim(ctx context.Context, op claimOp) (claimOp, error) {
	return c.b.do(ctx, op)
}
