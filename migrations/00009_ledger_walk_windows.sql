-- The ledger reconciliation (internal/ledger/ledger.go) walks the provider's
-- charge list in windows of creation time that overlap by a bounded
-- look-back, because a charge can appear in the list after charges created
-- later than it (a request the provider worked on for long). ledger_walk is
-- where it stands: the window being walked and the cursor in it, and where
-- the next window starts. It is a new table rather than new columns of
-- ledger_watermark, which the previous release's workers keep writing while
-- a rolling update runs; the first walk of this release starts from that
-- watermark, less the look-back.
--
-- A charge for an order of another amount or currency is a finding of its
-- own, charge_mismatch: the walk no longer settles such an order as paid.
-- The previous release writes only the old kinds, which the new check
-- still allows.

-- +goose Up
CREATE TABLE ledger_walk (
    provider      text PRIMARY KEY,
    -- The window being walked, [window_from, window_to] by creation time;
    -- both NULL between windows.
    window_from   timestamptz,
    window_to     timestamptz,
    -- The last charge checked in the window, '' before its first page.
    cursor        text NOT NULL DEFAULT '',
    -- The earliest creation time of a charge the window left for a later
    -- walk (its order was unsettled and within the grace), if any.
    waiting_from  timestamptz,
    -- Where the next window starts.
    next_from     timestamptz NOT NULL,
    updated_at    timestamptz NOT NULL,
    CHECK ((window_from IS NULL) = (window_to IS NULL))
);

ALTER TABLE ledger_findings
    DROP CONSTRAINT ledger_findings_kind_check,
    ADD CONSTRAINT ledger_findings_kind_check
        CHECK (kind IN ('no_order', 'order_failed', 'second_charge', 'settled_paid', 'charge_mismatch'));

-- +goose Down
-- Fails, changing nothing, while a charge_mismatch finding is stored: an
-- operator's finding is not this migration's to drop.
ALTER TABLE ledger_findings
    DROP CONSTRAINT ledger_findings_kind_check,
    ADD CONSTRAINT ledger_findings_kind_check
        CHECK (kind IN ('no_order', 'order_failed', 'second_charge', 'settled_paid'));
DROP TABLE ledger_walk;
