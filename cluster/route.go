package cluster

import (
	"hash/fnv"
)

// score is the rendezvous weight of engine id for affinity key key.
func score(key, id string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(key))
	_, _ = h.Write([]byte{0})
	_, _ = h.Write([]byte(id))
	// FNV's high bits mix poorly for short inputs that differ only at the
	// end; the splitmix64 finalizer spreads them.
	x := h.Sum64()
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// Route picks the engine that should run a request with affinity key key
// (tenant/session) among the live engines: the rendezvous winner, or, when
// it is saturated, the unsaturated engine with the lowest load relative to
// its capacity. It returns false when there is no engine or all are
// saturated: the request then goes to the shared stream.
func Route(key string, engines []NodeInfo) (string, bool) {
	best, bestScore := -1, uint64(0)
	for i, e := range engines {
		if s := score(key, e.ID); best < 0 || s > bestScore || (s == bestScore && e.ID < engines[best].ID) {
			best, bestScore = i, s
		}
	}
	if best < 0 {
		return "", false
	}
	if !engines[best].Saturated() {
		return engines[best].ID, true
	}
	spare := -1
	for i, e := range engines {
		if e.Saturated() {
			continue
		}
		if spare < 0 || lighter(e, engines[spare]) {
			spare = i
		}
	}
	if spare < 0 {
		return "", false
	}
	return engines[spare].ID, true
}

// lighter reports whether a is less loaded than b relative to capacity;
// ties go to the smaller id so every gateway decides alike.
func lighter(a, b NodeInfo) bool {
	// Compare a.Load/a.Cap with b.Load/b.Cap without division.
	ca, cb := max(a.Capacity, 1), max(b.Capacity, 1)
	la, lb := a.Load*cb, b.Load*ca
	if la != lb {
		return la < lb
	}
	return a.ID < b.ID
}
