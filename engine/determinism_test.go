package engine_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/engine/model"
	"github.com/specgate/specgate/engine/spec"
	"github.com/specgate/specgate/internal/testmodels"
	"github.com/specgate/specgate/kernels"
	"github.com/specgate/specgate/kernels/sample"
)

func loadModel(tb testing.TB, name string) model.Loaded {
	tb.Helper()
	be, err := kernels.Open("cpu", kernels.Options{Threads: 2})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { be.Close() })
	m, err := model.Load(testmodels.Path(tb, name), be)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { m.Close() })
	return m
}

// TestOneAnswerPerPrompt: a request's tokens are the same whatever else
// runs. Each prompt, greedy and seeded-sampled, is first run alone with
// speculation off; then four copies of every request run at once, with
// speculation off, on (the dispatcher's shapes, chains, wide trees) and
// with a pool so tight that sequences are preempted (swapped or
// recomputed), and every copy must equal its lone run token for token,
// for the F32, Q8_0 and Q4_0 models: the kernels compute a row the same
// in any batch, and draws are keyed by (seed, position).
func TestOneAnswerPerPrompt(t *testing.T) {
	prompts := []string{"Once upon a time", "The little dog", "Grandma baked cookies for everyone in the house.", "Tim had a red ball"}
	const copies, maxTokens = 4, 40
	for _, name := range []string{testmodels.Stories260K, testmodels.Stories260KQ8_0, testmodels.Stories260KQ4_0} {
		t.Run(name, func(t *testing.T) {
			m := loadModel(t, name)
			tok := m.Tokenizer()
			var reqs []engine.Request
			for i, p := range prompts {
				reqs = append(reqs,
					engine.Request{ID: fmt.Sprint("g", i), Prompt: tok.Encode(p), MaxTokens: maxTokens},
					engine.Request{ID: fmt.Sprint("s", i), Prompt: tok.Encode(p), MaxTokens: maxTokens,
						Sample: sample.Params{Temperature: 0.9, TopP: 0.95, Seed: uint64(100 + i)}})
			}
			off := engine.Options{Speculation: engine.Speculation{Drafter: engine.DraftOff}}
			alone := make([][]int32, len(reqs))
			for i := range reqs {
				toks, _ := runAll(t, m, off, reqs[i:i+1])
				alone[i] = toks[0]
			}
			var many []engine.Request
			for c := range copies {
				for _, r := range reqs {
					r.ID = fmt.Sprintf("%s-%d", r.ID, c)
					many = append(many, r)
				}
			}
			for _, tc := range []struct {
				name    string
				o       engine.Options
				preempt bool
			}{
				{"spec_off", off, false},
				{"spec_dispatcher", engine.Options{}, false},
				{"spec_chain", engine.Options{Speculation: engine.Speculation{Dispatcher: spec.Fixed(spec.Chain(4))}}, false},
				{"spec_wide", engine.Options{Speculation: engine.Speculation{Dispatcher: spec.Fixed(spec.Wide)}}, false},
				// 32 sequences of up to ~60 tokens need ~128 blocks of 16.
				{"preempt_swap", engine.Options{KVBlocks: 24, HostKVBlocks: 160, MaxBatchTokens: 64}, true},
				{"preempt_recompute_spec_off", engine.Options{KVBlocks: 24, MaxBatchTokens: 64,
					Speculation: engine.Speculation{Drafter: engine.DraftOff}}, true},
			} {
				t.Run(tc.name, func(t *testing.T) {
					got, finals := runAll(t, m, tc.o, many)
					pre := 0
					for i, r := range many {
						if finals[i] != nil {
							pre += finals[i].Stats.Preemptions
						}
						if want := alone[i%len(reqs)]; !slices.Equal(got[i], want) {
							t.Errorf("%s: differs from its lone run:\nhave %v\nwant %v", r.ID, got[i], want)
						}
					}
					if tc.preempt && pre == 0 {
						t.Error("no preemptions with a tight pool; want some")
					}
					t.Logf("%d preemptions", pre)
				})
			}
		})
	}
}

// TestPrefillChunking: a prompt's logits are the same bits whether it is
// prefilled in one chunk, in random chunks next to other sequences'
// tokens, or token by token, for the F32, Q8_0 and Q4_0 models.
func TestPrefillChunking(t *testing.T) {
	for _, name := range []string{testmodels.Stories260K, testmodels.Stories260KQ8_0, testmodels.Stories260KQ4_0} {
		t.Run(name, func(t *testing.T) {
			m := loadModel(t, name)
			ids := m.Tokenizer().Encode("Grandma baked cookies for everyone in the house. The kids ran to the kitchen, and the dog came too, wagging its tail.")
			one, err := model.NewSequences(m, 1, 256)
			if err != nil {
				t.Fatal(err)
			}
			l, err := one.Step([][]int32{ids})
			if err != nil {
				t.Fatal(err)
			}
			want := slices.Clone(l)
			r := rand.New(rand.NewPCG(3, 4))
			vocab := int32(m.Config().Vocab)
			for trial := range 6 {
				s, err := model.NewSequences(m, 3, 256)
				if err != nil {
					t.Fatal(err)
				}
				var have []float32
				for p := 0; p < len(ids); {
					n := 1 // token by token on trial 0
					if trial > 0 {
						n = 1 + r.IntN(12)
					}
					n = min(n, len(ids)-p)
					batch := [][]int32{ids[p : p+n], nil, nil}
					for j := 1; j < 3; j++ {
						for range r.IntN(6) {
							batch[j] = append(batch[j], r.Int32N(vocab))
						}
					}
					l, err := s.Step(batch)
					if err != nil {
						t.Fatal(err)
					}
					have = l[:vocab]
					p += n
				}
				if !slices.Equal(have, want) {
					t.Fatalf("trial %d: the prompt's logits differ from its one-chunk prefill", trial)
				}
			}
		})
	}
}
