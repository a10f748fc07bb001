package kernels

import (
	"encoding/binary"
	"math"
)

// The GGML quantizations beyond Q8_0 and Q4_0, in GGML's byte layouts
// (all little-endian; "f16" is an IEEE half). Blocks of 32 values:
//
//	Q4_1:   f16 d, f16 m, uint8 q[16]          x[j] = d·(q[j]&15) + m, x[j+16] = d·(q[j]>>4) + m
//	Q5_0:   f16 d, uint32 h, uint8 q[16]       as Q4_0 with bit j of h as bit 4 of value j; x = d·(v−16)
//	Q5_1:   f16 d, f16 m, uint32 h, uint8 q[16] x = d·v + m, v 5 bits as in Q5_0
//	IQ4_NL: f16 d, uint8 q[16]                 x = d·IQ4NLValues[nibble], nibbles as in Q4_0
//
// Super-blocks of 256 values, in sub-blocks of 16 or 32 with their own
// quantized scales:
//
//	Q2_K: uint8 sc[16], uint8 q[64], f16 d, f16 dmin
//	      sub-block s of 16: x = d·(sc[s]&15)·q − dmin·(sc[s]>>4), q 2 bits
//	Q3_K: uint8 hmask[32], uint8 q[64], uint8 sc[12], f16 d
//	      sub-block s of 16: x = d·(scale_s−32)·(q − 4·(1−high bit)), scale 6 bits
//	Q4_K: f16 d, f16 dmin, uint8 sc[12], uint8 q[128]
//	      sub-block s of 32: x = d·scale_s·q − dmin·min_s, scale and min 6 bits
//	Q5_K: f16 d, f16 dmin, uint8 sc[12], uint8 qh[32], uint8 q[128]; as Q4_K with a fifth bit
//	Q6_K: uint8 ql[128], uint8 qh[64], int8 sc[16], f16 d
//	      sub-block s of 16: x = d·sc[s]·(q−32), q 6 bits
//	IQ4_XS: f16 d, uint16 scales_h, uint8 scales_l[4], uint8 q[128]
//	      sub-block s of 32: x = d·(scale_s−32)·IQ4NLValues[nibble]
//
// Within a super-block the 2-, 4- and 6-bit fields are spread over the
// bytes as GGML spreads them; Q2KValues to Q6KValues are the one place that
// walks them in element order, for the decoders here and the reference dot
// products of the CPU backend.

// IQ4NLValues is the non-linear table of IQ4_NL and IQ4_XS: a 4-bit index
// selects one of these 16 values.
var IQ4NLValues = [16]int8{-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113}

// ScaleMinK4 returns sub-block j's 6-bit scale and min from the 12 packed
// scale bytes of a Q4_K or Q5_K super-block.
func ScaleMinK4(j int, q []byte) (sc, m uint8) {
	if j < 4 {
		return q[j] & 63, q[j+4] & 63
	}
	return q[j+4]&15 | (q[j-4]>>6)<<4, q[j+4]>>4 | (q[j]>>6)<<4
}

// ScalesQ3K returns the 16 signed 6-bit scales (already less 32) packed in
// the 12 scale bytes of a Q3_K super-block.
func ScalesQ3K(q []byte) [16]int8 {
	var s [16]int8
	for j := range 16 {
		lo := q[j%8] & 15
		if j >= 8 {
			lo = q[j-8] >> 4
		}
		hi := (q[8+j%4] >> (2 * (j / 4))) & 3
		s[j] = int8(lo|hi<<4) - 32
	}
	return s
}

// ScaleIQ4XS returns sub-block j's signed scale (already less 32) of an
// IQ4_XS super-block.
func ScaleIQ4XS(blk []byte, j int) int8 {
	h := binary.LittleEndian.Uint16(blk[2:])
	ls := (blk[4+j/2]>>(4*(j%2)))&15 | byte((h>>(2*j))&3)<<4
	return int8(ls) - 32
}

func f16At(b []byte) float32 { return F16ToF32(binary.LittleEndian.Uint16(b)) }

// dequantBlock decodes one block of dt (blk holds exactly one) into out.
func dequantBlock(dt DType, blk []byte, out []float32) {
	switch dt {
	case Q4_1:
		d, m := f16At(blk), f16At(blk[2:])
		for j, c := range blk[4:20] {
			out[j] = d*float32(c&15) + m
			out[j+16] = d*float32(c>>4) + m
		}
	case Q5_0, Q5_1:
		d, off := f16At(blk), 2
		var m float32 = 0
		if dt == Q5_1 {
			m, off = f16At(blk[2:]), 4
		}
		h := binary.LittleEndian.Uint32(blk[off:])
		for j, c := range blk[off+4 : off+20] {
			v0 := int32(c&15) | int32(h>>j&1)<<4
			v1 := int32(c>>4) | int32(h>>(j+16)&1)<<4
			if dt == Q5_0 {
				out[j], out[j+16] = d*float32(v0-16), d*float32(v1-16)
			} else {
				out[j], out[j+16] = d*float32(v0)+m, d*float32(v1)+m
			}
		}
	case IQ4_NL:
		d := f16At(blk)
		for j, c := range blk[2:18] {
			out[j] = d * float32(IQ4NLValues[c&15])
			out[j+16] = d * float32(IQ4NLValues[c>>4])
		}
	case Q2_K:
		d, dmin := f16At(blk[80:]), f16At(blk[82:])
		var v [QKK]int8
		Q2KValues(blk, &v)
		for i := range out {
			sc := blk[i/16]
			out[i] = d*float32(sc&15)*float32(v[i]) - dmin*float32(sc>>4)
		}
	case Q3_K:
		d := f16At(blk[108:])
		var v [QKK]int8
		Q3KValues(blk, &v)
		sc := ScalesQ3K(blk[96:108])
		for i := range out {
			out[i] = d * float32(sc[i/16]) * float32(v[i])
		}
	case Q4_K, Q5_K:
		d, dmin := f16At(blk), f16At(blk[2:])
		var v [QKK]int8
		if dt == Q4_K {
			Q4KValues(blk, &v)
		} else {
			Q5KValues(blk, &v)
		}
		for s := range 8 {
			sc, m := ScaleMinK4(s, blk[4:16])
			ds, ms := d*float32(sc), dmin*float32(m)
			for i := s * 32; i < s*32+32; i++ {
				out[i] = ds*float32(v[i]) - ms
			}
		}
	case Q6_K:
		d := f16At(blk[208:])
		var v [QKK]int8
		Q6KValues(blk, &v)
		for i := range out {
			out[i] = d * float32(int8(blk[192+i/16])) * float32(v[i])
		}
	case IQ4_XS:
		d := f16At(blk)
		for s := range 8 {
			ds := d * float32(ScaleIQ4XS(blk, s))
			for j, c := range blk[8+16*s : 8+16*s+16] {
				out[32*s+j] = ds * float32(IQ4NLValues[c&15])
				out[32*s+j+16] = ds * float32(IQ4NLValues[c>>4])
			}
		}
	}
}

// Q2KValues sets v to the 256 2-bit quants of a Q2_K super-block, in
// element order: element 128·n + 32·j + l is bits 2j of byte 32·n + l.
func Q2KValues(blk []byte, v *[QKK]int8) {
	for n := range 2 {
		q := blk[16+32*n : 16+32*n+32]
		for j := range 4 {
			for l, c := range q {
				v[128*n+32*j+l] = int8(c >> (2 * j) & 3)
			}
		}
	}
}

// Q3KValues sets v to the 256 signed 3-bit quants of a Q3_K super-block:
// the 2-bit part is laid out as in Q2_K, and a clear bit 4n+j of hmask[l]
// takes 4 off element 128·n + 32·j + l.
func Q3KValues(blk []byte, v *[QKK]int8) {
	hm := blk[:32]
	for n := range 2 {
		q := blk[32+32*n : 32+32*n+32]
		for j := range 4 {
			bit := byte(1) << (4*n + j)
			for l, c := range q {
				x := int8(c >> (2 * j) & 3)
				if hm[l]&bit == 0 {
					x -= 4
				}
				v[128*n+32*j+l] = x
			}
		}
	}
}

// Q4KValues sets v to the 256 nibbles of a Q4_K super-block: element
// 64·n + l is the low nibble of byte 32·n + l, element 64·n + 32 + l its
// high nibble.
func Q4KValues(blk []byte, v *[QKK]int8) {
	q := blk[16:144]
	for n := range 4 {
		for l, c := range q[32*n : 32*n+32] {
			v[64*n+l] = int8(c & 15)
			v[64*n+32+l] = int8(c >> 4)
		}
	}
}

// Q5KValues is q4KValues for Q5_K, whose qh[l] bit 2n adds 16 to element
// 64·n + l and bit 2n+1 to element 64·n + 32 + l.
func Q5KValues(blk []byte, v *[QKK]int8) {
	qh := blk[16:48]
	q := blk[48:176]
	for n := range 4 {
		for l, c := range q[32*n : 32*n+32] {
			v[64*n+l] = int8(c&15 | (qh[l]>>(2*n)&1)<<4)
			v[64*n+32+l] = int8(c>>4 | (qh[l]>>(2*n+1)&1)<<4)
		}
	}
}

// Q6KValues sets v to the 256 signed 6-bit quants (less 32) of a Q6_K
// super-block. In each half n of 128 elements, element 128n + 32i + l
// (i < 4, l < 32) takes its low nibble from ql[64n + l + 32·(i&1)] (low
// nibble for i < 2, high for i ≥ 2) and its top two bits from bits 2i of
// qh[32n + l].
func Q6KValues(blk []byte, v *[QKK]int8) {
	for n := range 2 {
		ql := blk[64*n : 64*n+64]
		qh := blk[128+32*n : 128+32*n+32]
		for l := range 32 {
			h := qh[l]
			v[128*n+l] = int8(ql[l]&15|(h&3)<<4) - 32
			v[128*n+32+l] = int8(ql[l+32]&15|(h>>2&3)<<4) - 32
			v[128*n+64+l] = int8(ql[l]>>4|(h>>4&3)<<4) - 32
			v[128*n+96+l] = int8(ql[l+32]>>4|(h>>6&3)<<4) - 32
		}
	}
}

// The encoders below make valid blocks of every type with simple
// round-to-nearest choices of scales, for tests and synthetic models; they
// do not search for the best scales as GGML's quantizer does, so a file
// they write differs from llama-quantize's, though both decode the same way.

func roundClamp(f float32, lo, hi int) int {
	if f != f { // NaN
		return lo
	}
	return max(lo, min(hi, int(math.RoundToEven(float64(f)))))
}

func inv(d float32) float32 {
	if d == 0 {
		return 0
	}
	return 1 / d
}

// stored returns d as it reads back after storing it as f16.
func stored(d float32) float32 { return F16ToF32(F32ToF16(d)) }

func putF16(b []byte, f float32) { binary.LittleEndian.PutUint16(b, F32ToF16(f)) }

func minMax(x []float32) (lo, hi float32) {
	lo, hi = x[0], x[0]
	for _, v := range x {
		lo, hi = min(lo, v), max(hi, v)
	}
	return lo, hi
}

func absMax(x []float32) float32 {
	var a float32
	for _, v := range x {
		a = max(a, float32(math.Abs(float64(v))))
	}
	return a
}

// nearestIQ4 returns the index of the table value nearest to f.
func nearestIQ4(f float32) byte {
	best, bd := 0, float32(math.Inf(1))
	for i, t := range IQ4NLValues {
		if d := float32(math.Abs(float64(f - float32(t)))); d < bd {
			best, bd = i, d
		}
	}
	return byte(best)
}

// quantBlock encodes one block of x as dt into dst.
func quantBlock(dt DType, dst []byte, x []float32) {
	clear(dst)
	switch dt {
	case Q4_1, Q5_1:
		lo, hi := minMax(x)
		levels := float32(15)
		if dt == Q5_1 {
			levels = 31
		}
		d := stored((hi - lo) / levels)
		putF16(dst, d)
		putF16(dst[2:], lo)
		m, id := stored(lo), inv(d)
		var h uint32
		qs := dst[4:20]
		if dt == Q5_1 {
			qs = dst[8:24]
		}
		for j := range 16 {
			q0 := roundClamp((x[j]-m)*id, 0, int(levels))
			q1 := roundClamp((x[j+16]-m)*id, 0, int(levels))
			qs[j] = byte(q0&15) | byte(q1&15)<<4
			h |= uint32(q0>>4)<<j | uint32(q1>>4)<<(j+16)
		}
		if dt == Q5_1 {
			binary.LittleEndian.PutUint32(dst[4:], h)
		}
	case Q5_0:
		d := stored(absMax(x) / 15)
		putF16(dst, d)
		id := inv(d)
		var h uint32
		for j := range 16 {
			q0 := roundClamp(x[j]*id, -16, 15) + 16
			q1 := roundClamp(x[j+16]*id, -16, 15) + 16
			dst[6+j] = byte(q0&15) | byte(q1&15)<<4
			h |= uint32(q0>>4)<<j | uint32(q1>>4)<<(j+16)
		}
		binary.LittleEndian.PutUint32(dst[2:], h)
	case IQ4_NL:
		d := stored(absMax(x) / 127)
		putF16(dst, d)
		id := inv(d)
		for j := range 16 {
			dst[2+j] = nearestIQ4(x[j]*id) | nearestIQ4(x[j+16]*id)<<4
		}
	case Q2_K:
		quantQ2K(dst, x)
	case Q3_K:
		quantQ3K(dst, x)
	case Q4_K, Q5_K:
		quantQ45K(dt, dst, x)
	case Q6_K:
		quantQ6K(dst, x)
	case IQ4_XS:
		quantIQ4XS(dst, x)
	}
}

// subScales returns, for each sub-block of n values, the step that spans
// its range in levels steps from its minimum, and the minimum's negation
// (at least 0, since a positive minimum is reached from 0).
func subScales(x []float32, n int, levels float32) (sc, mn []float32) {
	for s := 0; s < len(x); s += n {
		lo, hi := minMax(x[s : s+n])
		lo = min(lo, 0)
		sc = append(sc, (hi-lo)/levels)
		mn = append(mn, -lo)
	}
	return sc, mn
}

func maxOf(v []float32) float32 {
	var m float32
	for _, f := range v {
		m = max(m, f)
	}
	return m
}

func quantQ2K(dst []byte, x []float32) {
	sc, mn := subScales(x, 16, 3)
	d, dmin := stored(maxOf(sc)/15), stored(maxOf(mn)/15)
	putF16(dst[80:], d)
	putF16(dst[82:], dmin)
	for s := range 16 {
		ls := roundClamp(sc[s]*inv(d), 0, 15)
		lm := roundClamp(mn[s]*inv(dmin), 0, 15)
		dst[s] = byte(ls) | byte(lm)<<4
		step, off := d*float32(ls), dmin*float32(lm)
		for i := s * 16; i < s*16+16; i++ {
			q := roundClamp((x[i]+off)*inv(step), 0, 3)
			n, j, l := i/128, i%128/32, i%32
			dst[16+32*n+l] |= byte(q) << (2 * j)
		}
	}
}

func quantQ3K(dst []byte, x []float32) {
	var sc [16]float32
	for s := range 16 {
		sc[s] = absMax(x[16*s:16*s+16]) / 4
	}
	d := stored(maxOf(sc[:]) / 31)
	putF16(dst[108:], d)
	var ls [16]int
	for s := range 16 {
		ls[s] = roundClamp(sc[s]*inv(d), 0, 31)
		v := byte(ls[s] + 32)
		if s < 8 {
			dst[96+s] |= v & 15
		} else {
			dst[96+s-8] |= (v & 15) << 4
		}
		dst[96+8+s%4] |= (v >> 4) << (2 * (s / 4))
		step := d * float32(ls[s])
		for i := s * 16; i < s*16+16; i++ {
			q := roundClamp(x[i]*inv(step), -4, 3) + 4
			n, j, l := i/128, i%128/32, i%32
			dst[32+32*n+l] |= byte(q&3) << (2 * j)
			if q >= 4 {
				dst[l] |= 1 << (4*n + j)
			}
		}
	}
}

func quantQ45K(dt DType, dst []byte, x []float32) {
	levels, qoff := float32(15), 48
	if dt == Q4_K {
		qoff = 16
	} else {
		levels = 31
	}
	sc, mn := subScales(x, 32, levels)
	d, dmin := stored(maxOf(sc)/63), stored(maxOf(mn)/63)
	putF16(dst, d)
	putF16(dst[2:], dmin)
	s12 := dst[4:16]
	for s := range 8 {
		ls := byte(roundClamp(sc[s]*inv(d), 0, 63))
		lm := byte(roundClamp(mn[s]*inv(dmin), 0, 63))
		if s < 4 {
			s12[s] |= ls
			s12[s+4] |= lm
		} else {
			s12[s+4] = ls&15 | (lm&15)<<4
			s12[s-4] |= (ls >> 4) << 6
			s12[s] |= (lm >> 4) << 6
		}
		step, off := d*float32(ls), dmin*float32(lm)
		for i := s * 32; i < s*32+32; i++ {
			q := roundClamp((x[i]+off)*inv(step), 0, int(levels))
			n, hi, l := i/64, i%64/32, i%32
			dst[qoff+32*n+l] |= byte(q&15) << (4 * hi)
			if q >= 16 {
				dst[16+l] |= 1 << (2*n + hi)
			}
		}
	}
}

func quantQ6K(dst []byte, x []float32) {
	var sc [16]float32
	for s := range 16 {
		sc[s] = absMax(x[16*s:16*s+16]) / 31
	}
	d := stored(maxOf(sc[:]) / 127)
	putF16(dst[208:], d)
	for s := range 16 {
		ls := roundClamp(sc[s]*inv(d), 0, 127)
		dst[192+s] = byte(int8(ls))
		step := d * float32(ls)
		for i := s * 16; i < s*16+16; i++ {
			q := byte(roundClamp(x[i]*inv(step), -32, 31) + 32)
			n, k, l := i/128, i%128/32, i%32
			ql := 64*n + l + 32*(k&1)
			dst[ql] |= (q & 15) << (4 * (k / 2))
			dst[128+32*n+l] |= (q >> 4) << (2 * k)
		}
	}
}

func quantIQ4XS(dst []byte, x []float32) {
	var sc [8]float32
	for s := range 8 {
		sc[s] = absMax(x[32*s:32*s+32]) / 127
	}
	d := stored(maxOf(sc[:]) / 31)
	putF16(dst, d)
	var h uint16
	for s := range 8 {
		ls := roundClamp(sc[s]*inv(d), 0, 31) + 32
		dst[4+s/2] |= byte(ls&15) << (4 * (s % 2))
		h |= uint16(ls>>4) << (2 * s)
		id := inv(d * float32(ls-32))
		for j := range 16 {
			dst[8+16*s+j] = nearestIQ4(x[32*s+j]*id) | nearestIQ4(x[32*s+j+16]*id)<<4
		}
	}
	binary.LittleEndian.PutUint16(dst[2:], h)
}
