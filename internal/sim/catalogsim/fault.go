package catalogsim

import (
	"errors"

	"github.com/resilientcheckout/checkout/internal/sim/simulator"
)

// Fault is a kind of catalog trouble: added latency, an error rate, an
// outage (simulator.Trouble has them all). Several faults can be active at
// once; see Merge.
type Fault struct {
	simulator.Trouble
}

// Validate reports why f cannot be scheduled, or nil.
func (f Fault) Validate() error {
	if f == (Fault{}) {
		return errors.New("no fault given")
	}
	return f.Trouble.Validate()
}

// Merge combines two overlapping faults: latencies add up, the higher
// error rate wins, and down stays on.
func (f Fault) Merge(g Fault) Fault { return Fault{f.Trouble.Merge(g.Trouble)} }

// faultRequest is the body of POST /admin/faults: a fault, optionally
// delayed by start_in and limited to duration (zero means until cleared).
type faultRequest struct {
	Fault
	simulator.Timing
}

// Parts implements simulator.FaultRequest.
func (req faultRequest) Parts() (Fault, simulator.Timing) { return req.Fault, req.Timing }
