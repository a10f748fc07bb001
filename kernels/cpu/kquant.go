package cpu

import (
	"encoding/binary"
	"math"

	"github.com/specgate/specgate/kernels"
)

// MatMul for the GGML quantizations beyond Q8_0 and Q4_0 (Q4_1, Q5_0,
// Q5_1, IQ4_NL, the K-quants Q2_K to Q6_K, IQ4_XS). Weights stay in their
// stored blocks; the activation rows are quantized once per call the way
// llama.cpp's CPU backend quantizes them for that weight type (its
// vec_dot_type), and each output is an integer dot product per block scaled
// by the two blocks' scales, so results match ggml's arithmetic up to the
// order of float additions:
//
//   - Q5_0, IQ4_NL: Q8_0, as ggml's AVX2 quantizer makes it: per 32 values
//     d = max|x|/127 stored as F16, q = round-to-even(x·127/max|x|).
//   - Q4_1, Q5_1: Q8_1, which adds s = F16(d·Σq) per block, the term the
//     weights' minimum multiplies.
//   - Q2_K to Q6_K, IQ4_XS: Q8_K, per 256 values an F32 scale d = −max/127
//     for the value max of largest magnitude, q = round-to-even(x/d), and
//     the sums of q over each 16 values.
//
// Every output is computed by the same sequence of operations on one
// weight row and one activation row, whatever the batch and the kernel
// (one row, four or eight activation rows, eight weight rows in the ×8
// layout of pack.go, or, for batches of the four 32-value types, Q8_0's
// ×8 kernels on the weights rewritten chunk by chunk, legacyx8.go): a
// row's result never depends on the other rows of the batch (batch
// invariance).

// actFormat is how MatMul quantizes activations for a weight type.
type actFormat uint8

const (
	actNone actFormat = iota // not one of the types of this file
	actQ8_0                  // per 32: F16-rounded scale
	actQ8_1                  // per 32: F16-rounded scale and F16 d·Σq
	actQ8K                   // per 256: F32 scale, Σq per 16
)

func actFormatOf(dt kernels.DType) actFormat {
	switch dt {
	case kernels.Q5_0, kernels.IQ4_NL:
		return actQ8_0
	case kernels.Q4_1, kernels.Q5_1:
		return actQ8_1
	case kernels.Q2_K, kernels.Q3_K, kernels.Q4_K, kernels.Q5_K, kernels.Q6_K, kernels.IQ4_XS:
		return actQ8K
	}
	return actNone
}

// blockLen is the number of values one activation scale covers.
func (f actFormat) blockLen() int {
	if f == actQ8K {
		return kernels.QKK
	}
	return kernels.QK
}

// actRow is one activation row quantized for a weight type: q holds its k
// int8 values, d one scale per block, s (Q8_1) each block's d·Σq, and bs
// (Q8_K) the sum of q over each 16 values.
type actRow struct {
	q  []int8
	d  []float32
	s  []float32
	bs []int16
}

// kAct holds n activation rows of k values quantized in format f.
type kAct struct {
	f  actFormat
	k  int
	q  []int8
	d  []float32
	s  []float32
	bs []int16
	// c, where a Q8_0 or Q8_1 batch runs on the biased ×8 Q8_0 kernels
	// (legacyx8.go), holds each block's −128·Σq (blockSumsB).
	c []int32
	// g, when not nil, holds the full groups of four rows again in the
	// layout of the x4 kernels (Q8_K only): per group and super-block a
	// record of the four rows' values (4·256 bytes), sums per 16 (4·16
	// int16) and scales (4 float32).
	g []byte
}

// Sizes of a super-block record of the x4 kernels' layout.
const (
	x4Sums   = 4 * 256
	x4Scales = x4Sums + 4*16*2
	x4Record = x4Scales + 4*4
)

// group returns group g's records in the x4 layout.
func (a *kAct) group(g int) []byte {
	n := a.k / superBlocks * x4Record
	return a.g[g*n : (g+1)*n]
}

// spread copies row r (of a full group) into its lane of the x4 layout.
func (a *kAct) spread(r int) {
	row := a.row(r)
	rec := a.group(r / 4)
	l := r % 4
	for b, d := range row.d {
		p := rec[b*x4Record:]
		for i, q := range row.q[b*256 : b*256+256] {
			p[256*l+i] = byte(q)
		}
		for j, s := range row.bs[b*16 : b*16+16] {
			binary.LittleEndian.PutUint16(p[x4Sums+32*l+2*j:], uint16(s))
		}
		binary.LittleEndian.PutUint32(p[x4Scales+4*l:], math.Float32bits(d))
	}
}

func (a *kAct) row(r int) actRow {
	nb := a.k / a.f.blockLen()
	row := actRow{q: a.q[r*a.k : (r+1)*a.k], d: a.d[r*nb : (r+1)*nb]}
	switch a.f {
	case actQ8_1:
		row.s = a.s[r*nb : (r+1)*nb]
	case actQ8K:
		row.bs = a.bs[r*(a.k/16) : (r+1)*(a.k/16)]
	}
	return row
}

// quantize sets row r of a from x.
func (a *kAct) quantize(r int, x []float32) {
	row := a.row(r)
	switch a.f {
	case actQ8_0, actQ8_1:
		quantRowQ8g(row.q, row.d, row.s, x)
	case actQ8K:
		quantRowQ8K(row.q, row.d, row.bs, x)
	}
}

// quantRowQ8g quantizes x to Q8_0 with F16-rounded scales, as ggml's AVX2
// quantize_row_q8_0 does: d = max|x|/127, q = round-to-even(x·(127/max|x|)).
// When s is not nil (Q8_1) it also sets s[b] = F16(d·Σq).
func quantRowQ8g(xq []int8, xd, s []float32, x []float32) {
	for b := range xd {
		v := x[b*32 : b*32+32]
		q := xq[b*32 : b*32+32]
		var amax float32
		for _, f := range v {
			amax = max(amax, abs32(f))
		}
		d := amax / 127
		xd[b] = roundF16(d)
		var id float32
		if amax != 0 {
			id = 127 / amax
		}
		var sum int32
		for i, f := range v {
			q[i] = sat8((f*id + roundMagic) - roundMagic)
			sum += int32(q[i])
		}
		if s != nil {
			s[b] = roundF16(d * float32(sum))
		}
	}
}

// quantRowQ8KGo quantizes x to Q8_K as ggml's quantize_row_q8_K_ref does: per
// 256 values, the first value max of largest magnitude sets iscale =
// −127/max, q = min(127, round-to-even(iscale·x)), d = 1/iscale; bs holds
// Σq over each 16 values. An all-zero block has d = 0.
func quantRowQ8KGo(xq []int8, xd []float32, bs []int16, x []float32) {
	for b := range xd {
		v := x[b*256 : b*256+256]
		q := xq[b*256 : b*256+256]
		var amax, mx float32
		for _, f := range v {
			if a := abs32(f); a > amax {
				amax, mx = a, f
			}
		}
		if amax == 0 {
			xd[b] = 0
			clear(q)
			clear(bs[b*16 : b*16+16])
			continue
		}
		iscale := -127 / mx
		for i, f := range v {
			q[i] = sat8(min(127, (iscale*f+roundMagic)-roundMagic))
		}
		for j := range 16 {
			var s int16
			for _, c := range q[16*j : 16*j+16] {
				s += int16(c)
			}
			bs[b*16+j] = s
		}
		xd[b] = 1 / iscale
	}
}

// roundF16 rounds f to the nearest half and back (the scale ggml stores).
func roundF16(f float32) float32 { return kernels.F16ToF32(kernels.F32ToF16(f)) }

// sat8 converts a whole float to int8, saturating as the SIMD packs do
// (NaN becomes -128).
func sat8(f float32) int8 {
	switch {
	case f >= 127:
		return 127
	case f >= -128:
		return int8(f)
	}
	return -128
}

func f16le(b []byte) float32 { return f16Table[binary.LittleEndian.Uint16(b)] }

// kDot is a dot product of one weight row of a type of this file with one
// activation row quantized for it.
type kDot func(w []byte, a actRow) float32

// kRows sets out[r] to the dot product of weight row r (rows rb bytes
// apart from w on) with one activation row, for r < len(out): every row by
// the same sequence of operations.
type kRows func(w []byte, rb int, a actRow, out []float32)

// kDots holds, per type, the fastest kernel this CPU runs (useAsm fills
// it).
var kDots map[kernels.DType]kRows

// kRowsN computes, like kRows, m weight rows against the na ≤ kRowsNMax
// activation rows a0, a0+1, … of act, row a's results at out[a·os:], each
// with the bits of kRows on that activation row alone.
type kRowsN func(w []byte, rb int, act *kAct, a0, na int, out []float32, os, m int)

// kRowsNMax is the most activation rows a kRowsN kernel takes a call.
const kRowsNMax = 8

// kDotsN holds, per type, a kRowsN kernel where one pays (useAsm fills
// it; nil entries, and a nil map, mean none): it reads a block of weights
// once for several activation rows, where kRows reads it for each.
var kDotsN map[kernels.DType]kRowsN

// kX4 holds, per type, a kernel that computes one weight row against the
// four rows of a group in the x4 layout (kAct.g), out[l] for row l, with
// each row's bits those of kDots (useAsm fills it; nil entries, and a nil
// map, mean none).
var kX4 map[kernels.DType]func(w, g []byte, nb int, out *[4]float32)

// kDotsGo holds the plain Go references.
var kDotsGo = map[kernels.DType]kDot{
	kernels.Q4_1:   dotQ4_1Go,
	kernels.Q5_0:   dotQ5_0Go,
	kernels.Q5_1:   dotQ5_1Go,
	kernels.IQ4_NL: dotIQ4NLGo,
	kernels.Q2_K:   dotQ2KGo,
	kernels.Q3_K:   dotQ3KGo,
	kernels.Q4_K:   dotQ4KGo,
	kernels.Q5_K:   dotQ5KGo,
	kernels.Q6_K:   dotQ6KGo,
	kernels.IQ4_XS: dotIQ4XSGo,
}

// useKDotsGo points every type at its Go dot product.
func useKDotsGo() {
	kX4, kX8, kX8MaxRows, kDotsN, expandX8Groups, addMinsX8Groups = nil, nil, nil, nil, nil, nil
	kDots = make(map[kernels.DType]kRows, len(kDotsGo))
	for dt, f := range kDotsGo {
		kDots[dt] = goRows(f)
	}
}

func goRows(dot kDot) kRows {
	return func(w []byte, rb int, a actRow, out []float32) {
		for r := range out {
			out[r] = dot(w[r*rb:], a)
		}
	}
}

// q5 returns value j (< 32) of a Q5_0/Q5_1 block's nibbles qs and fifth
// bits h.
func q5(qs []byte, h uint32, j int) int32 {
	if j < 16 {
		return int32(qs[j]&15) | int32(h>>j&1)<<4
	}
	return int32(qs[j-16]>>4) | int32(h>>j&1)<<4
}

const (
	q4_1Bytes   = 20
	q5_0Bytes   = 22
	q5_1Bytes   = 24
	iq4NLBytes  = 18
	q2KBytes    = 84
	q3KBytes    = 110
	q4KBytes    = 144
	q5KBytes    = 176
	q6KBytes    = 210
	iq4XSBytes  = 136
	superBlocks = kernels.QKK
)

func dotQ4_1Go(w []byte, a actRow) float32 {
	var sum, summ float32
	for b, dy := range a.d {
		blk := w[b*q4_1Bytes : (b+1)*q4_1Bytes]
		x := a.q[b*32 : b*32+32]
		var s int32
		for j, c := range blk[4:20] {
			s += int32(c&15)*int32(x[j]) + int32(c>>4)*int32(x[j+16])
		}
		sum = qblock(sum, s, f16le(blk), dy)
		summ += f16le(blk[2:]) * a.s[b]
	}
	return sum + summ
}

func dotQ5_0Go(w []byte, a actRow) float32 {
	var sum float32
	for b, dy := range a.d {
		blk := w[b*q5_0Bytes : (b+1)*q5_0Bytes]
		h := binary.LittleEndian.Uint32(blk[2:])
		qs := blk[6:22]
		x := a.q[b*32 : b*32+32]
		var s int32
		for j := range 32 {
			s += (q5(qs, h, j) - 16) * int32(x[j])
		}
		sum = qblock(sum, s, f16le(blk), dy)
	}
	return sum
}

func dotQ5_1Go(w []byte, a actRow) float32 {
	var sum, summ float32
	for b, dy := range a.d {
		blk := w[b*q5_1Bytes : (b+1)*q5_1Bytes]
		h := binary.LittleEndian.Uint32(blk[4:])
		qs := blk[8:24]
		x := a.q[b*32 : b*32+32]
		var s int32
		for j := range 32 {
			s += q5(qs, h, j) * int32(x[j])
		}
		sum = qblock(sum, s, f16le(blk), dy)
		summ += f16le(blk[2:]) * a.s[b]
	}
	return sum + summ
}

func dotIQ4NLGo(w []byte, a actRow) float32 {
	var sum float32
	for b, dy := range a.d {
		blk := w[b*iq4NLBytes : (b+1)*iq4NLBytes]
		x := a.q[b*32 : b*32+32]
		var s int32
		for j, c := range blk[2:18] {
			s += int32(kernels.IQ4NLValues[c&15])*int32(x[j]) + int32(kernels.IQ4NLValues[c>>4])*int32(x[j+16])
		}
		sum = qblock(sum, s, f16le(blk), dy)
	}
	return sum
}

// dot16 returns Σ v[i]·x[i] over 16 values.
func dot16(v []int8, x []int8) int32 {
	x = x[:16]
	var s int32
	for i, c := range v[:16] {
		s += int32(c) * int32(x[i])
	}
	return s
}

func dotQ2KGo(w []byte, a actRow) float32 {
	var sum float32
	var v [superBlocks]int8
	for b, dy := range a.d {
		blk := w[b*q2KBytes : (b+1)*q2KBytes]
		kernels.Q2KValues(blk, &v)
		x := a.q[b*256 : b*256+256]
		var isum, msum int32
		for j, sc := range blk[:16] {
			isum += int32(sc&15) * dot16(v[16*j:], x[16*j:])
			msum += int32(sc>>4) * int32(a.bs[b*16+j])
		}
		sum += dy*f16le(blk[80:])*float32(isum) - dy*f16le(blk[82:])*float32(msum)
	}
	return sum
}

func dotQ3KGo(w []byte, a actRow) float32 {
	var sum float32
	var v [superBlocks]int8
	for b, dy := range a.d {
		blk := w[b*q3KBytes : (b+1)*q3KBytes]
		kernels.Q3KValues(blk, &v)
		sc := kernels.ScalesQ3K(blk[96:108])
		x := a.q[b*256 : b*256+256]
		var isum int32
		for j := range 16 {
			isum += int32(sc[j]) * dot16(v[16*j:], x[16*j:])
		}
		sum += f16le(blk[108:]) * dy * float32(isum)
	}
	return sum
}

// dotQ45K is the dot product of Q4_K (q5 false) or Q5_K rows. It calls
// the value decoders directly, not through a function value, so that v
// stays on the stack.
func dotQ45K(w []byte, a actRow, bytes int, q5 bool) float32 {
	var sum float32
	var v [superBlocks]int8
	for b, dy := range a.d {
		blk := w[b*bytes : (b+1)*bytes]
		if q5 {
			kernels.Q5KValues(blk, &v)
		} else {
			kernels.Q4KValues(blk, &v)
		}
		x := a.q[b*256 : b*256+256]
		var isum, msum int32
		for j := range 8 {
			sc, m := kernels.ScaleMinK4(j, blk[4:16])
			isum += int32(sc) * (dot16(v[32*j:], x[32*j:]) + dot16(v[32*j+16:], x[32*j+16:]))
			msum += int32(m) * (int32(a.bs[b*16+2*j]) + int32(a.bs[b*16+2*j+1]))
		}
		sum += dy*f16le(blk)*float32(isum) - dy*f16le(blk[2:])*float32(msum)
	}
	return sum
}

func dotQ4KGo(w []byte, a actRow) float32 { return dotQ45K(w, a, q4KBytes, false) }
func dotQ5KGo(w []byte, a actRow) float32 { return dotQ45K(w, a, q5KBytes, true) }

func dotQ6KGo(w []byte, a actRow) float32 {
	var sum float32
	var v [superBlocks]int8
	for b, dy := range a.d {
		blk := w[b*q6KBytes : (b+1)*q6KBytes]
		kernels.Q6KValues(blk, &v)
		x := a.q[b*256 : b*256+256]
		var isum int32
		for j := range 16 {
			isum += int32(int8(blk[192+j])) * dot16(v[16*j:], x[16*j:])
		}
		sum += f16le(blk[208:]) * dy * float32(isum)
	}
	return sum
}

func dotIQ4XSGo(w []byte, a actRow) float32 {
	var sum float32
	for b, dy := range a.d {
		blk := w[b*iq4XSBytes : (b+1)*iq4XSBytes]
		x := a.q[b*256 : b*256+256]
		var isum int32
		for j := range 8 {
			var s int32
			for i, c := range blk[8+16*j : 8+16*j+16] {
				s += int32(kernels.IQ4NLValues[c&15])*int32(x[32*j+i]) + int32(kernels.IQ4NLValues[c>>4])*int32(x[32*j+16+i])
			}
			isum += int32(kernels.ScaleIQ4XS(blk, j)) * s
		}
		sum += f16le(blk) * dy * float32(isum)
	}
	return sum
}

// matmulK is MatMul for the types of this file.
func (b *Backend) matmulK(d, xt, wt *Tensor) {
	b.quantizeK(xt, actFormatOf(wt.dt), kX4[wt.dt] != nil && !wt.x8)
	b.runK(d, xt, wt)
}

// matmulManyK is MatMulMany when every weight is of a type of this file
// with one activation format (a Q4_K_M layer mixes Q4_K and Q6_K, both
// Q8_K): x is quantized once for all of them. It reports whether it did
// the work.
func (b *Backend) matmulManyK(dsts []kernels.Tensor, xt *Tensor, ws []kernels.Tensor) bool {
	if len(ws) < 2 {
		return false
	}
	f, x4 := actFormatOf(tensor(ws[0], "MatMulMany").dt), false
	for i, w := range ws {
		wt, d := tensor(w, "MatMulMany"), writable(dsts[i], "MatMulMany")
		if actFormatOf(wt.dt) != f || f == actNone || wt.cols != xt.cols || d.rows != xt.rows || d.cols != wt.rows {
			return false
		}
		x4 = x4 || kX4[wt.dt] != nil && !wt.x8
	}
	if xt.rows == 0 || xt.cols == 0 {
		return false // MatMul's own handling of empty shapes
	}
	b.quantizeK(xt, f, x4)
	if b.runManyK(dsts, xt, ws) {
		return true
	}
	for i, w := range ws {
		b.runK(writable(dsts[i], "MatMulMany"), xt, tensor(w, "MatMulMany"))
	}
	return true
}

// kManyTask runs MatMulMany's weights in the ×8 layout as one range of
// rows, so the workers share them out at once and wait once, not once per
// weight (a layer's q, k and v are three small MatMuls otherwise).
type kManyTask struct {
	parts []kMatTask
	start []int
}

func (t *kManyTask) run(wk, lo, hi int) {
	for i := range t.parts {
		p := &t.parts[i]
		s := t.start[i]
		if a, e := max(lo, s), min(hi, s+p.w.rows); a < e {
			p.run(wk, a-s, e-s)
		}
	}
}

// runManyK runs the products of ws from the activations quantizeK left in
// b.kact as one kManyTask, where every weight is in the ×8 layout, or
// rewritten into it chunk by chunk (legacyx8.go), with whole groups of
// rows (so chunks of whole groups stay aligned); it reports false, having
// done nothing, otherwise.
func (b *Backend) runManyK(dsts []kernels.Tensor, xt *Tensor, ws []kernels.Tensor) bool {
	for _, w := range ws {
		if wt := tensor(w, "MatMulMany"); !wt.x8 && !legacyX8(wt.dt, xt.rows) || wt.rows%x8Rows != 0 {
			return false
		}
	}
	t := &b.kmany
	t.parts, t.start = t.parts[:0], t.start[:0]
	total := 0
	for i, w := range ws {
		wt := tensor(w, "MatMulMany")
		t.parts = append(t.parts, kMatTask{b: b, a: &b.kact, dst: writable(dsts[i], "MatMulMany"), w: wt, dot: kDots[wt.dt], dotN: kDotsN[wt.dt]})
		t.start = append(t.start, total)
		total += wt.rows
	}
	grain := total
	if xt.rows*total*xt.cols >= splitWork {
		grain = max(x8Rows, min(64, total/(b.threads*8))&^(x8Rows-1))
	}
	b.pool.run(t, total, grain)
	clear(t.parts)
	return true
}

// quantizeK quantizes x into b.kact in format f, also in the x4 layout
// when x4 is set and there are four rows or more.
func (b *Backend) quantizeK(xt *Tensor, f actFormat, x4 bool) {
	n, k := xt.rows, xt.cols
	nb := k / f.blockLen()
	a := &b.kact
	a.f, a.k = f, k
	if cap(a.q) < n*k {
		a.q = make([]int8, n*k)
	}
	if cap(a.d) < n*nb {
		a.d = make([]float32, n*nb)
	}
	a.q, a.d = a.q[:n*k], a.d[:n*nb]
	switch f {
	case actQ8_1:
		if cap(a.s) < n*nb {
			a.s = make([]float32, n*nb)
		}
		a.s = a.s[:n*nb]
	case actQ8K:
		if cap(a.bs) < n*k/16 {
			a.bs = make([]int16, n*k/16)
		}
		a.bs = a.bs[:n*k/16]
	}
	a.c = nil
	if x8Bias && legacyX8Act(f, n) {
		if cap(b.kc) < n*nb {
			b.kc = make([]int32, n*nb)
		}
		a.c = b.kc[:n*nb]
	}
	a.g = nil
	if x4 && n >= 4 {
		ng := n / 4 * (k / superBlocks) * x4Record
		if cap(b.kg) < ng {
			b.kg = make([]byte, ng)
		}
		a.g = b.kg[:ng]
	}
	b.kq = kQuantTask{a: a, x: xt}
	b.pool.run(&b.kq, n, max(1, 16384/k))
	b.kq = kQuantTask{}
}

// runK computes d = x·wᵀ from the activations quantizeK left in b.kact.
func (b *Backend) runK(d, xt, wt *Tensor) {
	n, k, m := xt.rows, xt.cols, wt.rows
	x4 := kX4[wt.dt]
	if b.kact.g == nil || wt.x8 {
		x4 = nil
	}
	b.kmm = kMatTask{b: b, a: &b.kact, dst: d, w: wt, dot: kDots[wt.dt], dotN: kDotsN[wt.dt], x4: x4}
	grain := m
	if n*m*k >= splitWork {
		grain = min(64, max(4, m/(b.threads*8)))
		if wt.x8 || legacyX8(wt.dt, n) {
			grain = max(x8Rows, grain&^(x8Rows-1)) // whole groups
		}
	}
	b.pool.run(&b.kmm, m, grain)
	b.kmm = kMatTask{}
}

type kQuantTask struct {
	a *kAct
	x *Tensor
}

func (t *kQuantTask) run(_, lo, hi int) {
	full := 0
	if t.a.g != nil {
		full = t.x.rows / 4 * 4
	}
	for r := lo; r < hi; r++ {
		t.a.quantize(r, t.x.row(r))
		if t.a.c != nil {
			nb := t.a.k / kernels.QK
			blockSumsB(t.a.c[r*nb:(r+1)*nb], t.a.q[r*t.a.k:(r+1)*t.a.k])
		}
		if r < full {
			t.a.spread(r)
		}
	}
}

type kMatTask struct {
	b    *Backend
	a    *kAct
	dst  *Tensor
	w    *Tensor
	dot  kRows
	dotN kRowsN
	x4   func(w, g []byte, nb int, out *[4]float32)
}

// run computes output columns [lo, hi) for every row: the chunk's weight
// rows (a few KB) stay in cache while the activation rows pass them, four
// at a time where an x4 kernel exists, up to kRowsNMax where a kDotsN one
// does.
func (t *kMatTask) run(wk, lo, hi int) {
	if t.w.x8 {
		t.runX8(wk, lo, hi)
		return
	}
	if legacyX8(t.w.dt, t.dst.rows) {
		t.runLegacyX8(wk, lo, hi)
		return
	}
	n, m := t.dst.rows, t.dst.cols
	out := t.dst.f32
	rb := t.w.rowBytes
	w := t.w.raw[lo*rb:]
	r := 0
	if t.x4 != nil {
		nb := t.a.k / superBlocks
		o4 := &t.b.scratch[wk].o4
		for ; r+4 <= n; r += 4 {
			g := t.a.group(r / 4)
			for o := lo; o < hi; o++ {
				t.x4(t.w.rawRow(o), g, nb, o4)
				out[r*m+o], out[(r+1)*m+o], out[(r+2)*m+o], out[(r+3)*m+o] = o4[0], o4[1], o4[2], o4[3]
			}
		}
	}
	if t.dotN != nil {
		for ; n-r >= 2; r += kRowsNMax {
			t.dotN(w, rb, t.a, r, min(kRowsNMax, n-r), out[r*m+lo:], m, hi-lo)
		}
	}
	for ; r < n; r++ {
		t.dot(w, rb, t.a.row(r), out[r*m+lo:r*m+hi])
	}
}

// kX8 holds, per type, the kernel for weights in the ×8 layout (pack.go):
// out[a·os+r] = the dot product of weight row r of the groups w (m rows,
// nb super-blocks each) with activation row a0+a of act, for r < m and
// a < na ≤ maxRowsN, each with the bits of kDotsGo (useAsm fills it; a
// type without an entry runs kX8Go).
var kX8 map[kernels.DType]kX8Kernel

// kX8MaxRows holds, for a type whose kX8 kernel takes fewer activation rows
// a pass than maxRowsN, that number: the Q4_K and Q5_K kernels take four,
// since their int16 sums of a sub-block's eight words need a register per
// row; Q6_K's sums of a word pair need one at a time, so the words of a
// pair are unpacked once for eight rows, which saves a sixth of the work
// of eight rows.
var kX8MaxRows map[kernels.DType]int

// kX8Rows returns how many activation rows dt's kX8 kernel takes a pass.
func kX8Rows(dt kernels.DType) int {
	if n, ok := kX8MaxRows[dt]; ok {
		return n
	}
	return maxRowsN
}

// kX8Kernel is a kernel of kX8; sc is the calling worker's scratch.
type kX8Kernel func(sc *workerScratch, dt kernels.DType, w []byte, m, nb int, act *kAct, a0, na int, out []float32, os int)

// runX8 is run for weights in the ×8 layout: kX8Rows activation rows a
// kernel call (fewer in the last) against the chunk's groups, which stay
// in cache for the next rows.
func (t *kMatTask) runX8(wk, lo, hi int) {
	n, m := t.dst.rows, t.dst.cols
	nb := t.a.k / superBlocks
	w := t.w.groupBytes(lo, hi)
	kern := kX8[t.w.dt]
	rows := kX8Rows(t.w.dt)
	for r := 0; r < n; r += rows {
		na := min(rows, n-r)
		if kern == nil {
			kern = kX8Go
		}
		kern(&t.b.scratch[wk], t.w.dt, w, hi-lo, nb, t.a, r, na, t.dst.f32[r*m+lo:], m)
	}
}

// kX8Go is the ×8 layout's Go kernel: each weight row put back in GGML's
// layout (in the worker's scratch) and given to the Go reference.
func kX8Go(sc *workerScratch, dt kernels.DType, w []byte, m, nb int, act *kAct, a0, na int, out []float32, os int) {
	rb := nb * x8BlockBytes(dt)
	if cap(sc.kx8) < rb {
		sc.kx8 = make([]byte, rb)
	}
	row := sc.kx8[:rb]
	dot := kDotsGo[dt]
	for r := range m {
		unpackX8Row(row, w, dt, nb, r)
		for a := range na {
			out[a*os+r] = dot(row, act.row(a0+a))
		}
	}
}
