// Package sample turns logits into a next token: llama.cpp's logits
// processors (repetition/presence/frequency penalties, top-k, top-p, min-p,
// temperature) and a seeded per-request random source.
//
// The random source is keyed by position: the token at position i (the
// i-th of the sequence, prompt included) is drawn with the uniform
// Uniform(i), a hash of (seed, i). A request's draws then depend only on
// its seed and where in the sequence they fall, never on how many draws
// were made before, how steps were batched, whether a step was replayed
// after preemption, or how many speculative drafts were accepted: the same
// seed gives the same text in every case.
//
// The processors run in llama.cpp's default chain order:
//
//	penalties → top-k → top-p → min-p → temperature → softmax → draw
//
// so top-k, top-p and min-p judge the untempered distribution and the
// temperature only reshapes what survives them. Temperature 0 is greedy:
// the argmax of the penalised logits, the lowest id on a tie.
package sample

import (
	"math"
	"slices"

	"github.com/specgate/specgate/kernels"
)

// Params configure one request's sampling. The zero value is greedy
// decoding without penalties. The type is kernels.SampleParams, so a
// backend's kernels.Sampler is handed the very settings this package's
// reference applies.
type Params = kernels.SampleParams

// DefaultRepeatLastN is the penalty window when Params.RepeatLastN is 0.
const DefaultRepeatLastN = 64

var negInf = float32(math.Inf(-1))

// Sampler applies one request's Params. It keeps scratch buffers between
// calls so that steady-state sampling does not allocate; it is not safe for
// concurrent use.
type Sampler struct {
	p Params

	work   []float32 // penalised copy of the logits
	counts []int32   // per-id occurrences in the penalty window, zero between calls
	cand   []int32   // surviving candidate ids
	probs  []float32 // Sample's distribution
	w      []float64 // unnormalised probabilities for top-p
	byID   []uint64  // top-k's candidates: id<<32 | float32 weight bits

	// The masked path's scratch (masked.go), which sampleTopK borrows too.
	ids  []int32   // allowed ids, ascending
	vals []float32 // their (penalised) logits
	pc   []float32 // their probabilities
	mrow []float32 // masked copy of the row for the dense fallback
}

// New returns a Sampler for p, its random source seeded from p.Seed.
func New(p Params) *Sampler {
	return &Sampler{p: p}
}

// Uniform returns the request's uniform in [0, 1) for the token at
// position pos: a hash of (Seed, pos), as good as independent across
// positions and seeds. A drafter that draws its guess for pos with the
// same uniform from a distribution close to the target's guesses the
// target's token often (see Draw).
func (s *Sampler) Uniform(pos int) float64 {
	return Uniform(s.p.Seed, pos)
}

// Uniform is Sampler.Uniform for seed.
func Uniform(seed uint64, pos int) float64 {
	// Two rounds of SplitMix64's finaliser over the seed and the
	// position's Weyl step: every input bit reaches every output bit.
	x := mix64(seed ^ mix64(uint64(pos)*0x9E3779B97F4A7C15+0x632BE59BD9B4E019))
	return float64(x>>11) * 0x1p-53
}

func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xBF58476D1CE4E5B9
	x ^= x >> 27
	x *= 0x94D049BB133111EB
	return x ^ x>>31
}

// Params returns the sampler's parameters.
func (s *Sampler) Params() Params { return s.p }

// Reset makes s sample with p from then on, keeping its scratch buffers:
// one Sampler can serve many requests in turn (a backend's
// kernels.Sampler does), since nothing of a draw depends on earlier ones.
func (s *Sampler) Reset(p Params) { s.p = p }

// Greedy reports whether the sampler always picks the argmax.
func (s *Sampler) Greedy() bool { return !(s.p.Temperature > 0) }

// Argmax returns the index of the largest logit, the lowest index on a tie.
// NaN never wins; a slice of only NaN or -Inf gives 0, an empty one -1.
func Argmax(logits []float32) int32 {
	if len(logits) == 0 {
		return -1
	}
	best, bv := 0, float32(math.Inf(-1))
	for i, v := range logits {
		if v > bv {
			best, bv = i, v
		}
	}
	return int32(best)
}

// Sample picks the next token from logits given the token history (prompt
// and generated ids, oldest first): the token at position len(history). It
// returns exactly what s.Draw(s.Probs(logits, history, dst), len(history))
// would. The result depends only on its arguments and the seed, so a
// speculative verifier gets the very token plain decoding would. logits is
// not modified.
func (s *Sampler) Sample(logits []float32, history []int32) int32 {
	if s.Greedy() {
		// Argmax never picks a NaN (nor -Inf over a number), which is what
		// penalised's NaN → -Inf makes of them: without penalties the
		// copy and the NaN pass over the row are skipped.
		l := logits
		if s.penalties(history) {
			l = s.penalised(logits, history)
		}
		return Argmax(l)
	}
	if k := s.p.TopK; k > 0 && k < len(logits) {
		return s.sampleTopK(logits, history)
	}
	s.probs = grow(s.probs, len(logits))
	s.Probs(logits, history, s.probs)
	return s.Draw(s.probs, len(history))
}

// Probs writes into dst (len(dst) ≥ len(logits)) the distribution Sample
// draws from: after penalties, top-k, top-p, min-p and temperature,
// normalised, with 0 for every filtered token. Greedy samplers give a
// one-hot distribution on the argmax. logits is not modified.
func (s *Sampler) Probs(logits []float32, history []int32, dst []float32) {
	n := len(logits)
	dst = dst[:n]
	clear(dst)
	if n == 0 {
		return
	}
	l := s.penalised(logits, history)
	top := Argmax(l)
	if s.Greedy() || math.IsInf(float64(l[top]), 0) {
		// Greedy; or nothing is possible (all -Inf), or +Inf swamps the
		// softmax: fall back to the argmax.
		dst[top] = 1
		return
	}
	s.softmax(l, s.filter(l, l[top], n), l[top], dst)
}

// softmax writes into dst[id], for each id in cand, the tempered softmax of
// l over cand: relative to the maximum maxL so exp never overflows, with a
// float64 normaliser summed in cand's order. Entries of dst outside cand
// are left alone.
func (s *Sampler) softmax(l []float32, cand []int32, maxL float32, dst []float32) {
	inv := 1 / float64(s.p.Temperature)
	m := float64(maxL)
	var z float64
	for _, id := range cand {
		e := math.Exp((float64(l[id]) - m) * inv)
		if e != e {
			e = 0 // -Inf·0 at an infinite temperature: a masked token stays out
		}
		dst[id] = float32(e)
		z += e
	}
	for _, id := range cand {
		dst[id] = float32(float64(dst[id]) / z)
	}
}

// sampleTopK is Sample with top-k on. Only the k best tokens can be drawn,
// so past the one pass that finds them it works on those alone, where
// Probs clears a whole row and Draw sums it twice. The result is Draw of
// Probs bit for bit: the softmax's normaliser is summed in the order Probs
// sums it (best first), and the draw's running sums run in id order, as
// Draw's do, skipping the zeros Draw skips.
func (s *Sampler) sampleTopK(logits []float32, history []int32) int32 {
	l := s.penalised(logits, history)
	cand := s.topN(l, s.p.TopK)
	// cand[0] is Argmax(l): the largest, the lowest id on a tie, and id 0
	// when nothing beats -Inf (penalised leaves no NaN).
	top := cand[0]
	maxL := l[top]
	if math.IsInf(float64(maxL), 0) {
		return top // Probs' one-hot on the argmax
	}
	cand = s.filterTop(l, cand, maxL)
	inv := 1 / float64(s.p.Temperature)
	m := float64(maxL)
	var z float64
	s.byID = grow(s.byID, len(cand))
	for j, id := range cand {
		e := math.Exp((float64(l[id]) - m) * inv)
		if e != e {
			e = 0 // as softmax
		}
		z += e
		// id above, the float32 weight softmax stores below: sorting
		// sorts by id.
		s.byID[j] = uint64(id)<<32 | uint64(math.Float32bits(float32(e)))
	}
	slices.Sort(s.byID)
	s.ids = grow(s.ids, len(cand))
	s.pc = grow(s.pc, len(cand))
	for j, v := range s.byID {
		s.ids[j] = int32(v >> 32)
		s.pc[j] = float32(float64(math.Float32frombits(uint32(v))) / z)
	}
	return s.drawCompact(len(history))
}

// Draw returns the index drawn from probs (weights need not sum exactly to
// one) for the token at position pos: the inverse of probs' cumulative
// sum, in id order, at Uniform(pos). Zero weights are never drawn; if all
// weights are zero it returns 0, for an empty slice -1.
func (s *Sampler) Draw(probs []float32, pos int) int32 {
	var total float64
	last := -1
	for i, p := range probs {
		if p > 0 {
			total += float64(p)
			last = i
		}
	}
	u := s.Uniform(pos)
	if last < 0 {
		return min(0, int32(len(probs))-1)
	}
	target := u * total
	var cum float64
	for i, p := range probs {
		if p > 0 {
			cum += float64(p)
			if cum > target {
				return int32(i)
			}
		}
	}
	return int32(last) // rounding left target at the very top
}

// penalised returns the logits with the penalties applied: the caller's
// slice when no penalty is active, else a scratch copy. NaN becomes -Inf.
func (s *Sampler) penalised(logits []float32, history []int32) []float32 {
	rep := s.p.RepeatPenalty
	repOn := rep > 0 && rep != 1 // a negative penalty has no meaning: off
	if !repOn && s.p.PresencePenalty == 0 && s.p.FrequencyPenalty == 0 || len(history) == 0 {
		if !hasNaN(logits) {
			return logits
		}
	}
	s.work = grow(s.work, len(logits))
	l := s.work[:len(logits)]
	copy(l, logits)
	for i, v := range l {
		if v != v {
			l[i] = float32(math.Inf(-1))
		}
	}
	if !repOn && s.p.PresencePenalty == 0 && s.p.FrequencyPenalty == 0 {
		return l
	}
	window := history
	switch last := s.p.RepeatLastN; {
	case last == 0:
		window = tail(history, DefaultRepeatLastN)
	case last > 0:
		window = tail(history, last)
	}
	s.counts = grow(s.counts, len(l))
	counts := s.counts
	for _, id := range window {
		if id >= 0 && int(id) < len(l) {
			counts[id]++
		}
	}
	// llama.cpp's penalties: each distinct recent token once.
	for _, id := range window {
		if id < 0 || int(id) >= len(l) || counts[id] == 0 {
			continue
		}
		c := counts[id]
		counts[id] = 0 // visited; also leaves counts zeroed for the next call
		v := l[id]
		if math.IsInf(float64(v), -1) {
			continue // masked (by guided decoding) stays masked
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
			v = float32(math.Inf(-1))
		}
		l[id] = v
	}
	return l
}

func hasNaN(l []float32) bool {
	for _, v := range l {
		if v != v {
			return true
		}
	}
	return false
}

func tail(h []int32, n int) []int32 {
	if len(h) > n {
		return h[len(h)-n:]
	}
	return h
}

// grow returns b with length n, reusing its storage when large enough.
func grow[T any](b []T, n int) []T {
	if cap(b) < n {
		return make([]T, n)
	}
	return b[:n]
}

// filter returns the indices of l that survive top-k, top-p and min-p; l's
// maximum maxL is finite. n is the length of the full vocabulary row, which
// decides whether top-k is on: l may be the compacted allowed subset of a
// masked row (see SampleMasked), whose missing entries are -Inf, and the
// result must not depend on whether they are present. Entries at -Inf
// never survive (they would get probability 0 anyway), which is what keeps
// the top-p selection below identical for the full and the compacted row:
// both hand it the same finite entries in the same order.
func (s *Sampler) filter(l []float32, maxL float32, n int) []int32 {
	if k := s.p.TopK; k > 0 && k < n {
		return s.filterTop(l, s.topN(l, k), maxL)
	}
	cand := s.cand[:0]
	for i, v := range l {
		if v > negInf {
			cand = append(cand, int32(i))
		}
	}
	s.cand = cand
	if topP := float64(s.p.TopP); topP > 0 && topP < 1 {
		s.w = grow(s.w, len(l))
		var z float64
		for i, v := range l {
			e := math.Exp(float64(v - maxL))
			s.w[i] = e
			z += e
		}
		cand = nucleusSelect(l, s.w, cand, topP*z)
	}
	return s.minP(l, cand, maxL)
}

// filterTop is filter with top-k on: cand is topN's k best, best first, so
// top-p is a prefix scan.
func (s *Sampler) filterTop(l []float32, cand []int32, maxL float32) []int32 {
	if topP := float64(s.p.TopP); topP > 0 && topP < 1 {
		cand = nucleus(l, cand, topP, logSumExp(l, cand))
	}
	return s.minP(l, cand, maxL)
}

// minP keeps the candidates min-p lets through, in their order.
func (s *Sampler) minP(l []float32, cand []int32, maxL float32) []int32 {
	if s.p.MinP > 0 {
		// p_i ≥ MinP·p_max ⇔ logit_i ≥ max + ln(MinP), as llama.cpp compares.
		// MinP ≥ 1 keeps just the maximum (and its ties), never nothing.
		minL := maxL + float32(math.Log(math.Min(float64(s.p.MinP), 1)))
		kept := cand[:0]
		for _, id := range cand {
			if l[id] >= minL {
				kept = append(kept, id)
			}
		}
		cand = kept
	}
	return cand
}

// nucleusSelect is top-p without sorting: a quickselect weighted by w (the
// unnormalised probabilities) finds the boundary token, the first in
// best-first order at which the running mass reaches need. It reorders ids
// and returns the prefix holding the boundary and every better token, in no
// particular order. Expected cost O(len(ids)).
func nucleusSelect(l []float32, w []float64, ids []int32, need float64) []int32 {
	lo, hi := 0, len(ids) // the boundary is in ids[lo:hi]; ids[:lo] are all kept
	for hi-lo > 1 {
		// Median of three as pivot: deterministic, so the sampler's random
		// stream stays untouched.
		a, b, c := ids[lo], ids[lo+(hi-lo)/2], ids[hi-1]
		if before(l, b, a) {
			a, b = b, a
		}
		if before(l, c, b) {
			b = c
			if before(l, b, a) {
				b = a
			}
		}
		piv := b
		// Move the tokens better than the pivot to the front, the pivot
		// right after them.
		i := lo
		var mb float64
		for j := lo; j < hi; j++ {
			if id := ids[j]; before(l, id, piv) {
				ids[i], ids[j] = id, ids[i]
				mb += w[id]
				i++
			}
		}
		if mb >= need {
			hi = i
			continue
		}
		need -= mb
		for j := i; j < hi; j++ {
			if ids[j] == piv {
				ids[i], ids[j] = piv, ids[i]
				break
			}
		}
		if w[piv] >= need {
			return ids[:i+1]
		}
		need -= w[piv]
		lo = i + 1
	}
	if hi > lo {
		return ids[:lo+1]
	}
	return ids[:lo] // rounding: the mass never reached need
}

// nucleus returns the shortest prefix of cand (sorted by probability,
// highest first) whose probability mass, normalised by lse (log of the sum
// of exp over the set being filtered), reaches p. It returns all of cand
// when the mass never gets there.
func nucleus(l []float32, cand []int32, p, lse float64) []int32 {
	var cum float64
	for i, id := range cand {
		cum += math.Exp(float64(l[id]) - lse)
		if cum >= p {
			return cand[:i+1]
		}
	}
	return cand
}

// logSumExp is log Σ exp(l[id]) over ids, or over all of l when ids is nil.
func logSumExp(l []float32, ids []int32) float64 {
	m := math.Inf(-1)
	if ids == nil {
		for _, v := range l {
			m = max(m, float64(v))
		}
	} else {
		for _, id := range ids {
			m = max(m, float64(l[id]))
		}
	}
	var z float64
	if ids == nil {
		for _, v := range l {
			z += math.Exp(float64(v) - m)
		}
	} else {
		for _, id := range ids {
			z += math.Exp(float64(l[id]) - m)
		}
	}
	return m + math.Log(z)
}

// before orders candidates: higher logit first, lower id on a tie.
func before(l []float32, a, b int32) bool {
	return l[a] > l[b] || (l[a] == l[b] && a < b)
}

// topN returns the m best ids of l, sorted best first, in s.cand. It keeps
// a heap of the m best seen so far (worst at the root), so small m costs
// O(len(l)) and never sorts the whole vocabulary.
func (s *Sampler) topN(l []float32, m int) []int32 {
	h := s.cand[:0]
	if m >= len(l) {
		for i := range l {
			h = append(h, int32(i))
		}
	} else {
		for i := range m {
			h = append(h, int32(i))
			// sift up: the root is the worst of the heap
			for j := len(h) - 1; j > 0; {
				p := (j - 1) / 2
				if !before(l, h[p], h[j]) {
					break
				}
				h[p], h[j] = h[j], h[p]
				j = p
			}
		}
		// Every id in the heap is below i, so before(l, i, h[0]) is
		// l[i] > l[h[0]]: most of the row is turned away by one compare.
		worst := l[h[0]]
		for i := m; i < len(l); i++ {
			if !(l[i] > worst) {
				continue
			}
			h[0] = int32(i)
			for j := 0; ; {
				c := 2*j + 1
				if c >= len(h) {
					break
				}
				if r := c + 1; r < len(h) && before(l, h[c], h[r]) {
					c = r
				}
				if !before(l, h[j], h[c]) {
					break
				}
				h[j], h[c] = h[c], h[j]
				j = c
			}
			worst = l[h[0]]
		}
	}
	slices.SortFunc(h, func(a, b int32) int {
		if before(l, a, b) {
			return -1
		}
		if before(l, b, a) {
			return 1
		}
		return 0
	})
	s.cand = h
	return h
}
