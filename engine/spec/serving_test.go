package spec_test

// The lossless suites on the serving path: the real engine, speculating
// through the same spec.Step the Runner drives, against the engine with
// speculation off and against plain decoding outside the engine.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/engine/model"
	"github.com/specgate/specgate/engine/spec"
	"github.com/specgate/specgate/kernels/sample"
)

// served is one request's output from the engine.
type served struct {
	tokens []int32
	final  *engine.Final
}

// serve runs reqs on a fresh engine over m, all submitted at once, and
// returns their outputs in order.
func serve(t *testing.T, m model.Model, o engine.Options, reqs []engine.Request) []served {
	t.Helper()
	e, err := engine.New(m, o)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out := make([]served, len(reqs))
	var wg sync.WaitGroup
	for i, r := range reqs {
		s, err := e.Submit(ctx, r)
		if err != nil {
			t.Fatalf("%s: %v", r.ID, err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				ev, err := s.Recv(ctx)
				if errors.Is(err, io.EOF) {
					return
				}
				if err != nil {
					t.Errorf("%s: %v", r.ID, err)
					return
				}
				out[i].tokens = append(out[i].tokens, ev.Tokens...)
				if ev.Final != nil {
					out[i].final = ev.Final
				}
			}
		}()
	}
	wg.Wait()
	for i, r := range reqs {
		if f := out[i].final; f == nil || f.FinishReason == engine.FinishError {
			t.Fatalf("%s: have final %+v; want a finished request", r.ID, f)
		}
	}
	return out
}

// drafters are the engine's speculation settings per drafter, with
// dispatcher d.
func drafters(p spec.Pair, d func() *spec.Dispatcher) map[string]engine.Speculation {
	return map[string]engine.Speculation{
		"ngram": {Drafter: engine.DraftNGram, Dispatcher: d()},
		"draft": {Drafter: engine.DraftModel, Model: p.Draft, Dispatcher: d()},
	}
}

// TestServingLosslessGreedy: greedy output with speculation, for every
// drafter and tree shape (and the dispatcher's own choices), at batch 1
// and 8, equals the engine's output without it and plain greedy decoding
// outside the engine, token for token; and drafts are accepted, so the
// speculative path ran.
func TestServingLosslessGreedy(t *testing.T) {
	const maxTok = 40
	for _, mk := range []func(testing.TB) spec.Pair{spec.StoriesPair, spec.SynthPair} {
		p := mk(t)
		eog := p.Target.Tokenizer()
		t.Run(p.Name, func(t *testing.T) {
			for _, batch := range []int{1, 8} {
				var prompts [][]int32
				for i := range batch {
					// Half plain, half repeating prompts.
					if i%2 == 0 {
						prompts = append(prompts, p.Repeats[i/2%len(p.Repeats)])
					} else {
						prompts = append(prompts, p.Prompts[i/2%len(p.Prompts)])
					}
				}
				// The engine reports no end-of-generation token.
				want := spec.PlainGreedy(t, p.Target, prompts, maxTok)
				for i, w := range want {
					if n := len(w); n > 0 && eog.IsEOG(w[n-1]) {
						want[i] = w[:n-1]
					}
				}
				reqs := make([]engine.Request, batch)
				for i := range reqs {
					reqs[i] = engine.Request{ID: fmt.Sprint("r", i), Prompt: prompts[i], MaxTokens: maxTok}
				}
				off := serve(t, p.Target, engine.Options{Speculation: engine.Speculation{Drafter: engine.DraftOff}}, reqs)
				for i := range reqs {
					if !slices.Equal(off[i].tokens, want[i]) {
						t.Fatalf("batch=%d: %s without speculation: have %v; want %v (plain decoding)", batch, reqs[i].ID, off[i].tokens, want[i])
					}
				}
				for _, shape := range []spec.Shape{{Name: "dispatcher"}, spec.Chain(1), spec.Chain(4), spec.Wide, spec.Bushy, spec.Dynamic(16)} {
					fixed := !shape.Off()
					disp := func() *spec.Dispatcher {
						if !fixed {
							return nil // the default one
						}
						return spec.Fixed(shape)
					}
					for dname, sp := range drafters(p, disp) {
						t.Run(fmt.Sprintf("batch=%d/%s/%s", batch, dname, shape.Name), func(t *testing.T) {
							got := serve(t, p.Target, engine.Options{Speculation: sp}, reqs)
							var acc float64
							for i := range reqs {
								if !slices.Equal(got[i].tokens, want[i]) {
									t.Errorf("%s: have %v; want %v", reqs[i].ID, got[i].tokens, want[i])
								}
								acc += got[i].final.Stats.AcceptedPerStep
							}
							acc /= float64(batch)
							t.Logf("%.2f tokens per step", acc)
							if fixed && acc <= 1 {
								t.Errorf("have %.2f tokens per step; want drafts accepted", acc)
							}
						})
					}
				}
			}
		})
	}
}

// TestServingChainsOnly: on a backend without tree attention the engine
// verifies the leading chain of each shape, still losslessly.
func TestServingChainsOnly(t *testing.T) {
	m := spec.StoriesChainsOnly(t)
	p := spec.StoriesPair(t)
	const maxTok = 48
	var reqs []engine.Request
	for i, pr := range p.Repeats[:4] {
		reqs = append(reqs, engine.Request{ID: fmt.Sprint("r", i), Prompt: pr, MaxTokens: maxTok})
	}
	want := serve(t, m, engine.Options{Speculation: engine.Speculation{Drafter: engine.DraftOff}}, reqs)
	got := serve(t, m, engine.Options{Speculation: engine.Speculation{Dispatcher: spec.Fixed(spec.Bushy)}}, reqs)
	var acc float64
	for i := range reqs {
		if !slices.Equal(got[i].tokens, want[i].tokens) {
			t.Errorf("%s: have %v; want %v", reqs[i].ID, got[i].tokens, want[i].tokens)
		}
		acc += got[i].final.Stats.AcceptedPerStep
	}
	if acc <= float64(len(reqs)) {
		t.Errorf("have %.2f tokens per step; want drafts accepted", acc/float64(len(reqs)))
	}
}

// TestServingLosslessSampled: over many seeds, the first three tokens the
// engine emits for a sampled request with speculation on (a draft model,
// and n-gram lookup, on a static branching tree; the draft model on a
// dynamic tree) have exactly the target's
// distribution, computed by enumeration outside the engine; and each
// seed's output is its output with speculation off. With a known-bad
// acceptance rule (take the drafts unverified) and a drafter that is
// often wrong, the same test fails.
func TestServingLosslessSampled(t *testing.T) {
	p := spec.StoriesPair(t)
	prompt := p.Repeats[6]
	params := sample.Params{Temperature: 1, TopK: 3}
	want := spec.ExactJoint(t, p.Target, prompt, params, 3)
	if testing.Short() {
		t.Skip("statistical end-to-end test; -short runs the unit-level ones only")
	}
	wide := func() *spec.Dispatcher { return spec.Fixed(spec.Wide) }
	dyn := func() *spec.Dispatcher { return spec.Fixed(spec.Dynamic(8)) }
	cases := []struct {
		name  string
		sp    engine.Speculation
		n     int
		valid bool
	}{
		{"draft", drafters(p, wide)["draft"], 1600, true},
		{"ngram", drafters(p, wide)["ngram"], 800, true},
		// A dynamic tree: grown by the draft's own (sampled) confidence,
		// its shape differs from seed to seed.
		{"draft/dyn8", drafters(p, dyn)["draft"], 800, true},
		// A random model of the same vocabulary drafts tokens the target
		// seldom picks: verification must throw them out, and the bad
		// rule, which keeps them, is caught by a wide margin with fewer
		// trials.
		{"random_draft/bad_rule", engine.Speculation{Drafter: engine.DraftModel, Model: spec.SynthPair(t).Target, Dispatcher: wide()}, 480, false},
	}
	reqsOf := func(n int) []engine.Request {
		reqs := make([]engine.Request, n)
		for i := range reqs {
			pp := params
			pp.Seed = uint64(i)
			// Room past the 3 tokens counted: drafts deeper than what is
			// left to generate are not tried.
			reqs[i] = engine.Request{ID: fmt.Sprint("s", i), Prompt: prompt, Sample: pp, MaxTokens: 8}
		}
		return reqs
	}
	plain := serve(t, p.Target, engine.Options{MaxQueued: 2048, Speculation: engine.Speculation{Drafter: engine.DraftOff}}, reqsOf(1600))
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if !tc.valid {
				spec.BadAcceptance(t)
			}
			got := serve(t, p.Target, engine.Options{MaxQueued: 2048, Speculation: tc.sp}, reqsOf(tc.n))
			counts := map[string]int{}
			var steps float64
			same := 0
			for i, g := range got {
				counts[spec.Key(g.tokens[:min(3, len(g.tokens))]...)]++
				steps += g.final.Stats.AcceptedPerStep
				if slices.Equal(g.tokens, plain[i].tokens) {
					same++
				}
			}
			stat, crit := spec.ChiSquare(counts, want, tc.n)
			t.Logf("χ² = %.1f, critical %.1f; %.2f tokens per step; %d of %d as without speculation", stat, crit, steps/float64(tc.n), same, tc.n)
			if steps <= float64(tc.n) {
				t.Errorf("no draft accepted: the test exercises nothing")
			}
			if tc.valid && stat > crit {
				t.Errorf("have χ² %.1f; want ≤ %.1f", stat, crit)
			}
			if tc.valid && same != tc.n {
				t.Errorf("have %d of %d outputs as without speculation; want all (draws keyed by seed and position)", same, tc.n)
			}
			if !tc.valid && stat <= crit {
				t.Errorf("bad rule: have χ² %.1f; want > %.1f (the test does not catch it)", stat, crit)
			}
		})
	}
}
