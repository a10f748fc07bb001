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
	if actFormatOf(wt.dt) != actNone {
		b.matmulK(d, xt, wt)
		return
	}
	t := &b.mm
	*t = matmulTask{b: b, dst: d, x: xt, w: wt}
	if isFloat(wt.dt) {
		t.xf, t.xg = b.packFloatInput(xt)
	}
	if tk := tileKernel(wt); tk != nil && n >= tileMinRows {
		t.tile = tk
		t.act = b.tileInput(xt, wt.dt)
		b.pool.run(t, m, b.tileGrain(n, m, k))
		*t = matmulTask{}
		return
	}
	if wt.dt == kernels.Q8_0 || wt.dt == kernels.Q4_0 {
		t.xq, t.xd, t.xc = b.quantInput(xt, wt.dt, wt.x8b)
	}
	b.pool.run(t, m, b.grain(n, m, k))
	*t = matmulTask{}
}

// splitWork is the size (rows × weight rows × width) below which a matrix
// product runs on the calling goroutine alone: a few microseconds of work,
// less than handing half of it to a helper costs. A helper that has gone
// idle must be woken first, which takes longer still: a draft model's
// forward pass (one row, 64 wide) is a string of such products, and
// splitting just its 512-row output one made the pass a third slower than
// leaving it on one core.
const splitWork = 1 << 17

// grain is the chunk of weight rows one worker claims outside the tiled
// kernels: a multiple of 8, since the Q8_0/Q4_0 kernels take weight rows
// eight at a time and a shorter chunk runs all eight lanes anyway.
func (b *Backend) grain(n, m, k int) int {
	if n*m*k < splitWork {
		return m
	}
	return min(64, max(8, m/(b.threads*8))&^7)
}

// quantInput quantizes x to Q8_0 for the Q8_0 and Q4_0 kernels below the
// tiled batch, in the backend's buffers: the values, the block scales and,
// for Q4_0 weights (dt), the blockSums8; for biased Q8_0 weights (bias),
// the blockSumsB.
func (b *Backend) quantInput(xt *Tensor, dt kernels.DType, bias bool) (xq []int8, xd []float32, xc []int32) {
	n, k := xt.rows, xt.cols
	nb := k / kernels.QK
	if cap(b.xq) < n*k {
		b.xq = make([]int8, n*k)
	}
	if cap(b.xd) < n*nb {
		b.xd = make([]float32, n*nb)
	}
	xq, xd = b.xq[:n*k], b.xd[:n*nb]
	// blockSums8's factor for Q4_0, blockSumsB's for biased Q8_0.
	by := int32(8)
	if dt == kernels.Q8_0 {
		by = -128
	}
	if dt == kernels.Q4_0 || dt == kernels.Q8_0 && bias {
		if cap(b.xc) < n*nb {
			b.xc = make([]int32, n*nb)
		}
		xc = b.xc[:n*nb]
	}
	b.qx = quantTask{xq: xq, xd: xd, xc: xc, sumsBy: by, x: xt}
	b.pool.run(&b.qx, n, max(1, 16384/k))
	b.qx = quantTask{}
	return xq, xd, xc
}

// tileInput quantizes x into the tile layout for weights of type dt (the
// signed one where signedTiles says), in the backend's buffers.
func (b *Backend) tileInput(xt *Tensor, dt kernels.DType) tileAct {
	n, k := xt.rows, xt.cols
	nb := k / kernels.QK
	np, nd := tileBytes(n, nb)
	if cap(b.xp) < np {
		b.xp = make([]byte, np)
	}
	if cap(b.xd) < nd {
		b.xd = make([]float32, nd)
	}
	a := tileAct{xp: b.xp[:np], xd: b.xd[:nd]}
	if signedTiles(dt) {
		if cap(b.xc) < nd {
			b.xc = make([]int32, nd)
		}
		a.xc = b.xc[:nd]
	}
	n8 := (n + tileRows - 1) / tileRows * tileRows
	b.qx = quantTask{b: b, act: a, x: xt}
	b.pool.run(&b.qx, n8, max(1, 16384/k))
	b.qx = quantTask{}
	return a
}

// tileGrain is the chunk of weight rows one worker claims: whole tiles, so
// a chunk's last tile is not computed four times over.
func (b *Backend) tileGrain(n, m, k int) int {
	if n*m*k < splitWork {
		return m
	}
	return min(64, max(tileW, m/(b.threads*8))) &^ (tileW - 1)
}

// MatMulMany sets dsts[i] = x · ws[i]ᵀ for every i (kernels.MatMulMany).
// For a batch on the tiled kernels, x is quantized once for all the
// weights and one pass over all their rows balances the workers; otherwise
// it is MatMul per weight.
func (b *Backend) MatMulMany(dsts []kernels.Tensor, x kernels.Tensor, ws []kernels.Tensor) {
	b.live()
	if len(dsts) != len(ws) {
		panic(fmt.Sprintf("cpu: MatMulMany: %d outputs for %d weights", len(dsts), len(ws)))
	}
	xt := f32Tensor(x, "MatMulMany")
	if b.matmulManyK(dsts, xt, ws) || b.matmulManyFloat(dsts, xt, ws) {
		return
	}
	tiled := len(ws) > 0 && xt.rows >= tileMinRows
	for i, w := range ws {
		wt := tensor(w, "MatMulMany")
		d := writable(dsts[i], "MatMulMany")
		tiled = tiled && tileKernel(wt) != nil && wt.dt == tensor(ws[0], "MatMulMany").dt &&
			wt.rows%tileW == 0 && wt.cols == xt.cols && d.rows == xt.rows && d.cols == wt.rows
	}
	if !tiled {
		if !b.matmulManyQuant(dsts, xt, ws) {
			for i := range ws {
				b.MatMul(dsts[i], x, ws[i])
			}
		}
		return
	}
	dt := tensor(ws[0], "MatMulMany").dt
	b.runMany(dsts, xt, ws, matmulTask{tile: tileStoreKernel(dt), act: b.tileInput(xt, dt)})
}

// runMany runs the weights ws as one range of all their rows, so the
// workers share them out at once and wait once, not once per weight. Each
// weight's part is a copy of part (the activations in the kernels' form)
// with its weight and output set; with part.tile set, chunks are whole
// tiles.
func (b *Backend) runMany(dsts []kernels.Tensor, xt *Tensor, ws []kernels.Tensor, part matmulTask) {
	t := &b.many
	t.parts, t.start = t.parts[:0], t.start[:0]
	total := 0
	for i, w := range ws {
		p := part
		p.b, p.x, p.w, p.dst = b, xt, tensor(w, "MatMulMany"), writable(dsts[i], "MatMulMany")
		t.parts = append(t.parts, p)
		t.start = append(t.start, total)
		total += p.w.rows
	}
	grain := b.grain(xt.rows, total, xt.cols)
	if part.tile != nil {
		grain = b.tileGrain(xt.rows, total, xt.cols)
	}
	b.pool.run(t, total, grain)
	clear(t.parts)
}

// matmulManyQuant is MatMulMany for Q8_0 or Q4_0 weights below the tiled
// batch: x quantized once for all the weights, and one pass over all their
// rows, which balances the workers and saves a wait per weight (a layer's
// q, k and v are three small MatMuls otherwise). It reports false, having
// done nothing, where the weights do not allow it.
func (b *Backend) matmulManyQuant(dsts []kernels.Tensor, xt *Tensor, ws []kernels.Tensor) bool {
	if len(ws) < 2 || xt.rows == 0 || xt.cols == 0 {
		return false
	}
	dt := tensor(ws[0], "MatMulMany").dt
	if dt != kernels.Q8_0 && dt != kernels.Q4_0 {
		return false
	}
	for i, w := range ws {
		wt, d := tensor(w, "MatMulMany"), writable(dsts[i], "MatMulMany")
		// Whole groups of eight rows a weight, so that chunks stay aligned
		// to the kernels' groups.
		if wt.dt != dt || wt.cols != xt.cols || wt.rows == 0 || wt.rows%8 != 0 || d.rows != xt.rows || d.cols != wt.rows {
			return false
		}
	}
	bias := false
	for _, w := range ws {
		bias = bias || tensor(w, "MatMulMany").x8b
	}
	xq, xd, xc := b.quantInput(xt, dt, bias)
	b.runMany(dsts, xt, ws, matmulTask{xq: xq, xd: xd, xc: xc})
	return true
}

// matmulManyFloat is MatMulMany for float weights (F32, F16, BF16) of one
// width: one range of all their rows, so the workers share them out at
// once and wait once, not once per weight. It reports false, having done
// nothing, for anything else.
func (b *Backend) matmulManyFloat(dsts []kernels.Tensor, xt *Tensor, ws []kernels.Tensor) bool {
	if len(ws) < 2 || xt.rows == 0 || xt.cols == 0 {
		return false
	}
	for i, w := range ws {
		wt := tensor(w, "MatMulMany")
		d := writable(dsts[i], "MatMulMany")
		if !isFloat(wt.dt) || wt.rows == 0 || wt.cols != xt.cols || d.rows != xt.rows || d.cols != wt.rows {
			return false
		}
	}
	xf, xg := b.packFloatInput(xt)
	b.runMany(dsts, xt, ws, matmulTask{xf: xf, xg: xg})
	return true
}

func isFloat(dt kernels.DType) bool {
	return dt == kernels.F32 || dt == kernels.F16 || dt == kernels.BF16
}

// packFloatInput returns x packed for the F32 kernels, in the backend's
// buffer: as xg, in the grouped layout for gemmF32Groups, where this CPU
// has it and x has gemmGroupMinRows rows or more of a vector or more;
// else as xf, for gemmF32, pass by pass of gemmXRows rows (each pass's
// rows as gemmPackRow lays them out, so a pass is x.f32's slice of the
// same rows); or neither when gemmPackRows says rows of x's width are
// better left as they are.
func (b *Backend) packFloatInput(xt *Tensor) (xf, xg []float32) {
	n, k := xt.rows, xt.cols
	grouped := gemmF32Groups != nil && n >= gemmGroupMinRows && k >= 8
	if !grouped && !gemmPackRows(k, n) {
		return nil, nil
	}
	size := n * k
	if grouped {
		size = gemmGroupsLen(n, k)
	}
	if cap(b.xf) < size {
		b.xf = make([]float32, size)
	}
	p := b.xf[:size]
	b.px = packTask{x: xt, xf: p, grouped: grouped}
	b.pool.run(&b.px, n, max(1, 16384/k))
	b.px = packTask{}
	if grouped {
		return nil, p
	}
	return p, nil
}

// packTask packs rows of x into xf for packFloatInput, in the grouped
// layout when grouped is set.
type packTask struct {
	x       *Tensor
	xf      []float32
	grouped bool
}

func (t *packTask) run(_, lo, hi int) {
	n, k := t.x.rows, t.x.cols
	for j := lo; j < hi; j++ {
		if t.grouped {
			gemmPackGroupRow(t.xf, n, j, t.x.row(j))
			continue
		}
		r0 := j / gemmXRows * gemmXRows
		r1 := min(n, r0+gemmXRows)
		gemmPackRow(t.xf[r0*k:r1*k], r1-r0, j-r0, t.x.row(j))
	}
}

// manyTask runs MatMulMany's weights as one range of rows: every part's
// rows are a whole number of tiles (or of the multi-row kernels' groups of
// eight), so chunks of whole tiles or groups stay aligned.
type manyTask struct {
	parts []matmulTask
	start []int
}

func (t *manyTask) run(wk, lo, hi int) {
	for i := range t.parts {
		p := &t.parts[i]
		s := t.start[i]
		if a, e := max(lo, s), min(hi, s+p.w.rows); a < e {
			p.run(wk, a-s, e-s)
		}
	}
}

type quantTask struct {
	b      *Backend
	xq     []int8
	xd     []float32
	xc     []int32 // the rows' block sums times sumsBy, when not nil
	sumsBy int32
	x      *Tensor
	act    tileAct // the tile layout, when act.xp is not nil
}

func (t *quantTask) run(wk, lo, hi int) {
	k := t.x.cols
	nb := k / kernels.QK
	if t.act.xp != nil {
		sc := &t.b.scratch[wk]
		if cap(sc.qt) < k {
			sc.qt, sc.qd = make([]int8, k), make([]float32, nb)
		}
		for r := lo; r < hi; r++ {
			quantTile(t.act.group(r/tileRows, nb), r, t.x, sc.qt[:k], sc.qd[:nb])
		}
		return
	}
	for r := lo; r < hi; r++ {
		quantRowQ8(t.xq[r*k:(r+1)*k], t.xd[r*nb:(r+1)*nb], t.x.row(r))
		if t.xc != nil {
			blockSums(t.xc[r*nb:(r+1)*nb], t.xq[r*k:(r+1)*k], t.sumsBy)
		}
	}
}

type matmulTask struct {
	b         *Backend
	dst, x, w *Tensor
	xq        []int8
	xd        []float32
	xc        []int32 // the rows' blockSums8 for Q4_0 weights, blockSumsB for biased Q8_0
	// xf, when not nil, holds x packed for gemmF32, and xg, when not nil,
	// x in the grouped layout for gemmF32Groups (packFloatInput).
	xf, xg []float32
	// tile, when not nil, is the tiled kernel, and act the activations
	// in its layout.
	tile tileStoreFunc
	act  tileAct
}

// run computes output columns [lo, hi) (weight rows) for every row of x.
func (t *matmulTask) run(wk, lo, hi int) {
	if t.tile != nil {
		t.runTiles(wk, lo, hi)
		return
	}
	if t.w.dt == kernels.Q8_0 || t.w.dt == kernels.Q4_0 {
		t.runQuant(lo, hi)
		return
	}
	t.runFloat(wk, lo, hi)
}

// runQuant is run for Q8_0 and Q4_0 weights below the tiled kernels' batch:
// up to maxRowsN activation rows against the whole chunk of weight rows in
// one kernel call, which reads each weight block once for all of them;
// the chunk is then in cache for the next rows.
func (t *matmulTask) runQuant(lo, hi int) {
	n, k, m := t.x.rows, t.x.cols, t.w.rows
	nb, rb := k/kernels.QK, t.w.rowBytes
	out := t.dst.f32
	rows := dotQ8RowsN
	if t.w.dt == kernels.Q4_0 {
		rows = dotQ4RowsN
	}
	x8 := dotQ8X8RowsN
	if t.w.dt == kernels.Q4_0 {
		x8 = dotQ4X8RowsN
	}
	for r := 0; r < n; {
		na := rowsSplit(n - r)
		var xc []int32
		if t.xc != nil {
			xc = t.xc[r*nb : (r+na)*nb]
		}
		switch {
		case t.w.x8b:
			dotQ8X8BRowsN(t.w.groupBytes(lo, hi), hi-lo, nb, na, t.xq[r*k:(r+na)*k], t.xd[r*nb:(r+na)*nb], xc, out[r*m+lo:], m)
		case t.w.x8:
			x8(t.w.groupBytes(lo, hi), hi-lo, nb, na, t.xq[r*k:(r+na)*k], t.xd[r*nb:(r+na)*nb], xc, out[r*m+lo:], m)
		default:
			rows(t.w.raw[lo*rb:], rb, hi-lo, nb, na, t.xq[r*k:(r+na)*k], t.xd[r*nb:(r+na)*nb], xc, out[r*m+lo:], m)
		}
		r += na
	}
}

// rowsSplit returns how many of the n activation rows left the next
// multi-row kernel call takes: as even a split as maxRowsN allows, larger
// calls first, since the first pass over a chunk of weight rows waits for
// memory anyway and the ones after it find the chunk in cache.
func rowsSplit(n int) int {
	calls := (n + maxRowsN - 1) / maxRowsN
	return (n + calls - 1) / calls
}

// runFloat is run for F32 weights and those converted to F32 rows (F16,
// BF16): gemmF32 over blocks of activation rows (gemmXBlock), each in
// cache while the chunk's weight rows, converted or packed once, meet it;
// or, where MatMul packed the activation rows in groups (t.xg: from
// gemmGroupMinRows rows on CPUs with gemmF32Groups), those kernels over
// blocks of gemmGroupXBlock rows.
func (t *matmulTask) runFloat(wk, lo, hi int) {
	n, k, m := t.x.rows, t.x.cols, t.w.rows
	out, x := t.dst.f32, t.x.f32
	sc := &t.b.scratch[wk]
	// gemmF32Groups takes the weight rows as they are.
	packed := gemmPackRows(k, n) && t.xg == nil
	var w []float32
	switch {
	case t.w.dt == kernels.F32 && !packed:
		w = t.w.f32[lo*k : hi*k]
	case t.w.dt == kernels.F32:
		w = sc.floats((hi - lo) * k)
		for o := lo; o < hi; o++ {
			gemmPackRow(w, hi-lo, o-lo, t.w.row(o))
		}
	case !packed:
		// The chunk's rows are back to back in both forms, so one call
		// converts them all: a call per row costs more than the
		// conversion where rows are short (a small model's 172-wide
		// F16 rows).
		w = sc.floats((hi - lo) * k)
		convertRow(w, t.w.dt, t.w.raw[lo*t.w.rowBytes:hi*t.w.rowBytes])
	default:
		w = sc.floats((hi - lo) * k)
		if cap(sc.gemm.row) < k {
			sc.gemm.row = make([]float32, k)
		}
		row := sc.gemm.row[:k]
		for o := lo; o < hi; o++ {
			convertRow(row, t.w.dt, t.w.rawRow(o))
			gemmPackRow(w, hi-lo, o-lo, row)
		}
	}
	if t.xg != nil {
		k8, step := k&^7, gemmGroupXBlock(k)
		for r0 := 0; r0 < n; r0 += step {
			r1 := min(n, r0+step)
			gemmF32Groups(out[r0*m+lo:], m, w, hi-lo, t.xg[r0*k8:], x[r0*k:r1*k], r1-r0, k, &sc.gemm)
		}
		return
	}
	if t.xf != nil {
		x = t.xf
	}
	step := gemmXRows
	if t.xf == nil {
		step = gemmXBlock(k)
	}
	for r0 := 0; r0 < n; r0 += step {
		r1 := min(n, r0+step)
		gemmF32(out[r0*m+lo:], m, w, packed, hi-lo, x[r0*k:r1*k], t.xf != nil, r1-r0, k, &sc.gemm)
	}
}

// runTiles is run for the tiled kernels.
func (t *matmulTask) runTiles(wk, lo, hi int) {
	n, k, m := t.x.rows, t.x.cols, t.w.rows
	nb := k / kernels.QK
	out := t.dst.f32
	o := &t.b.scratch[wk].o32
	rb := t.w.rowBytes
	tiles := (hi - lo) / tileW
	// xTile rows at a time, so their tiles stay in cache while the
	// chunk's weight rows stream past.
	for r0 := 0; r0 < n; r0 += xTile {
		r1 := min(n, r0+xTile)
		if tiles > 0 {
			// The chunk's whole tiles of weight rows, in one kernel call
			// for each two row groups while more than eight rows are
			// left (else one): the kernel stores its results.
			w := t.w.raw[lo*rb : (lo+tiles*tileW)*rb]
			for g := r0; g < r1; {
				groups := 1
				if r1-g > tileRows {
					groups = 2
				}
				nrows := min(groups*tileRows, r1-g)
				t.tile(w, rb, t.act.group(g/tileRows, nb), nb, groups, out[g*m+lo:], m, nrows, tiles)
				g += groups * tileRows
			}
		}
		// A partial tile of weight rows: each row alone, as all four
		// (stride 0), so nothing past hi is read, into scratch.
		for jj := lo + tiles*tileW; jj < hi; jj++ {
			w := t.w.raw[jj*rb : jj*rb+rb]
			for g := r0; g < r1; g += tileRows {
				nrows := min(tileRows, r1-g)
				t.tile(w, 0, t.act.group(g/tileRows, nb), nb, 1, o[:], tileW, nrows, 1)
				for l := range nrows {
					out[(g+l)*m+jj] = o[l*tileW]
				}
			}
		}
	}
}
