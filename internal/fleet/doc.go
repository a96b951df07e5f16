// Package fleet makes the circuit breakers of every process that calls one
// dependency — each checkout replica and each worker — behave as one
// breaker towards it (docs/design.md, "Fleet breaker"): when one opens, all refuse
// calls until the same moment; when that moment comes, one process probes
// for all, and its verdict closes or re-opens the breaker everywhere. An
// operator can also force a dependency open (planned maintenance) and
// clear it again ([Force], [Clear], [Statuses]; `checkout breaker …`).
//
// # Transitions are shared, calls are not
//
// No call to the dependency waits for, or even reads, the shared state: a
// [Coordinator] per process keeps it in memory and imposes it on the
// process's [resilience.Policy] ([resilience.Policy.Impose]), which the
// per-call path checks with atomic reads. gobreaker's
// DistributedCircuitBreaker does the opposite — it takes a store-wide lock
// around every call — and would make the database the bottleneck of every
// payment. What crosses processes is rare: a breaker opened, a probe lease
// was taken, a verdict came in, an operator acted.
//
// # One key per dependency, not per role
//
// checkout's policy is named "payment" and the worker's "payment-worker":
// two configurations (the worker trips sooner and probes with one call),
// but one provider. An outage the API has seen is the outage the worker's
// deferred charges will run into, and the other way round, so both
// coordinate under the dependency's name, "payment". Sharing per role
// would let every worker replica rediscover the outage on its own calls,
// which is exactly the cost invariant 10 forbids.
//
// # Postgres is the only shared component
//
// Table breaker_states (migrations/00005_breaker_states.sql) holds one row
// per dependency: state (closed, open, forced_open), until (its deadline),
// failed_probes, the probe lease (probe_holder, probe_until), source and a
// generation. Every write notifies channel breaker_states in the same
// statement; each coordinator listens on a dedicated connection
// (pgx WaitForNotification) and re-reads the row, which takes a round trip
// or two: other processes learn of an opening within milliseconds, so an
// outage costs the provider about one process's worth of hung calls
// (docs/design.md, "Invariants", 10). A process that starts, or reconnects after
// losing the database, reads the row first. A coordinator also re-reads it
// every RefreshEvery, so a lost notification costs at most that.
//
// Deadlines are the database's (now() + interval) and are turned into time
// left when read, so no process's clock needs to agree with another's.
//
// # The states, as a process sees them
//
//   - closed: nothing imposed; the process's own breaker decides.
//   - open, until in the future: every call refused (ErrOpen) until then.
//     The deadline is the opener's own open time; a later opening extends
//     it (the later deadline wins), an earlier one never shortens it.
//   - open, until passed: half-open for the fleet. Each coordinator tries
//     to take the probe lease (an UPDATE that only one can win while the
//     lease is free or expired); one whose process has had no call since
//     the opening waits a quarter of the lease first, so the lease goes to
//     a process that will actually probe. The holder admits its policy's usual
//     HalfOpenProbes calls; every other process keeps refusing
//     (ErrTooManyRequests) until the verdict or the lease's end. All
//     probes succeed → closed, everywhere. One fails → open again for
//     the prober's BreakDuration (the open duration, jittered).
//   - forced_open: every call refused until until, or until cleared.
//
// # Only an operator keeps a dependency open
//
// Each imposed state carries its own end: an open state ends at its
// deadline, a probe lease at its expiry. If the coordinator is cut off
// from the database, it says so (resilience_fleet_connected 0 and a log
// line), keeps reconnecting with backoff, and whatever it last imposed
// runs out by its own deadline: from then on the process's own breaker
// decides alone. A lost NOTIFY, a partitioned process or a dead probe
// holder therefore cost at most one deadline, never a fleet stuck open.
//
// A forced state is the exception: it is imposed in slices of ForcedSlice,
// renewed at every read and, while reads fail or the database is out of
// reach, at every failed read and every RefreshEvery, so it ends only when
// a successful read says it is cleared or at its own end time. A busy
// database must not end an operator's maintenance window early, and
// holding it costs nothing a process could do instead: without the
// database checkout cannot accept an order durably, nor the worker fetch
// a job. A failed read is retried after RetryEvery rather than at the next
// notification.
//
// A process that starts reads the row before it serves: [Coordinator.Start]
// returns after the first read, or after StartWait (2 s) if the database
// cannot be reached, when the process's own breaker decides alone.
package fleet
