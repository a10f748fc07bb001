package tokenizer

// A binary min-heap over a slice, ordered by before: both BPE variants keep
// their candidate merges in one (highest score or lowest rank first, then
// leftmost).

func heapPush[T any](h []T, x T, before func(a, b *T) bool) []T {
	h = append(h, x)
	i := len(h) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !before(&h[i], &h[p]) {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
	return h
}

func heapPop[T any](h []T, before func(a, b *T) bool) (T, []T) {
	top := h[0]
	last := len(h) - 1
	h[0] = h[last]
	h = h[:last]
	i := 0
	for {
		l := 2*i + 1
		if l >= len(h) {
			break
		}
		c := l
		if r := l + 1; r < len(h) && before(&h[r], &h[l]) {
			c = r
		}
		if !before(&h[c], &h[i]) {
			break
		}
		h[i], h[c] = h[c], h[i]
		i = c
	}
	return top, h
}
