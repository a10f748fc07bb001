package kernels

import (
	"math"
	"math/bits"
)

// negInfBlock is copied over runs of disallowed tokens: one memmove per
// run is several times faster than a store per element.
var negInfBlock = func() (b [4096]float32) {
	for i := range b {
		b[i] = float32(math.Inf(-1))
	}
	return b
}()

// MaskLogitsRef is the reference masking op. Token j is allowed when bit
// j%64 of mask[j/64] is set; for every disallowed j (including every j ≥
// 64·len(mask), such as the padding columns some models add past the
// tokenizer's vocabulary) logits[j] = -Inf. Allowed entries are unchanged.
//
// After it, softmax gives disallowed tokens probability exactly 0 and
// argmax never picks one (while at least one token is allowed).
func MaskLogitsRef(logits []float32, mask []uint64) {
	n := len(logits)
	w := 0
	for ; w < len(mask) && w*64 < n; w++ {
		m := mask[w]
		base := w * 64
		if m == math.MaxUint64 {
			continue
		}
		end := min(base+64, n)
		if m == 0 {
			// Extend over the whole run of empty words.
			for w+1 < len(mask) && mask[w+1] == 0 && (w+1)*64 < n && end-base < len(negInfBlock) {
				w++
				end = min((w+1)*64, n)
			}
			copy(logits[base:end], negInfBlock[:])
			continue
		}
		row := logits[base:end]
		for off := ^m; off != 0; off &= off - 1 {
			if j := bits.TrailingZeros64(off); j < len(row) {
				row[j] = float32(math.Inf(-1))
			}
		}
	}
	for base := w * 64; base < n; base += len(negInfBlock) {
		copy(logits[base:min(base+len(negInfBlock), n)], negInfBlock[:])
	}
}
