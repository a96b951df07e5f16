-- +goose Up

-- The answer a request got is now recorded on its order, as a domain
-- snapshot, instead of as rendered HTTP bytes on its Idempotency-Key row:
--
-- * answered_status / answered_at: the order's status and updated_at as the
--   placing request's response showed them. Everything else an answer
--   contains is immutable once written (items, total, timestamps of
--   creation) or final once settled (charge_id, failure_reason), so the API
--   rebuilds the first response byte for byte from the row
--   (internal/order asAnswered, internal/api renders it).
-- * settling an order and recording its answer is then one UPDATE of one
--   row, where it used to be an order update plus a key update carrying the
--   whole response body.
-- * last_attempt_at: when the latest charge attempt began. Before the worker
--   trusts the provider's "no charge for this reference", every attempt
--   must have had time to finish (internal/worker).
--
-- Nullable columns without a default change only the catalog (no table
-- rewrite), and the checks are NOT VALID — every existing row has NULLs,
-- which pass them — so this holds its lock on orders for milliseconds.
-- Orders of earlier releases have no last_attempt_at; the code reads
-- coalesce(last_attempt_at, created_at) for them.
ALTER TABLE orders
    ADD COLUMN answered_status text,
    ADD COLUMN answered_at     timestamptz,
    ADD COLUMN last_attempt_at timestamptz,
    ADD CONSTRAINT orders_answered_status_known
        CHECK (answered_status IN ('pending_payment', 'paid', 'payment_failed')) NOT VALID,
    ADD CONSTRAINT orders_answer_complete
        CHECK ((answered_status IS NULL) = (answered_at IS NULL)) NOT VALID;

-- Answers stored by earlier releases, carried over (as many rows as a day of
-- orders: keys older than their retention are pruned). A 402's body names no
-- time, so the order's own updated_at stands in for it (402 bodies do not
-- show it either).
UPDATE orders o
SET answered_status = CASE k.response_status
        WHEN 201 THEN 'paid' WHEN 202 THEN 'pending_payment' ELSE 'payment_failed' END,
    answered_at = coalesce(
        (convert_from(k.response_body, 'UTF8')::jsonb ->> 'updated_at')::timestamptz, o.updated_at)
FROM idempotency_keys k
WHERE k.order_id = o.id AND k.response_status IN (201, 202, 402);

-- idempotency_keys.response_* are no longer written; a later release drops
-- them. An earlier release's replica running beside this one would find no
-- answer there for new keys and resume the request instead of replaying it:
-- the charge is repeated under the same provider key (the provider replays
-- it), so nothing is charged twice, but the replay is not byte-identical.
-- Replace replicas rather than mixing releases across this migration.

-- +goose Down
ALTER TABLE orders
    DROP COLUMN answered_status,
    DROP COLUMN answered_at,
    DROP COLUMN last_attempt_at;
