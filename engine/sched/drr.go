package sched

import "math"

// ring is one class's deficit round robin over the tenants that have
// requests waiting in it. A tenant may start a request while its deficit is
// positive; every token the scheduler runs for the tenant in that class
// (prefill and decode alike) is charged to the deficit, and each visit of
// the round credits Quantum × weight. So over a busy period each backlogged
// tenant runs tokens in proportion to its weight, however its requests
// differ in length.
type ring struct {
	ts  []*tenant
	ptr int
}

func (r *ring) join(t *tenant, c Class, quantum int) {
	t.inRing[c] = true
	// A tenant returning from idle starts with no credit, and with at most
	// one round of debt: debt from long ago must not starve it now.
	t.deficit[c] = math.Min(0, math.Max(t.deficit[c], -float64(quantum)*t.lim.Weight))
	// Join just behind the pointer, so it waits a full round like
	// everybody else.
	r.ts = append(r.ts, nil)
	copy(r.ts[r.ptr+1:], r.ts[r.ptr:])
	r.ts[r.ptr] = t
	r.ptr++
	if r.ptr >= len(r.ts) {
		r.ptr = 0
	}
}

func (r *ring) leave(t *tenant, c Class) {
	t.inRing[c] = false
	if t.deficit[c] > 0 {
		t.deficit[c] = 0 // credit is only for a backlog
	}
	for i, x := range r.ts {
		if x == t {
			r.ts = append(r.ts[:i], r.ts[i+1:]...)
			if i < r.ptr {
				r.ptr--
			}
			break
		}
	}
	if r.ptr >= len(r.ts) {
		r.ptr = 0
	}
}

// next returns the tenant whose turn it is among those ok accepts, crediting
// rounds as needed, or nil when ok accepts none. It does not charge.
func (r *ring) next(c Class, quantum int, ok func(*tenant) bool) *tenant {
	n := len(r.ts)
	if n == 0 {
		return nil
	}
	q := float64(quantum)
	// Skip whole rounds at once when every eligible tenant is in debt, so
	// the walk below ends within one round plus one visit.
	rounds := math.Inf(1)
	for _, t := range r.ts {
		if !ok(t) {
			continue
		}
		if t.deficit[c] > 0 {
			rounds = 0
			break
		}
		rounds = math.Min(rounds, math.Floor(-t.deficit[c]/(q*t.lim.Weight)))
	}
	if math.IsInf(rounds, 1) {
		return nil
	}
	if rounds > 0 {
		for _, t := range r.ts {
			if ok(t) {
				t.deficit[c] += rounds * q * t.lim.Weight
			}
		}
	}
	for range 2*n + 1 {
		t := r.ts[r.ptr]
		if ok(t) {
			if t.deficit[c] > 0 {
				return t
			}
			t.deficit[c] += q * t.lim.Weight
		}
		r.ptr = (r.ptr + 1) % n
	}
	return nil // unreachable: some eligible tenant turns positive within two rounds
}
