-- +goose Up

-- One row per dependency whose circuit breaker the fleet shares
-- (internal/fleet). Processes learn of a change through NOTIFY on channel
-- breaker_states (payload: the dependency) and read the row; a process that
-- starts or reconnects reads it first. No call to the dependency ever reads
-- it: each process keeps what it read in memory.
--
-- * state: closed (each process's own breaker decides), open (refuse until
--   "until", then one process probes for all), forced_open (an operator:
--   refuse until "until", or until cleared when it is NULL).
-- * until is the database's clock; processes turn it into "time left"
--   (until - now()) when they read it, so their own clocks never matter.
-- * failed_probes: consecutive failed probes of this outage; each makes the
--   next open state longer (resilience.Config.BreakDuration).
-- * probe_holder / probe_until: the probe lease. Only the holder lets calls
--   through while half-open; it expires, so a holder that dies or is cut
--   off frees it for another process.
-- * generation grows with every write, so a process can tell a state it
--   has already applied from a new one.
CREATE TABLE breaker_states (
    dependency    text PRIMARY KEY,
    state         text NOT NULL CHECK (state IN ('closed', 'open', 'forced_open')),
    until         timestamptz,
    failed_probes integer NOT NULL DEFAULT 0 CHECK (failed_probes >= 0),
    probe_holder  text,
    probe_until   timestamptz,
    source        text NOT NULL,
    generation    bigint NOT NULL DEFAULT 1,
    updated_at    timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT breaker_states_open_has_deadline CHECK (state <> 'open' OR until IS NOT NULL),
    CONSTRAINT breaker_states_lease_complete CHECK ((probe_holder IS NULL) = (probe_until IS NULL))
);

-- +goose Down
DROP TABLE breaker_states;
