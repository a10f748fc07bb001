package spec

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestDispatcherOffMeasure: the measure of Off, the baseline every shape
// must beat, and of a new leader must not rest on a few steps that a burst
// of load (or a lull) happened to hit. Each case plays the default b=1
// tier on a fake clock (plain step 1 ms, each tree node a share of it,
// drafts accepted as a chain with per-draft rate alpha) and disturbs some
// steps; the dispatcher must still play near the best value, and its
// estimate of Off against the leader must not end more than 10% slow.
// With each option's cost a running mean of its re-tries, Off backing off
// while it seemed to lose, the two burst cases and the heavy-tailed one
// failed: Off ended at 0.55-0.73 of its speed against the leader.
func TestDispatcherOffMeasure(t *testing.T) {
	acc := func(s Shape, alpha float64) float64 {
		l := min(s.Len(), s.MaxDepth)
		tok, p := 0.0, 1.0
		for range l {
			p *= alpha
			tok += p
		}
		return tok
	}
	type step struct {
		shape  Shape
		n      int // the shape's observations before this step
		random *rand.Rand
	}
	for _, tc := range []struct {
		name    string
		alpha   float64 // per-draft acceptance
		perNode float64 // a node's cost, in plain steps
		// load returns the factor on a step's time.
		load  func(s step) float64
		seeds int
		want  float64 // the least mean share of the best value
	}{
		{
			// The failure seen in a bench run: Off measured at 0.63 of
			// plain speed kept losing trees on for the whole run.
			name: "Off's first four steps in bursts, drafts lose", alpha: 0.3, perNode: 0.3,
			load: func(s step) float64 {
				if s.shape.Off() && s.n < 4 {
					return 2
				}
				return 1
			},
			seeds: 1, want: 0.97,
		},
		{
			name: "Off's first four steps in bursts, drafts win a little", alpha: 0.55, perNode: 0.3,
			load: func(s step) float64 {
				if s.shape.Off() && s.n < 4 {
					return 2
				}
				return 1
			},
			seeds: 1, want: 0.97,
		},
		{
			// A big tree measured in a lull must not lead on its
			// lucky steps.
			name: "a big tree's first four steps in a lull", alpha: 0.5, perNode: 0.15,
			load: func(s step) float64 {
				if s.shape.Name == "dyn8" && s.n < 4 {
					return 0.5
				}
				return 1
			},
			seeds: 1, want: 0.95,
		},
		{
			// One step in twelve is three times slower (another
			// process, a collection).
			name: "heavy-tailed noise", alpha: 0.45, perNode: 0.2,
			load: func(s step) float64 {
				f := math.Exp(0.1 * s.random.NormFloat64())
				if s.random.Float64() < 1.0/12 {
					f *= 3
				}
				return f
			},
			seeds: 8, want: 0.96,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			value := func(s Shape) float64 { return (1 + acc(s, tc.alpha)) / (1 + tc.perNode*float64(s.Len())) }
			top := 0.0
			for _, s := range append(DefaultTiers()[0].Shapes, Off) {
				top = max(top, value(s))
			}
			mean := 0.0
			for seed := range uint64(tc.seeds) {
				r := rand.New(rand.NewPCG(seed, 15))
				d := NewDispatcher(nil)
				seen := map[string]int{}
				carry := map[string]float64{}
				picks := map[string]int{}
				got := 0.0
				const steps, warm = 3000, 200
				for i := range steps {
					s := d.Pick(1)
					if i >= warm {
						picks[s.Name]++
						got += value(s) / top / (steps - warm)
					}
					carry[s.Name] += acc(s, tc.alpha)
					tok := math.Floor(carry[s.Name])
					carry[s.Name] -= tok
					f := tc.load(step{shape: s, n: seen[s.Name], random: r})
					seen[s.Name]++
					el := time.Duration(f * (1 + tc.perNode*float64(s.Len())) * float64(time.Millisecond))
					d.Observe(1, 1, s, 1+int(tok), el)
				}
				mean += got / float64(tc.seeds)
				// Off against the option played most: the estimate's
				// ratio and the true one.
				stats := d.Stats(1)
				off, lead, leadShape := offAndLeader(stats, picks)
				if lead.Shape != "off" {
					est := off.TokensPerSec / lead.TokensPerSec
					truth := value(Off) / value(leadShape)
					// Measured slow, Off keeps losing shapes on; measured
					// fast it costs at most what speculation gains, which
					// the value check bounds.
					if est < 0.9*truth || est > 1.6*truth || off.Steps == 0 {
						t.Errorf("seed %d: Off measures %.2f of %s's speed; want %.2f (at least 90%% of it, at most 160%%) (stats %+v)", seed, est, lead.Shape, truth, stats)
					}
				}
				t.Logf("seed %d: picks %v, %.3f of the best value", seed, picks, got)
			}
			if mean < tc.want {
				t.Errorf("have %.3f of the best value; want ≥ %.2f", mean, tc.want)
			}
		})
	}
}

// TestDispatcherNested: a step of a chain tells what every shorter chain
// of its tier would have accepted (a chain drafts the first nodes of a
// longer one), so their acceptance is measured on the leader's steps;
// sequences the step let draft fewer nodes than a chain has say nothing
// of it, nor does a step of a tree.
func TestDispatcherNested(t *testing.T) {
	for _, tc := range []struct {
		name              string
		played            Shape
		accepted, drafted []int
		chain2, chain3    float64 // the acceptance each then shows
		steps2, steps3    int     // the steps it rests on
	}{
		{name: "one sequence", played: Chain(4), accepted: []int{3}, drafted: []int{4}, chain2: 2, chain3: 3, steps2: 1, steps3: 1},
		{name: "two sequences", played: Chain(4), accepted: []int{1, 4}, drafted: []int{4, 4}, chain2: 1.5, chain3: 2, steps2: 1, steps3: 1},
		{name: "one cut to 2", played: Chain(4), accepted: []int{0, 2}, drafted: []int{4, 2}, chain2: 1, chain3: 0, steps2: 1, steps3: 1},
		{name: "all cut to 2", played: Chain(4), accepted: []int{2}, drafted: []int{2}, chain2: 2, steps2: 1},
		{name: "a chain of 3", played: Chain(3), accepted: []int{3}, drafted: []int{3}, chain2: 2, steps2: 1},
		{name: "a tree", played: Bushy, accepted: []int{3}, drafted: []int{16}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := NewDispatcher([]Tier{{Shapes: []Shape{Bushy, Chain(4), Chain(3), Chain(2)}}})
			d.ObserveNested(0, 2, tc.played, tc.accepted, tc.drafted)
			d.Stats(2) // makes the class's tiers
			for _, o := range d.classes[0][0].options {
				var want float64
				var n int
				switch o.shape.Name {
				case "chain2":
					want, n = tc.chain2, tc.steps2
				case "chain3":
					want, n = tc.chain3, tc.steps3
				}
				if o.acc != want || o.accN != n || o.n != 0 {
					t.Errorf("%s: accepted %.2f on %d steps (%d played); want %.2f on %d (none played)", o.shape.Name, o.acc, o.accN, o.n, want, n)
				}
			}
		})
	}
}

// TestDispatcherEmptyTrees: an n-gram drafter fills its shape only where
// the conversation matches and drafts nothing elsewhere, so a big tree's
// steps cost a plain step most of the time and many rows the rest. Its
// cost is their mean: judged by its typical (empty) step, a big tree looks
// nearly free and leads while losing. (With every option's cost a median
// of its steps, this case played 0.76 of the best value.)
func TestDispatcherEmptyTrees(t *testing.T) {
	const match, alpha, perNode = 0.3, 0.5, 0.25
	value := func(s Shape) float64 {
		tok, p := 0.0, 1.0
		for range min(s.Len(), s.MaxDepth) {
			p *= alpha
			tok += p
		}
		return (1 + match*tok) / (1 + match*perNode*float64(s.Len()))
	}
	top := 0.0
	for _, s := range append(DefaultTiers()[0].Shapes, Off) {
		top = max(top, value(s))
	}
	const seeds, steps = 8, 1500
	mean := 0.0
	for seed := range uint64(seeds) {
		r := rand.New(rand.NewPCG(seed, 5))
		d := NewDispatcher(nil)
		picks := map[string]int{}
		got := 0.0
		for range steps {
			s := d.Pick(1)
			picks[s.Name]++
			got += value(s) / top / steps
			rows, acc := 0, 0
			if r.Float64() < match {
				rows = s.Len()
				for acc < min(s.Len(), s.MaxDepth) && r.Float64() < alpha {
					acc++
				}
			}
			f := math.Exp(0.1 * r.NormFloat64())
			d.Observe(1, 1, s, 1+acc, time.Duration(f*(1+perNode*float64(rows))*float64(time.Millisecond)))
		}
		mean += got / seeds
		t.Logf("seed %d: picks %v, %.3f of the best value", seed, picks, got)
	}
	if mean < 0.9 {
		t.Errorf("have %.3f of the best value; want ≥ 0.9", mean)
	}
}

// TestDispatcherRowCost: a step's time is modelled as the load's time
// base times 1 + κ·rows, fitted through every step, so neither Off nor a
// shape is judged by the few re-tries that a burst, a lull or a run of
// empty trees happened to hit. Each case plays the default b=1 tier on a
// fake clock (plain step 1 ms, κ of it per drafted row, with noise) with
// sequences that draft only where they "match" (an n-gram drafter: the
// conversation quotes itself in runs, so matches come in runs too) and
// accept each draft with chance alpha when they do; rows are counted as
// the step does. The dispatcher must play near the best value and its
// estimate of Off against the leader must be near the truth. With each
// option's time its own (a running mean of its steps, Off's a median,
// the leader's frozen after eight of them), the runs of matches made the
// choice follow which phase an option was re-tried in. So did each
// option's own mean acceptance where runs are long: with the acceptance
// of the steps that drafted times the tier's share of them, the two
// cases held to 0.965 read 0.970-0.975 over three sets of seeds, and
// 0.948-0.963 before.
func TestDispatcherRowCost(t *testing.T) {
	type world struct {
		r     *rand.Rand
		match bool
		load  float64
	}
	for _, tc := range []struct {
		name  string
		kappa float64 // a drafted row's cost, in plain steps
		// curve, when set, is a step's cost by rows drafted instead
		// (points joined by straight lines).
		curve [][2]float64
		alpha float64 // per-draft acceptance where the drafter matched
		// stay is the chance that a step matches as the one before it
		// did; share the steady share of steps that match.
		stay, share float64
		noise       float64 // log-normal spread of a step's time
		tail        float64 // the chance that a step is three times slower
		drift       float64 // log-normal step of the load, per step
		// bent: the cost curve is not a line, so the fitted line's
		// value at no rows (Off) rests on Off's few re-tries and on
		// where the small shapes' steps put it; Off's estimate is not
		// held to the band then, only the value played.
		bent  bool
		seeds int
		want  float64 // the least mean share of the best value
	}{
		{name: "matches in long runs", kappa: 0.25, alpha: 0.6, stay: 0.97, share: 0.5, noise: 0.1, tail: 1.0 / 12, seeds: 8, want: 0.965},
		{name: "matches in short runs", kappa: 0.25, alpha: 0.6, stay: 0.8, share: 0.5, noise: 0.1, tail: 1.0 / 12, seeds: 8, want: 0.93},
		{name: "rare matches, dear rows", kappa: 0.4, alpha: 0.55, stay: 0.95, share: 0.3, noise: 0.15, tail: 1.0 / 10, seeds: 8, want: 0.93},
		{name: "drifting load", kappa: 0.2, alpha: 0.6, stay: 0.95, share: 0.6, noise: 0.1, drift: 0.05, seeds: 8, want: 0.965},
		{
			// A draft model on a CPU, as measured: drafting at all
			// costs a fifth of a step (the draft's passes, the
			// multi-row kernels), rows up to four little more, rows
			// past eight a third of a step each. A straight line
			// through these steps makes short chains look best.
			name: "draft model, rows cost unevenly", alpha: 0.65, stay: 1, share: 1, noise: 0.1, tail: 1.0 / 12, bent: true, seeds: 8, want: 0.95,
			curve: [][2]float64{{0, 1}, {1, 1.21}, {2, 1.30}, {3, 1.32}, {4, 1.54}, {8, 2.47}, {16, 4.7}, {32, 7.5}, {64, 14}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Accepted drafts of s where it matched: a chain of its depth
			// (a dynamic tree as a chain of its nodes with a better alpha).
			acc := func(s Shape) float64 {
				a, l := tc.alpha, min(s.Len(), s.MaxDepth)
				if s.Dynamic {
					a, l = min(a+0.1, 0.95), s.Len()
				}
				tok, p := 0.0, 1.0
				for range l {
					p *= a
					tok += p
				}
				return tok
			}
			cost := func(rows int) float64 {
				if tc.curve == nil {
					return 1 + tc.kappa*float64(rows)
				}
				r := float64(rows)
				for i := 1; i < len(tc.curve); i++ {
					if a, b := tc.curve[i-1], tc.curve[i]; r <= b[0] {
						return a[1] + (b[1]-a[1])*(r-a[0])/(b[0]-a[0])
					}
				}
				return tc.curve[len(tc.curve)-1][1]
			}
			value := func(s Shape) float64 {
				return (1 + tc.share*acc(s)) / (tc.share*cost(s.Len()) + (1-tc.share)*cost(0))
			}
			top := 0.0
			for _, s := range append(DefaultTiers()[0].Shapes, Off) {
				top = max(top, value(s))
			}
			leave := 0.0 // match → no match
			if tc.share < 1 {
				leave = (1 - tc.stay) * tc.share / (1 - tc.share)
			}
			enter := 1 - tc.stay // no match → match
			mean := 0.0
			for seed := range uint64(tc.seeds) {
				w := world{r: rand.New(rand.NewPCG(seed, 21)), load: 1, match: tc.share == 1}
				d := NewDispatcher(nil)
				picks := map[string]int{}
				carry := map[string]float64{}
				got := 0.0
				const steps, warm = 3000, 200
				for i := range steps {
					if w.match && w.r.Float64() < leave || !w.match && w.r.Float64() < enter {
						w.match = !w.match
					}
					s := d.Pick(1)
					if i >= warm {
						picks[s.Name]++
						got += value(s) / top / (steps - warm)
					}
					rows, tok := 0, 0.0
					if w.match && !s.Off() {
						rows = s.Len()
						carry[s.Name] += acc(s)
						tok = math.Floor(carry[s.Name])
						carry[s.Name] -= tok
					}
					w.load = min(max(w.load*math.Exp(tc.drift*w.r.NormFloat64()), 0.5), 2)
					f := w.load * math.Exp(tc.noise*w.r.NormFloat64())
					if w.r.Float64() < tc.tail {
						f *= 3
					}
					el := time.Duration(f * cost(rows) * float64(time.Millisecond))
					d.ObserveRows(0, 1, 1, s, 1+int(tok), rows, el)
				}
				mean += got / float64(tc.seeds)
				if k, n := d.Kappa(1); tc.curve == nil && (n < steps/2 || k < 0.7*tc.kappa || k > 1.3*tc.kappa) {
					t.Errorf("seed %d: the fit puts a drafted row at %.3f of a plain step over %d steps; want %.2f (±30%%)", seed, k, n, tc.kappa)
				}
				stats := d.Stats(1)
				off, lead, leadShape := offAndLeader(stats, picks)
				if lead.Shape != "off" {
					est := off.TokensPerSec / lead.TokensPerSec
					truth := value(Off) / value(leadShape)
					if !tc.bent && (est < 0.85*truth || est > 1.25*truth) {
						t.Errorf("seed %d: Off measures %.2f of %s's speed; want %.2f (85%% to 125%% of it) (stats %+v)", seed, est, lead.Shape, truth, stats)
					}
				}
				t.Logf("seed %d: picks %v, %.3f of the best value", seed, picks, got)
			}
			if mean < tc.want {
				t.Errorf("have %.3f of the best value; want ≥ %.2f", mean, tc.want)
			}
		})
	}
}

// offAndLeader returns Off's stats, the stats of the option played most
// (picks: steps per shape name) and that option's shape among the default
// tiers', for comparing the dispatcher's estimate of Off with the truth.
func offAndLeader(stats []ShapeStats, picks map[string]int) (off, lead ShapeStats, leadShape Shape) {
	for _, st := range stats {
		if st.Shape == "off" {
			off = st
		}
		if picks[st.Shape] > picks[lead.Shape] {
			lead = st
		}
	}
	for _, s := range DefaultTiers()[0].Shapes {
		if s.Name == lead.Shape {
			leadShape = s
		}
	}
	return off, lead, leadShape
}

// TestDispatcherSettles: once the options' estimates rest on many steps,
// the dispatcher spends its steps on the best shapes. Each case plays a
// tier on a fake clock with a cost per shape that is not a straight line
// in its rows (drafting at all costs the draft's passes, rows 2-4 cost
// little more than one, past that every row its compute, and a chain's
// sequential draft passes cost more than a dynamic tree's of as many
// nodes), drafts accepted as a chain with a per-draft rate per shape (the
// nested chains told on every chain step, as the step tells them), and
// noise with heavy tails. At steady state (after a warm-up as long as the
// bench's) the mean share of steps played on shapes that lose lossy or
// more to the best must stay below most, and the value played above want.
//
// Before, close runners-up were re-tried every 16 steps for good, round
// robin (chain2 at 90% of the leader took a sixteenth of the steps), the
// cost of a shape was the line's at its rows, so two shapes of as many
// rows cost alike whatever their steps took, and Off was judged by the
// intercept of a line fitted mostly through steps that draft: where every
// shape loses to plain decoding (b=8 here) it played dyn4 for most of the
// run in one seed of eight. Its means, case by case: 0.972 of the best
// value with 0.042 of the steady steps on losing shapes, 0.969 and 0.36,
// 0.936 and 0.71, 0.978 and 0.125 (now 0.981 and 0.019, 0.987 and 0.13,
// 0.960 and 0.46, 0.997 and 0.020; with two other sets of seeds the old
// read 0.032-0.036 lost in the first case, 0.938-0.940 in the third and
// 0.943-0.950 in the fourth, the new 0.015-0.019, 0.952-0.972 and 0.996).
func TestDispatcherSettles(t *testing.T) {
	type shape struct {
		p    float64 // per-draft acceptance along the shape's main path
		cost float64 // a step's cost with the shape full, in plain steps
	}
	// far are the big budgets of the b=1 tier: each loses by half or
	// more wherever rows 5 and up cost their compute.
	far := map[string]shape{"dyn8": {0.7, 2.2}, "bushy16": {0.75, 3.2}, "dyn16": {0.6, 3.6}, "dyn32": {0.55, 6}}
	with := func(m map[string]shape) map[string]shape {
		for k, v := range far {
			m[k] = v
		}
		return m
	}
	for _, tc := range []struct {
		name  string
		batch int
		world map[string]shape
		// fill is the spread of a dynamic tree's fill: each sequence
		// drafts a share of the budget drawn from 1-fill to 1.
		fill  float64
		lossy float64 // a shape this much below the best counts as a loss
		most  float64 // the most mean share of steady steps on such shapes
		want  float64 // the least mean share of the best value
	}{
		{
			// As the bench reads the draft model at b=1 (fixed shapes,
			// per CPU-second): dyn4, chain4 and chain3 within 3% of each
			// other, chain2 10% below them.
			name: "b1 draft model as measured", batch: 1, lossy: 0.05, most: 0.025, want: 0.975,
			world: with(map[string]shape{"off": {0, 1}, "chain2": {0.8, 1.3}, "chain3": {0.8, 1.32}, "chain4": {0.8, 1.5}, "dyn4": {0.8, 1.46}}),
		},
		{
			// dyn4 best, chain3 and chain4 6-7% below it: too close to
			// be told apart reliably in the steps there are (the old
			// dispatcher passes too; over three sets of seeds both read
			// 0.97-0.99).
			name: "b1 two close runners-up", batch: 1, lossy: 0.04, most: 0.4, want: 0.965,
			world: with(map[string]shape{"off": {0, 1}, "chain2": {0.8, 1.30}, "chain3": {0.8, 1.36}, "chain4": {0.8, 1.56}, "dyn4": {0.815, 1.49}}),
		},
		{
			// chain4 best, chain3 5% and dyn4 9% below it.
			name: "b1 chains lead", batch: 1, lossy: 0.04, most: 0.55, want: 0.948,
			world: with(map[string]shape{"off": {0, 1}, "chain2": {0.8, 1.22}, "chain3": {0.8, 1.26}, "chain4": {0.8, 1.36}, "dyn4": {0.81, 1.52}}),
		},
		{
			// b=8 where every drafted row costs its compute and drafting
			// at all costs the draft's eight passes: every shape loses
			// to Off by 9% or more; dynamic trees fill half of their
			// budget on average.
			//
			// Held to 0.06 of the steps lost (0.021 over 32 seeds when
			// the leader's own steps moved both its cost and the base).
			// With the leader the frozen reference, a runner-up (chain2
			// at 0.91 of Off, dyn4 at 0.81) whose estimate erred low
			// takes the lead now and then and freezes that error as the
			// reference; the dethroned Off's re-tries correct it as soon
			// as they outweigh its frozen cost (releaseWeight): 0.045
			// over these eight seeds, 0.054 over 32; at a weight of 16,
			// 0.081 over either.
			name: "b8 every shape loses to off", batch: 8, fill: 1, lossy: 0.04, most: 0.06, want: 0.99,
			world: map[string]shape{"off": {0, 1}, "chain2": {0.6, 2.15}, "chain4": {0.6, 2.9}, "dyn4": {0.68, 3.0}, "dyn8": {0.6, 4}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			acc := func(s Shape) float64 {
				w := tc.world[s.Name]
				tok, q := 0.0, 1.0
				for range min(s.Len(), s.MaxDepth) {
					q *= w.p
					tok += q
				}
				return tok
			}
			// A step of rows r per sequence (dynamic trees filled in
			// part) costs half its shape's extra over plain for drafting
			// at all, the other half in proportion to r.
			cost := func(s Shape, rows float64) float64 {
				if s.Off() || rows == 0 {
					return 1
				}
				return 1 + (tc.world[s.Name].cost-1)*(0.5+0.5*rows/float64(s.Len()))
			}
			// draw returns the nodes a sequence drafts with s and the
			// drafts accepted.
			draw := func(r *rand.Rand, s Shape) (nodes, accepted int) {
				nodes = s.Len()
				depth := min(nodes, s.MaxDepth)
				if s.Dynamic {
					if tc.fill > 0 {
						nodes = int(math.Round(float64(nodes) * (1 - tc.fill*r.Float64())))
					}
					depth = nodes
				}
				for accepted < depth && r.Float64() < tc.world[s.Name].p {
					accepted++
				}
				return nodes, accepted
			}
			var tier []Shape
			for _, tr := range DefaultTiers() {
				if tr.MaxBatch == 0 || tc.batch <= tr.MaxBatch {
					tier = append(tr.Shapes, Off)
					break
				}
			}
			// The true value of a shape: exact for a static one, over
			// many draws of a dynamic one's fill.
			values := map[string]float64{}
			top := 0.0
			for _, s := range tier {
				if _, ok := tc.world[s.Name]; !ok {
					t.Fatalf("no world for %s", s.Name)
				}
				v := (1 + acc(s)) / cost(s, float64(s.Len()))
				if s.Dynamic && tc.fill > 0 {
					r := rand.New(rand.NewPCG(1, 2))
					const n = 100000
					nodes, accepted := 0, 0
					for range n {
						a, b := draw(r, s)
						nodes, accepted = nodes+a, accepted+b
					}
					v = (1 + float64(accepted)/n) / cost(s, float64(nodes)/n)
				}
				values[s.Name] = v
				top = max(top, v)
			}
			const seeds = 8
			meanValue, meanLost := 0.0, 0.0
			for seed := range uint64(seeds) {
				r := rand.New(rand.NewPCG(seed, 33))
				d := NewDispatcher(nil)
				picks := map[string]int{}
				got, lost := 0.0, 0
				const steps, warm = 4000, 2000
				accepted, drafted := make([]int, tc.batch), make([]int, tc.batch)
				for i := range steps {
					s := d.Pick(tc.batch)
					if i >= warm {
						picks[s.Name]++
						got += values[s.Name] / top / (steps - warm)
						if values[s.Name] < (1-tc.lossy)*top {
							lost++
						}
					}
					rows, tok := 0, tc.batch
					for k := range tc.batch {
						n, a := draw(r, s)
						rows += n
						tok += a
						accepted[k], drafted[k] = a, s.Len()
					}
					// Log-normal noise of 0.1, and one step in twelve
					// three times slower.
					f := math.Exp(0.1 * r.NormFloat64())
					if r.Float64() < 1.0/12 {
						f *= 3
					}
					el := time.Duration(f * cost(s, float64(rows)/float64(tc.batch)) * float64(time.Millisecond))
					d.ObserveRows(0, tc.batch, tc.batch, s, tok, rows, el)
					d.ObserveNested(0, tc.batch, s, accepted, drafted)
				}
				share := float64(lost) / (steps - warm)
				meanValue += got / seeds
				meanLost += share / seeds
				t.Logf("seed %d: picks %v, %.3f of the best value, %.3f of the steps lost", seed, picks, got, share)
			}
			vals := map[string]float64{}
			for k, v := range values {
				vals[k] = math.Round(100*v/top) / 100
			}
			if meanValue < tc.want || meanLost > tc.most {
				t.Errorf("have %.3f of the best value, %.3f of the steady steps on shapes %.0f%% or more below the best; want ≥ %.3f and ≤ %.2f (values against the best %v)",
					meanValue, meanLost, 100*tc.lossy, tc.want, tc.most, vals)
			}
			t.Logf("%.3f of the best value, %.3f of the steps lost; values against the best %v", meanValue, meanLost, vals)
		})
	}
}

// TestDispatcherFollowsTraffic: a dispatcher that settled on a shape still
// follows a change of the traffic or the backend (the leader's drafts
// accepted less, the chains' more, a chain's passes cheaper, drafting
// dearer than plain decoding): the value
// played over the 3000 steps after the change must stay above want. The
// b=1 tier plays a world as the bench reads the draft model, on a fake
// clock with heavy-tailed noise, for 2000 steps before the change. With
// every option's cost the line's at its rows, a chain that got cheaper
// than a dynamic tree of as many nodes was never seen (0.865 of the best
// value), and a leader whose drafts began to fail held on for longer
// (0.963).
func TestDispatcherFollowsTraffic(t *testing.T) {
	type shape struct{ p, cost float64 }
	for _, tc := range []struct {
		name   string
		change map[string]shape
		want   float64
	}{
		{name: "the leader's drafts fail more", change: map[string]shape{"dyn4": {0.55, 1.46}}, want: 0.975},
		{name: "the chains' drafts fail less", change: map[string]shape{"chain2": {0.93, 1.3}, "chain3": {0.93, 1.32}, "chain4": {0.93, 1.5}}, want: 0.93},
		{name: "chain4 gets cheaper", change: map[string]shape{"chain4": {0.8, 1.2}}, want: 0.93},
		// A neighbour that takes compute but not bandwidth: every shape
		// that drafts costs three times what it did, Off the same, and
		// Off is now 1.3 times the best shape. Before, Off's re-tries
		// were clipped to its old cost and healed it by a few percent
		// each, 1024 steps apart: 0.754 of the best value. Now a re-try
		// well below its cost brings the next at once, and a run of them
		// restarts it (0.869: the first re-try after the change may
		// still be up to 1024 steps away). With Off the unit of every
		// cost and re-tried every 256 steps at least (offWait): 0.950.
		{name: "drafting gets three times dearer", change: map[string]shape{"chain2": {0.8, 3.9}, "chain3": {0.8, 3.96}, "chain4": {0.8, 4.5}, "dyn4": {0.8, 4.38},
			"dyn8": {0.7, 6.6}, "bushy16": {0.75, 9.6}, "dyn16": {0.6, 10.8}, "dyn32": {0.55, 18}}, want: 0.93},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const seeds, steps, before = 8, 5000, 2000
			tier := append(DefaultTiers()[0].Shapes, Off)
			mean := 0.0
			for seed := range uint64(seeds) {
				world := map[string]shape{"off": {0, 1}, "chain2": {0.8, 1.3}, "chain3": {0.8, 1.32}, "chain4": {0.8, 1.5}, "dyn4": {0.8, 1.46},
					"dyn8": {0.7, 2.2}, "bushy16": {0.75, 3.2}, "dyn16": {0.6, 3.6}, "dyn32": {0.55, 6}}
				value := func(s Shape) float64 {
					tok, q := 0.0, 1.0
					for range min(s.Len(), s.MaxDepth) {
						q *= world[s.Name].p
						tok += q
					}
					return (1 + tok) / world[s.Name].cost
				}
				r := rand.New(rand.NewPCG(seed, 7))
				d := NewDispatcher(nil)
				got := 0.0
				for i := range steps {
					if i == before {
						for k, v := range tc.change {
							world[k] = v
						}
					}
					s := d.Pick(1)
					if i >= before {
						top := 0.0
						for _, x := range tier {
							top = max(top, value(x))
						}
						got += value(s) / top / (steps - before)
					}
					a := 0
					for a < min(s.Len(), s.MaxDepth) && r.Float64() < world[s.Name].p {
						a++
					}
					f := math.Exp(0.1 * r.NormFloat64())
					if r.Float64() < 1.0/12 {
						f *= 3
					}
					d.ObserveRows(0, 1, 1, s, 1+a, s.Len(), time.Duration(f*world[s.Name].cost*float64(time.Millisecond)))
					d.ObserveNested(0, 1, s, []int{a}, []int{s.Len()})
				}
				mean += got / seeds
			}
			if mean < tc.want {
				t.Errorf("have %.3f of the best value after the change; want ≥ %.3f", mean, tc.want)
			}
			t.Logf("%.3f of the best value after the change", mean)
		})
	}
}

// TestDispatcherLoadChanges: a dispatcher that settled keeps playing near
// the best shape through a steady run, a burst of load and a lasting fall
// of load, in every one of many seeds: a lock-in shows in one seed in ten
// or in eighty, so eight say little. The b=1 world of
// TestDispatcherFollowsTraffic; the value played over the 3000 steps after
// step 2000, its mean and its worst seed. Before, the leader's own steps
// moved both its cost and the base, a cost was the line's at the option's
// rows times a residual (a line whose slope drifted below zero made dyn32
// read nearly free), and a change of leader re-based every option by the
// ratio of two estimates: over these 80 seeds the worst read 0.756
// (stationary), 0.896 with 11 seeds below 0.93 (10x load for 100 steps)
// and 0.661 (load x0.2 for good); now 0.965, 0.931 and 0.942.
func TestDispatcherLoadChanges(t *testing.T) {
	cost := map[string]float64{"off": 1, "chain2": 1.3, "chain3": 1.32, "chain4": 1.5, "dyn4": 1.46,
		"dyn8": 2.2, "bushy16": 3.2, "dyn16": 3.6, "dyn32": 6}
	p := map[string]float64{"off": 0, "chain2": 0.8, "chain3": 0.8, "chain4": 0.8, "dyn4": 0.8,
		"dyn8": 0.7, "bushy16": 0.75, "dyn16": 0.6, "dyn32": 0.55}
	value := func(s Shape) float64 {
		tok, q := 0.0, 1.0
		for range min(s.Len(), s.MaxDepth) {
			q *= p[s.Name]
			tok += q
		}
		return (1 + tok) / cost[s.Name]
	}
	top := 0.0
	for _, s := range append(DefaultTiers()[0].Shapes, Off) {
		top = max(top, value(s))
	}
	for _, tc := range []struct {
		name  string
		load  func(step int) float64
		mean  float64 // the least mean share of the best value
		worst float64 // the least share in any seed
	}{
		{"stationary", func(int) float64 { return 1 }, 0.97, 0.93},
		{"10x load for 100 steps", func(i int) float64 {
			if i >= 2000 && i < 2100 {
				return 10
			}
			return 1
		}, 0.97, 0.93},
		{"load falls to a fifth", func(i int) float64 {
			if i >= 2000 {
				return 0.2
			}
			return 1
		}, 0.97, 0.93},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const seeds, steps, from = 80, 5000, 2000
			mean, worst, bad := 0.0, 1.0, 0
			for seed := range uint64(seeds) {
				r := rand.New(rand.NewPCG(seed, 7))
				d := NewDispatcher(nil)
				got := 0.0
				for i := range steps {
					s := d.Pick(1)
					if i >= from {
						got += value(s) / top / (steps - from)
					}
					a := 0
					for a < min(s.Len(), s.MaxDepth) && r.Float64() < p[s.Name] {
						a++
					}
					f := math.Exp(0.1 * r.NormFloat64())
					if r.Float64() < 1.0/12 {
						f *= 3
					}
					f *= tc.load(i)
					d.ObserveRows(0, 1, 1, s, 1+a, s.Len(), time.Duration(f*cost[s.Name]*float64(time.Millisecond)))
					d.ObserveNested(0, 1, s, []int{a}, []int{s.Len()})
				}
				mean += got / seeds
				if got < worst {
					worst = got
				}
				if got < tc.worst {
					bad++
				}
			}
			if mean < tc.mean || worst < tc.worst {
				t.Errorf("have %.3f of the best value on the mean, %.3f in the worst of %d seeds (%d below %.2f); want ≥ %.2f and ≥ %.2f", mean, worst, seeds, bad, tc.worst, tc.mean, tc.worst)
			}
			t.Logf("%.3f of the best value on the mean, %.3f in the worst seed", mean, worst)
		})
	}
}

// TestDispatcherScaleStays: over a long steady run the cost line's scale
// and the time base stay where a plain step puts them. Unpinned, the
// line's scale drifted up and the base down by the noise's bias on every
// step, past 1e33 in half a million steps and to NaN after a few million.
func TestDispatcherScaleStays(t *testing.T) {
	const steps = 200_000
	cost := map[string]float64{"off": 1, "chain2": 1.3, "chain3": 1.32, "chain4": 1.5, "dyn4": 1.46,
		"dyn8": 2.2, "bushy16": 3.2, "dyn16": 3.6, "dyn32": 6}
	r := rand.New(rand.NewPCG(3, 9))
	d := NewDispatcher(nil)
	for range steps {
		s := d.Pick(1)
		a := 0
		for a < min(s.Len(), s.MaxDepth) && r.Float64() < 0.8 {
			a++
		}
		f := math.Exp(0.3 * r.NormFloat64())
		d.ObserveRows(0, 1, 1, s, 1+a, s.Len(), time.Duration(f*cost[s.Name]*float64(time.Millisecond)))
	}
	tier := &d.classes[0][0]
	a, _, _ := tier.fit.line()
	if base := math.Exp(tier.logBase); !(a > 0.5 && a < 2) || !(base > 0.25e-3 && base < 4e-3) {
		t.Errorf("after %d steps the line's plain step is %g of a base of %g s; want about 1 of about 1 ms", steps, a, base)
	}
	for _, o := range d.Stats(1) {
		if math.IsNaN(o.TokensPerSec) || math.IsInf(o.TokensPerSec, 0) {
			t.Errorf("%s: %g tokens per second", o.Shape, o.TokensPerSec)
		}
	}
}

// TestDispatcherDegenerateInput: a clock that reads 0, a step that
// commits fewer tokens than sequences and an AccAlpha above one leave
// every estimate a number and Off measured.
func TestDispatcherDegenerateInput(t *testing.T) {
	for _, tc := range []struct {
		name     string
		accAlpha float64
		elapsed  time.Duration
		tokens   int // per step of one sequence
	}{
		{"clock reads zero", 0, 0, 2},
		{"no token committed", 1, time.Millisecond, 0},
		{"acceptance weight above one", 3, time.Millisecond, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := NewDispatcher(nil)
			d.AccAlpha = tc.accAlpha
			picks := map[string]int{}
			for range 2000 {
				s := d.Pick(1)
				picks[s.Name]++
				d.ObserveRows(0, 1, 1, s, tc.tokens, s.Len(), tc.elapsed)
			}
			if picks["off"] < 2 {
				t.Errorf("Off played %d times; want its warm-up at least", picks["off"])
			}
			for _, o := range d.Stats(1) {
				if math.IsNaN(o.TokensPerSec) || math.IsNaN(o.Accepted) || o.Accepted < 0 {
					t.Errorf("%s: %g tokens per second, %g accepted", o.Shape, o.TokensPerSec, o.Accepted)
				}
			}
			tier := &d.classes[0][0]
			for _, o := range tier.options {
				if sp := tier.spread(o, d.accAlpha()); math.IsNaN(sp) {
					t.Errorf("%s: spread NaN", o.shape.Name)
				}
			}
		})
	}
}

// TestTiersFor: a step built without a dispatcher offers lookup only the
// budgets it can fill, and any other drafter (or none) every default
// shape.
func TestTiersFor(t *testing.T) {
	names := func(d *Dispatcher, load int) []string {
		var s []string
		for _, o := range d.Stats(load) {
			s = append(s, o.Shape)
		}
		return s
	}
	for _, tc := range []struct {
		name  string
		d     Drafter
		want1 []string // the shapes offered one sequence
	}{
		{"ngram", &NGram{}, []string{"dyn8", "dyn4", "chain4", "chain3", "chain2", "off"}},
		{"other", &fixedDrafter{}, []string{"dyn32", "dyn16", "dyn8", "dyn4", "bushy16", "chain4", "chain3", "chain2", "off"}},
		{"none", nil, []string{"dyn32", "dyn16", "dyn8", "dyn4", "bushy16", "chain4", "chain3", "chain2", "off"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, err := NewStep(StepConfig{Drafter: tc.d, Backend: &treeBackend{}, BlockSize: 4, Slots: 1})
			if err != nil {
				t.Fatal(err)
			}
			if got := names(st.Dispatcher(), 1); !slices.Equal(got, tc.want1) {
				t.Errorf("shapes at b=1 %v; want %v", got, tc.want1)
			}
		})
	}
	// At every batch size lookup is offered the default shapes but those
	// of 16 nodes or more.
	def := NewDispatcher(nil)
	ng := NewDispatcher(NGramTiers())
	for _, load := range []int{1, 2, 4, 5, 8, 9, 16, 17, 64} {
		var want []string
		for _, s := range names(def, load) {
			if !slices.Contains([]string{"dyn32", "dyn16", "bushy16"}, s) {
				want = append(want, s)
			}
		}
		if got := names(ng, load); !slices.Equal(got, want) {
			t.Errorf("b=%d: lookup offered %v; want %v", load, got, want)
		}
	}
}

// TestDispatcherNoisyStaysFinite: very noisy step times (lognormal, sigma
// 1, and one step in twelve three times slower) give the line fit a
// negative intercept now and then; the estimates must stay finite. The
// scale pin divided such a fit by a floor of 1e-3 on every step, and
// within 5000 steps three of these eight seeds read NaN for good.
func TestDispatcherNoisyStaysFinite(t *testing.T) {
	for seed := range uint64(8) {
		r := rand.New(rand.NewPCG(seed, 3))
		d := NewDispatcher(nil)
		for range 5000 {
			s := d.Pick(1)
			a := 0
			for a < min(s.Len(), s.MaxDepth) && r.Float64() < 0.8 {
				a++
			}
			f := math.Exp(r.NormFloat64())
			if r.IntN(12) == 0 {
				f *= 3
			}
			d.ObserveRows(0, 1, 1, s, 1+a, s.Len(), time.Duration(f*(1+3*float64(s.Len()))*float64(time.Millisecond)))
		}
		if k, _ := d.Kappa(1); math.IsNaN(k) || math.IsInf(k, 0) {
			t.Errorf("seed %d: kappa %v", seed, k)
		}
		for _, o := range d.Stats(1) {
			if v := o.TokensPerSec; math.IsNaN(v) || math.IsInf(v, 0) || math.IsNaN(o.Accepted) {
				t.Errorf("seed %d: %s at %v tokens/s, %v accepted", seed, o.Shape, v, o.Accepted)
			}
		}
	}
}
