package kernels

import (
	"encoding/binary"
	"fmt"
	"math"
)

// This file holds the reference encodings of the stored types: the byte
// layouts are GGML's, so GGUF files from llama.cpp read and write unchanged.
//
//	Q8_0 block: f16 d, int8 q[32];     x[i] = d·q[i]
//	Q4_0 block: f16 d, uint8 q[16];    x[i] = d·((q[i]&15)−8), x[i+16] = d·((q[i]>>4)−8)

// F16ToF32 converts an IEEE 754 half-precision value.
func F16ToF32(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h) & 0x3ff
	switch {
	case exp == 0 && mant == 0:
		return math.Float32frombits(sign)
	case exp == 0: // subnormal: renormalise
		e := uint32(127 - 15 + 1)
		for mant&0x400 == 0 {
			mant <<= 1
			e--
		}
		mant &= 0x3ff
		return math.Float32frombits(sign | e<<23 | mant<<13)
	case exp == 0x1f:
		return math.Float32frombits(sign | 0xff<<23 | mant<<13)
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | mant<<13)
}

// F32ToF16 converts to half precision, rounding to nearest even; values
// beyond the range become ±Inf.
func F32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int32(b>>23) & 0xff
	mant := b & 0x7fffff
	if exp == 0xff { // Inf or NaN
		if mant != 0 {
			return sign | 0x7e00
		}
		return sign | 0x7c00
	}
	e := exp - 127 + 15
	if e >= 0x1f {
		return sign | 0x7c00
	}
	if e <= 0 {
		if e < -10 {
			return sign
		}
		mant |= 0x800000
		shift := uint32(14 - e)
		half := uint32(1) << (shift - 1)
		rest := mant & (1<<shift - 1)
		m := mant >> shift
		if rest > half || (rest == half && m&1 == 1) {
			m++
		}
		return sign | uint16(m)
	}
	m := mant >> 13
	rest := mant & 0x1fff
	h := uint32(e)<<10 | m
	if rest > 0x1000 || (rest == 0x1000 && h&1 == 1) {
		h++ // may carry into the exponent, which is still correct
	}
	return sign | uint16(h)
}

// BF16ToF32 converts a bfloat16 value.
func BF16ToF32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// F32ToBF16 converts to bfloat16, rounding to nearest even.
func F32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 { // NaN stays NaN
		return uint16(b>>16) | 0x40
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

// Quantize encodes src (a whole number of blocks) as dt.
func Quantize(dt DType, src []float32) ([]byte, error) {
	n, err := dt.RowBytes(len(src))
	if err != nil {
		return nil, err
	}
	out := make([]byte, n)
	switch dt {
	case F32:
		for i, v := range src {
			binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(v))
		}
	case F16:
		for i, v := range src {
			binary.LittleEndian.PutUint16(out[2*i:], F32ToF16(v))
		}
	case BF16:
		for i, v := range src {
			binary.LittleEndian.PutUint16(out[2*i:], F32ToBF16(v))
		}
	case Q8_0:
		for b := 0; b < len(src)/QK; b++ {
			quantQ8(out[b*34:(b+1)*34], src[b*QK:(b+1)*QK])
		}
	case Q4_0:
		for b := 0; b < len(src)/QK; b++ {
			quantQ4(out[b*18:(b+1)*18], src[b*QK:(b+1)*QK])
		}
	default:
		be, bb := dt.BlockElems(), dt.BlockBytes()
		if be == 1 {
			return nil, fmt.Errorf("kernels: cannot quantize to %v", dt)
		}
		for b := 0; b < len(src)/be; b++ {
			quantBlock(dt, out[b*bb:(b+1)*bb], src[b*be:(b+1)*be])
		}
	}
	return out, nil
}

func quantQ8(dst []byte, x []float32) {
	var amax float32
	for _, v := range x {
		if a := float32(math.Abs(float64(v))); a > amax {
			amax = a
		}
	}
	d := amax / 127
	var id float32
	if d != 0 {
		id = 1 / d
	}
	binary.LittleEndian.PutUint16(dst, F32ToF16(d))
	for i, v := range x {
		dst[2+i] = byte(int8(math.RoundToEven(float64(v * id))))
	}
}

func quantQ4(dst []byte, x []float32) {
	var amax, max float32
	for _, v := range x {
		if a := float32(math.Abs(float64(v))); a > amax {
			amax, max = a, v
		}
	}
	d := max / -8
	var id float32
	if d != 0 {
		id = 1 / d
	}
	binary.LittleEndian.PutUint16(dst, F32ToF16(d))
	for j := 0; j < QK/2; j++ {
		x0 := x[j]*id + 8.5
		x1 := x[j+QK/2]*id + 8.5
		q0 := min(15, int(int8(x0)))
		q1 := min(15, int(int8(x1)))
		dst[2+j] = byte(q0) | byte(q1)<<4
	}
}

// Dequantize decodes len(dst) elements of type dt from src, which must hold
// exactly that many (a whole number of blocks).
func Dequantize(dt DType, src []byte, dst []float32) error {
	n, err := dt.RowBytes(len(dst))
	if err != nil {
		return err
	}
	if len(src) != n {
		return fmt.Errorf("kernels: %v: %d bytes for %d elements, want %d", dt, len(src), len(dst), n)
	}
	switch dt {
	case F32:
		for i := range dst {
			dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
		}
	case F16:
		for i := range dst {
			dst[i] = F16ToF32(binary.LittleEndian.Uint16(src[2*i:]))
		}
	case BF16:
		for i := range dst {
			dst[i] = BF16ToF32(binary.LittleEndian.Uint16(src[2*i:]))
		}
	case Q8_0:
		for b := 0; b < len(dst)/QK; b++ {
			blk := src[b*34:]
			d := F16ToF32(binary.LittleEndian.Uint16(blk))
			for i := 0; i < QK; i++ {
				dst[b*QK+i] = d * float32(int8(blk[2+i]))
			}
		}
	case Q4_0:
		for b := 0; b < len(dst)/QK; b++ {
			blk := src[b*18:]
			d := F16ToF32(binary.LittleEndian.Uint16(blk))
			for j := 0; j < QK/2; j++ {
				dst[b*QK+j] = d * float32(int(blk[2+j]&15)-8)
				dst[b*QK+j+QK/2] = d * float32(int(blk[2+j]>>4)-8)
			}
		}
	default:
		be, bb := dt.BlockElems(), dt.BlockBytes()
		for b := 0; b < len(dst)/be; b++ {
			dequantBlock(dt, src[b*bb:(b+1)*bb], dst[b*be:(b+1)*be])
		}
	}
	return nil
}
