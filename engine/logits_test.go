package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/engine/model"
	"github.com/specgate/specgate/engine/spec"
	"github.com/specgate/specgate/internal/testmodels"
	"github.com/specgate/specgate/kernels"
	"github.com/specgate/specgate/kernels/cpu"
	"github.com/specgate/specgate/kernels/sample"
)

// samplerCount is the CPU backend with its kernels.Sampler ops counted.
type samplerCount struct {
	*cpu.Backend
	mu                      sync.Mutex
	draws, masked, sampled  int
	penalised, calls, multi int
}

func (b *samplerCount) SampleRows(out []int32, logits kernels.Tensor, rows []kernels.SampleRow) {
	b.mu.Lock()
	b.calls++
	if len(rows) > 1 {
		b.multi++
	}
	for _, r := range rows {
		b.draws++
		if r.Mask != nil {
			b.masked++
		}
		if !r.Params.Greedy() {
			b.sampled++
		}
		if r.Params.RepeatPenalty > 1 {
			b.penalised++
		}
	}
	b.mu.Unlock()
	b.Backend.SampleRows(out, logits, rows)
}

// hostSampling is the CPU backend without the Sampler op (every other op
// stays): the two embedded values both have SampleRows at the same depth,
// so it is not promoted and the engine samples host rows by the reference.
type hostSampling struct {
	*cpu.Backend
	noSampler
}

type noSampler struct{}

func (noSampler) SampleRows() {}

var (
	_ kernels.Sampler = (*samplerCount)(nil)
	_ kernels.Backend = (*hostSampling)(nil)
)

func loadOn(tb testing.TB, be kernels.Backend) model.Loaded {
	tb.Helper()
	m, err := model.Load(testmodels.Path(tb, testmodels.Stories260K), be)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { m.Close() })
	return m
}

// TestLogitsThroughBackend: greedy, sampled, penalised and guided requests,
// batched, with speculation on and off, draw every token through the
// backend's Sampler ops (masks included: no row is masked or sampled on the
// host), and get the very tokens the host reference gives on a backend
// without those ops.
func TestLogitsThroughBackend(t *testing.T) {
	c, err := cpu.Open(kernels.Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, ok := kernels.Backend(&hostSampling{Backend: c}).(kernels.Sampler); ok {
		t.Fatal("hostSampling still has the Sampler ops")
	}
	params := []sample.Params{
		{},
		{Temperature: 0.9, TopK: 40, TopP: 0.95, Seed: 11},
		{Temperature: 1.1, MinP: 0.05, RepeatPenalty: 1.3, PresencePenalty: 0.2, Seed: 12},
		{RepeatPenalty: 1.5, FrequencyPenalty: 0.3},
	}
	type result struct {
		toks   []int32
		finish string
	}
	run := func(t *testing.T, be kernels.Backend, o engine.Options) map[string]result {
		m := loadOn(t, be)
		e, err := engine.New(m, o)
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		var mu sync.Mutex
		out := map[string]result{}
		var wg sync.WaitGroup
		for i, p := range params {
			for _, guided := range []bool{false, true} {
				wg.Add(1)
				go func() {
					defer wg.Done()
					r := engine.Request{Prompt: m.Tokenizer().Encode(fmt.Sprintf("Once upon a time, %d", i)), MaxTokens: 40, Sample: p}
					if guided {
						r.Guided = &engine.Guided{Schema: json.RawMessage(personSchema)}
					}
					toks, _, f, err := generate(ctx, e, r)
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					out[fmt.Sprintf("%+v guided=%v", p, guided)] = result{toks, f.FinishReason}
					mu.Unlock()
				}()
			}
		}
		wg.Wait()
		return out
	}
	for _, sp := range []struct {
		name string
		o    engine.Options
	}{
		{"plain", engine.Options{Speculation: engine.Speculation{Drafter: engine.DraftOff}}},
		{"speculative", engine.Options{Speculation: engine.Speculation{Dispatcher: spec.Fixed(spec.Chain(3))}}},
	} {
		t.Run(sp.name, func(t *testing.T) {
			counted := &samplerCount{Backend: c}
			have := run(t, counted, sp.o)
			want := run(t, &hostSampling{Backend: c}, sp.o)
			tokens := 0
			for k, w := range want {
				h := have[k]
				if !slices.Equal(h.toks, w.toks) || h.finish != w.finish {
					t.Errorf("%s: backend ops gave %v (%s); host reference %v (%s)", k, h.toks, h.finish, w.toks, w.finish)
				}
				tokens += len(h.toks)
			}
			counted.mu.Lock()
			defer counted.mu.Unlock()
			// Every emitted token is a draw of the ops (verification may
			// draw more than it keeps), guided ones under a mask.
			if counted.draws < tokens || counted.masked == 0 || counted.sampled == 0 || counted.penalised == 0 {
				t.Errorf("the engine drew %d rows through the backend (%d masked, %d sampled, %d penalised) for %d tokens; want every token, of every kind",
					counted.draws, counted.masked, counted.sampled, counted.penalised, tokens)
			}
			t.Logf("%d tokens, %d draws in %d calls (%d of several rows), %d masked, %d sampled", tokens, counted.draws, counted.calls, counted.multi, counted.masked, counted.sampled)
		})
	}
}
