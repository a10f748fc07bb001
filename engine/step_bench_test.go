//go:build unix

package engine

import (
	"fmt"
	"math/rand/v2"
	"syscall"
	"testing"
	"time"

	"github.com/specgate/specgate/engine/spec"
)

// BenchmarkStepOverhead is the engine's own cost per generated token, the
// model's left out: a fake model whose forward pass costs next to nothing,
// 1 and 32 sequences, plain, speculating with a dispatcher that keeps it
// off (what the speculation machinery costs when it drafts nothing), and
// speculating (n-gram chains the fake model's cyclic output mostly
// accepts). What plan and commit cost shows here undiluted by the forward
// pass. cpu-ns/token is the process's CPU
// time per token, the figure to compare on a machine others load.
//
//	go test -run '^$' -bench StepOverhead ./engine
func BenchmarkStepOverhead(b *testing.B) {
	for _, n := range []int{1, 32} {
		for _, sp := range []struct {
			name string
			s    Speculation
		}{{"plain", noSpec}, {"off", Speculation{Dispatcher: spec.Fixed(spec.Off)}}, {"ngram", Speculation{Dispatcher: spec.Fixed(spec.Chain(4))}}} {
			b.Run(fmt.Sprintf("seqs=%d/%s", n, sp.name), func(b *testing.B) {
				m := newFakeModel(b)
				m.next = cycleNext
				// No prefix cache: each round's new prompts would fill it and
				// its eviction would be what is measured.
				e, clk := testEngine(b, m, Options{NoPrefixCache: true, Speculation: sp.s})
				rng := rand.New(rand.NewPCG(1, 2))
				tokens := 0
				cpu0 := cpuTime()
				b.ResetTimer()
				for range b.N {
					for i := range n {
						if _, err := submitNow(e, Request{ID: fmt.Sprint("r", i), Prompt: prompt(rng, 32), MaxTokens: 64}); err != nil {
							b.Fatal(err)
						}
					}
					for len(e.seqs) > 0 {
						e.step(clk.Now())
						clk.Advance(time.Millisecond)
					}
					tokens += 64 * n
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(tokens), "ns/token")
				b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/float64(tokens), "cpu-ns/token")
			})
		}
	}
}

// cpuTime is the process's CPU time so far: on a loaded machine it moves
// far less than the wall clock with what others run.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
