package cpu

import (
	"encoding/binary"
	"math"
	"sync"
	"unsafe"

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
// GGML's block layout, or in the ×8 layout of pack.go.
// The "Rows" kernels take a run of weight rows, the "RowsN" ones also up
// to maxRowsN activation rows, so that each weight block is read from
// memory once for all of them (a speculative verification or a few streams
// cost little more than one row); gemmF32 takes tiles of F32 weight and
// activation rows.
var (
	// Every dot product below is computed as canon.go defines it, so an
	// output is the same bits whichever kernel computes it.
	//
	// dotF32 returns Σ a[i]·b[i]; len(b) ≥ len(a).
	dotF32 func(a, b []float32) float32
	// gemmF32 sets out[j·ldo+i] = dotF32(w row i, x row j) for i < mw and
	// j < nx; the rows of w (x) are k floats each, back to back, or packed
	// by gemmPackRow when wpacked (xpacked); sc is the calling worker's.
	gemmF32 func(out []float32, ldo int, w []float32, wpacked bool, mw int, x []float32, xpacked bool, nx int, k int, sc *gemmScratch)
	// gemmF32Groups, where this CPU has it (else nil), is gemmF32 for
	// unpacked weight rows and activation rows in the grouped layout of
	// gemm_f32.go too: xg holds x's rows so (gemmPackGroupRow), x the rows
	// themselves, for the tails past k &^ 7.
	gemmF32Groups func(out []float32, ldo int, w []float32, mw int, xg, x []float32, nx, k int, sc *gemmScratch)
	// dotQ8 returns the dot product of a Q8_0 weight row (len(xd) blocks)
	// with one quantized activation row.
	dotQ8 func(w []byte, xq []int8, xd []float32) float32
	// dotQ8Rows sets out[r] = dotQ8 of weight row r (rows rb bytes apart,
	// starting at w) with one activation row, for r < len(out).
	dotQ8Rows func(w []byte, rb int, xq []int8, xd []float32, out []float32)
	// dotQ8RowsN sets out[a*os+r] = dotQ8 of weight row r (rows rb bytes
	// apart, starting at w) with activation row a, for r < m and a < na
	// (1 ≤ na ≤ maxRowsN): row a's values are xq[a*nb*32:], its scales
	// xd[a*nb:], nb blocks each, and xc, laid out as xd, holds 8·Σx of
	// each block (blockSums8; the Q4_0 assembly reads it, and it may be
	// nil for Q8_0). Each weight block is read once for all na rows.
	dotQ8RowsN func(w []byte, rb, m, nb, na int, xq []int8, xd []float32, xc []int32, out []float32, os int)
	// dotQ4, dotQ4Rows, dotQ4RowsN: the same for Q4_0 weight rows.
	dotQ4      func(w []byte, xq []int8, xd []float32) float32
	dotQ4Rows  func(w []byte, rb int, xq []int8, xd []float32, out []float32)
	dotQ4RowsN func(w []byte, rb, m, nb, na int, xq []int8, xd []float32, xc []int32, out []float32, os int)
	// axpy does y[i] += a·x[i]; len(x) ≥ len(y).
	axpy func(y []float32, a float32, x []float32)
	// f16Row converts len(dst) F16 values from src.
	f16Row func(dst []float32, src []byte)
)

// useAsm selects the assembly kernels when on is true and the CPU has them,
// and the Go ones otherwise (the tiled batch kernels included, see useTiles). It reports whether assembly is in use. Tests
// call it to cover both; it must not be called while a backend is running.
func useAsm(on bool) bool {
	dotF32, gemmF32, gemmF32Groups = dotF32Go, gemmF32Go, nil
	dotQ8, dotQ8Rows, dotQ8RowsN = dotQ8Go, dotQ8RowsGo, dotQ8RowsNGo
	dotQ4, dotQ4Rows, dotQ4RowsN = dotQ4Go, dotQ4RowsGo, dotQ4RowsNGo
	dotQ8X8RowsN, dotQ4X8RowsN, dotQ8X8BRowsN = dotQ8X8RowsNGo, dotQ4X8RowsNGo, dotQ8X8BRowsNGo
	x8Layout, x8Bias, q4X8VNNI = false, false, false
	axpy, f16Row = axpyGo, f16RowGo
	dotsF32, axpysF32 = dotsF32Go, axpysF32Go
	useVecGo()
	useAttnGo()
	useTiles(tilesOff)
	useKDotsGo()
	if on && haveAsm {
		setAsm()
		setVecAsm()
		setKDotsAsm()
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

// dotF32Go and gemmF32Go are the canonical F32 dot product (canon.go).
func dotF32Go(a, b []float32) float32 {
	b = b[:len(a)]
	m := len(a) &^ 7
	var acc [8]float32
	for i := 0; i < m; i += 8 {
		for l := range acc {
			acc[l] = fma32(a[i+l], b[i+l], acc[l])
		}
	}
	s := hsum8(&acc)
	for i := m; i < len(a); i++ {
		s = fma32(a[i], b[i], s)
	}
	return s
}

func gemmF32Go(out []float32, ldo int, w []float32, wpacked bool, mw int, x []float32, xpacked bool, nx int, k int, sc *gemmScratch) {
	if xpacked {
		x = sc.unpacked(&sc.unpackX, x, nx, k)
	}
	if wpacked {
		w = sc.unpacked(&sc.unpack, w, mw, k)
	}
	for i := range mw {
		wr := w[i*k : (i+1)*k]
		for j := range nx {
			out[j*ldo+i] = dotF32Go(wr, x[j*k:(j+1)*k])
		}
	}
}

const (
	q8Bytes = 2 + kernels.QK
	q4Bytes = 2 + kernels.QK/2
)

// The quantized Go kernels are the canonical arithmetic (canon.go): per
// block an exact integer sum, then qblock.

func dotQ8Go(w []byte, xq []int8, xd []float32) float32 {
	var acc float32
	for b, dx := range xd {
		blk := w[b*q8Bytes : (b+1)*q8Bytes]
		acc = qblock(acc, q8BlockSum(blk, xq[b*32:b*32+32]), f16(blk), dx)
	}
	return acc
}

func q8BlockSum(blk []byte, x []int8) int32 {
	q := blk[2 : 2+32]
	x = x[:32]
	var s int32
	for i := range 32 {
		s += int32(int8(q[i])) * int32(x[i])
	}
	return s
}

func dotQ8RowsGo(w []byte, rb int, xq []int8, xd []float32, out []float32) {
	for r := range out {
		out[r] = dotQ8Go(w[r*rb:], xq, xd)
	}
}

// maxRowsN is the most activation rows one dotQ8RowsN or dotQ4RowsN call
// takes.
const maxRowsN = 8

func dotQ8RowsNGo(w []byte, rb, m, nb, na int, xq []int8, xd []float32, _ []int32, out []float32, os int) {
	for a := range na {
		dotQ8RowsGo(w, rb, xq[a*nb*32:(a+1)*nb*32], xd[a*nb:(a+1)*nb], out[a*os:a*os+m])
	}
}

func dotQ4Go(w []byte, xq []int8, xd []float32) float32 {
	var acc float32
	for b, dx := range xd {
		blk := w[b*q4Bytes : (b+1)*q4Bytes]
		acc = qblock(acc, q4BlockSum(blk, xq[b*32:b*32+32]), f16(blk), dx)
	}
	return acc
}

func q4BlockSum(blk []byte, x []int8) int32 {
	q := blk[2 : 2+16]
	x = x[:32]
	var s int32
	for i := range 16 {
		s += (int32(q[i]&15) - 8) * int32(x[i])
		s += (int32(q[i]>>4) - 8) * int32(x[i+16])
	}
	return s
}

func dotQ4RowsGo(w []byte, rb int, xq []int8, xd []float32, out []float32) {
	for r := range out {
		out[r] = dotQ4Go(w[r*rb:], xq, xd)
	}
}

func dotQ4RowsNGo(w []byte, rb, m, nb, na int, xq []int8, xd []float32, _ []int32, out []float32, os int) {
	for a := range na {
		dotQ4RowsGo(w, rb, xq[a*nb*32:(a+1)*nb*32], xd[a*nb:(a+1)*nb], out[a*os:a*os+m])
	}
}

// blockSums8 sets xc[b] = 8·Σ of block b of the quantized row xq: what
// the Q4_0 kernels that take the nibbles (the values plus 8) as they are
// take off each block's sum.
func blockSums8(xc []int32, xq []int8) { blockSums(xc, xq, 8) }

// blockSumsB sets xc[b] = −128·Σ of block b of xq: where the kernels on
// biased Q8_0 weights (x8Bias) start each block's sum, since Σ(w+128)·x
// exceeds Σw·x by 128·Σx.
func blockSumsB(xc []int32, xq []int8) { blockSums(xc, xq, -128) }

// blockSums sets xc[b] to f times the sum of block b of xq, eight bytes at
// a time: each byte made unsigned (x+128, the sign bit flipped), the even
// and odd bytes summed in 16-bit lanes (at most 4·2·255, no carries), the
// four lanes folded by one multiplication, and 32·128 taken off.
func blockSums(xc []int32, xq []int8, f int32) {
	// Slicing first panics on a short row, which the unsafe view below
	// would read past.
	xq = xq[:len(xc)*32]
	if len(xc) == 0 {
		return
	}
	q := unsafe.Slice((*byte)(unsafe.Pointer(&xq[0])), len(xc)*32)
	const flip, lo = 0x8080808080808080, 0x00ff00ff00ff00ff
	for b := range xc {
		blk := q[b*32 : b*32+32]
		var v uint64
		for i := 0; i < 32; i += 8 {
			w := binary.LittleEndian.Uint64(blk[i:]) ^ flip
			v += w&lo + w>>8&lo
		}
		s := int32(v*0x0001000100010001>>48) - 32*128
		xc[b] = f * s
	}
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

// minNormal32 is the smallest normal float32, 2⁻¹²⁶.
const minNormal32 = 0x1p-126

// roundMagic is 1.5·2²³ (see quantRowQ8).
const roundMagic float32 = 12582912

func abs32(f float32) float32 { return math.Float32frombits(math.Float32bits(f) &^ (1 << 31)) }
