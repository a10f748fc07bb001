//go:build linux

package llama_test

import (
	"fmt"
	"slices"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/specgate/specgate/engine/model"
	"github.com/specgate/specgate/engine/model/synth"
	"github.com/specgate/specgate/kernels"
)

// BenchmarkVerifyStep is what a speculative verify step's drafted rows
// cost: one forward pass over a sequence's last token and k drafted tokens
// after it, every row's logits wanted, at verifyCtx positions of context,
// against a plain step (k = 0) of the same sequence. The model is random,
// in the shape `specgate mkmodel`'s defaults give the inflated speculation
// target (about 95M parameters of Q8_0, 8 layers, 16 query heads of 64
// over 8 kv heads, an F16 cache), so a step reads about 100 MB of weights:
// the weight-bound case speculation is for. Each iteration runs a plain
// step and a k-row one, in turn, on one worker thread; x-plain is the
// median over iterations of the k-row step's process CPU time over the
// plain one's, which holds up on a host others load, where wall times and
// separate runs do not.
//
//	go test -run '^$' -bench VerifyStep -benchtime 40x ./engine/model/llama
func BenchmarkVerifyStep(b *testing.B) {
	const verifyCtx = 450
	path := synth.Setup(b, synth.Options{Seed: 11, Layers: 8, Dim: 1024, Heads: 16, KVHeads: 8, FFN: 2816,
		Vocab: 512, Context: 1024, Type: kernels.Q8_0})
	be, err := kernels.Open("cpu", kernels.Options{Threads: 1})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { be.Close() })
	m, err := model.Load(path, be)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { m.Close() })
	c := m.Config()
	const bs, maxK = 16, 8
	table := make([]int32, (verifyCtx+maxK+bs)/bs)
	for i := range table {
		table[i] = int32(i)
	}
	kv, err := model.NewKV(m, len(table), bs)
	if err != nil {
		b.Fatal(err)
	}
	tok := func(p int) int32 { return int32((p*7919 + 13) % c.Vocab) }
	var batch model.Batch
	for p0 := 0; p0 < verifyCtx; p0 += 64 {
		batch.Reset()
		for p := p0; p < min(verifyCtx, p0+64); p++ {
			batch.Add(tok(p), int32(p), int32(p), table, p == verifyCtx-1)
		}
		if _, err := m.Forward(kv, &batch); err != nil {
			b.Fatal(err)
		}
	}
	out := make([]float32, (maxK+1)*c.Vocab)
	// step runs the last token and k drafts; the drafts' K/V go to the
	// same slots every time, as rejected drafts' do.
	step := func(k int) int64 {
		batch.Reset()
		for j := range k + 1 {
			p := verifyCtx - 1 + j
			batch.Add(tok(p+j*1000), int32(p), int32(p), table, true)
		}
		t0 := processCPU(b)
		if err := model.ForwardHost(m, kv, &batch, out[:(k+1)*c.Vocab]); err != nil {
			b.Fatal(err)
		}
		return processCPU(b) - t0
	}
	for k := range maxK + 1 {
		b.Run(fmt.Sprintf("k=%d", k), func(b *testing.B) {
			var ratios []float64
			var cpu int64
			for b.Loop() {
				plain := step(0)
				d := step(k)
				cpu += d
				ratios = append(ratios, float64(d)/float64(max(plain, 1)))
			}
			slices.Sort(ratios)
			b.ReportMetric(float64(cpu)/float64(b.N), "cpu-ns/op")
			b.ReportMetric(ratios[len(ratios)/2], "x-plain")
		})
	}
}

// processCPU is the process's CPU time in nanoseconds.
func processCPU(b *testing.B) int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_PROCESS_CPUTIME_ID, &ts); err != nil {
		b.Fatal(err)
	}
	return ts.Nano()
}
