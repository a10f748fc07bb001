package engine_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/engine/model"
	"github.com/specgate/specgate/engine/spec"
	"github.com/specgate/specgate/kernels/sample"
)

// repeatPrompts are prompts whose continuation is likely to quote them,
// so n-gram drafts get accepted.
var repeatPrompts = []string{
	"Once upon a time, there was a little girl named Lily. She liked to play. Once upon a time, there was a little girl named Lily.",
	"Tom had a red ball. Tom liked the red ball. Tom had a red ball.",
	"The cat sat on the mat. The dog sat on the mat. The cat sat on the mat.",
	"One day, a big bear went to the park. One day, a big bear",
	"Sue said, \"I want to play.\" Mom said, \"I want to play.\" Sue said,",
	"The sun was hot. The sun was big. The sun was hot. The sun",
	"Ben ran and ran. Ben ran and ran. Ben ran",
	"There was a tree. The tree was tall. There was a tree. The tree",
}

// runAll submits reqs at once to an engine with options o and returns
// each one's tokens and final.
func runAll(t *testing.T, m model.Model, o engine.Options, reqs []engine.Request) ([][]int32, []*engine.Final) {
	t.Helper()
	e, err := engine.New(m, o)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	toks := make([][]int32, len(reqs))
	finals := make([]*engine.Final, len(reqs))
	var wg sync.WaitGroup
	for i, r := range reqs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tk, _, f, err := generate(ctx, e, r)
			if err != nil {
				t.Error(err)
				return
			}
			if f.FinishReason == engine.FinishError {
				t.Errorf("%s: %v", r.ID, f.Err)
			}
			toks[i], finals[i] = tk, f
		}()
	}
	wg.Wait()
	c, err := e.Counters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if c.Cache.DevicePinned != 0 {
		t.Errorf("have %d pinned cache blocks after every request ended; want 0", c.Cache.DevicePinned)
	}
	return toks, finals
}

func TestStoriesSpeculativeGreedyLossless(t *testing.T) {
	m := loadStories(t)
	tok := m.Tokenizer()
	for _, n := range []int{1, 8} {
		var reqs []engine.Request
		for i := range n {
			reqs = append(reqs, engine.Request{ID: fmt.Sprint("r", i), Tenant: fmt.Sprint("t", i%2), Prompt: tok.Encode(repeatPrompts[i%len(repeatPrompts)]), MaxTokens: 64})
		}
		plain, _ := runAll(t, m, engine.Options{Speculation: engine.Speculation{Drafter: engine.DraftOff}}, reqs)
		for _, tt := range []struct {
			name string
			o    engine.Options
		}{
			{"dispatcher", engine.Options{}},
			{"bushy", engine.Options{Speculation: engine.Speculation{Dispatcher: spec.Fixed(spec.Bushy)}}},
			{"chain4", engine.Options{Speculation: engine.Speculation{Dispatcher: spec.Fixed(spec.Chain(4))}}},
			// 8 sequences of ~100 tokens need ~56 blocks of 16.
			{"bushy, tight pool", engine.Options{KVBlocks: 24, MaxBatchTokens: 64, Speculation: engine.Speculation{Dispatcher: spec.Fixed(spec.Bushy)}}},
			{"bushy, tight pool, swap", engine.Options{KVBlocks: 24, HostKVBlocks: 64, NoPrefixCache: true, MaxBatchTokens: 64, Speculation: engine.Speculation{Dispatcher: spec.Fixed(spec.Bushy)}}},
		} {
			t.Run(fmt.Sprintf("%s/n=%d", tt.name, n), func(t *testing.T) {
				got, finals := runAll(t, m, tt.o, reqs)
				var acc float64
				pre := 0
				for i := range reqs {
					if finals[i] == nil {
						continue
					}
					if !slices.Equal(got[i], plain[i]) {
						t.Errorf("%s: speculative greedy differs from plain:\nhave %v\nwant %v", reqs[i].ID, got[i], plain[i])
					}
					acc += finals[i].Stats.AcceptedPerStep
					pre += finals[i].Stats.Preemptions
				}
				acc /= float64(len(reqs))
				t.Logf("mean accepted per step %.2f, %d preemptions", acc, pre)
				if tt.name != "dispatcher" && acc <= 1.05 {
					t.Errorf("have %.2f tokens per step; want drafts accepted (> 1.05)", acc)
				}
			})
		}
	}
}

func TestStoriesSpeculativeSampledReproducible(t *testing.T) {
	m := loadStories(t)
	tok := m.Tokenizer()
	var reqs []engine.Request
	for i := range 4 {
		reqs = append(reqs, engine.Request{ID: fmt.Sprint("r", i), Prompt: tok.Encode(repeatPrompts[i]), MaxTokens: 48,
			Sample: sample.Params{Temperature: 0.8, TopP: 0.95, Seed: uint64(10 + i)}})
	}
	// A fixed shape: the dispatcher's choices follow timing, and which
	// shape a step drafts decides which draws it makes.
	opts := func() engine.Options {
		return engine.Options{Speculation: engine.Speculation{Dispatcher: spec.Fixed(spec.Wide)}}
	}
	var first [][]int32
	drafted := false
	for i := range reqs {
		a, fa := runAll(t, m, opts(), reqs[i:i+1])
		b, _ := runAll(t, m, opts(), reqs[i:i+1])
		if !slices.Equal(a[0], b[0]) {
			t.Errorf("%s: same seed, different outputs:\n%v\n%v", reqs[i].ID, a[0], b[0])
		}
		if fa[0] == nil || len(a[0]) == 0 {
			t.Errorf("%s: no output", reqs[i].ID)
			continue
		}
		t.Logf("%s: %d tokens, %.2f per step", reqs[i].ID, len(a[0]), fa[0].Stats.AcceptedPerStep)
		drafted = drafted || fa[0].Stats.AcceptedPerStep > 1
		first = append(first, a[0])
	}
	if !drafted {
		t.Error("no sampled request accepted a draft; want the speculative path exercised")
	}
	// Draws are keyed by (seed, position), so the seed gives the same
	// text with speculation off, with the dispatcher's own shapes, and
	// with all the requests in one batch.
	for _, o := range []engine.Options{
		{Speculation: engine.Speculation{Drafter: engine.DraftOff}},
		{},
		{Speculation: engine.Speculation{Dispatcher: spec.Fixed(spec.Chain(4))}},
	} {
		for i := range reqs {
			have, _ := runAll(t, m, o, reqs[i:i+1])
			if !slices.Equal(have[0], first[i]) {
				t.Errorf("%s with %+v: the seed drew other tokens:\n%v\n%v", reqs[i].ID, o.Speculation, have[0], first[i])
			}
		}
		all, _ := runAll(t, m, o, reqs)
		for i := range reqs {
			if !slices.Equal(all[i], first[i]) {
				t.Errorf("%s in a batch of %d with %+v: the seed drew other tokens", reqs[i].ID, len(reqs), o.Speculation)
			}
		}
	}
}
