-- The ledger reconciliation (internal/ledger/ledger.go): where the walk of the
-- provider's charge list stopped, and the charges it found that no paid order
-- accounts for, for an operator to read (`checkout reconcile`).

-- +goose Up
CREATE TABLE ledger_watermark (
    provider       text PRIMARY KEY,
    last_charge_id text NOT NULL,
    last_created   timestamptz NOT NULL,
    updated_at     timestamptz NOT NULL
);

CREATE TABLE ledger_findings (
    charge_id    text PRIMARY KEY,
    reference    text NOT NULL,
    amount       bigint NOT NULL,
    currency     text NOT NULL,
    charged_at   timestamptz NOT NULL,
    kind         text NOT NULL CHECK (kind IN ('no_order', 'order_failed', 'second_charge', 'settled_paid')),
    order_status text,
    found_at     timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE ledger_findings;
DROP TABLE ledger_watermark;
