package experiment

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// Audit checks the invariants (docs/design.md, "Invariants") for a run's orders once the worker had time to settle
// them: every acknowledged order is stored, every order ends terminal, none is charged twice.
type Audit struct {
	Acknowledged int `json:"acknowledged"` // distinct orders answered 201, 202 or 402
	Accepted     int `json:"accepted"`     // of those, answered 201 or 202
	Stored       int `json:"stored"`       // rows of this run in Postgres, acknowledged or not
	Paid         int `json:"paid"`
	Failed       int `json:"payment_failed"`
	StillPending int `json:"still_pending"` // pending or pending_payment when the drain ended
	// Lost are acknowledged orders with no row: invariant 1 broken.
	Lost []string `json:"lost"`
	// DoubleCharged counts orders the provider charged more than once: invariant 3 broken.
	DoubleCharged int `json:"double_charged"`
	// ProviderCharges counts the provider's successful charges during the run.
	ProviderCharges int `json:"provider_charges"`
	// ProviderMaxInFlight is the most charges the provider processed at once in the whole
	// run, recovery and drain included; ProviderMaxInFlightOutage the most while the fault
	// was active: the calls piled on the failing provider (the article's slow-phase figure).
	ProviderMaxInFlight       int `json:"provider_max_in_flight"`
	ProviderMaxInFlightOutage int `json:"provider_max_in_flight_outage"`
	// ProviderRateLimited counts the requests the provider answered 429 (above its rate
	// limit) during the run and its drain.
	ProviderRateLimited int `json:"provider_rate_limited"`
	// Drained is false when orders were still pending, or the provider still busy, at the
	// drain timeout.
	Drained   bool   `json:"drained"`
	DrainWait Millis `json:"drain_wait_ms"`
}

// drainPoll is how often the drain checks Postgres and the provider.
const drainPoll = 250 * time.Millisecond

// drainAndAudit waits, at most timeout, until the run's orders are all terminal and the
// provider has nothing in flight (it keeps working on requests whose client left, and those
// may still charge), then audits.
func drainAndAudit(ctx context.Context, db *pgx.Conn, sim *simulator, customerID string, acked map[string]bool, timeout time.Duration) (Audit, error) {
	a := Audit{Acknowledged: len(acked)}
	for _, accepted := range acked {
		if accepted {
			a.Accepted++
		}
	}
	began := time.Now()
	for {
		err := db.QueryRow(ctx, `
			SELECT count(*),
			       count(*) FILTER (WHERE status = 'paid'),
			       count(*) FILTER (WHERE status = 'payment_failed'),
			       count(*) FILTER (WHERE status IN ('pending', 'pending_payment'))
			FROM orders WHERE customer_id = $1`, customerID).Scan(&a.Stored, &a.Paid, &a.Failed, &a.StillPending)
		if err != nil {
			return Audit{}, fmt.Errorf("audit orders: %w", err)
		}
		st, err := sim.stats(ctx)
		if err != nil {
			return Audit{}, err
		}
		a.ProviderCharges, a.DoubleCharged = st.TotalCharges, st.DuplicateReferences
		a.ProviderMaxInFlight, a.ProviderMaxInFlightOutage = st.MaxInFlight, st.MaxInFlightOutage
		a.ProviderRateLimited = st.RateLimited
		a.DrainWait = Millis(time.Since(began))
		a.Drained = a.StillPending == 0 && st.InFlight == 0
		if a.Drained || time.Since(began) >= timeout {
			break
		}
		select {
		case <-ctx.Done():
			return Audit{}, ctx.Err()
		case <-time.After(drainPoll):
		}
	}

	ids := slices.Sorted(maps.Keys(acked))
	rows, err := db.Query(ctx, `
		SELECT id FROM unnest($1::text[]) AS acked(id)
		WHERE NOT EXISTS (SELECT 1 FROM orders WHERE orders.id::text = acked.id)
		ORDER BY id`, ids)
	if err != nil {
		return Audit{}, fmt.Errorf("audit acknowledged orders: %w", err)
	}
	a.Lost, err = pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return Audit{}, fmt.Errorf("audit acknowledged orders: %w", err)
	}
	return a, nil
}
