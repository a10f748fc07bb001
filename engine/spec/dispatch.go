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

// NGramTiers: DefaultTiers without the budgets of 16 nodes or more (dyn32,
// dyn16, bushy), for a drafter whose proposals come from lookup. Lookup finds one likely continuation, or a
// few, where a match exists: a budget of 16 or 32 nodes is filled with
// branches the target rejects, and on this engine's own chats (replayed
// under measured row costs) dyn32 and dyn16 won less than chains of 3-4
// and dyn4 even with the confidence floor. Offering them anyway costs the
// steps the dispatcher spends measuring them, at b=1 a few percent of
// what speculation wins.
func NGramTiers() []Tier {
	return []Tier{
		{MaxBatch: 1, Shapes: []Shape{Dynamic(8), Dynamic(4), Chain(4), Chain(3), Chain(2)}},
		{MaxBatch: 4, Shapes: []Shape{Dynamic(8), Dynamic(4), Wide, Chain(4), Chain(2)}},
		{MaxBatch: 8, Shapes: []Shape{Dynamic(8), Dynamic(4), Chain(4), Chain(2)}},
		{MaxBatch: 16, Shapes: []Shape{Chain(2)}},
		{MaxBatch: 0, Shapes: nil},
	}
}

// TiersFor is the tiers worth offering d's dispatcher: d's own when it
// has a view (a Tiers method), else DefaultTiers. A nil d gets
// DefaultTiers.
func TiersFor(d Drafter) []Tier {
	if t, ok := d.(interface{ Tiers() []Tier }); ok {
		return t.Tiers()
	}
	return DefaultTiers()
}

// switchMargin is how much faster than the leader an option must measure
// to take over.
const switchMargin = 0.05

// closeRun is how close to the leader's value an option must measure to
// keep its re-tries at the base interval.
const closeRun = 0.85

// closeOff is closeRun for Off.
const closeOff = 0.7

// trusted is how many steps Off must have been played before it backs
// off: Off's steps are the cost model's plain steps, and a baseline seen
// in a few steps only must not be left for long.
const trusted = 8

// loadStep bounds how far one step moves a tier's time base, in log
// units: a step several times slower than the load says is most likely
// an outlier, and a true change of load is followed within a few steps.
const loadStep = 0.3

// fitMemory is how many steps the cost model's fit of a tier mostly rests
// on (its forgetting time). The fit is of step times relative to the load
// (the time base), a property of the backend, so it can look far back;
// the time base follows the load.
const fitMemory = 500

// fitClip bounds a step's relative time, as a factor of what the fit
// predicts, before it enters the fit: one step in ten or so on a shared
// machine is several times slower (another process, a collection).
const fitClip = 2

// fitAfter is how many steps a tier's fit rests on before steps are
// clipped to it.
const fitAfter = 16

// costMemory is how many of its own steps an option's cost mostly rests
// on: enough that its estimate is a few percent sure, few enough that it
// follows a change of traffic (an n-gram drafter's matches) within a
// request or two.
const costMemory = 64

// costPrior is the weight, in steps, of the tier's line in an option's
// cost: an option measured on a step or two (the warm-up) is judged
// mostly by the line, one measured on dozens by its own steps.
const costPrior = 16

// offPrior is costPrior for Off. The line is fitted mostly through steps
// that draft: at their rows it is an interpolation, a fair prior; at no
// rows an extrapolation. In a bench run at b=8 its intercept put a plain
// step at 0.6 of its cost against chain4's, and Off, judged mostly by it
// after its first eight steps, backed off while chain4 lost by a quarter.
const offPrior = 4

// offClip bounds a step of Off's residual, as a factor of its mean: a
// step's time beyond it is the load's (see loadStep).
var offClip = math.Exp(loadStep)

// offShift is how far, in log units, the median of Off's last offRun
// steps must lie below its cost for the cost to be taken as changed and
// restarted from them: a step is noise, a run of them a third below is
// the world (drafting got dearer relative to a plain step: another
// backend, a neighbour that takes compute but not bandwidth). Off's steps
// are clipped to its cost's neighbourhood (offClip), so its cost healed
// by a few percent per re-try, and backed off to re-tries 1024 steps
// apart: with drafting three times dearer it took 5% of the steps for
// 6000 steps where it was the best.
const offShift = 0.4

// offRun is how many of Off's steps offShift judges.
const offRun = 5

// sure is how many standard errors an option's estimate must lie below
// the leader's for its re-tries to back off while it is close.
const sure = 1.5

// closeWait is the most times the base interval between re-tries of a
// close runner-up whose estimate is sure: a change of traffic that makes
// it the best is still seen within a few hundred steps.
const closeWait = 8

// Dispatcher picks the tree shape of each step, per priority class. Within
// the tier of the step's load it estimates each option's cost per
// committed token and plays the cheapest, re-trying the others now and
// then: every Explore steps while they measure within 15% of the leader
// and their estimate is not sure to be below it (its standard error, from
// the spread of its steps' acceptance and time, is wide), else, each time
// a re-try still loses, twice as rarely (up to 8 times for a close one
// whose estimate is sure, 64 times for the others), and as many times
// more rarely again as the option is slower than the leader, so a shape
// that keeps losing costs almost nothing; a dethroned leader starts over
// at the base interval. Off is always an option, so speculation never
// stays slower than plain decoding for long, and it keeps being re-tried
// at the base interval until speculation wins by more than closeOff.
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
//     weigh more. It is taken over the steps that drafted, times the
//     tier's share of steps that draft (see effective), so a shape is
//     not judged by whether the runs it was played in quoted the
//     conversation.
//   - the step's time, relative to a time base that follows the
//     machine's load (each step moves it by a bounded amount, as far as
//     the model below does not explain the step). A straight line a + b·r
//     of a step's relative time in r, the rows it drafted per sequence, is
//     fitted by least squares through every step of the tier, Off's and
//     every shape's alike, over its last fitMemory or so. An option's cost
//     is the line's at its mean rows times its residual: the mean, over
//     its own last costMemory or so steps, of a step's relative time over
//     the line's at that step's rows, shrunk towards every step's by
//     costPrior steps and judged by the line again as the option's steps
//     age (over fitMemory: the line moves). The line thus judges what a
//     burst or a lull hit in a shape's few first steps, and tells what
//     rows that vary cost (an n-gram tree, empty on some steps and full on
//     others); the option's own steps tell what the line does not: a
//     step's time is not a straight line in its rows (on a CPU two to four
//     rows cost little more than one, past that each row its compute; a
//     draft model's passes cost per depth, not per node), and Off, the
//     baseline, is judged by its own steps rather than by the intercept of
//     a line fitted mostly through steps that draft.
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
	// evenly). Zero means 0.01; above 1 counts as 1.
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
	// logBase is the log of the time base (seconds): a step that drafts
	// r rows per sequence is expected to take exp(logBase)·a·(1 + k·r);
	// batch is the average sequences per step.
	logBase float64
	batch   float64
	based   bool
	fit     costFit
	// seen counts the tier's steps observed.
	seen int
	// drafting is the share of the steps of options that draft in which
	// the drafter found something to draft, over the last 1/AccAlpha or
	// so (drafted counts them): a property of the traffic, not of the
	// shape.
	drafting float64
	drafted  int
	// uw and us are the weight and weighted sum of every step's
	// residual, over fitMemory or so (see unit).
	uw, us float64
	// k is kappa's, kept from the last step. The fit's plain step is
	// one unit of the base: observe folds the fit's scale into the base.
	k float64
}

// costFit is a weighted least-squares fit of y = a + b·r through a tier's
// steps, r a step's rows drafted per sequence and y its time over the time
// base then; older steps weigh less (fitMemory).
type costFit struct {
	n                   int
	w, wr, wrr, wy, wry float64
}

func (f *costFit) add(r, y float64) {
	k := 1 - 1.0/fitMemory
	// A step weighs less the more rows it drafted: a step's cost is not
	// a straight line in its rows (on a CPU a pass over two rows or more
	// runs other kernels than a pass over one, and a draft model's
	// passes cost per depth), and the line must hold where the choice is
	// made, between Off and the small shapes, rather than be pulled by a
	// few re-tries of the biggest trees.
	w := 1 / ((1 + r/4) * (1 + r/4))
	f.w, f.wr, f.wrr, f.wy, f.wry = k*f.w+w, k*f.wr+w*r, k*f.wrr+w*r*r, k*f.wy+w*y, k*f.wry+w*r*y
	f.n++
}

// line returns the fit's a and b, and whether the steps' rows vary
// enough to tell b: otherwise b is 0 and a the mean.
func (f *costFit) line() (a, b float64, ok bool) {
	if f.w <= 0 {
		return 1, 0, false
	}
	v := f.wrr*f.w - f.wr*f.wr // w² times the rows' variance
	if v <= 1e-9*f.w*f.w || v < 0.25*f.w {
		return f.wy / f.w, 0, false
	}
	b = (f.wry*f.w - f.wr*f.wy) / v
	a = (f.wy - b*f.wr) / f.w
	return a, b, true
}

type option struct {
	shape Shape
	n     int
	// acc is the option's mean accepted draft tokens per sequence-step,
	// rows its mean rows drafted per sequence-step (an n-gram tree is
	// empty where nothing matches).
	acc, rows float64
	// accN is how many steps acc rests on: the option's own and, for a
	// chain, those of longer chains (see ObserveNested).
	accN int
	// acc2 is the mean of the squared accepted drafts (acc's weights):
	// acc's spread, for its standard error.
	acc2 float64
	// accD and rowsD are acc and rows over the steps that drafted (a
	// drafter that found nothing drafts nothing), nD how many steps they
	// rest on: see effective.
	accD, rowsD float64
	nD          int
	// cw, cu and cuu are the option's own steps, each weighing less by
	// 1/costMemory with every later one and by e with every fitMemory of
	// the tier's steps (see aged): the weight, and the weighted sums of
	// their residuals (a step's relative time over the line's at its
	// rows) and squared residuals.
	cw, cu, cuu float64
	// seen is the tier's step count (tierState.seen) at o's last step.
	seen int
	// wait is the current re-try interval in steps and next the step of
	// the next re-try, while the option is not the best.
	wait, next int
	// recent are Off's last steps' residuals before the clip, nr how many
	// since its cost last restarted, and cheap whether the last was well
	// below its cost (see offShift).
	recent [offRun]float64
	nr     int
	cheap  bool
}

// rowsOf is o's rows drafted per sequence-step: measured once o has
// played, else its shape's nodes.
func (o option) rowsOf() float64 {
	if o.n == 0 {
		return float64(o.shape.Len())
	}
	return o.rows
}

// kappa returns the tier's cost of a row per sequence, as a share of a
// plain step, and whether the steps measured it. It may be below zero
// only as far as the tier's biggest shape keeps a twentieth of a plain
// step's cost: a backend may run short passes faster than its plain one,
// never for nothing.
func (t *tierState) kappa() (float64, bool) {
	a, b, ok := t.fit.line()
	if !ok || a <= 0 {
		return 0, false
	}
	k := b / a
	if k < 0 {
		most := 1
		for _, o := range t.options {
			most = max(most, o.shape.Len())
		}
		k = max(k, -0.95/float64(most))
	}
	return k, true
}

// line is the tier's fitted relative time of a step of r rows per
// sequence.
func (t *tierState) line(r float64) float64 { return max(1+t.k*r, 0.05) }

// residual is o's steps' relative time over the line's at their rows:
// their mean, shrunk towards every step's (the line's own, see unit) by
// costPrior steps (offPrior for Off).
func (t *tierState) residual(o option) float64 {
	w, u := t.aged(o)
	prior := float64(costPrior)
	if o.shape.Off() {
		prior = offPrior
	}
	return (u + prior*t.unit()) / (w + prior)
}

// unit is the mean residual of all the tier's steps, over fitMemory or
// so: the line is fitted to the steps' times and the base rests where
// their logs do, so a step's residual is a little above 1 on the mean
// (the more so the noisier the machine), the leader's like every other.
func (t *tierState) unit() float64 {
	if t.uw <= 0 {
		return 1
	}
	return t.us / t.uw
}

// aged returns o's weight and residual sum, weighing less by e for every
// fitMemory steps the tier has seen since o's last: a residual is over
// the line of its day, and the line moves over fitMemory or so. An
// option re-tried rarely (Off where speculation wins by far) is thus
// judged by the line again in the end, not by a few steps the line has
// long moved away from.
func (t *tierState) aged(o option) (w, u float64) {
	d := t.decay(o)
	return d * o.cw, d * o.cu
}

// age is aged on o itself, for a new step.
func (t *tierState) age(o *option) {
	d := t.decay(*o)
	o.cw, o.cu, o.cuu = d*o.cw, d*o.cu, d*o.cuu
}

// decay is the weight left to o's steps after the tier's steps since.
func (t *tierState) decay(o option) float64 {
	return math.Exp(-float64(t.seen-o.seen) / fitMemory)
}

// rebase puts every option's residual in the units of the new leader's,
// as the old leader's were: the time base follows the leader's steps
// through the line alone (see observe), so it takes in the leader's
// residual, and the others' residuals were measured against that.
// Without it, a new leader's residual fell to the old one's over its
// own steps while every other kept its own, and each option measured
// cheap while it led.
func (t *tierState) rebase(old, lead int) {
	if old < 0 || lead < 0 || old == lead {
		return
	}
	f := t.residual(t.options[old]) / t.residual(t.options[lead])
	for i := range t.options {
		p := &t.options[i]
		p.cu, p.cuu = f*p.cu, f*f*p.cuu
	}
}

// effective returns o's accepted drafts and rows per sequence-step at the
// traffic now: its own over the steps that drafted, times the tier's
// share of steps that draft. An n-gram drafter finds matches in runs (a
// reply that quotes the conversation, then one that does not); an
// option's own means followed the runs it happened to be played in, so
// a shape re-tried in a lull measured poor for long and the leader
// changed with the runs, not with the shapes. The draft model always
// drafts: there the two are the same.
func (t *tierState) effective(o option) (acc, rows float64) {
	if o.nD == 0 || o.shape.Off() || t.drafted == 0 {
		return o.acc, o.rowsOf()
	}
	return t.drafting * o.accD, t.drafting * o.rowsD
}

// cost returns o's relative step time: the line's at o's mean rows times
// o's residual.
func (t *tierState) cost(o option) float64 {
	_, rows := t.effective(o)
	return t.line(rows) * t.residual(o)
}

// value is o's committed tokens per sequence per plain step (the line's):
// the inverse of its cost per committed token.
func (t *tierState) value(o option) float64 {
	acc, _ := t.effective(o)
	return (1 + acc) / t.cost(o)
}

// spread is the relative standard error of o's value: of its mean
// accepted drafts and of its mean step time, over the steps each rests
// on (as many as weigh in the running means). Each variance is shrunk
// towards a prior one by spreadPrior steps: two steps that happened to
// accept alike say nothing of the spread.
func (t *tierState) spread(o option, accA float64) float64 {
	if o.accN == 0 || o.cw <= 0 {
		return math.Inf(1)
	}
	// A sequence-step accepts from none of its drafts to all of them
	// along a path: a spread of about half of that, up to two tokens.
	l := float64(min(o.shape.MaxDepth, 4))
	na := min(float64(o.accN), 2/accA-1)
	va := (na*max(o.acc2-o.acc*o.acc, 0) + spreadPrior*l*l/4) / (na + spreadPrior)
	u := o.cu / o.cw
	nu := min(float64(o.n), 2*costMemory-1)
	vu := (nu*max(o.cuu/o.cw-u*u, 0)/(u*u) + spreadPrior*timeSpread*timeSpread) / (nu + spreadPrior)
	return math.Sqrt(va/(na*(1+o.acc)*(1+o.acc)) + vu/nu)
}

// spreadPrior is the weight, in steps, of the prior variances in spread.
const spreadPrior = 2

// timeSpread is the prior relative spread of a step's time about the
// load's and the option's cost: a shared machine's.
const timeSpread = 0.2

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
		if o.n > 0 && t.value(o) > t.value(t.options[best])*(1+switchMargin) {
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
				o.wait, o.next = explore, t.steps+min(int(float64(explore)*slowness(t, t.options[best], *o)), 64*explore)
			}
		} else {
			o := &t.options[t.best]
			o.wait, o.next = explore, t.steps+explore
		}
		t.rebase(t.best, best)
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
			o.next = t.steps + min(int(float64(o.wait)*slowness(t, t.options[best], *o)), 64*explore)
			close := closeRun
			if o.shape.Off() {
				// Off is the baseline every other option must beat:
				// one step measures a shape's cost poorly on a loaded
				// machine, so Off keeps being measured at the base
				// interval until speculation clearly wins.
				close = closeOff
			}
			v, lead := t.value(*o), t.value(t.options[best])
			// An option that drafts backs off only where its estimate
			// is sure to lose, and less far while it is close: a close
			// runner-up re-tried every Explore steps for good (a few
			// shapes 5-10% slower than the leader took a fifth of the
			// steps), and one that lost its first steps by chance (a
			// chain whose drafts were rejected twice) backed off for
			// good.
			hi := v * (1 + sure*t.spread(*o, d.accAlpha()))
			if o.cheap {
				// Off's last step came in well below its cost: a few
				// more at the base interval tell whether the world
				// changed (see offShift).
				o.wait, o.next = explore, t.steps+explore
			} else if o.shape.Off() && v < close*lead && o.n >= trusted {
				o.wait = min(2*o.wait, 64*explore)
			} else if !o.shape.Off() && hi < close*lead {
				o.wait = min(2*o.wait, 64*explore)
			} else if !o.shape.Off() && hi < lead {
				o.wait = min(2*o.wait, closeWait*explore)
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
	// perNode is the tier's cost of a row (kappa); perAcc the most
	// accepted drafts per node an option may hope for when its shape was
	// measured nowhere; best the best measured value.
	perNode, perAcc, best float64
}

// priorWeight is the weight, in observations, of a full acceptance in the
// hope an option measured nowhere is allowed: two unlucky first steps (a
// chain's first draft rejected twice) must not make every bigger budget
// look hopeless.
const priorWeight = 2

// prior takes the tier's cost per row from its fit, once Off and a shape
// that drafts have played, and the best accepted drafts per node any
// option showed (fewer nodes accept more per node: the first draft of a
// chain, or the likeliest node of a tree, is the likeliest to be
// accepted), shrunk towards full acceptance by priorWeight.
func (t *tierState) prior() prior {
	var p prior
	off := slices.IndexFunc(t.options, func(o option) bool { return o.shape.Off() })
	if off < 0 || t.options[off].n == 0 {
		return p
	}
	k, ok := t.kappa()
	drafted := false
	for _, o := range t.options {
		if o.n == 0 {
			continue
		}
		p.best = max(p.best, t.value(o))
		l := float64(o.shape.Len())
		if l == 0 {
			continue
		}
		drafted = true
		n := float64(o.n)
		p.perAcc = max(p.perAcc, (n*o.acc+priorWeight*l)/(n+priorWeight)/l)
	}
	p.ok, p.perNode = ok && drafted, max(k, 0)
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
	return (1+acc)/(1+p.perNode*l) < closeRun*p.best
}

// slowness is how many times slower than the leader o measures, at least
// 1 and at most 16. Off is never slowed down: it is the baseline every
// other option must beat, and one unlucky measurement of it must not keep
// it from being checked again.
func slowness(t *tierState, leader, o option) float64 {
	if o.n == 0 || o.shape.Off() {
		return 1
	}
	return min(max(t.value(leader)/t.value(o), 1), 16)
}

// Observe records a class-0 step; see ObserveClass.
func (d *Dispatcher) Observe(load, batch int, s Shape, tokens int, elapsed time.Duration) {
	d.ObserveClass(0, load, batch, s, tokens, elapsed)
}

// ObserveClass records a step in which batch sequences of class, run with
// shape s, committed tokens tokens (accepted drafts plus one per sequence)
// in elapsed time (the whole step's), picked by PickClass(class, load):
// load chooses the tier, as it did for the pick. Each sequence is taken to
// have drafted the nodes of the option credited (see ObserveRows).
func (d *Dispatcher) ObserveClass(class, load, batch int, s Shape, tokens int, elapsed time.Duration) {
	d.observe(class, load, batch, s, tokens, -1, elapsed)
}

// ObserveRows is ObserveClass for a caller that counts the rows the
// step's sequences of class drafted (a drafter that found nothing to
// draft, a tree cut to the room it got, drafts fewer than s's nodes). The
// pick PickClass returned last gets the credit when s is it or its main
// chain (a caller that verifies only chains cut it so), so a budget is
// measured by what it yields on the caller's backend; another s counts
// for the option of its name.
func (d *Dispatcher) ObserveRows(class, load, batch int, s Shape, tokens, rows int, elapsed time.Duration) {
	if rows >= 0 {
		d.observe(class, load, batch, s, tokens, rows, elapsed)
	}
}

// observe is ObserveRows; rows < 0 stands for the credited option's nodes.
func (d *Dispatcher) observe(class, load, batch int, s Shape, tokens, rows int, elapsed time.Duration) {
	t := d.tier(class, load)
	if t == nil || batch <= 0 {
		return
	}
	// A coarse clock reads 0 for a cheap step; dropping it dropped its
	// acceptance too, and an option whose steps all read 0 never left
	// its warm-up.
	elapsed = max(elapsed, time.Nanosecond)
	a := d.Alpha
	if a <= 0 {
		a = 0.2
	}
	accA := d.accAlpha()
	at := t.last
	if at < 0 || at >= len(t.options) || s.Name != t.options[at].shape.Name && s.Name != mainChain(t.options[at].shape).Name {
		at = slices.IndexFunc(t.options, func(o option) bool { return o.shape.Name == s.Name })
	}
	if at < 0 || at >= len(t.options) {
		return
	}
	o := &t.options[at]
	if rows < 0 {
		rows = batch * o.shape.Len()
	}
	lt := math.Log(elapsed.Seconds())
	r := float64(rows) / float64(batch)
	if !t.based {
		t.logBase, t.based = lt, true
	}
	// The step's time relative to the base the steps before it set (the
	// load now) goes into the fit; then the base follows the load, as
	// far as the fit explains this step's time. The base is in the fit's
	// units (a plain step takes a of it), so the fit's older steps stay
	// comparable with its new ones as the base moves.
	y := math.Exp(lt - t.logBase)
	res := t.residual(*o)
	if t.fit.n >= fitAfter {
		p := t.line(r) * res
		y = min(max(y, p/fitClip), p*fitClip)
	}
	u := y / t.line(r) // against the line before this step
	if o.shape.Off() {
		t.shift(o, u, res)
		res = t.residual(*o)
		// Every step of Off does the same work: one far from its mean
		// is the machine's (another process, a collection), not Off's,
		// and Off's few steps where speculation wins must not carry it.
		u = min(max(u, res/offClip), res*offClip)
	}
	t.fit.add(r, y)
	// Pin the line's scale at 1 and keep it in the base: the steps enter
	// the fit in linear units while the base follows their logs, and a
	// noisy step's mean lies above its log's, so unpinned the line's
	// scale grew and the base fell without bound (a ran past 1e33 in half
	// a million steps of a steady world, then everything was NaN).
	// Residuals and kappa are ratios to the line and do not move.
	// A fit whose intercept is not positive (a few very noisy steps) is
	// left unpinned: dividing by a floor instead multiplied its sums by
	// the floor's inverse on every step until they overflowed and every
	// estimate was NaN for good.
	if s, _, _ := t.fit.line(); s > 0 && s != 1 {
		t.fit.wy /= s
		t.fit.wry /= s
		t.logBase += math.Log(s)
	}
	t.k, _ = t.kappa()
	// The option's residual is over the line, not a mean relative time:
	// the line's units move with the base (the fit follows its steps),
	// and the residual stays in them.
	t.age(o)
	f := 1 - 1.0/costMemory
	o.cw, o.cu, o.cuu = f*o.cw+1, f*o.cu+u, f*o.cuu+u*u
	t.seen++
	o.seen = t.seen
	g := 1 - 1.0/fitMemory
	t.uw, t.us = g*t.uw+1, g*t.us+u
	// The base follows the load as far as the option's cost over the
	// leader's does not explain the step: a leader's step through the
	// line alone, so the base rests where the leader's residual does
	// (the leader's is the unit of every other's, see rebase); another
	// option's through its residual over the leader's, so that a re-try
	// of a dear shape is not taken for a change of load.
	cost := t.line(r)
	if l := t.best; l >= 0 && l != at && t.options[l].cw > 0 {
		cost *= res / t.residual(t.options[l])
	}
	t.logBase += a * min(max(lt-math.Log(cost)-t.logBase, -loadStep), loadStep)
	if t.batch == 0 {
		t.batch = float64(batch)
	}
	t.batch += a * (float64(batch) - t.batch)
	o.n++
	o.accN++
	// A step commits at least one token per sequence; fewer is a caller's
	// error, and a negative acceptance made the option's value zero and
	// its spread NaN.
	acc := max(float64(tokens-batch)/float64(batch), 0)
	w := max(1/float64(o.accN), accA)
	o.acc += w * (acc - o.acc)
	o.acc2 += w * (acc*acc - o.acc2)
	o.rows += max(1/float64(o.n), accA) * (r - o.rows)
	if !o.shape.Off() {
		// A step drafted where any of its sequences did: exact for one
		// sequence, and for many nearly every step drafts.
		d := 0.0
		if rows > 0 {
			d = 1
			o.nD++
			wd := max(1/float64(o.nD), accA)
			o.accD += wd * (acc - o.accD)
			o.rowsD += wd * (r - o.rowsD)
		}
		t.drafted++
		t.drafting += max(1/float64(t.drafted), accA) * (d - t.drafting)
	}
}

// shift records Off's step of residual u (before the clip), res its
// residual before it, and restarts Off's cost at the median of its last
// offRun steps when that lies offShift or more below (see offShift).
func (t *tierState) shift(o *option, u, res float64) {
	o.cheap = u < res*math.Exp(-offShift)
	o.recent[o.nr%offRun] = u
	o.nr++
	if o.nr < offRun || o.cw <= 0 || o.cu <= 0 {
		return
	}
	m := o.recent
	slices.Sort(m[:])
	if med := m[offRun/2]; med < res*math.Exp(-offShift) {
		// Only downwards: a machine's outliers are slow ones, and Off
		// that got dearer loses its re-tries only.
		f := med / (o.cu / o.cw)
		o.cu, o.cuu = f*o.cu, f*f*o.cuu
		o.nr = 0
	}
}

func (d *Dispatcher) accAlpha() float64 {
	if d.AccAlpha <= 0 {
		return 0.01
	}
	// A weight above one is no moving average (and made spread's count
	// of observations negative).
	return min(d.AccAlpha, 1)
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
	accA := d.accAlpha()
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
		w, acc := max(1/float64(o.accN), accA), float64(sum)/float64(n)
		o.acc += w * (acc - o.acc)
		o.acc2 += w * (acc*acc - o.acc2)
		// The sequences here drafted (a sequence whose drafter found
		// nothing is not among them).
		o.nD++
		wd := max(1/float64(o.nD), accA)
		o.accD += wd * (acc - o.accD)
		if o.n == 0 {
			o.rowsD = float64(j)
		}
	}
}

// ShapeStats is one option's measurements.
type ShapeStats struct {
	Shape string
	// Steps observed, committed tokens per second (estimated at the
	// machine's load now), and accepted draft tokens per sequence-step:
	// both as the dispatcher compares them (an option that drafts is
	// judged by its steps that drafted, times the tier's share of such
	// steps, so a chain is told its acceptance by longer shapes too).
	Steps        int
	TokensPerSec float64
	Accepted     float64
}

// Kappa returns class 0's cost of a drafted row per sequence in the tier
// that serves load, as a share of a plain step (the dispatcher's fit), and
// how many steps the fit rests on.
func (d *Dispatcher) Kappa(load int) (float64, int) { return d.ClassKappa(0, load) }

// ClassKappa is Kappa for class.
func (d *Dispatcher) ClassKappa(class, load int) (float64, int) {
	t := d.tier(class, load)
	if t == nil {
		return 0, 0
	}
	return t.k, t.fit.n
}

// Stats returns class 0's measurements in the tier that serves load.
func (d *Dispatcher) Stats(load int) []ShapeStats { return d.ClassStats(0, load) }

// ClassStats returns class's measurements in the tier that serves load.
// TokensPerSec is what an option would commit now: its tokens per
// sequence-step at the traffic now (see effective) times the tier's mean
// sequences per step, over its step time at the tier's current time base,
// as the dispatcher compares them. (With each option's own mean
// acceptance instead, an n-gram chain told its acceptance by a longer
// chain's drafting steps read 1.5 times the one played most.)
func (d *Dispatcher) ClassStats(class, load int) []ShapeStats {
	t := d.tier(class, load)
	if t == nil {
		return nil
	}
	out := make([]ShapeStats, len(t.options))
	for i, o := range t.options {
		acc, _ := t.effective(o)
		out[i] = ShapeStats{Shape: o.shape.Name, Steps: o.n, Accepted: acc}
		if o.n > 0 {
			out[i].TokensPerSec = t.batch * t.value(o) / math.Exp(t.logBase)
		}
	}
	return out
}
