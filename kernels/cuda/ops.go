//go:build cuda

package cuda

import (
	"fmt"
	"math"

	"github.com/specgate/specgate/kernels"
)

// Gather sets dst row i to src row idx[i] converted to F32. An index out of
// range panics: token ids are checked by the caller.
func (b *Backend) Gather(dst, src kernels.Tensor, idx []int32) {
	d, s := writable(dst, "Gather"), tensor(src, "Gather")
	if d.rows != len(idx) || d.cols != s.cols {
		panic(fmt.Sprintf("cuda: Gather: dst %d×%d for %d ids of %d-wide rows", d.rows, d.cols, len(idx), s.cols))
	}
	for _, id := range idx {
		if id < 0 || int(id) >= s.rows {
			panic(fmt.Sprintf("cuda: Gather: index %d out of range [0, %d)", id, s.rows))
		}
	}
	defer b.enter()()
	b.gather(d, s, idx)
}

func (b *Backend) gather(d, s *Tensor, idx []int32) {
	if len(idx) == 0 || d.cols == 0 {
		return
	}
	ids := b.stageInt32(idx)
	b.launch(kGather, gridFor(d.cols, 256), len(idx), 1, 256, 0,
		ptr(d.data), ptr(s.data), ptr(s.scales), i32(int(s.dt)), ptr(ids), i32(d.cols))
}

// RMSNorm sets dst[r] = x[r] / sqrt(mean(x[r]²) + eps) · w[0]. dst may be x.
func (b *Backend) RMSNorm(dst, x, w kernels.Tensor, eps float32) {
	d, xt, wt := writable(dst, "RMSNorm"), f32Tensor(x, "RMSNorm"), tensor(w, "RMSNorm")
	sameShape("RMSNorm", d, xt)
	if wt.rows < 1 || wt.cols != xt.cols {
		panic(fmt.Sprintf("cuda: RMSNorm: weight %d×%d for %d-wide rows", wt.rows, wt.cols, xt.cols))
	}
	if xt.rows == 0 || xt.cols == 0 {
		return
	}
	defer b.enter()()
	wp := b.row0F32(wt)
	b.launch(kRMSNorm, xt.rows, 1, 1, 256, 0, ptr(d.data), ptr(xt.data), ptr(wp), i32(xt.cols), f32(eps))
}

// MatMul sets dst = x · wᵀ: x is F32 n × k, w is m × k of any weight type,
// dst is F32 n × m and must not overlap x. F16 and BF16 weights run on
// tensor cores (mma.sync m16n8k16) against x split into a high and a low
// half-precision part, which keeps the result close to F32 math; Q8_0 and
// Q4_0 weights meet x quantized to Q8_0 per 32-value block (as the CPU
// backend and llama.cpp do) in integer dot products (dp4a).
func (b *Backend) MatMul(dst, x, w kernels.Tensor) {
	d, xt, wt := writable(dst, "MatMul"), f32Tensor(x, "MatMul"), tensor(w, "MatMul")
	n, k, m := xt.rows, xt.cols, wt.rows
	if wt.cols != k || d.rows != n || d.cols != m {
		panic(fmt.Sprintf("cuda: MatMul: dst %d×%d, x %d×%d, w %d×%d", d.rows, d.cols, xt.rows, xt.cols, wt.rows, wt.cols))
	}
	if n == 0 || m == 0 {
		return
	}
	defer b.enter()()
	if k == 0 {
		b.zero(d)
		return
	}
	switch {
	case (wt.dt == kernels.F16 || wt.dt == kernels.BF16) && k%32 == 0:
		bf := 0
		if wt.dt == kernels.BF16 {
			bf = 1
		}
		xh := b.grow(&b.xh, 2*n*k)
		xl := b.grow(&b.xl, 2*n*k)
		b.launch(kSplitHalf, gridFor(n*k, 256), 1, 1, 256, 0, ptr(xh), ptr(xl), ptr(xt.data), i64(n*k), i32(bf))
		fn, nt := kMMF16n8, 1
		switch {
		case n > 16:
			fn, nt = kMMF16n32, 4
		case n > 8:
			fn, nt = kMMF16n16, 2
		}
		if bf == 1 {
			fn += kMMBF16n8 - kMMF16n8
		}
		b.launch(fn, ceilDiv(m, 16), ceilDiv(n, 8*nt), 1, 256, 0,
			ptr(d.data), ptr(wt.data), ptr(xh), ptr(xl), i32(m), i32(k), i32(n))
	case wt.dt == kernels.Q8_0 || wt.dt == kernels.Q4_0:
		nb := n * k / kernels.QK
		xq := b.grow(&b.xq, n*k)
		xd := b.grow(&b.xd, 4*nb)
		b.launch(kQuantQ8, ceilDiv(nb, 8), 1, 1, 256, 0, ptr(xq), ptr(xd), ptr(xt.data), i64(nb))
		fn, nx := kMMQ8n8, 8
		switch {
		case n == 1:
			fn, nx = kMMQ8n1, 1
		case n == 2:
			fn, nx = kMMQ8n2, 2
		case n <= 4:
			fn, nx = kMMQ8n4, 4
		}
		if wt.dt == kernels.Q4_0 {
			fn += kMMQ4n1 - kMMQ8n1
		}
		b.launch(fn, ceilDiv(m, 4), ceilDiv(n, nx), 1, 256, 0,
			ptr(d.data), ptr(wt.data), ptr(wt.scales), ptr(xq), ptr(xd), i32(m), i32(k), i32(n))
	default:
		b.launch(kMMGeneric, ceilDiv(m, 8), ceilDiv(n, 4), 1, 256, 0,
			ptr(d.data), ptr(xt.data), ptr(wt.data), ptr(wt.scales), i32(int(wt.dt)), i32(m), i32(k), i32(n))
	}
}

func (b *Backend) zero(t *Tensor) {
	if n := t.rows * t.cols; n > 0 && b.mode != modeArgs {
		must(memsetAsync(t.data, n, b.stream))
	}
}

// AddBias adds b[0] to every row of x.
func (b *Backend) AddBias(x, bias kernels.Tensor) {
	xt, bt := writable(x, "AddBias"), tensor(bias, "AddBias")
	if bt.rows < 1 || bt.cols != xt.cols {
		panic(fmt.Sprintf("cuda: AddBias: bias %d×%d for %d-wide rows", bt.rows, bt.cols, xt.cols))
	}
	n := xt.rows * xt.cols
	if n == 0 {
		return
	}
	defer b.enter()()
	bp := b.row0F32(bt)
	b.launch(kAddBias, gridFor(n, 256), 1, 1, 256, 0, ptr(xt.data), ptr(bp), i64(n), i32(xt.cols))
}

// Add sets dst = a + b element-wise; dst may be a or b.
func (b *Backend) Add(dst, a, c kernels.Tensor) {
	d, at, ct := writable(dst, "Add"), f32Tensor(a, "Add"), f32Tensor(c, "Add")
	sameShape("Add", d, at)
	sameShape("Add", d, ct)
	n := d.rows * d.cols
	if n == 0 {
		return
	}
	defer b.enter()()
	b.launch(kAdd, gridFor(n, 256), 1, 1, 256, 0, ptr(d.data), ptr(at.data), ptr(ct.data), i64(n))
}

// SwiGLU sets dst = silu(gate) · up element-wise. dst may be gate or up.
func (b *Backend) SwiGLU(dst, gate, up kernels.Tensor) {
	d, g, u := writable(dst, "SwiGLU"), f32Tensor(gate, "SwiGLU"), f32Tensor(up, "SwiGLU")
	sameShape("SwiGLU", d, g)
	sameShape("SwiGLU", d, u)
	n := d.rows * d.cols
	if n == 0 {
		return
	}
	defer b.enter()()
	b.launch(kSwiGLU, gridFor(n, 256), 1, 1, 256, 0, ptr(d.data), ptr(g.data), ptr(u.data), i64(n))
}

// RoPE rotates each head of row r of x in place by position pos[r]. The
// angles are computed in double precision on the device.
func (b *Backend) RoPE(x kernels.Tensor, pos []int32, p kernels.RoPE) {
	xt := writable(x, "RoPE")
	if len(pos) != xt.rows {
		panic(fmt.Sprintf("cuda: RoPE: %d positions for %d rows", len(pos), xt.rows))
	}
	hd, dims := p.HeadDim, p.Dims
	if dims == 0 {
		dims = hd
	}
	if hd <= 0 || xt.cols%hd != 0 || dims%2 != 0 || dims > hd || dims < 0 {
		panic(fmt.Sprintf("cuda: RoPE: HeadDim %d, Dims %d for %d-wide rows", p.HeadDim, p.Dims, xt.cols))
	}
	if p.Freqs != nil && len(p.Freqs) != dims/2 {
		panic(fmt.Sprintf("cuda: RoPE: %d Freqs for %d rotated pairs", len(p.Freqs), dims/2))
	}
	if xt.rows == 0 || dims == 0 {
		return
	}
	base := float64(p.Base)
	if base == 0 {
		base = 10000
	}
	scale := float64(p.Scale)
	if scale == 0 {
		scale = 1
	}
	inv := make([]float64, dims/2)
	for i := range inv {
		inv[i] = math.Pow(base, -float64(2*i)/float64(dims))
		if p.Freqs != nil {
			inv[i] /= float64(p.Freqs[i])
		}
	}
	defer b.enter()()
	neox := 0
	if p.NeoX {
		neox = 1
	}
	pp, ip := b.stageInt32(pos), b.stageFloat64(inv)
	work := xt.cols / hd * dims / 2
	b.launch(kRoPE, gridFor(work, 128), xt.rows, 1, 128, 0,
		ptr(xt.data), ptr(pp), ptr(ip), i32(xt.cols), i32(hd), i32(dims), i32(neox), f64(scale))
}
