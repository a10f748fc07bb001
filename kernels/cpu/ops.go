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
			s.convertRow(d.row(i), int(id))
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
	step    float32 // RoPE: base^(−2/dims), the ratio of consecutive pairs' angles
}

type rowOp int

const (
	opRMSNorm rowOp = iota
	opSwiGLU
	opRoPE
	opAdd
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
	base := p.Base
	if base == 0 {
		base = 10000
	}
	step := float32(math.Pow(float64(base), float64(float32(-2)/float32(dims))))
	b.rows = rowTask{op: opRoPE, b: b, x: xt, pos: pos, rope: p, headDim: hd, dims: dims, step: step}
	b.pool.run(&b.rows, xt.rows, rowGrain(xt.cols))
	b.rows = rowTask{}
}

func (t *rowTask) run(wk, lo, hi int) {
	switch t.op {
	case opRMSNorm:
		r := lo
		for ; r+4 <= hi; r += 4 {
			// Four rows' sums side by side: each is still added in
			// order, but the four chains of float64 adds overlap.
			s := rmsScale4(t.x.row(r), t.x.row(r+1), t.x.row(r+2), t.x.row(r+3), t.eps)
			for i, sc := range s {
				x := t.x.row(r + i)
				scaleMul(t.dst.row(r + i)[:len(x)], x, t.w, sc)
			}
		}
		for ; r < hi; r++ {
			x, d := t.x.row(r), t.dst.row(r)
			scaleMul(d[:len(x)], x, t.w, rmsScale(x, t.eps))
		}
	case opSwiGLU:
		for r := lo; r < hi; r++ {
			g := t.x.row(r)
			siluMul(t.dst.row(r)[:len(g)], g, t.y.row(r))
		}
	case opRoPE:
		t.ropeRows(wk, lo, hi)
	case opAdd:
		t.addRows(lo, hi)
	}
}

func (t *rowTask) ropeRows(wk, lo, hi int) {
	half := t.dims / 2
	sc := &t.b.scratch[wk]
	if cap(sc.cs) < 2*t.dims {
		sc.cs = make([]float32, 2*t.dims)
	}
	// The neox layout rotates (i, i+half): one cosine and one sine per
	// pair. The original one rotates (2i, 2i+1): each pair's cosine and
	// sine twice, so that both kernels read them as plain vectors.
	c, s := sc.cs[:t.dims], sc.cs[t.dims:2*t.dims]
	if t.rope.NeoX {
		c, s = c[:half], s[:half]
	}
	for r := lo; r < hi; r++ {
		ropeAngles(c, s, t.pos[r], t.rope, t.step)
		x := t.x.row(r)
		for h := 0; h+t.headDim <= len(x); h += t.headDim {
			if t.rope.NeoX {
				ropeHalves(x[h:h+t.dims], c, s)
			} else {
				ropePairs(x[h:h+t.dims], c, s)
			}
		}
	}
}

var (
	// ropeHalves rotates (v[i], v[i+len(c)]) by (c[i], s[i]) as rotate
	// does, for i < len(c) = len(v)/2.
	ropeHalves = ropeHalvesGo
	// ropePairs rotates (v[2i], v[2i+1]) by (c[2i], s[2i]) as rotate
	// does; c and s hold each pair's value twice, len(c) = len(v).
	ropePairs = ropePairsGo
)

func ropeHalvesGo(v, c, s []float32) {
	half := len(c)
	v, s = v[:2*half], s[:half]
	for i := range half {
		v[i], v[i+half] = rotate(v[i], v[i+half], c[i], s[i])
	}
}

func ropePairsGo(v, c, s []float32) {
	c, s = c[:len(v)], s[:len(v)]
	for i := 0; i+1 < len(v); i += 2 {
		v[i], v[i+1] = rotate(v[i], v[i+1], c[i], s[i])
	}
}

// ropeAngles sets c and s to the cosines and sines of the pairs' angles
// at position pos (each twice when c holds two entries a pair), computed
// as GGML computes them: the angle of pair
// 0 is the position, each next one the previous times base^(−2/dims), all
// in float32, then divided by the pair's Freqs factor and multiplied by
// 1/Scale, and only then widened for the cosine and sine. Powers taken
// one by one in float64 round differently in about a sixth of the rotated
// elements, and many layers of random weights amplify such last-bit
// differences into visible ones in the logits.
func ropeAngles(c, s []float32, pos int32, p kernels.RoPE, step float32) {
	fs := float32(1)
	if p.Scale != 0 {
		fs = 1 / p.Scale
	}
	rep := 2 // entries per pair
	if p.NeoX {
		rep = 1
	}
	pairs := len(c) / rep
	theta := float32(pos)
	for i := range pairs {
		th := theta
		if p.Freqs != nil {
			th /= p.Freqs[i]
		}
		th *= fs
		sn, cn := math.Sincos(float64(th))
		for k := range rep {
			c[rep*i+k], s[rep*i+k] = float32(cn), float32(sn)
		}
		theta *= step
	}
}

// rotate turns (a, b) by the angle of cosine c and sine s the way GGML's
// compiled C does, its multiply-subtract and multiply-add each contracted
// into one fused operation: (a·c − b·s, a·s + b·c) with a·c and a·s fused.
func rotate(a, b, c, s float32) (float32, float32) {
	// The products are exact in float64, so each float64 expression
	// rounds once; midway catches the rare case where
	// rounding that to float32 is not the single rounding fma32 makes.
	x := float64(a)*float64(c) - float64(b*s)
	y := float64(a)*float64(s) + float64(b*c)
	if midway(x) || midway(y) {
		return fma32(a, c, -(b * s)), fma32(a, s, b*c)
	}
	return float32(x), float32(y)
}

// midway reports whether rounding x to float32 could differ from rounding
// the exact value x was rounded from: x lies exactly halfway between two
// float32s, or below float32's normal range, where more bits are dropped.
func midway(x float64) bool {
	b := math.Float64bits(x)
	return b&(1<<29-1) == 1<<28 || b&(1<<63-1) < 0x3810000000000000 // 2^-126
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
	// Row by row across the workers: a prompt's residual adds (128 rows
	// of a 768-wide model, twice a layer) otherwise leave the other cores
	// idle while the caller walks them.
	b.rows = rowTask{op: opAdd, b: b, dst: d, x: at, y: ct}
	b.pool.run(&b.rows, d.rows, rowGrain(d.cols))
	b.rows = rowTask{}
}

// addRows sets dst = x + y on rows [lo, hi).
func (t *rowTask) addRows(lo, hi int) {
	c := t.x.cols
	x, y, o := t.x.f32[lo*c:hi*c], t.y.f32[lo*c:hi*c], t.dst.f32[lo*c:hi*c]
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

// rmsScale returns 1/√(mean(x²)+eps) as GGML computes it: each square
// rounded to float32 and added in order in float64, the mean rounded to
// float32, the root and the quotient in float32. Many layers of random
// weights turn a last-bit difference here into one int8 rounding of an
// activation the other way, and that into tenths in the logits, so
// matching llama.cpp takes this sequence, not a near one. It costs one
// pass over the row, next to the matmuls that read it.
func rmsScale(x []float32, eps float32) float32 {
	var ss float64
	for _, v := range x {
		ss += float64(float32(v * v))
	}
	return rmsFinish(ss, len(x), eps)
}

// rmsScale4 is rmsScale of four rows of one length at once.
func rmsScale4(x0, x1, x2, x3 []float32, eps float32) [4]float32 {
	x1, x2, x3 = x1[:len(x0)], x2[:len(x0)], x3[:len(x0)]
	var s0, s1, s2, s3 float64
	for i, v := range x0 {
		s0 += float64(float32(v * v))
		s1 += float64(float32(x1[i] * x1[i]))
		s2 += float64(float32(x2[i] * x2[i]))
		s3 += float64(float32(x3[i] * x3[i]))
	}
	n := len(x0)
	return [4]float32{rmsFinish(s0, n, eps), rmsFinish(s1, n, eps), rmsFinish(s2, n, eps), rmsFinish(s3, n, eps)}
}

func rmsFinish(ss float64, n int, eps float32) float32 {
	mean := float32(ss / float64(n))
	return 1 / float32(math.Sqrt(float64(mean+eps)))
}
