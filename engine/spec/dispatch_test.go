package spec

import (
	"math"
	"math/rand/v2"
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
// choice follow which phase an option was re-tried in.
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
		{name: "matches in long runs", kappa: 0.25, alpha: 0.6, stay: 0.97, share: 0.5, noise: 0.1, tail: 1.0 / 12, seeds: 8, want: 0.93},
		{name: "matches in short runs", kappa: 0.25, alpha: 0.6, stay: 0.8, share: 0.5, noise: 0.1, tail: 1.0 / 12, seeds: 8, want: 0.93},
		{name: "rare matches, dear rows", kappa: 0.4, alpha: 0.55, stay: 0.95, share: 0.3, noise: 0.15, tail: 1.0 / 10, seeds: 8, want: 0.93},
		{name: "drifting load", kappa: 0.2, alpha: 0.6, stay: 0.95, share: 0.6, noise: 0.1, drift: 0.05, seeds: 8, want: 0.93},
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
