package engine

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/specgate/specgate/engine/spec"
)

// cycleNext repeats the prompt's last 7 tokens, so n-gram drafts are
// mostly right and sometimes (at the period's seams) wrong.
func cycleNext(h []int32) int32 {
	if len(h) < 8 {
		return hashNext(h)
	}
	return h[len(h)-7]
}

func TestSpeculativeFake(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	var reqs []Request
	for i := range 12 {
		reqs = append(reqs, Request{ID: fmt.Sprint("r", i), Tenant: fmt.Sprint("t", i%3), Priority: []Priority{Interactive, Standard, Batch}[i%3],
			Prompt: prompt(rng, 10+rng.IntN(30)), MaxTokens: 10 + rng.IntN(40), Stop: []string{"zz"}})
	}
	runWith := func(o Options, cancel bool) ([]result, *Engine) {
		m := newFakeModel(t)
		m.next = cycleNext
		e, clk := testEngine(t, m, o)
		var streams []*Stream
		for _, r := range reqs {
			s, err := submitNow(e, r)
			if err != nil {
				t.Fatal(err)
			}
			streams = append(streams, s)
		}
		if cancel {
			for range 5 {
				e.step(clk.Now())
			}
			e.Cancel("r3")
			e.drain(clk.Now())
		}
		drive(t, e, clk, time.Millisecond, 10000)
		var out []result
		for _, s := range streams {
			out = append(out, collect(t, s))
		}
		return out, e
	}
	plain, _ := runWith(Options{Speculation: noSpec}, false)
	for _, tt := range []struct {
		name string
		o    Options
	}{
		{"roomy", Options{}},
		{"chain4", Options{Speculation: Speculation{Dispatcher: spec.Fixed(spec.Chain(4))}}},
		{"tight pool", Options{BlockSize: 4, KVBlocks: 40, MaxBatchTokens: 48, Speculation: Speculation{Dispatcher: spec.Fixed(spec.Chain(4))}}},
		{"tight pool, swap", Options{BlockSize: 4, KVBlocks: 40, HostKVBlocks: 100, NoPrefixCache: true, MaxBatchTokens: 48, Speculation: Speculation{Dispatcher: spec.Fixed(spec.Chain(4))}}},
		{"batch class off under load", Options{Speculation: Speculation{BatchPolicy: &spec.Policy{Off: true}}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, e := runWith(tt.o, false)
			for i := range reqs {
				if !slices.Equal(got[i].tokens, plain[i].tokens) || got[i].text != plain[i].text || got[i].final.FinishReason != plain[i].final.FinishReason {
					t.Errorf("%s: have %v %q %s; want %v %q %s (plain)", reqs[i].ID, got[i].tokens, got[i].text, got[i].final.FinishReason,
						plain[i].tokens, plain[i].text, plain[i].final.FinishReason)
				}
				// Batch requests speculate only while at most 4
				// sequences decode (the default batch policy), or never.
				acc := got[i].final.Stats.AcceptedPerStep
				if reqs[i].Priority == Batch {
					if tt.o.Speculation.BatchPolicy != nil && acc != 1 {
						t.Errorf("%s: have %.2f tokens per step for a batch request with speculation off; want 1", reqs[i].ID, acc)
					}
				} else if acc < 1.5 {
					t.Errorf("%s: have %.2f tokens per step; want > 1.5", reqs[i].ID, acc)
				}
			}
			checkWhole(t, e)
		})
	}
	t.Run("cancel", func(t *testing.T) {
		_, e := runWith(Options{BlockSize: 4, KVBlocks: 40, MaxBatchTokens: 48}, true)
		checkWhole(t, e)
	})
}
