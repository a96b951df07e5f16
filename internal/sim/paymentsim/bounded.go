package paymentsim

// boundedMap is a map that keeps at most cap keys, evicting the oldest insertion first, so a
// long-running simulator has a fixed memory ceiling. It is not safe for concurrent use.
type boundedMap[K comparable, V any] struct {
	cap   int
	m     map[K]V
	order []K // insertion order; the slice is re-sliced on eviction and append reallocates it
}

func newBoundedMap[K comparable, V any](capacity int) *boundedMap[K, V] {
	return &boundedMap[K, V]{cap: capacity, m: make(map[K]V)}
}

func (b *boundedMap[K, V]) get(k K) (V, bool) {
	v, ok := b.m[k]
	return v, ok
}

// put sets k to v. Updating a key keeps its place in the eviction order.
func (b *boundedMap[K, V]) put(k K, v V) {
	if _, ok := b.m[k]; !ok {
		b.order = append(b.order, k)
	}
	b.m[k] = v
	for len(b.order) > b.cap {
		delete(b.m, b.order[0])
		b.order = b.order[1:]
	}
}

func (b *boundedMap[K, V]) len() int {
	return len(b.m)
}
