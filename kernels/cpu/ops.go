package cpu

import (
	"fmt"
	"math"

	"github.com/specgate/specgate/kernels"
)

// Gather sets dst row i to src row idx[i] converted to F32. An index out of
// range panics: token ids are checked by the caller.
func (b *Backend) Gather(dst, src kernels.Tensor, idx []int32) {
	b.live()
	d, s := writable(dst, "Gather"), tensor(src, "Gather")
	if d.rows != len(idx) || d.cols != s.cols {
		panic(fmt.Sprintf("cpu: Gather: dst %d×%d for %d ids of %d-wide rows", d.rows, d.cols, len(idx), s.cols))
	}
	for i, id := range idx {
		if id < 0 || int(id) >= s.rows {
			panic(fmt.Sprintf("cpu: Gather: index %d out of range [0, %d)", id, s.rows))
		}
		if s.dt == kernels.F32 {
			copy(d.row(i), s.row(int(id)))
		} else {
			convertRow(d.row(i), s.dt, s.rawRow(int(id)))
		}
	}
}

// rowTask runs a row-wise op over the rows of a batch.
type rowTask struct {
	op      rowOp
	b       *Backend
	dst, x  *Tensor
	y       *Tensor   // second operand (SwiGLU up)
	w       []float32 // RMSNorm weight
	eps     float32
	pos     []int32
	rope    kernels.RoPE
	headDim int
	dims    int
}

type rowOp int

const (
	opRMSNorm rowOp = iota
	opSwiGLU
	opRoPE
)

// rowGrain returns how many rows of cols values make a chunk worth handing
// to another worker.
func rowGrain(cols int) int { return max(1, 8192/max(1, cols)) }

// RMSNorm sets dst[r] = x[r] / sqrt(mean(x[r]²) + eps) · w[0]. dst may be x.
func (b *Backend) RMSNorm(dst, x, w kernels.Tensor, eps float32) {
	b.live()
	d, xt, wt := writable(dst, "RMSNorm"), f32Tensor(x, "RMSNorm"), tensor(w, "RMSNorm")
	sameShape("RMSNorm", d, xt)
	if wt.rows < 1 || wt.cols != xt.cols {
		panic(fmt.Sprintf("cpu: RMSNorm: weight %d×%d for %d-wide rows", wt.rows, wt.cols, xt.cols))
	}
	b.rows = rowTask{op: opRMSNorm, b: b, dst: d, x: xt, w: weightRow(wt, 0, &b.wrow), eps: eps}
	b.pool.run(&b.rows, xt.rows, rowGrain(xt.cols))
	b.rows = rowTask{}
}

// SwiGLU sets dst = silu(gate) · up element-wise. dst may be gate or up.
func (b *Backend) SwiGLU(dst, gate, up kernels.Tensor) {
	b.live()
	d, g, u := writable(dst, "SwiGLU"), f32Tensor(gate, "SwiGLU"), f32Tensor(up, "SwiGLU")
	sameShape("SwiGLU", d, g)
	sameShape("SwiGLU", d, u)
	b.rows = rowTask{op: opSwiGLU, b: b, dst: d, x: g, y: u}
	b.pool.run(&b.rows, d.rows, rowGrain(d.cols))
	b.rows = rowTask{}
}

// RoPE rotates each head of row r of x in place by position pos[r].
func (b *Backend) RoPE(x kernels.Tensor, pos []int32, p kernels.RoPE) {
	b.live()
	xt := writable(x, "RoPE")
	if len(pos) != xt.rows {
		panic(fmt.Sprintf("cpu: RoPE: %d positions for %d rows", len(pos), xt.rows))
	}
	hd, dims := p.HeadDim, p.Dims
	if dims == 0 {
		dims = hd
	}
	if hd <= 0 || xt.cols%hd != 0 || dims%2 != 0 || dims > hd || dims < 0 {
		panic(fmt.Sprintf("cpu: RoPE: HeadDim %d, Dims %d for %d-wide rows", p.HeadDim, p.Dims, xt.cols))
	}
	if p.Freqs != nil && len(p.Freqs) != dims/2 {
		panic(fmt.Sprintf("cpu: RoPE: %d Freqs for %d rotated pairs", len(p.Freqs), dims/2))
	}
	base := float64(p.Base)
	if base == 0 {
		base = 10000
	}
	if cap(b.rope) < dims/2 {
		b.rope = make([]float64, dims/2)
	}
	inv := b.rope[:dims/2]
	for i := range inv {
		inv[i] = math.Pow(base, -float64(2*i)/float64(dims))
		if p.Freqs != nil {
			inv[i] /= float64(p.Freqs[i])
		}
	}
	b.rows = rowTask{op: opRoPE, b: b, x: xt, pos: pos, rope: p, headDim: hd, dims: dims}
	b.pool.run(&b.rows, xt.rows, rowGrain(xt.cols))
	b.rows = rowTask{}
}

func (t *rowTask) run(wk, lo, hi int) {
	switch t.op {
	case opRMSNorm:
		for r := lo; r < hi; r++ {
			x, d := t.x.row(r), t.dst.row(r)
			ss := float64(dotF32(x, x))
			s := float32(1 / math.Sqrt(ss/float64(len(x))+float64(t.eps)))
			scaleMul(d[:len(x)], x, t.w, s)
		}
	case opSwiGLU:
		for r := lo; r < hi; r++ {
			g := t.x.row(r)
			siluMul(t.dst.row(r)[:len(g)], g, t.y.row(r))
		}
	case opRoPE:
		t.ropeRows(wk, lo, hi)
	}
}

func (t *rowTask) ropeRows(wk, lo, hi int) {
	half := t.dims / 2
	inv := t.b.rope[:half]
	sc := &t.b.scratch[wk]
	if cap(sc.cs) < t.dims {
		sc.cs = make([]float32, t.dims)
	}
	cs := sc.cs[:t.dims]
	scale := float64(t.rope.Scale)
	if scale == 0 {
		scale = 1
	}
	for r := lo; r < hi; r++ {
		p := float64(t.pos[r]) / scale
		for i, f := range inv {
			s, c := math.Sincos(p * f)
			cs[2*i], cs[2*i+1] = float32(c), float32(s)
		}
		x := t.x.row(r)
		for h := 0; h+t.headDim <= len(x); h += t.headDim {
			v := x[h : h+t.dims]
			if t.rope.NeoX {
				for i := range half {
					c, s := cs[2*i], cs[2*i+1]
					a, b := v[i], v[i+half]
					v[i], v[i+half] = a*c-b*s, a*s+b*c
				}
				continue
			}
			for i := range half {
				c, s := cs[2*i], cs[2*i+1]
				a, b := v[2*i], v[2*i+1]
				v[2*i], v[2*i+1] = a*c-b*s, a*s+b*c
			}
		}
	}
}

// AddBias adds b[0] to every row of x.
func (b *Backend) AddBias(x, bias kernels.Tensor) {
	b.live()
	xt, bt := writable(x, "AddBias"), tensor(bias, "AddBias")
	if bt.rows < 1 || bt.cols != xt.cols {
		panic(fmt.Sprintf("cpu: AddBias: bias %d×%d for %d-wide rows", bt.rows, bt.cols, xt.cols))
	}
	w := weightRow(bt, 0, &b.wrow)
	for r := range xt.rows {
		row := xt.row(r)
		for i, v := range w {
			row[i] += v
		}
	}
}

// Add sets dst = a + b element-wise; dst may be a or b.
func (b *Backend) Add(dst, a, c kernels.Tensor) {
	b.live()
	d, at, ct := writable(dst, "Add"), f32Tensor(a, "Add"), f32Tensor(c, "Add")
	sameShape("Add", d, at)
	sameShape("Add", d, ct)
	x, y, o := at.f32, ct.f32[:len(at.f32)], d.f32[:len(at.f32)]
	for i, v := range x {
		o[i] = v + y[i]
	}
}

// expf is e^x in float32, accurate to a few ulp, several times faster than
// math.Exp: softmax and SiLU call it once per element.
func expf(x float32) float32 {
	const (
		ln2Hi = 0.693359375
		ln2Lo = -2.12194440e-4
		log2e = 1.44269504088896341
	)
	switch {
	case x != x:
		return x
	case x > 88:
		// 2^n would overflow before the polynomial brings it back down.
		return float32(math.Exp(float64(x)))
	case x < -87.33654:
		return 0
	}
	n := (x*log2e + roundMagic) - roundMagic // round to even, |x·log2e| < 128
	r := x - n*ln2Hi - n*ln2Lo
	p := float32(1.9875691500e-4)
	p = p*r + 1.3981999507e-3
	p = p*r + 8.3334519073e-3
	p = p*r + 4.1665795894e-2
	p = p*r + 1.6666665459e-1
	p = p*r + 5.0000001201e-1
	p = p*r*r + r + 1
	return p * math.Float32frombits(uint32(int32(n)+127)<<23)
}
