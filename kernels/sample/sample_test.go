package sample

import (
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"
)

func logits(probs ...float64) []float32 {
	l := make([]float32, len(probs))
	for i, p := range probs {
		l[i] = float32(math.Log(p))
	}
	return l
}

func randomLogits(r *rand.Rand, n int, scale float64) []float32 {
	l := make([]float32, n)
	for i := range l {
		l[i] = float32(r.NormFloat64() * scale)
	}
	return l
}

func TestArgmax(t *testing.T) {
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	tests := []struct {
		name string
		in   []float32
		want int32
	}{
		{"empty", nil, -1},
		{"single", []float32{-3}, 0},
		{"max", []float32{1, 5, 2}, 1},
		{"tie lowest id", []float32{1, 5, 2, 5}, 1},
		{"NaN never wins", []float32{nan, 1, nan}, 1},
		{"all -Inf", []float32{-inf, -inf}, 0},
		{"+Inf", []float32{3, inf, inf}, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if have := Argmax(tc.in); have != tc.want {
				t.Errorf("have %d; want %d", have, tc.want)
			}
		})
	}
}

func TestGreedy(t *testing.T) {
	l := []float32{0.5, 2, -1, 2, 1.5}
	for _, p := range []Params{{}, {Temperature: -1}, {Temperature: 0, TopK: 2, TopP: 0.5, Seed: 9}} {
		s := New(p)
		for range 5 {
			if have := s.Sample(l, nil); have != 1 {
				t.Fatalf("%+v: Sample have %d; want 1 (lowest id of the tie)", p, have)
			}
		}
		dst := make([]float32, len(l))
		s.Probs(l, nil, dst)
		if want := []float32{0, 1, 0, 0, 0}; !slices.Equal(dst, want) {
			t.Errorf("%+v: Probs have %v; want %v", p, dst, want)
		}
	}
	// The penalties apply before the argmax.
	s := New(Params{RepeatPenalty: 4})
	if have := s.Sample(l, []int32{1}); have != 3 {
		t.Errorf("penalised greedy have %d; want 3", have)
	}
}

func TestTemperatureLimit(t *testing.T) {
	l := []float32{1, 3, 2.9, -1}
	dst := make([]float32, len(l))
	New(Params{Temperature: 1e-3}).Probs(l, nil, dst)
	if dst[1] < 0.999999 {
		t.Errorf("T→0: p[argmax] have %v; want ≈1 (%v)", dst[1], dst)
	}
	// Exactly tied maxima share the mass.
	l = []float32{3, 1, 3}
	New(Params{Temperature: 1e-3}).Probs(l, nil, dst[:3])
	if math.Abs(float64(dst[0])-0.5) > 1e-6 || math.Abs(float64(dst[2])-0.5) > 1e-6 {
		t.Errorf("T→0 tie: have %v; want [0.5 0 0.5]", dst[:3])
	}
	// A high temperature flattens towards uniform.
	New(Params{Temperature: 1e6}).Probs([]float32{1, 3, 2, -1}, nil, dst)
	for i, p := range dst {
		if math.Abs(float64(p)-0.25) > 1e-4 {
			t.Errorf("T→∞: p[%d] have %v; want ≈0.25", i, p)
		}
	}
}

// kept returns the ids with nonzero probability.
func kept(p []float32) []int32 {
	var ids []int32
	for i, v := range p {
		if v > 0 {
			ids = append(ids, int32(i))
		}
	}
	return ids
}

func TestFilters(t *testing.T) {
	base := logits(0.4, 0.3, 0.2, 0.1)
	ties := []float32{1, 3, 3, 2, 3}
	tests := []struct {
		name string
		l    []float32
		p    Params
		want []int32
	}{
		{"none", base, Params{Temperature: 1}, []int32{0, 1, 2, 3}},
		{"top-k 2", base, Params{Temperature: 1, TopK: 2}, []int32{0, 1}},
		{"top-k 1", base, Params{Temperature: 1, TopK: 1}, []int32{0}},
		{"top-k ≥ vocab is off", base, Params{Temperature: 1, TopK: 9}, []int32{0, 1, 2, 3}},
		{"top-k ties lowest ids", ties, Params{Temperature: 1, TopK: 2}, []int32{1, 2}},
		{"top-k tie boundary", ties, Params{Temperature: 1, TopK: 4}, []int32{1, 2, 3, 4}},
		{"top-p 0.35", base, Params{Temperature: 1, TopP: 0.35}, []int32{0}},
		{"top-p 0.65", base, Params{Temperature: 1, TopP: 0.65}, []int32{0, 1}},
		{"top-p 0.75", base, Params{Temperature: 1, TopP: 0.75}, []int32{0, 1, 2}},
		{"top-p 0.95", base, Params{Temperature: 1, TopP: 0.95}, []int32{0, 1, 2, 3}},
		{"top-p 1 is off", base, Params{Temperature: 1, TopP: 1}, []int32{0, 1, 2, 3}},
		{"top-p after top-k renormalises", base, Params{Temperature: 1, TopK: 2, TopP: 0.6}, []int32{0, 1}},
		{"top-p after top-k 0.5", base, Params{Temperature: 1, TopK: 2, TopP: 0.5}, []int32{0}},
		{"min-p 0.3", base, Params{Temperature: 1, MinP: 0.3}, []int32{0, 1, 2}},
		{"min-p 0.6", base, Params{Temperature: 1, MinP: 0.6}, []int32{0, 1}},
		{"min-p 0.9", base, Params{Temperature: 1, MinP: 0.9}, []int32{0}},
		{"min-p judges untempered logits", base, Params{Temperature: 5, MinP: 0.6}, []int32{0, 1}},
		{"top-k then min-p", base, Params{Temperature: 1, TopK: 3, MinP: 0.3}, []int32{0, 1, 2}},
		{"-Inf never kept", []float32{0, float32(math.Inf(-1)), 1}, Params{Temperature: 1}, []int32{0, 2}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dst := make([]float32, len(tc.l))
			New(tc.p).Probs(tc.l, nil, dst)
			if have := kept(dst); !slices.Equal(have, tc.want) {
				t.Errorf("kept have %v; want %v (probs %v)", have, tc.want, dst)
			}
			var sum float64
			for _, p := range dst {
				sum += float64(p)
			}
			if math.Abs(sum-1) > 1e-6 {
				t.Errorf("sum have %v; want 1", sum)
			}
		})
	}
	// Values: top-k 2 at temperature 1 renormalises 0.4 and 0.3.
	dst := make([]float32, 4)
	New(Params{Temperature: 1, TopK: 2}).Probs(base, nil, dst)
	if math.Abs(float64(dst[0])-4.0/7) > 1e-6 || math.Abs(float64(dst[1])-3.0/7) > 1e-6 {
		t.Errorf("top-k 2 probs have %v; want [4/7 3/7 0 0]", dst)
	}
	// Temperature 0.5 squares the odds.
	New(Params{Temperature: 0.5, TopK: 2}).Probs(base, nil, dst)
	if math.Abs(float64(dst[0])-16.0/25) > 1e-6 {
		t.Errorf("T=0.5 probs have %v; want [16/25 9/25 0 0]", dst)
	}
}

// TestTopPLargeVocab checks the growing partial selection against a full
// sort of a vocabulary far larger than its first prefix.
func TestTopPLargeVocab(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for trial := range 20 {
		n := 3000 + trial*97
		l := randomLogits(r, n, 0.5+float64(trial%5))
		for _, p := range []float32{0.1, 0.5, 0.9, 0.99} {
			for _, k := range []int{0, 50, 1000} {
				dst := make([]float32, n)
				New(Params{Temperature: 1, TopP: p, TopK: k}).Probs(l, nil, dst)
				if have, want := kept(dst), refTopP(l, k, p); !slices.Equal(have, want) {
					t.Fatalf("n=%d p=%v k=%d: kept %d ids; want %d", n, p, k, len(have), len(want))
				}
			}
		}
	}
}

// refTopP is top-k then top-p by full sort, returning ids in id order.
func refTopP(l []float32, k int, p float32) []int32 {
	ids := make([]int32, len(l))
	for i := range ids {
		ids[i] = int32(i)
	}
	sort.SliceStable(ids, func(a, b int) bool { return l[ids[a]] > l[ids[b]] })
	if k > 0 && k < len(ids) {
		ids = ids[:k]
	}
	m := math.Inf(-1)
	for _, id := range ids {
		m = max(m, float64(l[id]))
	}
	var z float64
	for _, id := range ids {
		z += math.Exp(float64(l[id]) - m)
	}
	var cum float64
	for i, id := range ids {
		cum += math.Exp(float64(l[id])-m) / z
		if cum >= float64(p) {
			ids = ids[:i+1]
			break
		}
	}
	slices.Sort(ids)
	return ids
}

func TestPenalties(t *testing.T) {
	l := []float32{2, -2, 0, 1, 3}
	orig := slices.Clone(l)
	tests := []struct {
		name    string
		p       Params
		history []int32
		want    []float32
	}{
		{"off", Params{}, []int32{0, 1}, []float32{2, -2, 0, 1, 3}},
		{"repeat divides positive, multiplies negative", Params{RepeatPenalty: 2}, []int32{0, 1, 2, 0}, []float32{1, -4, 0, 1, 3}},
		{"repeat below 1 boosts", Params{RepeatPenalty: 0.5}, []int32{0, 1}, []float32{4, -1, 0, 1, 3}},
		{"frequency per occurrence", Params{FrequencyPenalty: 0.5}, []int32{0, 0, 0, 3}, []float32{0.5, -2, 0, 0.5, 3}},
		{"presence once", Params{PresencePenalty: 0.25}, []int32{0, 0, 3}, []float32{1.75, -2, 0, 0.75, 3}},
		{"all three", Params{RepeatPenalty: 2, FrequencyPenalty: 0.5, PresencePenalty: 0.25}, []int32{0, 0}, []float32{-0.25, -2, 0, 1, 3}},
		{"window", Params{RepeatPenalty: 2, RepeatLastN: 2}, []int32{4, 0, 1}, []float32{1, -4, 0, 1, 3}},
		{"window -1 is all", Params{RepeatPenalty: 2, RepeatLastN: -1}, []int32{4, 0, 1}, []float32{1, -4, 0, 1, 1.5}},
		{"ids out of range ignored", Params{RepeatPenalty: 2}, []int32{-1, 99, 4}, []float32{2, -2, 0, 1, 1.5}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := New(tc.p)
			for range 2 { // twice: the scratch counts must be reset
				if have := s.penalised(l, tc.history); !slices.Equal(have, tc.want) {
					t.Fatalf("have %v; want %v", have, tc.want)
				}
			}
			if !slices.Equal(l, orig) {
				t.Fatalf("logits modified: %v", l)
			}
		})
	}
	// The default window is 64 tokens.
	h := make([]int32, 65)
	h[0] = 4
	for i := 1; i < len(h); i++ {
		h[i] = 2
	}
	if have := New(Params{RepeatPenalty: 2}).penalised(l, h)[4]; have != 3 {
		t.Errorf("token 65 back: have %v; want 3 (outside the default window)", have)
	}
}

func TestSeededReproducibility(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	l := randomLogits(r, 200, 2)
	p := Params{Temperature: 0.9, TopK: 50, TopP: 0.95, MinP: 0.01, RepeatPenalty: 1.1, Seed: 42}
	run := func(p Params) []int32 {
		s := New(p)
		var out []int32
		for range 100 {
			out = append(out, s.Sample(l, out))
		}
		return out
	}
	a, b := run(p), run(p)
	if !slices.Equal(a, b) {
		t.Fatalf("same seed, different draws:\n%v\n%v", a, b)
	}
	p.Seed = 43
	if c := run(p); slices.Equal(a, c) {
		t.Fatalf("seeds 42 and 43 drew the same 100 tokens")
	}
}

// TestSampleIsDrawOfProbs checks that Sample and Draw(Probs) at the
// history's length give the same token, greedy included.
func TestSampleIsDrawOfProbs(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, p := range []Params{
		{Seed: 1},
		{Temperature: 1, Seed: 2},
		{Temperature: 0.7, TopK: 20, Seed: 3},
		{Temperature: 1.3, TopP: 0.8, MinP: 0.05, RepeatPenalty: 1.3, FrequencyPenalty: 0.1, Seed: 4},
	} {
		a, b := New(p), New(p)
		var hist []int32
		dst := make([]float32, 300)
		for step := range 200 {
			l := randomLogits(r, 300, 1.5)
			x := a.Sample(l, hist)
			b.Probs(l, hist, dst)
			if y := b.Draw(dst, len(hist)); x != y {
				t.Fatalf("%+v step %d: Sample have %d; Draw(Probs) %d", p, step, x, y)
			}
			hist = append(hist, x)
		}
	}
}

// TestSampleDistribution compares Sample's empirical distribution with Probs
// by a chi-square test. The seed is fixed, so the test is deterministic; the
// threshold is the 0.999 quantile, so a correct sampler passes for almost
// every seed.
func TestSampleDistribution(t *testing.T) {
	l := []float32{1.2, 0.3, 2.5, -0.4, 2.0, 0.9, -3, 1.7, 0.1, 2.2}
	const n = 20000
	for _, p := range []Params{
		{Temperature: 1, Seed: 11},
		{Temperature: 0.7, TopK: 6, Seed: 12},
		{Temperature: 1.5, TopP: 0.9, MinP: 0.05, Seed: 13},
	} {
		s := New(p)
		probs := make([]float32, len(l))
		s.Probs(l, nil, probs)
		counts := make([]int, len(l))
		hist := make([]int32, n) // no penalties: only its length, the position, counts
		for i := range n {
			counts[s.Sample(l, hist[:i])]++
		}
		var chi2 float64
		df := -1
		for i, q := range probs {
			if q == 0 {
				if counts[i] != 0 {
					t.Fatalf("%+v: id %d has p=0 but was drawn %d times", p, i, counts[i])
				}
				continue
			}
			e := float64(q) * n
			chi2 += (float64(counts[i]) - e) * (float64(counts[i]) - e) / e
			df++
		}
		if crit := chi2Crit999[df]; chi2 > crit {
			t.Errorf("%+v: chi² have %.2f; want ≤ %.2f (df %d, counts %v, probs %v)", p, chi2, crit, df, counts, probs)
		}
	}
}

// chi2Crit999 holds the 0.999 quantiles of the chi-square distribution by
// degrees of freedom.
var chi2Crit999 = []float64{0, 10.83, 13.82, 16.27, 18.47, 20.52, 22.46, 24.32, 26.12, 27.88, 29.59}

func TestDraw(t *testing.T) {
	s := New(Params{Seed: 1})
	for pos := range 100 {
		if have := s.Draw([]float32{0, 0, 1, 0}, pos); have != 2 {
			t.Fatalf("one-hot: have %d; want 2", have)
		}
		if have := s.Draw([]float32{0, 0.5, 0, 0.5, 0}, pos); have != 1 && have != 3 {
			t.Fatalf("zero weights drawn: have %d", have)
		}
	}
	if have := s.Draw([]float32{0, 0}, 3); have != 0 {
		t.Fatalf("all zero: have %d; want 0", have)
	}
}

func TestSampleDoesNotAllocate(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	l := randomLogits(r, 32000, 3)
	hist := make([]int32, 100)
	for i := range hist {
		hist[i] = int32(r.IntN(32000))
	}
	for _, p := range []Params{
		{},
		{Temperature: 0.8, TopK: 40, TopP: 0.95, MinP: 0.05, RepeatPenalty: 1.1},
		{Temperature: 0.8, TopP: 0.9},
	} {
		s := New(p)
		s.Sample(l, hist) // first call sizes the scratch
		if a := testing.AllocsPerRun(20, func() { s.Sample(l, hist) }); a != 0 {
			t.Errorf("%+v: have %v allocs per Sample; want 0", p, a)
		}
	}
}

func benchmarkSample(b *testing.B, p Params) {
	r := rand.New(rand.NewPCG(9, 10))
	l := randomLogits(r, 32000, 3)
	hist := make([]int32, 256)
	for i := range hist {
		hist[i] = int32(r.IntN(32000))
	}
	s := New(p)
	b.ReportAllocs()
	for b.Loop() {
		s.Sample(l, hist)
	}
}

func BenchmarkSampleGreedy(b *testing.B) { benchmarkSample(b, Params{}) }
func BenchmarkSampleTopK(b *testing.B) {
	benchmarkSample(b, Params{Temperature: 0.8, TopK: 40, TopP: 0.95, MinP: 0.05, RepeatPenalty: 1.1})
}
func BenchmarkSampleTopP(b *testing.B) { benchmarkSample(b, Params{Temperature: 0.8, TopP: 0.9}) }

func TestEmptyVocabulary(t *testing.T) {
	for _, p := range []Params{{}, {Temperature: 1}} {
		if have := New(p).Sample(nil, nil); have != -1 {
			t.Errorf("%+v: Sample(nil) have %d; want -1", p, have)
		}
	}
}

// TestUniformByPosition checks the position-keyed source: uniform by a
// chi-square test over positions and over seeds, not correlated between
// neighbouring positions, and a draw that depends on nothing but (seed,
// position): sampling a position again, after any others, repeats it.
func TestUniformByPosition(t *testing.T) {
	const n, bins = 50000, 64
	chi := func(f func(i int) float64) float64 {
		var c [bins]int
		for i := range n {
			u := f(i)
			if !(u >= 0 && u < 1) {
				t.Fatalf("uniform %v outside [0, 1)", u)
			}
			c[int(u*bins)]++
		}
		var x float64
		for _, k := range c {
			d := float64(k) - n/bins
			x += d * d / (n / bins)
		}
		return x
	}
	// The 0.999 quantile of chi-square with 63 degrees of freedom.
	const crit = 103.4
	if x := chi(func(i int) float64 { return Uniform(7, i) }); x > crit {
		t.Errorf("over positions: chi-square %.1f > %.1f", x, crit)
	}
	if x := chi(func(i int) float64 { return Uniform(uint64(i), 12) }); x > crit {
		t.Errorf("over seeds: chi-square %.1f > %.1f", x, crit)
	}
	var sxy, sx float64
	for i := range n {
		a, b := Uniform(3, i)-0.5, Uniform(3, i+1)-0.5
		sxy += a * b
		sx += a * a
	}
	if r := sxy / sx; math.Abs(r) > 0.02 {
		t.Errorf("neighbouring positions correlate: r = %.3f", r)
	}
	r := rand.New(rand.NewPCG(9, 10))
	l := randomLogits(r, 100, 2)
	s := New(Params{Temperature: 1, Seed: 5})
	hist := make([]int32, 40)
	want := s.Sample(l, hist[:20])
	for range 10 {
		s.Sample(l, hist[:r.IntN(40)])
	}
	if have := New(Params{Temperature: 1, Seed: 5}).Sample(l, hist[:20]); have != want || s.Sample(l, hist[:20]) != want {
		t.Errorf("position 20 drew %d first, then something else", want)
	}
}

// tieLogits is a row of n logits with many ties (few distinct values) and
// some NaN, -Inf and +Inf entries as asked.
func tieLogits(r *rand.Rand, n int, nan, negInf, posInf bool) []float32 {
	l := make([]float32, n)
	for i := range l {
		l[i] = float32(r.IntN(12)) / 4 // 12 values: ties everywhere
	}
	for range 1 + n/50 {
		if nan {
			l[r.IntN(n)] = float32(math.NaN())
		}
		if negInf {
			l[r.IntN(n)] = float32(math.Inf(-1))
		}
	}
	if posInf {
		l[r.IntN(n)] = float32(math.Inf(1))
	}
	return l
}

// TestTopN checks topN's selection against a sort of the whole row by the
// same order (higher logit first, lower id on a tie), on rows with ties
// and infinities, for k from 1 to the row's length.
func TestTopN(t *testing.T) {
	r := rand.New(rand.NewPCG(31, 32))
	var s Sampler
	for trial := range 300 {
		n := 1 + r.IntN(400)
		var l []float32
		if trial%2 == 0 {
			l = tieLogits(r, n, false, trial%3 == 0, trial%5 == 0)
		} else {
			l = randomLogits(r, n, 3)
		}
		all := make([]int32, n)
		for i := range all {
			all[i] = int32(i)
		}
		slices.SortStableFunc(all, func(a, b int32) int {
			if before(l, a, b) {
				return -1
			}
			if before(l, b, a) {
				return 1
			}
			return 0
		})
		for _, k := range []int{1, 2, 3, 40, n / 2, n - 1, n} {
			if k < 1 {
				continue
			}
			if have, want := s.topN(l, k), all[:min(k, n)]; !slices.Equal(have, want) {
				t.Fatalf("trial %d n %d k %d: have %v; want %v (row %v)", trial, n, k, have, want, l)
			}
		}
	}
}

// TestTopKSampleIsDrawOfProbs: with top-k on, Sample works on the k best
// tokens alone; it must still draw exactly Draw(Probs), which writes and
// sums the whole row, over rows with ties, NaN, -Inf and +Inf, settings
// that cut the k best further (top-p, min-p), extreme temperatures and
// penalties, for k from 1 to one below the row's length.
func TestTopKSampleIsDrawOfProbs(t *testing.T) {
	r := rand.New(rand.NewPCG(33, 34))
	params := []Params{
		{Temperature: 1, TopK: 1},
		{Temperature: 0.8, TopK: 2},
		{Temperature: 1, TopK: 40},
		{Temperature: 0.7, TopK: 40, TopP: 0.9},
		{Temperature: 1.2, TopK: 50, TopP: 0.5, MinP: 0.1},
		{Temperature: 1, TopK: 40, MinP: 1},
		{Temperature: 0.9, TopK: 30, RepeatPenalty: 1.3, PresencePenalty: 0.5, FrequencyPenalty: 0.2, RepeatLastN: -1},
		{Temperature: float32(math.Inf(1)), TopK: 20},
		{Temperature: 1e-30, TopK: 20},
		{Temperature: 1e-45, TopK: 5},
		{Temperature: 3, TopK: -1}, // off: the dense path, as a control
	}
	for pi, p := range params {
		for trial := range 60 {
			p := p
			p.Seed = uint64(trial)
			n := 2 + r.IntN(600)
			k := p.TopK
			if trial%7 == 6 {
				p.TopK = n - 1
			}
			var l []float32
			switch trial % 4 {
			case 0:
				l = randomLogits(r, n, 1+4*r.Float64())
			case 1:
				l = tieLogits(r, n, false, false, false)
			case 2:
				l = tieLogits(r, n, true, true, false)
			case 3:
				l = tieLogits(r, n, true, true, trial%8 == 3)
			}
			if trial%9 == 8 { // nothing above -Inf
				for i := range l {
					l[i] = float32(math.Inf(-1))
				}
			}
			hist := make([]int32, r.IntN(80))
			for i := range hist {
				hist[i] = int32(r.IntN(n))
			}
			a, b := New(p), New(p)
			dst := make([]float32, n)
			for step := range 3 {
				h := hist[:len(hist)-step*len(hist)/3]
				x := a.Sample(l, h)
				b.Probs(l, h, dst)
				if y := b.Draw(dst, len(h)); x != y {
					t.Fatalf("params %d (%+v) trial %d step %d n %d: Sample have %d; Draw(Probs) %d", pi, p, trial, step, n, x, y)
				}
			}
			p.TopK = k
		}
	}
}
