//go:build cuda

package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"unsafe"

	"github.com/specgate/specgate/engine/model"
	_ "github.com/specgate/specgate/engine/model/llama"
	"github.com/specgate/specgate/internal/testmodels"
	"github.com/specgate/specgate/kernels"
	"github.com/specgate/specgate/kernels/cpu"
	"github.com/specgate/specgate/kernels/kernelstest"
	"github.com/specgate/specgate/kernels/sample"
)

func open(tb testing.TB) *Backend {
	tb.Helper()
	b, err := Open(kernels.Options{})
	if err != nil {
		tb.Fatalf("Open: %v", err)
	}
	tb.Cleanup(func() { b.Close() })
	return b
}

func openCPU(tb testing.TB) kernels.Backend {
	tb.Helper()
	b, err := cpu.Open(kernels.Options{Threads: 4})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { b.Close() })
	return b
}

func TestConformance(t *testing.T) {
	b := open(t)
	t.Logf("device: %s, sm_%d", b.DeviceName(), b.ComputeCapability())
	kernelstest.Run(t, b)
}

func randFloats(r *rand.Rand, n int, scale float32) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = (r.Float32()*2 - 1) * scale
	}
	return out
}

func upload(b kernels.Backend, rows, cols int, v []float32) kernels.Tensor {
	t := b.Alloc(rows, cols)
	b.Upload(t, v)
	return t
}

func download(b kernels.Backend, t kernels.Tensor) []float32 {
	r, c := t.Dims()
	out := make([]float32, r*c)
	b.Download(out, t)
	return out
}

func checkNear(t *testing.T, what string, have []float32, want []float64, abs, rel float64) {
	t.Helper()
	bad := 0
	for i := range have {
		if d := math.Abs(float64(have[i]) - want[i]); !(d <= abs+rel*math.Abs(want[i])) {
			if bad < 5 {
				t.Errorf("%s[%d]: have %g; want %g", what, i, have[i], want[i])
			}
			bad++
		}
	}
	if bad > 5 {
		t.Errorf("%s: %d of %d values wrong", what, bad, len(have))
	}
}

// kvOnBoth fills the same random cache on the device and keeps a host copy
// (slot-major, one layer) for the reference math.
func kvOnBoth(t *testing.T, b *Backend, r *rand.Rand, spec kernels.KVSpec, layer int) (kernels.KVCache, []float32, []float32) {
	c, err := b.NewKV(spec)
	if err != nil {
		t.Fatal(err)
	}
	n := spec.Blocks * spec.BlockSize
	k, v := randFloats(r, n*spec.Width, 1), randFloats(r, n*spec.Width, 1)
	slots := make([]int32, n)
	for i := range slots {
		slots[i] = int32(i)
	}
	b.StoreKV(c, layer, upload(b, n, spec.Width, k), upload(b, n, spec.Width, v), slots)
	return c, k, v
}

func TestTreeAttention(t *testing.T) {
	b := open(t)
	r := rand.New(rand.NewPCG(1, 2))
	spec := kernels.KVSpec{Layers: 2, Blocks: 40, BlockSize: 16, Width: 2 * 64}
	c, k, v := kvOnBoth(t, b, r, spec, 1)
	a := kernels.Attn{Heads: 8, KVHeads: 2, HeadDim: 64}
	// Four tree rows of one sequence (prefix 37) plus a plain row and an
	// empty one; tree slots live in blocks 30.. .
	table := []int32{5, 9, 2, 17, 3}
	tree := kernels.TreeMask{Rows: []kernels.TreeRow{
		{Prefix: 37, Slots: []int32{480}},
		{Prefix: 37, Slots: []int32{480, 481}},
		{Prefix: 37, Slots: []int32{480, 482}},
		{Prefix: 37, Slots: []int32{480, 482, 483}},
		{Prefix: 70},
		{},
		{Prefix: 0, Slots: []int32{500, 501}},
	}}
	for range tree.Rows {
		a.Rows = append(a.Rows, kernels.AttnRow{Table: table})
	}
	qw := a.Heads * a.HeadDim
	qs := randFloats(r, len(a.Rows)*qw, 1)
	q := upload(b, len(a.Rows), qw, qs)
	dst := b.Alloc(len(a.Rows), qw)
	b.TreeAttention(dst, q, c, 1, a, tree)
	want := kernels.TreeAttentionRef(qs, k, v, spec.BlockSize, a, tree)
	checkNear(t, "TreeAttention", download(b, dst), want, 2e-5, 1e-4)
	// In place.
	b.TreeAttention(q, q, c, 1, a, tree)
	checkNear(t, "TreeAttention in place", download(b, q), want, 2e-5, 1e-4)
}

func TestCopySlots(t *testing.T) {
	b := open(t)
	r := rand.New(rand.NewPCG(3, 4))
	spec := kernels.KVSpec{Layers: 3, Blocks: 4, BlockSize: 8, Width: 32}
	c, err := b.NewKV(spec)
	if err != nil {
		t.Fatal(err)
	}
	n := spec.Blocks * spec.BlockSize
	ks, vs := make([][]float32, spec.Layers), make([][]float32, spec.Layers)
	slots := make([]int32, n)
	for i := range slots {
		slots[i] = int32(i)
	}
	for l := range spec.Layers {
		ks[l], vs[l] = randFloats(r, n*spec.Width, 1), randFloats(r, n*spec.Width, 1)
		b.StoreKV(c, l, upload(b, n, spec.Width, ks[l]), upload(b, n, spec.Width, vs[l]), slots)
	}
	moves := []kernels.SlotCopy{{Src: 20, Dst: 3}, {Src: 3, Dst: 4}, {Src: 31, Dst: 20}}
	b.CopySlots(c, moves)
	kernels.CopySlotsRef(ks, vs, spec.Width, moves)
	// Read back through attention with one-hot queries would be indirect;
	// copy the cache into a host cache and compare the bytes.
	h, err := b.NewHostKV(spec)
	if err != nil {
		t.Fatal(err)
	}
	all := make([]kernels.BlockCopy, spec.Blocks)
	for i := range all {
		all[i] = kernels.BlockCopy{Src: int32(i), Dst: int32(i)}
	}
	b.CopyBlocks(h, c, all)
	b.Download(make([]float32, 1), b.Alloc(1, 1)) // wait
	host := hostFloats(h)
	sec := n * spec.Width
	for l := range spec.Layers {
		if !slices.Equal(host[2*l*sec:(2*l+1)*sec], ks[l]) {
			t.Errorf("layer %d K differs after CopySlots", l)
		}
		if !slices.Equal(host[(2*l+1)*sec:(2*l+2)*sec], vs[l]) {
			t.Errorf("layer %d V differs after CopySlots", l)
		}
	}
}

func hostFloats(c *KV) []float32 {
	n := 2 * c.spec.Layers * c.sectionFloats()
	return unsafeFloats(c.host, n)
}

func unsafeFloats(p unsafe.Pointer, n int) []float32 { return unsafe.Slice((*float32)(p), n) }

func TestHostTier(t *testing.T) {
	b := open(t)
	r := rand.New(rand.NewPCG(5, 6))
	spec := kernels.KVSpec{Layers: 2, Blocks: 6, BlockSize: 4, Width: 32}
	dev, k, v := kvOnBoth(t, b, r, spec, 0)
	hspec := spec
	hspec.Blocks = 8
	h, err := b.NewHostKV(hspec)
	if err != nil {
		t.Fatal(err)
	}
	// Demote blocks 1,2,3 to host 5,6,7, then promote them back to 0,4,5
	// of a fresh device cache, and attend over them.
	b.CopyBlocks(h, dev, []kernels.BlockCopy{{Src: 1, Dst: 5}, {Src: 2, Dst: 6}, {Src: 3, Dst: 7}})
	dev2, err := b.NewKV(spec)
	if err != nil {
		t.Fatal(err)
	}
	b.CopyBlocks(dev2, h, []kernels.BlockCopy{{Src: 5, Dst: 0}, {Src: 6, Dst: 4}, {Src: 7, Dst: 5}})
	a := kernels.Attn{Heads: 2, KVHeads: 2, HeadDim: 16, Rows: []kernels.AttnRow{{Table: []int32{0, 4, 5}, Len: 11}}}
	qs := randFloats(r, 32, 1)
	out := b.Alloc(1, 32)
	b.Attention(out, upload(b, 1, 32, qs), dev2, 0, a)
	w := spec.Width
	want := kernelstest.RefAttention(qs, k[4*w:], v[4*w:], 11, a)
	checkNear(t, "attention over promoted blocks", download(b, out), want, 2e-5, 1e-4)
	// Attention straight over the host cache (mapped memory).
	a.Rows = []kernels.AttnRow{{Table: []int32{5, 6, 7}, Len: 12}}
	b.Attention(out, upload(b, 1, 32, qs), h, 0, a)
	want = kernelstest.RefAttention(qs, k[4*w:], v[4*w:], 12, a)
	checkNear(t, "attention over the host cache", download(b, out), want, 2e-5, 1e-4)
}

func TestMaskLogits(t *testing.T) {
	b := open(t)
	r := rand.New(rand.NewPCG(7, 8))
	const rows, vocab = 3, 1000
	ls := randFloats(r, rows*vocab, 5)
	lt := upload(b, rows, vocab, ls)
	masks := [][]uint64{make([]uint64, 16), make([]uint64, 3), {}}
	for i := range masks[0] {
		masks[0][i] = r.Uint64()
	}
	masks[1][1] = 1 << 5
	b.MaskLogits(lt, []int{2, 0, 1}, masks)
	want := slices.Clone(ls)
	kernels.MaskLogitsRef(want[2*vocab:3*vocab], masks[0])
	kernels.MaskLogitsRef(want[0:vocab], masks[1])
	kernels.MaskLogitsRef(want[vocab:2*vocab], masks[2])
	if have := download(b, lt); !slices.Equal(have, want) {
		t.Errorf("MaskLogits differs from MaskLogitsRef")
	}
}

func TestSample(t *testing.T) {
	b := open(t)
	r := rand.New(rand.NewPCG(9, 10))
	const vocab = 5000
	cases := []sample.Params{
		{},
		{Temperature: 0.8},
		{Temperature: 1, TopK: 40},
		{Temperature: 1.2, TopP: 0.9},
		{Temperature: 0.7, TopK: 100, TopP: 0.5, MinP: 0.05},
		{Temperature: 1, TopK: 1},
		{Temperature: 1, MinP: 0.2},
	}
	ls := randFloats(r, len(cases)*vocab, 4)
	ls[3] = float32(math.Inf(-1))
	lt := upload(b, len(cases), vocab, ls)
	rows := make([]int, len(cases))
	for i := range rows {
		rows[i] = i
	}
	for trial := range 20 {
		ps := make([]SampleParams, len(cases))
		want := make([]int32, len(cases))
		for i, p := range cases {
			u := r.Float64()
			ps[i] = SampleParams{Temperature: p.Temperature, TopK: p.TopK, TopP: p.TopP, MinP: p.MinP, U: u}
			probs := make([]float32, vocab)
			sample.New(p).Probs(ls[i*vocab:(i+1)*vocab], nil, probs)
			want[i] = draw(probs, u)
		}
		have := make([]int32, len(cases))
		b.Sample(have, lt, rows, ps)
		for i := range cases {
			if have[i] != want[i] {
				t.Errorf("trial %d, %+v: have token %d; want %d", trial, cases[i], have[i], want[i])
			}
		}
	}
	am := make([]int32, len(cases))
	b.Argmax(am, lt, rows)
	for i := range cases {
		if w := sample.Argmax(ls[i*vocab : (i+1)*vocab]); am[i] != w {
			t.Errorf("Argmax row %d: have %d; want %d", i, am[i], w)
		}
	}
}

// draw is sample.Sampler.Draw with the uniform given.
func draw(probs []float32, u float64) int32 {
	var total float64
	last := -1
	for i, p := range probs {
		if p > 0 {
			total += float64(p)
			last = i
		}
	}
	if last < 0 {
		return 0
	}
	target, cum := u*total, 0.0
	for i, p := range probs {
		if p > 0 {
			cum += float64(p)
			if cum > target {
				return int32(i)
			}
		}
	}
	return int32(last)
}

func TestGraph(t *testing.T) {
	b := open(t)
	r := rand.New(rand.NewPCG(11, 12))
	const n, k, m = 4, 256, 96
	w, err := b.Weights(kernels.F32, m, k, mustQuantize(t, kernels.F32, randFloats(r, m*k, 1)))
	if err != nil {
		t.Fatal(err)
	}
	x, y := b.Alloc(n, k), b.Alloc(n, m)
	var in []float32
	step := func() {
		b.Upload(x, in)
		b.MatMul(y, x, w)
		b.SwiGLU(y, y, y)
	}
	plain := func() []float32 {
		step()
		return download(b, y)
	}
	in = randFloats(r, n*k, 1)
	plain() // sizes scratch
	g, err := b.Capture(step)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	for i := range 3 {
		in = randFloats(r, n*k, 1)
		want := plain()
		if err := g.Replay(step); err != nil {
			t.Fatal(err)
		}
		if have := download(b, y); !slices.Equal(have, want) {
			t.Errorf("replay %d differs from the plain step", i)
		}
	}
	if err := g.Replay(func() { b.Upload(x, in); b.MatMul(y, x, w) }); err != ErrGraphMismatch {
		t.Errorf("Replay of another step: have %v; want ErrGraphMismatch", err)
	}
}

func mustQuantize(t testing.TB, dt kernels.DType, v []float32) []byte {
	data, err := kernels.Quantize(dt, v)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestGreedyMatchesCPU generates greedily on stories260K (each stored
// type) with both backends: the token ids must be the same.
func TestGreedyMatchesCPU(t *testing.T) {
	for _, name := range []string{testmodels.Stories260K, testmodels.Stories260KQ8_0, testmodels.Stories260KQ4_0} {
		t.Run(name, func(t *testing.T) {
			path := testmodels.Path(t, name)
			want := greedy(t, openCPU(t), path, 48)
			have := greedy(t, open(t), path, 48)
			if !slices.Equal(have, want) {
				t.Errorf("cuda greedy:\n have %v\n want %v (cpu)", have, want)
			}
		})
	}
}

func greedy(t *testing.T, be kernels.Backend, path string, n int) []int32 {
	t.Helper()
	m, err := model.Load(path, be)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	in := m.Tokenizer().Encode("Once upon a time")
	seqs, err := model.NewSequences(m, 1, len(in)+n+1)
	if err != nil {
		t.Fatal(err)
	}
	logits, err := seqs.Step([][]int32{in})
	if err != nil {
		t.Fatal(err)
	}
	var out []int32
	for range n {
		next := sample.Argmax(logits)
		out = append(out, next)
		if logits, err = seqs.Step([][]int32{{next}}); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// Kernel benchmarks: bytes are what the op must read or write at least, so
// the MB/s column is achieved bandwidth against the HBM floor.

func BenchmarkMatMul(bm *testing.B) {
	b := open(bm)
	r := rand.New(rand.NewPCG(1, 1))
	for _, dt := range []kernels.DType{kernels.BF16, kernels.F16, kernels.Q8_0, kernels.Q4_0} {
		for _, s := range []struct{ m, k int }{{2048, 2048}, {8192, 2048}, {2048, 8192}} {
			w, err := b.Weights(dt, s.m, s.k, mustQuantize(bm, dt, randFloats(r, s.m*s.k, 1)))
			if err != nil {
				bm.Fatal(err)
			}
			rb, _ := dt.RowBytes(s.k)
			for _, n := range []int{1, 32} {
				bm.Run(fmt.Sprintf("%v/%dx%d/n%d", dt, s.m, s.k, n), func(bm *testing.B) {
					x, y := upload(b, n, s.k, randFloats(r, n*s.k, 1)), b.Alloc(n, s.m)
					bm.SetBytes(int64(s.m * rb))
					b.MatMul(y, x, w)
					b.Download(make([]float32, n*s.m), y)
					bm.ResetTimer()
					for range bm.N {
						b.MatMul(y, x, w)
					}
					b.Download(make([]float32, n*s.m), y)
				})
			}
		}
	}
}

func BenchmarkAttention(bm *testing.B) {
	b := open(bm)
	r := rand.New(rand.NewPCG(2, 2))
	const heads, kvHeads, hd, bs = 32, 8, 64, 16
	for _, rows := range []int{1, 32} {
		for _, ctx := range []int{512, 4096} {
			bm.Run(fmt.Sprintf("rows%d/ctx%d", rows, ctx), func(bm *testing.B) {
				per := ctx / bs
				spec := kernels.KVSpec{Layers: 1, Blocks: rows * per, BlockSize: bs, Width: kvHeads * hd}
				c, err := b.NewKV(spec)
				if err != nil {
					bm.Fatal(err)
				}
				a := kernels.Attn{Heads: heads, KVHeads: kvHeads, HeadDim: hd}
				for i := range rows {
					table := make([]int32, per)
					for j := range table {
						table[j] = int32(i*per + j)
					}
					a.Rows = append(a.Rows, kernels.AttnRow{Table: table, Len: int32(ctx)})
				}
				q := upload(b, rows, heads*hd, randFloats(r, rows*heads*hd, 1))
				out := b.Alloc(rows, heads*hd)
				bm.SetBytes(int64(rows * ctx * spec.Width * 4 * 2))
				b.Attention(out, q, c, 0, a)
				b.Download(make([]float32, rows*heads*hd), out)
				bm.ResetTimer()
				for range bm.N {
					b.Attention(out, q, c, 0, a)
				}
				b.Download(make([]float32, rows*heads*hd), out)
			})
		}
	}
}

func BenchmarkRowOps(bm *testing.B) {
	b := open(bm)
	r := rand.New(rand.NewPCG(3, 3))
	const rows, dim, ffn = 32, 2048, 8192
	x := upload(b, rows, dim, randFloats(r, rows*dim, 1))
	wn, _ := b.Weights(kernels.F32, 1, dim, mustQuantize(bm, kernels.F32, randFloats(r, dim, 1)))
	g, u := upload(b, rows, ffn, randFloats(r, rows*ffn, 1)), upload(b, rows, ffn, randFloats(r, rows*ffn, 1))
	pos := make([]int32, rows)
	ops := []struct {
		name  string
		bytes int
		run   func()
	}{
		{"RMSNorm", 2 * rows * dim * 4, func() { b.RMSNorm(x, x, wn, 1e-5) }},
		{"SwiGLU", 3 * rows * ffn * 4, func() { b.SwiGLU(g, g, u) }},
		{"RoPE", 2 * rows * dim * 4, func() { b.RoPE(x, pos, kernels.RoPE{HeadDim: 64}) }},
		{"Add", 3 * rows * dim * 4, func() { b.Add(x, x, x) }},
	}
	for _, op := range ops {
		bm.Run(op.name, func(bm *testing.B) {
			bm.SetBytes(int64(op.bytes))
			op.run()
			b.Download(make([]float32, rows*dim), x)
			bm.ResetTimer()
			for range bm.N {
				op.run()
			}
			b.Download(make([]float32, rows*dim), x)
		})
	}
}
