package spec

import (
	"fmt"
	"math"
	"slices"

	"github.com/specgate/specgate/engine/model"
	"github.com/specgate/specgate/kernels"
	"github.com/specgate/specgate/kernels/sample"
)

// DraftModel drafts with a smaller model of the same vocabulary: a small
// sibling model, or the target's own weights quantized to Q4_0 (a
// "self-draft"). It keeps its own paged KV per slot and runs all slots'
// drafting steps as one batch per depth.
//
// A static shape is filled along its main (rank-0) chain: at each depth
// the draft feeds the best candidate and reads the next distribution;
// siblings off the main chain are the runner-up candidates there, and nodes
// below them are left out (they would need the draft model to run every
// branch). A dynamic shape (Shape.Dynamic) is grown the EAGLE-2 way: at
// each depth the Width likeliest nodes of the newest layer (by cumulative
// draft probability) run through the draft model together, as one tree
// pass when its backend has tree attention (a chain of the likeliest node
// otherwise), and the tree keeps the Len() likeliest nodes.
//
// For greedy requests candidates are the draft's top tokens (point masses,
// ranked by its raw masked logits); for sampled ones the first is the
// draft's draw from its processed distribution q with the request's
// uniform for that position (the one the target draws with, so when q is
// close to the target's distribution the guess is the target's token),
// which the tree carries with q, and the others the draft's next most
// likely tokens (point masses). A tree's Q slices belong to the drafter and
// stay valid until its next Propose.
//
// Rewinding is implicit as well as explicit: before drafting, the KV of a
// slot is kept only as far as it matches the committed tokens, so rejected
// drafts are simply overwritten.
type DraftModel struct {
	m      model.Model
	kv     kernels.KVCache
	bs     int
	vocab  int
	tree   bool // the draft's backend has tree attention
	tables [][]int32
	fed    [][]int32 // tokens whose KV the slot holds, in order
	samp   []*sample.Sampler
	grow   []grower   // per slot, for dynamic shapes
	fb     []feedback // per slot, the last dynamic tree
	cal    calibration
	place  placer // static shapes

	// Per Propose, reused from call to call so that a step makes no
	// garbage: the drafting sequences' states (pool[i] for the i-th), and
	// room for a dynamic node's candidates and for a top-k.
	pool  []draftSeq
	seqs  []*draftSeq
	cands candBuf
	top   []int32

	// Temperature, when above zero, replaces the request's temperature
	// for sampled drafting (a hotter draft explores more; the verifier
	// keeps the output lossless whatever q is).
	Temperature float32

	batch  model.Batch
	mask   kernels.TreeMask
	logits []float32
	qs     [][]float32 // distributions handed out this Propose
	nq     int
	hist   []int32
	path   []int32
	anc    []int32
}

var _ Drafter = (*DraftModel)(nil)

// NewDraftModel allocates the draft model's KV for slots sequences of up to
// ctx tokens each (plus room for a draft tree).
func NewDraftModel(m model.Model, slots, ctx int) (*DraftModel, error) {
	const bs = 16
	if slots <= 0 || ctx <= 0 {
		return nil, fmt.Errorf("spec: draft model for %d slots of %d tokens", slots, ctx)
	}
	per := (ctx + MaxTreeNodes + bs - 1) / bs
	kv, err := model.NewKV(m, slots*per, bs)
	if err != nil {
		return nil, fmt.Errorf("spec: draft KV: %w", err)
	}
	_, tree := m.Backend().(kernels.TreeAttention)
	d := &DraftModel{m: m, kv: kv, bs: bs, vocab: m.Config().Vocab, tree: tree,
		tables: make([][]int32, slots), fed: make([][]int32, slots),
		samp: make([]*sample.Sampler, slots), grow: make([]grower, slots), fb: make([]feedback, slots)}
	for i := range d.tables {
		d.tables[i] = make([]int32, per)
		for j := range d.tables[i] {
			d.tables[i][j] = int32(i*per + j)
		}
	}
	return d, nil
}

// Name returns "draft".
func (d *DraftModel) Name() string { return "draft" }

// Model returns the draft model.
func (d *DraftModel) Model() model.Model { return d.m }

// Rewind keeps the KV of slot's first n tokens; n = 0 frees the slot.
func (d *DraftModel) Rewind(slot, n int) {
	if slot < 0 || slot >= len(d.fed) {
		return
	}
	if n < len(d.fed[slot]) {
		d.fed[slot] = d.fed[slot][:max(n, 0)]
	}
	if n <= 0 {
		d.samp[slot] = nil
		d.fb[slot].base = 0
	}
}

// draftSeq is one slot's drafting state within a Propose call.
type draftSeq struct {
	ci  int
	dyn *grower // nil: a static shape along its main chain
	// Static shapes.
	chain []int32 // main-chain tokens fed so far (after the root)
	want  []int   // candidates needed after depth d (d = 0: the root)
	toks  [][]int32
	qs    [][][]float32
	row   int // logits row of the last forward, -1 when not in it
	// Dynamic shapes: the nodes expanded this depth (-1: the root), their
	// logits rows, and each fed node's KV slot.
	front []int32
	rows  []int
	slot  map[int32]int32
	fedN  int // tree nodes fed so far (scratch slots used)
	// bufs[d] holds the candidates after depth d of a static shape's
	// main chain (toks[d] and qs[d] are in it).
	bufs []candBuf
}

// reset readies a pooled s for context ci, keeping its storage.
func (s *draftSeq) reset(ci int) {
	s.ci, s.dyn, s.row, s.fedN = ci, nil, -1, 0
	s.chain, s.want, s.toks, s.qs = s.chain[:0], s.want[:0], s.toks[:0], s.qs[:0]
	s.front, s.rows = s.front[:0], s.rows[:0]
	clear(s.slot)
}

// candBuf is room for one node's candidates.
type candBuf struct {
	toks []int32
	ps   []float32
	qs   [][]float32
}

// Propose drafts for every context in one batched forward per depth.
func (d *DraftModel) Propose(ctxs []Context, trees []*Tree) error {
	d.nq = 0
	if len(d.pool) < len(ctxs) {
		// Grown before any pointer into it is taken.
		d.pool = append(d.pool, make([]draftSeq, len(ctxs)-len(d.pool))...)
	}
	seqs := d.seqs[:0]
	defer func() { d.seqs = seqs[:0] }()
	for i, c := range ctxs {
		trees[i].Reset()
		if c.Slot < 0 || c.Slot >= len(d.tables) || len(c.Tokens) == 0 || c.Shape.Off() {
			continue
		}
		d.cal.learn(&d.fb[c.Slot], c.Tokens)
		s := &d.pool[len(seqs)]
		s.reset(i)
		room := len(d.tables[c.Slot]) * d.bs
		if c.Shape.Dynamic {
			// Scratch slots for every node the growth may feed.
			if len(c.Tokens)+c.Shape.Width*c.Shape.MaxDepth > room {
				continue
			}
			g := &d.grow[c.Slot]
			g.reset(c.Shape)
			g.cal = &d.cal
			g.expand = c.Shape.Width
			if !d.tree {
				g.expand = 1 // a chain runs with causal attention
			}
			s.dyn = g
			if s.slot == nil {
				s.slot = map[int32]int32{}
			}
		} else {
			s.want = mainWant(c.Shape, s.want)
			if len(c.Tokens)+len(s.want) > room {
				continue // no room: no drafts for this one
			}
		}
		d.startSlot(c)
		seqs = append(seqs, s)
	}
	if len(seqs) == 0 {
		return nil
	}
	for depth := 0; ; depth++ {
		b := &d.batch
		b.Reset()
		d.anc = d.anc[:0]
		tree := false
		for _, s := range seqs {
			c := ctxs[s.ci]
			if depth == 0 {
				d.catchUp(s, c)
				continue
			}
			if s.dyn != nil {
				tree = d.feedLayer(s, c) || tree
				continue
			}
			s.row = -1
			if depth >= len(s.want) || len(s.chain) < depth {
				continue
			}
			pos := int32(len(d.fed[c.Slot]))
			s.row = len(b.Logits)
			b.Add(s.chain[depth-1], pos, d.slotAt(c.Slot, pos), d.tables[c.Slot], true)
			d.fed[c.Slot] = append(d.fed[c.Slot], s.chain[depth-1])
		}
		if b.Len() == 0 {
			break
		}
		if tree {
			d.treeMask(seqs, ctxs)
		}
		if need := len(b.Logits) * d.vocab; cap(d.logits) < need {
			d.logits = make([]float32, need)
		}
		if err := model.ForwardHost(d.m, d.kv, b, d.logits[:len(b.Logits)*d.vocab]); err != nil {
			for _, s := range seqs {
				d.Rewind(ctxs[s.ci].Slot, 0) // KV state unknown: start over
				trees[s.ci].Reset()
			}
			return fmt.Errorf("spec: draft forward: %w", err)
		}
		for _, s := range seqs {
			c := ctxs[s.ci]
			if s.dyn != nil {
				g := s.dyn
				for k, node := range s.front {
					logits := d.logits[s.rows[k]*d.vocab : (s.rows[k]+1)*d.vocab]
					d.path = g.pathOf(node, d.path)
					toks, ps, qs := d.candidates(c, d.history(c, d.path), logits, g.sh.Width, true, &d.cands)
					g.add(node, toks, ps, qs)
				}
				g.next()
				continue
			}
			if s.row < 0 {
				continue
			}
			logits := d.logits[s.row*d.vocab : (s.row+1)*d.vocab]
			if len(s.bufs) <= depth {
				s.bufs = append(s.bufs, candBuf{})
			}
			toks, _, qs := d.candidates(c, d.history(c, s.chain), logits, s.want[depth], false, &s.bufs[depth])
			s.toks, s.qs = append(s.toks, toks), append(s.qs, qs)
			if len(toks) > 0 && depth+1 < len(s.want) {
				s.chain = append(s.chain, toks[0])
			}
		}
	}
	for _, s := range seqs {
		c := ctxs[s.ci]
		if s.dyn != nil {
			s.dyn.emit(trees[s.ci], &d.fb[c.Slot])
			d.fb[c.Slot].record(trees[s.ci], c.Tokens)
			// The tree's KV sits in scratch slots: only the committed
			// tokens stay.
			d.fed[c.Slot] = d.fed[c.Slot][:len(c.Tokens)]
			continue
		}
		d.place.fill(trees[s.ci], c.Shape, nil, func(path []int32, k int) ([]int32, []float32, [][]float32) {
			dep := len(path)
			if dep >= len(s.toks) || !slices.Equal(path, s.chain[:dep]) {
				return nil, nil, nil // off the main chain: not drafted
			}
			toks, qs := s.toks[dep], s.qs[dep]
			return toks[:min(k, len(toks))], nil, qs
		})
	}
	return nil
}

// mainWant is how many candidates a static shape wants after each depth
// of its main chain (index 0: after the root), in dst's storage.
func mainWant(s Shape, dst []int) []int {
	want := dst[:0]
	for j := 0; j < s.Len(); j++ {
		dep := int(s.Depth[j])
		if dep-1 > len(want) {
			continue
		}
		// On the main chain: a child of the root, or of the main-chain
		// node one up (node dep-2: the chain is laid out first).
		if dep != 1 && s.Parent[j] != int32(dep-2) {
			continue
		}
		for len(want) < dep {
			want = append(want, 0)
		}
		want[dep-1] = max(want[dep-1], int(s.Rank[j])+1)
	}
	return want
}

// slotAt is the KV slot of position pos in slot's table.
func (d *DraftModel) slotAt(slot int, pos int32) int32 {
	bs := int32(d.bs)
	return d.tables[slot][pos/bs]*bs + pos%bs
}

// catchUp adds the committed tokens slot's KV lacks to the batch (at least
// the root, for its logits): the KV is kept as far as it matches them.
func (d *DraftModel) catchUp(s *draftSeq, c Context) {
	b := &d.batch
	fed := d.fed[c.Slot]
	common := 0
	for common < len(fed) && common < len(c.Tokens) && fed[common] == c.Tokens[common] {
		common++
	}
	common = min(common, len(c.Tokens)-1)
	d.fed[c.Slot] = fed[:common]
	for j, t := range c.Tokens[common:] {
		pos := int32(len(d.fed[c.Slot]))
		last := common+j == len(c.Tokens)-1
		if last {
			s.row = len(b.Logits)
			s.rows = append(s.rows[:0], s.row)
		}
		b.Add(t, pos, d.slotAt(c.Slot, pos), d.tables[c.Slot], last)
		d.fed[c.Slot] = append(d.fed[c.Slot], t)
	}
	if s.dyn != nil {
		s.front = append(s.front[:0], -1)
	}
}

// feedLayer adds the dynamic tree's next nodes to expand to the batch, each
// at a scratch slot past the committed tokens and at its depth's position,
// and reports whether any needs tree attention.
func (d *DraftModel) feedLayer(s *draftSeq, c Context) bool {
	g := s.dyn
	s.front = g.frontier(s.front)
	s.rows = s.rows[:0]
	b := &d.batch
	n := int32(len(c.Tokens) - 1) // the root's position
	tree := false
	for _, node := range s.front {
		nd := g.nodes[node]
		slot := d.slotAt(c.Slot, n+1+int32(s.fedN))
		// A chain (one node per depth) has each node at its own
		// position's slot: plain causal attention sees the right KV.
		tree = tree || int32(s.fedN)+1 != nd.depth
		s.fedN++
		s.slot[node] = slot
		s.rows = append(s.rows, len(b.Logits))
		b.Add(nd.tok, n+nd.depth, slot, d.tables[c.Slot], true)
	}
	return tree
}

// treeMask gives every row of the batch its view: plain rows their causal
// prefix, dynamic tree nodes the committed tokens and their ancestors.
func (d *DraftModel) treeMask(seqs []*draftSeq, ctxs []Context) {
	b := &d.batch
	rows := d.mask.Rows[:0]
	for i := range b.Len() {
		rows = append(rows, kernels.TreeRow{Prefix: b.Pos[i] + 1})
	}
	for _, s := range seqs {
		if s.dyn == nil {
			continue
		}
		g := s.dyn
		prefix := int32(len(ctxs[s.ci].Tokens))
		for k, node := range s.front {
			at := len(d.anc)
			for j := node; j >= 0; j = g.nodes[j].parent {
				d.anc = append(d.anc, s.slot[j])
			}
			row := b.Logits[s.rows[k]]
			rows[row] = kernels.TreeRow{Prefix: prefix, Slots: d.anc[at:len(d.anc):len(d.anc)]}
		}
	}
	d.mask.Rows = rows
	b.Tree = &d.mask
}

// startSlot sets up the slot's sampler for the request.
func (d *DraftModel) startSlot(c Context) {
	p := c.Params
	if p.Temperature > 0 && d.Temperature > 0 {
		p.Temperature = d.Temperature
	}
	if s := d.samp[c.Slot]; s == nil || s.Params() != p {
		d.samp[c.Slot] = sample.New(p)
	}
}

// newQ hands out a vocabulary-wide distribution buffer, reused across
// Propose calls.
func (d *DraftModel) newQ() []float32 {
	if d.nq == len(d.qs) {
		d.qs = append(d.qs, make([]float32, d.vocab))
	}
	d.nq++
	return d.qs[d.nq-1]
}

// history is the committed tokens followed by path when candidates needs
// them (a mask, or sampling with its penalties), else nil: a greedy
// request's drafts do not copy the conversation per node.
func (d *DraftModel) history(c Context, path []int32) []int32 {
	if c.Mask == nil && c.Params.Temperature <= 0 {
		return nil
	}
	d.hist = append(append(d.hist[:0], c.Tokens...), path...)
	return d.hist
}

// candidates returns up to k candidates after hist (the committed tokens
// and the draft path) from the draft's logits, with their probabilities
// under the draft when wantP: the top k for greedy requests (q nil), for
// sampled ones a draw from the processed draft distribution and then its
// most likely others. It reads logits without copying them; what it
// returns is in buf's storage, valid until buf's next use.
func (d *DraftModel) candidates(c Context, hist []int32, logits []float32, k int, wantP bool, buf *candBuf) ([]int32, []float32, [][]float32) {
	if k <= 0 {
		return nil, nil, nil
	}
	var mask []uint64
	if c.Mask != nil {
		mask = c.Mask(hist)
	}
	if c.Params.Temperature <= 0 {
		// Greedy: rank by the draft's raw (masked) logits. The target
		// applies the request's penalties when it verifies; drafts need
		// only be likely, not exact.
		toks := topK(logits, mask, k, buf.toks)
		buf.toks = toks
		var ps []float32
		if wantP && len(toks) > 0 {
			lse := logSumExp(logits, mask, logits[toks[0]])
			ps = buf.ps[:0]
			for _, t := range toks {
				ps = append(ps, float32(math.Exp(float64(logits[t])-lse)))
			}
			buf.ps = ps
		}
		return toks, ps, nil
	}
	samp := d.samp[c.Slot]
	q := d.newQ()
	if mask != nil {
		samp.ProbsMasked(logits, mask, hist, q)
	} else {
		samp.Probs(logits, hist, q)
	}
	first := samp.Draw(q, len(hist))
	if q[first] <= 0 {
		return nil, nil, nil
	}
	toks, ps, qs := append(buf.toks[:0], first), append(buf.ps[:0], q[first]), append(buf.qs[:0], q)
	if k > 1 {
		d.top = topK(q, nil, k, d.top)
		for _, t := range d.top {
			if len(toks) == k || q[t] <= 0 {
				break
			}
			if t != first {
				toks, ps, qs = append(toks, t), append(ps, q[t]), append(qs, nil)
			}
		}
	}
	buf.toks, buf.ps, buf.qs = toks, ps, qs
	return toks, ps, qs
}

// topK returns, in dst's storage, the indices of the k largest values of l
// that mask allows (nil: all), best first, lower index on ties, skipping
// -Inf and NaN. It does not modify l.
func topK(l []float32, mask []uint64, k int, dst []int32) []int32 {
	out := dst[:0]
	if k <= 0 {
		return out
	}
	negInf := float32(math.Inf(-1))
	for i, v := range l {
		if !(v > negInf) || len(out) == k && v <= l[out[k-1]] {
			continue
		}
		if mask != nil && !allowed(mask, int32(i)) {
			continue
		}
		// Insert after every kept value at least as large (ties keep
		// the lower index first).
		at := len(out)
		for at > 0 && v > l[out[at-1]] {
			at--
		}
		if len(out) < k {
			out = append(out, 0)
		}
		copy(out[at+1:], out[at:len(out)-1])
		out[at] = int32(i)
	}
	return out
}

// logSumExp is log Σ exp(l[i]) over the ids mask allows, computed around
// top (the largest allowed value).
func logSumExp(l []float32, mask []uint64, top float32) float64 {
	var sum float64
	for i, v := range l {
		if v > float32(math.Inf(-1)) && (mask == nil || allowed(mask, int32(i))) {
			sum += math.Exp(float64(v - top))
		}
	}
	return float64(top) + math.Log(sum)
}
