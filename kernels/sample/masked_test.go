package sample

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/specgate/specgate/kernels"
)

// randMask allows each id below n with probability frac, in a mask of
// words words (shorter or longer than the row), with stray bits past n
// when the mask is longer.
func randMask(r *rand.Rand, n, words int, frac float64) []uint64 {
	m := make([]uint64, words)
	for i := range 64 * words {
		if (i < n && r.Float64() < frac) || (i >= n && r.IntN(2) == 0) {
			m[i/64] |= 1 << (i % 64)
		}
	}
	return m
}

func maskedCopy(l []float32, mask []uint64) []float32 {
	c := slices.Clone(l)
	kernels.MaskLogitsRef(c, mask)
	return c
}

func TestArgmaxMasked(t *testing.T) {
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	l70 := make([]float32, 70)
	for i := range l70 {
		l70[i] = float32(i % 7)
	}
	tests := []struct {
		name string
		in   []float32
		mask []uint64
		want int32
	}{
		{"empty", nil, []uint64{1}, -1},
		{"max allowed", []float32{1, 5, 2, 4}, []uint64{0b1101}, 3},
		{"tie lowest allowed id", []float32{5, 5, 2, 5}, []uint64{0b1010}, 1},
		{"NaN never wins", []float32{nan, 1, nan}, []uint64{0b101}, 0},
		{"nothing allowed", []float32{3, 4}, []uint64{0}, 0},
		{"mask shorter than row", []float32{1, 2, 3}, nil, 0},
		{"+Inf", []float32{3, inf, inf}, []uint64{0b110}, 1},
		{"full word then partial", l70, []uint64{math.MaxUint64, 0b10}, 6},
		{"bits past the row ignored", []float32{1, 0}, []uint64{0b1110}, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if have, want := ArgmaxMasked(tc.in, tc.mask), tc.want; have != want {
				t.Errorf("have %d; want %d", have, want)
			}
			if len(tc.in) > 0 {
				if have, want := ArgmaxMasked(tc.in, tc.mask), Argmax(maskedCopy(tc.in, tc.mask)); have != want {
					t.Errorf("have %d; want %d (Argmax of the masked row)", have, want)
				}
			}
		})
	}
}

func TestCountAllowed(t *testing.T) {
	tests := []struct {
		mask []uint64
		n    int
		want int
	}{
		{nil, 10, 0},
		{[]uint64{math.MaxUint64}, 10, 10},
		{[]uint64{math.MaxUint64, 1}, 64, 64},
		{[]uint64{math.MaxUint64, 0b111}, 66, 66},
		{[]uint64{0b1010, 0b1}, 200, 3},
		{[]uint64{0b1}, 0, 0},
	}
	for _, tc := range tests {
		if have := CountAllowed(tc.mask, tc.n); have != tc.want {
			t.Errorf("CountAllowed(%x, %d): have %d; want %d", tc.mask, tc.n, have, tc.want)
		}
	}
}

// maskedParams covers every processor and their combinations.
var maskedParams = []Params{
	{},
	{RepeatPenalty: 1.3, PresencePenalty: 0.4, FrequencyPenalty: 0.2},
	{Temperature: 1},
	{Temperature: 0.7, TopK: 5},
	{Temperature: 0.7, TopK: 40},
	{Temperature: 0.8, TopP: 0.9},
	{Temperature: 1.2, TopP: 0.5, MinP: 0.05},
	{Temperature: 0.6, MinP: 0.2},
	{Temperature: 0.9, TopK: 20, TopP: 0.95, MinP: 0.01, RepeatPenalty: 1.1, RepeatLastN: 32},
	{Temperature: 1.5, TopK: 100000, TopP: 0.7, FrequencyPenalty: 0.5, RepeatLastN: -1},
	{Temperature: float32(math.Inf(1)), TopP: 0.9},
	{Temperature: 1e-30, TopK: 3},
}

// TestMaskedMatchesDense is the equivalence proof by example: over many
// seeds, masks of every density (both the compact and the dense path),
// rows with NaN and infinities, masks shorter and longer than the row and
// every parameter set, SampleMasked draws the same tokens as Sample on the
// masked row from the same random stream, and ProbsMasked writes the
// same bits as Probs.
func TestMaskedMatchesDense(t *testing.T) {
	fracs := []float64{0, 0.0005, 0.01, 0.1, 0.5, 0.74, 0.76, 0.95, 1}
	r := rand.New(rand.NewPCG(21, 22))
	for pi, p := range maskedParams {
		for _, frac := range fracs {
			t.Run(fmt.Sprintf("params%d/frac=%v", pi, frac), func(t *testing.T) {
				for seed := range uint64(6) {
					p := p
					p.Seed = seed
					n := 200 + r.IntN(3000)
					words := (n + 63) / 64
					switch seed % 3 {
					case 1:
						words -= 1 + r.IntN(2) // mask shorter than the row
					case 2:
						words += 1 // stray bits past the row
					}
					dense, masked := New(p), New(p)
					var hist []int32
					pd, pm := make([]float32, n), make([]float32, n)
					for i := range pm {
						pm[i] = 42 // ProbsMasked must clear
					}
					for step := range 12 {
						l := randomLogits(r, n, 1+3*r.Float64())
						if step%4 == 3 { // NaN, -Inf and +Inf logits
							l[r.IntN(n)] = float32(math.NaN())
							l[r.IntN(n)] = float32(math.Inf(-1))
							if step == 11 {
								l[r.IntN(n)] = float32(math.Inf(1))
							}
						}
						if step%5 == 4 { // ties
							l[r.IntN(n)] = l[r.IntN(n)]
							l[0] = l[1]
						}
						mask := randMask(r, n, max(words, 0), frac*(0.5+r.Float64()))
						ml := maskedCopy(l, mask)
						dense.Probs(ml, hist, pd)
						masked.ProbsMasked(l, mask, hist, pm)
						for i := range pd {
							if math.Float32bits(pd[i]) != math.Float32bits(pm[i]) {
								t.Fatalf("seed %d step %d: ProbsMasked[%d] have %v; want %v", seed, step, i, pm[i], pd[i])
							}
						}
						x := dense.Sample(ml, hist)
						y := masked.SampleMasked(l, mask, hist)
						if x != y {
							t.Fatalf("seed %d step %d: SampleMasked have %d; want %d", seed, step, y, x)
						}
						// Mix the two so history holds allowed and disallowed ids.
						hist = append(hist, x, int32(r.IntN(n)))
					}
				}
			})
		}
	}
}

func TestMaskedEmptyRow(t *testing.T) {
	for _, p := range []Params{{}, {Temperature: 1}} {
		s := New(p)
		if have := s.SampleMasked(nil, []uint64{1}, nil); have != -1 {
			t.Errorf("%+v: SampleMasked(nil) have %d; want -1", p, have)
		}
		s.ProbsMasked(nil, []uint64{1}, nil, nil) // must not panic
	}
}

func TestSampleMaskedDoesNotAllocate(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	const n = 32000
	l := randomLogits(r, n, 3)
	hist := make([]int32, 100)
	for i := range hist {
		hist[i] = int32(r.IntN(n))
	}
	for _, frac := range []float64{0.001, 0.5, 0.9} {
		mask := randMask(r, n, n/64, frac)
		for _, p := range []Params{
			{},
			{RepeatPenalty: 1.1},
			{Temperature: 0.8, TopK: 40, TopP: 0.95, MinP: 0.05, RepeatPenalty: 1.1},
			{Temperature: 0.8, TopP: 0.9},
		} {
			s := New(p)
			s.SampleMasked(l, mask, hist) // first call sizes the scratch
			if a := testing.AllocsPerRun(20, func() { s.SampleMasked(l, mask, hist) }); a != 0 {
				t.Errorf("%+v frac %v: have %v allocs per SampleMasked; want 0", p, frac, a)
			}
		}
	}
}

// benchMask allows the given number of ids: a run of short JSON-ish
// tokens in the first thousand ids plus a spread over the rest.
func benchMask(r *rand.Rand, n, allowed int) []uint64 {
	m := make([]uint64, (n+63)/64)
	for c := 0; c < allowed; {
		i := r.IntN(n)
		if c < min(allowed/2, 200) {
			i = r.IntN(min(n, 1000))
		}
		if m[i/64]&(1<<(i%64)) == 0 {
			m[i/64] |= 1 << (i % 64)
			c++
		}
	}
	return m
}

// BenchmarkSampleMasked compares the masked path with the reference (mask
// a copy of the row, then sample it) at realistic vocabulary sizes and
// mask densities.
func BenchmarkSampleMasked(b *testing.B) {
	params := []struct {
		name string
		p    Params
	}{
		{"greedy", Params{}},
		{"topp", Params{Temperature: 0.8, TopP: 0.9, RepeatPenalty: 1.1}},
	}
	for _, n := range []int{32000, 128000} {
		r := rand.New(rand.NewPCG(9, 10))
		l := randomLogits(r, n, 3)
		hist := make([]int32, 64)
		for i := range hist {
			hist[i] = int32(r.IntN(n))
		}
		for _, dens := range []struct {
			name    string
			allowed int
		}{{"few", 6}, {"hundreds", 300}, {"half", n / 2}, {"most", n * 9 / 10}} {
			mask := benchMask(r, n, dens.allowed)
			for _, pp := range params {
				name := fmt.Sprintf("vocab=%dk/%s/%s", n/1000, dens.name, pp.name)
				b.Run(name+"/masked", func(b *testing.B) {
					s := New(pp.p)
					for b.Loop() {
						s.SampleMasked(l, mask, hist)
					}
				})
				b.Run(name+"/reference", func(b *testing.B) {
					s := New(pp.p)
					row := make([]float32, n)
					for b.Loop() {
						copy(row, l)
						kernels.MaskLogitsRef(row, mask)
						s.Sample(row, hist)
					}
				})
			}
		}
	}
}

// TestSampleRow: SampleRow takes its settings from the row, whatever the
// sampler held before, and masks only when the row has a mask: a nil mask
// is no mask, where SampleMasked would read it as allowing nothing.
func TestSampleRow(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	const n = 500
	l := randomLogits(r, n, 3)
	hist := []int32{1, 2, 3, 2}
	s := New(Params{Temperature: 5, TopK: 2, Seed: 99}) // overwritten per row
	for i, p := range maskedParams {
		p.Seed = uint64(i)
		mask := randMask(r, n, (n+63)/64, 0.3)
		if have, want := s.SampleRow(l, kernels.SampleRow{Params: p, History: hist}), New(p).Sample(l, hist); have != want {
			t.Errorf("params %d, no mask: have %d; want Sample's %d", i, have, want)
		}
		if have, want := s.SampleRow(l, kernels.SampleRow{Params: p, Mask: mask, History: hist}), New(p).SampleMasked(l, mask, hist); have != want {
			t.Errorf("params %d, mask: have %d; want SampleMasked's %d", i, have, want)
		}
		if s.Params() != p {
			t.Errorf("params %d: the sampler holds %+v after SampleRow", i, s.Params())
		}
	}
}
