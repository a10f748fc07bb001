package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/engine/model"
	"github.com/specgate/specgate/engine/model/synth"
	"github.com/specgate/specgate/kernels"
)

// benchModel loads the model the engine benchmarks run on: the file named by
// SPECGATE_BENCH_MODEL, else the ~100M-parameter Q8_0 model that `make
// bench` writes to var/models, else the same shape written now.
func benchModel(b *testing.B) model.Loaded { return benchModelContext(b, 0) }

// benchModelContext is benchModel for a context of at least ctx tokens:
// when the model found is shorter, the same shape is written now with that
// context.
func benchModelContext(b *testing.B, ctx int) model.Loaded {
	b.Helper()
	be, err := kernels.Open("cpu", kernels.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { be.Close() })
	load := func(path string) model.Loaded {
		m, err := model.Load(path, be)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { m.Close() })
		return m
	}
	path := os.Getenv("SPECGATE_BENCH_MODEL")
	if path == "" {
		path = filepath.Join("..", "var", "models", "m100-q8_0.gguf")
	}
	if _, err := os.Stat(path); err == nil {
		if m := load(path); m.Config().Context >= ctx {
			return m
		}
	}
	return load(synth.Setup(b, synth.Options{Layers: 12, Dim: 768, Heads: 12, FFN: 2048, Vocab: 32000, Type: kernels.Q8_0, Context: max(ctx, 512)}))
}

func benchPrompt(m model.Loaded, i int) []int32 {
	return m.Tokenizer().Encode(fmt.Sprintf("Story %d: once upon a time there", i))
}

// BenchmarkDecode reports aggregate completion tokens per second with 1, 8
// and 32 greedy streams decoding together (prefill of the short prompts
// included, so each stream generates 64 tokens: enough that decode, not
// the prefill steps, is what the figure measures).
func BenchmarkDecode(b *testing.B) {
	m := benchModel(b)
	const gen = 64
	for _, n := range []int{1, 8, 32} {
		b.Run(fmt.Sprintf("streams=%d", n), func(b *testing.B) {
			e, err := engine.New(m, engine.Options{KVBlocks: 2 * n * 4})
			if err != nil {
				b.Fatal(err)
			}
			defer e.Close()
			ctx := context.Background()
			tokens := 0
			b.ResetTimer()
			start := time.Now()
			for range b.N {
				var wg sync.WaitGroup
				var mu sync.Mutex
				for i := range n {
					wg.Add(1)
					go func() {
						defer wg.Done()
						toks, _, f, err := generate(ctx, e, engine.Request{Prompt: benchPrompt(m, i), MaxTokens: gen})
						if err != nil || f.FinishReason == engine.FinishError {
							b.Errorf("stream %d: %v %v", i, err, f)
							return
						}
						mu.Lock()
						tokens += len(toks)
						mu.Unlock()
					}()
				}
				wg.Wait()
			}
			b.ReportMetric(float64(tokens)/time.Since(start).Seconds(), "tok/s")
		})
	}
}

// BenchmarkInteractiveTTFT reports interactive time to first token, p50 and
// p99, alone and while a batch tenant keeps the queue full.
func BenchmarkInteractiveTTFT(b *testing.B) {
	m := benchModel(b)
	for _, flood := range []bool{false, true} {
		name := "alone"
		if flood {
			name = "batch-flood"
		}
		b.Run(name, func(b *testing.B) {
			// The default budget: the step-latency target keeps steps
			// short while interactive work is live, which bounds how long
			// an arriving request waits for the pass in flight (a forward
			// pass is not preemptible).
			e, err := engine.New(m, engine.Options{MaxRunning: 16, KVBlocks: 256})
			if err != nil {
				b.Fatal(err)
			}
			defer e.Close()
			ctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			if flood {
				// Keep 32 batch requests in flight: 16 running, 16
				// waiting.
				for i := range 32 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for ctx.Err() == nil {
							generate(ctx, e, engine.Request{Tenant: "bulk", Priority: engine.Batch, Prompt: benchPrompt(m, i), MaxTokens: 32})
						}
					}()
				}
				time.Sleep(200 * time.Millisecond) // let the flood fill the engine
			}
			var ttft []time.Duration
			b.ResetTimer()
			for i := range max(b.N, 20) {
				_, _, f, err := generate(context.Background(), e, engine.Request{Tenant: "chat", Priority: engine.Interactive, Prompt: benchPrompt(m, 1000+i), MaxTokens: 2})
				if err != nil || f.FinishReason == engine.FinishError {
					b.Fatalf("interactive: %v %+v", err, f)
				}
				ttft = append(ttft, f.Stats.TTFT)
			}
			b.StopTimer()
			cancel()
			wg.Wait()
			slices.Sort(ttft)
			pct := func(p float64) float64 {
				return float64(ttft[min(len(ttft)-1, int(p*float64(len(ttft))))].Microseconds()) / 1000
			}
			b.ReportMetric(pct(0.50), "p50_ms")
			b.ReportMetric(pct(0.99), "p99_ms")
		})
	}
}

// BenchmarkPrefixCacheTTFT reports the time to first token of the 10th turn
// of a conversation with a ~1,500-token history: without the prefix cache,
// with the history cached on the device tier, and with it demoted to the
// host tier just before the turn (so the turn promotes it back), measured
// together so that their ratios come from one run. It also reports how fast
// blocks are promoted (host to device KV copies) against a plain memory
// copy of the same bytes.
func BenchmarkPrefixCacheTTFT(b *testing.B) {
	m := benchModelContext(b, 2048)
	ctx := context.Background()
	vocab := int32(m.Config().Vocab)
	rng := rand.New(rand.NewPCG(1, 2))
	// A user message of 135 token ids; 10 of them and 9 replies of 16
	// make a last prompt of ~1,500 tokens.
	message := func() []int32 {
		t := make([]int32, 135)
		for i := range t {
			t[i] = 3 + rng.Int32N(vocab-3)
		}
		return t
	}
	e, err := engine.New(m, engine.Options{KVBlocks: 256, HostKVBlocks: 256})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	plain, err := engine.New(m, engine.Options{KVBlocks: 256, NoPrefixCache: true})
	if err != nil {
		b.Fatal(err)
	}
	defer plain.Close()
	turn := func(e *engine.Engine, p []int32, n int) ([]int32, *engine.Final) {
		toks, _, f, err := generate(ctx, e, engine.Request{Tenant: "chat", Session: "conv", Prompt: p, MaxTokens: n})
		if err != nil || f.FinishReason == engine.FinishError {
			b.Fatalf("turn: %v %+v", err, f)
		}
		return toks, f
	}
	var history []int32
	for range 9 {
		history = append(history, message()...)
		reply, _ := turn(e, history, 16)
		history = append(history, reply...)
	}
	var plainT, devT, hostT time.Duration
	var cached, differ int
	b.ResetTimer()
	for range b.N {
		last := append(slices.Clone(history), message()...)
		want, f := turn(plain, last, 1)
		plainT += f.Stats.TTFT
		have, f := turn(e, last, 1)
		devT += f.Stats.TTFT
		cached = f.Usage.CachedTokens
		// Equality with the cache off is asserted on a trained model
		// (TestStoriesPrefixCache). On this
		// random model a random prompt leaves the next token a near-tie, so
		// prefilling 1,500 tokens in other chunks (float rounding of other
		// batch shapes) can flip it: count, don't fail.
		if !slices.Equal(have, want) {
			differ++
		}
		last = append(slices.Clone(history), message()...)
		want, _ = turn(plain, last, 1)
		if err := e.DemotePrefixes(ctx); err != nil {
			b.Fatal(err)
		}
		have, f = turn(e, last, 1)
		hostT += f.Stats.TTFT
		if !slices.Equal(have, want) {
			differ++
		}
	}
	b.StopTimer()
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / float64(b.N) }
	b.ReportMetric(float64(len(history)+135), "prompt_tokens")
	b.ReportMetric(float64(cached), "cached_tokens")
	b.ReportMetric(float64(differ), "differing_first_tokens")
	b.ReportMetric(ms(plainT), "nocache_ms")
	b.ReportMetric(ms(devT), "device_ms")
	b.ReportMetric(ms(hostT), "host_ms")
	b.ReportMetric(float64(plainT)/float64(devT), "device_speedup")
	b.ReportMetric(float64(plainT)/float64(hostT), "host_speedup")

	// Promotion is one CopyBlocks call over the history's blocks.
	blocks := len(history) / 16
	dev, err := model.NewKV(m, blocks, 16)
	if err != nil {
		b.Fatal(err)
	}
	host, err := model.NewKV(m, blocks, 16)
	if err != nil {
		b.Fatal(err)
	}
	moves := make([]kernels.BlockCopy, blocks)
	for i := range moves {
		moves[i] = kernels.BlockCopy{Src: int32(i), Dst: int32(blocks - 1 - i)}
	}
	spec := dev.Spec()
	bytes := float64(spec.Layers) * 2 * float64(blocks*spec.BlockSize*spec.Width) * 4
	src, dst := make([]float32, int(bytes)/4), make([]float32, int(bytes)/4)
	const reps = 5
	// Write every page first: untouched ones all map the zero page, which
	// reads at cache speed.
	for i := range src {
		src[i] = float32(i)
	}
	copy(dst, src)
	m.Backend().CopyBlocks(host, dev, moves)
	m.Backend().CopyBlocks(dev, host, moves)
	start := time.Now()
	for range reps {
		m.Backend().CopyBlocks(dev, host, moves)
	}
	promote := time.Since(start)
	start = time.Now()
	for range reps {
		copy(dst, src)
	}
	memcpy := time.Since(start)
	b.ReportMetric(bytes*reps/promote.Seconds()/1e9, "promote_GB/s")
	b.ReportMetric(bytes*reps/memcpy.Seconds()/1e9, "memcpy_GB/s")
}

// BenchmarkGuided reports aggregate completion tokens per second of 8
// streams under a JSON schema and unconstrained, in the same run, and
// their ratio (the cost of the masks; the target is at least 0.95).
func BenchmarkGuided(b *testing.B) {
	m := benchModel(b)
	const gen, n = 48, 8
	schema := json.RawMessage(`{"type":"object","properties":{"title":{"type":"string","maxLength":200},` +
		`"year":{"type":"integer","minimum":0,"maximum":3000},"words":{"type":"array","items":{"type":"string","maxLength":20},"maxItems":20}},"required":["title","year","words"]}`)
	e, err := engine.New(m, engine.Options{KVBlocks: 2 * n * 8})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	run := func(g *engine.Guided) (tokens int, d time.Duration) {
		var wg sync.WaitGroup
		var mu sync.Mutex
		start := time.Now()
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				toks, _, f, err := generate(context.Background(), e, engine.Request{Prompt: benchPrompt(m, i), MaxTokens: gen, Guided: g})
				if err != nil || f.FinishReason == engine.FinishError {
					b.Errorf("stream %d: %v %v", i, err, f)
					return
				}
				mu.Lock()
				tokens += len(toks)
				mu.Unlock()
			}()
		}
		wg.Wait()
		return tokens, time.Since(start)
	}
	run(&engine.Guided{Schema: schema}) // compile and warm the masks
	var plainTok, guidedTok int
	var plainDur, guidedDur time.Duration
	b.ResetTimer()
	for range b.N {
		t, d := run(nil)
		plainTok, plainDur = plainTok+t, plainDur+d
		t, d = run(&engine.Guided{Schema: schema})
		guidedTok, guidedDur = guidedTok+t, guidedDur+d
	}
	plain := float64(plainTok) / plainDur.Seconds()
	guided := float64(guidedTok) / guidedDur.Seconds()
	b.ReportMetric(plain, "plain-tok/s")
	b.ReportMetric(guided, "guided-tok/s")
	b.ReportMetric(guided/plain, "ratio")
}

// BenchmarkSpeculative reports aggregate completion tokens per second of
// greedy streams on stories260K with prompts their continuations quote,
// speculating (n-gram drafts, the default dispatcher) and plain, in the
// same run, at 1, 8 and 32 streams, and their ratio.
func BenchmarkSpeculative(b *testing.B) {
	m := loadStories(b)
	tok := m.Tokenizer()
	const gen = 96
	for _, n := range []int{1, 8, 32} {
		b.Run(fmt.Sprintf("streams=%d", n), func(b *testing.B) {
			run := func(e *engine.Engine) (int, time.Duration) {
				var wg sync.WaitGroup
				var mu sync.Mutex
				tokens := 0
				start := time.Now()
				for i := range n {
					wg.Add(1)
					go func() {
						defer wg.Done()
						r := engine.Request{Prompt: tok.Encode(repeatPrompts[i%len(repeatPrompts)]), MaxTokens: gen, Tenant: fmt.Sprint("t", i)}
						toks, _, f, err := generate(context.Background(), e, r)
						if err != nil || f.FinishReason == engine.FinishError {
							b.Errorf("stream %d: %v %v", i, err, f)
							return
						}
						mu.Lock()
						tokens += len(toks)
						mu.Unlock()
					}()
				}
				wg.Wait()
				return tokens, time.Since(start)
			}
			// No prefix cache: every run prefills alike.
			plainE, err := engine.New(m, engine.Options{NoPrefixCache: true, Speculation: engine.Speculation{Drafter: engine.DraftOff}})
			if err != nil {
				b.Fatal(err)
			}
			defer plainE.Close()
			specE, err := engine.New(m, engine.Options{NoPrefixCache: true})
			if err != nil {
				b.Fatal(err)
			}
			defer specE.Close()
			// Warm up, and let the dispatcher measure its options and back
			// off from the losing ones, as a long-running server's has.
			for range 12 {
				run(specE)
			}
			run(plainE)
			var pt, st int
			var pd, sd time.Duration
			b.ResetTimer()
			for range b.N {
				t, d := run(plainE)
				pt, pd = pt+t, pd+d
				t, d = run(specE)
				st, sd = st+t, sd+d
			}
			plain, sp := float64(pt)/pd.Seconds(), float64(st)/sd.Seconds()
			b.ReportMetric(plain, "plain-tok/s")
			b.ReportMetric(sp, "spec-tok/s")
			b.ReportMetric(sp/plain, "ratio")
		})
	}
}
