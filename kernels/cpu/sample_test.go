package cpu

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/specgate/specgate/kernels"
	"github.com/specgate/specgate/kernels/sample"
)

// BenchmarkSampleRows compares a step's sampling both ways for a 32000-token
// vocabulary: "host" is what the engine did before the Sampler ops (copy
// the pass's rows out, then run the reference per row), "ops" is
// SampleRows on the rows in place.
func BenchmarkSampleRows(b *testing.B) {
	const vocab = 32000
	for _, threads := range []int{1, 2} {
		be := open(b, threads)
		for _, n := range []int{1, 2, 8, 32} {
			r := rand.New(rand.NewPCG(1, uint64(n)))
			vals := make([]float32, n*vocab)
			for i := range vals {
				vals[i] = 4 * (r.Float32() - 0.5)
			}
			lt := be.Alloc(n, vocab)
			be.Upload(lt, vals)
			hist := make([]int32, 200)
			for i := range hist {
				hist[i] = int32(r.IntN(vocab))
			}
			for _, kind := range []struct {
				name string
				p    kernels.SampleParams
			}{
				{"greedy", kernels.SampleParams{}},
				{"sampled", kernels.SampleParams{Temperature: 0.8, TopK: 40, TopP: 0.95, RepeatPenalty: 1.1, Seed: 1}},
			} {
				rows := make([]kernels.SampleRow, n)
				samplers := make([]*sample.Sampler, n)
				for i := range rows {
					rows[i] = kernels.SampleRow{Row: i, Params: kind.p, History: hist}
					samplers[i] = sample.New(kind.p)
				}
				out := make([]int32, n)
				host := make([]float32, n*vocab)
				name := fmt.Sprintf("%s/rows=%d/threads=%d", kind.name, n, threads)
				b.Run("host/"+name, func(b *testing.B) {
					for range b.N {
						be.Download(host, lt)
						for i, s := range samplers {
							out[i] = s.Sample(host[i*vocab:(i+1)*vocab], hist)
						}
					}
				})
				b.Run("ops/"+name, func(b *testing.B) {
					for range b.N {
						be.SampleRows(out, lt, rows)
					}
				})
			}
		}
	}
}

// TestSampleGrain: SampleRows splits a batch by what its rows cost, not
// by how many there are: a few sampled or penalised rows are spread over
// the workers, a few plain greedy ones (masked or not) stay on one.
func TestSampleGrain(t *testing.T) {
	greedy := kernels.SampleRow{History: []int32{1, 2}}
	masked := kernels.SampleRow{Mask: []uint64{3}}
	sampled := kernels.SampleRow{Params: kernels.SampleParams{Temperature: 0.8, TopK: 40}}
	penalised := kernels.SampleRow{Params: kernels.SampleParams{RepeatPenalty: 1.1}, History: []int32{1}}
	unpenalised := kernels.SampleRow{Params: kernels.SampleParams{RepeatPenalty: 1.1}} // no history yet
	rep := func(r kernels.SampleRow, n int) []kernels.SampleRow { return slices.Repeat([]kernels.SampleRow{r}, n) }
	for _, tt := range []struct {
		name string
		rows []kernels.SampleRow
		want int
	}{
		{"none", nil, 1},
		{"one sampled", rep(sampled, 1), 1},
		{"two sampled", rep(sampled, 2), 1},
		{"three sampled", rep(sampled, 3), 1},
		{"two penalised greedy", rep(penalised, 2), 1},
		{"greedy then sampled", []kernels.SampleRow{greedy, sampled}, 1},
		{"three greedy", rep(greedy, 3), 3},
		{"three masked greedy", rep(masked, 3), 3},
		{"three greedy, penalties without a history", rep(unpenalised, 3), 3},
		{"four greedy", rep(greedy, 4), 1},
		{"many greedy", rep(greedy, 64), 1},
	} {
		if have := sampleGrain(tt.rows); have != tt.want {
			t.Errorf("%s: have grain %d; want %d", tt.name, have, tt.want)
		}
	}
}
