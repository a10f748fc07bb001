package cpu

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"testing"

	"github.com/specgate/specgate/kernels"
)

// The assembly kernels are checked against the Go ones on random data,
// lengths around every unrolling boundary, and extreme quantized values.

func asmKernels(t *testing.T) {
	t.Helper()
	if !useAsm(true) {
		t.Skip("no assembly kernels on this CPU")
	}
	initTables()
}

// sameBits reports whether have and want are the same float32 (any NaN
// matching any NaN): the kernels follow one arithmetic (canon.go).
func sameBits(have, want float32) bool {
	return math.Float32bits(have) == math.Float32bits(want) || have != have && want != want
}

func closeTo(have, want, mag float32) bool {
	return math.Abs(float64(have-want)) <= 1e-5*float64(mag)+1e-6
}

var floatLens = []int{0, 1, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 100, 768, 1029}

func TestDotF32Asm(t *testing.T) {
	asmKernels(t)
	r := rand.New(rand.NewPCG(1, 2))
	for _, n := range floatLens {
		a, b := randVec(r, n), randVec(r, n+3)
		have, want := dotF32(a, b), dotF32Go(a, b)
		if !sameBits(have, want) {
			t.Errorf("dotF32 n=%d: have %g; want %g", n, have, want)
		}
	}
}

// TestGemmF32 checks every tile shape and edge of gemmF32 (the weight rows
// left over a multiple of four, the activation rows over three, the tail
// under a vector, several passes and spans of k, plain and packed weight
// rows) against dotF32Go, output by output, bit for bit: an output must not
// depend on the tile it falls in.
func TestGemmF32(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	var sc gemmScratch
	for _, asm := range []bool{false, true} {
		if asm && !haveAsm {
			continue
		}
		useAsm(asm)
		for _, k := range append(floatLens, 260, 1024, 2048) {
			for _, mw := range []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 15, 16, 17, 19} {
				for _, nx := range []int{1, 2, 3, 4, 5, 6, 7, 32, 34, 37} {
					w, x := randVec(r, mw*k), randVec(r, nx*k)
					wp, xp := make([]float32, len(w)), make([]float32, len(x))
					for i := range mw {
						gemmPackRow(wp, mw, i, w[i*k:(i+1)*k])
					}
					for j := range nx {
						gemmPackRow(xp, nx, j, x[j*k:(j+1)*k])
					}
					for _, packed := range [][2]bool{{false, false}, {true, false}, {false, true}, {true, true}} {
						name := fmt.Sprintf("asm=%v packed=%v k=%d %d×%d", asm, packed, k, mw, nx)
						ldo := mw + 3
						out := make([]float32, nx*ldo)
						for i := range out {
							out[i] = 9
						}
						wa, xa := w, x
						if packed[0] {
							wa = wp
						}
						if packed[1] {
							xa = xp
						}
						gemmF32(out, ldo, wa, packed[0], mw, xa, packed[1], nx, k, &sc)
						for j := range nx {
							for i := range ldo {
								have := out[j*ldo+i]
								if i >= mw {
									if have != 9 {
										t.Fatalf("%s: wrote past row %d at %d", name, j, i)
									}
									continue
								}
								if want := dotF32Go(w[i*k:(i+1)*k], x[j*k:(j+1)*k]); !sameBits(have, want) {
									t.Fatalf("%s: out[%d][%d] = %g; want %g", name, j, i, have, want)
								}
							}
						}
					}
				}
			}
		}
	}
	useAsm(true)
}

// TestGemmF32Groups checks gemmF32Groups as TestGemmF32 checks gemmF32:
// the weight rows left over a multiple of eight and of four, groups of
// activation rows short and odd, several passes of them and spans of k,
// the tails under a vector, against dotF32Go output by output, bit for
// bit, and nothing written past the outputs.
func TestGemmF32Groups(t *testing.T) {
	asmKernels(t)
	if gemmF32Groups == nil {
		t.Skip("no grouped F32 kernels on this CPU")
	}
	r := rand.New(rand.NewPCG(5, 6))
	var sc gemmScratch
	for _, k := range append(floatLens, 260, 2048, 2056, 4100) {
		for _, mw := range []int{1, 2, 3, 4, 5, 7, 8, 9, 12, 13, 16, 19, 23} {
			for _, nx := range []int{1, 2, 3, 4, 5, 6, 7, 11, 12, 13, 47, 48, 50, 55} {
				if (k > 1100 || nx > 13) && mw%4 != 3 {
					continue // the large ones at a few widths, to keep the test short
				}
				w, x := randVec(r, mw*k), randVec(r, nx*k)
				xg := make([]float32, gemmGroupsLen(nx, k))
				for i := range xg {
					xg[i] = float32(math.NaN()) // every float the layout has is written
				}
				for j := range nx {
					gemmPackGroupRow(xg, nx, j, x[j*k:(j+1)*k])
				}
				name := fmt.Sprintf("k=%d %d×%d", k, mw, nx)
				ldo := mw + 3
				out := make([]float32, (nx+1)*ldo)
				for i := range out {
					out[i] = 9
				}
				gemmF32Groups(out, ldo, w, mw, xg, x, nx, k, &sc)
				for j := range nx + 1 {
					for i := range ldo {
						have := out[j*ldo+i]
						if i >= mw || j >= nx {
							if have != 9 {
								t.Fatalf("%s: wrote out[%d][%d], past the outputs", name, j, i)
							}
							continue
						}
						if want := dotF32Go(w[i*k:(i+1)*k], x[j*k:(j+1)*k]); !sameBits(have, want) {
							t.Fatalf("%s: out[%d][%d] = %g; want %g", name, j, i, have, want)
						}
					}
				}
			}
		}
	}
}

func TestAxpyAsm(t *testing.T) {
	asmKernels(t)
	r := rand.New(rand.NewPCG(3, 4))
	for _, n := range floatLens {
		y, x := randVec(r, n), randVec(r, n+5)
		want := append([]float32(nil), y...)
		axpyGo(want, 0.37, x)
		axpy(y, 0.37, x)
		for i := range y {
			if !closeTo(y[i], want[i], 2) {
				t.Fatalf("axpy n=%d [%d]: have %g; want %g", n, i, y[i], want[i])
			}
		}
	}
}

func TestF16RowAsm(t *testing.T) {
	asmKernels(t)
	r := rand.New(rand.NewPCG(5, 6))
	for _, n := range floatLens {
		src := make([]byte, 2*n)
		for i := range n {
			// Every bit pattern, NaNs and subnormals included.
			binary.LittleEndian.PutUint16(src[2*i:], uint16(r.Uint32()))
		}
		have, want := make([]float32, n), make([]float32, n)
		f16Row(have, src)
		f16RowGo(want, src)
		for i := range have {
			if math.Float32bits(have[i]) != math.Float32bits(want[i]) && !(have[i] != have[i] && want[i] != want[i]) {
				t.Fatalf("f16Row n=%d [%d] (%#04x): have %g; want %g", n, i, binary.LittleEndian.Uint16(src[2*i:]), have[i], want[i])
			}
		}
	}
}

func TestQuantDotAsm(t *testing.T) {
	asmKernels(t)
	r := rand.New(rand.NewPCG(7, 8))
	type kern struct {
		dt         kernels.DType
		one, oneGo func([]byte, []int8, []float32) float32
	}
	ks := []kern{
		{kernels.Q8_0, dotQ8, dotQ8Go},
		{kernels.Q4_0, dotQ4, dotQ4Go},
	}
	for _, k := range ks {
		for _, nb := range []int{0, 1, 2, 3, 5, 24, 96, 97} {
			for _, mode := range []string{"random", "extreme"} {
				t.Run(fmt.Sprintf("%v/nb=%d/%s", k.dt, nb, mode), func(t *testing.T) {
					w := randBlocks(r, k.dt, nb, mode == "extreme")
					xq := make([]int8, nb*32)
					xd := make([]float32, nb)
					for i := range xq {
						xq[i] = int8(r.IntN(255) - 127)
						if mode == "extreme" {
							xq[i] = []int8{127, -127, 0}[r.IntN(3)]
						}
					}
					for i := range xd {
						xd[i] = r.Float32() * 0.02
					}
					have, want := k.one(w, xq, xd), k.oneGo(w, xq, xd)
					if !sameBits(have, want) {
						t.Errorf("one row: have %g; want %g", have, want)
					}
				})
			}
		}
	}
}

// randBlocks returns nb random blocks of dt; extreme ones use the largest
// magnitudes the format holds (Q8_0's -128 included).
func randBlocks(r *rand.Rand, dt kernels.DType, nb int, extreme bool) []byte {
	size := dt.BlockBytes()
	out := make([]byte, nb*size)
	for b := range nb {
		blk := out[b*size : (b+1)*size]
		binary.LittleEndian.PutUint16(blk, kernels.F32ToF16(r.Float32()*0.1-0.05))
		for i := 2; i < size; i++ {
			blk[i] = byte(r.Uint32())
			if extreme {
				blk[i] = []byte{0x80, 0x7f, 0x00, 0xff, 0x0f, 0xf0}[r.IntN(6)]
			}
		}
	}
	return out
}

// TestMatMulPackedRows checks MatMul on F32 weights whose rows are packed
// (k a multiple of 512, gemmPackMinRows activation rows or more, several
// passes of activation rows and chunks of weight rows across three
// workers) against each row alone, which is not packed, bit for bit; and
// on a CPU with gemmF32Groups, the same with the activation rows grouped,
// and packed under the AVX2 kernels.
func TestMatMulPackedRows(t *testing.T) {
	defer useAsm(true)
	for _, avx2 := range []bool{false, true} {
		if avx2 && !useAVX2() {
			continue
		}
		t.Run(fmt.Sprintf("avx2=%v", avx2), testMatMulPackedRows)
	}
}

func testMatMulPackedRows(t *testing.T) {
	b := open(t, 3)
	r := rand.New(rand.NewPCG(7, 8))
	// k spans one whole span of the packed layout and a partial one, so an
	// error in the span arithmetic shows.
	const m, k, n = 90, 1536, gemmPackMinRows + 7
	if !gemmPackRows(k, n) || gemmPackRows(k, 1) {
		t.Fatalf("the test's shapes no longer choose packing for the batch alone")
	}
	data, _ := kernels.Quantize(kernels.F32, randVec(r, m*k))
	w, err := b.Weights(kernels.F32, m, k, data)
	if err != nil {
		t.Fatal(err)
	}
	xv := randVec(r, n*k)
	x, all := b.Alloc(n, k), b.Alloc(n, m)
	b.Upload(x, xv)
	b.MatMul(all, x, w)
	have := make([]float32, n*m)
	b.Download(have, all)
	x1, one := b.Alloc(1, k), b.Alloc(1, m)
	want := make([]float32, m)
	for j := range n {
		b.Upload(x1, xv[j*k:(j+1)*k])
		b.MatMul(one, x1, w)
		b.Download(want, one)
		for i := range m {
			if !sameBits(have[j*m+i], want[i]) {
				t.Fatalf("row %d output %d: %g in the batch, %g alone", j, i, have[j*m+i], want[i])
			}
		}
	}
}

func randVec(r *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = r.Float32()*2 - 1
	}
	return v
}

func absDot(a, b []float32) float32 {
	var s float32
	for i := range a {
		s += float32(math.Abs(float64(a[i] * b[i])))
	}
	return s
}

// expf flushes results below the smallest normal float32 to zero.
func TestExpf(t *testing.T) {
	for x := float32(-90); x <= 88.7; x += 0.0137 {
		have, want := expf(x), math.Exp(float64(x))
		if math.Abs(float64(have)-want) > 4e-7*want+1.2e-38 || math.IsInf(float64(have), 0) {
			t.Fatalf("expf(%g): have %g; want %g", x, have, want)
		}
	}
	for _, tc := range []struct{ x, want float32 }{
		{float32(math.Inf(-1)), 0}, {-1000, 0}, {0, 1},
	} {
		if have := expf(tc.x); have != tc.want {
			t.Errorf("expf(%g): have %g; want %g", tc.x, have, tc.want)
		}
	}
	if have := expf(float32(math.Inf(1))); !math.IsInf(float64(have), 1) {
		t.Errorf("expf(+Inf): have %g; want +Inf", have)
	}
	if have := expf(float32(math.NaN())); have == have {
		t.Errorf("expf(NaN): have %g; want NaN", have)
	}
}

// TestTileKernels checks the Go tile kernels against the one-row Go kernels,
// and the VNNI ones (where the CPU has them, as a single row group) against
// the Go tile kernels.
func TestTileKernels(t *testing.T) {
	initTables()
	defer useAsm(true)
	r := rand.New(rand.NewPCG(9, 10))
	type kern struct {
		dt     kernels.DType
		one    func([]byte, []int8, []float32) float32
		tileGo func([]byte, int, tileAct, int, *[tileOut]float32)
	}
	ks := []kern{
		{kernels.Q8_0, dotQ8Go, q8TileGo},
		{kernels.Q4_0, dotQ4Go, q4TileGo},
	}
	for _, k := range ks {
		for _, nb := range []int{0, 1, 2, 3, 5, 24, 97} {
			for _, mode := range []string{"random", "extreme"} {
				t.Run(fmt.Sprintf("%v/nb=%d/%s", k.dt, nb, mode), func(t *testing.T) {
					rb := nb * k.dt.BlockBytes()
					stride := rb + 7 // rows need not be adjacent
					w := make([]byte, 3*stride+rb)
					for i := range w {
						w[i] = 0xff // the gaps: NaN scales if read
					}
					for j := range tileW {
						copy(w[j*stride:], randBlocks(r, k.dt, nb, mode == "extreme"))
					}
					act := newTileAct(1, nb, signedTiles(k.dt))
					var want [tileOut]float32
					for l := range tileRows {
						q, d := make([]int8, nb*32), make([]float32, nb)
						for i := range q {
							q[i] = int8(r.IntN(255) - 127)
							if mode == "extreme" {
								q[i] = []int8{127, -127, 0}[r.IntN(3)]
							}
						}
						for i := range d {
							d[i] = r.Float32() * 0.02
						}
						spreadTile(act, l, q, d)
						for j := range tileW {
							want[j*tileRows+l] = k.one(w[j*stride:j*stride+rb], q, d)
						}
					}
					check := func(name string, have *[tileOut]float32) {
						for i := range have {
							if !sameBits(have[i], want[i]) {
								t.Errorf("%s: out[%d] (weight row %d, row %d): have %g; want %g", name, i, i/tileRows, i%tileRows, have[i], want[i])
							}
						}
					}
					have := [tileOut]float32{9}
					k.tileGo(w, stride, act, nb, &have)
					check("go", &have)
					if nb > 0 && useTiles(tilesAsm) {
						// The store kernels write row l's four results
						// at out[4l:4l+4]; check wants out[8j+l].
						var st [tileOut]float32
						tileStoreKernel(k.dt)(w, stride, act, nb, 1, st[:], tileW, tileRows, 1)
						for l := range tileRows {
							for j := range tileW {
								have[j*tileRows+l] = st[l*tileW+j]
							}
						}
						check("vnni", &have)
						// Stride 0: one row, as all four.
						tileStoreKernel(k.dt)(w[:rb], 0, act, nb, 1, st[:], tileW, tileRows, 1)
						for i, v := range st {
							if want0 := want[i/tileW]; !sameBits(v, want0) {
								t.Errorf("stride 0: out[%d]: have %g; want %g", i, v, want0)
							}
						}
					}
				})
			}
		}
	}
}

func TestHeadsAsm(t *testing.T) {
	asmKernels(t)
	r := rand.New(rand.NewPCG(5, 6))
	for _, hd := range []int{4, 8, 16, 24, 64, 128} {
		for _, g := range []struct{ nh, group int }{{1, 1}, {3, 1}, {4, 2}, {8, 4}, {12, 12}, {5, 5}} {
			name := fmt.Sprintf("hd=%d/nh=%d/group=%d", hd, g.nh, g.group)
			kvh := (g.nh-1)/g.group + 1
			q, k := randVec(r, g.nh*hd), randVec(r, kvh*hd)
			have, want := make([]float32, g.nh), make([]float32, g.nh)
			dotsF32(q, k, hd, g.group, have)
			dotsF32Go(q, k, hd, g.group, want)
			for h := range want {
				if !closeTo(have[h], want[h], absDot(q[h*hd:(h+1)*hd], k[(h/g.group)*hd:])) {
					t.Errorf("dotsF32 %s head %d: have %g; want %g", name, h, have[h], want[h])
				}
			}
			w, v := randVec(r, g.nh), randVec(r, kvh*hd)
			y := randVec(r, g.nh*hd)
			wantY := append([]float32(nil), y...)
			axpysF32(y, w, v, hd, g.group)
			axpysF32Go(wantY, w, v, hd, g.group)
			for i := range y {
				if !closeTo(y[i], wantY[i], 4) {
					t.Fatalf("axpysF32 %s element %d: have %g; want %g", name, i, y[i], wantY[i])
				}
			}
		}
	}
}

// TestQuantRowQ8Rounding checks the fast rounding against math.RoundToEven
// on ties, near-ties and the ends of the range, and the scales against
// ggml's half-precision ones.
func TestQuantRowQ8Rounding(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	x := make([]float32, 32*64)
	for i := range x {
		switch i % 4 {
		case 0:
			x[i] = float32(r.NormFloat64())
		case 1:
			x[i] = float32(r.IntN(255)-127) / 2 // ties at .5 once scaled by 1
		default:
			x[i] = float32(r.Float64()*254 - 127)
		}
	}
	x[0], x[32] = 127, -127 // a block's absmax gives scale exactly 1
	q, d := make([]int8, len(x)), make([]float32, len(x)/32)
	quantRowQ8(q, d, x)
	for b := range d {
		if d[b] == 0 {
			continue
		}
		var amax float32
		for _, v := range x[b*32 : (b+1)*32] {
			amax = max(amax, abs32(v))
		}
		if want := kernels.F16ToF32(kernels.F32ToF16(amax / 127)); d[b] != want {
			t.Fatalf("block %d: scale %g; want %g (max|x|/127 in half precision)", b, d[b], want)
		}
		id := 127 / amax // as ggml, not 1/d
		for i := b * 32; i < (b+1)*32; i++ {
			if want := int8(math.RoundToEven(float64(x[i] * id))); q[i] != want {
				t.Fatalf("element %d (%g·%g): have %d; want %d", i, x[i], id, q[i], want)
			}
		}
	}
}

func TestFMA32(t *testing.T) {
	r := rand.New(rand.NewPCG(31, 32))
	exact := func(a, b, c float32) float32 {
		x := new(big.Float).SetPrec(2000).SetFloat64(float64(a))
		x.Mul(x, new(big.Float).SetPrec(2000).SetFloat64(float64(b)))
		x.Add(x, new(big.Float).SetPrec(2000).SetFloat64(float64(c)))
		f, _ := x.Float32()
		return f
	}
	check := func(a, b, c float32) {
		if have, want := fma32(a, b, c), exact(a, b, c); !sameBits(have, want) {
			t.Fatalf("fma32(%g, %g, %g) = %g; want %g", a, b, c, have, want)
		}
	}
	for range 200000 {
		a := math.Float32frombits(r.Uint32() & 0x3fffffff) // finite, no overflow
		b := math.Float32frombits(r.Uint32() & 0x3fffffff)
		c := math.Float32frombits(r.Uint32() & 0xbfffffff)
		check(a, b, c)
		check(a, b, -c)
		check(float32(r.IntN(1<<20)-1<<19), r.Float32()*1e-3, r.Float32()*10-5)
	}
	// Small products next to 1: the float64 sum is exact, no tie.
	a := float32(1 + 0x1p-23)
	b := float32(0x1p-24)
	check(a, b, 1)
	check(-a, b, -1)
	check(a, -b, 1)
	// A real tie: a·b + c = 1+2⁻²³ + 2⁻²⁴ − 2⁻⁷⁰ rounds in float64 to
	// exactly halfway between two float32s, and only the dropped −2⁻⁷⁰
	// says to round down (plain float32(s) would round up to 1+2⁻²²).
	check(1+0x1p-23, (1-0x1p-23)*0x1p-24, 1+0x1p-23)
	check(-(1 + 0x1p-23), (1-0x1p-23)*0x1p-24, -(1 + 0x1p-23))
	if got := fma32(1+0x1p-23, (1-0x1p-23)*0x1p-24, 1+0x1p-23); got != 1+0x1p-23 {
		t.Errorf("fma32 at a tie = %v; want 1+2⁻²³", got)
	}
	check(0, 5, -0.0)
	check(-0.0, 5, 0)
}

// TestRowsNAsm checks the multi-row kernels against the Go ones bit for
// bit, and against each activation row computed alone by the batch-1
// kernels: every weight-row count around the groups of eight (partial
// groups, fewer than eight rows in all), every activation-row count, rows
// with padding between them, and extreme values.
func TestRowsNAsm(t *testing.T) {
	asmKernels(t)
	r := rand.New(rand.NewPCG(9, 10))
	type kern struct {
		dt     kernels.DType
		bb     int
		n, nGo func([]byte, int, int, int, int, []int8, []float32, []int32, []float32, int)
		rows   func([]byte, int, []int8, []float32, []float32)
	}
	ks := []kern{
		{kernels.Q8_0, q8Bytes, dotQ8RowsN, dotQ8RowsNGo, dotQ8Rows},
		{kernels.Q4_0, q4Bytes, dotQ4RowsN, dotQ4RowsNGo, dotQ4Rows},
	}
	for _, k := range ks {
		for _, nb := range []int{0, 1, 3, 24} {
			for _, m := range []int{1, 2, 7, 8, 9, 15, 16, 17, 24, 31} {
				for _, mode := range []string{"random", "extreme"} {
					pad := r.IntN(3) * k.bb
					rb := nb*k.bb + pad
					w := randBlocks(r, k.dt, (m*rb+k.bb-1)/k.bb+1, mode == "extreme")
					xq := make([]int8, maxRowsN*nb*32)
					xd := make([]float32, maxRowsN*nb)
					for i := range xq {
						xq[i] = int8(r.IntN(255) - 127)
						if mode == "extreme" {
							xq[i] = []int8{127, -127, 0}[r.IntN(3)]
						}
					}
					for i := range xd {
						xd[i] = r.Float32() * 0.02
					}
					xc := make([]int32, maxRowsN*nb)
					blockSums8(xc, xq)
					for na := 1; na <= maxRowsN; na++ {
						os := m + r.IntN(3)
						have := make([]float32, na*os)
						want := make([]float32, na*os)
						for i := range have {
							have[i], want[i] = 7, 7
						}
						k.n(w, rb, m, nb, na, xq, xd, xc, have, os)
						k.nGo(w, rb, m, nb, na, xq, xd, xc, want, os)
						one := make([]float32, m)
						for a := range na {
							k.rows(w, rb, xq[a*nb*32:(a+1)*nb*32], xd[a*nb:(a+1)*nb], one)
							for i := range os {
								h, g := have[a*os+i], want[a*os+i]
								if i < m && !sameBits(g, one[i]) {
									t.Fatalf("%v nb=%d m=%d na=%d: Go row %d of %d differs from the batch-1 kernel", k.dt, nb, m, na, i, a)
								}
								if !sameBits(h, g) {
									t.Fatalf("%v nb=%d m=%d na=%d %s: out[%d][%d] = %g; want %g", k.dt, nb, m, na, mode, a, i, h, g)
								}
							}
						}
					}
				}
			}
		}
	}
}

// TestShortRowPanics checks that the quantized kernels panic on an
// activation row shorter than its scales say, on every kernel set, rather
// than read past it. The row has no spare capacity, so only a kernel that
// reads past the slice's end could get by without a panic.
func TestShortRowPanics(t *testing.T) {
	initTables()
	defer useAsm(true)
	const nb = 3
	w8, w4 := make([]byte, 8*nb*q8Bytes), make([]byte, 8*nb*q4Bytes)
	xd := make([]float32, nb)
	xc := make([]int32, nb)
	out := make([]float32, 8)
	cases := []struct {
		name string
		f    func(xq []int8)
	}{
		{"blockSums8", func(xq []int8) { blockSums8(xc, xq) }},
		{"blockSumsB", func(xq []int8) { blockSumsB(xc, xq) }},
		{"dotQ8", func(xq []int8) { dotQ8(w8, xq, xd) }},
		{"dotQ4", func(xq []int8) { dotQ4(w4, xq, xd) }},
		{"dotQ8Rows", func(xq []int8) { dotQ8Rows(w8, nb*q8Bytes, xq, xd, out) }},
		{"dotQ4Rows", func(xq []int8) { dotQ4Rows(w4, nb*q4Bytes, xq, xd, out) }},
	}
	for _, asm := range []bool{true, false} {
		useAsm(asm)
		for _, c := range cases {
			t.Run(fmt.Sprintf("%s/asm=%v", c.name, asm), func(t *testing.T) {
				for _, short := range []int{1, 32, nb * 32} {
					xq := make([]int8, nb*32-short)
					xq = xq[:len(xq):len(xq)]
					func() {
						defer func() {
							if recover() == nil {
								t.Errorf("a row %d bytes short: no panic", short)
							}
						}()
						c.f(xq)
					}()
				}
			})
		}
	}
}
