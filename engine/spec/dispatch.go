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
const offPrior = 1

// shiftLog is how far, in log units, the median of an option's last
// shiftRun steps must lie below the running median of its steps for its
// estimate to be taken as changed and restarted from them: one step is
// noise, a run of them a third below is the world (another backend, a
// neighbour that takes compute but not bandwidth). Averaged
// in over costMemory steps instead, Off went unplayed for thousands of
// steps after drafting got three times dearer.
const shiftLog = 0.4

// shiftRun is how many of an option's steps shiftLog judges.
const shiftRun = 5

// medStep is how far, in log units, one step moves an option's running
// median (up if the step lies above it, else down): half the spread of a
// machine's steps, so it rests within a few percent of the median and
// follows a change of shiftLog within ten steps or so.
const medStep = 0.05

// cheapLog is how much cheaper, in log units, than its estimate a
// runner-up's step must be for its re-tries to come back to the base
// interval: a runner-up backed off far is re-tried often enough for
// shiftRun steps to tell whether it changed.
const cheapLog = 0.4

// thin is the least weight, in steps, of a leader's own steps for its
// cost to be frozen (see observe).
const thin = 2

// releaseWeight is the most weight, in steps, of a dethroned leader's
// frozen cost. A runner-up whose estimate erred low takes the lead and
// freezes that error as the reference; the dethroned leader, re-tried in
// the new base, shows it, but only once its first re-tries outweigh the
// frozen cost it carries. At the line's prior (16) that took a dozen
// re-tries at b=8 and a shape at 0.81 of Off's speed led for hundreds of
// steps; at 4 a few re-tries correct it, and the lock-in worlds
// (TestDispatcherLoadChanges) read the same.
const releaseWeight = 4

// offWait is the most times the base interval between re-tries of Off:
// Off is the baseline, and a change that makes speculation lose must be
// seen within a few hundred steps, at a cost below half a percent where
// speculation wins by half.
const offWait = 16

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
//     machine's load. The leader is the reference: its steps move the
//     base (each by a bounded amount) and nothing else, its cost frozen
//     at what its steps measured while it was a runner-up; every other
//     option's steps are measured against that base. An option's cost is
//     thus a ratio to the leader's, whatever error the leader's own
//     estimate has, and the leader's cost and the load cannot drift apart
//     (when the leader's steps moved both, a change of load went partly
//     into its cost, and re-basing every option at a change of leader by
//     the ratio of two estimates locked the choice onto a shape half as
//     good for thousands of steps in some worlds). An option's cost is
//     the mean, over its own last costMemory or so steps that drafted, of
//     their times, shrunk towards a line a + b·r in the rows by costPrior
//     steps (a shape measured on a step or two, in a burst or a lull, is
//     judged mostly by the line). A step that drafted nothing (an n-gram
//     drafter that found no match) is a plain step and measures Off, so
//     a tree's cost is its own where it drafts and Off's elsewhere, at
//     the tier's share of steps that draft. A run of an option's steps
//     well below the median of its steps restarts its estimate at once
//     (see shiftLog), and it is re-tried at the base interval meanwhile:
//     drafting that got three times dearer than a plain step left Off
//     unplayed for thousands of steps while its estimate healed a step
//     at a time. Neither happens while the base is still catching up
//     with a change of load (the reference's steps say so): a step is
//     then cheap by the base's lag.
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
	// logBase is the log of the time base (seconds): the load as the
	// reference's steps see it. A step of option o that drafts is
	// expected to take exp(logBase)·own(o), moved along the line for
	// rows other than o's mean.
	logBase float64
	batch   float64
	based   bool
	// ref is the option whose steps move the base (the leader, or the
	// first of the warm-up before there is one) and not its own
	// estimate, refCost its time per step at refRows rows per sequence,
	// frozen while it is the reference: every other option's cost is
	// measured against it, so the leader's cost and the load cannot
	// drift apart (the leader's steps moved both, and a change of load
	// went partly into its cost), and an option's estimate is a ratio to
	// the leader's whatever error the leader's own estimate has. Frozen
	// as a time, not a residual over the line: the base would move with
	// the line's slope, and the line is fitted to times over the base.
	ref              int
	refCost, refRows float64
	// refBias is the mean of the reference's step times over their
	// geometric mean, refCost: the base follows the logs of its steps (a
	// step several times slower moves it little), while every cost is a
	// mean of times (an n-gram tree's steps cost a plain step or many).
	// Frozen at its mean instead, the reference read 20% cheaper than
	// the others where one step in ten was three times slower.
	refBias float64
	off     int // Off's option, -1 if none
	// lags are the reference's last steps' log residuals left after the
	// base moved (what the base has yet to follow), nlag how many.
	lags [3]float64
	nlag int
	// moving is whether the median of lags is beyond what one step may
	// move the base (loadStep): the load changed and the base is still
	// catching up (see measure).
	moving bool
	// fit is the line of every step's time over the base in its rows,
	// over fitMemory steps or so: what rows cost, for the prior of an
	// option measured on few steps or none.
	fit costFit
	// seen counts the tier's steps observed.
	seen int
	// drafting is the share of the steps of options that draft in which
	// the drafter found something to draft, over the last 1/AccAlpha or
	// so (drafted counts them): a property of the traffic, not of the
	// shape.
	drafting float64
	drafted  int
	// a and k are the line's plain step (in units of the base) and
	// kappa's, kept from the last step.
	a, k float64
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
	i     int // the option's index in its tier
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
	// cw, cu and cuu are the option's own steps that drafted (Off's: every
	// step that drafted nothing, whichever option it was played for),
	// each weighing less by 1/costMemory with every later one and by e
	// with every fitMemory of the tier's steps (see aged): the weight,
	// and the weighted sums of their residuals (a step's time over the
	// base and the line's at its rows) and squared residuals. pw is the
	// weight of the line's prior in the option's residual: costPrior,
	// offPrior for Off, none once the option has led (its steps then
	// set the base, and its residual stays what it was frozen at).
	cw, cu, cuu, pw float64
	// cul is the weighted sum of the residuals' logs (cw's weights).
	cul float64
	// lmed follows the log of the median of the option's steps, by
	// medStep a step.
	lmed float64
	// recent are the last steps' residuals (nr of them since the
	// estimate last restarted, see shiftLog).
	recent [shiftRun]float64
	nr     int
	// drop is how much cheaper, in log units, the option's last step was
	// than the running median of its steps before it (lmed).
	drop float64
	// seen is the tier's step count (tierState.seen) at o's last step.
	seen int
	// wait is the current re-try interval in steps and next the step of
	// the next re-try, while the option is not the best.
	wait, next int
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
// sequence, as a share of a plain step's.
func (t *tierState) line(r float64) float64 { return max(1+t.k*r, 0.05) }

// own is o's time per step that drafts (Off's: per step) over the base:
// the mean of its steps', shrunk towards the line's at its rows (times
// unit) by pw steps; the reference's is frozen. It does not depend on
// the line once measured: a step's time is not a line in its rows (on a
// CPU two to four rows cost little more than one, past that each row
// its compute; a draft model's passes cost per depth, not per node), and
// an option judged by the line at its rows changed cost whenever the
// line's slope moved.
func (t *tierState) own(o option) float64 {
	if o.i == t.ref {
		// Frozen at the rows it drafted then, moved along the line to
		// the rows it drafts now: a leader frozen in its warm-up, when
		// its few steps had drafted nothing (an n-gram tree that found
		// no match), was otherwise judged at a plain step's cost while
		// its steps drafted two rows, and read a third cheaper than it
		// was against Off for the whole run.
		return t.refCost * t.refBias * t.line(t.rowsCost(o)) / t.line(t.refRows)
	}
	return t.estimate(o)
}

// estimate is own for an option that is not the reference.
func (t *tierState) estimate(o option) float64 {
	w, u := t.aged(o)
	prior := max(t.a, 1e-3) * t.line(t.rowsCost(o))
	if w+o.pw <= 0 {
		return prior
	}
	return (u + o.pw*prior) / (w + o.pw)
}

// aged returns o's weight and residual sum, weighing less by e for every
// fitMemory steps the tier has seen since o's last: an option re-tried
// rarely is judged by the line again in the end, not by a few steps of a
// world that has moved on.
func (t *tierState) aged(o option) (w, u float64) {
	d := t.decay(o)
	return d * o.cw, d * o.cu
}

// age is aged on o itself, for a new step.
func (t *tierState) age(o *option) {
	d := t.decay(*o)
	o.cw, o.cu, o.cuu, o.cul = d*o.cw, d*o.cu, d*o.cuu, d*o.cul
}

// decay is the weight left to o's steps after the tier's steps since.
func (t *tierState) decay(o option) float64 {
	return math.Exp(-float64(t.seen-o.seen) / fitMemory)
}

// setRef makes option i the reference, frozen at its residual now. The
// old one's steps, which moved the base rather than its own estimate,
// are set to say the residual it was frozen at: a change of leader moves
// no estimate (scaling every option's by the ratio of the two leaders'
// made every option read dear after a leader's unlucky steps, and the
// best was backed off for thousands of steps).
func (t *tierState) setRef(i int) {
	if i == t.ref || i < 0 {
		return
	}
	if old := t.ref; old >= 0 {
		o := &t.options[old]
		t.age(o)
		o.cw = float64(min(max(o.n, 1), releaseWeight))
		// At the rows it drafts now, as own reads it (see own).
		c := t.own(*o)
		geo := c / t.refBias
		o.cu, o.cuu, o.cul, o.pw = c*o.cw, c*c*o.cw*(1+timeSpread*timeSpread), math.Log(geo)*o.cw, 0
		o.seen, o.nr = t.seen, 0
		o.lmed = math.Log(geo)
	}
	t.ref = i
	// lags are the reference's: the old one's say nothing of how far
	// the base is behind the new one's steps.
	t.nlag = 0
	t.freeze()
}

// freeze sets the reference's cost from its estimate.
func (t *tierState) freeze() {
	o := t.options[t.ref]
	cost := t.estimate(o)
	geo := cost
	if w := t.decay(o) * o.cw; w > 0 {
		geo = math.Exp(t.decay(o) * o.cul / w)
	}
	t.refCost, t.refBias, t.refRows = geo, cost/geo, t.rowsCost(o)
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

// rowsCost is o's rows per sequence-step that drafts: the line's rows of
// its cost.
func (t *tierState) rowsCost(o option) float64 {
	switch {
	case o.shape.Off():
		return 0
	case o.nD == 0 || t.drafted == 0 || t.off < 0:
		return o.rowsOf()
	}
	return o.rowsD
}

// cost returns o's time per step over the base: its own per step that
// drafts, and for the tier's share of steps that draft nothing (an
// n-gram drafter that found no match) Off's.
func (t *tierState) cost(o option) float64 {
	if o.shape.Off() || o.nD == 0 || t.drafted == 0 || t.off < 0 {
		return t.own(o)
	}
	return t.drafting*t.own(o) + (1-t.drafting)*t.own(t.options[t.off])
}

// value is o's committed tokens per sequence per time base: the inverse
// of its cost per committed token.
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
	nu := max(min(float64(o.n), 2*costMemory-1), 1)
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
		ts := tierState{max: t.MaxBatch, best: -1, a: 1}
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
		ts.off = slices.IndexFunc(ts.options, func(o option) bool { return o.shape.Off() })
		for i := range ts.options {
			o := &ts.options[i]
			o.i, o.pw = i, costPrior
			if o.shape.Off() {
				o.pw = offPrior
			}
		}
		// Before a leader, the first option of the warm-up is the
		// reference (see setRef).
		ts.ref, ts.refCost, ts.refBias = ts.order[0], 1, 1
		ts.refRows = float64(ts.options[ts.ref].shape.Len())
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
		t.setRef(best)
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
			switch {
			case o.drop > cheapLog && v*math.Exp(o.drop) > close*lead:
				// Its last step came in well below its estimate, and
				// at that cost it would be close: the world may have
				// changed, and a few steps more tell (see shiftLog).
				o.wait, o.next = explore, t.steps+explore
			case o.shape.Off() && v < close*lead && o.n >= trusted:
				o.wait = min(2*o.wait, offWait*explore)
			case !o.shape.Off() && hi < close*lead:
				o.wait = min(2*o.wait, 64*explore)
			case !o.shape.Off() && hi < lead:
				o.wait = min(2*o.wait, closeWait*explore)
			default:
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
	// The step's cost is its option's where it drafted, else Off's: a
	// step that drafted nothing (an n-gram drafter that found no match)
	// is a plain step, and every such step measures the baseline.
	q := at
	if rows == 0 && t.off >= 0 {
		q = t.off
	}
	// What q's step is expected to take: its own cost, moved along the
	// line for rows other than its mean (a dynamic tree's or an n-gram
	// tree's vary from step to step).
	c := t.own(t.options[q])
	want := c * t.line(r) / t.line(t.rowsCost(t.options[q]))
	mid := want // where the logs of q's steps lie
	if q == t.ref {
		mid = want / t.refBias
	}
	if !t.based {
		t.logBase, t.based = lt-math.Log(mid), true
	}
	// The step's time relative to the base the steps before it set (the
	// load now) goes into the fit, a line in the rows (what rows cost,
	// for the prior of an option not measured yet), and into q's own.
	y := math.Exp(lt - t.logBase)
	t.moving = false
	if q != t.ref && t.nlag >= len(t.lags) {
		m := t.lags
		slices.Sort(m[:])
		t.moving = math.Abs(m[len(m)/2]) > loadStep
	}
	if t.seen >= fitAfter {
		y = min(max(y, want/fitClip), want*fitClip)
	}
	t.fit.add(r, y)
	t.seen++
	if q == t.ref {
		// The reference's step moves the base, as far as a step may
		// move it (see loadStep), and nothing else: its cost is the
		// unit every other option's is measured in.
		if o := &t.options[q]; o.cw*t.decay(*o) < thin {
			// A leader measured on a few steps (an n-gram tree that
			// drafted twice in its warm-up, then led on its line's
			// prior) measures itself against the base its predecessor
			// left, held, until it rests on as many steps as the
			// prior: frozen at once, its error went into the base, and
			// every other option read wrong by half for hundreds of
			// steps.
			t.measure(o, y*t.line(t.refRows)/t.line(r), t.estimate(*o))
			t.freeze()
		} else {
			rd := lt - t.logBase - math.Log(mid)
			mv := a * min(max(rd, -loadStep), loadStep)
			t.logBase += mv
			t.lags[t.nlag%len(t.lags)] = rd - mv
			t.nlag++
			o.seen = t.seen
			// The bias starts where the reference's own steps put it
			// and moves as slowly as any cost: one slow step right
			// after a change of leader doubled it.
			t.refBias += (y/mid - t.refBias) / costMemory
		}
	} else {
		if at == t.ref {
			// The leader drafted nothing (an n-gram drafter in a reply
			// that quotes nothing): the base follows the load through
			// Off's cost, a quarter as fast, so a run of such steps
			// under a drifting load does not leave it behind.
			t.logBase += a / 4 * min(max(lt-t.logBase-math.Log(mid), -loadStep), loadStep)
		}
		t.measure(&t.options[q], y*c/want, c)
	}
	t.pin()
	if a, _, _ := t.fit.line(); a > 0 {
		t.a = a
	}
	t.k, _ = t.kappa()
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

// pin keeps Off's cost at one unit of the base by moving the base and
// every cost the other way: nothing any choice reads changes. A change of
// leader moves the base by the error of the new leader's estimate, and a
// new leader is one whose estimate erred low more often than not:
// unpinned, the base rose and every cost fell without bound. (Pinned to
// the line's plain step instead, an extrapolation where Off is rarely
// played, the base jumped with the line's slope.)
func (t *tierState) pin() {
	if t.off < 0 {
		return
	}
	c := t.own(t.options[t.off])
	if !(c > 0) || c == 1 || math.IsInf(c, 0) {
		return
	}
	t.logBase += math.Log(c)
	t.refCost /= c
	t.a /= c
	t.fit.wy /= c
	t.fit.wry /= c
	for i := range t.options {
		o := &t.options[i]
		o.cu /= c
		o.cuu /= c * c
		o.cul -= o.cw * math.Log(c)
		o.lmed -= math.Log(c)
		for k := range o.recent {
			o.recent[k] /= c
		}
	}
}

// measure adds a step of o's, u its time over the base (at o's mean
// rows) and res o's own cost before it.
func (t *tierState) measure(o *option, u, res float64) {
	if o.cw >= 4 {
		// One step in ten or so on a shared machine is several times
		// slower (another process, a collection): a step counts for at
		// most fitClip times the estimate either way.
		u = min(max(u, res/fitClip), res*fitClip)
	}
	t.age(o)
	f := 1 - 1.0/costMemory
	o.cw, o.cu, o.cuu, o.cul = f*o.cw+1, f*o.cu+u, f*o.cuu+u*u, f*o.cul+math.Log(u)
	seen := o.seen
	o.seen = t.seen
	o.drop = 0
	if t.moving {
		// The base is still catching up with a change of load: a step
		// is cheap or dear by the base's lag, not by the world. Taken
		// for the world, a chain re-tried as a tenfold burst ended
		// restarted at half its cost and led for 900 steps at 0.8 of
		// the best.
		return
	}
	// Cheap or not against the median of the option's steps, not their
	// mean: an option whose steps cost a plain step or many (a tree the
	// caller does not count the rows of, empty on most steps) has most
	// of its steps far below its mean, and each of them restarted its
	// cost or brought its next re-try at once; the big trees took a
	// tenth of the steps where they lose by a third.
	if lu := math.Log(u); o.cw <= 1 {
		o.lmed = lu
	} else {
		o.drop = max(o.lmed-lu, 0)
		if lu > o.lmed {
			o.lmed += medStep
		} else {
			o.lmed -= medStep
		}
	}
	if t.seen-seen > fitMemory {
		// Steps this old are of another world: they do not judge
		// whether this one changed.
		o.nr = 0
	}
	o.recent[o.nr%shiftRun] = u
	o.nr++
	if o.nr < shiftRun {
		return
	}
	m := o.recent
	slices.Sort(m[:])
	if med := m[shiftRun/2]; med < math.Exp(o.lmed-shiftLog) {
		// The last shiftRun steps agree on a lower cost: the world
		// changed. Move every step it rests on by as much, so the
		// estimate is at the new cost at once. Only downwards: a
		// machine's outliers are slow ones, and three of five steps in
		// a burst restarted Off three times dearer than it was; an
		// option that got dearer costs its re-tries only, and a leader
		// that got dearer moves the base, so every other reads cheaper.
		// The steps' geometric mean goes to the median of the last few
		// (moved by the running median's drop instead, the costs that
		// had drifted from it went with them: Off read 0.6 of its
		// speed against the leader in a few seeds, a burst's end left
		// a lock-in).
		f := med / math.Exp(o.cul/o.cw)
		o.cu, o.cuu, o.cul = f*o.cu, f*f*o.cuu, o.cul+o.cw*math.Log(f)
		o.lmed = math.Log(med)
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
	return t.k, t.seen
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
