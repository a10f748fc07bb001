package engine

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/specgate/specgate/engine/spec"
)

// TestSpeculationOffRunsThePlainSteps: an engine whose dispatcher keeps
// speculation off runs the plain engine's forward passes, pass for pass,
// and takes as long on a device of known speed, whichever drafter it
// holds. Its machinery (the drafter's slots, the plan and commit calls,
// the dispatcher's bookkeeping) adds no rows, no passes and no steps: a
// speculating engine that plays Off costs what the plain one costs, at
// any batch size. The workload mixes classes, prompt lengths, a stop
// string and a tight step budget, so that prefill chunks and decodes
// share steps and requests end at different times.
func TestSpeculationOffRunsThePlainSteps(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	var reqs []Request
	for i := range 24 {
		reqs = append(reqs, Request{ID: fmt.Sprint("r", i), Tenant: fmt.Sprint("t", i%3), Priority: []Priority{Interactive, Standard, Batch}[i%3],
			Prompt: prompt(rng, 10+rng.IntN(60)), MaxTokens: 10 + rng.IntN(40), Stop: []string{"zz"}})
	}
	type run struct {
		batches [][2]int
		end     time.Time
		out     []result
		steps   int64
	}
	runWith := func(sp Speculation) run {
		m := newFakeModel(t)
		m.next = cycleNext
		e, clk := testEngine(t, m, Options{MaxBatchTokens: 64, Speculation: sp})
		m.clock, m.stepCost, m.tokenCost = clk, 4*time.Millisecond, 200*time.Microsecond
		var streams []*Stream
		for _, r := range reqs {
			s, err := submitNow(e, r)
			if err != nil {
				t.Fatal(err)
			}
			streams = append(streams, s)
		}
		drive(t, e, clk, 0, 10000)
		r := run{batches: m.batches, end: clk.Now(), steps: e.count.Steps}
		for _, s := range streams {
			r.out = append(r.out, collect(t, s))
		}
		checkWhole(t, e)
		return r
	}
	plain := runWith(noSpec)
	// The draft model's own passes are counted too: a drafter that
	// drafted (or caught its K/V up) while Off would cost time the
	// target's passes do not show.
	draft := newFakeModel(t)
	for _, tt := range []struct {
		name string
		sp   func() Speculation
	}{
		{"ngram", func() Speculation { return Speculation{Drafter: DraftNGram, Dispatcher: spec.Fixed(spec.Off)} }},
		{"draft model", func() Speculation {
			return Speculation{Drafter: DraftModel, Model: draft, Dispatcher: spec.Fixed(spec.Off)}
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := runWith(tt.sp())
			if n := len(draft.batches); n != 0 {
				t.Errorf("the draft model ran %d forward passes while Off; want none", n)
			}
			if !slices.Equal(got.batches, plain.batches) {
				t.Errorf("forward passes (tokens, logits rows): have %d %v; want the plain engine's %d %v", len(got.batches), got.batches, len(plain.batches), plain.batches)
			}
			if got.steps != plain.steps || !got.end.Equal(plain.end) {
				t.Errorf("have %d steps ending at %v; want the plain engine's %d ending at %v", got.steps, got.end, plain.steps, plain.end)
			}
			for i := range reqs {
				if g, p := got.out[i], plain.out[i]; !slices.Equal(g.tokens, p.tokens) || g.final.Stats.Drafted != 0 {
					t.Errorf("%s: have %v (%d drafted); want %v and none drafted", reqs[i].ID, g.tokens, g.final.Stats.Drafted, p.tokens)
				}
			}
		})
	}
}
