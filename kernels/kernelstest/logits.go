package kernelstest

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/specgate/specgate/kernels"
	"github.com/specgate/specgate/kernels/sample"
)

// logitsRows makes n rows of vocab logits with what real rows hold and
// what trips samplers up: ties at the maximum, -Inf, the odd NaN, and a
// row that is -Inf throughout.
func logitsRows(r *rand.Rand, n, vocab int) []float32 {
	l := randFloats(r, n*vocab, 4)
	for i := range n {
		row := l[i*vocab : (i+1)*vocab]
		switch i % 5 {
		case 1:
			top := slices.Max(row)
			row[r.IntN(vocab)], row[r.IntN(vocab)] = top, top
		case 2:
			for j := range row {
				if r.IntN(4) == 0 {
					row[j] = float32(math.Inf(-1))
				}
			}
			row[r.IntN(vocab)] = float32(math.NaN())
		case 3:
			if i == 3 {
				for j := range row {
					row[j] = float32(math.Inf(-1))
				}
			}
		}
	}
	return l
}

// logitsMask allows a random share of the vocabulary (maybe none, maybe
// all), in words that run past the row as guided decoding's do.
func logitsMask(r *rand.Rand, vocab int) []uint64 {
	m := make([]uint64, (vocab+63)/64+r.IntN(2))
	switch r.IntN(4) {
	case 0: // a handful of tokens: the grammar's usual case
		for range 1 + r.IntN(6) {
			j := r.IntN(vocab)
			m[j/64] |= 1 << (j % 64)
		}
	case 1: // most of the vocabulary
		for j := range m {
			m[j] = r.Uint64() | r.Uint64()
		}
	case 2:
		for j := range m {
			m[j] = math.MaxUint64
		}
	default: // nothing
	}
	return m
}

// sampleParams are the settings the suite draws with: greedy and sampled,
// each filter alone and together, with and without penalties.
var sampleParams = []kernels.SampleParams{
	{},
	{RepeatPenalty: 1.3, PresencePenalty: 0.5, FrequencyPenalty: 0.2},
	{Temperature: 0.8, Seed: 1},
	{Temperature: 1, TopK: 40, Seed: 2},
	{Temperature: 1.2, TopP: 0.9, Seed: 3},
	{Temperature: 0.7, MinP: 0.05, Seed: 4},
	{Temperature: 1, TopK: 50, TopP: 0.8, MinP: 0.02, RepeatPenalty: 1.1, RepeatLastN: -1, Seed: 5},
	{Temperature: 2, TopK: 1, Seed: 6},
	{Temperature: 0.5, FrequencyPenalty: 1, RepeatLastN: 8, Seed: 7},
}

// testLogits checks a backend's kernels.Sampler against the host
// reference, token for token: a backend's choice of path must never change
// a request's text. The batch holds every kind of row the op tells apart:
// plain greedy rows (an argmax where the row lies), greedy rows with a
// mask or penalties, and sampled ones, each with and without a mask.
func testLogits(t *testing.T, b kernels.Backend) {
	s, ok := b.(kernels.Sampler)
	if !ok {
		t.Skip("backend has no Sampler; the engine samples on the host")
	}
	r := rand.New(rand.NewPCG(16, 1))
	for _, vocab := range []int{64, 1000, 3001} {
		const n = 24
		vals := logitsRows(r, n, vocab)
		lt := upload(b, n, vocab, vals)
		rows := make([]kernels.SampleRow, n)
		for i := range rows {
			var mask []uint64
			switch {
			case i == 0: // a plain greedy row (sampleParams[0] is greedy)
			case i == len(sampleParams): // a greedy row under a mask
				mask = logitsMask(r, vocab)
			case r.IntN(2) == 0:
				mask = logitsMask(r, vocab)
			}
			hist := make([]int32, r.IntN(100))
			for j := range hist {
				hist[j] = int32(r.IntN(vocab + 2)) // ids past the row are ignored
			}
			// Rows out of order, as a batch's sampled rows may be.
			rows[i] = kernels.SampleRow{Row: n - 1 - i, Params: sampleParams[i%len(sampleParams)], Mask: mask, History: hist}
		}
		out := make([]int32, n)
		s.SampleRows(out, lt, rows)
		for i, tok := range out {
			// A fresh sampler per row: the op's samplers carry scratch
			// from row to row, the reference must not.
			row := vals[rows[i].Row*vocab : (rows[i].Row+1)*vocab]
			if want := sample.New(rows[i].Params).SampleRow(row, rows[i]); tok != want {
				t.Errorf("vocab %d: SampleRows row %d (%+v, mask %v): %d; reference %d", vocab, rows[i].Row, rows[i].Params, rows[i].Mask != nil, tok, want)
			}
		}
		if have := download(b, lt); !sameBits(have, vals) {
			t.Errorf("vocab %d: SampleRows wrote the logits", vocab)
		}
	}
}

func sameBits(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}
