package spec

import (
	"fmt"
	"testing"
	"time"

	"github.com/specgate/specgate/engine/model/synth"
	"github.com/specgate/specgate/kernels"
)

// BenchmarkSpec compares speculative with plain decoding on TinyStories
// and on a larger random model (whose forward pass reads enough weights to
// be bound by memory, like a real model) in
// the same run: per drafter (plain = no drafter), at batch 1, 8 and 32, on
// prompts that repeat earlier context and on plain story prompts. The
// dispatcher picks the shapes (so it also shows that batch 32 does not get
// slower than plain). Metrics: completion tokens/s and committed tokens per
// sequence-step.
//
//	go test -run '^$' -bench Spec ./engine/spec
func BenchmarkSpec(b *testing.B) {
	for _, p := range []pair{storiesPair(b), synthPairOf(b, synth.Options{Seed: 7, Dim: 512, Layers: 6, Heads: 8, Vocab: 512, Type: kernels.Q8_0})} {
		b.Run(p.name, func(b *testing.B) { benchSpec(b, p) })
	}
}

func benchSpec(b *testing.B, p pair) {
	const maxTok = 64
	for _, kind := range []string{"repeat", "story"} {
		src := p.repeats
		if kind == "story" {
			src = p.prompts
		}
		for _, batch := range []int{1, 8, 32} {
			prompts := make([][]int32, batch)
			ctx := 0
			for i := range prompts {
				prompts[i] = src[i%len(src)]
				ctx = max(ctx, len(prompts[i])+maxTok)
			}
			ds := drafters(b, p, batch, ctx)
			ds["plain"] = nil
			for _, name := range []string{"plain", "ngram", "draft"} {
				b.Run(fmt.Sprintf("%s/batch=%d/%s", kind, batch, name), func(b *testing.B) {
					r := newRunner(b, p.target, ds[name], batch, ctx, nil)
					reqs := make([]Request, batch)
					for i := range reqs {
						reqs[i] = Request{Prompt: prompts[i], MaxTokens: maxTok}
					}
					// Let the dispatcher find its feet before timing.
					for range 3 {
						if _, err := r.Run(reqs); err != nil {
							b.Fatal(err)
						}
					}
					before := r.Stats()
					toks := 0
					start := time.Now()
					b.ResetTimer()
					for range b.N {
						res, err := r.Run(reqs)
						if err != nil {
							b.Fatal(err)
						}
						for _, rs := range res {
							toks += len(rs.Tokens)
						}
					}
					el := time.Since(start)
					st := r.Stats()
					b.ReportMetric(float64(toks)/el.Seconds(), "tok/s")
					if n := st.SeqSteps - before.SeqSteps; n > 0 {
						b.ReportMetric(float64(st.Tokens-before.Tokens)/float64(n), "tok/step")
					}
				})
			}
		}
	}
}
