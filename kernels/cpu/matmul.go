package cpu

import (
	"fmt"

	"github.com/specgate/specgate/kernels"
)

// xTile is how many activation rows one pass over a chunk of weight rows
// handles: the rows' quantized values (or floats) stay in cache while the
// chunk's weight rows are streamed past them, and a weight row stays in L1
// while it meets all of them.
const xTile = 32

// MatMul sets dst = x · wᵀ: x is F32 n × k, w is m × k of any weight type,
// dst is F32 n × m and must not overlap x. Output rows of w are split across
// the workers; each weight row is read from memory once for all n rows of x.
// For Q8_0 and Q4_0 weights, x is first quantized to Q8_0 (per 32-value
// block, scale max|x|/127), so results differ from exact F32 math by that
// rounding.
func (b *Backend) MatMul(dst, x, w kernels.Tensor) {
	b.live()
	d, xt, wt := writable(dst, "MatMul"), f32Tensor(x, "MatMul"), tensor(w, "MatMul")
	n, k, m := xt.rows, xt.cols, wt.rows
	if wt.cols != k || d.rows != n || d.cols != m {
		panic(fmt.Sprintf("cpu: MatMul: dst %d×%d, x %d×%d, w %d×%d", d.rows, d.cols, xt.rows, xt.cols, wt.rows, wt.cols))
	}
	if n == 0 || m == 0 {
		return
	}
	if k == 0 {
		clear(d.f32)
		return
	}
	t := &b.mm
	*t = matmulTask{b: b, dst: d, x: xt, w: wt}
	if wt.dt == kernels.Q8_0 || wt.dt == kernels.Q4_0 {
		nb := k / kernels.QK
		if cap(b.xq) < n*k {
			b.xq = make([]int8, n*k)
		}
		if cap(b.xd) < n*nb {
			b.xd = make([]float32, n*nb)
		}
		if n4 := (n + 3) / 4 * 4 * nb; cap(b.xd4) < n4 {
			b.xd4 = make([]float32, n4)
		}
		t.xq, t.xd, t.xd4 = b.xq[:n*k], b.xd[:n*nb], b.xd4[:(n+3)/4*4*nb]
		b.qx = quantTask{xq: t.xq, xd: t.xd, xd4: t.xd4, x: xt}
		b.pool.run(&b.qx, n, max(1, 16384/k))
	}
	grain := m
	if n*m*k >= 1<<15 {
		grain = min(64, max(4, m/(b.threads*8)))
	}
	b.pool.run(t, m, grain)
	*t = matmulTask{}
}

type quantTask struct {
	xq      []int8
	xd, xd4 []float32
	x       *Tensor
}

func (t *quantTask) run(_, lo, hi int) {
	k := t.x.cols
	nb := k / kernels.QK
	for r := lo; r < hi; r++ {
		xd := t.xd[r*nb : (r+1)*nb]
		quantRowQ8(t.xq[r*k:(r+1)*k], xd, t.x.row(r))
		g := t.xd4[r/4*4*nb:]
		for b, d := range xd {
			g[4*b+r%4] = d
		}
	}
}

type matmulTask struct {
	b         *Backend
	dst, x, w *Tensor
	xq        []int8
	xd, xd4   []float32
}

// run computes output columns [lo, hi) (weight rows) for every row of x.
func (t *matmulTask) run(wk, lo, hi int) {
	n, k, m := t.x.rows, t.x.cols, t.w.rows
	out := t.dst.f32
	o4 := &t.b.scratch[wk].o4
	for r0 := 0; r0 < n; r0 += xTile {
		r1 := min(n, r0+xTile)
		for o := lo; o < hi; o++ {
			switch t.w.dt {
			case kernels.Q8_0, kernels.Q4_0:
				nb := k / kernels.QK
				wr := t.w.rawRow(o)
				dot, dot4 := dotQ8, dotQ8x4
				if t.w.dt == kernels.Q4_0 {
					dot, dot4 = dotQ4, dotQ4x4
				}
				r := r0
				for ; r+4 <= r1; r += 4 {
					dot4(wr, t.xq[r*k:(r+4)*k], t.xd4[r*nb:(r+4)*nb], nb, o4)
					out[r*m+o], out[(r+1)*m+o], out[(r+2)*m+o], out[(r+3)*m+o] = o4[0], o4[1], o4[2], o4[3]
				}
				for ; r < r1; r++ {
					out[r*m+o] = dot(wr, t.xq[r*k:(r+1)*k], t.xd[r*nb:(r+1)*nb])
				}
			default:
				var wr []float32
				if t.w.dt == kernels.F32 {
					wr = t.w.row(o)
				} else {
					wr = t.b.scratch[wk].floats(k)
					convertRow(wr, t.w.dt, t.w.rawRow(o))
				}
				x := t.x.f32
				r := r0
				for ; r+4 <= r1; r += 4 {
					dotF32x4(wr, x[r*k:(r+4)*k], o4)
					out[r*m+o], out[(r+1)*m+o], out[(r+2)*m+o], out[(r+3)*m+o] = o4[0], o4[1], o4[2], o4[3]
				}
				for ; r < r1; r++ {
					out[r*m+o] = dotF32(wr, x[r*k:(r+1)*k])
				}
			}
		}
	}
}
