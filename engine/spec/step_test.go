package spec

import (
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/specgate/specgate/engine/model"
	"github.com/specgate/specgate/kernels"
)

// treeBackend has the tree ops and records the slot copies it is asked
// for.
type treeBackend struct {
	kernels.Backend
	moves []kernels.SlotCopy
}

func (*treeBackend) TreeAttention(dst, q kernels.Tensor, c kernels.KVCache, layer int, a kernels.Attn, tree kernels.TreeMask) {
}

func (b *treeBackend) CopySlots(c kernels.KVCache, moves []kernels.SlotCopy) {
	b.moves = append(b.moves, moves...)
}

// fixedDrafter proposes one given tree and records its rewinds.
type fixedDrafter struct {
	tree    Tree
	rewinds [][2]int
}

func (*fixedDrafter) Name() string { return "fixed" }

func (d *fixedDrafter) Propose(ctxs []Context, trees []*Tree) error {
	for _, t := range trees {
		t.Reset()
		for i, tok := range d.tree.Tokens {
			t.Add(tok, d.tree.Parent[i], nil)
		}
	}
	return nil
}

func (d *fixedDrafter) Rewind(slot, n int) { d.rewinds = append(d.rewinds, [2]int{slot, n}) }

// scriptHost answers Target from a script of the target's token after
// each node and records what it is asked and given.
type scriptHost struct {
	after  map[int32]int32
	asked  []int32
	rows   []int
	ctxs   [][]int32
	path   []int32
	toks   []int32
	tables [][]int32
}

func (h *scriptHost) Grow(i, end int) []int32 { return h.tables[i] }

func (h *scriptHost) Target(i, row int, node int32, ctx []int32) int32 {
	h.asked, h.rows, h.ctxs = append(h.asked, node), append(h.rows, row), append(h.ctxs, slices.Clone(ctx))
	return h.after[node]
}

func (h *scriptHost) Commit(i int, path, toks []int32) (int, int) {
	h.path, h.toks = slices.Clone(path), slices.Clone(toks)
	return len(toks), 3 + len(toks)
}

// TestStepBranchingTree: a step over one branching tree whose accepted
// path leaves the main chain. Plan lays the nodes out after the root's row
// at their depths with a tree mask; Commit asks the target only along
// the walk, with the history through each node, moves the path's K/V from
// its nodes' slots to its positions' slots, commits the path and the
// target's token, and rewinds the drafter to what the sequence holds.
func TestStepBranchingTree(t *testing.T) {
	be := &treeBackend{}
	d := &fixedDrafter{}
	// Root children 10 and 11; 12 under 11, 13 under 10.
	d.tree.Add(10, -1, nil)
	d.tree.Add(11, -1, nil)
	d.tree.Add(12, 1, nil)
	d.tree.Add(13, 0, nil)
	st, err := NewStep(StepConfig{Drafter: d, Dispatcher: Fixed(Wide), Backend: be, BlockSize: 4, Slots: 1})
	if err != nil {
		t.Fatal(err)
	}
	if !st.Trees() {
		t.Fatal("step on a backend with the tree ops verifies chains only")
	}
	// The root, token 3, sits at position 2; blocks 5 and 7.
	q := &Seq{Tokens: []int32{1, 2, 3}, Table: []int32{5, 7}, Left: 10}
	var b model.Batch
	b.Add(3, 2, 5*4+2, q.Table, true)
	q.Row = 0
	h := &scriptHost{after: map[int32]int32{Root: 11, 1: 12, 2: 40}, tables: [][]int32{q.Table}}
	st.Plan([]*Seq{q}, 1, &b, h)
	if !q.Drafting() || b.Len() != 5 || len(b.Logits) != 5 {
		t.Fatalf("have drafting %v, %d rows, %d logits rows; want the root and 4 nodes", q.Drafting(), b.Len(), len(b.Logits))
	}
	if want := []int32{2, 3, 3, 4, 4}; !slices.Equal(b.Pos, want) {
		t.Errorf("have positions %v; want %v (nodes at their depths)", b.Pos, want)
	}
	// Node i is written to the slot of position 3+i.
	if want := []int32{22, 23, 28, 29, 30}; !slices.Equal(b.Slots, want) {
		t.Errorf("have slots %v; want %v", b.Slots, want)
	}
	if b.Tree == nil || len(b.Tree.Rows) != 5 {
		t.Fatalf("have tree mask %v; want one row per batch row", b.Tree)
	}
	// Node 2 (12, under 11) sees its parent's slot and its own.
	if r := b.Tree.Rows[3]; r.Prefix != 3 || !slices.Equal(r.Slots, []int32{28, 29}) {
		t.Errorf("node 2's tree row: have %+v; want prefix 3, slots [28 29]", r)
	}
	rep := st.Commit(h, 0)
	if want := []int32{Root, 1, 2}; !slices.Equal(h.asked, want) {
		t.Errorf("target asked after nodes %v; want %v (the walk only)", h.asked, want)
	}
	if want := []int{0, 2, 3}; !slices.Equal(h.rows, want) {
		t.Errorf("target read logits rows %v; want %v", h.rows, want)
	}
	if want := []int32{1, 2, 3, 11, 12}; !slices.Equal(h.ctxs[2], want) {
		t.Errorf("history through node 2: have %v; want %v", h.ctxs[2], want)
	}
	if !slices.Equal(h.path, []int32{1, 2}) || !slices.Equal(h.toks, []int32{11, 12, 40}) {
		t.Errorf("committed path %v tokens %v; want [1 2] and [11 12 40]", h.path, h.toks)
	}
	// Node 1's K/V (position 4's slot) goes to position 3's; node 2's
	// (position 5's) to position 4's.
	if want := []kernels.SlotCopy{{Src: 28, Dst: 23}, {Src: 29, Dst: 28}}; !slices.Equal(be.moves, want) {
		t.Errorf("have K/V moves %v; want %v", be.moves, want)
	}
	if rep.Drafted != 4 || rep.Accepted != 2 || rep.Tokens != 3 || rep.Trees != 1 || rep.Drafter != "fixed" {
		t.Errorf("have report %+v; want 4 drafted, 2 accepted, 3 tokens, 1 tree, by fixed", rep)
	}
	if want := [][2]int{{0, 6}}; !slices.Equal(d.rewinds, want) {
		t.Errorf("have rewinds %v; want %v", d.rewinds, want)
	}
	if q.Drafting() || q.Tree().Len() != 0 {
		t.Errorf("after Commit: drafting %v, tree %v; want both cleared", q.Drafting(), q.Tree().Tokens)
	}
}

// TestStepTierByActive: the dispatcher's tier follows how many sequences
// the engine holds, not how many decodes a step carries, so a busy engine
// whose step holds one decode does not draft as if it were idle.
func TestStepTierByActive(t *testing.T) {
	for _, tc := range []struct {
		active int
		draft  bool
	}{
		{active: 1, draft: true},
		{active: 4, draft: true},
		{active: 5, draft: false},
		{active: 32, draft: false},
	} {
		d := &fixedDrafter{}
		d.tree.Add(10, -1, nil)
		disp := NewDispatcher([]Tier{{MaxBatch: 4, Shapes: []Shape{Chain(1)}}, {Shapes: nil}})
		disp.Explore = -1
		st, err := NewStep(StepConfig{Drafter: d, Dispatcher: disp, Backend: &treeBackend{}, BlockSize: 4, Slots: 1})
		if err != nil {
			t.Fatal(err)
		}
		q := &Seq{Tokens: []int32{1, 2, 3}, Table: []int32{5, 7}, Left: 10}
		var b model.Batch
		b.Add(3, 2, 5*4+2, q.Table, true)
		h := &scriptHost{tables: [][]int32{q.Table}}
		st.Plan([]*Seq{q}, tc.active, &b, h)
		if q.Drafting() != tc.draft {
			t.Errorf("active %d: drafting %v; want %v", tc.active, q.Drafting(), tc.draft)
		}
	}
}

// TestStepObservesThePickedTier: a step picked for a load is measured in
// the tier it was picked from, not in the tier of the decodes it carried.
func TestStepObservesThePickedTier(t *testing.T) {
	d := &fixedDrafter{}
	d.tree.Add(10, -1, nil)
	disp := NewDispatcher([]Tier{{MaxBatch: 1, Shapes: []Shape{Chain(1)}}, {MaxBatch: 4, Shapes: []Shape{Chain(1)}}, {Shapes: nil}})
	disp.Explore = -1
	now := time.Unix(0, 0)
	clock := func() time.Time { now = now.Add(time.Millisecond); return now }
	st, err := NewStep(StepConfig{Drafter: d, Dispatcher: disp, Backend: &treeBackend{}, BlockSize: 4, Slots: 1, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	q := &Seq{Tokens: []int32{1, 2, 3}, Table: []int32{5, 7}, Left: 10}
	var b model.Batch
	b.Add(3, 2, 5*4+2, q.Table, true)
	h := &scriptHost{after: map[int32]int32{Root: 10, 0: 11}, tables: [][]int32{q.Table}}
	st.Plan([]*Seq{q}, 3, &b, h)
	if !q.Drafting() {
		t.Fatal("no draft at load 3")
	}
	st.Commit(h, 0)
	if s := disp.Stats(3); s[0].Steps != 1 {
		t.Errorf("the load-3 tier's chain has %d steps observed; want 1", s[0].Steps)
	}
	if s := disp.Stats(1); s[0].Steps != 0 {
		t.Errorf("the load-1 tier's chain has %d steps observed; want 0 (the step was not picked there)", s[0].Steps)
	}
}

// TestStepSkipsMixedSteps: a step whose batch also carries a prefill chunk
// is not measured (the chunk's cost would be charged to the shape that
// played); a step of decodes alone is.
func TestStepSkipsMixedSteps(t *testing.T) {
	for _, tc := range []struct {
		name    string
		prefill int // prompt rows in the batch ahead of the decode
		steps   int // observations the dispatcher gets
	}{
		{"decode alone", 0, 1},
		{"with a prefill chunk", 3, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := &fixedDrafter{}
			d.tree.Add(10, -1, nil)
			disp := NewDispatcher([]Tier{{Shapes: []Shape{Chain(1)}}})
			disp.Explore = -1
			now := time.Unix(0, 0)
			clock := func() time.Time { now = now.Add(time.Millisecond); return now }
			st, err := NewStep(StepConfig{Drafter: d, Dispatcher: disp, Backend: &treeBackend{}, BlockSize: 4, Slots: 1, Clock: clock})
			if err != nil {
				t.Fatal(err)
			}
			var b model.Batch
			other := []int32{1, 3}
			for i := range tc.prefill {
				b.Add(int32(20+i), int32(i), int32(4+i), other, i == tc.prefill-1)
			}
			q := &Seq{Tokens: []int32{1, 2, 3}, Table: []int32{5, 7}, Left: 10}
			b.Add(3, 2, 5*4+2, q.Table, true)
			h := &scriptHost{after: map[int32]int32{Root: 10, 0: 11}, tables: [][]int32{q.Table}}
			st.Plan([]*Seq{q}, 1, &b, h)
			if !q.Drafting() {
				t.Fatal("no draft")
			}
			st.Commit(h, 0)
			n := 0
			for _, s := range disp.Stats(1) {
				n += s.Steps
			}
			if n != tc.steps {
				t.Errorf("have %d observations; want %d", n, tc.steps)
			}
		})
	}
}

// shapeDrafter fills each tree with its shape's nodes (token 10+i for
// node i) and records the shapes it was asked for.
type shapeDrafter struct{ shapes []Shape }

func (*shapeDrafter) Name() string { return "shapes" }

func (d *shapeDrafter) Propose(ctxs []Context, trees []*Tree) error {
	for i, c := range ctxs {
		d.shapes = append(d.shapes, c.Shape)
		trees[i].Reset()
		for k, p := range c.Shape.Parent {
			trees[i].Add(int32(10+k), p, nil)
		}
	}
	return nil
}

func (*shapeDrafter) Rewind(slot, n int) {}

// TestStepDraftsToTheEnd: near the end of a request the step drafts as
// deep as the tokens left allow (a draft of depth d commits up to d+1
// tokens) instead of decoding plainly.
func TestStepDraftsToTheEnd(t *testing.T) {
	for _, tc := range []struct {
		shape Shape
		left  int
		nodes int // the tree's nodes; 0: no draft
		depth int
	}{
		{Chain(4), 10, 4, 4},
		{Chain(4), 5, 4, 4},
		{Chain(4), 4, 3, 3},
		{Chain(4), 2, 1, 1},
		{Chain(4), 1, 0, 0},
		{Bushy, 3, 10, 2},
		{Dynamic(8), 3, 5, 2},
	} {
		d := &shapeDrafter{}
		disp := Fixed(tc.shape)
		st, err := NewStep(StepConfig{Drafter: d, Dispatcher: disp, Backend: &treeBackend{}, BlockSize: 64, Slots: 1})
		if err != nil {
			t.Fatal(err)
		}
		q := &Seq{Tokens: []int32{1, 2, 3}, Table: []int32{0}, Left: tc.left}
		var b model.Batch
		b.Add(3, 2, 2, q.Table, true)
		st.Plan([]*Seq{q}, 1, &b, &scriptHost{tables: [][]int32{q.Table}})
		name := fmt.Sprintf("%s with %d left", tc.shape.Name, tc.left)
		if got := q.Tree().Len(); got != tc.nodes || q.Drafting() != (tc.nodes > 0) {
			t.Errorf("%s: %d nodes (drafting %v); want %d", name, got, q.Drafting(), tc.nodes)
		}
		if tc.nodes == 0 || len(d.shapes) == 0 {
			continue
		}
		sh := d.shapes[0]
		if sh.MaxDepth != tc.depth || sh.Dynamic != tc.shape.Dynamic || sh.Width != tc.shape.Width {
			t.Errorf("%s: drafter asked for depth %d (dynamic %v, width %d); want %d (%v, %d)", name, sh.MaxDepth, sh.Dynamic, sh.Width, tc.depth, tc.shape.Dynamic, tc.shape.Width)
		}
		if err := q.Tree().Validate(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		for k, dep := range q.Tree().Depths(nil) {
			if int(dep) > tc.depth || int(dep) != int(sh.Depth[k]) {
				t.Errorf("%s: node %d at depth %d (shape says %d); want at most %d", name, k, dep, sh.Depth[k], tc.depth)
			}
		}
	}
}

// TestStepObservesShorterChains: a step of a chain tells the dispatcher
// what the shorter chains would have accepted.
func TestStepObservesShorterChains(t *testing.T) {
	d := &fixedDrafter{}
	for i := range 4 {
		d.tree.Add(int32(10+i), int32(i-1), nil)
	}
	disp := NewDispatcher([]Tier{{Shapes: []Shape{Chain(4), Chain(2)}}})
	disp.Explore = -1
	// chain2 and Off warm up first: chain2 accepting nothing.
	for range 2 {
		disp.Observe(1, 1, Chain(2), 1, time.Millisecond)
		disp.Observe(1, 1, Off, 1, time.Millisecond)
	}
	now := time.Unix(0, 0)
	clock := func() time.Time { now = now.Add(time.Millisecond); return now }
	st, err := NewStep(StepConfig{Drafter: d, Dispatcher: disp, Backend: &treeBackend{}, BlockSize: 8, Slots: 1, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	q := &Seq{Tokens: []int32{1, 2, 3}, Table: []int32{0}, Left: 10}
	var b model.Batch
	b.Add(3, 2, 2, q.Table, true)
	// The target agrees with the first three drafts.
	h := &scriptHost{after: map[int32]int32{Root: 10, 0: 11, 1: 12, 2: 99}, tables: [][]int32{q.Table}}
	st.Plan([]*Seq{q}, 1, &b, h)
	if q.Tree().Len() != 4 {
		t.Fatalf("drafted %d nodes; want chain4's 4", q.Tree().Len())
	}
	st.Commit(h, 0)
	for _, s := range disp.Stats(1) {
		want := map[string]float64{"chain4": 3, "chain2": 2.0 / 3, "off": 0}[s.Shape]
		if math.Abs(s.Accepted-want) > 1e-9 {
			t.Errorf("%s: accepted %.3f per step; want %.3f", s.Shape, s.Accepted, want)
		}
	}
}
