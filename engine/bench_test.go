package engine_test

import (
	"context"
	"fmt"
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
func benchModel(b *testing.B) model.Model {
	b.Helper()
	path := os.Getenv("SPECGATE_BENCH_MODEL")
	if path == "" {
		path = filepath.Join("..", "var", "models", "m100-q8_0.gguf")
		if _, err := os.Stat(path); err != nil {
			path = synth.Setup(b, synth.Options{Layers: 12, Dim: 768, Heads: 12, FFN: 2048, Vocab: 32000, Type: kernels.Q8_0})
		}
	}
	be, err := kernels.Open("cpu", kernels.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { be.Close() })
	m, err := model.Load(path, be)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { m.Close() })
	return m
}

func benchPrompt(m model.Model, i int) []int32 {
	return m.Tokenizer().Encode(fmt.Sprintf("Story %d: once upon a time there", i))
}

// BenchmarkDecode reports aggregate completion tokens per second with 1, 8
// and 32 greedy streams decoding together (prefill of the short prompts
// included).
func BenchmarkDecode(b *testing.B) {
	m := benchModel(b)
	const gen = 16
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
			// A smaller step budget bounds how long an arriving request waits
			// for the pass in flight (a forward pass is not preemptible).
			e, err := engine.New(m, engine.Options{MaxRunning: 16, KVBlocks: 256, MaxBatchTokens: 64})
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
