package sched

import "time"

// window counts tokens over the last minute in one-second buckets, so a
// tenant's tokens-per-minute check is a sliding window without keeping every
// event.
type window struct {
	n   [60]int
	sec [60]int64 // the unix second bucket i counts; stale buckets are ignored
}

func (w *window) add(now time.Time, n int) {
	if n == 0 {
		return
	}
	s := now.Unix()
	i := int(((s % 60) + 60) % 60)
	if w.sec[i] != s {
		w.sec[i], w.n[i] = s, 0
	}
	w.n[i] += n
}

// used returns the tokens counted in the 60 seconds up to now.
func (w *window) used(now time.Time) int {
	s := now.Unix()
	total := 0
	for i := range w.n {
		if w.sec[i] > s-60 && w.sec[i] <= s {
			total += w.n[i]
		}
	}
	return total
}

// sub takes back n tokens counted in the second of at, if that second is
// still in the window.
func (w *window) sub(at time.Time, n int) {
	s := at.Unix()
	i := int(((s % 60) + 60) % 60)
	if w.sec[i] == s {
		w.n[i] = max(w.n[i]-n, 0)
	}
}
