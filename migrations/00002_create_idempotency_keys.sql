-- +goose Up

-- One row per Idempotency-Key the API has accepted (IETF Idempotency-Key
-- draft). The primary key is what makes "one key, one order" hold under any
-- concurrency: a second request with the same key cannot insert its own row.
--
-- locked_until is the in-progress lock: while it is in the future and no
-- response is stored, a request with the same key gets 409. A process that
-- dies mid-request leaves the lock behind; once it expires a client retry may
-- take the request over (brandur's "recovery point" idea, with order_id
-- telling how far the first attempt got).
CREATE TABLE idempotency_keys (
    key                   text        PRIMARY KEY,
    request_fingerprint   bytea       NOT NULL,
    order_id              uuid        REFERENCES orders (id),
    locked_until          timestamptz,
    response_status       integer,
    response_content_type text,
    response_location     text,
    response_body         bytea,
    created_at            timestamptz NOT NULL DEFAULT now(),

    CONSTRAINT idempotency_keys_key_format CHECK (key ~ '^[\x21-\x7e]{1,255}$'),
    CONSTRAINT idempotency_keys_fingerprint_sha256 CHECK (octet_length(request_fingerprint) = 32),
    CONSTRAINT idempotency_keys_response_status_http
        CHECK (response_status BETWEEN 100 AND 599),
    -- A stored response is whole or absent: replaying half of one would break
    -- the byte-identical replay promise.
    CONSTRAINT idempotency_keys_response_complete
        CHECK ((response_status IS NULL) = (response_body IS NULL)
           AND (response_status IS NULL) = (response_content_type IS NULL))
);

-- The retention job deletes keys older than the retention period (24 h by
-- default) in created_at order.
CREATE INDEX idempotency_keys_created_at_idx ON idempotency_keys (created_at);

-- +goose Down
DROP TABLE idempotency_keys;
