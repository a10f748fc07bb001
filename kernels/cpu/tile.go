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
const (
	tileRows  = 8                // activation rows per tile
	tileW     = 4                // weight rows per tile
	tileBlock = 8 * 4 * tileRows // bytes per tile and block: 8 groups of 4 bytes per row
	tileOut   = tileRows * tileW // outputs per kernel call
)

// tileMinRows is the batch from which the tiled kernels beat the x4 ones:
// below it, padding the tile to eight rows wastes more than it saves.
const tileMinRows = 4

// q8TileStore and q4TileStore, when not nil, compute four weight rows (the
// rows stride bytes apart, starting at w) against groups (1 or 2)
// consecutive eight-row activation tiles of nb blocks (xp, xd in the tile
// layout) and store activation row l's four results at
// out[l·ostride:l·ostride+4], for l < nrows. Nil means MatMul uses the x4
// kernels instead.
var q8TileStore, q4TileStore tileStoreFunc

type tileStoreFunc func(w []byte, stride int, xp []byte, xd []float32, nb, groups int, out []float32, ostride, nrows int)

// tileStoreGo is the reference for the store kernels, built on a Go tile
// kernel.
func tileStoreGo(tile func([]byte, int, []byte, []float32, int, *[tileOut]float32)) tileStoreFunc {
	return func(w []byte, stride int, xp []byte, xd []float32, nb, groups int, out []float32, ostride, nrows int) {
		var o [tileOut]float32
		for g := range groups {
			tile(w, stride, xp[g*nb*tileBlock:], xd[g*nb*tileRows:], nb, &o)
			for l := range min(tileRows, nrows-g*tileRows) {
				r := out[(g*tileRows+l)*ostride:]
				for c := range tileW {
					r[c] = o[c*tileRows+l]
				}
			}
		}
	}
}

// quantTile quantizes row r of x (r may be past the last row, for padding)
// into the tile layout: xp and xd are the row's group's slices, tmp and td
// scratch for one row.
func quantTile(xp []byte, xd []float32, r int, x *Tensor, tmp []int8, td []float32) {
	if r < x.rows {
		quantLane(xp, xd, r%tileRows, x.row(r), tmp, td)
		return
	}
	clear(td)
	clear(tmp)
	spreadTile(xp, xd, r%tileRows, tmp, td)
}

// spreadTile stores lane l of a tile: one row quantized to q (int8 values,
// never −128) and xd (its block scales).
func spreadTile(xp []byte, xd []float32, l int, q []int8, d []float32) {
	for b := range d {
		xd[b*tileRows+l] = d[b]
		blk := xp[b*tileBlock : (b+1)*tileBlock]
		qb := q[b*32 : b*32+32]
		for g := range 8 {
			u := blk[g*32+4*l : g*32+4*l+4]
			for c := range 4 {
				u[c] = byte(qb[4*g+c]) ^ 0x80 // x+128
			}
		}
	}
}

// q8TileGo sets out[8j+l] to the dot product of Q8_0 weight row j (the
// rows stride bytes apart, starting at w) with row l of an eight-row
// activation tile: the reference for q8TileStore.
func q8TileGo(w []byte, stride int, xp []byte, xd []float32, nb int, out *[tileOut]float32) {
	var s [tileOut]float32
	for j := range tileW {
		wr := w[j*stride:]
		for b := range nb {
			blk := wr[b*q8Bytes : (b+1)*q8Bytes]
			dw := f16(blk)
			tileBlockDot(&s, j, blk[2:2+32], xp[b*tileBlock:(b+1)*tileBlock], dw, xd[b*tileRows:(b+1)*tileRows])
		}
	}
	*out = s
}

// q4TileGo is q8TileGo for Q4_0 weights.
func q4TileGo(w []byte, stride int, xp []byte, xd []float32, nb int, out *[tileOut]float32) {
	var s [tileOut]float32
	var v [32]byte
	for j := range tileW {
		wr := w[j*stride:]
		for b := range nb {
			blk := wr[b*q4Bytes : (b+1)*q4Bytes]
			for i, c := range blk[2 : 2+16] {
				v[i] = byte(int8(c&15) - 8)
				v[i+16] = byte(int8(c>>4) - 8)
			}
			tileBlockDot(&s, j, v[:], xp[b*tileBlock:(b+1)*tileBlock], f16(blk), xd[b*tileRows:(b+1)*tileRows])
		}
	}
	*out = s
}

// tileBlockDot adds weight row j's block (32 signed bytes q, scale dw) times
// the tile's eight rows of that block to s[8j:8j+8].
func tileBlockDot(s *[tileOut]float32, j int, q, blk []byte, dw float32, xd []float32) {
	for l := range tileRows {
		var acc int32
		for g := range 8 {
			for c := range 4 {
				wv := int32(int8(q[4*g+c]))
				acc += wv * (int32(blk[g*32+4*l+c]) - 128)
			}
		}
		s[8*j+l] += float32(acc) * (dw * xd[l])
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
	tilesOff tileMode = iota // the x4 kernels for every batch
	tilesGo                  // the Go tile kernels (tests: the tile path on any CPU)
	tilesAsm                 // the VNNI tile kernels, where the CPU has them
)

// useTiles sets q8TileStore and q4TileStore (and, with the VNNI kernels,
// dotQ4s) for mode and reports whether tiled
// kernels are now in use. Like useAsm it must not be called while a backend
// is running.
func useTiles(mode tileMode) bool {
	q8TileStore, q4TileStore = nil, nil
	dotQ4s = nil
	switch {
	case mode == tilesGo:
		q8TileStore, q4TileStore = tileStoreGo(q8TileGo), tileStoreGo(q4TileGo)
	case mode == tilesAsm && haveVNNI:
		setVNNI()
	}
	return q8TileStore != nil
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
