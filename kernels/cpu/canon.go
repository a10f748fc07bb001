package cpu

import "math"

// One arithmetic for every row.
//
// A request's tokens must not depend on what else is in its batch, so each
// output of a dot-product kernel is defined once, here, and every kernel
// (the batch-1 ones, the multi-row ones, the tiled ones, Go or assembly) computes
// exactly that sequence of roundings, whatever lane, row or tile its output
// falls in:
//
//   - Quantized weights of 32-value blocks (Q8_0, Q4_0, Q5_0, IQ4_NL, and
//     the scaled part of Q4_1 and Q5_1) against a Q8_0 (Q8_1) activation
//     row: for each block b in order, the integer dot product s_b (exact in
//     int32, and exact as a float32: |s_b| < 2²⁴), the scale d_b = d_w·d_x
//     (one float32 rounding) and acc = fma(s_b, d_b, acc), one rounding,
//     from acc = +0. Integer sums are exact in any order, so how a kernel
//     splits a block across lanes does not matter; the float steps are the
//     same. Q4_1's and Q5_1's minimum terms go into a sum of their own,
//     added last (kquant.go). One rule for these types lets a kernel of one
//     serve another: batches of the other four run on Q8_0's
//     (legacyx8.go).
//   - F32 rows of k values: the first k &^ 7 split into chunks of eight,
//     fused-multiply-added lane by lane, chunk after chunk, into one
//     accumulator of eight lanes from +0; the eight lanes reduced as
//     ((v0+v1)+(v2+v3)) + ((v4+v5)+(v6+v7)), and the last k mod 8 products
//     fused into that sum in order. One accumulator per output (not two, to
//     hide the FMA latency of a lone dot product) because a GEMM tile
//     computes twelve outputs at once and has no registers to spare: its
//     independent outputs hide the latency instead (gemm_f32_amd64.s).
//
// Fused multiply-add is the rule because the fast kernels use it; fma32 is
// its exact Go form, for the reference kernels and the wrappers' tails.

// fma32 returns a·b+c rounded once to float32 (ties to even), as
// VFMADD231PS does. The product of two float32s is exact in float64; the
// float64 sum and its exact error (Knuth's TwoSum) then decide the one
// case where rounding the float64 sum again would differ from rounding the
// exact value: a float64 sum exactly halfway between two float32s.
func fma32(a, b, c float32) float32 {
	// The conversions keep the compiler from fusing (the spec allows it
	// where nothing rounds in between), which would round differently.
	p := float64(float64(a) * float64(b))
	cc := float64(c)
	s := p + cc
	bv := s - p
	e := (p - (s - bv)) + (cc - bv)
	r := float32(s)
	if e == 0 || e != e {
		return r
	}
	d := s - float64(r)
	if d == 0 {
		return r
	}
	o := math.Nextafter32(r, float32(math.Inf(int(math.Copysign(1, d)))))
	if float64(r)+float64(o) != 2*s {
		return r // not halfway: s and the exact value round alike
	}
	if (e > 0) == (d > 0) {
		return o // the exact value is past the halfway point, towards o
	}
	return r
}

// hsum8 reduces eight lanes in the canonical order.
func hsum8(v *[8]float32) float32 {
	return ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7]))
}

// qblock is one block's step of a quantized dot product.
func qblock(acc float32, s int32, dw, dx float32) float32 {
	return fma32(float32(s), dw*dx, acc)
}
