package cpu

import "github.com/specgate/specgate/kernels"

// Tiled quantized MatMul for batches: one kernel call computes a 4×8 tile
// of outputs, four weight rows against eight activation rows, so every
// weight byte loaded from memory meets eight rows and every activation byte
// four weight rows.
//
// The kernels are built for VPDPBUSD (AVX-512 VNNI), which multiplies
// unsigned bytes by signed bytes and adds each group of four products into
// an int32 lane. The lanes of an accumulator are the eight activation rows:
// a 4-byte group of a weight block is broadcast to all lanes and multiplied
// by the same group of the eight rows, so a block's eight group products
// leave each row's whole block sum in its own lane, with no horizontal adds.
// The weights are the signed operand; the activations must be unsigned, so
// they are stored as u = x+128 (x is never −128), and Σu·w = Σx·w + 128·Σw.
// The correction 128·Σw is the same for the eight rows: the kernels compute
// it once per weight block, with one more VPDPBUSD against bytes of 128.
//
// Tile layout of the activations (built once per MatMul call by quantTile):
// rows are grouped by eight (a group past the last row is padded with rows
// of zeros, scale 0), and for each group and 32-value block there are 256
// bytes: for each of the block's eight 4-byte groups g, 32 bytes, row l's
// four u at 4l. The scales of the group's rows for block b are eight
// float32s at xd[8b:8b+8].
//
// Q4_0 weights need no correction from the weight side: their nibbles
// (0-15, the value plus 8) can be the unsigned operand, with the
// activations signed. Their kernels take the signed layout (xc not nil):
// the same places hold x itself, and xc[8b+l] = 8·Σx of row l's block b,
// by which Σ nib·x exceeds the wanted Σ (nib−8)·x. It is the same for the
// four weight rows, and computed once per row when the tile is built.
const (
	tileRows  = 8                // activation rows per tile
	tileW     = 4                // weight rows per tile
	tileBlock = 8 * 4 * tileRows // bytes per tile and block: 8 groups of 4 bytes per row
	tileOut   = tileRows * tileW // outputs per kernel call
)

// tileMinRows is the batch from which the tiled kernels beat the multi-row
// ones (dotQ8RowsN): below it, padding the tile to eight rows wastes more
// than it saves. The AVX2 tiles raise it (setTilesAVX2).
var tileMinRows = 4

// q8TileStore and q4TileStore, when not nil, compute ntiles tiles of four
// weight rows (the rows stride bytes apart, starting at w) against groups
// (1 or 2) consecutive eight-row activation tiles of nb blocks (a) and
// store activation row l's results for weight row c at out[l·ostride+c],
// for l < nrows and c < 4·ntiles. Nil means MatMul uses the multi-row kernels
// instead.
var q8TileStore, q4TileStore tileStoreFunc

// q8TileSigned says q8TileStore reads the signed layout (the AVX2 kernels),
// not u = x+128 (the VNNI ones).
var q8TileSigned bool

// signedTiles reports whether the tile kernels for dt read the signed
// layout.
func signedTiles(dt kernels.DType) bool {
	return dt == kernels.Q4_0 || dt == kernels.Q8_0 && q8TileSigned
}

type tileStoreFunc func(w []byte, stride int, a tileAct, nb, groups int, out []float32, ostride, nrows, ntiles int)

// tileAct is activations in the tile layout: the bytes xp, the scales xd
// and, in the signed layout, the corrections xc.
type tileAct struct {
	xp []byte
	xd []float32
	xc []int32 // nil in the u = x+128 layout
}

// newTileAct allocates groups row groups of nb blocks, in the signed
// layout or the u = x+128 one.
func newTileAct(groups, nb int, signed bool) tileAct {
	np, nd := tileBytes(groups*tileRows, nb)
	a := tileAct{xp: make([]byte, np), xd: make([]float32, nd)}
	if signed {
		a.xc = make([]int32, nd)
	}
	return a
}

// group returns the part of a from row group g on, for nb blocks a row.
func (a tileAct) group(g, nb int) tileAct {
	h := tileAct{xp: a.xp[g*nb*tileBlock:], xd: a.xd[g*nb*tileRows:]}
	if a.xc != nil {
		h.xc = a.xc[g*nb*tileRows:]
	}
	return h
}

// tileStoreGo is the reference for the store kernels, built on a Go tile
// kernel.
func tileStoreGo(tile func([]byte, int, tileAct, int, *[tileOut]float32)) tileStoreFunc {
	return func(w []byte, stride int, a tileAct, nb, groups int, out []float32, ostride, nrows, ntiles int) {
		var o [tileOut]float32
		for j := range ntiles {
			for g := range groups {
				tile(w[j*tileW*stride:], stride, a.group(g, nb), nb, &o)
				for l := range min(tileRows, nrows-g*tileRows) {
					r := out[(g*tileRows+l)*ostride+j*tileW:]
					for c := range tileW {
						r[c] = o[c*tileRows+l]
					}
				}
			}
		}
	}
}

// quantTile quantizes row r of x (r may be past the last row, for padding)
// into the tile layout: a is the row's group, tmp and td scratch for one
// row.
func quantTile(a tileAct, r int, x *Tensor, tmp []int8, td []float32) {
	if r < x.rows {
		quantLane(a, r%tileRows, x.row(r), tmp, td)
		return
	}
	clear(td)
	clear(tmp)
	spreadTile(a, r%tileRows, tmp, td)
}

// spreadTile stores lane l of a tile: one row quantized to q (int8 values,
// never −128) and d (its block scales).
func spreadTile(a tileAct, l int, q []int8, d []float32) {
	flip := byte(0x80) // x+128
	if a.xc != nil {
		flip = 0
	}
	for b := range d {
		a.xd[b*tileRows+l] = d[b]
		blk := a.xp[b*tileBlock : (b+1)*tileBlock]
		qb := q[b*32 : b*32+32]
		if a.xc != nil {
			var s int32
			for _, v := range qb {
				s += int32(v)
			}
			a.xc[b*tileRows+l] = 8 * s
		}
		for g := range 8 {
			u := blk[g*32+4*l : g*32+4*l+4]
			for c := range 4 {
				u[c] = byte(qb[4*g+c]) ^ flip
			}
		}
	}
}

// q8TileGo sets out[8j+l] to the dot product of Q8_0 weight row j (the
// rows stride bytes apart, starting at w) with row l of an eight-row
// activation tile: the reference for q8TileStore.
func q8TileGo(w []byte, stride int, a tileAct, nb int, out *[tileOut]float32) {
	var s [tileOut]float32
	var v [32]int32
	for j := range tileW {
		wr := w[j*stride:]
		for b := range nb {
			blk := wr[b*q8Bytes : (b+1)*q8Bytes]
			for i, c := range blk[2 : 2+32] {
				v[i] = int32(int8(c))
			}
			tileBlockDot(&s, j, &v, a, b, f16(blk), false)
		}
	}
	*out = s
}

// q4TileGo is q8TileGo for Q4_0 weights, with the activations in the
// signed layout.
func q4TileGo(w []byte, stride int, a tileAct, nb int, out *[tileOut]float32) {
	var s [tileOut]float32
	var v [32]int32
	for j := range tileW {
		wr := w[j*stride:]
		for b := range nb {
			blk := wr[b*q4Bytes : (b+1)*q4Bytes]
			for i, c := range blk[2 : 2+16] {
				v[i], v[i+16] = int32(c&15), int32(c>>4) // the nibbles, as the kernel takes them
			}
			tileBlockDot(&s, j, &v, a, b, f16(blk), true)
		}
	}
	*out = s
}

// tileBlockDot adds weight row j's block b (32 values q, scale dw) times the
// tile's eight rows of that block to s[8j:8j+8]: the kernels' integer sums,
// less xc when nib (q holds Q4_0 nibbles, 8 over their values), scaled as
// canon.go defines.
func tileBlockDot(s *[tileOut]float32, j int, q *[32]int32, a tileAct, b int, dw float32, nib bool) {
	blk := a.xp[b*tileBlock : (b+1)*tileBlock]
	for l := range tileRows {
		var acc int32
		for g := range 8 {
			for c := range 4 {
				x := int32(blk[g*32+4*l+c]) - 128
				if a.xc != nil {
					x = int32(int8(blk[g*32+4*l+c]))
				}
				acc += q[4*g+c] * x
			}
		}
		if nib {
			acc -= a.xc[b*tileRows+l]
		}
		s[8*j+l] = qblock(s[8*j+l], acc, dw, a.xd[b*tileRows+l])
	}
}

// tileBytes returns the sizes of the tile layout for n rows of nb blocks.
func tileBytes(n, nb int) (xp, xd int) {
	groups := (n + tileRows - 1) / tileRows
	return groups * nb * tileBlock, groups * nb * tileRows
}

// tileMode chooses the batch kernels for quantized weights.
type tileMode int

const (
	tilesOff tileMode = iota // the multi-row kernels for every batch
	tilesGo                  // the Go tile kernels (tests: the tile path on any CPU)
	tilesAsm                 // the VNNI tile kernels, else the AVX2 ones, where the CPU has them
)

// useTiles sets q8TileStore and q4TileStore for mode and reports whether
// tiled kernels are now in use. Like useAsm it must not be called while a
// backend is running.
func useTiles(mode tileMode) bool {
	q8TileStore, q4TileStore = nil, nil
	q8TileSigned = false
	tileMinRows = 4
	switch {
	case mode == tilesGo:
		q8TileStore, q4TileStore = tileStoreGo(q8TileGo), tileStoreGo(q4TileGo)
	case mode == tilesAsm && haveVNNI:
		setVNNI()
	case mode == tilesAsm && haveAsm:
		setTilesAVX2()
	}
	return q8TileStore != nil
}

// tileKernel returns the storing tiled kernel for the weight w in GGML's
// layout, or nil. Weights in the ×8 layout take the multi-row kernels at
// every batch: with nothing left to transpose they cost less than the
// tiles even for prefill. On an AVX2-only host (BenchmarkX8Layout,
// 2816×1024, one thread) 128 rows took 6.0 ms against 8.4 on the AVX2
// tiles, 512 rows 24 against 35. On a Zen 5 host (one thread, the matrix
// products of a ~100M Q8_0 model, biased weights) the VNNI multi-row
// kernel took 9.1 ms for 16 rows against 11.8 on VNNI tiles reading the
// ×8 layout (since removed), 64 rows 30 against 43, 512 rows 280 against
// 414; two threads, 16 rows 13.4 ms against 15.6 and 128 rows 81 against
// 117.
func tileKernel(w *Tensor) tileStoreFunc {
	if w.x8 {
		return nil
	}
	return tileStoreKernel(w.dt)
}

// tileStoreKernel returns the storing tiled kernel for weight type dt, or
// nil.
func tileStoreKernel(dt kernels.DType) tileStoreFunc {
	switch dt {
	case kernels.Q8_0:
		return q8TileStore
	case kernels.Q4_0:
		return q4TileStore
	}
	return nil
}
