package cpu

// Element-wise kernels of the row ops and of activation quantization. Like
// the dot kernels (dot.go), each has a Go version, the reference and the
// fallback, and useAsm points the variables at the fastest one.
var (
	// quantRowQ8 quantizes x (a whole number of 32-value blocks) to Q8_0
	// with scale max|x|/127 per block, into xq and xd.
	quantRowQ8 func(xq []int8, xd []float32, x []float32)
	// quantLane quantizes x as quantRowQ8 does into lane l of a tile
	// (tile.go): a is the lane's group, tmp and td scratch for one row.
	quantLane func(a tileAct, l int, x []float32, tmp []int8, td []float32)
	// siluMul sets d[i] = silu(g[i])·u[i]; len(g), len(u) ≥ len(d).
	siluMul func(d, g, u []float32)
	// scaleMul sets d[i] = x[i]·s·w[i]; len(x), len(w) ≥ len(d).
	scaleMul func(d, x, w []float32, s float32)
	// quantRowQ8K quantizes x (a whole number of 256-value super-blocks)
	// to Q8_K as quantRowQ8KGo does, into xq, xd and the sums per 16 bs.
	quantRowQ8K func(xq []int8, xd []float32, bs []int16, x []float32)
)

func useVecGo() {
	quantRowQ8, quantLane = quantRowQ8Go, quantLaneGo
	quantRowQ8K = quantRowQ8KGo
	siluMul, scaleMul = siluMulGo, scaleMulGo
}

func quantLaneGo(a tileAct, l int, x []float32, tmp []int8, td []float32) {
	quantRowQ8Go(tmp, td, x)
	spreadTile(a, l, tmp, td)
}

func siluMulGo(d, g, u []float32) {
	g, u = g[:len(d)], u[:len(d)]
	for i, v := range g {
		d[i] = v / (1 + expf(-v)) * u[i]
	}
}

func scaleMulGo(d, x, w []float32, s float32) {
	x, w = x[:len(d)], w[:len(d)]
	for i, v := range x {
		d[i] = v * s * w[i]
	}
}
