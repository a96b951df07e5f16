package paymentsim

import "time"

// DefaultCapacity is the demo's capacity (PAYMENTSIM_CAPACITY): 16 charges at full speed,
// 80 charges/s at the default 200 ms. Checkout's default 4-slot bulkhead never reaches it,
// and neither does healthy traffic up to 80 req/s in the ideal case (Little's law: 80/s ×
// 0.2 s = 16 in flight); a client sending 20 concurrent charges sees each take 250 ms, 32
// take 400 ms: the growing latency an adaptive concurrency limit must notice.
const DefaultCapacity = 16

// The capacity model. A real provider has finitely many workers; beyond them, requests share
// them and every one slows down. The simulator models that as processor sharing: with
// capacity N and n charges being processed (this one included), a charge's processing time
// is its base latency scaled by n/N once n exceeds N:
//
//	latency = base × max(1, n/N)
//
// so throughput levels off at N/base charges per second while latency grows linearly with
// the queue, the shape of a saturated server. The factor is fixed when a charge starts
// processing (a charge does not speed up as others finish, nor slow down as more arrive),
// which keeps each charge's latency known up front and testable; it overstates latency a
// little as load falls and understates it as load rises. Injected fault latency is added
// unscaled: it stands for trouble outside the modelled workers (a slow downstream bank),
// though the charges it slows still occupy workers and so slow the others. Requests answered
// by a fault before processing (down, error rate, refused) and reads take no worker.
//
// capacity is N, 0 for unlimited; n counts the charges processing now, this one included.
func scaledLatency(base time.Duration, n, capacity int) time.Duration {
	if capacity <= 0 || n <= capacity {
		return base
	}
	return time.Duration(int64(base) * int64(n) / int64(capacity))
}
