package cpu

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/specgate/specgate/kernels"
)

func benchWeights(tb testing.TB, b *Backend, dt kernels.DType, m, k int) (kernels.Tensor, int) {
	r := rand.New(rand.NewPCG(uint64(m), uint64(k)))
	vals := make([]float32, m*k)
	for i := range vals {
		vals[i] = r.Float32() - 0.5
	}
	data, err := kernels.Quantize(dt, vals)
	if err != nil {
		tb.Fatal(err)
	}
	w, err := b.Weights(dt, m, k, data)
	if err != nil {
		tb.Fatal(err)
	}
	return w, len(data)
}

// BenchmarkMatMul reports weight bytes read per second.
func BenchmarkMatMul(b *testing.B) {
	be := open(b, 0)
	for _, dt := range []kernels.DType{kernels.F32, kernels.F16, kernels.Q8_0, kernels.Q4_0} {
		for _, s := range []struct{ m, k int }{{768, 768}, {3072, 768}} {
			w, size := benchWeights(b, be, dt, s.m, s.k)
			for _, n := range []int{1, 8, 32} {
				b.Run(fmt.Sprintf("%v/%dx%d/n=%d", dt, s.m, s.k, n), func(b *testing.B) {
					x, dst := be.Alloc(n, s.k), be.Alloc(n, s.m)
					be.Upload(x, make([]float32, n*s.k))
					b.SetBytes(int64(size))
					loopThreadCPU(b, func() {
						be.MatMul(dst, x, w)
					})
				})
			}
		}
	}
}

var (
	bandwidthOnce sync.Once
	bandwidth     float64
)

func measuredBandwidth() float64 {
	bandwidthOnce.Do(func() { bandwidth = MeasureBandwidth(512<<20, time.Second) })
	return bandwidth
}

func BenchmarkBandwidth(b *testing.B) {
	for b.Loop() {
		bw := MeasureBandwidth(256<<20, 200*time.Millisecond)
		b.ReportMetric(bw/1e9, "GB/s")
	}
}

// BenchmarkDecode runs the matrix products of one step of a ~120M-parameter
// Llama-shaped model (12 layers of 768 wide, FFN 3072, an 8192-token output
// head) at batch 1, 4 (a speculative verification) and 8, and reports
// tokens/s and the fraction of the memory-bandwidth floor (weight bytes /
// measured bandwidth) achieved.
func BenchmarkDecode(b *testing.B) {
	const layers, dim, ffn, vocab = 12, 768, 3072, 8192
	be := open(b, 0)
	bw := measuredBandwidth()
	for _, dt := range []kernels.DType{kernels.Q8_0, kernels.Q4_0} {
		type layer struct{ q, k, v, o, gate, up, down kernels.Tensor }
		ls := make([]layer, layers)
		total := 0
		mk := func(m, k int) kernels.Tensor {
			w, n := benchWeights(b, be, dt, m, k)
			total += n
			return w
		}
		for i := range ls {
			ls[i] = layer{mk(dim, dim), mk(dim, dim), mk(dim, dim), mk(dim, dim), mk(ffn, dim), mk(ffn, dim), mk(dim, ffn)}
		}
		head := mk(vocab, dim)
		floor := float64(total) / bw
		for _, n := range []int{1, 4, 8} {
			b.Run(fmt.Sprintf("%v/n=%d", dt, n), func(b *testing.B) {
				x, y, h := be.Alloc(n, dim), be.Alloc(n, dim), be.Alloc(n, ffn)
				h2, logits := be.Alloc(n, ffn), be.Alloc(n, vocab)
				be.Upload(x, randVec(rand.New(rand.NewPCG(1, 1)), n*dim))
				b.SetBytes(int64(total))
				for b.Loop() {
					for _, l := range ls {
						be.MatMul(y, x, l.q)
						be.MatMul(y, x, l.k)
						be.MatMul(y, x, l.v)
						be.MatMul(y, x, l.o)
						be.MatMul(h, x, l.gate)
						be.MatMul(h2, x, l.up)
						be.MatMul(y, h, l.down)
					}
					be.MatMul(logits, x, head)
				}
				step := b.Elapsed().Seconds() / float64(b.N)
				b.ReportMetric(float64(n)/step, "tok/s")
				b.ReportMetric(floor/step, "floor-frac")
				b.ReportMetric(float64(total)/1e6, "weight-MB")
			})
		}
	}
}

// BenchmarkAttention is one decode step's attention for one layer over a
// long context.
func BenchmarkAttention(b *testing.B) {
	be := open(b, 0)
	const heads, kvHeads, hd, bs = 12, 4, 64, 16
	for _, ctx := range []int{512, 4096} {
		b.Run(fmt.Sprintf("ctx=%d", ctx), func(b *testing.B) {
			c, err := be.NewKV(kernels.KVSpec{Layers: 1, Blocks: ctx / bs, BlockSize: bs, Width: kvHeads * hd})
			if err != nil {
				b.Fatal(err)
			}
			table := make([]int32, ctx/bs)
			for i := range table {
				table[i] = int32(i)
			}
			q, dst := be.Alloc(1, heads*hd), be.Alloc(1, heads*hd)
			a := kernels.Attn{Heads: heads, KVHeads: kvHeads, HeadDim: hd, Rows: []kernels.AttnRow{{Table: table, Len: int32(ctx)}}}
			for b.Loop() {
				be.Attention(dst, q, c, 0, a)
			}
		})
	}
}

// BenchmarkDispatch is the fixed cost of handing an op to the workers.
func BenchmarkDispatch(b *testing.B) {
	be := open(b, 0)
	var t nopTask
	for b.Loop() {
		be.pool.run(&t, 2, 1)
	}
}

type nopTask struct{}

func (nopTask) run(_, _, _ int) {}

// BenchmarkQuantKernels compares, on one thread, the kernels that compute
// an 8×8 block of outputs (eight weight rows, eight activation rows) of
// 768-wide rows: the tiled kernel, where the CPU has it, against the
// multi-row kernels (two calls of four activation rows).
func BenchmarkQuantKernels(b *testing.B) {
	initTables()
	const nb = 24
	r := rand.New(rand.NewPCG(1, 2))
	xq, xd := make([]int8, 8*nb*32), make([]float32, 8*nb)
	for i := range xq {
		xq[i] = int8(r.IntN(255) - 127)
	}
	const macs = 8 * 8 * nb * 32
	for _, dt := range []kernels.DType{kernels.Q8_0, kernels.Q4_0} {
		act := newTileAct(1, nb, signedTiles(dt))
		for l := range tileRows {
			spreadTile(act, l, xq[l*nb*32:(l+1)*nb*32], xd[l*nb:(l+1)*nb])
		}
		w := randBlocks(r, dt, 8*nb, false)
		rb := nb * dt.BlockBytes()
		out := make([]float32, 8*8)
		b.Run(fmt.Sprintf("%v/rows", dt), func(b *testing.B) {
			rows := dotQ8RowsN
			if dt == kernels.Q4_0 {
				rows = dotQ4RowsN
			}
			xc := make([]int32, 8*nb)
			blockSums8(xc, xq)
			for b.Loop() {
				rows(w, rb, 8, nb, 4, xq, xd, xc, out, 8)
				rows(w, rb, 8, nb, 4, xq[4*nb*32:], xd[4*nb:], xc[4*nb:], out[32:], 8)
			}
			b.ReportMetric(float64(b.N)*macs/b.Elapsed().Seconds()/1e9, "GMAC/s")
		})
		if st := tileStoreKernel(dt); st != nil {
			b.Run(fmt.Sprintf("%v/tiles", dt), func(b *testing.B) {
				for b.Loop() {
					st(w, rb, act, nb, 1, out, 8, tileRows, 2)
				}
				b.ReportMetric(float64(b.N)*macs/b.Elapsed().Seconds()/1e9, "GMAC/s")
			})
		}
	}
}

// BenchmarkMatMulPrefill is a prompt's matmuls on float weights, one
// thread: the shapes of a 768-wide model with a 2048-wide feed-forward
// layer, 128 and 512 rows; GFLOP/s per second of the thread's CPU time.
func BenchmarkMatMulPrefill(b *testing.B) {
	be := open(b, 1)
	for _, dt := range []kernels.DType{kernels.F32, kernels.F16} {
		for _, s := range []struct{ m, k int }{{768, 768}, {2048, 768}, {768, 2048}} {
			w, _ := benchWeights(b, be, dt, s.m, s.k)
			for _, n := range []int{128, 512} {
				b.Run(fmt.Sprintf("%v/%dx%d/n=%d", dt, s.m, s.k, n), func(b *testing.B) {
					x, dst := be.Alloc(n, s.k), be.Alloc(n, s.m)
					be.Upload(x, make([]float32, n*s.k))
					t := loopThreadCPU(b, func() { be.MatMul(dst, x, w) })
					b.ReportMetric(2*float64(n*s.m*s.k)/t, "GFLOP/s")
				})
			}
		}
	}
}

// BenchmarkX8Layout times one thread's MatMul of n activation rows (a
// decode step's n = 1, a speculative verification's few, prefill's many)
// against Q8_0, Q4_0 and K-quant weights in GGML's layout and in the ×8 one, at a
// ~100M model's shapes: the n-row figures over the 1-row one are what
// verifying n tokens costs.
func BenchmarkX8Layout(b *testing.B) {
	defer useAsm(true)
	be, err := Open(kernels.Options{Threads: 1})
	if err != nil {
		b.Fatal(err)
	}
	defer be.Close()
	for _, dt := range []kernels.DType{kernels.Q8_0, kernels.Q4_0, kernels.Q4_K, kernels.Q5_K, kernels.Q6_K} {
		for _, s := range []struct{ m, k int }{{2816, 1024}, {1024, 2816}} {
			for _, packed := range []bool{false, true} {
				useX8Layout(packed)
				w, size := benchWeights(b, be, dt, s.m, s.k)
				useAsm(true)
				for _, n := range []int{1, 2, 3, 4, 5, 6, 7, 8, 16, 33, 128, 512} {
					b.Run(fmt.Sprintf("%v/%dx%d/x8=%v/n=%d", dt, s.m, s.k, packed, n), func(b *testing.B) {
						x, dst := be.Alloc(n, s.k), be.Alloc(n, s.m)
						be.Upload(x, randVec(rand.New(rand.NewPCG(1, 2)), n*s.k))
						b.SetBytes(int64(size))
						loopThreadCPU(b, func() {
							be.MatMul(dst, x, w)
						})
					})
				}
			}
		}
	}
}

// BenchmarkVerifyRows is one forward pass's matrix products for n
// activation rows at the ~100M speculation target's shapes (8 layers, 1024
// wide, KV 512, FFN 2816: 101 MB of Q8_0, 53 MB of Q4_0, 59 MB of Q4_K or
// 79 MB of Q6_K, more than the cache holds), in the ×8 layout, on one
// thread and on two: a speculative verification of n tokens at batch 1,
// and 16, 32 and 64 rows, a batch of decoding sequences (or of them and
// their drafts). x1row is the time over the same run's one-row time (CPU
// time on one thread, wall time on two), what the rows past the first
// cost. The rows are free while the pass waits for weights, and cost their
// multiplications once it does not: on a two-core Zen 5 host, 32 rows
// took 2.9 times one row's time, each row from the eighth on about
// 0.24 ms, which is why speculation cannot pay at batch 32 there.
func BenchmarkVerifyRows(b *testing.B) {
	const layers, dim, kv, ffn = 8, 1024, 512, 2816
	defer useAsm(true)
	defer useX8Layout(useX8Layout(true))
	for _, dt := range []kernels.DType{kernels.Q8_0, kernels.Q4_0, kernels.Q4_K, kernels.Q6_K} {
		for _, threads := range []int{1, 2} {
			be, err := Open(kernels.Options{Threads: threads})
			if err != nil {
				b.Fatal(err)
			}
			var ws [][3]int // weight index, rows, cols
			var ts []kernels.Tensor
			for range layers {
				for _, s := range [][2]int{{dim, dim}, {kv, dim}, {kv, dim}, {dim, dim}, {ffn, dim}, {ffn, dim}, {dim, ffn}} {
					w, _ := benchWeights(b, be, dt, s[0], s[1])
					ws = append(ws, [3]int{len(ts), s[0], s[1]})
					ts = append(ts, w)
				}
			}
			var one float64
			for _, n := range []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 16, 32, 64} {
				b.Run(fmt.Sprintf("%v/threads=%d/n=%d", dt, threads, n), func(b *testing.B) {
					xs := map[int]kernels.Tensor{dim: be.Alloc(n, dim), ffn: be.Alloc(n, ffn)}
					ds := map[int]kernels.Tensor{dim: be.Alloc(n, dim), kv: be.Alloc(n, kv), ffn: be.Alloc(n, ffn)}
					for k, x := range xs {
						be.Upload(x, randVec(rand.New(rand.NewPCG(1, uint64(k))), n*k))
					}
					pass := func() {
						for _, w := range ws {
							be.MatMul(ds[w[1]], xs[w[2]], ts[w[0]])
						}
					}
					var t float64
					if threads == 1 {
						t = loopThreadCPU(b, pass)
					} else {
						for b.Loop() {
							pass()
						}
						t = float64(b.Elapsed().Nanoseconds()) / float64(b.N)
					}
					if n == 1 {
						one = t
					}
					if one > 0 && t > 0 {
						b.ReportMetric(t/one, "x1row")
					}
				})
			}
			be.Close()
		}
	}
}

// BenchmarkX8RowsHot is the ×8 kernels' arithmetic alone: n activation
// rows, quantized beforehand, against 64 weight rows of the target's two
// widths, the weights in cache, per weight block and activation row (one
// thread, CPU time). Past a few rows this is what one more row of a
// verification costs, once the pass no longer waits for weights.
func BenchmarkX8RowsHot(b *testing.B) {
	defer useAsm(true)
	defer useX8Layout(useX8Layout(true))
	be, err := Open(kernels.Options{Threads: 1})
	if err != nil {
		b.Fatal(err)
	}
	defer be.Close()
	for _, dt := range []kernels.DType{kernels.Q8_0, kernels.Q4_0} {
		kern := dotQ8X8RowsN
		if dt == kernels.Q4_0 {
			kern = dotQ4X8RowsN
		}
		for _, k := range []int{1024, 2816} {
			const m = 64
			w, _ := benchWeights(b, be, dt, m, k)
			gw, nb := tensor(w, "bench").groupBytes(0, m), k/kernels.QK
			sums := blockSums8
			if tensor(w, "bench").x8b {
				kern, sums = dotQ8X8BRowsN, blockSumsB
			}
			for n := 1; n <= maxRowsN; n++ {
				b.Run(fmt.Sprintf("%v/%dx%d/n=%d", dt, m, k, n), func(b *testing.B) {
					x := randVec(rand.New(rand.NewPCG(1, 2)), n*k)
					xq, xd, xc := make([]int8, n*k), make([]float32, n*nb), make([]int32, n*nb)
					for r := range n {
						quantRowQ8(xq[r*k:(r+1)*k], xd[r*nb:(r+1)*nb], x[r*k:(r+1)*k])
						sums(xc[r*nb:(r+1)*nb], xq[r*k:(r+1)*k])
					}
					out := make([]float32, n*m)
					t := loopThreadCPU(b, func() { kern(gw, m, nb, n, xq, xd, xc, out, m) })
					b.ReportMetric(t/float64(m*nb*n), "ns/blockrow")
				})
			}
		}
	}
}

// loopThreadCPU runs f in b.Loop on one locked OS thread and reports that
// thread's CPU time per iteration (cpu-ns/op) where it can be read: on a
// shared host it measures a one-thread kernel better than the wall clock.
// It returns that time, or the wall time per iteration where the CPU time
// cannot be read.
func loopThreadCPU(b *testing.B, f func()) float64 {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	c0, ok := threadCPU()
	for b.Loop() {
		f()
	}
	if c1, _ := threadCPU(); ok {
		t := float64(c1-c0) / float64(b.N)
		b.ReportMetric(t, "cpu-ns/op")
		return t
	}
	return float64(b.Elapsed().Nanoseconds()) / float64(b.N)
}
