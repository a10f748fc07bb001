package spec

import (
	"math"
	"slices"
	"time"
)

// Off is the empty shape: no drafting, plain decoding.
var Off = Shape{Name: "off"}

// Policy is a tenant's say over speculation, applied per sequence on top
// of the dispatcher's choice. The zero value leaves it to the dispatcher.
type Policy struct {
	// Off disables speculation for the tenant's requests.
	Off bool
	// MaxBatch, when above zero, disables speculation for the tenant's
	// requests while the engine holds more sequences, running or waiting
	// (the tenant's "batch class under load").
	MaxBatch int
}

// Shape returns the shape a sequence of this policy gets when the
// dispatcher chose s for a step of batch sequences.
func (p Policy) Shape(s Shape, batch int) Shape {
	if p.Off || (p.MaxBatch > 0 && batch > p.MaxBatch) {
		return Off
	}
	return s
}

// Tier lists the shapes worth trying for steps of up to MaxBatch sequences
// (MaxBatch 0: any size).
type Tier struct {
	MaxBatch int
	Shapes   []Shape
}

// DefaultTiers: when one sequence leaves the hardware idle, dynamic trees
// of 4 to 32 nodes beside the static bushy tree and chains of 2 to 4
// (where a tree node costs nearly a plain step, as on a CPU, only the
// small budgets and short chains win); as
// the batch fills the hardware, smaller budgets and shorter chains; and
// plain decoding for large batches, where a forward pass is already
// compute-bound and extra draft tokens cost as much as they could win.
// Each tier also offers Off, so the dispatcher can always fall back to
// plain speed. Within a tier the dispatcher's measurements (committed
// tokens per second: the acceptance a budget buys over what its step
// costs) choose the budget.
func DefaultTiers() []Tier {
	return []Tier{
		{MaxBatch: 1, Shapes: []Shape{Dynamic(32), Dynamic(16), Dynamic(8), Dynamic(4), Bushy, Chain(4), Chain(3), Chain(2)}},
		{MaxBatch: 4, Shapes: []Shape{Dynamic(16), Dynamic(8), Dynamic(4), Wide, Chain(4), Chain(2)}},
		{MaxBatch: 8, Shapes: []Shape{Dynamic(8), Dynamic(4), Chain(4), Chain(2)}},
		{MaxBatch: 16, Shapes: []Shape{Chain(2)}},
		{MaxBatch: 0, Shapes: nil},
	}
}

// switchMargin is how much faster than the leader an option must measure
// to take over.
const switchMargin = 0.05

// Dispatcher picks the tree shape of each step. Within the tier of the
// step's batch size it measures each option's committed tokens per second
// (an exponentially weighted average, so it follows the acceptance rate of
// the current traffic), plays the best, and re-tries the others now and
// then: every Explore steps at first, then, each time a re-try still loses,
// twice as rarely (up to 64 times), and as many times more rarely again as
// the option is slower than the leader, so a shape that keeps losing costs
// almost nothing; a dethroned leader starts over at the base interval.
// Off is always an option, so speculation never stays slower than plain
// decoding for long. Time is passed in by the caller. Not safe for
// concurrent use.
type Dispatcher struct {
	tiers []tierState
	// Alpha is the weight of a new observation in the averages of an
	// option observed every step; an option last observed k steps of
	// its tier ago gives it 1-(1-Alpha)^k. Zero means 0.2.
	Alpha float64
	// Explore is how many steps pass between re-tries of a non-best
	// option; zero means 16, negative never re-tries.
	Explore int
	// Warmup is how many observations each option gets before the best is
	// chosen; zero means 2.
	Warmup int
}

type tierState struct {
	max     int
	options []option
	steps   int
	best    int // the option played last; -1 before warm-up ends
	retry   int // the option re-tried last (round robin)
	last    int // the option Pick returned last
	obs     int // observations in the tier so far
}

type option struct {
	shape Shape
	n     int
	rate  float64 // tokens per second
	acc   float64 // mean accepted draft tokens per sequence-step
	// wait is the current re-try interval in steps and next the step of
	// the next re-try, while the option is not the best.
	wait, next int
	seen       int // the tier's observation count when this one was last observed
}

// NewDispatcher returns a dispatcher over tiers (nil: DefaultTiers()).
func NewDispatcher(tiers []Tier) *Dispatcher {
	if tiers == nil {
		tiers = DefaultTiers()
	}
	d := &Dispatcher{}
	for _, t := range tiers {
		ts := tierState{max: t.MaxBatch, best: -1}
		for _, s := range t.Shapes {
			if !s.Off() {
				ts.options = append(ts.options, option{shape: s})
			}
		}
		ts.options = append(ts.options, option{shape: Off})
		d.tiers = append(d.tiers, ts)
	}
	return d
}

// Fixed returns a dispatcher that always picks s (for tests and A/B runs).
func Fixed(s Shape) *Dispatcher {
	d := NewDispatcher([]Tier{{Shapes: []Shape{s}}})
	d.tiers[0].options = d.tiers[0].options[:1]
	return d
}

func (d *Dispatcher) tier(batch int) *tierState {
	for i := range d.tiers {
		if t := &d.tiers[i]; t.max == 0 || batch <= t.max {
			return t
		}
	}
	return nil
}

// Pick returns the shape for a step of batch sequences.
func (d *Dispatcher) Pick(batch int) Shape {
	t := d.tier(batch)
	if t == nil || len(t.options) == 0 {
		return Off
	}
	i := d.pick(t)
	t.last = i
	return t.options[i].shape
}

// pick is Pick's choice of option in t.
func (d *Dispatcher) pick(t *tierState) int {
	warm := d.Warmup
	if warm <= 0 {
		warm = 2
	}
	for i, o := range t.options {
		if o.n < warm {
			return i
		}
	}
	// A challenger must beat the leader by a margin to take over: close
	// options swap on timing noise otherwise, and every swap to a losing
	// shape costs real steps.
	best := t.best
	if best < 0 {
		best = 0
	}
	for i, o := range t.options {
		if o.rate > t.options[best].rate*(1+switchMargin) {
			best = i
		}
	}
	explore := d.Explore
	if explore == 0 {
		explore = 16
	}
	t.steps++
	if explore < 0 || len(t.options) == 1 {
		return best
	}
	if best != t.best {
		// New leader. At the end of warm-up every option starts at the
		// base interval; later only the old leader does (it may win back
		// soon), while the others keep their back-off, so noise that
		// swaps two close options does not bring back frequent re-tries
		// of shapes that keep losing.
		if t.best < 0 {
			for i := range t.options {
				o := &t.options[i]
				o.wait, o.next = explore, t.steps+min(int(float64(explore)*slowness(t.options[best], *o)), 64*explore)
			}
		} else {
			o := &t.options[t.best]
			o.wait, o.next = explore, t.steps+explore
		}
		t.best = best
	}
	for k := 1; k <= len(t.options); k++ {
		i := (t.retry + k) % len(t.options)
		if o := &t.options[i]; i != best && t.steps >= o.next {
			t.retry = i
			// An option k times slower than the leader loses about k-1
			// steps' worth of tokens each time it is re-tried: it is
			// re-tried k times as rarely, so a budget that costs eight
			// plain steps on this hardware is not played every few
			// dozen steps.
			o.next = t.steps + min(int(float64(o.wait)*slowness(t.options[best], *o)), 64*explore)
			o.wait = min(2*o.wait, 64*explore)
			return i
		}
	}
	return best
}

// slowness is how many times slower than the leader o measures, at least
// 1 and at most 16. Off is never slowed down: it is the baseline every
// other option must beat, and one unlucky measurement of it (a burst of
// load elsewhere on the machine) must not keep it from being checked
// again.
func slowness(leader, o option) float64 {
	if o.rate <= 0 || o.shape.Off() {
		return 1
	}
	return min(max(leader.rate/o.rate, 1), 16)
}

// Observe records a step run with shape s over batch sequences that
// committed tokens tokens (accepted drafts plus one per sequence) in
// elapsed time, picked by Pick(load): load chooses the tier, as it did
// for the pick. The pick Pick returned last gets the credit when s is it
// or its main chain (a caller that verifies only chains cut it so), so a
// budget is measured by what it yields on the caller's backend; another s
// counts for the option of its name.
func (d *Dispatcher) Observe(load, batch int, s Shape, tokens int, elapsed time.Duration) {
	t := d.tier(load)
	if t == nil || elapsed <= 0 || batch <= 0 {
		return
	}
	a := d.Alpha
	if a <= 0 {
		a = 0.2
	}
	at := t.last
	if at < 0 || at >= len(t.options) || s.Name != t.options[at].shape.Name && s.Name != mainChain(t.options[at].shape).Name {
		at = slices.IndexFunc(t.options, func(o option) bool { return o.shape.Name == s.Name })
	}
	if at < 0 || at >= len(t.options) {
		return
	}
	o := &t.options[at]
	rate := float64(tokens) / elapsed.Seconds()
	acc := float64(tokens-batch) / float64(batch)
	t.obs++
	// The averages age by the tier's steps, not by the option's own: an
	// option re-tried after many steps of others was measured under
	// other traffic and load, so its new observation mostly replaces
	// the old estimate rather than nudging it, and a stale estimate
	// cannot keep a loser looking better than a leader measured now.
	w := 1.0
	if o.n > 0 {
		w = 1 - math.Pow(1-a, float64(t.obs-o.seen))
	}
	o.rate += w * (rate - o.rate)
	o.acc += w * (acc - o.acc)
	o.seen = t.obs
	o.n++
}

// ShapeStats is one option's measurements.
type ShapeStats struct {
	Shape string
	// Steps observed, committed tokens per second, and accepted draft
	// tokens per sequence-step (both averages weighted to recent steps).
	Steps        int
	TokensPerSec float64
	Accepted     float64
}

// Stats returns the measurements of the tier that serves batch.
func (d *Dispatcher) Stats(batch int) []ShapeStats {
	t := d.tier(batch)
	if t == nil {
		return nil
	}
	out := make([]ShapeStats, len(t.options))
	for i, o := range t.options {
		out[i] = ShapeStats{Shape: o.shape.Name, Steps: o.n, TokensPerSec: o.rate, Accepted: o.acc}
	}
	return out
}
