-- +goose Up

-- Orders are the system of record for checkout. The id is the API's order id
-- and also the payment provider's `reference`.
--
-- Items are a JSONB array on the order rather than an order_lines table: they
-- are written once, never updated, always read together with their order and
-- never queried on their own, so a join would buy nothing. The shape is still
-- checked here; the per-field rules (lengths, ranges) live in internal/order,
-- where they produce 422 answers field by field.
CREATE TABLE orders (
    id             uuid        PRIMARY KEY,
    status         text        NOT NULL,
    customer_id    text        NOT NULL,
    currency       text        NOT NULL,
    payment_method text        NOT NULL,
    items          jsonb       NOT NULL,
    total          bigint      NOT NULL,
    charge_id      text,
    failure_reason text,
    created_at     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now(),

    CONSTRAINT orders_status_known
        CHECK (status IN ('pending', 'pending_payment', 'paid', 'payment_failed')),
    CONSTRAINT orders_total_non_negative CHECK (total >= 0),
    CONSTRAINT orders_customer_id_length CHECK (char_length(customer_id) BETWEEN 1 AND 64),
    CONSTRAINT orders_payment_method_length CHECK (char_length(payment_method) BETWEEN 1 AND 64),
    CONSTRAINT orders_currency_iso4217 CHECK (currency ~ '^[A-Z]{3}$'),
    CONSTRAINT orders_items_array
        CHECK (jsonb_typeof(items) = 'array' AND jsonb_array_length(items) BETWEEN 1 AND 100),
    -- A paid order always names its charge and only a paid order has one; a
    -- failed order always says why. These make half-settled rows impossible.
    CONSTRAINT orders_charge_id_iff_paid CHECK ((status = 'paid') = (charge_id IS NOT NULL)),
    CONSTRAINT orders_failure_reason_iff_failed
        CHECK ((status = 'payment_failed') = (failure_reason IS NOT NULL))
);

-- The worker's backlog metrics and the experiment's audit look orders up by
-- status; only the non-terminal states are interesting, so index only those.
CREATE INDEX orders_unsettled_idx ON orders (created_at)
    WHERE status IN ('pending', 'pending_payment');

-- +goose Down
DROP TABLE orders;
