//go:build amd64 && !noasm

package cpu

import "golang.org/x/sys/cpu"

// haveVNNI reports whether this CPU runs the tiled AVX-512 VNNI kernels in
// dot_vnni_amd64.s. They use 256-bit (VL) forms only: Zen 4 splits 512-bit
// ops in two, and eight activation rows fill a 256-bit accumulator.
var haveVNNI = haveAsm && cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW &&
	cpu.X86.HasAVX512VL && cpu.X86.HasAVX512VNNI

func setVNNI() { q8Tile, q4Tile = q8TileAsm, q4TileAsm }

//go:noescape
func q8TileVNNI(w *byte, stride int, xp *byte, xd *float32, nb int, out *[tileOut]float32)

//go:noescape
func q4TileVNNI(w *byte, stride int, xp *byte, xd *float32, nb int, out *[tileOut]float32)

// The wrappers check that the four weight rows and the tile hold nb blocks.

func q8TileAsm(w []byte, stride int, xp []byte, xd []float32, nb int, out *[tileOut]float32) {
	if nb == 0 {
		*out = [tileOut]float32{}
		return
	}
	_, _, _ = w[(tileW-1)*stride+nb*q8Bytes-1], xp[nb*tileBlock-1], xd[nb*tileRows-1]
	q8TileVNNI(&w[0], stride, &xp[0], &xd[0], nb, out)
}

func q4TileAsm(w []byte, stride int, xp []byte, xd []float32, nb int, out *[tileOut]float32) {
	if nb == 0 {
		*out = [tileOut]float32{}
		return
	}
	_, _, _ = w[(tileW-1)*stride+nb*q4Bytes-1], xp[nb*tileBlock-1], xd[nb*tileRows-1]
	q4TileVNNI(&w[0], stride, &xp[0], &xd[0], nb, out)
}
