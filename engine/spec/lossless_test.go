package spec

import (
	"fmt"
	"github.com/specgate/specgate/kernels"
	"slices"
	"testing"

	"github.com/specgate/specgate/kernels/sample"
)

// TestLosslessGreedy: speculative greedy output equals plain greedy output
// token for token, for each drafter and tree shape, at batch 1 and 8, on
// the real TinyStories model and a random synthetic one.
func TestLosslessGreedy(t *testing.T) {
	const maxTok = 40
	for _, mk := range []func(testing.TB) pair{storiesPair, synthPair} {
		p := mk(t)
		t.Run(p.name, func(t *testing.T) {
			for _, batch := range []int{1, 8} {
				var prompts [][]int32
				for i := range batch {
					// Half plain, half repeating prompts.
					if i%2 == 0 {
						prompts = append(prompts, p.repeats[i/2%len(p.repeats)])
					} else {
						prompts = append(prompts, p.prompts[i/2%len(p.prompts)])
					}
				}
				want := plainGreedy(t, p.target, prompts, maxTok)
				ctx := 0
				for _, pr := range prompts {
					ctx = maxInt(ctx, len(pr)+maxTok)
				}
				for dname, d := range drafters(t, p, batch, ctx) {
					for _, shape := range []Shape{Chain(1), Chain(4), Wide, Bushy, Dynamic(8), Dynamic(24)} {
						t.Run(fmt.Sprintf("batch=%d/%s/%s", batch, dname, shape.Name), func(t *testing.T) {
							r := newRunner(t, p.target, d, batch, ctx, &shape)
							reqs := make([]Request, batch)
							for i := range reqs {
								reqs[i] = Request{Prompt: prompts[i], MaxTokens: maxTok}
							}
							res, err := r.Run(reqs)
							if err != nil {
								t.Fatal(err)
							}
							acc := 0
							for i, rs := range res {
								if !slices.Equal(rs.Tokens, want[i]) {
									t.Errorf("sequence %d: have %v; want %v", i, rs.Tokens, want[i])
								}
								acc += rs.Accepted
							}
							st := r.Stats()
							t.Logf("steps %d, drafted %d, accepted %d (%.2f tokens/step)", st.Steps, st.Drafted, st.Accepted, float64(st.Tokens)/float64(st.SeqSteps))
							if st.Accepted != acc {
								t.Errorf("stats accepted: have %d; want %d", st.Accepted, acc)
							}
						})
					}
				}
			}
		})
	}
}

// TestLosslessGreedyDispatcher runs the default dispatcher (which switches
// shapes step by step) and a runner without tree attention (chains only).
func TestLosslessGreedyDispatcher(t *testing.T) {
	p := storiesPair(t)
	const maxTok = 48
	prompts := p.repeats[:4]
	want := plainGreedy(t, p.target, prompts, maxTok)
	for dname, d := range drafters(t, p, 4, 128) {
		t.Run(dname, func(t *testing.T) {
			r := newRunner(t, p.target, d, 4, 128, nil)
			var reqs []Request
			for _, pr := range prompts {
				reqs = append(reqs, Request{Prompt: pr, MaxTokens: maxTok})
			}
			res, err := r.Run(reqs)
			if err != nil {
				t.Fatal(err)
			}
			for i, rs := range res {
				if !slices.Equal(rs.Tokens, want[i]) {
					t.Errorf("sequence %d: have %v; want %v", i, rs.Tokens, want[i])
				}
			}
		})
	}
	t.Run("chains_only", func(t *testing.T) {
		// Embedding only the interface hides the CPU backend's tree ops.
		plain := loadOn(t, testmodelsStories(t), struct{ kernels.Backend }{openBackend(t)})
		r := newRunner(t, plain, &NGram{}, 4, 128, &Bushy)
		if r.Trees() {
			t.Fatal("runner on a plain backend claims tree support")
		}
		var reqs []Request
		for _, pr := range prompts {
			reqs = append(reqs, Request{Prompt: pr, MaxTokens: maxTok})
		}
		res, err := r.Run(reqs)
		if err != nil {
			t.Fatal(err)
		}
		for i, rs := range res {
			if !slices.Equal(rs.Tokens, want[i]) {
				t.Errorf("sequence %d: have %v; want %v", i, rs.Tokens, want[i])
			}
		}
	})
}

// TestGuidedMask: a mask applies to drafts and target alike; the output
// equals plain greedy decoding under the same mask.
func TestGuidedMask(t *testing.T) {
	p := storiesPair(t)
	v := p.target.Config().Vocab
	// Allow every token but those whose id is divisible by 3 (EOS stays
	// allowed so generation can end).
	mask := make([]uint64, (v+63)/64)
	for j := range v {
		if j%3 != 0 || int32(j) == p.target.Tokenizer().EOS() {
			mask[j/64] |= 1 << (j % 64)
		}
	}
	mf := func([]int32) []uint64 { return mask }
	const maxTok = 32
	prompts := p.repeats[:2]
	// Reference: plain (no drafter) runner with the mask; the plain runner
	// is checked against model.Sequences above.
	base := newRunner(t, p.target, nil, 2, 128, &Off)
	var reqs []Request
	for _, pr := range prompts {
		reqs = append(reqs, Request{Prompt: pr, MaxTokens: maxTok, Mask: mf})
	}
	want, err := base.Run(reqs)
	if err != nil {
		t.Fatal(err)
	}
	for dname, d := range drafters(t, p, 2, 128) {
		for _, shape := range []Shape{Wide, Dynamic(16)} {
			t.Run(dname+"/"+shape.Name, func(t *testing.T) {
				r := newRunner(t, p.target, maskChecker{t, d, mask}, 2, 128, &shape)
				res, err := r.Run(reqs)
				if err != nil {
					t.Fatal(err)
				}
				for i := range res {
					if !slices.Equal(res[i].Tokens, want[i].Tokens) {
						t.Errorf("sequence %d: have %v; want %v", i, res[i].Tokens, want[i].Tokens)
					}
					for _, tok := range res[i].Tokens {
						if tok%3 == 0 && tok != p.target.Tokenizer().EOS() {
							t.Errorf("sequence %d: masked token %d generated", i, tok)
						}
					}
				}
				if r.Stats().Accepted == 0 {
					t.Errorf("no draft accepted: the masked drafting ran for nothing")
				}
			})
		}
	}
}

// maskChecker fails the test when its drafter proposes a token the
// (context-free) mask forbids.
type maskChecker struct {
	t    *testing.T
	d    Drafter
	mask []uint64
}

func (c maskChecker) Name() string       { return c.d.Name() }
func (c maskChecker) Rewind(slot, n int) { c.d.Rewind(slot, n) }
func (c maskChecker) Propose(ctxs []Context, trees []*Tree) error {
	err := c.d.Propose(ctxs, trees)
	for _, tr := range trees {
		for _, tok := range tr.Tokens {
			if !allowed(c.mask, tok) {
				c.t.Errorf("drafted masked token %d", tok)
			}
		}
	}
	return err
}

// TestPlainRunnerMatchesSequences checks the baseline: the runner without
// a drafter is plain greedy decoding.
func TestPlainRunnerMatchesSequences(t *testing.T) {
	p := synthPair(t)
	want := plainGreedy(t, p.target, p.prompts[:3], 20)
	r := newRunner(t, p.target, nil, 3, 64, nil)
	var reqs []Request
	for _, pr := range p.prompts[:3] {
		reqs = append(reqs, Request{Prompt: pr, MaxTokens: 20, Params: sample.Params{}})
	}
	res, err := r.Run(reqs)
	if err != nil {
		t.Fatal(err)
	}
	for i := range res {
		if !slices.Equal(res[i].Tokens, want[i]) {
			t.Errorf("sequence %d: have %v; want %v", i, res[i].Tokens, want[i])
		}
	}
}
