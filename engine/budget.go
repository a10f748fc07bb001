package engine

import (
	"math"
	"math/bits"
	"time"
)

// minPrefill is the least prefill a step under the latency target plans
// beside its decodes, so that prefill keeps moving when the decodes alone
// take the whole target.
const minPrefill = 1

// ewmaWeight is the weight of the newest step in the cost model's moving
// average of step size and time: a few steps carry it, so a change of load
// shows within a few steps.
const ewmaWeight = 0.3

// envWindow is how many recent steps of a size class its point of the
// lower envelope is the fastest of (between envWindow and twice that).
const envWindow = 32

// envMinSteps is how many steps of a size class its point needs to count
// in the fit, once some size class has had that many.
const envMinSteps = 8

// envExpiry is how many steps a size class's point outlives the last step
// of that size.
const envExpiry = 1000

// throughput models a forward pass's time as a fixed cost per step (reading
// the weights, synchronising workers) plus a cost per token, as the
// engine's clock measured recent steps, so tests drive it with a fake
// clock.
//
// The split between the two costs (kappa, the fixed cost in tokens' worth)
// is fitted through the fastest recent step of each size class (sizes
// within a factor of two): a lower envelope. On a machine shared with
// other work a step's time swings several fold from one step to the next,
// whatever its size, so a least-squares fit over all steps follows the load
// and not the sizes: when the few small steps of a ramp-up ran on a quiet
// machine and the steady steps on a busy one, it found the fixed cost to be
// most of every step. The split then said more tokens were nearly free,
// steps grew to hold all the work, and weights stopped governing (1:1 for
// tenants weighted 1:3); steps of one size could not correct it. The
// fastest steps of each size are the ones the load touched least, alike
// for every size. The scale comes from the moving average of the last few
// steps, so a change of load shows at once while the split stays put.
//
// Before steps of two size classes are seen, all of the cost is taken as
// per token (which underestimates what a longer step can hold, and so errs
// towards shorter steps).
type throughput struct {
	w          bool    // any measure yet
	n, d       float64 // moving averages of tokens and seconds (ewmaWeight)
	steps      int64
	env        [16]envPoint // by size class: bits.Len(tokens)-1
	kappa      float64      // fixed cost over per-token cost: the fixed cost in tokens
	fixed, per float64      // seconds per step and per token
}

// envPoint is the lower envelope of one size class's step times: the
// fastest (per token) of its recent steps, kept as two halves of a window
// so that it forgets.
type envPoint struct {
	cur, prev [2]float64 // fastest (tokens, seconds) of this half and the last
	k         int        // steps in cur
	seen      int64      // the step that last updated it; 0: none
}

// add records a step of x tokens that took y seconds.
func (e *envPoint) add(x, y float64) {
	if e.k == envWindow {
		e.prev, e.cur, e.k = e.cur, [2]float64{}, 0
	}
	if e.k == 0 || y/x < e.cur[1]/e.cur[0] {
		e.cur = [2]float64{x, y}
	}
	e.k++
}

// point is the fastest step of the window, and how many steps the window
// holds.
func (e *envPoint) point() (x, y, steps float64) {
	steps = float64(e.k)
	if e.prev[0] > 0 {
		steps += envWindow
		if e.prev[1]/e.prev[0] < e.cur[1]/e.cur[0] {
			return e.prev[0], e.prev[1], steps
		}
	}
	return e.cur[0], e.cur[1], steps
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
		t.n, t.d = x, y
	} else {
		t.n += ewmaWeight * (x - t.n)
		t.d += ewmaWeight * (y - t.d)
	}
	t.steps++
	e := &t.env[min(bits.Len(uint(n))-1, len(t.env)-1)]
	e.add(x, y)
	e.seen = t.steps
	// Least squares through the envelope's points, each weighted by the
	// steps it is the fastest of, leaving out sizes seen fewer than
	// envMinSteps times while others were seen that often: a size seen
	// once or twice (the prompts of a ramp-up in one step) has not had
	// its chance at a quiet machine, and one such slow point among the
	// sizes seen all the time bent the fit to no fixed cost at all.
	most := 0.0
	for i := range t.env {
		p := &t.env[i]
		if p.seen > 0 && t.steps-p.seen > envExpiry {
			*p = envPoint{}
		}
		if p.seen > 0 {
			_, _, pw := p.point()
			most = max(most, pw)
		}
	}
	var k, w, sn, sd, snn, snd float64
	for i := range t.env {
		if p := &t.env[i]; p.seen > 0 {
			px, py, pw := p.point()
			if pw < min(envMinSteps, most) {
				continue
			}
			k, w = k+1, w+pw
			sn, sd, snn, snd = sn+pw*px, sd+pw*py, snn+pw*px*px, snd+pw*px*py
		}
	}
	if k >= 2 {
		sn, sd, snn, snd = sn/w, sd/w, snn/w, snd/w
		if v := snn - sn*sn; v > 0.0625*sn*sn {
			if per := (snd - sn*sd) / v; per > 0 {
				t.kappa = max(sd-per*sn, 0) / per
			}
		}
	}
	t.per = t.d / (t.kappa + t.n)
	t.fixed = t.kappa * t.per
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
// a fit from few sizes is tried out gradually; at least one token (a
// machine too busy to run one within the target still runs steps), and 0
// only before any measure: a step that held every waiting prompt because
// the target fitted no token took 14 s on a loaded machine.
func (t *throughput) tokens(target time.Duration) int {
	if t.per == 0 {
		return 0
	}
	n := max((target.Seconds()-t.fixed)/t.per, 2*t.fixed/t.per)
	return max(int(min(n, 2*t.n+16)), 1)
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
			// What it computes: a cached prompt's hit costs no time. The
			// sum only sizes a step of at most full tokens, so once it
			// reaches that no more prompts are looked up (a long
			// interactive queue had the cache walked for every waiting
			// prompt on every step). Every prompt adds at least its last
			// token, so at most full lookups, and the step's size does
			// not depend on the order the sequences are visited in.
			if interFirst < full {
				cached, _ := e.peek(s)
				interFirst += len(s.tokens) - s.kv - cached
			}
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
