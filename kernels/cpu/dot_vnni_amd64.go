//go:build amd64 && !noasm

package cpu

import (
	"golang.org/x/sys/cpu"
)

// haveVNNI reports whether this CPU runs the AVX-512 VNNI kernels: the
// tiled ones in dot_vnni_amd64.s, in 256-bit (VL) forms only (eight
// activation rows fill a 256-bit accumulator), and the ×8 ones in
// q8x8b_vnni_amd64.s and q4x8_vnni_amd64.s.
var haveVNNI = haveAsm && cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW &&
	cpu.X86.HasAVX512VL && cpu.X86.HasAVX512VNNI

func setVNNI() {
	q8TileStore, q4TileStore = q8TileStoreAsm, q4TileStoreAsm
}

//go:noescape
func q8Tile8VNNI(w *byte, stride int, xp *byte, xd *float32, nb int, out *float32, ostride, nrows, ntiles int)

//go:noescape
func q4Tile8VNNI(w *byte, stride int, xp *byte, xd *float32, nb int, out *float32, ostride, nrows, ntiles int, xc *int32)

//go:noescape
func q8Tile16VNNI(w *byte, stride int, xp *byte, xd *float32, nb int, out *float32, ostride, nrows, ntiles int)

//go:noescape
func q4Tile16VNNI(w *byte, stride int, xp *byte, xd *float32, nb int, out *float32, ostride, nrows, ntiles int, xc *int32)

func q8TileStoreAsm(w []byte, stride int, a tileAct, nb, groups int, out []float32, ostride, nrows, ntiles int) {
	checkTileStore(w, stride, q8Bytes, a, nb, groups, out, ostride, nrows, ntiles)
	if groups == 1 {
		q8Tile8VNNI(&w[0], stride, &a.xp[0], &a.xd[0], nb, &out[0], ostride, nrows, ntiles)
		return
	}
	q8Tile16VNNI(&w[0], stride, &a.xp[0], &a.xd[0], nb, &out[0], ostride, nrows, ntiles)
}

func q4TileStoreAsm(w []byte, stride int, a tileAct, nb, groups int, out []float32, ostride, nrows, ntiles int) {
	checkTileStore(w, stride, q4Bytes, a, nb, groups, out, ostride, nrows, ntiles)
	_ = a.xc[groups*nb*tileRows-1] // the signed layout
	if groups == 1 {
		q4Tile8VNNI(&w[0], stride, &a.xp[0], &a.xd[0], nb, &out[0], ostride, nrows, ntiles, &a.xc[0])
		return
	}
	q4Tile16VNNI(&w[0], stride, &a.xp[0], &a.xd[0], nb, &out[0], ostride, nrows, ntiles, &a.xc[0])
}

// checkTileStore panics unless the kernels' reads and writes are in
// bounds: the assembly trusts these lengths.
func checkTileStore(w []byte, stride, blockBytes int, a tileAct, nb, groups int, out []float32, ostride, nrows, ntiles int) {
	if nb <= 0 || groups < 1 || groups > 2 || nrows < 1 || nrows > groups*tileRows || ntiles < 1 || ostride < ntiles*tileW {
		panic("cpu: tile kernel: bad shape")
	}
	_, _, _ = w[(ntiles*tileW-1)*stride+nb*blockBytes-1], a.xp[groups*nb*tileBlock-1], a.xd[groups*nb*tileRows-1]
	_ = out[(nrows-1)*ostride+ntiles*tileW-1]
}

//go:noescape
func dotQ8X8BVNNI(w *byte, xq *int8, xs int, xd *float32, xc *int32, nb int, out *float32, os int, ngroups, na int)

//go:noescape
func dotQ8X8B2VNNI(w *byte, xq *int8, xs int, xd *float32, xc *int32, nb int, out *float32, os int, npairs, na int)
