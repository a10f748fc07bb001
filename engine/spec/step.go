package spec

import (
	"fmt"
	"time"

	"github.com/specgate/specgate/engine/model"
	"github.com/specgate/specgate/kernels"
	"github.com/specgate/specgate/kernels/sample"
)

// MaxTreeNodes bounds the nodes of one sequence's draft tree.
const MaxTreeNodes = 64

// Seq is one sequence as speculative steps see it. Its owner sets the
// exported fields before each Plan; the rest is the step's (the drafter
// slot the sequence holds, the step's tree). The zero value is a sequence
// that holds no slot.
type Seq struct {
	// Tokens are the committed tokens, prompt first; the last is the
	// tree's root, in the forward batch but not yet in the K/V.
	Tokens []int32
	// Table is the sequence's block table; Host.Grow may extend it.
	Table []int32
	// Row is the root's logits row in the forward batch.
	Row int
	// Left is how many tokens the sequence may still generate: a draft
	// as deep is not tried.
	Left int
	// Policy is the sequence's say over speculation (its tenant's, its
	// class's).
	Policy Policy
	// Class is the sequence's priority class: the dispatcher measures and
	// picks a shape for each class apart (see Dispatcher).
	Class int
	// Params, Mask and History are the drafter's Context fields.
	Params  sample.Params
	Mask    MaskFunc
	History []int32

	slot     int // drafter slot + 1; 0 when it holds none
	tree     Tree
	drafting bool // the tree is in this step's batch
	node0    int  // logits row of node 0
	// room is how many nodes the step let the drafter fill: its shape's,
	// cut to the tokens left and the blocks it got.
	room int
}

// Drafting reports whether the sequence's tree is in this step's batch.
func (q *Seq) Drafting() bool { return q.drafting }

// Tree returns the sequence's tree for this step (empty when it does not
// draft).
func (q *Seq) Tree() *Tree { return &q.tree }

// Host is what a Step needs of the decoder driving it. Indices are into
// the decodes given to Plan.
type Host interface {
	// Grow extends decode i's block table to cover the positions below
	// end with blocks no one else needs (speculation never preempts
	// anyone) and returns the table, which may cover less.
	Grow(i, end int) []int32
	// Target returns the token plain decoding picks after node (Root:
	// the root) of decode i's tree: from logits row row, with ctx the
	// history through node (not to be kept). -1 means no token may
	// follow. Verification walks from the root, so node Root is asked
	// first.
	Target(i, row int, node int32, ctx []int32) int32
	// Commit hands decode i its verified tokens, toks: the accepted
	// path's (path holds its nodes, root to leaf) and then, unless
	// Target said none may follow, the target's own. The K/V of the root
	// and the path is in place. It returns how many of toks the sequence
	// took and how many tokens it now holds, or -1 when it has ended
	// (its owner then Releases it).
	Commit(i int, path, toks []int32) (took, held int)
}

// StepConfig configures a Step.
type StepConfig struct {
	// Drafter proposes the trees; nil never drafts.
	Drafter Drafter
	// Dispatcher picks each step's shape; nil means
	// NewDispatcher(TiersFor(Drafter)).
	Dispatcher *Dispatcher
	// KV is the target's cache, where accepted paths are compacted.
	KV kernels.KVCache
	// Backend is the target's: trees branch when it implements
	// kernels.TreeAttention and kernels.SlotCopier, else only chains
	// (which causal attention verifies and which never move K/V).
	Backend kernels.Backend
	// BlockSize is the K/V block size in slots.
	BlockSize int
	// Slots is how many sequences may hold a drafter slot at once.
	Slots int
	// Clock times steps for the dispatcher; nil means time.Now.
	Clock func() time.Time
}

// StepReport is what one step's speculation did.
type StepReport struct {
	// Drafter names the drafter; Shape the dispatcher's pick (for the
	// first decode's class).
	Drafter, Shape string
	// Decodes is the step's decodes; Trees how many of them drafted.
	Decodes, Trees int
	// Drafted and Accepted count draft tokens verified and kept;
	// Tokens counts every token committed to the decodes, drafted or not.
	Drafted, Accepted, Tokens int
}

// Step is speculative decoding's share of a decoder's step, for the engine
// and the Runner alike. Plan, before the forward pass, drafts trees for the
// step's decodes and adds their nodes to the batch; Commit, after it,
// verifies each tree against the target, moves the accepted path's K/V to
// its place, hands the tokens over, rewinds the drafter and tells the
// dispatcher what the step yielded. Not safe for concurrent use.
//
// Node i of a tree whose root sits at position n is written to the slot of
// position n+1+i and runs at position n+depth; on a chain the two agree,
// so only a branching tree needs the tree mask (and then every row of the
// pass gets a tree row: a plain row sees its causal prefix and no slots).
// Verification takes at each node the very token plain decoding would
// (Host.Target), so the output is the plain output token for token.
type Step struct {
	drafter Drafter
	disp    *Dispatcher
	sc      kernels.SlotCopier // nil: chains only
	kv      kernels.KVCache
	bs      int
	clock   func() time.Time
	free    []int
	cuts    map[cutKey]Shape // see within

	// Per step.
	decs   []*Seq
	active int         // the load Plan picked the shapes for
	picks  []classPick // one per class among decs, in order of appearance
	start  time.Time
	// mixed: the batch carried rows besides the decodes and their trees
	// (a prompt's prefill chunk), so the step's time says little of what
	// its shape costs.
	mixed  bool
	runs   []int // decodes with a tree in the batch
	ctxs   []Context
	trees  []*Tree
	mask   kernels.TreeMask
	anc    []int32 // tree rows' visible slots, back to back
	ancAt  []ancSpan
	depths []int32
	starts []int32
	moves  []kernels.SlotCopy
	ctx    []int32
	paths  [][]int32 // per tree: the accepted nodes
	outs   [][]int32 // per tree: the tokens to commit
}

// classPick is the dispatcher's pick for one class's decodes in a step,
// and what they committed.
type classPick struct {
	class        int
	shape        Shape
	decs, tokens int
	rows         int // tree nodes drafted and verified
	// Per drafting decode: the tokens it accepted and drafted (see
	// Dispatcher.ObserveNested).
	accepted, drafted []int
}

// pickOf returns the index in st.picks of class's pick, picking it first
// when the class has none yet this step.
func (st *Step) pickOf(class int) int {
	for i, p := range st.picks {
		if p.class == class {
			return i
		}
	}
	sh := st.disp.PickClass(class, st.active)
	if st.sc == nil {
		sh = mainChain(sh)
	}
	if n := len(st.picks); n < cap(st.picks) {
		// Keep the element's slices' room: a step makes no garbage.
		st.picks = st.picks[:n+1]
		p := &st.picks[n]
		*p = classPick{class: class, shape: sh, accepted: p.accepted[:0], drafted: p.drafted[:0]}
	} else {
		st.picks = append(st.picks, classPick{class: class, shape: sh})
	}
	return len(st.picks) - 1
}

// ancSpan says which batch row sees which part of Step.anc.
type ancSpan struct {
	row, prefix int32
	lo, hi      int
}

// NewStep builds a Step.
func NewStep(c StepConfig) (*Step, error) {
	if c.BlockSize <= 0 || c.Slots < 0 {
		return nil, fmt.Errorf("spec: step with block size %d and %d slots", c.BlockSize, c.Slots)
	}
	st := &Step{drafter: c.Drafter, disp: c.Dispatcher, kv: c.KV, bs: c.BlockSize, clock: c.Clock}
	if st.disp == nil {
		st.disp = NewDispatcher(TiersFor(c.Drafter))
	}
	if st.clock == nil {
		st.clock = time.Now
	}
	if _, ok := c.Backend.(kernels.TreeAttention); ok {
		st.sc, _ = c.Backend.(kernels.SlotCopier)
	}
	for i := c.Slots - 1; i >= 0; i-- {
		st.free = append(st.free, i)
	}
	return st, nil
}

// Trees reports whether the step verifies branching trees rather than
// only chains.
func (st *Step) Trees() bool { return st.sc != nil }

// Dispatcher returns the step's dispatcher.
func (st *Step) Dispatcher() *Dispatcher { return st.disp }

// Drafter returns the step's drafter (nil when it never drafts).
func (st *Step) Drafter() Drafter { return st.drafter }

// Release gives q's drafter slot back: q ended, or lost its K/V (the
// drafter re-reads it when it drafts for q again).
func (st *Step) Release(q *Seq) {
	if q.slot == 0 {
		return
	}
	st.drafter.Rewind(q.slot-1, 0)
	st.free = append(st.free, q.slot-1)
	q.slot = 0
}

// mainChain returns the leading chain of sh: the rank-0 path its nodes
// start with, which causal attention verifies without a tree mask.
func mainChain(sh Shape) Shape {
	k := 0
	for k < sh.Len() && sh.Depth[k] == int32(k+1) && sh.Parent[k] == int32(k-1) {
		k++
	}
	if k == sh.Len() {
		return sh
	}
	if k == 0 {
		return Off
	}
	return Chain(k)
}

// within returns sh without its nodes deeper than depth (Off when none is
// left), remembering the cut shapes: they recur at the end of every
// request.
func (st *Step) within(sh Shape, depth int) Shape {
	if sh.MaxDepth <= depth {
		return sh
	}
	if depth < 1 {
		return Off
	}
	key := cutKey{sh.Name, depth}
	if c, ok := st.cuts[key]; ok {
		return c
	}
	c := sh.within(depth)
	if st.cuts == nil {
		st.cuts = map[cutKey]Shape{}
	}
	st.cuts[key] = c
	return c
}

// cutKey names a shape cut to a depth.
type cutKey struct {
	name  string
	depth int
}

// cutTree keeps the first k nodes of t: parents come before their
// children, so the rest is still a tree.
func cutTree(t *Tree, k int) {
	if k < t.Len() {
		t.Tokens, t.Parent, t.Q = t.Tokens[:k], t.Parent[:k], t.Q[:k]
	}
}

// Plan drafts trees for decs, the step's decodes (each a row of b that
// runs its sequence's last token), and adds their nodes to b after every
// row already there, setting b.Tree when a tree branches. h grows block
// tables for the nodes; a tree is cut to the room it gets.
//
// active is how many sequences the caller holds, running or waiting (at
// least len(decs)). The dispatcher's tier is chosen by it, not by the
// decodes this step happens to carry: a busy engine whose steps are cut
// short by a latency budget would otherwise look idle and grow trees while
// the rest of its sequences wait.
func (st *Step) Plan(decs []*Seq, active int, b *model.Batch, h Host) {
	st.decs, st.runs, st.picks = decs, st.runs[:0], st.picks[:0]
	st.start = st.clock()
	st.mixed = b.Len() > len(decs)
	for _, q := range decs {
		q.drafting = false
		q.tree.Reset()
	}
	if len(decs) == 0 || st.drafter == nil {
		return
	}
	active = max(active, len(decs))
	st.active = active
	st.ctxs, st.trees = st.ctxs[:0], st.trees[:0]
	for i, q := range decs {
		k := st.pickOf(q.Class)
		st.picks[k].decs++
		sh := q.Policy.Shape(st.picks[k].shape, active)
		if sh.MaxDepth >= q.Left {
			// A draft deeper than the tokens left to generate is
			// wasted; a shallower one still saves steps at the end of
			// the request, where plain steps would otherwise run.
			sh = st.within(sh, q.Left-1)
		}
		if sh.Off() {
			continue
		}
		if q.slot == 0 {
			if len(st.free) == 0 {
				continue
			}
			q.slot = st.free[len(st.free)-1] + 1
			st.free = st.free[:len(st.free)-1]
		}
		q.room = sh.Len()
		st.ctxs = append(st.ctxs, Context{Slot: q.slot - 1, Tokens: q.Tokens, History: q.History, Shape: sh, Params: q.Params, Mask: q.Mask})
		st.trees = append(st.trees, &q.tree)
		st.runs = append(st.runs, i)
	}
	if len(st.runs) == 0 {
		return
	}
	if err := st.drafter.Propose(st.ctxs, st.trees); err != nil {
		// No drafts this step: the decodes run plainly.
		for _, t := range st.trees {
			t.Reset()
		}
		st.runs = st.runs[:0]
		return
	}
	branch := false
	runs := st.runs[:0]
	st.anc, st.ancAt = st.anc[:0], st.ancAt[:0]
	bs := int32(st.bs)
	for _, i := range st.runs {
		q := decs[i]
		t := &q.tree
		if t.Validate() != nil || t.Len() > MaxTreeNodes {
			t.Reset()
		}
		st.depths = t.Depths(st.depths)
		chain := 0
		for chain < t.Len() && int(st.depths[chain]) == chain+1 {
			chain++
		}
		if chain < t.Len() && st.sc == nil {
			cutTree(t, chain) // branches need tree attention
		}
		n := len(q.Tokens) - 1
		if room := len(q.Table)*st.bs - (n + 1); t.Len() > room {
			q.Table = h.Grow(i, n+1+t.Len())
			if room = len(q.Table)*st.bs - (n + 1); t.Len() > room {
				cutTree(t, max(room, 0))
				q.room = max(room, 0)
			}
		}
		if t.Len() == 0 {
			continue
		}
		branch = branch || chain < t.Len()
		q.node0, q.drafting = len(b.Logits), true
		// Each node sees its parent's slots plus its own; the root is in
		// the causal prefix.
		st.starts = st.starts[:0]
		for k, tok := range t.Tokens {
			pos := int32(n + 1 + k)
			slot := q.Table[pos/bs]*bs + pos%bs
			row := int32(b.Len())
			b.Add(tok, int32(n)+st.depths[k], slot, q.Table, true)
			at := len(st.anc)
			if p := t.Parent[k]; p >= 0 {
				ps := int(st.starts[p])
				st.anc = append(st.anc, st.anc[ps:ps+int(st.depths[p])]...)
			}
			st.anc = append(st.anc, slot)
			st.starts = append(st.starts, int32(at))
			st.ancAt = append(st.ancAt, ancSpan{row: row, prefix: int32(n + 1), lo: at, hi: len(st.anc)})
		}
		runs = append(runs, i)
	}
	st.runs = runs
	if !branch {
		return
	}
	rows := st.mask.Rows[:0]
	for i := range b.Len() {
		rows = append(rows, kernels.TreeRow{Prefix: b.Pos[i] + 1})
	}
	for _, a := range st.ancAt {
		rows[a.row] = kernels.TreeRow{Prefix: a.prefix, Slots: st.anc[a.lo:a.hi]}
	}
	st.mask.Rows = rows
	b.Tree = &st.mask
}

// Commit verifies the planned trees once the forward pass has run, moves
// the accepted paths' K/V into place, commits every drafted decode's
// tokens through h, rewinds the drafter and reports the step to the
// dispatcher. plain is how many tokens the caller committed to the decodes
// that did not draft.
func (st *Step) Commit(h Host, plain int) StepReport {
	rep := StepReport{Shape: Off.Name, Decodes: len(st.decs), Trees: len(st.runs), Tokens: plain}
	if st.drafter != nil {
		rep.Drafter = st.drafter.Name()
	}
	if len(st.picks) > 0 {
		rep.Shape = st.picks[0].shape.Name
	}
	// Verify every tree first: the K/V moves go out as one call.
	for len(st.paths) < len(st.runs) {
		st.paths, st.outs = append(st.paths, nil), append(st.outs, nil)
	}
	bs := int32(st.bs)
	for k, i := range st.runs {
		q := st.decs[i]
		t := &q.tree
		path, next := st.verify(h, i, q)
		st.paths[k] = append(st.paths[k][:0], path...)
		out := st.outs[k][:0]
		n := len(q.Tokens) - 1
		slot := func(pos int) int32 { return q.Table[int32(pos)/bs]*bs + int32(pos)%bs }
		for d, node := range path {
			out = append(out, t.Tokens[node])
			// Node's K/V sits at position n+1+node; its place is n+1+d.
			if node != int32(d) {
				st.moves = append(st.moves, kernels.SlotCopy{Src: slot(n + 1 + int(node)), Dst: slot(n + 1 + d)})
			}
		}
		if next >= 0 {
			out = append(out, next)
		}
		st.outs[k] = out
	}
	if len(st.moves) > 0 {
		st.sc.CopySlots(st.kv, st.moves)
		st.moves = st.moves[:0]
	}
	for k, i := range st.runs {
		q := st.decs[i]
		path := st.paths[k]
		took, held := h.Commit(i, path, st.outs[k])
		rep.Drafted += q.tree.Len()
		rep.Accepted += min(len(path), took)
		rep.Tokens += took
		p := &st.picks[st.pickOf(q.Class)]
		p.tokens += took - 1 // the one plain decoding commits is counted below
		p.rows += q.tree.Len()
		p.accepted = append(p.accepted, min(len(path), took))
		p.drafted = append(p.drafted, q.room)
		if held >= 0 && q.slot > 0 {
			st.drafter.Rewind(q.slot-1, held)
		}
	}
	for _, q := range st.decs {
		q.drafting = false
		q.tree.Reset()
	}
	if len(st.picks) > 0 && !st.mixed {
		// Every decode commits its plain token (or ends); each class is
		// judged by its own tokens over the whole step's time. A step
		// that also ran a prefill chunk is not judged: the chunk can
		// cost many decode steps, and the shape that happened to play
		// then (Off, say, in its warm-up as a run's prompts arrive)
		// would carry that cost in its measure for long.
		el := st.clock().Sub(st.start)
		for _, p := range st.picks {
			st.disp.ObserveRows(p.class, st.active, p.decs, p.shape, p.decs+p.tokens, p.rows, el)
			st.disp.ObserveNested(p.class, st.active, p.shape, p.accepted, p.drafted)
		}
	}
	st.decs, st.runs = nil, st.runs[:0]
	for i := range st.picks {
		p := &st.picks[i]
		p.accepted, p.drafted = p.accepted[:0], p.drafted[:0]
	}
	st.picks = st.picks[:0]
	return rep
}

// verify walks decode i's tree against the target's choices.
func (st *Step) verify(h Host, i int, q *Seq) (path []int32, next int32) {
	t := &q.tree
	base := len(q.Tokens)
	st.ctx = append(st.ctx[:0], q.Tokens...)
	// ctxOf is the history through node: the penalties' window, and the
	// position (its length) whose uniform a sampled request draws with.
	ctxOf := func(node int32) []int32 {
		st.ctx = st.ctx[:base]
		k := len(st.ctx)
		for j := node; j >= 0; j = t.Parent[j] {
			st.ctx = append(st.ctx, t.Tokens[j])
		}
		for a, b := k, len(st.ctx)-1; a < b; a, b = a+1, b-1 {
			st.ctx[a], st.ctx[b] = st.ctx[b], st.ctx[a]
		}
		return st.ctx
	}
	// Only the nodes on the walk are evaluated: a sampled request's
	// Target costs a pass over the vocabulary.
	after := func(node int32) int32 {
		row := q.Row
		if node >= 0 {
			row = q.node0 + int(node)
		}
		return h.Target(i, row, node, ctxOf(node))
	}
	return walk(t, after, !unverified)
}
