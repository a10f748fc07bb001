package cpu

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/specgate/specgate/kernels"
)

// quantInput is a row of nb blocks that exercises the quantizer's corners:
// an all-zero block, a block whose scale is exactly 1 (ties at .5), a
// denormal block and otherwise random values.
func quantInput(r *rand.Rand, nb int) []float32 {
	x := randVec(r, nb*kernels.QK)
	if nb > 1 {
		clear(x[32:64])
	}
	if nb > 2 {
		for i := 64; i < 96; i++ {
			x[i] = float32(r.IntN(255)-127) / 2
		}
		x[64] = 127
	}
	if nb > 3 {
		for i := 96; i < 128; i++ {
			x[i] = math.Float32frombits(uint32(r.IntN(100)))
		}
	}
	return x
}

// The vector quantizers must give exactly the Go ones' bytes and scales:
// tests elsewhere compare batched results with unbatched ones bit for bit.
func TestQuantAsm(t *testing.T) {
	asmKernels(t)
	r := rand.New(rand.NewPCG(11, 12))
	for _, nb := range []int{1, 2, 3, 4, 5, 24, 64} {
		x := quantInput(r, nb)
		hq, hd := make([]int8, len(x)), make([]float32, nb)
		wq, wd := make([]int8, len(x)), make([]float32, nb)
		quantRowQ8(hq, hd, x)
		quantRowQ8Go(wq, wd, x)
		if !slices.Equal(hq, wq) || !slices.Equal(hd, wd) {
			t.Fatalf("quantRowQ8 nb=%d: asm and Go differ", nb)
		}
		for _, signed := range []bool{false, true} {
			for l := range tileRows {
				h, w := newTileAct(1, nb, signed), newTileAct(1, nb, signed)
				quantLane(h, l, x, make([]int8, len(x)), make([]float32, nb))
				quantLaneGo(w, l, x, make([]int8, len(x)), make([]float32, nb))
				if !slices.Equal(h.xp, w.xp) || !slices.Equal(h.xd, w.xd) || !slices.Equal(h.xc, w.xc) {
					t.Fatalf("quantLane signed=%v nb=%d lane %d: asm and Go differ", signed, nb, l)
				}
			}
		}
	}
}

func TestRowKernelsAsm(t *testing.T) {
	asmKernels(t)
	r := rand.New(rand.NewPCG(13, 14))
	for _, n := range floatLens {
		g, u, w := randVec(r, n), randVec(r, n+3), randVec(r, n+1)
		for i := range g {
			g[i] *= 20 // reach both tails of the sigmoid
		}
		if n > 2 {
			g[0], g[1] = -100, 100
		}
		have, want := make([]float32, n), make([]float32, n)
		siluMul(have, g, u)
		siluMulGo(want, g, u)
		for i := range want {
			if !closeTo(have[i], want[i], float32(math.Abs(float64(g[i]*u[i])))) {
				t.Fatalf("siluMul n=%d [%d] silu(%g)·%g: have %g; want %g", n, i, g[i], u[i], have[i], want[i])
			}
		}
		scaleMul(have, g, w, 0.3)
		scaleMulGo(want, g, w, 0.3)
		if !slices.Equal(have, want) {
			t.Fatalf("scaleMul n=%d: asm and Go differ", n)
		}
	}
}

// TestTileStoreKernels checks the VNNI kernels for one and two row groups,
// one and several tiles, and every count of rows to store against the Go
// tile kernels, that two groups give each group's one-group results bit
// for bit (the same operations in the same order), and that nothing
// outside the stored rows and columns changes.
func TestTileStoreKernels(t *testing.T) {
	initTables()
	defer useAsm(true)
	if !useTiles(tilesAsm) {
		t.Skip("no VNNI tile kernels on this CPU")
	}
	r := rand.New(rand.NewPCG(15, 16))
	const maxTiles = 3
	for _, dt := range []kernels.DType{kernels.Q8_0, kernels.Q4_0} {
		asm, ref := tileStoreKernel(dt), tileStoreGo(q8TileGo)
		if dt == kernels.Q4_0 {
			ref = tileStoreGo(q4TileGo)
		}
		for _, nb := range []int{1, 2, 5, 24} {
			rb := nb * dt.BlockBytes()
			stride := rb + 5
			w := make([]byte, (maxTiles*tileW-1)*stride+rb)
			for j := range maxTiles * tileW {
				copy(w[j*stride:], randBlocks(r, dt, nb, nb == 2))
			}
			act := newTileAct(2, nb, signedTiles(dt))
			for g := range 2 {
				for l := range tileRows {
					q, d := make([]int8, nb*32), make([]float32, nb)
					for i := range q {
						q[i] = int8(r.IntN(255) - 127)
					}
					for i := range d {
						d[i] = r.Float32() * 0.02
					}
					spreadTile(act.group(g, nb), l, q, d)
				}
			}
			const ostride = maxTiles*tileW + 3
			for ntiles := 1; ntiles <= maxTiles; ntiles++ {
				one := make([]float32, 16*ostride)
				asm(w, stride, act, nb, 1, one, ostride, tileRows, ntiles)
				asm(w, stride, act.group(1, nb), nb, 1, one[tileRows*ostride:], ostride, tileRows, ntiles)
				for groups := 1; groups <= 2; groups++ {
					for nrows := 1; nrows <= groups*tileRows; nrows++ {
						have, want := make([]float32, 16*ostride), make([]float32, 16*ostride)
						for i := range have {
							have[i], want[i] = -1, -1
						}
						asm(w, stride, act, nb, groups, have, ostride, nrows, ntiles)
						ref(w, stride, act, nb, groups, want, ostride, nrows, ntiles)
						for i := range have {
							stored := i/ostride < nrows && i%ostride < ntiles*tileW
							if stored && (have[i] != one[i] || !sameBits(have[i], want[i])) || !stored && have[i] != -1 {
								t.Fatalf("%v nb=%d groups=%d nrows=%d ntiles=%d: out[%d] = %g; one group gives %g, Go %g",
									dt, nb, groups, nrows, ntiles, i, have[i], one[i], want[i])
							}
						}
					}
				}
			}
		}
	}
}

// TestDotRows checks the many-row kernels against the one-row Go
// kernels, bit for bit, rows padded apart, over whole groups of eight and
// partial ones, and that they write only their len(out) results.
func TestDotRows(t *testing.T) {
	asmKernels(t)
	r := rand.New(rand.NewPCG(19, 20))
	for _, k := range []struct {
		dt    kernels.DType
		rows  func([]byte, int, []int8, []float32, []float32)
		oneGo func([]byte, []int8, []float32) float32
	}{{kernels.Q8_0, dotQ8Rows, dotQ8Go}, {kernels.Q4_0, dotQ4Rows, dotQ4Go}} {
		for _, nb := range []int{0, 1, 2, 3, 24} {
			for _, rows := range []int{1, 2, 5, 8, 13, 16, 19} {
				rb := nb*k.dt.BlockBytes() + 3
				w := make([]byte, rows*rb)
				for j := range rows {
					copy(w[j*rb:], randBlocks(r, k.dt, nb, j == 1))
				}
				xq, xd := make([]int8, nb*32), make([]float32, nb)
				for i := range xq {
					xq[i] = int8(r.IntN(255) - 127)
				}
				for i := range xd {
					xd[i] = r.Float32() * 0.02
				}
				out := make([]float32, rows+1)
				out[rows] = -1
				k.rows(w, rb, xq, xd, out[:rows])
				for j := range rows {
					if want := k.oneGo(w[j*rb:], xq, xd); !sameBits(out[j], want) {
						t.Errorf("%v nb=%d rows=%d row %d: have %g; want %g", k.dt, nb, rows, j, out[j], want)
					}
				}
				if out[rows] != -1 {
					t.Errorf("%v nb=%d rows=%d: wrote past its rows", k.dt, nb, rows)
				}
			}
		}
	}
}
