-- Migration 00007 as it was first released (git show 39d4958:migrations/00007_idempotency_key_scope.sql),
-- kept word for word below this header. It swapped the primary key of idempotency_keys to
-- (scope, key), so the previous release's ON CONFLICT (key) failed with 42P10. Databases that
-- applied it keep that shape, since goose does not run a version twice; migrate_compat_test.go
-- checks the releases since on it, and that the check catches this migration.

-- +goose NO TRANSACTION
-- +goose Up

-- An Idempotency-Key is unique per scope, not globally: with authentication
-- on (docs/design.md, "Authentication") the scope is the customer the token
-- names, so the same key sent by two customers makes two orders and a replay
-- is answered to its own customer only. Without authentication the scope is
-- '', so every key stored before this migration keeps its meaning and every
-- request keeps its behaviour.
--
-- No length check on scope: it is the order's customer_id, which the same
-- statement writes into orders, where orders_customer_id_length checks it.
--
-- No transaction, three steps, so writers are not blocked while the index is
-- built: a column with a constant default changes only the catalog; the
-- unique index is built CONCURRENTLY; the swap of the primary key then takes
-- a brief ACCESS EXCLUSIVE lock and checks nothing (the index is already
-- unique and both columns are NOT NULL). An interrupted CONCURRENTLY leaves
-- an INVALID index behind: drop it (DROP INDEX CONCURRENTLY
-- idempotency_keys_scope_key) before running the migration again.
ALTER TABLE idempotency_keys ADD COLUMN IF NOT EXISTS scope text NOT NULL DEFAULT '';

CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS idempotency_keys_scope_key
    ON idempotency_keys (scope, key);

ALTER TABLE idempotency_keys
    DROP CONSTRAINT idempotency_keys_pkey,
    ADD CONSTRAINT idempotency_keys_pkey PRIMARY KEY USING INDEX idempotency_keys_scope_key;

-- +goose Down
-- The unique index on key alone is built first, so it fails, changing
-- nothing, while two scopes hold the same key: going back to one order per
-- key would have to drop one of their keys, which is not this migration's
-- call.
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS idempotency_keys_key ON idempotency_keys (key);

ALTER TABLE idempotency_keys
    DROP CONSTRAINT idempotency_keys_pkey,
    ADD CONSTRAINT idempotency_keys_pkey PRIMARY KEY USING INDEX idempotency_keys_key,
    DROP COLUMN scope;
