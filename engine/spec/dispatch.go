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

// closeRun is how close to the leader's value an option must measure to
// keep its re-tries at the base interval.
const closeRun = 0.85

// closeOff is closeRun for Off.
const closeOff = 0.7

// relWindow is how many of Off's latest steps its relative step time is
// the median of. One step in ten or so on a shared machine is several
// times slower (another process, a collection); a median of nine ignores
// such steps where a running mean moves a fifth of the way each time and
// then takes five re-tries to forget. A drafting shape keeps a running
// mean: its steps vary for real with what was drafted, and throughput
// follows their mean.
const relWindow = 9

// trusted is how many steps an option's relative time must rest on before
// its own steps are read as the load's rather than as its cost: a leader
// that won on its warm-up steps (a lull, a burst on the others) keeps
// being measured against the time base its predecessors set until then.
// Off, the baseline, is re-tried at the base interval until it too rests
// on as many steps, however much it seems to lose.
const trusted = 8

// loadStep bounds how far one step moves a tier's time base, in log
// units: a step several times slower than the load says is most likely
// an outlier, and a true change of load is followed within a few steps.
const loadStep = 0.3

// Dispatcher picks the tree shape of each step, per priority class. Within
// the tier of the step's load it estimates each option's cost per
// committed token and plays the cheapest, re-trying the others now and
// then: every Explore steps while they measure within 15% of the leader,
// else, each time a re-try still loses, twice as rarely (up to 64 times),
// and as many times more rarely
// again as the option is slower than the leader, so a shape that keeps
// losing costs almost nothing; a dethroned leader starts over at the base
// interval. Off is always an option, so speculation never stays slower
// than plain decoding for long, and it keeps being re-tried at the base
// interval until speculation wins by more than closeOff.
//
// Warm-up goes from the smallest shapes up, and a shape is not tried at
// all while the tier's measurements say it cannot come near the leader:
// at the tier's cost per tree node (fitted through the shapes measured)
// and the acceptance the shape showed at another load, or else the best
// acceptance per node seen. Where rows are dear (a large batch on a CPU)
// the big budgets are then never played just to learn that they lose;
// where they are cheap every budget is tried as before.
//
// A cost per committed token has two factors, measured apart because they
// vary apart:
//
//   - tokens per sequence-step (1 + accepted drafts): a property of the
//     drafter, the shape and the traffic, not of the machine's load. One
//     step says little (a chain whose first draft is rejected accepts
//     nothing that step), so it is a long average: every observation
//     counts until there are 1/AccAlpha of them, then the recent ones
//     weigh more.
//   - the step's time, relative to the tier's other options: how much
//     more a pass over the option's rows costs than the others, a
//     property of the backend (cheaper multi-row kernels make longer
//     chains win by themselves). The machine's load scales every option
//     alike; it goes into one time base per tier that every step of an
//     option measured enough updates (by a bounded amount), so an option
//     re-tried during a burst of load elsewhere is not judged by the
//     burst. Off's cost is the median of its latest steps' (relWindow),
//     so a step that a burst hit counts for nothing, and a leader that
//     won on a few lucky steps is measured against the base its
//     predecessors set until its cost rests on enough of them.
//
// Each class (Seq.Class: the engine's priority classes) has its own
// measurements and choices, so a class whose requests gain nothing from
// drafts (a batch class at high load) settles on Off while another keeps
// speculating; every class's steps share the hardware, so each is
// measured by the whole step's time. Time is passed in by the caller. Not
// safe for concurrent use.
type Dispatcher struct {
	tiers   []Tier
	fixed   bool          // Fixed: the one shape, no Off beside it
	classes [][]tierState // per class, made on its first pick
	// Alpha is the weight of a new observation in the time base. Zero
	// means 0.2.
	Alpha float64
	// AccAlpha is the least weight of a new observation in the accepted
	// tokens per step (the first 1/AccAlpha observations are averaged
	// evenly). Zero means 0.01.
	AccAlpha float64
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
	order   []int // the warm-up order: see newTiers
	steps   int
	best    int // the option played last; -1 before warm-up ends
	retry   int // the option re-tried last (round robin)
	last    int // the option Pick returned last
	// logBase is the log of the time base (seconds): a step of option o
	// is expected to take exp(logBase + o.logRel); batch is the average
	// sequences per step.
	logBase float64
	batch   float64
	based   bool
}

type option struct {
	shape Shape
	n     int
	// logRel is the log of the option's step time relative to the
	// tier's time base: for Off the median of rels, its latest measures
	// (each a step's log time against the base then), oldest at
	// rels[n%relWindow] once full, for the others a running mean; acc its
	// mean accepted draft tokens per sequence-step.
	logRel float64
	rels   [relWindow]float64
	acc    float64
	// accN is how many steps acc rests on: the option's own and, for a
	// chain, those of longer chains (see ObserveNested).
	accN int
	// wait is the current re-try interval in steps and next the step of
	// the next re-try, while the option is not the best.
	wait, next int
}

// value is o's committed tokens per sequence per unit of the tier's time
// base: the inverse of its cost per committed token.
func (o option) value() float64 {
	return (1 + o.acc) / math.Exp(o.logRel)
}

// NewDispatcher returns a dispatcher over tiers (nil: DefaultTiers()).
func NewDispatcher(tiers []Tier) *Dispatcher {
	if tiers == nil {
		tiers = DefaultTiers()
	}
	return &Dispatcher{tiers: tiers}
}

// Fixed returns a dispatcher that always picks s (for tests and A/B runs).
func Fixed(s Shape) *Dispatcher {
	return &Dispatcher{tiers: []Tier{{Shapes: []Shape{s}}}, fixed: true}
}

// newTiers is a class's fresh measurement state.
func (d *Dispatcher) newTiers() []tierState {
	var out []tierState
	for _, t := range d.tiers {
		ts := tierState{max: t.MaxBatch, best: -1}
		for _, s := range t.Shapes {
			if !s.Off() {
				ts.options = append(ts.options, option{shape: s})
			}
		}
		if !d.fixed || len(ts.options) == 0 {
			ts.options = append(ts.options, option{shape: Off})
		}
		for i := range ts.options {
			ts.order = append(ts.order, i)
		}
		// Warm-up order: the smallest shape that drafts, Off, then the
		// rest by size, so the two measurements the prior needs come
		// first and a fresh engine still drafts in its first steps.
		slices.SortStableFunc(ts.order, func(a, b int) int { return ts.options[a].shape.Len() - ts.options[b].shape.Len() })
		if len(ts.order) > 1 && ts.options[ts.order[0]].shape.Off() {
			ts.order[0], ts.order[1] = ts.order[1], ts.order[0]
		}
		out = append(out, ts)
	}
	return out
}

func (d *Dispatcher) tier(class, load int) *tierState {
	if class < 0 {
		class = 0
	}
	for len(d.classes) <= class {
		d.classes = append(d.classes, nil)
	}
	if d.classes[class] == nil {
		d.classes[class] = d.newTiers()
	}
	ts := d.classes[class]
	for i := range ts {
		if t := &ts[i]; t.max == 0 || load <= t.max {
			return t
		}
	}
	return nil
}

// Pick returns the shape for a step of class 0 under load sequences.
func (d *Dispatcher) Pick(load int) Shape { return d.PickClass(0, load) }

// PickClass returns the shape for the sequences of class in a step of an
// engine that holds load sequences.
func (d *Dispatcher) PickClass(class, load int) Shape {
	t := d.tier(class, load)
	if t == nil || len(t.options) == 0 {
		return Off
	}
	i := d.pick(d.classes[max(class, 0)], t)
	t.last = i
	return t.options[i].shape
}

// pick is Pick's choice of option in t.
func (d *Dispatcher) pick(class []tierState, t *tierState) int {
	warm := d.Warmup
	if warm <= 0 {
		warm = 2
	}
	if len(t.options) == 1 {
		return 0
	}
	// Warm-up goes from the smallest shapes up. Once Off and a
	// shape that drafts have been measured, an option not yet tried is
	// tried only if its best case (see hopeless) could come near the best
	// measured one: where rows are dear (large batches on a CPU) the big
	// budgets are never played just to learn that they lose.
	var pr prior // fitted only when an untried option needs it: not on every step
	fitted := false
	for _, i := range t.order {
		o := t.options[i]
		if o.n >= warm {
			continue
		}
		if o.n == 0 {
			if !fitted {
				pr, fitted = t.prior(), true
			}
			if pr.hopeless(o, seen(class, o.shape, warm)) {
				continue
			}
		}
		return i
	}
	// A challenger must beat the leader by a margin to take over: close
	// options swap on timing noise otherwise, and every swap to a losing
	// shape costs real steps.
	best := t.best
	if best < 0 || t.options[best].n == 0 {
		best = slices.IndexFunc(t.options, func(o option) bool { return o.n > 0 })
	}
	for i, o := range t.options {
		if o.n > 0 && o.value() > t.options[best].value()*(1+switchMargin) {
			best = i
		}
	}
	explore := d.Explore
	if explore == 0 {
		explore = 16
	}
	t.steps++
	if explore < 0 {
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
		if o := &t.options[i]; i != best && o.n > 0 && t.steps >= o.next {
			t.retry = i
			// An option k times slower than the leader loses about k-1
			// steps' worth of tokens each time it is re-tried: it is
			// re-tried k times as rarely, so a budget that costs eight
			// plain steps on this hardware is not played every few
			// dozen steps.
			o.next = t.steps + min(int(float64(o.wait)*slowness(t.options[best], *o)), 64*explore)
			close := closeRun
			if o.shape.Off() {
				// Off is the baseline every other option must beat:
				// one step measures a shape's cost poorly on a loaded
				// machine, so Off keeps being measured at the base
				// interval until speculation clearly wins.
				close = closeOff
			}
			if o.value() < close*t.options[best].value() && (!o.shape.Off() || o.n >= trusted) {
				o.wait = min(2*o.wait, 64*explore)
			} else {
				// A close runner-up keeps being re-tried at the base
				// interval: each re-try costs little, and its few
				// observations (a chain whose first draft happened to
				// be rejected) must not decide for good.
				o.wait = explore
			}
			return i
		}
	}
	return best
}

// prior is what a tier's measurements say of an option not yet tried.
type prior struct {
	ok bool
	// offRel is Off's relative step time; perNode the extra step time
	// per node of a sequence's tree, as a share of Off's; perAcc the
	// most accepted drafts per node an option may hope for when its shape
	// was measured nowhere; best the best measured value.
	offRel, perNode, perAcc, best float64
}

// priorWeight is the weight, in observations, of a full acceptance in the
// hope an option measured nowhere is allowed: two unlucky first steps (a
// chain's first draft rejected twice) must not make every bigger budget
// look hopeless.
const priorWeight = 2

// prior fits the tier's cost per tree node through the options measured
// so far (least squares through Off: a pass over more rows costs more, by
// whatever the backend's kernels make it), and takes the best accepted
// drafts per node any of them showed (fewer nodes accept more per node:
// the first draft of a chain, or the likeliest node of a tree, is the
// likeliest to be accepted), shrunk towards full acceptance by
// priorWeight.
func (t *tierState) prior() prior {
	var p prior
	off := slices.IndexFunc(t.options, func(o option) bool { return o.shape.Off() })
	if off < 0 || t.options[off].n == 0 {
		return p
	}
	p.offRel = math.Exp(t.options[off].logRel)
	var num, den float64
	for _, o := range t.options {
		if o.n == 0 {
			continue
		}
		p.best = max(p.best, o.value())
		l := float64(o.shape.Len())
		if l == 0 {
			continue
		}
		w := float64(min(o.n, 16))
		num += w * l * (math.Exp(o.logRel)/p.offRel - 1)
		den += w * l * l
		n := float64(o.n)
		p.perAcc = max(p.perAcc, (n*o.acc+priorWeight*l)/(n+priorWeight)/l)
	}
	if den > 0 {
		p.ok, p.perNode = true, max(num/den, 0)
	}
	return p
}

// seen returns the accepted drafts per sequence-step that shape measured
// in another tier of the class, after at least warm steps there, or -1.
// Drafts do not depend on the batch they run in (a greedy draft is the
// same alone or among others), so a shape's acceptance carries from one
// load to another while its cost does not.
func seen(class []tierState, shape Shape, warm int) float64 {
	acc, n := -1.0, 0
	for i := range class {
		for _, o := range class[i].options {
			if o.shape.Name == shape.Name && o.accN >= warm && o.accN > n {
				acc, n = o.acc, o.accN
			}
		}
	}
	return acc
}

// hopeless reports whether an untried option would measure below
// closeRun of the tier's best option: at the tier's cost per node, and at
// the acceptance its shape measured at another load (acc ≥ 0) or else
// the best acceptance per node the tier has seen. Such an option is not
// worth a step to try until the measurements change.
func (p prior) hopeless(o option, acc float64) bool {
	if !p.ok || o.shape.Off() {
		return false
	}
	l := float64(o.shape.Len())
	if acc < 0 {
		acc = l * min(p.perAcc, 1)
	}
	return (1+acc)/(p.offRel*(1+p.perNode*l)) < closeRun*p.best
}

// slowness is how many times slower than the leader o measures, at least
// 1 and at most 16. Off is never slowed down: it is the baseline every
// other option must beat, and one unlucky measurement of it must not keep
// it from being checked again.
func slowness(leader, o option) float64 {
	if o.n == 0 || o.shape.Off() {
		return 1
	}
	return min(max(leader.value()/o.value(), 1), 16)
}

// Observe records a class-0 step; see ObserveClass.
func (d *Dispatcher) Observe(load, batch int, s Shape, tokens int, elapsed time.Duration) {
	d.ObserveClass(0, load, batch, s, tokens, elapsed)
}

// ObserveClass records a step in which batch sequences of class, run with
// shape s, committed tokens tokens (accepted drafts plus one per sequence)
// in elapsed time (the whole step's), picked by PickClass(class, load):
// load chooses the tier, as it did for the pick. The pick PickClass
// returned last gets the credit when s is it or its main chain (a caller
// that verifies only chains cut it so), so a budget is measured by what
// it yields on the caller's backend; another s counts for the option of
// its name.
func (d *Dispatcher) ObserveClass(class, load, batch int, s Shape, tokens int, elapsed time.Duration) {
	t := d.tier(class, load)
	if t == nil || elapsed <= 0 || batch <= 0 {
		return
	}
	a := d.Alpha
	if a <= 0 {
		a = 0.2
	}
	accA := d.AccAlpha
	if accA <= 0 {
		accA = 0.01
	}
	at := t.last
	if at < 0 || at >= len(t.options) || s.Name != t.options[at].shape.Name && s.Name != mainChain(t.options[at].shape).Name {
		at = slices.IndexFunc(t.options, func(o option) bool { return o.shape.Name == s.Name })
	}
	if at < 0 || at >= len(t.options) {
		return
	}
	o := &t.options[at]
	lt := math.Log(elapsed.Seconds())
	acc := float64(tokens-batch) / float64(batch)
	if !t.based {
		t.logBase, t.based = lt, true
	}
	if at != t.best || o.n < trusted {
		// A re-try, a warm-up step or a leader's step while its cost
		// rests on few steps is judged against the base, which the
		// steps before it set: the load now.
		r := lt - t.logBase
		o.rels[o.n%relWindow] = r
		if o.shape.Off() {
			// Off's steps all do the same work: their spread is noise,
			// which the median ignores.
			o.logRel = median(o.rels[:min(o.n+1, relWindow)])
		} else {
			// A drafting shape's steps vary for real (an n-gram tree is
			// empty where nothing matches, large where much does), and
			// throughput follows their mean, not their typical step;
			// its first few steps count evenly.
			o.logRel += max(1/float64(o.n+1), a) * (r - o.logRel)
		}
	}
	if o.n >= trusted {
		// The base follows the load, judged by the option's known
		// cost. The leader's own cost stays as it was measured beside
		// the others: with only it playing, a change of its step time
		// is the load's.
		t.logBase += a * min(max(lt-o.logRel-t.logBase, -loadStep), loadStep)
	}
	if t.batch == 0 {
		t.batch = float64(batch)
	}
	t.batch += a * (float64(batch) - t.batch)
	o.n++
	o.accN++
	o.acc += max(1/float64(o.accN), accA) * (acc - o.acc)
}

// ObserveNested records, for the chains of class's tier at load shorter
// than s, what they would have accepted in a step PickClass picked s for,
// when s is a chain: each drafting sequence of the class was let draft
// drafted[i] tokens (s's, or fewer where the step cut the shape: the
// tokens left, the blocks free; a drafter that found less to draft still
// counts s's) and accepted accepted[i] of them. A chain
// drafts the same tokens as the first nodes of a longer one (every drafter
// fills a node from its path alone), so a chain of j accepts min(a, j)
// where the longer one accepts a. Every step of the leader thus measures
// the shorter chains' acceptance too, and the choice of a chain's length
// rests on the same steps rather than on a few re-tries of each.
func (d *Dispatcher) ObserveNested(class, load int, s Shape, accepted, drafted []int) {
	t := d.tier(class, load)
	if t == nil || !s.chain() || len(accepted) != len(drafted) {
		return
	}
	accA := d.AccAlpha
	if accA <= 0 {
		accA = 0.01
	}
	for i := range t.options {
		o := &t.options[i]
		j := o.shape.Len()
		if j == 0 || j >= s.Len() || !o.shape.chain() {
			continue
		}
		sum, n := 0, 0
		for k, a := range accepted {
			if drafted[k] >= j {
				sum += min(a, j)
				n++
			}
		}
		if n == 0 {
			continue
		}
		o.accN++
		o.acc += max(1/float64(o.accN), accA) * (float64(sum)/float64(n) - o.acc)
	}
}

// median returns the median of v (the mean of the middle two when their
// number is even), reordering v's copy, not v.
func median(v []float64) float64 {
	var w [relWindow]float64
	c := w[:copy(w[:], v)]
	slices.Sort(c)
	n := len(c)
	if n == 0 {
		return 0
	}
	if n%2 == 1 {
		return c[n/2]
	}
	return (c[n/2-1] + c[n/2]) / 2
}

// ShapeStats is one option's measurements.
type ShapeStats struct {
	Shape string
	// Steps observed, committed tokens per second (estimated at the
	// machine's load now), and mean accepted draft tokens per
	// sequence-step.
	Steps        int
	TokensPerSec float64
	Accepted     float64
}

// Stats returns class 0's measurements in the tier that serves load.
func (d *Dispatcher) Stats(load int) []ShapeStats { return d.ClassStats(0, load) }

// ClassStats returns class's measurements in the tier that serves load.
// TokensPerSec is what an option would commit now: its tokens per
// sequence-step times the tier's mean sequences per step, over its step
// time at the tier's current time base.
func (d *Dispatcher) ClassStats(class, load int) []ShapeStats {
	t := d.tier(class, load)
	if t == nil {
		return nil
	}
	out := make([]ShapeStats, len(t.options))
	for i, o := range t.options {
		out[i] = ShapeStats{Shape: o.shape.Name, Steps: o.n, Accepted: o.acc}
		if o.n > 0 {
			out[i].TokensPerSec = t.batch * (1 + o.acc) / math.Exp(t.logBase+o.logRel)
		}
	}
	return out
}
