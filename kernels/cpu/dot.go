package cpu

import (
	"encoding/binary"
	"math"
	"sync"

	"github.com/specgate/specgate/kernels"
)

// The inner loops of MatMul and Attention. Each has a plain Go version
// (suffix Go), which is the reference the assembly is tested against and the
// fallback on other CPUs; the variables below point at the fastest version
// this CPU runs, chosen by useAsm.
//
// Quantized activations are stored as Q8_0 split into two arrays: xq, the
// int8 values of the rows back to back (a row of k values is k bytes), and
// xd, one float32 scale per 32 values (a row has k/32). Weight rows are in
// GGML's block layout. The "x4" kernels take one weight row and four
// activation rows, so each weight block is loaded once for four outputs;
// they read the four rows' scales interleaved by block (xd4[4b+j] is row
// j's scale of block b), so one vector load fetches a block's four scales.
var (
	// dotF32 returns Σ a[i]·b[i]; len(b) ≥ len(a).
	dotF32 func(a, b []float32) float32
	// dotF32x4 sets out[j] = Σ w[i]·x[j*len(w)+i] for j < 4.
	dotF32x4 func(w, x []float32, out *[4]float32)
	// dotQ8 returns the dot product of a Q8_0 weight row (len(xd) blocks)
	// with one quantized activation row.
	dotQ8 func(w []byte, xq []int8, xd []float32) float32
	// dotQ8Rows sets out[r] = dotQ8 of weight row r (rows rb bytes apart,
	// starting at w) with one activation row, for r < len(out).
	dotQ8Rows func(w []byte, rb int, xq []int8, xd []float32, out []float32)
	// dotQ8x4 does dotQ8 for four activation rows of nb blocks each, with
	// the rows' scales interleaved.
	dotQ8x4 func(w []byte, xq []int8, xd []float32, nb int, out *[4]float32)
	// dotQ4, dotQ4x4: the same for a Q4_0 weight row.
	dotQ4   func(w []byte, xq []int8, xd []float32) float32
	dotQ4x4 func(w []byte, xq []int8, xd []float32, nb int, out *[4]float32)
	// dotQ4s, when not nil, is dotQ4 for a row whose block sums xs
	// (q4Sums) are at hand: the VNNI kernel takes the nibbles unsigned and
	// corrects for their offset of 8 through xs.
	dotQ4s func(w []byte, xq []int8, xd, xs []float32) float32
	// axpy does y[i] += a·x[i]; len(x) ≥ len(y).
	axpy func(y []float32, a float32, x []float32)
	// f16Row converts len(dst) F16 values from src.
	f16Row func(dst []float32, src []byte)
)

// useAsm selects the assembly kernels when on is true and the CPU has them,
// and the Go ones otherwise (the tiled batch kernels included, see useTiles). It reports whether assembly is in use. Tests
// call it to cover both; it must not be called while a backend is running.
func useAsm(on bool) bool {
	dotF32, dotF32x4 = dotF32Go, dotF32x4Go
	dotQ8, dotQ8x4, dotQ8Rows = dotQ8Go, dotQ8x4Go, dotQ8RowsGo
	dotQ4, dotQ4x4 = dotQ4Go, dotQ4x4Go
	axpy, f16Row = axpyGo, f16RowGo
	dotsF32, axpysF32 = dotsF32Go, axpysF32Go
	useVecGo()
	useAttnGo()
	useTiles(tilesOff)
	useKDotsGo()
	if on && haveAsm {
		setAsm()
		setVecAsm()
		useTiles(tilesAsm)
		return true
	}
	return false
}

func init() { useAsm(true) }

var (
	tablesOnce sync.Once
	f16Table   []float32 // F16 bits → float32, for the Go kernels
)

func initTables() {
	tablesOnce.Do(func() {
		f16Table = make([]float32, 1<<16)
		for i := range f16Table {
			f16Table[i] = kernels.F16ToF32(uint16(i))
		}
	})
}

func f16(b []byte) float32 {
	return f16Table[binary.LittleEndian.Uint16(b)]
}

func dotF32Go(a, b []float32) float32 {
	b = b[:len(a)]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(a); i += 4 {
		s0 += a[i] * b[i]
		s1 += a[i+1] * b[i+1]
		s2 += a[i+2] * b[i+2]
		s3 += a[i+3] * b[i+3]
	}
	for ; i < len(a); i++ {
		s0 += a[i] * b[i]
	}
	return (s0 + s1) + (s2 + s3)
}

func dotF32x4Go(w, x []float32, out *[4]float32) {
	k := len(w)
	x0, x1, x2, x3 := x[:k], x[k:2*k], x[2*k:3*k], x[3*k:4*k]
	var s0, s1, s2, s3 float32
	for i, v := range w {
		s0 += v * x0[i]
		s1 += v * x1[i]
		s2 += v * x2[i]
		s3 += v * x3[i]
	}
	out[0], out[1], out[2], out[3] = s0, s1, s2, s3
}

const (
	q8Bytes = 2 + kernels.QK
	q4Bytes = 2 + kernels.QK/2
)

func dotQ8Go(w []byte, xq []int8, xd []float32) float32 {
	var sum float32
	for b, dx := range xd {
		blk := w[b*q8Bytes : (b+1)*q8Bytes]
		q := blk[2:]
		x := xq[b*32 : b*32+32]
		var s int32
		for i := range 32 {
			s += int32(int8(q[i])) * int32(x[i])
		}
		sum += float32(s) * (f16(blk) * dx)
	}
	return sum
}

func dotQ8RowsGo(w []byte, rb int, xq []int8, xd []float32, out []float32) {
	for r := range out {
		out[r] = dotQ8Go(w[r*rb:], xq, xd)
	}
}

func dotQ8x4Go(w []byte, xq []int8, xd []float32, nb int, out *[4]float32) {
	k := nb * 32
	var s [4]float32
	for b := range nb {
		blk := w[b*q8Bytes : (b+1)*q8Bytes]
		dw := f16(blk)
		q := blk[2 : 2+32]
		for j := range 4 {
			x := xq[j*k+b*32 : j*k+b*32+32]
			var acc int32
			for i := range 32 {
				acc += int32(int8(q[i])) * int32(x[i])
			}
			s[j] += float32(acc) * (dw * xd[4*b+j])
		}
	}
	*out = s
}

func dotQ4Go(w []byte, xq []int8, xd []float32) float32 {
	var sum float32
	for b, dx := range xd {
		blk := w[b*q4Bytes : (b+1)*q4Bytes]
		q := blk[2 : 2+16]
		x := xq[b*32 : b*32+32]
		var s int32
		for i := range 16 {
			s += (int32(q[i]&15) - 8) * int32(x[i])
			s += (int32(q[i]>>4) - 8) * int32(x[i+16])
		}
		sum += float32(s) * (f16(blk) * dx)
	}
	return sum
}

func dotQ4x4Go(w []byte, xq []int8, xd []float32, nb int, out *[4]float32) {
	k := nb * 32
	var s [4]float32
	var v [32]int32
	for b := range nb {
		blk := w[b*q4Bytes : (b+1)*q4Bytes]
		dw := f16(blk)
		for i, c := range blk[2 : 2+16] {
			v[i] = int32(c&15) - 8
			v[i+16] = int32(c>>4) - 8
		}
		for j := range 4 {
			x := xq[j*k+b*32 : j*k+b*32+32]
			var acc int32
			for i := range 32 {
				acc += v[i] * int32(x[i])
			}
			s[j] += float32(acc) * (dw * xd[4*b+j])
		}
	}
	*out = s
}

func axpyGo(y []float32, a float32, x []float32) {
	x = x[:len(y)]
	for i := range y {
		y[i] += a * x[i]
	}
}

func f16RowGo(dst []float32, src []byte) {
	src = src[:2*len(dst)]
	for i := range dst {
		dst[i] = f16Table[binary.LittleEndian.Uint16(src[2*i:])]
	}
}

// convertRow decodes one stored row of type dt into dst.
func convertRow(dst []float32, dt kernels.DType, src []byte) {
	switch dt {
	case kernels.F32:
		for i := range dst {
			dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
		}
	case kernels.F16:
		f16Row(dst, src)
	case kernels.BF16:
		src = src[:2*len(dst)]
		for i := range dst {
			dst[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(src[2*i:])) << 16)
		}
	case kernels.Q8_0:
		for b := 0; b < len(dst)/32; b++ {
			blk := src[b*q8Bytes : (b+1)*q8Bytes]
			d := f16(blk)
			out := dst[b*32 : b*32+32]
			for i := range out {
				out[i] = d * float32(int8(blk[2+i]))
			}
		}
	case kernels.Q4_0:
		for b := 0; b < len(dst)/32; b++ {
			blk := src[b*q4Bytes : (b+1)*q4Bytes]
			d := f16(blk)
			out := dst[b*32 : b*32+32]
			for j, c := range blk[2 : 2+16] {
				out[j] = d * float32(int(c&15)-8)
				out[j+16] = d * float32(int(c>>4)-8)
			}
		}
	default:
		if err := kernels.Dequantize(dt, src, dst); err != nil {
			panic("cpu: cannot convert " + dt.String() + ": " + err.Error())
		}
	}
}

// quantRowQ8Go quantizes x (a whole number of 32-value blocks) to Q8_0 as
// ggml's quantize_row_q8_0 does on x86: d = max|x|/127 per block, stored
// rounded to half precision, and q = round-to-even(x·(127/max|x|)). The
// half-precision scale is part of the arithmetic llama.cpp's logits come
// from; on random-weight models a float32 scale alone moves them by a good
// part of what quantization does. A block whose d is below the smallest
// normal float32, or NaN, becomes zeros with d = 0.
func quantRowQ8Go(xq []int8, xd []float32, x []float32) {
	for b := range xd {
		v := x[b*32 : b*32+32]
		var amax float32
		for _, f := range v {
			amax = max(amax, abs32(f))
		}
		d := amax / 127
		q := xq[b*32 : b*32+32]
		if !(d >= minNormal32) {
			xd[b] = 0
			clear(q)
			continue
		}
		xd[b] = kernels.F16ToF32(kernels.F32ToF16(d))
		id := 127 / amax
		for i, f := range v {
			// Adding and taking away 1.5·2²³ rounds a float32 of
			// magnitude below 2²² to the nearest integer, ties to even,
			// in the FPU's own rounding: math.RoundToEven without its
			// software path on baseline amd64.
			q[i] = int8((f*id + roundMagic) - roundMagic)
		}
	}
}

// q4Sums sets xs[b] = 8·xd[b]·Σ xq of block b: what taking 8 off every
// Q4_0 nibble takes off block b's dot product with the row, before d_w.
func q4Sums(xs []float32, xq []int8, xd []float32) {
	for b, d := range xd {
		var s int32
		for _, q := range xq[b*kernels.QK : (b+1)*kernels.QK] {
			s += int32(q)
		}
		xs[b] = 8 * d * float32(s)
	}
}

// minNormal32 is the smallest normal float32, 2⁻¹²⁶.
const minNormal32 = 0x1p-126

// roundMagic is 1.5·2²³ (see quantRowQ8).
const roundMagic float32 = 12582912

func abs32(f float32) float32 { return math.Float32frombits(math.Float32bits(f) &^ (1 << 31)) }
