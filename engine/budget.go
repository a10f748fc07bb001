package engine

import (
	"math"
	"time"
)

// minPrefill is the least prefill a step under the latency target plans
// beside its decodes, so that prefill keeps moving when the decodes alone
// take the whole target.
const minPrefill = 1

// ewmaWeight is the weight of the newest step in the cost model's moving
// averages: a few steps carry it, so a change of load shows within a few
// steps.
const ewmaWeight = 0.3

// throughput models a forward pass's time as a fixed cost per step (reading
// the weights, synchronising workers) plus a cost per token, fitted by
// exponentially weighted least squares over recent steps as the engine's
// clock measured them, so tests drive it with a fake clock.
//
// Steps of about one size cannot tell the two costs apart: then the split
// last fitted is kept and scaled to the current average, and before any fit
// all of the cost is taken as per token (which underestimates what a
// longer step can hold, and so errs towards shorter steps).
type throughput struct {
	w            bool    // any measure yet
	n, d, nn, nd float64 // moving averages of tokens, seconds, tokens², tokens×seconds
	fixed, per   float64 // seconds per step and per token
}

// observe adds one forward pass of n tokens that took d. Passes the clock
// saw take no time (a fake clock that did not move) carry no information.
func (t *throughput) observe(n int, d time.Duration) {
	if n <= 0 || d <= 0 {
		return
	}
	x, y := float64(n), d.Seconds()
	if !t.w {
		t.w = true
		t.n, t.d, t.nn, t.nd = x, y, x*x, x*y
	} else {
		t.n += ewmaWeight * (x - t.n)
		t.d += ewmaWeight * (y - t.d)
		t.nn += ewmaWeight * (x*x - t.nn)
		t.nd += ewmaWeight * (x*y - t.nd)
	}
	// A fit needs step sizes that vary by more than a quarter.
	if v := t.nn - t.n*t.n; v > 0.0625*t.n*t.n {
		per := (t.nd - t.n*t.d) / v
		if fixed := t.d - per*t.n; per > 0 && fixed >= 0 {
			t.fixed, t.per = fixed, per
			return
		}
	}
	if t.per == 0 {
		t.fixed, t.per = 0, t.d/t.n
		return
	}
	k := t.d / (t.fixed + t.per*t.n)
	t.fixed, t.per = t.fixed*k, t.per*k
}

// perSecond is the average throughput in tokens per second; 0 before any
// measure.
func (t *throughput) perSecond() float64 {
	if !t.w {
		return 0
	}
	return t.n / t.d
}

// tokens is how many tokens a step can hold to take at most target, but
// never so few that the fixed cost is over a third of the step (when the
// target is that short, throughput matters more than meeting it), and at
// most twice the recent average step plus one block's worth (16), so that
// a fit from few sizes is tried out gradually; 0 before any measure.
func (t *throughput) tokens(target time.Duration) int {
	if t.per == 0 {
		return 0
	}
	n := max((target.Seconds()-t.fixed)/t.per, 2*t.fixed/t.per)
	return int(min(n, 2*t.n+16))
}

// efficient is the fewest tokens of a step whose fixed cost is at most a
// third of it (sched.Resources.Efficient): below that, more tokens are
// almost free and the demand, not the machine, bounds throughput; 0 before
// the fit has a cost per token.
func (t *throughput) efficient() int {
	if t.per == 0 {
		return 0
	}
	return max(int(math.Ceil(2*t.fixed/t.per)), 1)
}

// stepBudget is the token budget of the next step, the tokens the latency
// target allows (sched.Resources.Target; 0 when there is none), and
// whether it plans interactive work first (sched.Resources.InteractiveFirst).
//
// A forward pass cannot be interrupted, so the step in flight is what a
// newly arrived request waits for first: while more than one request is
// live, under the step-latency target the budget is what the cost model
// says fits MaxStepLatency, never less than the decodes (they all run)
// plus minPrefill. What a batch load loses to it is the fixed cost per
// step, at most a third of each step. The target itself goes to the
// scheduler too: when the running work of more than one tenant does not
// fit it, the step holds the target and the scheduler shares it by
// weight, decodes included, so weights govern throughput whenever the
// engine is time-bound.
//
// When an interactive request waits for its first token, and the previous
// step was not such a step, the step is for interactive work only: its
// prompt, whole up to MaxBatchTokens (the target does not chunk it: that
// would only add steps before its first token), and interactive decodes.
// Lower classes' decodes wait this one step, so that first token waits
// for nothing but the pass in flight and its own.
func (e *Engine) stepBudget() (budget, target int, first bool) {
	full := e.o.MaxBatchTokens
	urgent := e.urgent
	e.urgent = false
	if e.o.MaxStepLatency <= 0 || len(e.seqs) <= 1 {
		// Alone, a request has nothing to wait for it: shorter steps
		// would only slow it down.
		return full, 0, false
	}
	target = full
	if n := e.rate.tokens(e.o.MaxStepLatency); n > 0 {
		target = min(n, full)
	}
	decodes, interDecodes, interFirst := 0, 0, 0
	for _, s := range e.seqs {
		decoding := len(s.table) > 0 && s.kv == len(s.tokens)-1
		if decoding {
			decodes++
		}
		if s.req.Priority != Interactive {
			continue
		}
		switch {
		case s.first.IsZero():
			interFirst += len(s.tokens) - s.kv
		case decoding:
			interDecodes++
		}
	}
	if interFirst > 0 && !urgent {
		e.urgent = true
		return min(full, interDecodes+interFirst), 0, true
	}
	return min(full, max(target, decodes+minPrefill)), max(target, minPrefill+1), false
}
