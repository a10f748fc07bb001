//go:build amd64 && !noasm

package cpu

import "github.com/specgate/specgate/kernels"

func setVecAsm() {
	quantRowQ8, quantLane = quantRowQ8Asm, quantLaneAsm
	quantRowQ8K = quantRowQ8KAsm
	siluMul, scaleMul = siluMulAsm, scaleMulAsm
}

//go:noescape
func quantQ8AVX(xq *int8, xd *float32, x *float32, nb int)

//go:noescape
func quantQ8KAVX(xq *int8, xd *float32, bs *int16, x *float32, nb int)

//go:noescape
func quantTileAVX(xp *byte, xd *float32, xc *int32, x *float32, nb int)

//go:noescape
func siluMulAVX(d, gate, u *float32, n int)

//go:noescape
func scaleMulAVX(d, x, w *float32, s float32, n int)

// The wrappers check bounds once and finish tails shorter than a vector.

func quantRowQ8Asm(xq []int8, xd []float32, x []float32) {
	nb := len(xd)
	if nb == 0 {
		return
	}
	_, _ = xq[nb*kernels.QK-1], x[nb*kernels.QK-1]
	quantQ8AVX(&xq[0], &xd[0], &x[0], nb)
}

func quantRowQ8KAsm(xq []int8, xd []float32, bs []int16, x []float32) {
	nb := len(xd)
	if nb == 0 {
		return
	}
	_, _, _ = xq[nb*kernels.QKK-1], bs[nb*16-1], x[nb*kernels.QKK-1]
	quantQ8KAVX(&xq[0], &xd[0], &bs[0], &x[0], nb)
}

func quantLaneAsm(a tileAct, l int, x []float32, _ []int8, _ []float32) {
	nb := len(x) / kernels.QK
	if nb == 0 {
		return
	}
	_, _ = a.xp[(nb-1)*tileBlock+7*32+4*l+3], a.xd[(nb-1)*tileRows+l]
	var xc *int32
	if a.xc != nil {
		_ = a.xc[(nb-1)*tileRows+l]
		xc = &a.xc[l]
	}
	quantTileAVX(&a.xp[4*l], &a.xd[l], xc, &x[0], nb)
}

func siluMulAsm(d, g, u []float32) {
	n := len(d)
	g, u = g[:n], u[:n]
	m := n &^ 7
	if m > 0 {
		siluMulAVX(&d[0], &g[0], &u[0], m)
	}
	siluMulGo(d[m:], g[m:], u[m:])
}

func scaleMulAsm(d, x, w []float32, s float32) {
	n := len(d)
	x, w = x[:n], w[:n]
	m := n &^ 7
	if m > 0 {
		scaleMulAVX(&d[0], &x[0], &w[0], s, m)
	}
	scaleMulGo(d[m:], x[m:], w[m:], s)
}
