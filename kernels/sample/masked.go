package sample

import (
	"math"
	"math/bits"
	"slices"

	"github.com/specgate/specgate/kernels"
)

// Masked sampling: guided decoding allows a token set, given as a bitset
// (token j is allowed when bit j%64 of mask[j/64] is set; ids at or past
// 64·len(mask) are disallowed, bits past the row are ignored). The
// reference is to set every disallowed logit to -Inf
// (kernels.MaskLogitsRef) and run the plain path; the masked methods give
// exactly that result and advance the random source the same way, but
// never write the disallowed logits. When few tokens are allowed (the
// common case under a grammar) they gather the allowed logits into a
// compact row and work on that alone, so the cost follows the number of
// allowed tokens, not the vocabulary; when most are allowed, gathering
// buys nothing and they mask a scratch copy and take the plain path.

// compactMaxFrac decides between the two: the compact row is used while at
// most this fraction of the row is allowed. Gathering costs about as much
// per allowed token as the plain path's passes save per disallowed one, so
// the break-even sits high.
const compactMaxFrac = 0.75

// ArgmaxMasked returns Argmax of logits with every id the mask disallows
// set to -Inf: the allowed id with the largest logit, the lowest on a tie;
// NaN never wins; 0 when no allowed logit beats -Inf (as Argmax of an all
// -Inf row), -1 for an empty row. It reads only the allowed logits.
func ArgmaxMasked(logits []float32, mask []uint64) int32 {
	n := len(logits)
	if n == 0 {
		return -1
	}
	best, bv := 0, negInf
	words := min(len(mask), (n+63)/64)
	for w := 0; w < words; w++ {
		m := mask[w]
		if m == 0 {
			continue
		}
		base := w * 64
		if m == math.MaxUint64 && base+64 <= n {
			if i := firstAbove((*[64]float32)(logits[base:base+64]), bv); i >= 0 {
				best, bv = base+i, logits[base+i]
			}
			continue
		}
		for ; m != 0; m &= m - 1 {
			i := base + bits.TrailingZeros64(m)
			if i >= n {
				break
			}
			if v := logits[i]; v > bv {
				best, bv = i, v
			}
		}
	}
	return int32(best)
}

// firstAbove returns the index of the first maximum of row if it is above
// bv, else -1. Once a scan has seen a few words, most words hold nothing
// above the running best, so it first takes the maximum alone with four
// independent accumulators (no index, no loop-carried branch chain) and
// looks for the index only when it must. NaN never compares above.
func firstAbove(row *[64]float32, bv float32) int {
	m0, m1, m2, m3 := bv, bv, bv, bv
	for i := 0; i < 64; i += 4 {
		if v := row[i]; v > m0 {
			m0 = v
		}
		if v := row[i+1]; v > m1 {
			m1 = v
		}
		if v := row[i+2]; v > m2 {
			m2 = v
		}
		if v := row[i+3]; v > m3 {
			m3 = v
		}
	}
	m := max(m0, m1, m2, m3) // no NaN can be here: NaN never replaced bv
	if !(m > bv) {
		return -1
	}
	for i, v := range row {
		if v == m {
			return i
		}
	}
	return -1
}

// CountAllowed returns how many ids in [0, n) the mask allows.
func CountAllowed(mask []uint64, n int) int {
	words := min(len(mask), (n+63)/64)
	c := 0
	for _, m := range mask[:words] {
		c += bits.OnesCount64(m)
	}
	if words > 0 && words*64 > n {
		// Bits past the row in the last word do not count.
		c -= bits.OnesCount64(mask[words-1] >> uint(n-(words-1)*64))
	}
	return c
}

// SampleMasked returns exactly what Sample would for logits with every id
// the mask disallows set to -Inf. logits and mask are only read. The cost is
// O(len(logits)/64 + allowed) when few tokens are allowed; it never
// exceeds the plain path's by more than one masked copy of the row.
func (s *Sampler) SampleMasked(logits []float32, mask []uint64, history []int32) int32 {
	n := len(logits)
	if n == 0 {
		return -1
	}
	if s.Greedy() && !s.penalties(history) {
		return ArgmaxMasked(logits, mask)
	}
	cnt := CountAllowed(mask, n)
	if !compactBetter(cnt, n) {
		return s.Sample(s.maskedRow(logits, mask), history)
	}
	s.gather(logits, mask, cnt)
	s.penaliseCompact(history, n)
	if s.Greedy() {
		return s.compactArgmax()
	}
	if hot := s.compactProbs(n); hot >= 0 {
		return hot
	}
	return s.drawCompact(len(history))
}

// SampleRow is the reference for one row of a kernels.Sampler's
// SampleRows: it re-aims s at r.Params (as Reset) and returns
// Sample(logits, r.History), or SampleMasked(logits, r.Mask, r.History)
// when r.Mask is not nil. logits is row r.Row; r.Row itself is not read.
func (s *Sampler) SampleRow(logits []float32, r kernels.SampleRow) int32 {
	s.Reset(r.Params)
	if r.Mask != nil {
		return s.SampleMasked(logits, r.Mask, r.History)
	}
	return s.Sample(logits, r.History)
}

// ProbsMasked writes into dst (len(dst) ≥ len(logits)) exactly what Probs
// would for logits with every id the mask disallows set to -Inf. It
// clears dst[:len(logits)] and then writes only the surviving ids, so
// beyond that clear its cost follows the number of allowed tokens when
// few are allowed. logits and mask are only read.
func (s *Sampler) ProbsMasked(logits []float32, mask []uint64, history []int32, dst []float32) {
	n := len(logits)
	dst = dst[:n]
	if n == 0 {
		return
	}
	cnt := CountAllowed(mask, n)
	if !compactBetter(cnt, n) {
		s.Probs(s.maskedRow(logits, mask), history, dst)
		return
	}
	clear(dst)
	s.gather(logits, mask, cnt)
	s.penaliseCompact(history, n)
	if hot := s.compactProbs(n); hot >= 0 {
		dst[hot] = 1
		return
	}
	for j, p := range s.pc {
		dst[s.ids[j]] = p
	}
}

func compactBetter(allowed, n int) bool {
	return float64(allowed) <= compactMaxFrac*float64(n)
}

// penalties reports whether any penalty can change a logit.
func (s *Sampler) penalties(history []int32) bool { return s.p.Penalties(len(history)) }

// maskedRow returns a scratch copy of logits with the mask applied by the
// reference op: the dense fallback.
func (s *Sampler) maskedRow(logits []float32, mask []uint64) []float32 {
	s.mrow = grow(s.mrow, len(logits))
	copy(s.mrow, logits)
	kernels.MaskLogitsRef(s.mrow, mask)
	return s.mrow
}

// gather fills s.ids with the cnt allowed ids below len(logits), ascending,
// and s.vals with their logits, NaN turned into -Inf as penalised does.
// Ascending ids keep every tie-break (lowest id first) and every summation
// order of the full row.
func (s *Sampler) gather(logits []float32, mask []uint64, cnt int) {
	n := len(logits)
	s.ids = grow(s.ids, cnt)
	s.vals = grow(s.vals, cnt)
	ids, vals := s.ids, s.vals
	j := 0
	words := min(len(mask), (n+63)/64)
	for w := 0; w < words; w++ {
		m := mask[w]
		if m == 0 {
			continue
		}
		base := w * 64
		if m == math.MaxUint64 && base+64 <= n {
			copy(vals[j:j+64], logits[base:base+64])
			for i := range 64 {
				ids[j+i] = int32(base + i)
			}
			j += 64
			continue
		}
		for ; m != 0; m &= m - 1 {
			i := base + bits.TrailingZeros64(m)
			if i >= n {
				break
			}
			ids[j] = int32(i)
			vals[j] = logits[i]
			j++
		}
	}
	for i, v := range vals {
		if v != v {
			vals[i] = negInf
		}
	}
}

// penaliseCompact applies the penalties to the gathered row exactly as
// penalised does to the full one; n is the full row's length. Disallowed
// tokens are -Inf in the full row, which penalised leaves alone, so here
// they are simply skipped.
func (s *Sampler) penaliseCompact(history []int32, n int) {
	if !s.penalties(history) {
		return
	}
	rep := s.p.RepeatPenalty
	repOn := rep > 0 && rep != 1
	window := history
	switch last := s.p.RepeatLastN; {
	case last == 0:
		window = tail(history, DefaultRepeatLastN)
	case last > 0:
		window = tail(history, last)
	}
	s.counts = grow(s.counts, n)
	counts := s.counts
	for _, id := range window {
		if id >= 0 && int(id) < n {
			counts[id]++
		}
	}
	ids, vals := s.ids, s.vals
	for _, id := range window {
		if id < 0 || int(id) >= n || counts[id] == 0 {
			continue
		}
		c := counts[id]
		counts[id] = 0 // visited; also leaves counts zeroed for the next call
		j, ok := slices.BinarySearch(ids, id)
		if !ok {
			continue // disallowed: -Inf in the full row, left alone there
		}
		v := vals[j]
		if math.IsInf(float64(v), -1) {
			continue
		}
		if repOn {
			if v <= 0 {
				v *= rep
			} else {
				v /= rep
			}
		}
		v -= float32(c)*s.p.FrequencyPenalty + s.p.PresencePenalty
		if v != v {
			v = negInf
		}
		vals[j] = v
	}
}

// compactTop returns the position of the first maximum of the gathered
// row, or -1 when nothing beats -Inf.
func (s *Sampler) compactTop() int {
	top, bv := -1, negInf
	for j, v := range s.vals {
		if v > bv {
			top, bv = j, v
		}
	}
	return top
}

// compactArgmax is Argmax of the masked full row.
func (s *Sampler) compactArgmax() int32 {
	if top := s.compactTop(); top >= 0 {
		return s.ids[top]
	}
	return 0 // Argmax of a row with nothing above -Inf
}

// compactProbs computes Probs of the masked full row (of length n) from the
// gathered one. When that distribution is one-hot it returns the token;
// otherwise it returns -1 and leaves in s.pc[j] the probability of token
// s.ids[j].
func (s *Sampler) compactProbs(n int) int32 {
	top := s.compactTop()
	if top < 0 {
		return 0 // as Probs: one-hot on Argmax of an all -Inf row, id 0
	}
	maxL := s.vals[top]
	if s.Greedy() || math.IsInf(float64(maxL), 0) {
		return s.ids[top]
	}
	s.pc = grow(s.pc, len(s.vals))
	clear(s.pc)
	s.softmax(s.vals, s.filter(s.vals, maxL, n), maxL, s.pc)
	return -1
}

// drawCompact is Draw over the full row's distribution, given as s.pc over
// s.ids: zero weights add nothing and ids ascend, so the sums, the single
// uniform and the pick are the same.
func (s *Sampler) drawCompact(pos int) int32 {
	var total float64
	last := -1
	for j, p := range s.pc {
		if p > 0 {
			total += float64(p)
			last = j
		}
	}
	u := s.Uniform(pos)
	if last < 0 {
		return 0
	}
	target := u * total
	var cum float64
	for j, p := range s.pc {
		if p > 0 {
			cum += float64(p)
			if cum > target {
				return s.ids[j]
			}
		}
	}
	return s.ids[last]
}
