package kernels

import "math"

// Tanhf is tanh in float32 computed the way the C library that llama.cpp's
// reference outputs were made with (glibc, whose float tanh and expm1 are
// the classic fdlibm ones) computes it: through e^(2|x|) − 1 in float32
// arithmetic. It is not the correctly rounded tanh: about one input in
// twenty gets the neighbouring float32. Gemma 2 runs every attention score
// and every GELU table entry through tanh, and a last-bit difference there
// can tip a later int8 rounding of an activation, which 26 layers of
// random weights amplify to tenths in the logits; matching the method
// removes that source.
//
// Every operation below is a float32 operation; the explicit conversions
// keep the compiler from fusing a multiply and an add.
func Tanhf(x float32) float32 {
	bits := math.Float32bits(x)
	ax := math.Float32bits(x) & 0x7fffffff
	var z float32
	switch {
	case ax >= 0x7f800000: // ±Inf, NaN
		if x != x {
			return x
		}
		z = 1
	case ax >= 0x41b00000: // |x| ≥ 22: ±1
		z = 1
	case ax == 0:
		return x
	case ax < 0x24000000: // |x| < 2^-55: tanh x = x
		return x * (1 + x)
	case ax >= 0x3f800000: // |x| ≥ 1: 1 − 2/(e^(2|x|)+1)
		t := expm1f(2 * math.Float32frombits(ax))
		z = 1 - float32(2/float32(t+2))
	default: // −(e^(−2|x|)−1)/(e^(−2|x|)+1)
		t := expm1f(-2 * math.Float32frombits(ax))
		z = -t / float32(t+2)
	}
	if bits>>31 != 0 {
		return -z
	}
	return z
}

// expm1f is e^x − 1 in float32 by fdlibm's method: x = k·ln2 + r with ln 2
// split in two, e^r − 1 from a rational approximation in r²/2 corrected
// for the rounding of the reduction, then scaled by 2^k.
func expm1f(x float32) float32 {
	const (
		ln2Hi  = float32(6.9313812256e-01) // 0x3f317180: k·ln2Hi is exact
		ln2Lo  = float32(9.0580006145e-06) // 0x3717f7d1
		invLn2 = float32(1.4426950216e+00)
		q1     = float32(-3.3333335072e-02)
		q2     = float32(1.5873016091e-03)
		q3     = float32(-7.9365076090e-05)
		q4     = float32(4.0082177293e-06)
		q5     = float32(-2.0109921195e-07)
	)
	hx := math.Float32bits(x)
	neg := hx>>31 != 0
	hx &= 0x7fffffff
	if hx >= 0x4195b844 { // |x| ≥ 27·ln2
		switch {
		case hx > 0x7f800000:
			return x + x
		case hx == 0x7f800000 && neg:
			return -1
		case hx == 0x7f800000:
			return x
		case neg:
			return -1
		case x > 8.8721679688e+01:
			return float32(math.Inf(1))
		}
	}
	var hi, lo, c float32
	var k int32
	switch {
	case hx > 0x3eb17218 && hx < 0x3f851592: // 0.5·ln2 < |x| < 1.5·ln2
		if neg {
			hi, lo, k = x+ln2Hi, -ln2Lo, -1
		} else {
			hi, lo, k = x-ln2Hi, ln2Lo, 1
		}
	case hx > 0x3eb17218:
		half := float32(0.5)
		if neg {
			half = -0.5
		}
		k = int32(float32(invLn2*x) + half)
		t := float32(k)
		hi = x - float32(t*ln2Hi)
		lo = t * ln2Lo
	case hx < 0x33000000: // |x| < 2^-25
		return x
	}
	if k != 0 {
		x = hi - lo
		c = (hi - x) - lo
	}
	hfx := float32(0.5) * x
	hxs := x * hfx
	r1 := float32(hxs * q5)
	r1 = float32(hxs * float32(q4+r1))
	r1 = float32(hxs * float32(q3+r1))
	r1 = float32(hxs * float32(q2+r1))
	r1 = float32(hxs * float32(q1+r1))
	r1 = 1 + r1
	t := float32(3) - float32(r1*hfx)
	e := hxs * float32(float32(r1-t)/float32(6-float32(x*t)))
	if k == 0 {
		return x - float32(float32(x*e)-hxs)
	}
	e = float32(x*float32(e-c)) - c
	e -= hxs
	switch {
	case k == -1:
		return float32(0.5*float32(x-e)) - 0.5
	case k == 1 && x < -0.25:
		return -2 * float32(e-float32(x+0.5))
	case k == 1:
		return 1 + float32(2*float32(x-e))
	}
	twoK := math.Float32frombits(uint32(0x3f800000 + k<<23))
	switch {
	case k <= -2 || k > 56:
		y := 1 - float32(e-x)
		if k == 128 {
			return float32(float32(y*2)*math.Float32frombits(0x7f000000)) - 1
		}
		return float32(y*twoK) - 1
	case k < 23:
		t := math.Float32frombits(uint32(0x3f800000 - 0x1000000>>k)) // 1 − 2^-k
		return float32(t-float32(e-x)) * twoK
	default:
		t := math.Float32frombits(uint32((0x7f - k) << 23)) // 2^-k
		y := x - float32(e+t)
		return float32(y+1) * twoK
	}
}
