package cpu

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/specgate/specgate/kernels"
)

// x8Types are the Q8_0-activation types the ×8 layout takes, x8KTypes
// the K-quants it takes.
var (
	x8Types    = []kernels.DType{kernels.Q8_0, kernels.Q4_0}
	x8KTypes   = []kernels.DType{kernels.Q4_K, kernels.Q5_K, kernels.Q6_K}
	x8AllTypes = append(slices.Clone(x8Types), x8KTypes...)
)

// randX8Rows returns m random rows of dt of nb blocks in GGML's layout, and
// the same rows in the ×8 layout. The blocks' bytes are random but for
// their F16 scales, which are small and finite.
func randX8Rows(r *rand.Rand, dt kernels.DType, m, nb int, extreme bool) (rows, x8 []byte) {
	rows = randBlocks(r, dt, m*nb, extreme)
	bb := x8BlockBytes(dt)
	if fs, ok := f16Fields[dt]; ok {
		for b := range m * nb {
			for _, off := range fs {
				binary.LittleEndian.PutUint16(rows[b*bb+off:], kernels.F32ToF16(r.Float32()*0.02-0.01))
			}
		}
	}
	return rows, packX8(dt, m, nb, func(i int) []byte { return rows[i*nb*bb : (i+1)*nb*bb] })
}

// biasedX8 returns a copy of the ×8 Q8_0 bytes x8 biased, as Weights
// stores them under x8Bias.
func biasedX8(x8 []byte) []byte {
	b := slices.Clone(x8)
	biasX8(b)
	return b
}

// randQ8Act returns na quantized activation rows of nb blocks.
func randQ8Act(r *rand.Rand, na, nb int, extreme bool) ([]int8, []float32) {
	xq := make([]int8, na*nb*32)
	xd := make([]float32, na*nb)
	for i := range xq {
		xq[i] = int8(r.IntN(255) - 127)
		if extreme {
			xq[i] = []int8{127, -127, 0}[r.IntN(3)]
		}
	}
	for i := range xd {
		xd[i] = r.Float32() * 0.02
	}
	return xq, xd
}

func TestX8Layout(t *testing.T) {
	initTables()
	r := rand.New(rand.NewPCG(3, 4))
	for _, dt := range x8AllTypes {
		bb, be := x8BlockBytes(dt), x8BlockElems(dt)
		for _, m := range []int{1, 7, 8, 9, 17} {
			for _, nb := range []int{1, 3} {
				rows, x8 := randX8Rows(r, dt, m, nb, false)
				if len(x8) != x8Groups(m)*nb*8*bb {
					t.Fatalf("%v m=%d nb=%d: %d bytes packed", dt, m, nb, len(x8))
				}
				rb := nb * bb
				back := make([]byte, rb)
				want, have := make([]float32, nb*be), make([]float32, nb*be)
				for i := range m {
					unpackX8Row(back, x8, dt, nb, i)
					if !slices.Equal(back, rows[i*rb:(i+1)*rb]) {
						t.Fatalf("%v m=%d nb=%d: row %d does not unpack to itself", dt, m, nb, i)
					}
					convertRow(want, dt, rows[i*rb:(i+1)*rb])
					convertRowX8(have, dt, x8, i, 0)
					if !slices.EqualFunc(have, want, sameBits) {
						t.Fatalf("%v m=%d nb=%d: row %d converts differently", dt, m, nb, i)
					}
					if dt == kernels.Q8_0 {
						convertRowX8(have, dt, biasedX8(x8), i, 0x80)
						if !slices.EqualFunc(have, want, sameBits) {
							t.Fatalf("%v m=%d nb=%d: biased row %d converts differently", dt, m, nb, i)
						}
					}
				}
				// Padding rows are zeros, scales included.
				for i := m; i < x8Groups(m)*x8Rows; i++ {
					unpackX8Row(back, x8, dt, nb, i)
					if slices.ContainsFunc(back, func(c byte) bool { return c != 0 }) {
						t.Fatalf("%v m=%d nb=%d: padding row %d is not zero", dt, m, nb, i)
					}
				}
			}
		}
	}
}

// TestX8Kernels checks the ×8 multi-row kernels, Go and assembly, against
// the Go kernels on the same rows in GGML's layout, bit for bit, for every
// number of activation rows, partial last groups included, and that they
// store nothing past m.
func TestX8Kernels(t *testing.T) {
	initTables()
	defer useAsm(true)
	r := rand.New(rand.NewPCG(11, 12))
	type rowsN func([]byte, int, int, int, []int8, []float32, []int32, []float32, int)
	for _, dt := range x8Types {
		ref := map[kernels.DType]func([]byte, int, int, int, int, []int8, []float32, []int32, []float32, int){
			kernels.Q8_0: dotQ8RowsNGo, kernels.Q4_0: dotQ4RowsNGo}[dt]
		goX8 := map[kernels.DType]rowsN{kernels.Q8_0: dotQ8X8RowsNGo, kernels.Q4_0: dotQ4X8RowsNGo}[dt]
		for _, nb := range []int{0, 1, 2, 3, 5, 24, 97} {
			for _, m := range []int{1, 2, 7, 8, 9, 15, 16, 17, 24, 31, 64} {
				for _, mode := range []string{"random", "extreme"} {
					rows, x8 := randX8Rows(r, dt, m, nb, mode == "extreme")
					xq, xd := randQ8Act(r, maxRowsN, nb, mode == "extreme")
					xc := make([]int32, maxRowsN*nb)
					blockSums8(xc, xq)
					kerns := map[string]rowsN{"go": goX8}
					if useAsm(true) {
						kerns["asm"] = map[kernels.DType]rowsN{kernels.Q8_0: dotQ8X8RowsN, kernels.Q4_0: dotQ4X8RowsN}[dt]
					}
					if dt == kernels.Q8_0 {
						// The kernels on biased weights, with the
						// activations' blockSumsB.
						xb, xcb := biasedX8(x8), make([]int32, maxRowsN*nb)
						blockSumsB(xcb, xq)
						biased := func(k rowsN) rowsN {
							return func(_ []byte, m, nb, na int, xq []int8, xd []float32, _ []int32, out []float32, os int) {
								k(xb, m, nb, na, xq, xd, xcb, out, os)
							}
						}
						kerns["go_b"] = biased(dotQ8X8BRowsNGo)
						if useAsm(true) && x8Bias {
							kerns["asm_b"] = biased(dotQ8X8BRowsN)
						}
					}
					if asm := kerns["asm"]; asm != nil && q4X8VNNI && dt == kernels.Q4_0 {
						// The AVX2 kernel beside the VNNI one.
						kerns["asm_avx2"] = func(w []byte, m, nb, na int, xq []int8, xd []float32, xc []int32, out []float32, os int) {
							q4X8VNNI = false
							defer func() { q4X8VNNI = true }()
							asm(w, m, nb, na, xq, xd, xc, out, os)
						}
					}
					for na := 1; na <= maxRowsN; na++ {
						os := m + r.IntN(3)
						want := make([]float32, na*os)
						for i := range want {
							want[i] = 7
						}
						ref(rows, nb*x8BlockBytes(dt), m, nb, na, xq, xd, xc, want, os)
						for name, k := range kerns {
							have := make([]float32, na*os)
							for i := range have {
								have[i] = 7
							}
							k(x8, m, nb, na, xq, xd, xc, have, os)
							for i := range have {
								if !sameBits(have[i], want[i]) {
									t.Fatalf("%v %s nb=%d m=%d na=%d %s: out[%d][%d] = %g; want %g", dt, name, nb, m, na, mode, i/os, i%os, have[i], want[i])
								}
							}
						}
					}
				}
			}
		}
	}
}

// TestPackedMatchesUnpacked runs the backend's ops on the same weights
// in both layouts, on every kernel set: MatMul (every batch from 1 to past
// the tiled one, several thread counts), MatMulMany, Gather, RMSNorm and
// Slice (on and off a group boundary) give the same bits.
func TestPackedMatchesUnpacked(t *testing.T) {
	defer useAsm(true)
	r := rand.New(rand.NewPCG(21, 22))
	for _, kset := range []struct {
		name string
		set  func()
		made func() // the kernel set the weights are made under, when not set's
	}{
		{"asm", func() { useAsm(true) }, nil},
		{"asm_avx2", func() { useAVX2() }, nil}, // the same as asm without VNNI
		{"go_kernels", func() { useAsm(false) }, nil},
		// Weights made where they are biased (VNNI), read by the others.
		{"asm_weights_go_kernels", func() { useAsm(false) }, func() { useAsm(true) }},
		{"asm_weights_avx2", func() { useAVX2() }, func() { useAsm(true) }},
		// Biased weights on any CPU, under the Go kernels.
		{"go_kernels_biased", func() { useAsm(false) }, func() { useAsm(false); useX8Bias(true) }},
	} {
		shapes := []struct{ m, k int }{{37, 96}, {64, 160}, {8, 32}, {13, 3104}}
		for range 3 { // and a few at random
			shapes = append(shapes, struct{ m, k int }{1 + r.IntN(70), 32 * (1 + r.IntN(40))})
		}
		for _, threads := range []int{1, 3} {
			for _, shape := range shapes {
				for _, dt := range x8AllTypes {
					m, k := shape.m, shape.k
					if be := x8BlockElems(dt); k%be != 0 {
						k += be - k%be
					}
					t.Run(fmt.Sprintf("%v/%s/threads=%d/%dx%d", dt, kset.name, threads, m, k), func(t *testing.T) {
						data, err := kernels.Quantize(dt, randVals(r, m*k, 0.5))
						if err != nil {
							t.Fatal(err)
						}
						made := kset.set
						if kset.made != nil {
							made = kset.made
						}
						made()
						b := open(t, threads)
						var ws [2]kernels.Tensor
						for i, on := range []bool{false, true} {
							useX8Layout(on)
							if ws[i], err = b.Weights(dt, m, k, data); err != nil {
								t.Fatal(err)
							}
							if ws[i].(*Tensor).x8 != on {
								t.Fatalf("x8Layout=%v: tensor x8=%v", on, ws[i].(*Tensor).x8)
							}
							if wb := on && x8Bias && dt == kernels.Q8_0; ws[i].(*Tensor).x8b != wb {
								t.Fatalf("x8Layout=%v x8Bias=%v: tensor x8b=%v", on, x8Bias, ws[i].(*Tensor).x8b)
							}
						}
						kset.set()
						same := func(what string, f func(w kernels.Tensor) []float32) {
							t.Helper()
							if want, have := f(ws[0]), f(ws[1]); !slices.Equal(have, want) {
								t.Errorf("%s: the ×8 layout's result differs", what)
							}
						}
						for _, n := range []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 16, 33, 40} {
							xs := randVals(r, n*k, 2)
							mm := func(w kernels.Tensor) []float32 {
								rows, _ := w.Dims()
								x, d := b.Alloc(n, k), b.Alloc(n, rows)
								b.Upload(x, xs)
								b.MatMul(d, x, w)
								out := make([]float32, n*rows)
								b.Download(out, d)
								return out
							}
							same(fmt.Sprintf("MatMul n=%d", n), mm)
							for _, sl := range [][2]int{{0, m}, {8, m}, {3, m}, {0, min(5, m)}, {m - 1, m}} {
								if sl[0] >= sl[1] {
									continue
								}
								same(fmt.Sprintf("MatMul n=%d of Slice %v", n, sl), func(w kernels.Tensor) []float32 {
									return mm(b.Slice(w, sl[0], sl[1]))
								})
							}
							if m%8 == 0 {
								same(fmt.Sprintf("MatMulMany n=%d", n), func(w kernels.Tensor) []float32 {
									x, d1, d2 := b.Alloc(n, k), b.Alloc(n, m), b.Alloc(n, 8)
									b.Upload(x, xs)
									b.MatMulMany([]kernels.Tensor{d1, d2}, x, []kernels.Tensor{w, b.Slice(w, 0, 8)})
									out := make([]float32, n*(m+8))
									b.Download(out[:n*m], d1)
									b.Download(out[n*m:], d2)
									return out
								})
							}
						}
						ids := []int32{0, int32(m - 1), int32(m / 2), 3 % int32(m), 0}
						same("Gather", func(w kernels.Tensor) []float32 {
							d := b.Alloc(len(ids), k)
							b.Gather(d, w, ids)
							out := make([]float32, len(ids)*k)
							b.Download(out, d)
							return out
						})
						if m >= 2 {
							same("Gather of an unaligned Slice", func(w kernels.Tensor) []float32 {
								d := b.Alloc(2, k)
								b.Gather(d, b.Slice(w, 1, m), []int32{0, int32(m - 2)})
								out := make([]float32, 2*k)
								b.Download(out, d)
								return out
							})
						}
						same("RMSNorm", func(w kernels.Tensor) []float32 {
							x := b.Alloc(2, k)
							b.Upload(x, randVals(rand.New(rand.NewPCG(1, 1)), 2*k, 1))
							b.RMSNorm(x, x, b.Slice(w, m-1, m), 1e-5)
							out := make([]float32, 2*k)
							b.Download(out, x)
							return out
						})
					})
				}
			}
		}
	}
}

// randKAct returns na activation rows of nb super-blocks quantized to Q8_K
// (random, or with every value at an extreme of the quantization).
func randKAct(r *rand.Rand, na, nb int, extreme bool) *kAct {
	k := nb * superBlocks
	a := &kAct{f: actQ8K, k: k, q: make([]int8, na*k), d: make([]float32, na*nb), bs: make([]int16, na*k/16)}
	x := make([]float32, k)
	for i := range na {
		for j := range x {
			x[j] = float32(r.NormFloat64())
			if extreme {
				x[j] = []float32{1, -1, 0.999}[r.IntN(3)]
			}
		}
		a.quantize(i, x)
	}
	return a
}

// TestX8KKernels checks the ×8 K-quant kernels, Go and assembly, against
// the Go reference on the same rows in GGML's layout, bit for bit, for
// one to maxRowsN activation rows, partial last groups included, and that
// they store nothing past m.
func TestX8KKernels(t *testing.T) {
	initTables()
	defer useAsm(true)
	r := rand.New(rand.NewPCG(31, 32))
	for _, dt := range x8KTypes {
		for _, nb := range []int{1, 2, 3, 5} {
			for _, m := range []int{1, 2, 7, 8, 9, 16, 17, 31, 40} {
				for _, mode := range []string{"random", "extreme"} {
					rows, x8 := randX8Rows(r, dt, m, nb, mode == "extreme")
					act := randKAct(r, maxRowsN+1, nb, mode == "extreme")
					kerns := map[string]kX8Kernel{"go": kX8Go}
					if useAsm(true) && kX8[dt] != nil {
						kerns["asm"] = kX8[dt]
					}
					rb := nb * x8BlockBytes(dt)
					for a0 := range 2 {
						for na := 1; na <= maxRowsN; na++ {
							os := m + r.IntN(3)
							want := make([]float32, na*os)
							for i := range want {
								want[i] = 7
							}
							for a := range na {
								for i := range m {
									want[a*os+i] = kDotsGo[dt](rows[i*rb:(i+1)*rb], act.row(a0+a))
								}
							}
							for name, k := range kerns {
								have := make([]float32, na*os)
								for i := range have {
									have[i] = 7
								}
								k(&workerScratch{}, dt, x8, m, nb, act, a0, na, have, os)
								for i := range have {
									if !sameBits(have[i], want[i]) {
										t.Fatalf("%v %s nb=%d m=%d a0=%d na=%d %s: out[%d][%d] = %g; want %g", dt, name, nb, m, a0, na, mode, i/os, i%os, have[i], want[i])
									}
								}
							}
						}
					}
				}
			}
		}
	}
}

// TestBlockSums checks the activations' block sums against the definition,
// at the values' ends and for several block counts.
func TestBlockSums(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, c := range []struct {
		name string
		v    func(i int) int8
	}{
		{"random", func(int) int8 { return int8(r.IntN(255) - 127) }},
		{"all 127", func(int) int8 { return 127 }},
		{"all -127", func(int) int8 { return -127 }},
		{"zeros", func(int) int8 { return 0 }},
		{"alternating", func(i int) int8 { return []int8{127, -127, 0, -1, 1}[i%5] }},
	} {
		for _, nb := range []int{0, 1, 2, 3, 33} {
			xq := make([]int8, nb*32)
			for i := range xq {
				xq[i] = c.v(i)
			}
			for _, f := range []int32{8, -128} {
				xc := make([]int32, nb+1)
				xc[nb] = 7
				blockSums(xc[:nb], xq, f)
				for b := range nb {
					var s int32
					for _, v := range xq[b*32 : b*32+32] {
						s += int32(v)
					}
					if xc[b] != f*s {
						t.Fatalf("%s nb=%d f=%d: xc[%d] = %d; want %d", c.name, nb, f, b, xc[b], f*s)
					}
				}
				if xc[nb] != 7 {
					t.Fatalf("%s nb=%d: wrote past the sums", c.name, nb)
				}
			}
		}
	}
}

// TestSliceX8Bytes checks that a Slice of ×8 weights off a group boundary
// holds the bytes of the same rows made into weights alone, padding rows
// included, on biased and unbiased weights.
func TestSliceX8Bytes(t *testing.T) {
	defer useAsm(true)
	defer useX8Layout(useX8Layout(true))
	r := rand.New(rand.NewPCG(31, 32))
	for _, bias := range []bool{false, true} {
		for _, dt := range x8AllTypes {
			useAsm(false)
			useX8Layout(true)
			useX8Bias(bias)
			m, k := 21, 2*x8BlockElems(dt)
			data, err := kernels.Quantize(dt, randVals(r, m*k, 0.5))
			if err != nil {
				t.Fatal(err)
			}
			b := open(t, 1)
			w, err := b.Weights(dt, m, k, data)
			if err != nil {
				t.Fatal(err)
			}
			rb := len(data) / m
			for _, sl := range [][2]int{{3, m}, {1, 6}, {5, 13}, {9, 17}} {
				want, err := b.Weights(dt, sl[1]-sl[0], k, data[sl[0]*rb:sl[1]*rb])
				if err != nil {
					t.Fatal(err)
				}
				have := b.Slice(w, sl[0], sl[1]).(*Tensor)
				if !slices.Equal(have.raw, want.(*Tensor).raw) || have.x8b != want.(*Tensor).x8b {
					t.Errorf("%v bias=%v: Slice%v: bytes differ from the rows made alone", dt, bias, sl)
				}
			}
		}
	}
}
