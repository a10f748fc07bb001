package spec

import (
	"fmt"
	"testing"
	"time"

	"github.com/specgate/specgate/engine/model/synth"
	"github.com/specgate/specgate/kernels"
)

// BenchmarkShapes times each fixed shape against plain decoding, batch 1
// and 8, repeat prompts, n-gram and draft-model drafters: what the
// dispatcher chooses between.
func BenchmarkShapes(b *testing.B) {
	for _, p := range []pair{storiesPair(b), synthPairOf(b, synth.Options{Seed: 7, Dim: 512, Layers: 6, Heads: 8, Vocab: 512, Type: kernels.Q8_0})} {
		b.Run(p.name, func(b *testing.B) { benchShapes(b, p) })
	}
}

func benchShapes(b *testing.B, p pair) {
	const maxTok = 64
	for _, batch := range []int{1, 8} {
		prompts := make([][]int32, batch)
		ctx := 0
		for i := range prompts {
			prompts[i] = p.repeats[i%len(p.repeats)]
			ctx = max(ctx, len(prompts[i])+maxTok)
		}
		ds := drafters(b, p, batch, ctx)
		for _, name := range []string{"ngram", "draft"} {
			for _, shape := range []Shape{Off, Chain(2), Chain(4), Wide, Bushy} {
				b.Run(fmt.Sprintf("batch=%d/%s/%s", batch, name, shape.Name), func(b *testing.B) {
					r := newRunner(b, p.target, ds[name], batch, ctx, &shape)
					reqs := make([]Request, batch)
					for i := range reqs {
						reqs[i] = Request{Prompt: prompts[i], MaxTokens: maxTok}
					}
					toks := 0
					start := time.Now()
					for range b.N {
						res, err := r.Run(reqs)
						if err != nil {
							b.Fatal(err)
						}
						for _, rs := range res {
							toks += len(rs.Tokens)
						}
					}
					st := r.Stats()
					b.ReportMetric(float64(toks)/time.Since(start).Seconds(), "tok/s")
					b.ReportMetric(float64(st.Tokens)/float64(max(st.SeqSteps, 1)), "tok/step")
				})
			}
		}
	}
}
