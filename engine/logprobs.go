package engine

import (
	"math"
	"slices"
)

// logprobs returns tok's log probability under row's softmax and the top
// alternatives, in float64 for the normalizer so long rows lose nothing.
// Ties among the top break towards the lower id, so the list is a
// function of the row alone.
func (e *Engine) logprobs(row []float32, tok int32, top int) TokenLogprob {
	maxL := math.Inf(-1)
	for _, l := range row {
		if float64(l) > maxL {
			maxL = float64(l)
		}
	}
	var sum float64
	for _, l := range row {
		sum += math.Exp(float64(l) - maxL)
	}
	lse := maxL + math.Log(sum)
	lp := func(id int32) float32 { return float32(float64(row[id]) - lse) }
	out := TokenLogprob{Token: tok, Piece: string(e.tok.Piece(tok)), Logprob: lp(tok)}
	top = min(top, MaxTopLogprobs, len(row))
	if top <= 0 {
		return out
	}
	// A partial selection: keep the best top ids seen so far, sorted.
	best := make([]int32, 0, top+1)
	better := func(a, b int32) bool { return row[a] > row[b] || row[a] == row[b] && a < b }
	for id := range int32(len(row)) {
		if len(best) == top && !better(id, best[top-1]) {
			continue
		}
		i, _ := slices.BinarySearchFunc(best, id, func(x, y int32) int {
			if better(x, y) {
				return -1
			}
			return 1
		})
		best = slices.Insert(best, i, id)
		if len(best) > top {
			best = best[:top]
		}
	}
	out.Top = make([]TopLogprob, len(best))
	for i, id := range best {
		out.Top[i] = TopLogprob{Token: id, Piece: string(e.tok.Piece(id)), Logprob: lp(id)}
	}
	return out
}
