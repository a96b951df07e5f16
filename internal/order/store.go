package order

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/resilientcheckout/checkout/internal/idempotency"
)

// This file holds every SQL statement on the order aggregate: the order row,
// the Idempotency-Key row that created it, and the answer that request got.

// ErrNotFound: no order has that id.
var ErrNotFound = errors.New("order not found")

// Querier is what the storage functions need: a pool, a connection or a
// transaction.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// orderID passes an order id to pgx in binary form. A uuid.UUID is a
// driver.Valuer, which pgx encodes by formatting the id as text, failing to
// encode that text as binary, building the error, parsing the text back and
// encoding the result: 2.7 µs and 21 allocations per id against 0.1 µs and
// 2 (measured on the throughput machine; ~3 % of checkout's CPU under load).
func orderID(id uuid.UUID) pgtype.UUID { return pgtype.UUID{Bytes: id, Valid: true} }

const orderColumns = `o.id, o.status, o.customer_id, o.currency, o.payment_method, o.items, o.total,
	coalesce(o.charge_id, ''), coalesce(o.failure_reason, ''), o.created_at, o.updated_at, coalesce(o.last_attempt_at, o.created_at)`

// claimOp is one first write of the checkout flow for insertOrdersWithKeys:
// the order to insert under its key; then whether the key was new, and the
// order as inserted, its timestamps filled in.
type claimOp struct {
	order       Order
	scope       string // the key's scope: its customer with authentication on, else ''
	key         string
	fingerprint []byte
	lockFor     time.Duration
	claimed     bool
}

// insertOrderWithKeySQL claims the Idempotency-Key in its scope ($11) for
// lockFor and, only if it was new there, inserts the order as pending: one
// statement, one atomic unit.
// Positional arguments: pgx rewrites named ones by parsing the SQL text on
// every call (8 % of checkout's CPU under load, by pprof).
const insertOrderWithKeySQL = `
	WITH claimed AS (
		INSERT INTO idempotency_keys (scope, key, request_fingerprint, order_id, locked_until)
		VALUES ($11, $1, $2, $3, now() + make_interval(secs => $4))
		ON CONFLICT (scope, key) DO NOTHING
		RETURNING order_id
	)
	INSERT INTO orders (id, status, customer_id, currency, payment_method, items, total,
	                    created_at, updated_at, last_attempt_at)
	SELECT order_id, $5, $6, $7, $8, $9::text::jsonb, $10, now(), now(), now()
	FROM claimed
	RETURNING created_at`

// queueClaims is the pipeline of insertOrdersWithKeys: BEGIN, the bound,
// and each op's statement, whose row fills the op in.
func queueClaims(ops []*claimOp, bound time.Duration) *pgx.Batch {
	var b pgx.Batch
	b.Queue(`BEGIN`)
	if bound > 0 {
		ms := strconv.FormatInt(max(1, bound.Milliseconds()), 10)
		b.Queue(`SELECT set_config('statement_timeout', $1, true), set_config('idle_in_transaction_session_timeout', $2, true)`, ms, ms)
	}
	for _, op := range ops {
		o := op.order
		items, _ := json.Marshal(o.Items) // cannot fail: strings and integers only
		b.Queue(insertOrderWithKeySQL, op.key, op.fingerprint, orderID(o.ID), op.lockFor.Seconds(),
			o.Status, o.CustomerID, o.Currency, o.PaymentMethod, string(items), o.Total, op.scope).QueryRow(func(row pgx.Row) error {
			err := row.Scan(&op.order.CreatedAt)
			op.claimed = err == nil            // a pipeline that failed before may have set it
			if errors.Is(err, pgx.ErrNoRows) { // the key existed
				return nil
			}
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) && pgErr.Code == pgerrcode.UniqueViolation && pgErr.TableName == "idempotency_keys" {
				return fmt.Errorf("%w: %w", ErrKeyReused, err) // see insertOrdersWithKeys
			}
			o := &op.order
			o.CreatedAt = o.CreatedAt.UTC()
			o.UpdatedAt, o.LastAttemptAt = o.CreatedAt, o.CreatedAt
			return err
		})
	}
	return &b
}

// insertOrdersWithKeys runs the first write of each op
// (insertOrderWithKeySQL). An op whose key existed comes back unclaimed:
// nothing was written for it and its request goes on with lookupKey.
//
// The pending order is the durable intent to charge: if this process dies
// before settling it, the worker's sweep (internal/worker) gives every
// pending order older than the longest request a charge job. No job row is
// written here, so the common case — charged at once — never inserts and
// deletes one.
//
// A concurrent claim of the same key in the same scope waits on the unique
// index on (scope, key) until
// this statement's transaction ends, then finds the key taken: that wait is
// what makes concurrent identical requests produce one order (and a second
// claim of a key in the same pipeline sees the first's row). Until a later
// migration contracts what 00007 expanded, key alone is unique too, for the
// previous release's ON CONFLICT (key): a key another scope holds fails the
// statement with a unique violation, and its request gets ErrKeyReused,
// never the other customer's order. The key names
// its order without a foreign key (migration 00006): this statement is the
// only writer of either row, and orders are never deleted. Every timestamp
// is the database's clock, as are the lock expiry, the sweep and key
// retention, so skew between replicas cannot make the worker take over live
// requests early.
//
// Every op goes in one transaction, begun by the pipeline that carries the
// statements: one round trip for all of them, then COMMIT, one synchronous
// commit for all of them. The COMMIT is its own round trip so that until it
// is sent nothing can be committed: a request that gave up, a connection
// lost, a server that never answered — each leaves nothing behind (the
// server rolls back a transaction its client abandoned), so the request may
// truly answer "nothing stored". Only a COMMIT sent and not answered leaves
// the outcome unknown (errOutcomeUnknown).
//
// A bound above zero is the statement_timeout of each statement (set for
// this transaction only, so it also holds through a pooler in transaction
// mode): a statement waiting on a lock is cancelled by the server, and the
// request learns so, before the request gives up (see claimer). An
// abandoned transaction is rolled back by the server after as long idle.
func insertOrdersWithKeys(ctx context.Context, conn *pgx.Conn, ops []*claimOp, bound time.Duration) error {
	err := conn.SendBatch(ctx, queueClaims(ops, bound)).Close()
	if len(ops) == 1 && errors.Is(err, ErrKeyReused) {
		// Perhaps a claim of the key in the same scope inserted it just
		// after this statement looked for it, and has committed since: sent
		// again, the statement finds it. A key another scope holds fails
		// again, and the request is told so in ErrKeyReused's words alone,
		// which its answer shows. (Several ops in a pipeline the server
		// rejected are each run again on their own by the claimer.)
		abandon(conn, err)
		if err = conn.SendBatch(ctx, queueClaims(ops, bound)).Close(); errors.Is(err, ErrKeyReused) {
			abandon(conn, err)
			return ErrKeyReused
		}
	}
	if err != nil {
		abandon(conn, err)
		return err
	}
	if _, err := conn.Exec(ctx, `COMMIT`); err != nil {
		// Refused, or never sent: nothing stored. A process that stalled
		// here past the bound finds its session ended by the server, its
		// transaction rolled back, and its COMMIT refused with FATAL
		// 25P03 (idle_in_transaction_session_timeout).
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) || pgconn.SafeToRetry(err) {
			return err
		}
		return fmt.Errorf("%w: %w", errOutcomeUnknown, err)
	}
	return nil
}

// errOutcomeUnknown: a first write's COMMIT was sent and not answered. The
// order may be stored; the request's key finds out.
var errOutcomeUnknown = errors.New("the database did not confirm the first write's commit")

// abandon ends the transaction a failed pipeline left open. The server
// refused a statement (a *pgconn.PgError): the connection is sound, so the
// aborted transaction is rolled back and the connection goes back to the
// pool. Any other failure leaves the connection in doubt, and the pool
// discards a connection returned inside a transaction.
func abandon(conn *pgx.Conn, err error) {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, _ = conn.Exec(ctx, `ROLLBACK`)
}

// eachRow runs sql once for each of n argument lists and hands each row
// (or its pgx.ErrNoRows) to scan. One runs as one statement; several as one
// pipeline with one Sync — one round trip and one implicit transaction, so
// one commit. An error is the whole pipeline's: when the server refused a
// statement (a *pgconn.PgError) the transaction rolled back and nothing was
// written; a connection lost or a deadline passed on the way leaves it
// unknown, as it does for a single statement.
func eachRow(ctx context.Context, q Querier, sql string, n int, args func(i int) []any, scan func(i int, row pgx.Row) error) error {
	if n == 1 {
		return scan(0, q.QueryRow(ctx, sql, args(0)...))
	}
	var b pgx.Batch
	for i := range n {
		b.Queue(sql, args(i)...).QueryRow(func(row pgx.Row) error { return scan(i, row) })
	}
	return q.SendBatch(ctx, &b).Close()
}

// keyClaim is what lookupKey found for a key seen before.
type keyClaim struct {
	state idempotency.State
	order Order // set unless state is Mismatch, or InProgress before the order existed
	// answer is the order as its first response showed it; set for Finished.
	answer Order
}

// lookupKey reads an existing key, with its order, inside tx and says what
// this request may do with it. If the key's lock expired before an answer
// was stored, the request takes it over (Resumed), locking it for lockFor.
// It reads key in scope only: another scope's key of the same name is
// another request, never this one's replay.
func lookupKey(ctx context.Context, tx pgx.Tx, scope, key string, fingerprint []byte, lockFor time.Duration) (keyClaim, error) {
	var (
		storedFingerprint []byte
		hasOrder, locked  bool
		answeredStatus    *Status
		answeredAt        *time.Time
	)
	row := tx.QueryRow(ctx, `
		SELECT k.request_fingerprint, o.id IS NOT NULL, coalesce(k.locked_until > now(), false),
		       o.answered_status, o.answered_at
		FROM idempotency_keys k LEFT JOIN orders o ON o.id = k.order_id
		WHERE k.scope = $1 AND k.key = $2
		FOR UPDATE OF k`, scope, key)
	if err := row.Scan(&storedFingerprint, &hasOrder, &locked, &answeredStatus, &answeredAt); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return keyClaim{}, errKeyVanished
		}
		return keyClaim{}, fmt.Errorf("read idempotency key: %w", err)
	}
	var c keyClaim
	switch {
	case string(storedFingerprint) != string(fingerprint):
		c.state = idempotency.Mismatch
		return c, nil
	case answeredStatus != nil:
		c.state = idempotency.Finished
	case locked:
		c.state = idempotency.InProgress
		return c, nil
	case !hasOrder:
		// Only a key claimed by an older release, before its order was
		// written, can get here; there is nothing to resume.
		return keyClaim{}, fmt.Errorf("idempotency key without an order")
	default:
		if _, err := tx.Exec(ctx, `UPDATE idempotency_keys SET locked_until = now() + make_interval(secs => $3) WHERE scope = $1 AND key = $2`,
			scope, key, lockFor.Seconds()); err != nil {
			return keyClaim{}, fmt.Errorf("relock idempotency key: %w", err)
		}
		c.state = idempotency.Resumed
	}
	o, err := scanOrder(tx.QueryRow(ctx, `SELECT `+orderColumns+` FROM orders o JOIN idempotency_keys k ON k.order_id = o.id WHERE k.scope = $1 AND k.key = $2`, scope, key))
	if err != nil {
		return keyClaim{}, fmt.Errorf("load order of idempotency key: %w", err)
	}
	c.order = o
	if answeredStatus != nil {
		c.answer = asAnswered(o, *answeredStatus, *answeredAt)
	}
	return c, nil
}

// errKeyVanished: lookupKey found no such key. Either no request stored it
// (a lookup before any claim), or it was pruned, older than the retention
// period, since a claim found it; either way this request is new.
var errKeyVanished = errors.New("no such idempotency key")

// asAnswered is o as the response that stored answer showed it: that
// response's status and update time, and only the fields of that status.
// Everything else about an order is immutable once written, and a settled
// order's charge or failure never changes, so this rebuilds the first
// answer exactly.
func asAnswered(o Order, status Status, at time.Time) Order {
	o.Status, o.UpdatedAt = status, at.UTC()
	if status != StatusPaid {
		o.ChargeID = ""
	}
	if status != StatusPaymentFailed {
		o.FailureReason = ""
	}
	return o
}

// releaseKey drops a key's lock without an answer, so the client's retry
// with the same key resumes at once instead of waiting for the lock to
// expire. Used when the outcome is not final (a 502/504 without fallback).
func releaseKey(ctx context.Context, q Querier, scope, key string) error {
	if _, err := q.Exec(ctx, `UPDATE idempotency_keys SET locked_until = NULL WHERE scope = $1 AND key = $2`, scope, key); err != nil {
		return fmt.Errorf("release idempotency key: %w", err)
	}
	return nil
}

// settle applies s to the order if it is still unsettled — the API and the
// worker may race to settle one order and the first one wins — and returns
// the order as it then stands, with changed false if s was not applied.
// With answer, it also records the order's resulting state as the answer of
// the request that placed it, unless an answer is stored already (a request
// that outlived its lock does not overwrite what a resumed one answered):
// replays rebuild their response from it (asAnswered).
func settle(ctx context.Context, q Querier, base Order, s Settlement, answer bool) (o Order, answered Order, changed bool, err error) {
	return settleCommit(ctx, q, base, s, answer, false)
}

// settleCommit is settle, optionally committing asynchronously
// (synchronous_commit = off for this statement's transaction alone; see
// Config.AsyncSettle for why that is safe).
func settleCommit(ctx context.Context, q Querier, base Order, s Settlement, answer, async bool) (o Order, answered Order, changed bool, err error) {
	res, err := settleAll(ctx, q, []settleItem{{base: base, to: s, answer: answer}}, async)
	if err != nil {
		return Order{}, Order{}, false, fmt.Errorf("settle order %s as %s: %w", base.ID, s.Status, err)
	}
	r := res[0]
	return r.order, r.answered, r.changed, r.err
}

// settleItem is one order for settleAll: its order as loaded, the
// settlement, and whether the settle is its request's answer.
type settleItem struct {
	base   Order
	to     Settlement
	answer bool
	// unattempted: apply only if no charge attempt began since base was
	// loaded (its LastAttemptAt is still the order's last attempt).
	unattempted bool
}

// settleResult is settle's outcome for one settleItem.
type settleResult struct {
	order, answered Order
	changed         bool
	err             error // ErrNotFound, or the answer's statement failed
}

// settleSQL settles one order if it is still unsettled. "Still unsettled"
// is its WHERE clause, which PostgreSQL re-checks on the latest version of
// the row after waiting for a concurrent writer (READ COMMITTED's rule for
// UPDATE), so a concurrent settle is waited for, then seen; no SELECT … FOR
// UPDATE is needed, which saves a row lock's WAL record per order.
//
// With $7, only if no charge attempt began after $7 (SettleFromLookup).
//
// With $6 the commit does not wait for the WAL flush: the setting is local
// to the statement's transaction, and the setting in force when it commits
// decides; without, the session's (the server's) synchronous_commit
// applies as it is.
const settleSQL = `
	UPDATE orders SET
		status = $2,
		charge_id = nullif($3, ''),
		failure_reason = nullif($4, ''),
		updated_at = now(),
		answered_status = CASE WHEN $5 AND answered_status IS NULL THEN $2 ELSE answered_status END,
		answered_at = CASE WHEN $5 AND answered_status IS NULL THEN now() ELSE answered_at END
	FROM (SELECT CASE WHEN $6 THEN set_config('synchronous_commit', 'off', true) END) AS commit_mode
	WHERE id = $1 AND status IN ` + unsettledSQL + `
	  AND ($7::timestamptz IS NULL OR coalesce(last_attempt_at, created_at) = $7)
	RETURNING updated_at, answered_status, answered_at`

// answerSettledSQL records the state of an order that was settled already
// (its status no longer changes) as its request's answer, if it has none.
const answerSettledSQL = `
	UPDATE orders SET
		answered_status = CASE WHEN $2 AND answered_status IS NULL THEN status ELSE answered_status END,
		answered_at = CASE WHEN $2 AND answered_status IS NULL THEN updated_at ELSE answered_at END
	WHERE id = $1
	RETURNING status, coalesce(charge_id, ''), coalesce(failure_reason, ''), updated_at, answered_status, answered_at`

// settleAll is settle for several orders, returning one result per item in
// their order. Several go as one pipeline of settleSQL statements (eachRow)
// rather than as one statement over arrays, whose plan PostgreSQL caches:
// planned while the table is small, it is a hash join over a sequential
// scan, and stays one as the table grows. A second settle of one order in
// the pipeline sees the first's row, as a later statement would. An error
// is the whole pipeline's; only an order found settled already takes a
// statement of its own, to record its state as the answer.
func settleAll(ctx context.Context, q Querier, items []settleItem, async bool) ([]settleResult, error) {
	type settledRow struct {
		updatedAt      time.Time
		answeredStatus *Status
		answeredAt     *time.Time
	}
	rows := make([]settledRow, len(items))
	found := make([]bool, len(items))
	err := eachRow(ctx, q, settleSQL, len(items), func(i int) []any {
		it := items[i]
		var attemptedAt *time.Time
		if it.unattempted {
			attemptedAt = &it.base.LastAttemptAt
		}
		return []any{orderID(it.base.ID), it.to.Status, it.to.ChargeID, it.to.FailureReason, it.answer, async, attemptedAt}
	}, func(i int, row pgx.Row) error {
		err := row.Scan(&rows[i].updatedAt, &rows[i].answeredStatus, &rows[i].answeredAt)
		found[i] = err == nil
		if errors.Is(err, pgx.ErrNoRows) { // settled already, or no such order
			return nil
		}
		return err
	})
	if err != nil {
		return nil, err
	}

	results := make([]settleResult, len(items))
	for i, it := range items {
		// Only what a settle can change comes back: the rest of base is
		// immutable once written, and decoding the items again would cost
		// more than the statement (pprof).
		res, row, o := &results[i], rows[i], it.base
		if found[i] {
			o.Status, o.ChargeID, o.FailureReason = it.to.Status, it.to.ChargeID, it.to.FailureReason
		} else {
			err := q.QueryRow(ctx, answerSettledSQL, orderID(it.base.ID), it.answer).
				Scan(&o.Status, &o.ChargeID, &o.FailureReason, &row.updatedAt, &row.answeredStatus, &row.answeredAt)
			switch {
			case errors.Is(err, pgx.ErrNoRows):
				res.err = ErrNotFound
				continue
			case err != nil:
				res.err = fmt.Errorf("record the answer of settled order %s: %w", it.base.ID, err)
				continue
			}
		}
		o.UpdatedAt = row.updatedAt.UTC()
		res.order, res.changed = o, found[i]
		if row.answeredStatus != nil {
			res.answered = asAnswered(o, *row.answeredStatus, *row.answeredAt)
		}
	}
	return results, nil
}

// Settle is settle for the worker, on an order it loaded: no request waits
// for the answer.
func Settle(ctx context.Context, q Querier, base Order, s Settlement) (o Order, changed bool, err error) {
	o, _, changed, err = settle(ctx, q, base, s, false)
	return o, changed, err
}

// SettleFromLookup is Settle for an outcome learnt from the provider's
// lookup (Resolve) rather than from a charge: it applies only if no charge
// attempt began since base was loaded. A request that resumed the order
// meanwhile (MarkAttempt) may have a charge on its way that the lookup did
// not see yet; the order is then left as it is (changed false, o still
// unsettled) for a later lookup, once that attempt has had time to land.
func SettleFromLookup(ctx context.Context, q Querier, base Order, s Settlement) (o Order, changed bool, err error) {
	res, err := settleAll(ctx, q, []settleItem{{base: base, to: s, unattempted: true}}, false)
	if err != nil {
		return Order{}, false, fmt.Errorf("settle order %s as %s from a lookup: %w", base.ID, s.Status, err)
	}
	return res[0].order, res[0].changed, res[0].err
}

// MarkAttempt records, before a charge attempt, that one is being made, so
// that a later lookup knows how long to wait before it may trust "no
// charge" (see Resolve), and so that a worker's settle from a lookup made
// before it is refused (SettleFromLookup). It marks only an unsettled
// order and reports whether it did: an order settled meanwhile must not be
// charged. The API's own first attempt is recorded by the insert.
func MarkAttempt(ctx context.Context, q Querier, id uuid.UUID) (bool, error) {
	tag, err := q.Exec(ctx, `UPDATE orders SET last_attempt_at = now() WHERE id = $1 AND status IN `+unsettledSQL, orderID(id))
	if err != nil {
		return false, fmt.Errorf("record charge attempt of order %s: %w", id, err)
	}
	return tag.RowsAffected() == 1, nil
}

// Get loads an order.
func Get(ctx context.Context, q Querier, id uuid.UUID) (Order, error) {
	o, err := scanOrder(q.QueryRow(ctx, `SELECT `+orderColumns+` FROM orders o WHERE o.id = $1`, orderID(id)))
	if errors.Is(err, pgx.ErrNoRows) {
		return Order{}, ErrNotFound
	}
	if err != nil {
		return Order{}, fmt.Errorf("load order %s: %w", id, err)
	}
	return o, nil
}

// GetMany loads the orders among ids that exist, by id, in one statement.
func GetMany(ctx context.Context, q Querier, ids []uuid.UUID) (map[uuid.UUID]Order, error) {
	keys := make([]pgtype.UUID, len(ids))
	for i, id := range ids {
		keys[i] = orderID(id)
	}
	rows, err := q.Query(ctx, `SELECT `+orderColumns+` FROM orders o WHERE o.id = ANY($1)`, keys)
	if err != nil {
		return nil, fmt.Errorf("load %d orders: %w", len(ids), err)
	}
	defer rows.Close()
	found := make(map[uuid.UUID]Order, len(ids))
	for rows.Next() {
		o, err := scanOrder(rows)
		if err != nil {
			return nil, fmt.Errorf("load %d orders: %w", len(ids), err)
		}
		found[o.ID] = o
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("load %d orders: %w", len(ids), err)
	}
	return found, nil
}

// Unsettled returns up to limit orders in status whose last change is older
// than olderThan on the database's clock and that have no live charge job,
// oldest first: orders whose placing request died (pending) or whose job
// vanished (pending_payment). The status filter uses orders_unsettled_idx.
func Unsettled(ctx context.Context, q Querier, status Status, olderThan time.Duration, limit int) ([]uuid.UUID, error) {
	rows, err := q.Query(ctx, `
		SELECT o.id FROM orders o
		WHERE o.status IN `+unsettledSQL+` AND o.status = $1
		  AND o.updated_at < now() - make_interval(secs => $2)
		  AND NOT EXISTS (
			SELECT 1 FROM river_job j
			WHERE j.kind = $3 AND j.args @> jsonb_build_object('order_id', o.id)
			  AND j.state::text = ANY($4))
		ORDER BY o.updated_at
		LIMIT $5`, status, olderThan.Seconds(), ChargeArgs{}.Kind(), liveJobStateNames, limit)
	if err != nil {
		return nil, fmt.Errorf("find %s orders without a charge job: %w", status, err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		return nil, fmt.Errorf("find %s orders without a charge job: %w", status, err)
	}
	return ids, nil
}

// BacklogEntry is one unsettled status's share of the backlog.
type BacklogEntry struct {
	Status Status
	Count  int64
	Oldest time.Duration // age of the oldest order in Status; 0 when Count is 0
}

const backlogSQL = `
	SELECT status, count(*), extract(epoch FROM now() - min(created_at))
	FROM orders WHERE status IN ` + unsettledSQL + `
	GROUP BY status`

// Backlog counts the unsettled orders by status, with the age of the oldest
// of each. It reads orders_unsettled_idx only, so its cost follows the
// backlog, not the table. Every unsettled status is reported, zero or not.
func Backlog(ctx context.Context, q Querier) ([]BacklogEntry, error) {
	rows, err := q.Query(ctx, backlogSQL)
	if err != nil {
		return nil, fmt.Errorf("count unsettled orders: %w", err)
	}
	found := map[Status]BacklogEntry{}
	var (
		e   BacklogEntry
		age float64
	)
	if _, err := pgx.ForEachRow(rows, []any{&e.Status, &e.Count, &age}, func() error {
		e.Oldest = time.Duration(age * float64(time.Second))
		found[e.Status] = e
		return nil
	}); err != nil {
		return nil, fmt.Errorf("count unsettled orders: %w", err)
	}
	backlog := make([]BacklogEntry, len(UnsettledStatuses))
	for i, s := range UnsettledStatuses {
		backlog[i] = found[s]
		backlog[i].Status = s
	}
	return backlog, nil
}

// scanOrder reads orderColumns, then extra destinations in order.
func scanOrder(row pgx.Row, extra ...any) (Order, error) {
	var (
		o     Order
		items []byte
	)
	dest := append([]any{&o.ID, &o.Status, &o.CustomerID, &o.Currency, &o.PaymentMethod, &items, &o.Total,
		&o.ChargeID, &o.FailureReason, &o.CreatedAt, &o.UpdatedAt, &o.LastAttemptAt}, extra...)
	if err := row.Scan(dest...); err != nil {
		return Order{}, err
	}
	if err := json.Unmarshal(items, &o.Items); err != nil {
		return Order{}, fmt.Errorf("decode items of order %s: %w", o.ID, err)
	}
	o.CreatedAt, o.UpdatedAt, o.LastAttemptAt = o.CreatedAt.UTC(), o.UpdatedAt.UTC(), o.LastAttemptAt.UTC()
	return o, nil
}
