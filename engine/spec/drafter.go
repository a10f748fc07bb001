package spec

import (
	"slices"

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

// candFunc returns up to k candidates after path (the tokens below the
// root), best first, with the drafter's confidence in each (nil when it
// has none to give) and their draft distributions (nil, or a nil entry:
// point masses). The slices need only stay valid until the next call.
type candFunc func(path []int32, k int) (toks []int32, ps []float32, qs [][]float32)

// scoring is what lookup adds to a static placement: a candidate whose
// chance of being accepted (the product of the calibrated rates along its
// path) is below floor is dropped before ranks are counted, and the
// drafted nodes' confidences go to fb for calibration.
type scoring struct {
	floor float64
	cal   *calibration
	fb    *feedback
}

// placer fills static shapes: each node of the shape takes the candidate
// of its rank after its parent's token, and a node whose rank has no
// candidate is left out with its subtree. Both drafters fill static shapes
// with it: the draft model along its main chain, lookup with its floor.
// Its slices are reused from call to call, so a step makes no garbage.
type placer struct {
	idx   []int32   // shape node → tree node, -1 when left out
	score []float64 // tree node → its chance of being accepted (with scoring)
	want  []int     // most candidates wanted after the root (0) and each shape node (1+i)
	kids  []placedKids
	path  []int32
}

// placedKids are the candidates after one placed node (those that score
// at least the floor, with scoring), in the drafter's order.
type placedKids struct {
	done bool
	toks []int32
	ps   []float32
	qs   [][]float32
}

// fill builds t (reset first) over sh, asking cands once for the
// candidates after each placed node that has children in sh. With sc,
// rank r of a node takes the r-th candidate that scores at least the
// floor, and sc.fb gets the drafted nodes' confidences (cands must give
// them); without, rank r takes the r-th candidate.
func (f *placer) fill(t *Tree, sh Shape, sc *scoring, cands candFunc) {
	t.Reset()
	if sc != nil {
		sc.fb.p = sc.fb.p[:0]
	}
	f.score = f.score[:0]
	n := sh.Len()
	f.idx = slices.Grow(f.idx[:0], n)[:n]
	f.want = slices.Grow(f.want[:0], n+1)[:n+1]
	clear(f.want)
	for i, p := range sh.Parent {
		f.want[p+1] = max(f.want[p+1], int(sh.Rank[i])+1)
	}
	f.kids = slices.Grow(f.kids[:0], n+1)[:n+1]
	for i := range f.kids {
		f.kids[i].done = false
	}
	for i := range n {
		f.idx[i] = -1
		p := sh.Parent[i]
		if p >= 0 && f.idx[p] < 0 {
			continue
		}
		base := 1.0
		if sc != nil && p >= 0 {
			base = f.score[f.idx[p]]
		}
		k := &f.kids[p+1]
		if !k.done {
			f.path = f.path[:0]
			for j := p; j >= 0; j = sh.Parent[j] {
				f.path = append(f.path, t.Tokens[f.idx[j]])
			}
			slices.Reverse(f.path)
			toks, ps, qs := cands(f.path, f.want[p+1])
			k.toks, k.ps, k.qs, k.done = k.toks[:0], k.ps[:0], k.qs[:0], true
			for c, tok := range toks {
				if sc != nil && !(base*sc.cal.rate(ps[c]) >= sc.floor) {
					continue
				}
				var q []float32
				if qs != nil {
					q = qs[c]
				}
				k.toks, k.qs = append(k.toks, tok), append(k.qs, q)
				if ps != nil {
					k.ps = append(k.ps, ps[c])
				}
			}
		}
		r := int(sh.Rank[i])
		if r >= len(k.toks) {
			continue
		}
		parent := int32(-1)
		if p >= 0 {
			parent = f.idx[p]
		}
		f.idx[i] = t.Add(k.toks[r], parent, k.qs[r])
		if sc != nil {
			f.score = append(f.score, base*sc.cal.rate(k.ps[r]))
			sc.fb.p = append(sc.fb.p, k.ps[r])
		}
	}
}
