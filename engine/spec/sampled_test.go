package spec

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/specgate/specgate/engine/model"
	"github.com/specgate/specgate/kernels/sample"
)

// chiSquare returns Pearson's statistic of counts against the expected
// probabilities (over n trials) and its critical value at significance
// 0.001. Cells expected fewer than 5 times are pooled into one.
func chiSquare(counts map[string]int, want map[string]float64, n int) (stat, crit float64) {
	var poolE, poolO float64
	df := -1
	for k, p := range want {
		e := p * float64(n)
		o := float64(counts[k])
		if e < 5 {
			poolE += e
			poolO += o
			continue
		}
		stat += (o - e) * (o - e) / e
		df++
	}
	for k, c := range counts {
		if _, ok := want[k]; !ok {
			poolO += float64(c) // impossible outcomes
			poolE += 1e-9
		}
	}
	if poolE > 0 {
		stat += (poolO - poolE) * (poolO - poolE) / math.Max(poolE, 1e-9)
		df++
	}
	// Wilson–Hilferty: χ²(df) quantile ≈ df·(1 − 2/(9df) + z·√(2/(9df)))³,
	// z = 3.0902 for the upper 0.001 tail.
	k := float64(max(df, 1))
	a := 2 / (9 * k)
	crit = k * math.Pow(1-a+3.0902*math.Sqrt(a), 3)
	return stat, crit
}

func key(toks ...int32) string {
	b := make([]byte, 0, 4*len(toks))
	for _, t := range toks {
		b = append(b, byte(t>>8), byte(t), ',')
	}
	return string(b)
}

func norm(v []float32) []float32 {
	var s float32
	for _, x := range v {
		s += x
	}
	out := make([]float32, len(v))
	for i, x := range v {
		out[i] = x / s
	}
	return out
}

// TestVerifyCoupledDistribution: the engine's verification of sampled
// requests takes, at each node, the target's draw with the request's
// uniform for that position (sample.Sampler.Draw), and accepts a child
// only when it is that token. Over many seeds the first two tokens
// emitted must have the target's joint distribution and, seed by seed, be
// the tokens plain sampling draws, whatever the drafter proposed: drafts
// coupled through the same uniforms, independent ones, point masses. A
// known-bad rule (accept any draft the target could have drawn) fails the
// same chi-square test.
func TestVerifyCoupledDistribution(t *testing.T) {
	const V, base = 6, 5 // vocabulary; tokens before the root's successor
	p0 := norm([]float32{0.30, 0.25, 0.2, 0.1, 0.1, 0.05})
	p1 := make([][]float32, V)
	q1 := make([][]float32, V)
	for a := range V {
		w := make([]float32, V)
		u := make([]float32, V)
		for b := range V {
			w[b] = float32(1 + (a*7+b*3)%5)
			u[b] = float32(1 + (a+b*2)%3)
		}
		p1[a], q1[a] = norm(w), norm(u)
	}
	p2 := norm([]float32{1, 1, 1, 1, 1, 1})
	q0 := norm([]float32{0.05, 0.1, 0.1, 0.25, 0.3, 0.2})
	want := map[string]float64{}
	for a := range V {
		for b := range V {
			want[key(int32(a), int32(b))] = float64(p0[a] * p1[a][b])
		}
	}
	// A drafter proposes, for the root's successor (position base) and
	// the one after, from its own q with the request's uniforms (coupled)
	// or with independent ones, plus point-mass siblings.
	coupled := func(s *sample.Sampler, r *rand.Rand) *Tree {
		t := &Tree{}
		c := t.Add(s.Draw(q0, base), -1, q0)
		t.Add(2, -1, nil)
		t.Add(s.Draw(q1[t.Tokens[c]], base+1), c, q1[t.Tokens[c]])
		return t
	}
	independent := func(s *sample.Sampler, r *rand.Rand) *Tree {
		t := &Tree{}
		c := t.Add(draw(q0, r.Float64()), -1, q0)
		t.Add(draw(q0, r.Float64()), -1, q0)
		t.Add(draw(q1[t.Tokens[c]], r.Float64()), c, nil)
		t.Add(4, c, nil)
		return t
	}
	pointMass := func(s *sample.Sampler, r *rand.Rand) *Tree {
		t := &Tree{}
		c := t.Add(0, -1, nil)
		t.Add(1, -1, nil)
		t.Add(3, c, nil)
		return t
	}
	// bad accepts the first child the target gives any probability.
	bad := func(tr *Tree, probs func(int32) []float32, target []int32) (path []int32, next int32) {
		cur := Root
		for {
			p, acc := probs(cur), Root
			for i := cur + 1; int(i) < len(tr.Tokens); i++ {
				if tr.Parent[i] == cur && p[tr.Tokens[i]] > 0 {
					acc = i
					break
				}
			}
			if acc == Root {
				return path, target[cur+1]
			}
			path, cur = append(path, acc), acc
		}
	}
	cases := []struct {
		name  string
		tree  func(*sample.Sampler, *rand.Rand) *Tree
		valid bool
	}{
		{"coupled", coupled, true},
		{"independent", independent, true},
		{"point_mass", pointMass, true},
		{"coupled/bad_rule", coupled, false},
		{"point_mass/bad_rule", pointMass, false},
	}
	const n = 20000
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			counts := map[string]int{}
			accepted := 0
			for seed := range uint64(n) {
				s := sample.New(sample.Params{Temperature: 1, Seed: seed})
				r := rand.New(rand.NewPCG(seed, 7))
				tr := tc.tree(s, r)
				probs := func(node int32) []float32 {
					switch {
					case node == Root:
						return p0
					case tr.Parent[node] == Root:
						return p1[tr.Tokens[node]]
					}
					return p2
				}
				depth := func(node int32) int {
					d := 0
					for ; node >= 0; node = tr.Parent[node] {
						d++
					}
					return d
				}
				target := make([]int32, tr.Len()+1)
				for node := Root; int(node) < tr.Len(); node++ {
					target[node+1] = s.Draw(probs(node), base+depth(node))
				}
				var path []int32
				var next int32
				if tc.valid {
					path, next = VerifyGreedy(tr, target)
				} else {
					path, next = bad(tr, probs, target)
				}
				accepted += len(path)
				toks := make([]int32, 0, 3)
				for _, nd := range path {
					toks = append(toks, tr.Tokens[nd])
				}
				toks = append(toks, next)
				if len(toks) == 1 {
					toks = append(toks, s.Draw(p1[toks[0]], base+1)) // the next, plain step
				}
				plain0 := s.Draw(p0, base)
				if plain := [2]int32{plain0, s.Draw(p1[plain0], base+1)}; tc.valid && (toks[0] != plain[0] || toks[1] != plain[1]) {
					t.Fatalf("seed %d: speculation emitted %v; plain sampling %v", seed, toks[:2], plain)
				}
				counts[key(toks[0], toks[1])]++
			}
			stat, crit := chiSquare(counts, want, n)
			t.Logf("χ² = %.1f, critical %.1f; %.2f drafts accepted per step", stat, crit, float64(accepted)/n)
			if tc.valid && stat > crit {
				t.Errorf("lossless rule: have χ² %.1f; want ≤ %.1f", stat, crit)
			}
			if !tc.valid && stat <= crit {
				t.Errorf("bad rule: have χ² %.1f; want > %.1f (the test does not catch it)", stat, crit)
			}
		})
	}
}

// exactJoint computes the target's exact distribution of the first k
// completion tokens under params (penalty-free, so per-token Probs after
// the context is the whole story), enumerating every prefix with nonzero
// probability.
func exactJoint(t *testing.T, m model.Loaded, prompt []int32, params sample.Params, k int) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	samp := sample.New(params)
	v := m.Config().Vocab
	probs := make([]float32, v)
	var walk func(ctx []int32, gen []int32, pr float64)
	walk = func(ctx []int32, gen []int32, pr float64) {
		if len(gen) == k || (len(gen) > 0 && m.Tokenizer().IsEOG(gen[len(gen)-1])) {
			out[key(gen...)] += pr
			return
		}
		s, err := model.NewSequences(m, 1, len(ctx)+1)
		if err != nil {
			t.Fatal(err)
		}
		logits, err := s.Step([][]int32{ctx})
		if err != nil {
			t.Fatal(err)
		}
		samp.Probs(logits[:v], ctx, probs)
		next := append([]float32(nil), probs...)
		for tok, q := range next {
			if q > 0 {
				walk(append(append([]int32(nil), ctx...), int32(tok)), append(append([]int32(nil), gen...), int32(tok)), pr*float64(q))
			}
		}
	}
	walk(prompt, nil, 1)
	return out
}

// draw returns the index u (in [0, 1)) selects from the weights p, which
// need not sum to one; 0 when all are zero.
func draw(p []float32, u float64) int32 {
	var total float64
	last := -1
	for i, v := range p {
		if v > 0 {
			total += float64(v)
			last = i
		}
	}
	if last < 0 {
		return 0
	}
	target := u * total
	var cum float64
	for i, v := range p {
		if v > 0 {
			cum += float64(v)
			if cum > target {
				return int32(i)
			}
		}
	}
	return int32(last)
}
