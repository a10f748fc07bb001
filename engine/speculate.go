package engine

import (
	"fmt"
	"time"

	"github.com/specgate/specgate/engine/guided"
	"github.com/specgate/specgate/engine/model"
	"github.com/specgate/specgate/engine/spec"
	"github.com/specgate/specgate/kernels"
)

// How the engine speculates (all on the step goroutine):
//
//   - The scheduler plans as if every decode ran one token. Once the
//     step's chunks are placed, the decodes (the step's batch size) get a
//     shape from the dispatcher, narrowed per request by its class's and
//     tenant's policy, and the drafter fills it.
//   - Node i of a sequence's tree, whose root (its last token) sits at
//     position n, is written to the slot of position n+1+i and runs at
//     position n+depth. Blocks for those slots come from free (or
//     evictable cached) device blocks only; when there are too few the
//     tree is cut to what fits, maybe to nothing. Speculation never
//     preempts anyone.
//   - Every row of the step shares one forward pass. Chains need nothing
//     but causal attention; a branching tree needs the backend's tree
//     attention and slot copies, and then every row of the pass is given
//     as a tree row (a plain row sees its causal prefix and no slots).
//   - Verification takes, at every node, the very token plain decoding
//     would: the target's argmax for greedy requests, and for sampled ones
//     its draw with the request's uniform for that position (package
//     sample keys draws by (seed, position)). A draft is accepted when it
//     is that token, so the output is the plain output, token for token,
//     whatever was drafted or batched. Guided requests mask drafts and
//     targets alike.
//   - The accepted path's K/V is moved to its final slots, the tokens go
//     through the usual stop checks as one delta, and the tree's extra
//     blocks go back to the pool before the step ends.

// Drafter kinds for Speculation.Drafter.
const (
	DraftNGram = "ngram"
	DraftModel = "draft"
	DraftOff   = "off"
)

// Speculation configures speculative decoding. The zero value drafts by
// n-gram lookup with the default dispatcher and policies.
type Speculation struct {
	// Drafter is DraftNGram (the default: prompt lookup over the
	// sequence's tokens, which hold its conversation), DraftModel (Model
	// drafts) or DraftOff (plain decoding).
	Drafter string
	// Model is the draft model for DraftModel: a smaller model, or the
	// target quantized, of the same vocabulary. The engine does not close
	// it.
	Model model.Model
	// Dispatcher picks each step's tree shape by batch size and measured
	// throughput (spec.NewDispatcher(nil): bushy trees alone, chains in
	// small batches, off in large ones). The engine owns it from then on.
	Dispatcher *spec.Dispatcher
	// BatchPolicy is the policy of Batch-class requests; nil means
	// spec.Policy{MaxBatch: 4}: their speculation stops when more than 4
	// sequences decode together, so a loaded engine spends no compute on
	// drafts for work nobody is waiting on.
	BatchPolicy *spec.Policy
	// NoSampled keeps sampled (temperature > 0) requests from
	// speculating. By default they do: their draws are keyed by position,
	// so a seed gives the same text with speculation on or off.
	NoSampled bool
}

// specState is the engine's speculation machinery; nil when it is off.
type specState struct {
	drafter spec.Drafter
	disp    *spec.Dispatcher
	// sc is the backend's slot copier when it also has tree attention:
	// then trees may branch. nil: chains only.
	sc          kernels.SlotCopier
	batchPolicy spec.Policy
	noSampled   bool  // Speculation.NoSampled
	free        []int // drafter slots not in use

	// Per step.
	runs   []*sequence // decodes with a tree this step
	shape  spec.Shape
	start  time.Time
	ctxs   []spec.Context
	trees  []*spec.Tree
	mask   kernels.TreeMask
	anc    []int32 // tree rows' visible slots, back to back
	ancAt  []ancSpan
	depths []int32
	moves  []kernels.SlotCopy
	ctx    []int32
	starts []int32
}

// ancSpan says which batch row sees which part of specState.anc.
type ancSpan struct {
	row, prefix int32
	lo, hi      int
}

// specSeq is a sequence's speculation state.
type specSeq struct {
	slot int // drafter slot, -1 when it holds none
	tree spec.Tree
	// Per step: the root's position, the logits row of node 0, the
	// grammar state after each node, and the verified tokens waiting for
	// their KV to be compacted.
	root, node0 int
	states      []guided.State
	pend        []int32
	accepted    int
	noMore      bool
	// drafting says the sequence's tree is in this step's batch.
	drafting bool
}

func newSpecState(m model.Model, o Options) (*specState, error) {
	sp := o.Speculation
	st := &specState{disp: sp.Dispatcher, batchPolicy: spec.Policy{MaxBatch: 4}, noSampled: sp.NoSampled}
	if sp.BatchPolicy != nil {
		st.batchPolicy = *sp.BatchPolicy
	}
	switch sp.Drafter {
	case DraftOff:
		return nil, nil
	case DraftNGram, "":
		st.drafter = &spec.NGram{}
	case DraftModel:
		if sp.Model == nil {
			return nil, fmt.Errorf("engine: speculation with a draft model needs Speculation.Model")
		}
		if v, w := sp.Model.Config().Vocab, m.Config().Vocab; v != w {
			return nil, fmt.Errorf("engine: draft model vocabulary %d differs from the model's %d", v, w)
		}
		d, err := spec.NewDraftModel(sp.Model, o.MaxRunning, o.MaxContext)
		if err != nil {
			return nil, fmt.Errorf("engine: %w", err)
		}
		st.drafter = d
	default:
		return nil, fmt.Errorf("engine: unknown drafter %q (want %s, %s or %s)", sp.Drafter, DraftNGram, DraftModel, DraftOff)
	}
	if st.disp == nil {
		st.disp = spec.NewDispatcher(nil)
	}
	if _, ok := m.Backend().(kernels.TreeAttention); ok {
		st.sc, _ = m.Backend().(kernels.SlotCopier)
	}
	for i := o.MaxRunning - 1; i >= 0; i-- {
		st.free = append(st.free, i)
	}
	return st, nil
}

// policy is s's speculation policy: its class's and its tenant's, either
// able to turn it off.
func (st *specState) policy(s *sequence) spec.Policy {
	p := s.req.Limits.Speculation
	if st.noSampled && !s.sampler.Greedy() {
		p.Off = true
	}
	if d := st.drafter.Name(); !specAllows(s.req.Limits.Speculate, d) || !specAllows(s.req.Speculate, d) {
		p.Off = true
	}
	if s.req.Priority == Batch {
		c := st.batchPolicy
		p.Off = p.Off || c.Off
		if c.MaxBatch > 0 && (p.MaxBatch == 0 || c.MaxBatch < p.MaxBatch) {
			p.MaxBatch = c.MaxBatch
		}
	}
	return p
}

// releaseSlot gives s's drafter slot back.
func (e *Engine) releaseSlot(s *sequence) {
	st := e.spec
	if st == nil || s.sp.slot < 0 {
		return
	}
	st.drafter.Rewind(s.sp.slot, 0)
	st.free = append(st.free, s.sp.slot)
	s.sp.slot = -1
}

// chainOf returns the leading chain of sh: the rank-0 path its nodes
// start with, which causal attention verifies without a tree mask.
func chainOf(sh spec.Shape) spec.Shape {
	k := 0
	for k < sh.Len() && sh.Depth[k] == int32(k+1) && sh.Parent[k] == int32(k-1) {
		k++
	}
	if k == sh.Len() {
		return sh
	}
	if k == 0 {
		return spec.Off
	}
	return spec.Chain(k)
}

// draft proposes trees for p's decodes and adds their nodes to the batch
// after every planned row. It reports whether a tree branches (the pass
// then needs the tree mask).
func (e *Engine) draft(now time.Time, p *stepPlan) bool {
	st := e.spec
	st.runs = st.runs[:0]
	if len(p.decodes) == 0 {
		return false
	}
	st.start = now
	for _, s := range p.decodes {
		s.sp.drafting = false
	}
	st.shape = st.disp.Pick(len(p.decodes))
	if st.sc == nil {
		st.shape = chainOf(st.shape)
	}
	st.ctxs, st.trees = st.ctxs[:0], st.trees[:0]
	for _, s := range p.decodes {
		sh := st.policy(s).Shape(st.shape, len(p.decodes))
		// A draft deeper than the tokens left to generate is wasted.
		// Logprobs are read from the plain decode's row.
		if sh.Off() || sh.MaxDepth >= s.max-s.generated() || s.req.Logprobs {
			continue
		}
		if s.sp.slot < 0 {
			if len(st.free) == 0 {
				continue
			}
			s.sp.slot = st.free[len(st.free)-1]
			st.free = st.free[:len(st.free)-1]
		}
		var mask spec.MaskFunc
		if m := s.matcher; m != nil {
			gr, root, base := m.Grammar(), m.State(), len(s.tokens)
			mask = func(ctx []int32) []uint64 {
				q, _ := gr.Walk(root, ctx[base:])
				return gr.Mask(q)
			}
		}
		st.ctxs = append(st.ctxs, spec.Context{Slot: s.sp.slot, Tokens: s.tokens, Shape: sh, Params: s.req.Sample, Mask: mask})
		s.sp.tree.Reset()
		st.trees = append(st.trees, &s.sp.tree)
		st.runs = append(st.runs, s)
	}
	if len(st.runs) == 0 {
		return false
	}
	if err := st.drafter.Propose(st.ctxs, st.trees); err != nil {
		// No drafts this step: the decodes run plainly.
		st.runs = st.runs[:0]
		return false
	}
	branch := false
	runs := st.runs[:0]
	st.anc, st.ancAt = st.anc[:0], st.ancAt[:0]
	bs := int32(e.o.BlockSize)
	for _, s := range st.runs {
		t := &s.sp.tree
		if t.Validate() != nil || t.Len() > spec.MaxTreeNodes {
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
		n := len(s.tokens) - 1
		e.reserveTree(s, n)
		if t.Len() == 0 {
			continue
		}
		branch = branch || chain < t.Len()
		if s.matcher != nil {
			s.sp.states = s.matcher.Grammar().TreeStates(s.matcher.State(), t.Tokens, t.Parent, s.sp.states)
		}
		s.sp.root, s.sp.node0, s.sp.drafting = n, len(p.batch.Logits), true
		// Each node sees its parent's slots plus its own; the root is in
		// the causal prefix.
		st.starts = st.starts[:0]
		for i, tok := range t.Tokens {
			pos := int32(n + 1 + i)
			slot := s.table[pos/bs]*bs + pos%bs
			row := int32(p.batch.Len())
			p.batch.Add(tok, int32(n)+st.depths[i], slot, s.table, true)
			at := len(st.anc)
			if p := t.Parent[i]; p >= 0 {
				ps := int(st.starts[p])
				st.anc = append(st.anc, st.anc[ps:ps+int(st.depths[p])]...)
			}
			st.anc = append(st.anc, slot)
			st.starts = append(st.starts, int32(at))
			st.ancAt = append(st.ancAt, ancSpan{row: row, prefix: int32(n + 1), lo: at, hi: len(st.anc)})
		}
		runs = append(runs, s)
	}
	st.runs = runs
	if !branch {
		return false
	}
	rows := st.mask.Rows[:0]
	for i := range p.batch.Len() {
		rows = append(rows, kernels.TreeRow{Prefix: p.batch.Pos[i] + 1})
	}
	for _, a := range st.ancAt {
		rows[a.row] = kernels.TreeRow{Prefix: a.prefix, Slots: st.anc[a.lo:a.hi]}
	}
	st.mask.Rows = rows
	p.batch.Tree = &st.mask
	return true
}

// reserveTree makes s's block table cover the slots of its tree's nodes
// (positions n+1 … n+nodes) from free or evictable cached blocks, and
// cuts the tree to what it covers.
func (e *Engine) reserveTree(s *sequence, n int) {
	t := &s.sp.tree
	room := len(s.table)*e.o.BlockSize - (n + 1)
	if t.Len() > room {
		need := e.blocks(n+1+t.Len()) - len(s.table)
		if e.cache != nil {
			// Evict cached blocks nobody holds for the room; a
			// shortfall cuts the tree.
			_ = e.cache.Reserve(need)
		}
		if k := min(need, e.dev.Free()); k > 0 {
			if b, err := e.dev.Alloc(k); err == nil {
				s.table = append(s.table, b...)
			}
		}
		room = len(s.table)*e.o.BlockSize - (n + 1)
	}
	if t.Len() > room {
		cutTree(t, max(room, 0))
	}
}

// cutTree keeps the first k nodes of t: parents come before their
// children, so the rest is still a tree.
func cutTree(t *spec.Tree, k int) {
	if k < t.Len() {
		t.Tokens, t.Parent, t.Q = t.Tokens[:k], t.Parent[:k], t.Q[:k]
	}
}

// verify walks s's tree against the target's logits (row is the root's
// logits row) and leaves the tokens to commit in s.sp.pend and the KV
// moves of the accepted path in the step's moves.
func (e *Engine) verify(s *sequence, row int) {
	st, sp := e.spec, &s.sp
	t := &sp.tree
	vocab := e.m.Config().Vocab
	rowOf := func(node int32) []float32 {
		r := row
		if node >= 0 {
			r = sp.node0 + int(node)
		}
		return e.logits[r*vocab : (r+1)*vocab]
	}
	stateOf := func(node int32) guided.State {
		if node < 0 {
			return s.matcher.State()
		}
		return sp.states[node]
	}
	// ctxOf is the history after node: the penalties' window.
	base := len(s.tokens)
	st.ctx = append(st.ctx[:0], s.tokens...)
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
	// The target's token after a node, as plain decoding would pick it
	// there (Sample draws with the uniform of the token's position,
	// len(ctxOf(node))). Accepting exactly those tokens is lossless for
	// sampled requests too: by induction over the path, every token the
	// step emits is the token plain decoding emits at its position after
	// the same history, so the output is the plain output, which has the
	// target's distribution. Drafts only decide how many of those tokens
	// one pass yields. Only the nodes on the walk are sampled: a sampled
	// request's Sample costs a pass over the vocabulary.
	after := func(node int32) int32 {
		if s.matcher == nil {
			return s.sampler.Sample(rowOf(node), ctxOf(node))
		}
		if g := stateOf(node); g > 0 {
			return s.sampler.SampleMasked(rowOf(node), s.matcher.Grammar().Mask(g), ctxOf(node))
		}
		return -1
	}
	path, next := spec.VerifyWalk(t, after)
	sp.pend = sp.pend[:0]
	bs := int32(e.o.BlockSize)
	slot := func(pos int) int32 { return s.table[int32(pos)/bs]*bs + int32(pos)%bs }
	for d, node := range path {
		sp.pend = append(sp.pend, t.Tokens[node])
		// Node's K/V sits at position n+1+node; its place is n+1+d.
		if node != int32(d) {
			st.moves = append(st.moves, kernels.SlotCopy{Src: slot(sp.root + 1 + int(node)), Dst: slot(sp.root + 1 + d)})
		}
	}
	sp.accepted = len(path)
	sp.noMore = false
	if s.matcher != nil {
		after := s.matcher.State()
		if len(path) > 0 {
			after = sp.states[path[len(path)-1]]
		}
		// After a completed grammar the stop checks end the request;
		// otherwise a token the grammar forbids means none can follow.
		if !s.matcher.Grammar().Allowed(after, next) {
			sp.noMore = !s.matcher.Grammar().Terminal(after) && after != guided.Final
			next = -1
		}
	}
	if next >= 0 {
		sp.pend = append(sp.pend, next)
	}
}

// commitDrafts compacts the accepted paths' K/V, then commits each
// drafted sequence's tokens and gives its tree's spare blocks back; it adds
// what it committed to res.
func (e *Engine) commitDrafts(p *stepPlan, now time.Time, res *stepResult) {
	st := e.spec
	if len(st.moves) > 0 {
		st.sc.CopySlots(e.devKV, st.moves)
		st.moves = st.moves[:0]
	}
	committed := 0
	res.Drafter = st.drafter.Name()
	for _, s := range st.runs {
		if e.seqs[s.req.ID] != s {
			continue
		}
		sp := &s.sp
		// The root and the accepted path now hold their K/V.
		s.kv = sp.root + 1 + sp.accepted
		took := e.accept(s, sp.pend, now)
		committed += took
		res.Tokens += took
		res.Drafted += sp.tree.Len()
		res.Accepted += min(sp.accepted, took)
		s.drafted += sp.tree.Len()
		s.acceptedDrafts += min(sp.accepted, took)
		e.met.SpecAccepted(st.drafter.Name(), min(sp.accepted, took))
		if e.seqs[s.req.ID] != s {
			continue
		}
		if sp.noMore || took == 0 {
			e.release(s, true)
			e.end(s, now, FinishStop, nil)
			continue
		}
		e.sched.SetKV(s.req.ID, s.kv)
		st.drafter.Rewind(sp.slot, len(s.tokens))
	}
	for _, s := range p.decodes {
		if !s.sp.drafting {
			committed++ // a plain decode commits one token
		}
		s.sp.drafting = false
		s.sp.tree.Reset()
		// Blocks a tree took beyond the sequence's K/V go back: the next
		// decode's block is placed as the scheduler plans it.
		if keep := e.blocks(s.kv); e.seqs[s.req.ID] == s && len(s.table) > keep {
			e.unref(e.dev, s.table[keep:])
			s.table = s.table[:keep]
		}
	}
	st.disp.Observe(len(p.decodes), st.shape, committed, e.clock.Now().Sub(st.start))
	st.runs = st.runs[:0]
}
