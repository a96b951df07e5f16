-- The release before migration 00007: every statement checkout and the worker
-- sent to the application's tables, as the tree just before 00007 was added
-- had them (git show 581f937:internal/order/store.go, and likewise
-- internal/idempotency/idempotency.go, internal/fleet/store.go and
-- internal/fleet/operator.go), with literal sample values for their
-- parameters. migrate_compat_test.go (internal/database) runs them before and
-- after migration 00007; the header of that file says how to write one.

-- seed: a first write whose order is still pending
WITH claimed AS (
    INSERT INTO idempotency_keys (key, request_fingerprint, order_id, locked_until)
    VALUES ('compat-pending', decode(repeat('ab', 32), 'hex'), '01900000-0000-7000-8000-000000000001', now() + make_interval(secs => 7))
    ON CONFLICT (key) DO NOTHING
    RETURNING order_id
)
INSERT INTO orders (id, status, customer_id, currency, payment_method, items, total,
                    created_at, updated_at, last_attempt_at)
SELECT order_id, 'pending', 'cus_1', 'USD', 'pm_card_visa', '[{"sku":"SKU-1","quantity":2,"unit_price":1299}]'::text::jsonb, 2598, now(), now(), now()
FROM claimed
RETURNING created_at;

-- seed: a first write whose order the API settled as paid, with its answer
WITH claimed AS (
    INSERT INTO idempotency_keys (key, request_fingerprint, order_id, locked_until)
    VALUES ('compat-paid', decode(repeat('ab', 32), 'hex'), '01900000-0000-7000-8000-000000000002', now() + make_interval(secs => 7))
    ON CONFLICT (key) DO NOTHING
    RETURNING order_id
)
INSERT INTO orders (id, status, customer_id, currency, payment_method, items, total,
                    created_at, updated_at, last_attempt_at)
SELECT order_id, 'pending', 'cus_1', 'USD', 'pm_card_visa', '[{"sku":"SKU-1","quantity":2,"unit_price":1299}]'::text::jsonb, 2598, now(), now(), now()
FROM claimed
RETURNING created_at;
UPDATE orders SET
    status = 'paid',
    charge_id = nullif('ch_compat', ''),
    failure_reason = nullif('', ''),
    updated_at = now(),
    answered_status = CASE WHEN true AND answered_status IS NULL THEN 'paid' ELSE answered_status END,
    answered_at = CASE WHEN true AND answered_status IS NULL THEN now() ELSE answered_at END
FROM (SELECT CASE WHEN false THEN set_config('synchronous_commit', 'off', true) END) AS commit_mode
WHERE id = '01900000-0000-7000-8000-000000000002' AND status IN ('pending', 'pending_payment')
  AND (NULL::timestamptz IS NULL OR coalesce(last_attempt_at, created_at) = NULL::timestamptz)
RETURNING updated_at, answered_status, answered_at;

-- seed: the fleet's breaker for the provider, opened by one process
WITH w AS (
    INSERT INTO breaker_states AS b (dependency, state, until, source)
    VALUES ('payment', 'open', now() - make_interval(secs => 1), 'checkout-a')
    ON CONFLICT (dependency) DO UPDATE
    SET state = 'open', until = EXCLUDED.until, source = EXCLUDED.source,
        failed_probes = CASE WHEN b.state = 'open' THEN b.failed_probes ELSE 0 END,
        probe_holder = NULL, probe_until = NULL,
        generation = b.generation + 1, updated_at = now()
    WHERE b.state = 'closed'
       OR (b.state = 'forced_open' AND b.until <= now())
       OR (b.state = 'open' AND b.until < EXCLUDED.until AND b.probe_holder IS NULL)
    RETURNING dependency)
SELECT count(pg_notify('breaker_states', dependency)) FROM w;

-- case: first write of a new key (insertOrdersWithKeys)
WITH claimed AS (
    INSERT INTO idempotency_keys (key, request_fingerprint, order_id, locked_until)
    VALUES ('compat-new', decode(repeat('ab', 32), 'hex'), '01900000-0000-7000-8000-000000000010', now() + make_interval(secs => 7))
    ON CONFLICT (key) DO NOTHING
    RETURNING order_id
)
INSERT INTO orders (id, status, customer_id, currency, payment_method, items, total,
                    created_at, updated_at, last_attempt_at)
SELECT order_id, 'pending', 'cus_1', 'USD', 'pm_card_visa', '[{"sku":"SKU-1","quantity":2,"unit_price":1299}]'::text::jsonb, 2598, now(), now(), now()
FROM claimed
RETURNING created_at;

-- case: first write of a key seen before, which writes nothing
WITH claimed AS (
    INSERT INTO idempotency_keys (key, request_fingerprint, order_id, locked_until)
    VALUES ('compat-pending', decode(repeat('ab', 32), 'hex'), '01900000-0000-7000-8000-000000000011', now() + make_interval(secs => 7))
    ON CONFLICT (key) DO NOTHING
    RETURNING order_id
)
INSERT INTO orders (id, status, customer_id, currency, payment_method, items, total,
                    created_at, updated_at, last_attempt_at)
SELECT order_id, 'pending', 'cus_1', 'USD', 'pm_card_visa', '[{"sku":"SKU-1","quantity":2,"unit_price":1299}]'::text::jsonb, 2598, now(), now(), now()
FROM claimed
RETURNING created_at;

-- case: a key seen before is read, taken over and its order loaded (lookupKey)
SELECT k.request_fingerprint, o.id IS NOT NULL, coalesce(k.locked_until > now(), false),
       o.answered_status, o.answered_at
FROM idempotency_keys k LEFT JOIN orders o ON o.id = k.order_id
WHERE k.key = 'compat-pending'
FOR UPDATE OF k;
UPDATE idempotency_keys SET locked_until = now() + make_interval(secs => 7) WHERE key = 'compat-pending';
SELECT o.id, o.status, o.customer_id, o.currency, o.payment_method, o.items, o.total,
    coalesce(o.charge_id, ''), coalesce(o.failure_reason, ''), o.created_at, o.updated_at, coalesce(o.last_attempt_at, o.created_at)
FROM orders o JOIN idempotency_keys k ON k.order_id = o.id WHERE k.key = 'compat-pending';

-- case: a key's lock is released without an answer (releaseKey)
UPDATE idempotency_keys SET locked_until = NULL WHERE key = 'compat-pending';

-- case: the API settles an order and records its answer, committing asynchronously (settleAll)
UPDATE orders SET
    status = 'paid',
    charge_id = nullif('ch_compat_1', ''),
    failure_reason = nullif('', ''),
    updated_at = now(),
    answered_status = CASE WHEN true AND answered_status IS NULL THEN 'paid' ELSE answered_status END,
    answered_at = CASE WHEN true AND answered_status IS NULL THEN now() ELSE answered_at END
FROM (SELECT CASE WHEN true THEN set_config('synchronous_commit', 'off', true) END) AS commit_mode
WHERE id = '01900000-0000-7000-8000-000000000001' AND status IN ('pending', 'pending_payment')
  AND (NULL::timestamptz IS NULL OR coalesce(last_attempt_at, created_at) = NULL::timestamptz)
RETURNING updated_at, answered_status, answered_at;

-- case: the worker settles an order from a lookup (SettleFromLookup)
UPDATE orders SET
    status = 'payment_failed',
    charge_id = nullif('', ''),
    failure_reason = nullif('provider_unavailable', ''),
    updated_at = now(),
    answered_status = CASE WHEN false AND answered_status IS NULL THEN 'payment_failed' ELSE answered_status END,
    answered_at = CASE WHEN false AND answered_status IS NULL THEN now() ELSE answered_at END
FROM (SELECT CASE WHEN false THEN set_config('synchronous_commit', 'off', true) END) AS commit_mode
WHERE id = '01900000-0000-7000-8000-000000000001' AND status IN ('pending', 'pending_payment')
  AND ('2026-01-01 00:00:00+00'::timestamptz IS NULL OR coalesce(last_attempt_at, created_at) = '2026-01-01 00:00:00+00'::timestamptz)
RETURNING updated_at, answered_status, answered_at;

-- case: the answer of an order settled already is recorded (settleAll)
UPDATE orders SET
    answered_status = CASE WHEN true AND answered_status IS NULL THEN status ELSE answered_status END,
    answered_at = CASE WHEN true AND answered_status IS NULL THEN updated_at ELSE answered_at END
WHERE id = '01900000-0000-7000-8000-000000000002'
RETURNING status, coalesce(charge_id, ''), coalesce(failure_reason, ''), updated_at, answered_status, answered_at;

-- case: a charge attempt is recorded (MarkAttempt)
UPDATE orders SET last_attempt_at = now() WHERE id = '01900000-0000-7000-8000-000000000001' AND status IN ('pending', 'pending_payment');

-- case: an order is loaded (Get)
SELECT o.id, o.status, o.customer_id, o.currency, o.payment_method, o.items, o.total,
    coalesce(o.charge_id, ''), coalesce(o.failure_reason, ''), o.created_at, o.updated_at, coalesce(o.last_attempt_at, o.created_at)
FROM orders o WHERE o.id = '01900000-0000-7000-8000-000000000001';

-- case: the worker's sweep finds unsettled orders without a charge job (Unsettled)
SELECT o.id FROM orders o
WHERE o.status IN ('pending', 'pending_payment') AND o.status = 'pending'
  AND o.updated_at < now() - make_interval(secs => 10)
  AND NOT EXISTS (
    SELECT 1 FROM river_job j
    WHERE j.kind = 'charge_order' AND j.args @> jsonb_build_object('order_id', o.id)
      AND j.state::text = ANY(ARRAY['available', 'pending', 'retryable', 'running', 'scheduled']))
ORDER BY o.updated_at
LIMIT 100;

-- case: the backlog gauges (Backlog)
SELECT status, count(*), extract(epoch FROM now() - min(created_at))
FROM orders WHERE status IN ('pending', 'pending_payment')
GROUP BY status;

-- case: the retention job deletes expired keys (idempotency.DeleteExpired)
DELETE FROM idempotency_keys
WHERE key IN (
    SELECT key FROM idempotency_keys
    WHERE created_at < now() - make_interval(secs => 0)
      AND (locked_until IS NULL OR locked_until < now())
    ORDER BY created_at
    LIMIT 1000);

-- case: a process reads the fleet's breaker (fleet read)
SELECT
       state,
       extract(epoch FROM until - now())::float8,
       failed_probes,
       probe_holder,
       extract(epoch FROM probe_until - now())::float8,
       source, generation, updated_at
FROM breaker_states WHERE dependency = 'payment';

-- case: a process's breaker opens the fleet's (fleet opened)
WITH w AS (
    INSERT INTO breaker_states AS b (dependency, state, until, source)
    VALUES ('payment', 'open', now() + make_interval(secs => 5), 'checkout-b')
    ON CONFLICT (dependency) DO UPDATE
    SET state = 'open', until = EXCLUDED.until, source = EXCLUDED.source,
        failed_probes = CASE WHEN b.state = 'open' THEN b.failed_probes ELSE 0 END,
        probe_holder = NULL, probe_until = NULL,
        generation = b.generation + 1, updated_at = now()
    WHERE b.state = 'closed'
       OR (b.state = 'forced_open' AND b.until <= now())
       OR (b.state = 'open' AND b.until < EXCLUDED.until AND b.probe_holder IS NULL)
    RETURNING dependency)
SELECT count(pg_notify('breaker_states', dependency)) FROM w;

-- case: a process takes the probe lease, and its probe succeeds (fleet takeLease, probeSucceeded)
WITH w AS (
    UPDATE breaker_states
    SET probe_holder = 'checkout-a', probe_until = now() + make_interval(secs => 3),
        generation = generation + 1, updated_at = now()
    WHERE dependency = 'payment' AND state = 'open' AND until <= now()
      AND (probe_holder IS NULL OR probe_until <= now())
    RETURNING dependency)
SELECT count(pg_notify('breaker_states', dependency)) FROM w;
WITH w AS (
    UPDATE breaker_states
    SET state = 'closed', until = NULL, failed_probes = 0,
        probe_holder = NULL, probe_until = NULL, source = 'checkout-a',
        generation = generation + 1, updated_at = now()
    WHERE dependency = 'payment' AND state = 'open' AND probe_holder = 'checkout-a'
    RETURNING dependency)
SELECT count(pg_notify('breaker_states', dependency)) FROM w;

-- case: a process takes the probe lease, and its probe fails (fleet takeLease, probeFailed)
WITH w AS (
    UPDATE breaker_states
    SET probe_holder = 'checkout-a', probe_until = now() + make_interval(secs => 3),
        generation = generation + 1, updated_at = now()
    WHERE dependency = 'payment' AND state = 'open' AND until <= now()
      AND (probe_holder IS NULL OR probe_until <= now())
    RETURNING dependency)
SELECT count(pg_notify('breaker_states', dependency)) FROM w;
WITH w AS (
    UPDATE breaker_states
    SET until = now() + make_interval(secs => 10), failed_probes = failed_probes + 1,
        probe_holder = NULL, probe_until = NULL, source = 'checkout-a',
        generation = generation + 1, updated_at = now()
    WHERE dependency = 'payment' AND state = 'open' AND probe_holder = 'checkout-a'
    RETURNING dependency)
SELECT count(pg_notify('breaker_states', dependency)) FROM w;

-- case: an operator forces the breaker open, then clears it (fleet forceOpen, clearState)
WITH w AS (
    INSERT INTO breaker_states AS b (dependency, state, until, source)
    VALUES ('payment', 'forced_open', now() + make_interval(secs => 60), 'operator')
    ON CONFLICT (dependency) DO UPDATE
    SET state = 'forced_open', until = EXCLUDED.until, source = EXCLUDED.source,
        failed_probes = 0, probe_holder = NULL, probe_until = NULL,
        generation = b.generation + 1, updated_at = now()
    RETURNING dependency)
SELECT count(pg_notify('breaker_states', dependency)) FROM w;
WITH w AS (
    UPDATE breaker_states
    SET state = 'closed', until = NULL, failed_probes = 0,
        probe_holder = NULL, probe_until = NULL, source = 'operator',
        generation = generation + 1, updated_at = now()
    WHERE dependency = 'payment'
    RETURNING dependency)
SELECT count(pg_notify('breaker_states', dependency)) FROM w;

-- case: an operator lists the breakers (fleet.Statuses)
SELECT dependency,
       state,
       extract(epoch FROM until - now())::float8,
       failed_probes,
       probe_holder,
       extract(epoch FROM probe_until - now())::float8,
       source, generation, updated_at
FROM breaker_states ORDER BY dependency;
