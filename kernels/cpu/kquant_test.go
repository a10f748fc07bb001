package cpu

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/specgate/specgate/kernels"
	"github.com/specgate/specgate/kernels/kernelstest"
)

// FuzzWeightsGGML feeds arbitrary bytes and shapes to Weights for the GGML
// quantizations: a shape the bytes do not fill is an error, never a panic,
// and whatever Weights accepts MatMul and Gather compute without panicking,
// whatever the block scales hold (NaN and Inf included).
func FuzzWeightsGGML(f *testing.F) {
	r := rand.New(rand.NewPCG(9, 10))
	for i, dt := range kernelstest.ExtraWeightTypes {
		rb, _ := dt.RowBytes(dt.BlockElems())
		data := make([]byte, 2*rb)
		for j := range data {
			data[j] = byte(r.Uint32())
		}
		f.Add(uint8(i), uint16(2), uint16(dt.BlockElems()), data)
		f.Add(uint8(i), uint16(1), uint16(dt.BlockElems()), data[:rb-1])
		f.Add(uint8(i), uint16(1), uint16(dt.BlockElems()+32), data)
	}
	b, err := Open(kernels.Options{Threads: 2})
	if err != nil {
		f.Fatal(err)
	}
	defer b.Close()
	f.Fuzz(func(t *testing.T, typ uint8, rows, cols uint16, data []byte) {
		types := kernelstest.ExtraWeightTypes
		dt := types[int(typ)%len(types)]
		w, err := b.Weights(dt, int(rows%64), int(cols%2048), data)
		if err != nil {
			rb, rerr := dt.RowBytes(int(cols % 2048))
			if rerr == nil && len(data) == int(rows%64)*rb {
				t.Fatalf("Weights(%v, %d, %d) of %d bytes: %v", dt, rows%64, cols%2048, len(data), err)
			}
			return
		}
		n, k := w.Dims()
		if n == 0 || k == 0 {
			return
		}
		x := b.Alloc(3, k)
		xs := make([]float32, 3*k)
		for i := range xs {
			xs[i] = float32(i%7) - 3
		}
		b.Upload(x, xs)
		b.MatMul(b.Alloc(3, n), x, w)
		b.Gather(b.Alloc(2, k), w, []int32{0, int32(n - 1)})
	})
}

// TestWeightsGGMLShapes checks the load errors of the GGML quantizations:
// a row that is not whole blocks and data that is short or long.
func TestWeightsGGMLShapes(t *testing.T) {
	b := open(t, 1)
	for _, dt := range kernelstest.ExtraWeightTypes {
		be := dt.BlockElems()
		rb, _ := dt.RowBytes(be)
		for _, tc := range []struct {
			rows, cols, bytes int
			short             bool
		}{
			{2, be, 2*rb - 1, true},
			{2, be, 2*rb + 1, true},
			{2, be / 2, rb, false},
			{1, be + 16, 2 * rb, false},
		} {
			_, err := b.Weights(dt, tc.rows, tc.cols, make([]byte, tc.bytes))
			if err == nil {
				t.Errorf("Weights(%v, %d, %d) of %d bytes: have nil error; want one", dt, tc.rows, tc.cols, tc.bytes)
				continue
			}
			if tc.short != errors.Is(err, ErrShortData) {
				t.Errorf("Weights(%v, %d, %d) of %d bytes: error %v", dt, tc.rows, tc.cols, tc.bytes, err)
			}
		}
	}
}

// TestKRowsMatchGo checks the kernel each type uses on this CPU (assembly
// where there is some) against the Go reference, on several rows at once
// and on activations with zero and extreme blocks. The assembly adds the
// super-blocks in the reference's order, so where the compiler does not
// fuse the reference's multiply-adds (GOAMD64 below v3) the bits agree.
// Thirteen rows are a group of eight for the kernels that take eight at
// once and five left over, each of which is also computed alone.
func TestKRowsMatchGo(t *testing.T) {
	initTables()
	for _, dt := range kernelstest.ExtraWeightTypes {
		t.Run(dt.String(), func(t *testing.T) {
			r := rand.New(rand.NewPCG(11, uint64(dt)))
			const rows = 13
			k := 1024
			if dt.BlockElems() == kernels.QK {
				k += 3 * kernels.QK // not a multiple of any unrolling
			}
			ws := make([]float32, rows*k)
			for i := range ws {
				ws[i] = float32(r.NormFloat64())
			}
			data, err := kernels.Quantize(dt, ws)
			if err != nil {
				t.Fatal(err)
			}
			rb, _ := dt.RowBytes(k)
			// The rows from the fifth on are random bytes, so every packing of
			// scales and quants occurs.
			randKBlocks(r, dt, data, 4*rb/dt.BlockBytes())
			xs := make([]float32, k)
			for i := range xs {
				xs[i] = float32(r.NormFloat64()) * 3
			}
			clear(xs[256:512])
			xs[600] = 1e6
			if actFormatOf(dt) == actQ8_1 {
				// Q8_1's F16 d·Σq of a block holding 1e6 is Inf, and
				// so would be every row's result.
				xs[600] = 1e3
			}
			a := oneKAct(dt, xs)
			have, want := make([]float32, rows), make([]float32, rows)
			kDots[dt](data, rb, a.row(0), have)
			goRows(kDotsGo[dt])(data, rb, a.row(0), want)
			// The float sums differ in order; the one huge value makes
			// terms far larger than the result, so the bound is relative
			// to Σ|w·x|, not to the result.
			var mag float64
			for _, v := range xs {
				mag += math.Abs(float64(v))
			}
			mag *= 4 // max|w|, normal weights
			for i := range want {
				if exactRef && math.Float32bits(have[i]) != math.Float32bits(want[i]) {
					t.Errorf("row %d: have %g; the reference %g", i, have[i], want[i])
				}
				if d := math.Abs(float64(have[i] - want[i])); d > 1e-6*mag {
					t.Errorf("row %d: have %g; want %g", i, have[i], want[i])
				}
			}
			one := make([]float32, 1)
			for i := range rows {
				kDots[dt](data[i*rb:], rb, a.row(0), one)
				if math.Float32bits(one[0]) != math.Float32bits(have[i]) {
					t.Errorf("row %d alone: have %g; among %d rows %g", i, one[0], rows, have[i])
				}
			}
		})
	}
}

// randKBlocks fills data's blocks of type dt from block first on with
// random bytes, and their F16 scales with values of either sign up to
// 0.01: random F16 bits would hold NaNs, infinities and subnormals.
func randKBlocks(r *rand.Rand, dt kernels.DType, data []byte, first int) {
	bb := dt.BlockBytes()
	for i := first * bb; i < len(data); i++ {
		data[i] = byte(r.Uint32())
	}
	for blk := first; blk < len(data)/bb; blk++ {
		for _, off := range f16Fields[dt] {
			binary.LittleEndian.PutUint16(data[blk*bb+off:], kernels.F32ToF16(float32((2*r.Float64()-1)*0.01)))
		}
	}
}

// oneKAct returns x quantized as one activation row for weights of type dt.
func oneKAct(dt kernels.DType, x []float32) *kAct {
	k := len(x)
	a := &kAct{f: actFormatOf(dt), k: k}
	nb := k / a.f.blockLen()
	a.q, a.d, a.s, a.bs = make([]int8, k), make([]float32, nb), make([]float32, nb), make([]int16, k/16)
	a.quantize(0, x)
	return a
}

// f16Fields are the byte offsets of each block's F16 scales.
var f16Fields = map[kernels.DType][]int{
	kernels.Q4_1: {0, 2}, kernels.Q5_0: {0}, kernels.Q5_1: {0, 2}, kernels.IQ4_NL: {0},
	kernels.Q2_K: {80, 82}, kernels.Q3_K: {108}, kernels.Q4_K: {0, 2}, kernels.Q5_K: {0, 2},
	kernels.Q6_K: {208}, kernels.IQ4_XS: {0},
}

// TestMatMulManyK checks MatMulMany on weights of several types that share
// an activation format (a Q4_K_M layer's Q4_K and Q6_K, say), which
// quantizes the activations once for all: each output must have the bits
// of MatMul on its weight alone.
func TestMatMulManyK(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	be := open(t, 2)
	const k = 512
	for _, tc := range []struct {
		types []kernels.DType
		step  int // rows more for each weight
	}{
		{[]kernels.DType{kernels.Q4_K, kernels.Q6_K, kernels.Q5_K, kernels.IQ4_XS}, 4},
		// whole groups of eight rows: one pass over all the weights' rows
		{[]kernels.DType{kernels.Q4_K, kernels.Q6_K, kernels.Q4_K}, 8},
		{[]kernels.DType{kernels.Q4_1, kernels.Q5_1}, 4},
		{[]kernels.DType{kernels.Q5_0, kernels.IQ4_NL}, 4},
	} {
		types := tc.types
		for _, n := range []int{1, 3, 4, 8, 13} {
			t.Run(fmt.Sprintf("%v/n=%d", types, n), func(t *testing.T) {
				var ws, many, one []kernels.Tensor
				for i, dt := range types {
					m := 8 + tc.step*i
					vals := make([]float32, m*k)
					for j := range vals {
						vals[j] = float32(r.NormFloat64())
					}
					data, err := kernels.Quantize(dt, vals)
					if err != nil {
						t.Fatal(err)
					}
					w, err := be.Weights(dt, m, k, data)
					if err != nil {
						t.Fatal(err)
					}
					ws = append(ws, w)
					many, one = append(many, be.Alloc(n, m)), append(one, be.Alloc(n, m))
				}
				x := be.Alloc(n, k)
				xs := make([]float32, n*k)
				for j := range xs {
					xs[j] = float32(r.NormFloat64())
				}
				be.Upload(x, xs)
				be.MatMulMany(many, x, ws)
				for i, w := range ws {
					be.MatMul(one[i], x, w)
					m, _ := w.Dims()
					have, want := make([]float32, n*m), make([]float32, n*m)
					be.Download(have, many[i])
					be.Download(want, one[i])
					for j := range want {
						if math.Float32bits(have[j]) != math.Float32bits(want[j]) {
							t.Fatalf("%v element %d: have %g; want %g", types[i], j, have[j], want[j])
						}
					}
				}
			})
		}
	}
}

// TestQuantQ8KKernels checks the Q8_K quantizer of every kernel set
// against the Go reference, bit for bit: random rows, and rows with ties
// of the largest magnitude in both signs, zeros (−0 too), NaN, ±Inf, huge
// and tiny values, and all-zero or all-NaN super-blocks.
func TestQuantQ8KKernels(t *testing.T) {
	defer useAsm(true)
	if !useAsm(true) {
		t.Skip("no assembly kernels on this machine")
	}
	r := rand.New(rand.NewPCG(41, 42))
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	specials := []float32{0, float32(math.Copysign(0, -1)), nan, inf, -inf, 3e38, -3e38, 1e-40, -1e-40, 1, -1, 0.5, -0.5}
	for c := range 400 {
		nb := 1 + r.IntN(4)
		x := make([]float32, nb*superBlocks)
		for i := range x {
			x[i] = float32(r.NormFloat64()) * []float32{1, 1e-3, 1e3, 1e-30}[c%4]
		}
		switch c % 5 {
		case 1: // ties of the largest magnitude, the negative one first or not
			m := float32(8)
			if c%2 == 0 {
				m = -m
			}
			x[r.IntN(len(x))], x[r.IntN(len(x))] = m, -m
		case 2:
			for range 1 + r.IntN(20) {
				x[r.IntN(len(x))] = specials[r.IntN(len(specials))]
			}
		case 3: // a whole super-block of one special value
			b := r.IntN(nb)
			v := specials[r.IntN(len(specials))]
			for i := range superBlocks {
				x[b*superBlocks+i] = v
			}
		case 4: // values at the rounding ties of the quantization
			for i := range x {
				x[i] = float32(r.IntN(255)-127) / 2
			}
			// A NaN after the largest value where a vector kernel may
			// keep both in one lane of a running maximum.
			i := r.IntN(len(x) - 64)
			x[i], x[i+32], x[i+8] = 1000, nan, nan
		}
		want := &kAct{q: make([]int8, len(x)), d: make([]float32, nb), bs: make([]int16, len(x)/16)}
		have := &kAct{q: make([]int8, len(x)), d: make([]float32, nb), bs: make([]int16, len(x)/16)}
		quantRowQ8KGo(want.q, want.d, want.bs, x)
		quantRowQ8K(have.q, have.d, have.bs, x)
		for b := range nb {
			if math.Float32bits(have.d[b]) != math.Float32bits(want.d[b]) {
				t.Fatalf("case %d block %d: d = %g; want %g", c, b, have.d[b], want.d[b])
			}
		}
		for i := range want.q {
			if have.q[i] != want.q[i] {
				t.Fatalf("case %d: q[%d] = %d; want %d (x = %g)", c, i, have.q[i], want.q[i], x[i])
			}
		}
		for i := range want.bs {
			if have.bs[i] != want.bs[i] {
				t.Fatalf("case %d: bs[%d] = %d; want %d", c, i, have.bs[i], want.bs[i])
			}
		}
	}
}
