package fleet

import (
	"context"
	"fmt"
	"time"
)

// Force forces dependency open for d, or until Clear when d is 0: every
// process refuses every call to it (checkout defers each order with 202,
// workers snooze their charges) within a notification's round trip. by
// names who did it, for Statuses and the logs.
func Force(ctx context.Context, q db, dependency string, d time.Duration, by string) error {
	if d < 0 {
		return fmt.Errorf("force %s open: duration %v is negative", dependency, d)
	}
	var until *float64
	if d > 0 {
		s := secs(d)
		until = &s
	}
	if _, err := write(ctx, q, forceOpen, dependency, by, until); err != nil {
		return fmt.Errorf("force %s open: %w", dependency, err)
	}
	return nil
}

// Clear gives dependency back to each process's own breaker, whatever the
// shared state was (forced or open). It reports whether there was a row.
func Clear(ctx context.Context, q db, dependency, by string) (bool, error) {
	changed, err := write(ctx, q, clearState, dependency, by)
	if err != nil {
		return false, fmt.Errorf("clear %s: %w", dependency, err)
	}
	return changed, nil
}

// Status is one dependency's shared breaker state, for operators.
type Status struct {
	Dependency string
	// State is closed, open, half-open (open, past its deadline: probing)
	// or forced_open.
	State string
	// Left is how long the state lasts; 0 for closed, half-open, or forced
	// open until cleared.
	Left         time.Duration
	UntilCleared bool
	FailedProbes int
	ProbeHolder  string
	Source       string
	UpdatedAt    time.Time
}

// Statuses returns every dependency's shared state, ordered by name.
func Statuses(ctx context.Context, q db) ([]Status, error) {
	rows, err := q.Query(ctx, `SELECT dependency,`+rowColumns+` ORDER BY dependency`)
	if err != nil {
		return nil, fmt.Errorf("read breaker states: %w", err)
	}
	defer rows.Close()
	var out []Status
	for rows.Next() {
		var s Status
		r, err := scanRow(rows, &s.Dependency)
		if err != nil {
			return nil, fmt.Errorf("read breaker states: %w", err)
		}
		s.State, s.FailedProbes, s.Source, s.UpdatedAt = r.State, r.FailedProbes, r.Source, r.UpdatedAt
		if r.Left != nil && *r.Left > 0 {
			s.Left = *r.Left
		}
		switch {
		case r.State == stateForcedOpen && r.Left == nil:
			s.UntilCleared = true
		case r.State == stateForcedOpen && s.Left == 0:
			s.State = stateClosed // ran out
		case r.State == stateOpen && s.Left == 0:
			s.State = "half-open"
		}
		if r.Holder != nil && r.LeaseLeft != nil && *r.LeaseLeft > 0 {
			s.ProbeHolder = *r.Holder
		}
		out = append(out, s)
	}
	return out, rows.Err()
}
