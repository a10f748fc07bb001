package cpu

import "math"

// The softmax of attention scores, vectorized without transposing them.
//
// Attention keeps a chunk's scores position-major: nh heads per position,
// head h of position j at s[j·nh+h]. A stretch of 8 positions is then 8·nh
// floats, a whole number of 8-lane vectors, in which lane i always belongs
// to head i mod nh. So with the scores padded to whole stretches (-Inf rows
// at the end, which weigh e^-Inf = 0), the per-head maximum, the exponents
// and the per-head sums are plain vector passes over stretches against an
// 8·nh "pattern" (a value per head, repeated 8 times), followed by a fold
// of the pattern's 8 rows. Each head's result depends only on its own
// scores and the position order, never on nh, so splitting heads into
// chunks differently (a batch of one versus eight) changes nothing.

var negInf = float32(math.Inf(-1))

var (
	// colMax sets m[i] = max over k of s[k·len(m)+i]: len(m) is a
	// multiple of 8 and len(s) a whole number (≥ 1) of len(m) stretches.
	colMax = colMaxGo
	// expSub sets s[k·len(p)+i] = e^(s[k·len(p)+i] − p[i]) and sum[i] to
	// the sum over k of those, added in order of k; lengths as colMax's,
	// len(sum) = len(p).
	expSub = expSubGo
)

func colMaxGo(s, m []float32) {
	for i := range m {
		m[i] = negInf
	}
	for k := 0; k+len(m) <= len(s); k += len(m) {
		for i, x := range s[k : k+len(m)] {
			m[i] = max(m[i], x)
		}
	}
}

func expSubGo(s, p, sum []float32) {
	clear(sum)
	for k := 0; k+len(p) <= len(s); k += len(p) {
		st := s[k : k+len(p)]
		for i, x := range st {
			e := expf(x - p[i])
			st[i] = e
			sum[i] += e
		}
	}
}

// softmaxScratch is the scratch softmaxPos needs for nh heads.
func softmaxScratch(nh int) int { return 18 * nh }

// softmaxPos replaces s, whole stretches of 8 positions × nh heads
// (position-major), by e^(s − m_h), m_h the maximum of head h's scores, and
// returns the maxima and the sums of the exponents, one per head. Both
// returned slices live in scratch (softmaxScratch(nh) floats).
func softmaxPos(s []float32, nh int, scratch []float32) (mx, sum []float32) {
	L := 8 * nh
	pat, acc := scratch[:L], scratch[L:2*L]
	mx, sum = scratch[2*L:2*L+nh], scratch[2*L+nh:2*L+2*nh]
	colMax(s, pat)
	for h := range nh {
		m := pat[h]
		for r := 1; r < 8; r++ {
			m = max(m, pat[r*nh+h])
		}
		mx[h] = m
	}
	for r := range 8 {
		copy(pat[r*nh:(r+1)*nh], mx)
	}
	expSub(s, pat, acc)
	for h := range nh {
		var z float32
		for r := range 8 {
			z += acc[r*nh+h]
		}
		sum[h] = z
	}
	return mx, sum
}
