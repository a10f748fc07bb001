package spec

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/specgate/specgate/engine/model"
	_ "github.com/specgate/specgate/engine/model/llama"
	"github.com/specgate/specgate/engine/model/synth"
	"github.com/specgate/specgate/internal/testmodels"
	"github.com/specgate/specgate/kernels"
	_ "github.com/specgate/specgate/kernels/cpu"
	"github.com/specgate/specgate/kernels/sample"
)

// openBackend opens a CPU backend for the test.
func openBackend(tb testing.TB) kernels.Backend {
	tb.Helper()
	be, err := kernels.Open("cpu", kernels.Options{Threads: 2})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { be.Close() })
	return be
}

// loadOn loads the model at path on be.
func loadOn(tb testing.TB, path string, be kernels.Backend) model.Loaded {
	tb.Helper()
	m, err := model.Load(path, be)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { m.Close() })
	return m
}

// pair is a target and a draft model of the same
// vocabulary (its weights at Q4_0), on one CPU backend.
type pair struct {
	name          string
	target, draft model.Loaded
	prompts       [][]int32 // plain prompts
	repeats       [][]int32 // prompts that repeat earlier context
}

func storiesPair(tb testing.TB) pair {
	tb.Helper()
	tpath := testmodels.Path(tb, testmodels.Stories260K)
	dpath := testmodels.Path(tb, testmodels.Stories260KQ4_0)
	be := openBackend(tb)
	p := pair{name: "stories260K", target: loadOn(tb, tpath, be), draft: loadOn(tb, dpath, be)}
	tok := p.target.Tokenizer()
	enc := func(s string) []int32 {
		ids := tok.Encode(s)
		if tok.AddsBOS() && tok.BOS() >= 0 {
			ids = append([]int32{tok.BOS()}, ids...)
		}
		return ids
	}
	for _, s := range []string{
		"Once upon a time, there was a little girl named Lily.",
		"Tom had a big red ball.",
		"The sun was shining and the birds were singing.",
		"One day, a cat found a box.",
		"Sam liked to play in the park with his dog.",
		"There was a tree in the garden.",
		"Mia wanted to bake a cake for her mom.",
		"The little boat sailed on the lake.",
	} {
		p.prompts = append(p.prompts, enc(s))
	}
	for _, s := range []string{
		"Lily went to the park. She saw a big red ball. She was happy. Lily went to the park. She saw",
		"Tom and his dog ran to the lake. They saw a duck. Tom and his dog ran to the",
		"Once upon a time, there was a bird. The bird liked to sing. Once upon a time, there was a",
		"Mom said, \"Let's go home.\" Sue said, \"Let's go",
		"The cat sat on the mat. The dog sat on the log. The cat sat on the",
		"Ben had a toy car. He played with the toy car every day. One day, Ben had a toy",
		"Anna likes apples. Anna likes pears. Anna likes",
		"The sky was blue and the grass was green. The sky was blue and the",
	} {
		p.repeats = append(p.repeats, enc(s))
	}
	return p
}

func synthPair(tb testing.TB) pair {
	tb.Helper()
	return synthPairOf(tb, synth.Options{Seed: 7, Dim: 64, Layers: 2, Vocab: 512})
}

// synthPairOf is a random model of shape o (F32) and its Q4_0 self-draft.
func synthPairOf(tb testing.TB, o synth.Options) pair {
	tb.Helper()
	tpath := synth.Setup(tb, o)
	o.Type = kernels.Q4_0
	dpath := synth.Setup(tb, o)
	be := openBackend(tb)
	p := pair{name: fmt.Sprintf("synth-d%d", o.Dim), target: loadOn(tb, tpath, be), draft: loadOn(tb, dpath, be)}
	r := rand.New(rand.NewPCG(3, 4))
	for range 8 {
		pr := make([]int32, 6+r.IntN(10))
		for i := range pr {
			pr[i] = int32(3 + r.IntN(509))
		}
		p.prompts = append(p.prompts, pr)
		rep := slices.Concat(pr, pr, pr[:len(pr)/2])
		p.repeats = append(p.repeats, rep)
	}
	return p
}

// plainGreedy is the reference: plain greedy decoding with model.Sequences,
// one token per step, stopping after max tokens or an end-of-generation
// token (kept), as Runner does.
func plainGreedy(tb testing.TB, m model.Loaded, prompts [][]int32, max int) [][]int32 {
	tb.Helper()
	ctx := 0
	for _, p := range prompts {
		ctx = maxInt(ctx, len(p)+max)
	}
	s, err := model.NewSequences(m, len(prompts), ctx)
	if err != nil {
		tb.Fatal(err)
	}
	out := make([][]int32, len(prompts))
	done := make([]bool, len(prompts))
	feed := slices.Clone(prompts)
	v := m.Config().Vocab
	for {
		logits, err := s.Step(feed)
		if err != nil {
			tb.Fatal(err)
		}
		k := 0
		any := false
		for i := range feed {
			if len(feed[i]) == 0 {
				continue
			}
			tok := sample.Argmax(logits[k*v : (k+1)*v])
			k++
			out[i] = append(out[i], tok)
			if len(out[i]) >= max || m.Tokenizer().IsEOG(tok) {
				done[i] = true
			}
		}
		for i := range feed {
			feed[i] = nil
			if !done[i] {
				feed[i] = out[i][len(out[i])-1:]
				any = true
			}
		}
		if !any {
			return out
		}
	}
}

func maxInt(a, b int) int {
	if a > b {
		return a
	}
	return b
}

// newRunner builds a runner over p's target with drafter d and a fixed
// shape (or the default dispatcher when shape is nil).
func newRunner(tb testing.TB, m model.Loaded, d Drafter, seqs, ctx int, shape *Shape) *Runner {
	tb.Helper()
	cfg := Config{Seqs: seqs, Context: ctx, Drafter: d}
	if shape != nil {
		cfg.Dispatcher = Fixed(*shape)
	}
	r, err := NewRunner(m, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return r
}

func drafters(tb testing.TB, p pair, seqs, ctx int) map[string]Drafter {
	tb.Helper()
	dm, err := NewDraftModel(p.draft, seqs, ctx)
	if err != nil {
		tb.Fatal(err)
	}
	return map[string]Drafter{"ngram": &NGram{}, "draft": dm}
}

func testmodelsStories(tb testing.TB) string {
	tb.Helper()
	return testmodels.Path(tb, testmodels.Stories260K)
}
