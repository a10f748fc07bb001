package spec

import (
	"github.com/specgate/specgate/kernels/sample"
)

// MaskFunc returns the guided-decoding mask of tokens allowed after ctx
// (bit j%64 of word j/64 set = token j allowed, as kernels.MaskLogitsRef
// reads it), or nil when every token is allowed. ctx is the sequence's
// committed tokens followed by a draft path; the function must not keep it.
type MaskFunc func(ctx []int32) []uint64

// Context is what a drafter sees of one sequence for one step.
type Context struct {
	// Slot is the sequence's slot in the drafter, in [0, capacity): the
	// drafter keeps per-slot state (a draft model's KV) between steps.
	Slot int
	// Tokens are the committed tokens, prompt first. The last one is the
	// tree's root: committed but not yet run through the target.
	Tokens []int32
	// History is earlier text of the same session (previous turns) that
	// lookup drafters may copy from; nil when there is none.
	History []int32
	// Shape is the topology to fill; the drafter may leave nodes out (a
	// node's descendants go with it) but never adds any.
	Shape Shape
	// Params are the request's sampling parameters: a greedy request gets
	// point-mass drafts, a sampled one may get drafts with distributions.
	Params sample.Params
	// Mask, when not nil, is the request's guided-decoding mask; drafters
	// never propose a token it forbids.
	Mask MaskFunc
}

// Drafter proposes draft trees. Implementations are driven by one goroutine
// (the step loop) and are not safe for concurrent use.
type Drafter interface {
	// Name identifies the drafter in metrics ("ngram", "draft").
	Name() string
	// Propose fills trees[i] (reset first) for ctxs[i], for all sequences
	// of a step at once so that a model drafter runs one batch. An error
	// means no drafts this step (the caller decodes plainly); it never
	// leaves a tree malformed.
	Propose(ctxs []Context, trees []*Tree) error
	// Rewind tells the drafter that slot's sequence now holds exactly its
	// first n committed tokens: state for anything after them (rejected
	// drafts, a finished request) is dropped. n = 0 frees the slot.
	Rewind(slot, n int)
}

// allowed reports whether mask permits tok.
func allowed(mask []uint64, tok int32) bool {
	if mask == nil {
		return true
	}
	w := int(tok) / 64
	return tok >= 0 && w < len(mask) && mask[w]&(1<<(uint(tok)%64)) != 0
}

// fill builds a tree over shape by asking cands, for each node that has
// children in the shape, for its ranked candidates. cands(parent, path, k)
// returns up to k candidate tokens (best first) with their distributions
// after the path (the committed tokens followed by path); a node whose rank
// has no candidate is left out with its subtree.
func fill(t *Tree, shape Shape, cands func(path []int32, k int) ([]int32, [][]float32)) {
	t.Reset()
	n := shape.Len()
	// idx maps shape nodes to tree nodes (-1 = left out); kids caches the
	// candidates after each placed node, computed on first need.
	idx := make([]int32, n)
	want := make([]int, n+1) // most children (max rank + 1) under root (0) and each node (1+i)
	for i, p := range shape.Parent {
		want[p+1] = max(want[p+1], int(shape.Rank[i])+1)
	}
	type kidList struct {
		done bool
		toks []int32
		qs   [][]float32
	}
	kids := make([]kidList, n+1)
	var path []int32
	for i := range n {
		idx[i] = -1
		p := shape.Parent[i]
		if p >= 0 && idx[p] < 0 {
			continue
		}
		k := &kids[p+1]
		if !k.done {
			path = path[:0]
			for j := p; j >= 0; j = shape.Parent[j] {
				path = append(path, t.Tokens[idx[j]])
			}
			for a, b := 0, len(path)-1; a < b; a, b = a+1, b-1 {
				path[a], path[b] = path[b], path[a]
			}
			k.toks, k.qs = cands(path, want[p+1])
			k.done = true
		}
		r := int(shape.Rank[i])
		if r >= len(k.toks) {
			continue
		}
		parent := int32(-1)
		if p >= 0 {
			parent = idx[p]
		}
		var q []float32
		if k.qs != nil {
			q = k.qs[r]
		}
		idx[i] = t.Add(k.toks[r], parent, q)
	}
}
