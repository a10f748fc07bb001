// Package kernelstest is the conformance suite every kernels.Backend must
// pass: each op is checked against plain-Go reference math (in float64)
// within a tolerance that allows for float32 rounding and, for quantized
// weights, for quantizing the activations to Q8_0 as llama.cpp does.
package kernelstest

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/specgate/specgate/kernels"
)

// Run checks every op of b. It does not close b.
func Run(t *testing.T, b kernels.Backend) {
	t.Run("Tensors", func(t *testing.T) { testTensors(t, b) })
	t.Run("Gather", func(t *testing.T) { testGather(t, b) })
	t.Run("MatMul", func(t *testing.T) { testMatMul(t, b) })
	t.Run("RMSNorm", func(t *testing.T) { testRMSNorm(t, b) })
	t.Run("Elementwise", func(t *testing.T) { testElementwise(t, b) })
	t.Run("RoPE", func(t *testing.T) { testRoPE(t, b) })
	t.Run("KVTypes", func(t *testing.T) { testKVTypes(t, b) })
	for _, dt := range KVTypes {
		if !kernels.SupportsKV(b, dt) {
			continue
		}
		t.Run(fmt.Sprintf("Attention/kv=%v", dt), func(t *testing.T) { testAttention(t, b, dt) })
		t.Run(fmt.Sprintf("CopyBlocks/kv=%v", dt), func(t *testing.T) { testCopyBlocks(t, b, dt) })
		t.Run(fmt.Sprintf("AttnVariants/kv=%v", dt), func(t *testing.T) { testAttnVariants(t, b, dt) })
	}
	t.Run("Variants", func(t *testing.T) { testVariants(t, b) })
	t.Run("Logits", func(t *testing.T) { testLogits(t, b) })
}

// KVTypes are the KV cache element types the suite knows; a backend is
// checked on those it lists (kernels.SupportsKV).
var KVTypes = []kernels.DType{kernels.F32, kernels.F16}

// RoundKV returns vals as a KV cache of type dt holds them: F16 rounds each
// to the nearest half, ties to even, as kernels.F32ToF16 does (and the
// hardware conversions, for every value but NaN payloads, which the suite
// does not store). The attention references then see exactly the cache's
// values, so F16 needs no wider tolerance than F32.
func RoundKV(dt kernels.DType, vals []float32) []float32 {
	if dt != kernels.F16 {
		return vals
	}
	out := make([]float32, len(vals))
	for i, v := range vals {
		out[i] = kernels.F16ToF32(kernels.F32ToF16(v))
	}
	return out
}

// testKVTypes checks that NewKV makes caches of the types the backend lists
// and refuses, with an error, the others.
func testKVTypes(t *testing.T, b kernels.Backend) {
	for _, dt := range []kernels.DType{kernels.F32, kernels.F16, kernels.BF16, kernels.Q8_0} {
		spec := kernels.KVSpec{Layers: 1, Blocks: 2, BlockSize: 4, Width: 32, DType: dt}
		c, err := b.NewKV(spec)
		switch {
		case kernels.SupportsKV(b, dt) && err != nil:
			t.Errorf("NewKV(%v): %v; the backend lists the type", dt, err)
		case kernels.SupportsKV(b, dt) && c.Spec() != spec:
			t.Errorf("NewKV(%v): cache spec %+v; want %+v", dt, c.Spec(), spec)
		case !kernels.SupportsKV(b, dt) && err == nil:
			t.Errorf("NewKV(%v) succeeded; the backend does not list the type", dt)
		}
	}
}

// WeightTypes are the stored types every backend reads.
var WeightTypes = kernels.BaseWeightTypes

// ExtraWeightTypes are the GGML quantizations a backend may compute with
// (kernels.WeightTyper); the suite checks those a backend lists. Their
// activations are quantized as llama.cpp does for each: Q8_0 or Q8_1 per
// 32 values, Q8_K per 256.
var ExtraWeightTypes = []kernels.DType{
	kernels.Q4_1, kernels.Q5_0, kernels.Q5_1, kernels.IQ4_NL,
	kernels.Q2_K, kernels.Q3_K, kernels.Q4_K, kernels.Q5_K, kernels.Q6_K, kernels.IQ4_XS,
}

// weightTypes returns the types b is checked on: WeightTypes, then the
// ExtraWeightTypes it lists.
func weightTypes(b kernels.Backend) []kernels.DType {
	out := slices.Clone(WeightTypes)
	for _, dt := range ExtraWeightTypes {
		if kernels.SupportsWeights(b, dt) {
			out = append(out, dt)
		}
	}
	return out
}

// testCols returns a row length of about n that is a whole number of dt's
// blocks.
func testCols(dt kernels.DType, n int) int {
	be := dt.BlockElems()
	return max(be, (n+be-1)/be*be)
}

func randFloats(r *rand.Rand, n int, scale float32) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = (r.Float32()*2 - 1) * scale
	}
	return out
}

// weights quantizes vals (rows × cols) to dt, wraps them, and returns the
// tensor with the values it really holds.
func weights(t *testing.T, b kernels.Backend, dt kernels.DType, rows, cols int, vals []float32) (kernels.Tensor, []float32) {
	t.Helper()
	data, err := kernels.Quantize(dt, vals)
	if err != nil {
		t.Fatal(err)
	}
	w, err := b.Weights(dt, rows, cols, data)
	if err != nil {
		t.Fatalf("Weights(%v, %d, %d): %v", dt, rows, cols, err)
	}
	deq := make([]float32, len(vals))
	if err := kernels.Dequantize(dt, data, deq); err != nil {
		t.Fatal(err)
	}
	return w, deq
}

func upload(b kernels.Backend, rows, cols int, vals []float32) kernels.Tensor {
	x := b.Alloc(rows, cols)
	b.Upload(x, vals)
	return x
}

func download(b kernels.Backend, x kernels.Tensor) []float32 {
	r, c := x.Dims()
	out := make([]float32, r*c)
	b.Download(out, x)
	return out
}

// near reports whether have is within tol of want.
func near(have float32, want, tol float64) bool {
	d := math.Abs(float64(have) - want)
	return d <= tol && !math.IsNaN(float64(have))
}

// check compares have with want element-wise, allowing abs + rel·|want|.
func check(t *testing.T, what string, have []float32, want []float64, abs, rel float64) {
	t.Helper()
	if len(have) != len(want) {
		t.Fatalf("%s: have %d values; want %d", what, len(have), len(want))
	}
	bad := 0
	for i := range have {
		if !near(have[i], want[i], abs+rel*math.Abs(want[i])) {
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

func testTensors(t *testing.T, b kernels.Backend) {
	r := rand.New(rand.NewPCG(1, 2))
	x := b.Alloc(3, 5)
	if dt := x.DType(); dt != kernels.F32 {
		t.Errorf("Alloc DType: have %v; want F32", dt)
	}
	if rows, cols := x.Dims(); rows != 3 || cols != 5 {
		t.Errorf("Alloc Dims: have %d×%d; want 3×5", rows, cols)
	}
	if got := download(b, x); slices.ContainsFunc(got, func(v float32) bool { return v != 0 }) {
		t.Errorf("Alloc: have %v; want zeros", got)
	}
	vals := randFloats(r, 15, 1)
	b.Upload(x, vals)
	if got := download(b, x); !slices.Equal(got, vals) {
		t.Errorf("Download after Upload: have %v; want %v", got, vals)
	}
	s := b.Slice(x, 1, 3)
	if rows, cols := s.Dims(); rows != 2 || cols != 5 {
		t.Errorf("Slice Dims: have %d×%d; want 2×5", rows, cols)
	}
	if got := download(b, s); !slices.Equal(got, vals[5:15]) {
		t.Errorf("Slice: have %v; want %v", got, vals[5:15])
	}
	b.Upload(s, make([]float32, 10))
	if got := download(b, x); !slices.Equal(got[:5], vals[:5]) || slices.ContainsFunc(got[5:], func(v float32) bool { return v != 0 }) {
		t.Errorf("write through Slice: have %v; want %v then zeros", got, vals[:5])
	}
	for _, dt := range weightTypes(b) {
		cols := testCols(dt, 64)
		rb, _ := dt.RowBytes(cols)
		if _, err := b.Weights(dt, 2, cols, make([]byte, 2*rb-1)); err == nil {
			t.Errorf("Weights(%v) with a short buffer: have nil error; want one", dt)
		}
		if _, err := b.Weights(dt, 2, cols, make([]byte, 2*rb+1)); err == nil {
			t.Errorf("Weights(%v) with a long buffer: have nil error; want one", dt)
		}
		if dt.BlockElems() > 1 {
			if _, err := b.Weights(dt, 1, dt.BlockElems()+1, make([]byte, 2*rb)); err == nil {
				t.Errorf("Weights(%v) with a partial block: have nil error; want one", dt)
			}
		}
		w, err := b.Weights(dt, 2, cols, make([]byte, 2*rb))
		if err != nil {
			t.Errorf("Weights(%v): %v", dt, err)
			continue
		}
		if w.DType() != dt {
			t.Errorf("Weights DType: have %v; want %v", w.DType(), dt)
		}
	}
	if _, err := b.Weights(kernels.Q8_0, 1, 33, make([]byte, 100)); err == nil {
		t.Errorf("Weights(Q8_0) with 33 columns: have nil error; want one")
	}
}

func testGather(t *testing.T, b kernels.Backend) {
	r := rand.New(rand.NewPCG(3, 4))
	const rows = 10
	for _, dt := range weightTypes(b) {
		cols := testCols(dt, 96)
		t.Run(dt.String(), func(t *testing.T) {
			w, deq := weights(t, b, dt, rows, cols, randFloats(r, rows*cols, 2))
			idx := []int32{3, 0, 9, 3}
			dst := b.Alloc(len(idx), cols)
			b.Gather(dst, w, idx)
			want := make([]float64, 0, len(idx)*cols)
			for _, i := range idx {
				for _, v := range deq[int(i)*cols : int(i+1)*cols] {
					want = append(want, float64(v))
				}
			}
			check(t, "Gather", download(b, dst), want, 0, 0)
		})
	}
}

// matmulTol bounds |backend − exact| for one output: float32 rounding of
// the sum, and for quantized weights the Q8_0 rounding of x, each value of
// which may move by half a step (amax/254) of its block, plus slack for a
// backend that keeps that block scale in F16.
func matmulTol(dt kernels.DType, w, x []float64) float64 {
	var mag, qerr float64
	bl := kernels.QK
	if dt.BlockElems() == kernels.QKK {
		bl = kernels.QKK // Q8_K activations
	}
	for blk := 0; blk < len(x); blk += bl {
		var amax float64
		end := min(len(x), blk+bl)
		for _, v := range x[blk:end] {
			amax = max(amax, math.Abs(v))
		}
		for i := blk; i < end; i++ {
			mag += math.Abs(w[i] * x[i])
			qerr += math.Abs(w[i]) * amax * (1.0/254 + 1.0/1024)
		}
	}
	switch {
	case dt == kernels.Q8_0 || dt == kernels.Q4_0 || slices.Contains(ExtraWeightTypes, dt):
		return qerr + 1e-5*mag + 1e-6
	case dt == kernels.F16 || dt == kernels.BF16:
		// Lets a device backend round x to half precision.
		return 1e-3*mag + 1e-6
	}
	return 2e-6*mag + 1e-6
}

func testMatMul(t *testing.T, b kernels.Backend) {
	r := rand.New(rand.NewPCG(5, 6))
	shapes := []struct{ n, k, m int }{
		{1, 32, 1}, {1, 64, 5}, {3, 96, 7}, {4, 128, 16}, {5, 256, 33},
		{8, 768, 24}, {9, 160, 70}, {33, 64, 9}, {1, 1024, 130}, {40, 288, 65},
		{2, 512, 3}, {37, 512, 41},
	}
	for _, dt := range weightTypes(b) {
		for _, s := range shapes {
			if s.k%dt.BlockElems() != 0 {
				continue
			}
			t.Run(fmt.Sprintf("%v/%dx%dx%d", dt, s.n, s.k, s.m), func(t *testing.T) {
				w, deq := weights(t, b, dt, s.m, s.k, randFloats(r, s.m*s.k, 1))
				xs := randFloats(r, s.n*s.k, 3)
				// A few blocks of zeros and of one value exercise the
				// quantizer's edge cases.
				if s.k >= 64 {
					clear(xs[:32])
					for i := 32; i < 64; i++ {
						xs[i] = -0.5
					}
				}
				x := upload(b, s.n, s.k, xs)
				dst := b.Alloc(s.n, s.m)
				b.MatMul(dst, x, w)
				have := download(b, dst)
				wrow, xrow := make([]float64, s.k), make([]float64, s.k)
				bad := 0
				for i := range s.n {
					for o := range s.m {
						var want float64
						for j := range s.k {
							wrow[j], xrow[j] = float64(deq[o*s.k+j]), float64(xs[i*s.k+j])
							want += wrow[j] * xrow[j]
						}
						tol := matmulTol(dt, wrow, xrow)
						if h := have[i*s.m+o]; !near(h, want, tol) {
							if bad < 5 {
								t.Errorf("dst[%d][%d]: have %g; want %g ± %g", i, o, h, want, tol)
							}
							bad++
						}
					}
				}
			})
		}
	}
	t.Run("BatchInvariant", func(t *testing.T) { testBatchInvariant(t, b, r) })
	t.Run("Slices", func(t *testing.T) {
		const n, m = 6, 10
		for _, dt := range weightTypes(b) {
			k := testCols(dt, 64)
			w, deq := weights(t, b, dt, m, k, randFloats(r, m*k, 1))
			xs := randFloats(r, n*k, 1)
			x := upload(b, n, k, xs)
			dst := b.Alloc(n, m)
			b.MatMul(b.Slice(dst, 2, 5), b.Slice(x, 1, 4), b.Slice(w, 0, m))
			full := b.Alloc(3, 4)
			b.MatMul(full, b.Slice(x, 1, 4), b.Slice(w, 6, 10))
			have, part := download(b, dst), download(b, full)
			for i := range 3 {
				for o := range m {
					var want float64
					wr, xr := make([]float64, k), make([]float64, k)
					for j := range k {
						wr[j], xr[j] = float64(deq[o*k+j]), float64(xs[(i+1)*k+j])
						want += wr[j] * xr[j]
					}
					tol := matmulTol(dt, wr, xr)
					if h := have[(i+2)*m+o]; !near(h, want, tol) {
						t.Errorf("%v sliced dst[%d][%d]: have %g; want %g", dt, i+2, o, h, want)
					}
					if o >= 6 && !near(part[i*4+o-6], want, tol) {
						t.Errorf("%v row-sliced w dst[%d][%d]: have %g; want %g", dt, i, o-6, part[i*4+o-6], want)
					}
				}
			}
			for _, i := range []int{0, 1, 5} {
				for o := range m {
					if h := have[i*m+o]; h != 0 {
						t.Errorf("%v: row %d outside the dst slice written: have %g; want 0", dt, i, h)
					}
				}
			}
		}
	})
}

// testBatchInvariant checks that MatMul gives a row exactly the bits it
// gets alone, whatever the batch around it, for the ExtraWeightTypes the
// backend lists: batch sizes that take every path (one row, a few, a tile
// and a ragged end).
func testBatchInvariant(t *testing.T, b kernels.Backend, r *rand.Rand) {
	for _, dt := range ExtraWeightTypes {
		if !kernels.SupportsWeights(b, dt) {
			continue
		}
		t.Run(dt.String(), func(t *testing.T) {
			const n, m = 37, 21
			k := testCols(dt, 512)
			w, _ := weights(t, b, dt, m, k, randFloats(r, m*k, 1))
			xs := randFloats(r, n*k, 2)
			x := upload(b, n, k, xs)
			all := b.Alloc(n, m)
			b.MatMul(all, x, w)
			batch := download(b, all)
			for _, size := range []int{1, 3, 8, 13} {
				for r0 := 0; r0 < n; r0 += size {
					r1 := min(n, r0+size)
					part := b.Alloc(r1-r0, m)
					b.MatMul(part, b.Slice(x, r0, r1), w)
					have := download(b, part)
					for i := range have {
						if math.Float32bits(have[i]) != math.Float32bits(batch[r0*m+i]) {
							t.Fatalf("batch of %d, row %d col %d: have %g; in the batch of %d %g", r1-r0, r0+i/m, i%m, have[i], n, batch[r0*m+i])
						}
					}
				}
			}
		})
	}
}

func testRMSNorm(t *testing.T, b kernels.Backend) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, tc := range []struct{ n, k int }{{1, 64}, {3, 768}, {17, 96}} {
		t.Run(fmt.Sprintf("%dx%d", tc.n, tc.k), func(t *testing.T) {
			xs := randFloats(r, tc.n*tc.k, 4)
			ws := randFloats(r, tc.k, 2)
			w, _ := weights(t, b, kernels.F32, 1, tc.k, ws)
			x := upload(b, tc.n, tc.k, xs)
			dst := b.Alloc(tc.n, tc.k)
			const eps = 1e-5
			b.RMSNorm(dst, x, w, eps)
			want := make([]float64, tc.n*tc.k)
			for i := range tc.n {
				var ss float64
				for _, v := range xs[i*tc.k : (i+1)*tc.k] {
					ss += float64(v) * float64(v)
				}
				s := 1 / math.Sqrt(ss/float64(tc.k)+eps)
				for j := range tc.k {
					want[i*tc.k+j] = float64(xs[i*tc.k+j]) * s * float64(ws[j])
				}
			}
			check(t, "RMSNorm", download(b, dst), want, 1e-6, 1e-5)
			b.RMSNorm(x, x, w, eps)
			check(t, "RMSNorm in place", download(b, x), want, 1e-6, 1e-5)
		})
	}
}

func testElementwise(t *testing.T, b kernels.Backend) {
	r := rand.New(rand.NewPCG(9, 10))
	const n, k = 5, 160
	as, bs := randFloats(r, n*k, 10), randFloats(r, n*k, 3)
	as[0], as[1] = 100, -100 // SiLU's saturated ends
	t.Run("Add", func(t *testing.T) {
		a, c := upload(b, n, k, as), upload(b, n, k, bs)
		want := make([]float64, n*k)
		for i := range want {
			want[i] = float64(as[i] + bs[i])
		}
		dst := b.Alloc(n, k)
		b.Add(dst, a, c)
		check(t, "Add", download(b, dst), want, 0, 0)
		b.Add(a, a, c)
		check(t, "Add into a", download(b, a), want, 0, 0)
	})
	t.Run("AddBias", func(t *testing.T) {
		x := upload(b, n, k, as)
		bias, _ := weights(t, b, kernels.F32, 1, k, bs[:k])
		b.AddBias(x, bias)
		want := make([]float64, n*k)
		for i := range want {
			want[i] = float64(as[i] + bs[i%k])
		}
		check(t, "AddBias", download(b, x), want, 0, 0)
	})
	t.Run("SwiGLU", func(t *testing.T) {
		g, u := upload(b, n, k, as), upload(b, n, k, bs)
		want := make([]float64, n*k)
		for i := range want {
			x := float64(as[i])
			want[i] = x / (1 + math.Exp(-x)) * float64(bs[i])
		}
		dst := b.Alloc(n, k)
		b.SwiGLU(dst, g, u)
		check(t, "SwiGLU", download(b, dst), want, 1e-6, 1e-5)
		b.SwiGLU(g, g, u)
		check(t, "SwiGLU into gate", download(b, g), want, 1e-6, 1e-5)
	})
}

// RefRoPE rotates one row of x (any number of heads) in place in float64,
// following kernels.RoPE's documented math.
func RefRoPE(x []float64, pos int32, p kernels.RoPE) {
	dims := p.Dims
	if dims == 0 {
		dims = p.HeadDim
	}
	base, scale := float64(p.Base), float64(p.Scale)
	if base == 0 {
		base = 10000
	}
	if scale == 0 {
		scale = 1
	}
	for h := 0; h < len(x); h += p.HeadDim {
		v := x[h : h+dims]
		for i := range dims / 2 {
			f := math.Pow(base, float64(2*i)/float64(dims))
			if p.Freqs != nil {
				f *= float64(p.Freqs[i])
			}
			th := float64(pos) / scale / f
			s, c := math.Sincos(th)
			a, b := 2*i, 2*i+1
			if p.NeoX {
				a, b = i, i+dims/2
			}
			v[a], v[b] = v[a]*c-v[b]*s, v[a]*s+v[b]*c
		}
	}
}

func testRoPE(t *testing.T, b kernels.Backend) {
	r := rand.New(rand.NewPCG(11, 12))
	freqs := make([]float32, 16)
	for i := range freqs {
		freqs[i] = 1 + float32(i)/4
	}
	cases := []struct {
		name  string
		heads int
		p     kernels.RoPE
	}{
		{"llama", 4, kernels.RoPE{HeadDim: 32}},
		{"neox", 4, kernels.RoPE{HeadDim: 32, NeoX: true}},
		{"base_scale", 2, kernels.RoPE{HeadDim: 64, Base: 500000, Scale: 4}},
		{"partial", 3, kernels.RoPE{HeadDim: 64, Dims: 32}},
		{"partial_neox", 3, kernels.RoPE{HeadDim: 64, Dims: 32, NeoX: true}},
		{"freqs", 2, kernels.RoPE{HeadDim: 32, Freqs: freqs}},
	}
	pos := []int32{0, 1, 7, 100, 4095}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			k := tc.heads * tc.p.HeadDim
			xs := randFloats(r, len(pos)*k, 2)
			x := upload(b, len(pos), k, xs)
			b.RoPE(x, pos, tc.p)
			want := make([]float64, len(xs))
			for i, v := range xs {
				want[i] = float64(v)
			}
			have := download(b, x)
			dims := tc.p.Dims
			if dims == 0 {
				dims = tc.p.HeadDim
			}
			for i, p := range pos {
				RefRoPE(want[i*k:(i+1)*k], p, tc.p)
				// A backend may form the angles as GGML does, position
				// times a float32 power taken again and again: each of
				// the dims/2 steps rounds once (a relative 2^-24 at
				// most), so an angle's error stays under
				// pos·(dims/2)·2^-24, and a rotated value of magnitude
				// about 2 moves by twice that.
				slack := float64(p) * float64(dims) / (1 << 24)
				check(t, fmt.Sprintf("RoPE pos %d", p), have[i*k:(i+1)*k], want[i*k:(i+1)*k], 2e-5+slack, 1e-5)
			}
		})
	}
}

// kvFixture is a cache filled through StoreKV, with a host copy of what each
// row's positions hold (rounded as the cache's type stores them).
type kvFixture struct {
	spec   kernels.KVSpec
	cache  kernels.KVCache
	rows   []kernels.AttnRow
	k, v   [][]float32 // per row: positions × Width
	blocks [][]int32
}

// fillKV builds a cache and, for each length in lens, a sequence whose
// blocks are scattered through it (not in order), storing random K and V at
// layer.
func fillKV(t *testing.T, b kernels.Backend, r *rand.Rand, spec kernels.KVSpec, layer int, lens []int) *kvFixture {
	t.Helper()
	c, err := b.NewKV(spec)
	if err != nil {
		t.Fatal(err)
	}
	f := &kvFixture{spec: spec, cache: c}
	free := r.Perm(spec.Blocks)
	for _, n := range lens {
		nb := (n + spec.BlockSize - 1) / spec.BlockSize
		if nb > len(free) {
			t.Fatalf("fixture needs %d more blocks", nb-len(free))
		}
		table := make([]int32, nb)
		for i := range table {
			table[i] = int32(free[i])
		}
		free = free[nb:]
		ks, vs := randFloats(r, n*spec.Width, 1), randFloats(r, n*spec.Width, 1)
		slots := make([]int32, n)
		for p := range slots {
			slots[p] = table[p/spec.BlockSize]*int32(spec.BlockSize) + int32(p%spec.BlockSize)
		}
		if n > 0 {
			b.StoreKV(c, layer, upload(b, n, spec.Width, ks), upload(b, n, spec.Width, vs), slots)
		}
		ks, vs = RoundKV(spec.DType, ks), RoundKV(spec.DType, vs)
		f.rows = append(f.rows, kernels.AttnRow{Table: table, Len: int32(n)})
		f.k, f.v, f.blocks = append(f.k, ks), append(f.v, vs), append(f.blocks, table)
	}
	return f
}

// RefAttention is the reference math for one query row: q is Heads×HeadDim,
// k and v are positions × (KVHeads×HeadDim); it returns Heads×HeadDim.
func RefAttention(q, k, v []float32, n int, a kernels.Attn) []float64 {
	scale := float64(a.Scale)
	if scale == 0 {
		scale = 1 / math.Sqrt(float64(a.HeadDim))
	}
	hd, w := a.HeadDim, a.KVHeads*a.HeadDim
	out := make([]float64, a.Heads*hd)
	s := make([]float64, n)
	lo := 0 // the first position in the sliding window
	if a.Window > 0 {
		lo = max(0, n-int(a.Window))
	}
	for h := range a.Heads {
		kh := h / (a.Heads / a.KVHeads)
		mx := math.Inf(-1)
		for p := lo; p < n; p++ {
			var d float64
			for i := range hd {
				d += float64(q[h*hd+i]) * float64(k[p*w+kh*hd+i])
			}
			s[p] = d * scale
			if c := float64(a.SoftCap); c > 0 {
				s[p] = c * math.Tanh(s[p]/c)
			}
			mx = max(mx, s[p])
		}
		var sum float64
		for p := lo; p < n; p++ {
			s[p] = math.Exp(s[p] - mx)
			sum += s[p]
		}
		for p := lo; p < n; p++ {
			for i := range hd {
				out[h*hd+i] += s[p] / sum * float64(v[p*w+kh*hd+i])
			}
		}
	}
	return out
}

func testAttention(t *testing.T, b kernels.Backend, dt kernels.DType) {
	r := rand.New(rand.NewPCG(13, 14))
	cases := []struct {
		name                   string
		heads, kvHeads, hd, bs int
		lens                   []int
		scale, qscale          float32
	}{
		{"mha", 4, 4, 16, 4, []int{1, 5, 8, 13}, 0, 1},
		{"gqa", 8, 2, 32, 16, []int{1, 17, 100, 33}, 0, 1},
		{"mqa_scale", 4, 1, 64, 8, []int{9, 64}, 0.3, 1},
		{"long", 2, 1, 64, 16, []int{2500}, 0, 1},
		{"peaked", 2, 2, 32, 16, []int{40, 3}, 0, 200},
		// Rows long enough that a backend may split them into parts and
		// merge their softmaxes, next to short ones, with peaked scores so
		// the parts' maxima differ widely.
		{"long_mixed_peaked", 4, 2, 32, 4, []int{700, 3, 257, 256, 1029}, 0, 50},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			blocks := 0
			for _, n := range tc.lens {
				blocks += (n+tc.bs-1)/tc.bs + 1
			}
			spec := kernels.KVSpec{Layers: 2, Blocks: blocks, BlockSize: tc.bs, Width: tc.kvHeads * tc.hd, DType: dt}
			f := fillKV(t, b, r, spec, 1, tc.lens)
			a := kernels.Attn{Heads: tc.heads, KVHeads: tc.kvHeads, HeadDim: tc.hd, Scale: tc.scale, Rows: f.rows}
			qw := tc.heads * tc.hd
			qs := randFloats(r, len(tc.lens)*qw, tc.qscale)
			q := upload(b, len(tc.lens), qw, qs)
			dst := b.Alloc(len(tc.lens), qw)
			b.Attention(dst, q, f.cache, 1, a)
			want := make([]float64, 0, len(qs))
			for i, n := range tc.lens {
				want = append(want, RefAttention(qs[i*qw:(i+1)*qw], f.k[i], f.v[i], n, a)...)
			}
			have := download(b, dst)
			check(t, "Attention", have, want, 2e-5, 1e-4)
			// Fewer positions than stored: the causal rows of a prefill.
			short := a
			short.Rows = slices.Clone(a.Rows)
			want = want[:0]
			for i, n := range tc.lens {
				m := max(1, n/2)
				short.Rows[i].Len = int32(m)
				want = append(want, RefAttention(qs[i*qw:(i+1)*qw], f.k[i], f.v[i], m, a)...)
			}
			b.Attention(dst, q, f.cache, 1, short)
			check(t, "Attention over a prefix", download(b, dst), want, 2e-5, 1e-4)
		})
	}
}

func testCopyBlocks(t *testing.T, b kernels.Backend, dt kernels.DType) {
	r := rand.New(rand.NewPCG(15, 16))
	spec := kernels.KVSpec{Layers: 2, Blocks: 6, BlockSize: 4, Width: 32, DType: dt}
	src := fillKV(t, b, r, spec, 0, []int{11})
	// Layer 1 gets its own values so both layers are checked.
	layer1 := randFloats(r, 11*spec.Width, 1)
	slots := make([]int32, 11)
	for p := range slots {
		slots[p] = src.blocks[0][p/4]*4 + int32(p%4)
	}
	x1 := upload(b, 11, spec.Width, layer1)
	b.StoreKV(src.cache, 1, x1, x1, slots)
	layer1 = RoundKV(dt, layer1)

	dspec := spec
	dspec.Blocks = 5
	dst, err := b.NewKV(dspec)
	if err != nil {
		t.Fatal(err)
	}
	table := []int32{4, 0, 2}
	moves := make([]kernels.BlockCopy, len(table))
	for i, blk := range src.blocks[0] {
		moves[i] = kernels.BlockCopy{Src: blk, Dst: table[i]}
	}
	b.CopyBlocks(dst, src.cache, moves)

	a := kernels.Attn{Heads: 2, KVHeads: 2, HeadDim: 16}
	qs := randFloats(r, 32, 1)
	q := upload(b, 1, 32, qs)
	for layer, kv := range [][2][]float32{{src.k[0], src.v[0]}, {layer1, layer1}} {
		out := b.Alloc(1, 32)
		a.Rows = []kernels.AttnRow{{Table: table, Len: 11}}
		b.Attention(out, q, dst, layer, a)
		want := RefAttention(qs, kv[0], kv[1], 11, a)
		check(t, fmt.Sprintf("Attention over copied blocks, layer %d", layer), download(b, out), want, 2e-5, 1e-4)
	}
	// A copy within one cache.
	b.CopyBlocks(dst, dst, []kernels.BlockCopy{{Src: 4, Dst: 1}})
	out := b.Alloc(1, 32)
	a.Rows = []kernels.AttnRow{{Table: []int32{1, 0, 2}, Len: 11}}
	b.Attention(out, q, dst, 0, a)
	check(t, "Attention after an in-cache copy", download(b, out), RefAttention(qs, src.k[0], src.v[0], 11, a), 2e-5, 1e-4)
}

// testAttnVariants checks soft-capped and sliding-window attention (Gemma
// 2) against the reference, and that a row's result is the same alone as
// in a batch.
func testAttnVariants(t *testing.T, b kernels.Backend, dt kernels.DType) {
	probe := kernels.Attn{SoftCap: 1, Window: 1}
	if !kernels.SupportsAttn(b, probe) {
		t.Skipf("%s does not compute soft-capped or sliding-window attention", b.Name())
	}
	r := rand.New(rand.NewPCG(21, 22))
	lens := []int{1, 5, 16, 17, 40, 300, 700}
	const heads, kvHeads, hd, bs = 4, 1, 32, 8
	blocks := 0
	for _, n := range lens {
		blocks += (n+bs-1)/bs + 1
	}
	spec := kernels.KVSpec{Layers: 1, Blocks: blocks, BlockSize: bs, Width: kvHeads * hd, DType: dt}
	f := fillKV(t, b, r, spec, 0, lens)
	qw := heads * hd
	qs := randFloats(r, len(lens)*qw, 40) // scores well past the cap
	q := upload(b, len(lens), qw, qs)
	for _, v := range []struct {
		name   string
		cap    float32
		window int32
	}{{"softcap", 50, 0}, {"window", 0, 16}, {"both", 30, 16}, {"wide_window", 0, 400}} {
		t.Run(v.name, func(t *testing.T) {
			a := kernels.Attn{Heads: heads, KVHeads: kvHeads, HeadDim: hd, SoftCap: v.cap, Window: v.window, Rows: f.rows}
			dst := b.Alloc(len(lens), qw)
			b.Attention(dst, q, f.cache, 0, a)
			have := download(b, dst)
			var want []float64
			for i, n := range lens {
				want = append(want, RefAttention(qs[i*qw:(i+1)*qw], f.k[i], f.v[i], n, a)...)
			}
			check(t, "Attention", have, want, 2e-5, 1e-4)
			for i := range lens {
				one := a
				one.Rows = a.Rows[i : i+1]
				d1 := b.Alloc(1, qw)
				b.Attention(d1, b.Slice(q, i, i+1), f.cache, 0, one)
				if alone := download(b, d1); !slices.Equal(alone, have[i*qw:(i+1)*qw]) {
					t.Fatalf("row %d (length %d): alone differs from in the batch", i, lens[i])
				}
			}
		})
	}
}

// testVariants checks the optional element-wise ops through the kernels
// functions that call them (the host fallback where a backend lacks one)
// against their references, exactly: they are defined in float32.
func testVariants(t *testing.T, b kernels.Backend) {
	r := rand.New(rand.NewPCG(23, 24))
	const rows, cols = 5, 96
	g, u := randFloats(r, rows*cols, 12), randFloats(r, rows*cols, 2)
	g[0], g[1], g[2], g[3] = -10, 10, -10.5, 11
	for _, op := range []struct {
		name string
		dev  func(x, y kernels.Tensor)
		ref  func(x, y []float32)
	}{
		{"Scale", func(x, _ kernels.Tensor) { kernels.Scale(b, x, 16) }, func(x, _ []float32) { kernels.ScaleRef(x, 16) }},
		{"SoftCap", func(x, _ kernels.Tensor) { kernels.SoftCap(b, x, 3) }, func(x, _ []float32) { kernels.SoftCapRef(x, 3) }},
		{"GeGLU", func(x, y kernels.Tensor) { kernels.GeGLU(b, x, x, y) }, func(x, y []float32) { kernels.GeGLURef(x, x, y) }},
	} {
		t.Run(op.name, func(t *testing.T) {
			x := upload(b, rows, cols, g)
			op.dev(x, upload(b, rows, cols, u))
			want := slices.Clone(g)
			op.ref(want, u)
			if have := download(b, x); !slices.Equal(have, want) {
				t.Fatalf("have %v; want %v", have[:8], want[:8])
			}
			one := upload(b, 1, cols, g[2*cols:3*cols])
			op.dev(one, upload(b, 1, cols, u[2*cols:3*cols]))
			if have := download(b, one); !slices.Equal(have, want[2*cols:3*cols]) {
				t.Fatalf("row 2 alone differs from in the batch")
			}
		})
	}
}
