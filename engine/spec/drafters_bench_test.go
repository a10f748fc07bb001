package spec

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/specgate/specgate/internal/testmodels"
)

// BenchmarkDrafters measures what each drafter buys with each tree shape,
// static and dynamic, at batch 1, 8 and 32: committed tokens per
// sequence-step (tok/step, 1 without drafts), accepted draft tokens per
// sequence-step (acc/step), the share of drafted tokens accepted (hit) and
// completion tokens per second. The target is TinyStories stories260K (or
// the GGUF named by SPECGATE_BENCH_TARGET, which must share its
// vocabulary: a larger stand-in whose step is bound by reading weights);
// the drafters are n-gram lookup and the stories260K Q8_0 and Q4_0 files
// as draft models. "story" prompts are plain story openings, "repeat" ones
// quote their own earlier text. Acceptance figures do not depend on
// timing; tok/s on a shared machine does.
//
//	go test -run '^$' -bench Drafters -benchtime 1x ./engine/spec
func BenchmarkDrafters(b *testing.B) {
	p := storiesPair(b)
	if path := os.Getenv("SPECGATE_BENCH_TARGET"); path != "" {
		p.target = loadOn(b, path, p.target.Backend())
	}
	drafts := map[string]string{"draft-q8_0": testmodels.Stories260KQ8_0, "draft-q4_0": testmodels.Stories260KQ4_0}
	const maxTok = 64
	for _, kind := range []string{"story", "repeat"} {
		src := p.prompts
		if kind == "repeat" {
			src = p.repeats
		}
		for _, batch := range []int{1, 8, 32} {
			// Every prompt at least once: batch 1 runs them one after
			// another.
			var groups [][]Request
			ctx := 0
			for i := range max(batch, len(src)) {
				if i%batch == 0 {
					groups = append(groups, nil)
				}
				pr := src[i%len(src)]
				groups[len(groups)-1] = append(groups[len(groups)-1], Request{Prompt: pr, MaxTokens: maxTok})
				ctx = max(ctx, len(pr)+maxTok)
			}
			for _, dname := range []string{"ngram", "draft-q8_0", "draft-q4_0"} {
				var d Drafter = &NGram{}
				if f, ok := drafts[dname]; ok {
					dm, err := NewDraftModel(loadOn(b, testmodels.Path(b, f), p.target.Backend()), batch, ctx)
					if err != nil {
						b.Fatal(err)
					}
					d = dm
				}
				for _, shape := range []Shape{Off, Chain(4), Wide, Bushy, Dynamic(8), Dynamic(16), Dynamic(32)} {
					if shape.Off() && dname != "ngram" {
						continue // the baseline once per batch
					}
					b.Run(fmt.Sprintf("%s/b=%d/%s/%s", kind, batch, dname, shape.Name), func(b *testing.B) {
						r := newRunner(b, p.target, d, batch, ctx, &shape)
						toks := 0
						start := time.Now()
						for range b.N {
							for _, reqs := range groups {
								res, err := r.Run(reqs)
								if err != nil {
									b.Fatal(err)
								}
								for _, rs := range res {
									toks += len(rs.Tokens)
								}
							}
						}
						el := time.Since(start)
						st := r.Stats()
						seqSteps := float64(max(st.SeqSteps, 1))
						b.ReportMetric(float64(toks)/el.Seconds(), "tok/s")
						b.ReportMetric(float64(st.Tokens)/seqSteps, "tok/step")
						b.ReportMetric(float64(st.Accepted)/seqSteps, "acc/step")
						b.ReportMetric(st.HitRate(), "hit")
					})
				}
			}
		}
	}
}
