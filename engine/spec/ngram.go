package spec

// NGram is prompt-lookup drafting: the continuation of the longest recent
// n-gram match of the context's suffix, found in the sequence's own tokens
// and its session history. It needs no model and keeps no state, so Rewind
// is a no-op; it pays off when the output repeats its input (summaries,
// code edits, quoting earlier turns).
//
// At each tree node the candidates are the distinct tokens that followed
// earlier occurrences of the node's context suffix, longest n first, most
// recent first; rank r of the shape takes the r-th candidate. Its drafts
// are point masses (Q nil). The zero value is ready to use.
type NGram struct {
	// MinN and MaxN bound the suffix lengths tried; zero means 1 and 4.
	MinN, MaxN int
	// Window bounds how many most recent tokens (history, then context)
	// are searched; zero means 4096.
	Window int

	hay []int32
}

var _ Drafter = (*NGram)(nil)

// Name returns "ngram".
func (g *NGram) Name() string { return "ngram" }

// Rewind does nothing: NGram keeps no per-sequence state.
func (g *NGram) Rewind(slot, n int) {}

// Propose fills each tree by lookup. It never fails.
func (g *NGram) Propose(ctxs []Context, trees []*Tree) error {
	minN, maxN, window := g.MinN, g.MaxN, g.Window
	if minN <= 0 {
		minN = 1
	}
	if maxN < minN {
		maxN = max(minN, 4)
	}
	if window <= 0 {
		window = 4096
	}
	for i, c := range ctxs {
		// The haystack is history followed by the context; draft paths are
		// appended per node and removed again.
		g.hay = append(g.hay[:0], c.History...)
		g.hay = append(g.hay, c.Tokens...)
		if len(g.hay) > window {
			g.hay = append(g.hay[:0], g.hay[len(g.hay)-window:]...)
		}
		base := len(g.hay)
		fill(trees[i], c.Shape, func(path []int32, k int) ([]int32, [][]float32) {
			g.hay = append(g.hay[:base], path...)
			var mask []uint64
			if c.Mask != nil {
				mask = c.Mask(append(c.Tokens[:len(c.Tokens):len(c.Tokens)], path...))
			}
			return lookup(g.hay, minN, maxN, k, mask), nil
		})
		g.hay = g.hay[:base]
	}
	return nil
}

// lookup returns up to k distinct tokens that followed earlier occurrences
// of hay's suffix of length n, for n from maxN down to minN, most recent
// occurrence first, skipping tokens mask forbids.
func lookup(hay []int32, minN, maxN, k int, mask []uint64) []int32 {
	var out []int32
	end := len(hay)
	for n := min(maxN, end-1); n >= minN && len(out) < k; n-- {
		suf := hay[end-n:]
		// An occurrence at [s, s+n) with a following token at s+n < end.
		for s := end - n - 1; s >= 0 && len(out) < k; s-- {
			if hay[s+n-1] != suf[n-1] || hay[s] != suf[0] {
				continue
			}
			match := true
			for j := 1; j < n-1; j++ {
				if hay[s+j] != suf[j] {
					match = false
					break
				}
			}
			if !match {
				continue
			}
			tok := hay[s+n]
			if !allowed(mask, tok) || contains(out, tok) {
				continue
			}
			out = append(out, tok)
		}
	}
	return out
}

func contains(s []int32, v int32) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
