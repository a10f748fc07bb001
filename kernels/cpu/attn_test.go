package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/specgate/specgate/kernels"
)

// f16Specials are float32 bit patterns around the edges of half precision:
// zeros, the largest half and the overflow threshold (65520 rounds to
// Inf), the smallest normal and subnormal halves and the ties around them,
// float32 subnormals, infinities and NaNs with payloads (quiet and
// signalling).
var f16Specials = []uint32{
	0x00000000, 0x80000000, 0x3f800000, 0xbf800000,
	0x477fe000, 0x477fefff, 0x477ff000, 0x477ff001, 0x7f7fffff, 0xff7fffff,
	0x38800000, 0x387fffff, 0x387fe000, 0x387ff000, // around 2^-14
	0x33800000, 0x33000000, 0x33000001, 0x32ffffff, 0x33c00000, // around 2^-24
	0x00000001, 0x807fffff, // float32 subnormals
	0x7f800000, 0xff800000,
	0x7fc00000, 0xffc00000, 0x7fc12345, 0x7f800001, 0xff812345, 0x7fbfffff,
	0x3f801000, 0x3f803000, 0x3f801001, 0x3f802fff, // ties to even in the mantissa
}

func TestF32ToF16(t *testing.T) {
	for _, b := range f16Specials {
		f := math.Float32frombits(b)
		h := f32ToF16(f)
		if f != f {
			if h&0x7c00 != 0x7c00 || h&0x3ff == 0 || h>>15 != uint16(b>>31) {
				t.Errorf("f32ToF16(%#08x) = %#04x; want a NaN of the same sign", b, h)
			}
			continue
		}
		if want := kernels.F32ToF16(f); h != want {
			t.Errorf("f32ToF16(%#08x) = %#04x; want %#04x", b, h, want)
		}
	}
}

// TestF32ToF16Asm checks VCVTPS2PH against the Go conversion bit for bit on
// every sign, exponent and top mantissa bits (the upper 16 bits of the
// float) combined with low bits that decide rounding, and on the specials.
func TestF32ToF16Asm(t *testing.T) {
	asmKernels(t)
	r := rand.New(rand.NewPCG(31, 32))
	lows := []uint32{0, 1, 0x0fff, 0x1000, 0x1001, 0x1fff, 0x2000, 0x7fff, 0x8000, 0x8001, 0xffff}
	var src []float32
	for hi := range uint32(1 << 16) {
		for _, lo := range lows {
			src = append(src, math.Float32frombits(hi<<16|lo))
		}
		src = append(src, math.Float32frombits(hi<<16|r.Uint32()&0xffff))
	}
	for _, b := range f16Specials {
		src = append(src, math.Float32frombits(b))
	}
	have, want := make([]uint16, len(src)), make([]uint16, len(src))
	f32ToF16Row(have, src)
	f32ToF16RowGo(want, src)
	bad := 0
	for i := range have {
		if have[i] != want[i] {
			if bad++; bad <= 10 {
				t.Errorf("%#08x: asm %#04x; go %#04x", math.Float32bits(src[i]), have[i], want[i])
			}
		}
	}
	// Tails shorter than a vector go through the Go conversion.
	for _, n := range floatLens {
		if n > len(src) {
			continue
		}
		h, w := make([]uint16, n), make([]uint16, n)
		f32ToF16Row(h, src[len(src)-n:])
		f32ToF16RowGo(w, src[len(src)-n:])
		if !slices.Equal(h, w) {
			t.Errorf("n=%d: asm %v; go %v", n, h, w)
		}
	}
}

// randHalves returns n halves of values in (-1, 1) and their float32 values.
func randHalves(r *rand.Rand, n int) ([]uint16, []float32) {
	h, f := make([]uint16, n), make([]float32, n)
	for i := range h {
		h[i] = kernels.F32ToF16(r.Float32()*2 - 1)
		f[i] = kernels.F16ToF32(h[i])
	}
	return h, f
}

// TestHeadsF16Asm checks the F16 head loops against the Go ones over runs
// of positions, and that a run gives bit for bit what the same positions
// give one call each: how positions are split into calls (by the blocks a
// row's table happens to name) must not change a result.
func TestHeadsF16Asm(t *testing.T) {
	asmKernels(t)
	r := rand.New(rand.NewPCG(33, 34))
	for _, hd := range []int{4, 8, 16, 24, 64, 128} {
		for _, g := range []struct{ nh, group int }{{1, 1}, {3, 1}, {4, 2}, {8, 4}, {12, 12}, {5, 5}, {12, 1}} {
			kvh := (g.nh-1)/g.group + 1
			for _, npos := range []int{1, 2, 3, 4, 5, 7, 8, 9, 16, 17} {
				for _, pad := range []int{0, 3} {
					stride := kvh*hd + pad
					name := fmt.Sprintf("hd=%d/nh=%d/group=%d/npos=%d/stride=%d", hd, g.nh, g.group, npos, stride)
					q := randVec(r, g.nh*hd)
					k, _ := randHalves(r, (npos-1)*stride+kvh*hd)
					have, want := make([]float32, npos*g.nh), make([]float32, npos*g.nh)
					dotsF16(q, k, hd, g.group, stride, have)
					dotsF16Go(q, k, hd, g.group, stride, want)
					for p := range npos {
						one := make([]float32, g.nh)
						dotsF16(q, k[p*stride:], hd, g.group, stride, one)
						for h := range g.nh {
							i := p*g.nh + h
							kh := make([]float32, hd)
							for j := range kh {
								kh[j] = kernels.F16ToF32(k[p*stride+(h/g.group)*hd+j])
							}
							if !closeTo(have[i], want[i], absDot(q[h*hd:(h+1)*hd], kh)) {
								t.Errorf("dotsF16 %s position %d head %d: have %g; want %g", name, p, h, have[i], want[i])
							}
							if one[h] != have[i] {
								t.Errorf("dotsF16 %s position %d head %d: %g alone, %g in the run", name, p, h, one[h], have[i])
							}
						}
					}
					w := randVec(r, npos*g.nh)
					v, _ := randHalves(r, (npos-1)*stride+kvh*hd)
					y := randVec(r, g.nh*hd)
					wantY, oneY := slices.Clone(y), slices.Clone(y)
					axpysF16(y, w, v, hd, g.group, stride)
					axpysF16Go(wantY, w, v, hd, g.group, stride)
					for p := range npos {
						axpysF16(oneY, w[p*g.nh:(p+1)*g.nh], v[p*stride:], hd, g.group, stride)
					}
					for i := range y {
						if !closeTo(y[i], wantY[i], 2*float32(npos)) {
							t.Fatalf("axpysF16 %s element %d: have %g; want %g", name, i, y[i], wantY[i])
						}
						if y[i] != oneY[i] {
							t.Fatalf("axpysF16 %s element %d: %g in one call, %g a position at a time", name, i, y[i], oneY[i])
						}
					}
				}
			}
		}
	}
}

// TestSoftmaxAsm checks the vector softmax passes against the Go ones on
// scores with -Inf padding and exponents below e^-87 (which flush to 0).
func TestSoftmaxAsm(t *testing.T) {
	asmKernels(t)
	r := rand.New(rand.NewPCG(35, 36))
	for _, width := range []int{8, 16, 24, 96, 256, 264, 272, 280} { // from 256 the rows kernels run, with their 4-, 2- and 1-vector tails
		for _, stretches := range []int{1, 2, 3, 11} {
			name := fmt.Sprintf("width=%d/stretches=%d", width, stretches)
			s := make([]float32, width*stretches)
			for i := range s {
				s[i] = r.Float32()*110 - 100
				if r.IntN(9) == 0 {
					s[i] = negInf
				}
			}
			s[r.IntN(len(s))] = 10
			have, want := make([]float32, width), make([]float32, width)
			colMax(s, have)
			colMaxGo(s, want)
			if !slices.Equal(have, want) {
				t.Errorf("colMax %s: have %v; want %v", name, have, want)
			}
			// Every pattern lane finite, as attention's are.
			for i := range want {
				want[i] = max(want[i], -50)
			}
			hs, ws := slices.Clone(s), slices.Clone(s)
			hsum, wsum := make([]float32, width), make([]float32, width)
			expSub(hs, want, hsum)
			expSubGo(ws, want, wsum)
			for i := range hs {
				if !closeTo(hs[i], ws[i], ws[i]) || (ws[i] == 0) != (hs[i] == 0) {
					t.Fatalf("expSub %s [%d] (e^(%g − %g)): have %g; want %g", name, i, s[i], want[i%width], hs[i], ws[i])
				}
			}
			for i := range hsum {
				if !closeTo(hsum[i], wsum[i], wsum[i]*float32(stretches)) {
					t.Errorf("expSub %s sum[%d]: have %g; want %g", name, i, hsum[i], wsum[i])
				}
			}
		}
	}
}

// kvLayer returns layer l of a cache's K and V as float32.
func kvLayer(c *KV, l int) (k, v []float32) {
	if !c.f16() {
		return c.k[l], c.v[l]
	}
	k, v = make([]float32, len(c.k16[l])), make([]float32, len(c.v16[l]))
	for i := range k {
		k[i], v[i] = kernels.F16ToF32(c.k16[l][i]), kernels.F16ToF32(c.v16[l][i])
	}
	return k, v
}

// TestStoreKVF16 checks that an F16 cache holds exactly f32ToF16 of what
// was stored, NaN payloads included, with the Go and the assembly kernels.
func TestStoreKVF16(t *testing.T) {
	defer useAsm(true)
	for _, asm := range []bool{false, true} {
		useAsm(asm)
		b := open(t, 2)
		spec := kernels.KVSpec{Layers: 2, Blocks: 3, BlockSize: 4, Width: 20, DType: kernels.F16}
		c, err := b.NewKV(spec)
		if err != nil {
			t.Fatal(err)
		}
		kv := c.(*KV)
		r := rand.New(rand.NewPCG(37, 38))
		vals := make([]float32, 3*spec.Width)
		for i := range vals {
			vals[i] = math.Float32frombits(r.Uint32())
			if i < len(f16Specials) {
				vals[i] = math.Float32frombits(f16Specials[i])
			}
		}
		x := b.Alloc(3, spec.Width)
		b.Upload(x, vals)
		b.StoreKV(kv, 1, x, x, []int32{7, -1, 0})
		for j, s := range []int{7, -1, 0} {
			if s < 0 {
				continue
			}
			for i := range spec.Width {
				want := f32ToF16(vals[j*spec.Width+i])
				if have := kv.k16[1][s*spec.Width+i]; have != want || kv.v16[1][s*spec.Width+i] != want {
					t.Fatalf("asm=%v: slot %d [%d] (%#08x): have %#04x; want %#04x", asm, s, i, math.Float32bits(vals[j*spec.Width+i]), have, want)
				}
			}
		}
		if slices.ContainsFunc(kv.k16[0], func(h uint16) bool { return h != 0 }) {
			t.Errorf("asm=%v: layer 0 was written", asm)
		}
	}
}

// TestAttentionBatchInvariant checks that a row's attention does not depend
// on the rest of the batch: the heads are split into chunks by batch size
// and thread count (long rows into parts by their length only), and every
// head's result must come out bit for bit the same however they are split,
// so batched decoding matches unbatched.
func TestAttentionBatchInvariant(t *testing.T) {
	for _, dt := range []kernels.DType{kernels.F32, kernels.F16} {
		for _, g := range []struct{ heads, kvHeads, hd int }{{12, 12, 64}, {8, 4, 32}, {6, 2, 12}} {
			t.Run(fmt.Sprintf("%v/heads=%d/kv=%d/hd=%d", dt, g.heads, g.kvHeads, g.hd), func(t *testing.T) {
				b := open(t, 2)
				r := rand.New(rand.NewPCG(39, 40))
				spec := kernels.KVSpec{Layers: 1, Blocks: 64, BlockSize: 16, Width: g.kvHeads * g.hd, DType: dt}
				kv := treeFixture(t, b, r, spec, 0)
				a := kernels.Attn{Heads: g.heads, KVHeads: g.kvHeads, HeadDim: g.hd}
				// 600 and 900 are split into parts (attnPart).
				lens := []int32{77, 1, 130, 600, 8, 200, 33, 900, 16, 95}
				for i, n := range lens {
					table := make([]int32, (n+15)/16+1)
					for j := range table {
						table[j] = int32((i*16 + j*5) % spec.Blocks)
					}
					a.Rows = append(a.Rows, kernels.AttnRow{Table: table, Len: n})
				}
				qw := g.heads * g.hd
				qs := randVals(r, len(lens)*qw, 2)
				q, dst := b.Alloc(len(lens), qw), b.Alloc(len(lens), qw)
				b.Upload(q, qs)
				b.Attention(dst, q, kv, 0, a)
				batched := make([]float32, len(qs))
				b.Download(batched, dst)
				for i := range lens {
					one := a
					one.Rows = a.Rows[i : i+1]
					q1, d1 := b.Alloc(1, qw), b.Alloc(1, qw)
					b.Upload(q1, qs[i*qw:(i+1)*qw])
					b.Attention(d1, q1, kv, 0, one)
					alone := make([]float32, qw)
					b.Download(alone, d1)
					if !slices.Equal(alone, batched[i*qw:(i+1)*qw]) {
						t.Errorf("row %d (length %d): alone and in a batch differ", i, lens[i])
					}
				}
			})
		}
	}
}

// BenchmarkAttentionKV is one layer's decode attention of a batch over
// caches of either type, for a 134M-parameter model's shape (12 heads of
// 64, no grouping): each row has its own run of blocks.
func BenchmarkAttentionKV(b *testing.B) {
	be := open(b, 0)
	const heads, hd, bs = 12, 64, 16
	for _, dt := range []kernels.DType{kernels.F32, kernels.F16} {
		for _, g := range []struct{ rows, ctx int }{{1, 512}, {8, 88}, {8, 512}} {
			b.Run(fmt.Sprintf("%v/rows=%d/ctx=%d", dt, g.rows, g.ctx), func(b *testing.B) {
				per := (g.ctx + bs - 1) / bs
				c, err := be.NewKV(kernels.KVSpec{Layers: 1, Blocks: g.rows * per, BlockSize: bs, Width: heads * hd, DType: dt})
				if err != nil {
					b.Fatal(err)
				}
				a := kernels.Attn{Heads: heads, KVHeads: heads, HeadDim: hd}
				for r := range g.rows {
					table := make([]int32, per)
					for i := range table {
						table[i] = int32(r*per + i)
					}
					a.Rows = append(a.Rows, kernels.AttnRow{Table: table, Len: int32(g.ctx)})
				}
				q, dst := be.Alloc(g.rows, heads*hd), be.Alloc(g.rows, heads*hd)
				be.Upload(q, randVals(rand.New(rand.NewPCG(1, 2)), g.rows*heads*hd, 1))
				for b.Loop() {
					be.Attention(dst, q, c, 0, a)
				}
				b.ReportMetric(float64(g.rows*g.ctx*2*heads*hd*dt.BlockBytes())/b.Elapsed().Seconds()*float64(b.N)/1e9, "KV-GB/s")
			})
		}
	}
}

// BenchmarkAttentionKVCold is BenchmarkAttentionKV with the cache out of
// the CPU's caches, as in a decode step, where the weights stream through
// them between one layer's attention and the next: every layer of a model
// of 12, each row's blocks scattered, with a 64 MiB sweep between steps.
// What it measures is how well the kernels keep memory busy.
func BenchmarkAttentionKVCold(b *testing.B) {
	be := open(b, 0)
	const heads, hd, bs, layers = 12, 64, 16, 12
	for _, dt := range []kernels.DType{kernels.F32, kernels.F16} {
		for _, g := range []struct{ rows, ctx int }{{1, 512}, {8, 160}} {
			b.Run(fmt.Sprintf("%v/rows=%d/ctx=%d", dt, g.rows, g.ctx), func(b *testing.B) {
				per := (g.ctx + bs - 1) / bs
				blocks := 2 * g.rows * per
				c, err := be.NewKV(kernels.KVSpec{Layers: layers, Blocks: blocks, BlockSize: bs, Width: heads * hd, DType: dt})
				if err != nil {
					b.Fatal(err)
				}
				// Real values: pages never written would all read the one
				// zero page, from cache.
				r := rand.New(rand.NewPCG(1, 2))
				x := be.Alloc(blocks*bs, heads*hd)
				be.Upload(x, randVals(r, blocks*bs*heads*hd, 1))
				slots := make([]int32, blocks*bs)
				for i := range slots {
					slots[i] = int32(i)
				}
				for l := range layers {
					be.StoreKV(c, l, x, x, slots)
				}
				perm := r.Perm(blocks)
				a := kernels.Attn{Heads: heads, KVHeads: heads, HeadDim: hd}
				for row := range g.rows {
					table := make([]int32, per)
					for i := range table {
						table[i] = int32(perm[row*per+i])
					}
					a.Rows = append(a.Rows, kernels.AttnRow{Table: table, Len: int32(g.ctx)})
				}
				q, dst := be.Alloc(g.rows, heads*hd), be.Alloc(g.rows, heads*hd)
				be.Upload(q, randVals(r, g.rows*heads*hd, 1))
				sweep := make([]byte, 64<<20)
				for b.Loop() {
					for l := range layers {
						be.Attention(dst, q, c, l, a)
					}
					b.StopTimer()
					for i := 0; i < len(sweep); i += 64 {
						sweep[i]++
					}
					b.StartTimer()
				}
				b.ReportMetric(float64(layers*g.rows*g.ctx*2*heads*hd*dt.BlockBytes())/b.Elapsed().Seconds()*float64(b.N)/1e9, "KV-GB/s")
			})
		}
	}
}

// BenchmarkAttentionSeqRows is one layer's attention for R rows of one
// sequence, causal (a prefill chunk, or a chain verified as a batch), in
// the speculation stand-in's shape: 128 heads of 8 over 64 kv heads, F16,
// on one thread.
func BenchmarkAttentionSeqRows(b *testing.B) {
	be := open(b, 1)
	const heads, kvHeads, hd, bs = 128, 64, 8, 16
	for _, ctx := range []int{16, 400} {
		for _, rows := range []int{1, 2, 4, 8} {
			b.Run(fmt.Sprintf("ctx=%d/rows=%d", ctx, rows), func(b *testing.B) {
				r := rand.New(rand.NewPCG(5, 6))
				blocks := (ctx+rows)/bs + 1
				spec := kernels.KVSpec{Layers: 1, Blocks: blocks, BlockSize: bs, Width: kvHeads * hd, DType: kernels.F16}
				kv := treeFixture(b, be, r, spec, 0)
				table := make([]int32, blocks)
				for i := range table {
					table[i] = int32(i)
				}
				a := kernels.Attn{Heads: heads, KVHeads: kvHeads, HeadDim: hd}
				for i := range rows {
					a.Rows = append(a.Rows, kernels.AttnRow{Table: table, Len: int32(ctx + i)})
				}
				q, dst := be.Alloc(rows, heads*hd), be.Alloc(rows, heads*hd)
				be.Upload(q, randVals(r, rows*heads*hd, 1))
				loopThreadCPU(b, func() {
					be.Attention(dst, q, kv, 0, a)
				})
			})
		}
	}
}

// BenchmarkAttentionPrefill is one layer's attention for a causal prefill
// chunk of 512 rows in a 100M-parameter model's shape (12 heads of 64),
// F16, on one thread.
func BenchmarkAttentionPrefill(b *testing.B) {
	be := open(b, 1)
	const heads, hd, bs, rows = 12, 64, 16, 512
	r := rand.New(rand.NewPCG(9, 10))
	spec := kernels.KVSpec{Layers: 1, Blocks: rows / bs, BlockSize: bs, Width: heads * hd, DType: kernels.F16}
	kv := treeFixture(b, be, r, spec, 0)
	table := make([]int32, spec.Blocks)
	for i := range table {
		table[i] = int32(i)
	}
	a := kernels.Attn{Heads: heads, KVHeads: heads, HeadDim: hd}
	for i := range rows {
		a.Rows = append(a.Rows, kernels.AttnRow{Table: table, Len: int32(i + 1)})
	}
	q, dst := be.Alloc(rows, heads*hd), be.Alloc(rows, heads*hd)
	be.Upload(q, randVals(r, rows*heads*hd, 1))
	loopThreadCPU(b, func() {
		be.Attention(dst, q, kv, 0, a)
	})
}
