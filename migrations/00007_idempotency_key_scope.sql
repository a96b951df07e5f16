-- +goose NO TRANSACTION
-- +goose Up

-- An Idempotency-Key is unique per scope, not globally: with authentication
-- on (docs/design.md, "Authentication") the scope is the customer the token
-- names, and a replay is answered to its own customer only. Without
-- authentication the scope is '', so every key stored before this migration
-- keeps its meaning and every request keeps its behaviour.
--
-- This is the expand half of an expand/contract change (docs/operations.md,
-- "Writing a migration: expand, then contract"). The primary key on key
-- alone stays, so the previous release's first write, ON CONFLICT (key),
-- still finds the unique index it names while its pods run beside this
-- release's during a rolling update; this release's ON CONFLICT
-- (scope, key) uses the unique index added here. While both stand, a key
-- is still unique across scopes: the same key sent by a second customer is
-- refused with 422 (internal/order, insertOrdersWithKeys) rather than
-- making a second order. The contract half (the primary key moved to
-- (scope, key), the uniqueness of key alone dropped) is a later release's
-- migration, written once no pod of a release before this one runs.
--
-- 00007 was first released with that swap in it, and every order taken by
-- the previous release's pods failed (42P10) until the rollout ended. A
-- database that applied it keeps its shape: primary key (scope, key), no
-- unique index on key alone. goose records version 7 as applied there and
-- never runs this file on it. This release's code works on both shapes
-- (internal/database/migrate_compat_test.go checks it), and the contract
-- migration must accept both.
--
-- No length check on scope: it is the order's customer_id, which the same
-- statement writes into orders, where orders_customer_id_length checks it.
--
-- No transaction, two steps, so writers are not blocked while the index is
-- built: a column with a constant default changes only the catalog; the
-- unique index is built CONCURRENTLY. An interrupted CONCURRENTLY leaves an
-- INVALID index behind: drop it (DROP INDEX CONCURRENTLY
-- idempotency_keys_scope_key) before running the migration again.
ALTER TABLE idempotency_keys ADD COLUMN IF NOT EXISTS scope text NOT NULL DEFAULT '';

CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS idempotency_keys_scope_key
    ON idempotency_keys (scope, key);

-- +goose Down
-- Back to 00006's primary key on key alone, from either shape of 00007:
-- the index on key is built first (on this file's shape it repeats the
-- primary key until the swap), so on the first release's shape it fails,
-- changing nothing, while two scopes hold the same key: going back to one
-- order per key would have to drop one of their keys, which is not this
-- migration's call. Dropping scope drops idempotency_keys_scope_key.
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS idempotency_keys_key ON idempotency_keys (key);

ALTER TABLE idempotency_keys
    DROP CONSTRAINT idempotency_keys_pkey,
    ADD CONSTRAINT idempotency_keys_pkey PRIMARY KEY USING INDEX idempotency_keys_key,
    DROP COLUMN scope;
