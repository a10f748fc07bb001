package spec

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/specgate/specgate/engine/model"
	"github.com/specgate/specgate/engine/sample"
	"github.com/specgate/specgate/kernels"
)

// MaxTreeNodes bounds the nodes of one sequence's draft tree; the Runner
// reserves that many KV slots past each sequence's end for them.
const MaxTreeNodes = 64

// Config configures a Runner. Seqs and Context are required.
type Config struct {
	// Seqs is how many sequences run at once; Context the most tokens
	// (prompt and completion) one may hold.
	Seqs, Context int
	// Drafter proposes the trees; nil decodes plainly (the baseline).
	Drafter Drafter
	// Dispatcher picks each step's shape; nil means NewDispatcher(nil).
	Dispatcher *Dispatcher
	// Clock times steps for the dispatcher; nil means time.Now.
	Clock func() time.Time
}

// Request is one sequence to generate.
type Request struct {
	Prompt []int32
	// History is earlier session text the n-gram drafter may copy from.
	History []int32
	Params  sample.Params
	// MaxTokens caps the completion; it must be above zero.
	MaxTokens int
	// Mask, when set, constrains the output (guided decoding); it applies
	// to the draft and the target alike.
	Mask MaskFunc
	// Policy is the tenant's speculation policy.
	Policy Policy
}

// Result is one sequence's output and speculation figures.
type Result struct {
	// Tokens is the completion; it ends with an end-of-generation token
	// when the model produced one.
	Tokens []int32
	// Steps counts decode forward passes (after the prompt's).
	Steps int
	// Drafted and Accepted count draft tokens proposed and kept.
	Drafted, Accepted int
}

// AcceptedPerStep is the mean number of tokens committed per decode step
// (accepted drafts plus the target's own token).
func (r Result) AcceptedPerStep() float64 {
	if r.Steps == 0 {
		return 0
	}
	return float64(r.Accepted+r.Steps) / float64(r.Steps)
}

// Stats are a Runner's totals over its lifetime, the figures the engine
// exports as metrics: steps, committed tokens, drafted and accepted tokens
// per drafter, and a histogram of tokens committed per sequence-step.
type Stats struct {
	Steps, SeqSteps   int
	Tokens            int
	Drafted, Accepted int
	// AcceptLen[k] counts sequence-steps that committed k+1 tokens.
	AcceptLen []int
	// DraftErrors counts steps whose drafter failed (and that decoded
	// plainly instead).
	DraftErrors int
}

// HitRate is the fraction of drafted tokens accepted.
func (s Stats) HitRate() float64 {
	if s.Drafted == 0 {
		return 0
	}
	return float64(s.Accepted) / float64(s.Drafted)
}

// Runner runs speculative generation end to end on a model and its own
// paged KV cache: prefill, then steps of propose → one target forward over
// every sequence's tree → verify → compact KV → commit. It is the reference
// for the engine's integration, and what the lossless tests and benchmarks
// drive. Not safe for concurrent use.
//
// Trees with branches need the model's backend to implement
// kernels.TreeAttention and kernels.SlotCopier; on any other backend the
// Runner verifies only the main chain of each shape, which plain causal
// attention handles (and which never needs its KV moved: the main chain is
// laid out first).
type Runner struct {
	m     model.Model
	cfg   Config
	sc    kernels.SlotCopier // nil: chains only
	kv    kernels.KVCache
	bs    int
	vocab int
	disp  *Dispatcher
	clock func() time.Time

	// reject is the sampled verifier's rule after a rejection (swapped by
	// tests for a known-bad one).
	reject rejectRule

	seqs  []*runSeq
	stats Stats

	batch  model.Batch
	mask   kernels.TreeMask
	logits []float32
	moves  []kernels.SlotCopy
	pbuf   [][]float32
	work   []float32
	depths []int32
}

type runSeq struct {
	slot    int
	req     Request
	table   []int32
	tokens  []int32 // prompt and completion; the last is not yet in the KV
	gen     int
	done    bool
	samp    *sample.Sampler
	rng     *rand.Rand
	res     Result
	tree    Tree
	shape   Shape
	logit0  int // first logits row of this sequence in the step
	ancSlot []int32
}

// ErrRequest is wrapped by errors about a bad Request.
var ErrRequest = errors.New("spec: bad request")

// NewRunner sets up a Runner for m. When m's backend has tree attention and
// slot copies the Runner verifies trees; otherwise chains.
func NewRunner(m model.Model, cfg Config) (*Runner, error) {
	if cfg.Seqs <= 0 || cfg.Context <= 0 {
		return nil, fmt.Errorf("spec: runner for %d sequences of %d tokens", cfg.Seqs, cfg.Context)
	}
	if dm, ok := cfg.Drafter.(*DraftModel); ok && dm.vocab != m.Config().Vocab {
		return nil, fmt.Errorf("spec: draft model vocabulary %d differs from the target's %d", dm.vocab, m.Config().Vocab)
	}
	const bs = 16
	per := (cfg.Context + MaxTreeNodes + 1 + bs - 1) / bs
	kv, err := m.NewKV(cfg.Seqs*per, bs)
	if err != nil {
		return nil, fmt.Errorf("spec: KV: %w", err)
	}
	r := &Runner{m: m, cfg: cfg, kv: kv, bs: bs, vocab: m.Config().Vocab, disp: cfg.Dispatcher, clock: cfg.Clock, reject: residual}
	if _, ok := m.Backend().(kernels.TreeAttention); ok {
		r.sc, _ = m.Backend().(kernels.SlotCopier)
	}
	if r.disp == nil {
		r.disp = NewDispatcher(nil)
	}
	if r.clock == nil {
		r.clock = time.Now
	}
	for i := range cfg.Seqs {
		t := make([]int32, per)
		for j := range t {
			t[j] = int32(i*per + j)
		}
		r.seqs = append(r.seqs, &runSeq{slot: i, table: t})
	}
	return r, nil
}

// Stats returns the totals so far.
func (r *Runner) Stats() Stats { return r.stats }

// Dispatcher returns the runner's dispatcher.
func (r *Runner) Dispatcher() *Dispatcher { return r.disp }

// Trees reports whether the runner verifies branching trees (its model's
// backend has the tree ops) rather than only chains.
func (r *Runner) Trees() bool { return r.sc != nil }

func (r *Runner) slotOf(s *runSeq, pos int) int32 {
	return s.table[pos/r.bs]*int32(r.bs) + int32(pos%r.bs)
}

// Run generates every request to completion, all at once, and returns
// their results in order.
func (r *Runner) Run(reqs []Request) ([]Result, error) {
	if len(reqs) > len(r.seqs) {
		return nil, fmt.Errorf("%w: %d requests for %d sequences", ErrRequest, len(reqs), len(r.seqs))
	}
	active := r.seqs[:len(reqs)]
	for i, q := range reqs {
		if len(q.Prompt) == 0 || q.MaxTokens <= 0 || len(q.Prompt)+q.MaxTokens > r.cfg.Context {
			return nil, fmt.Errorf("%w: %d: prompt of %d, max tokens %d, context %d", ErrRequest, i, len(q.Prompt), q.MaxTokens, r.cfg.Context)
		}
		for _, t := range q.Prompt {
			if t < 0 || int(t) >= r.vocab {
				return nil, fmt.Errorf("%w: %d: token %d outside vocabulary of %d", ErrRequest, i, t, r.vocab)
			}
		}
		s := active[i]
		*s = runSeq{slot: s.slot, table: s.table, req: q, tokens: append(s.tokens[:0], q.Prompt...),
			samp: sample.New(q.Params), rng: rand.New(rand.NewPCG(q.Params.Seed, 0x2545F4914F6CDD1D)),
			tree: s.tree, ancSlot: s.ancSlot[:0]}
		if r.cfg.Drafter != nil {
			r.cfg.Drafter.Rewind(s.slot, 0)
		}
	}
	if err := r.prefill(active); err != nil {
		return nil, err
	}
	for {
		var live []*runSeq
		for _, s := range active {
			if !s.done {
				live = append(live, s)
			}
		}
		if len(live) == 0 {
			break
		}
		if err := r.step(live); err != nil {
			return nil, err
		}
	}
	out := make([]Result, len(reqs))
	for i, s := range active {
		s.res.Tokens = slices.Clone(s.tokens[len(s.req.Prompt):])
		out[i] = s.res
		if r.cfg.Drafter != nil {
			r.cfg.Drafter.Rewind(s.slot, 0)
		}
	}
	return out, nil
}

// prefill runs every prompt and draws each first token.
func (r *Runner) prefill(seqs []*runSeq) error {
	b := &r.batch
	b.Reset()
	for _, s := range seqs {
		for p, t := range s.tokens {
			b.Add(t, int32(p), r.slotOf(s, p), s.table, p == len(s.tokens)-1)
		}
	}
	if err := r.forward(nil); err != nil {
		return err
	}
	for i, s := range seqs {
		tok := r.pick(s, r.logits[i*r.vocab:(i+1)*r.vocab], s.tokens)
		r.commit(s, []int32{tok})
	}
	return nil
}

func (r *Runner) forward(mask *kernels.TreeMask) error {
	b := &r.batch
	if need := len(b.Logits) * r.vocab; cap(r.logits) < need {
		r.logits = make([]float32, need)
	}
	r.logits = r.logits[:len(b.Logits)*r.vocab]
	b.Tree = mask
	if err := r.m.Forward(r.kv, b, r.logits); err != nil {
		return fmt.Errorf("spec: forward: %w", err)
	}
	return nil
}

// masked returns logits with s's guided mask after ctx applied (a copy),
// or logits itself when there is no mask.
func (r *Runner) masked(s *runSeq, logits []float32, ctx []int32) []float32 {
	if s.req.Mask == nil {
		return logits
	}
	m := s.req.Mask(ctx)
	if m == nil {
		return logits
	}
	r.work = append(r.work[:0], logits...)
	kernels.MaskLogitsRef(r.work, m)
	return r.work
}

// pick draws s's next token after ctx plainly (no drafts).
func (r *Runner) pick(s *runSeq, logits []float32, ctx []int32) int32 {
	p := r.probs(s, logits, ctx, 0)
	if s.samp.Greedy() {
		return sample.Argmax(p)
	}
	return draw(p, s.rng.Float64())
}

// probs returns the target's processed distribution after ctx in buffer i.
func (r *Runner) probs(s *runSeq, logits []float32, ctx []int32, i int) []float32 {
	for len(r.pbuf) <= i {
		r.pbuf = append(r.pbuf, nil)
	}
	if cap(r.pbuf[i]) < r.vocab {
		r.pbuf[i] = make([]float32, r.vocab)
	}
	p := r.pbuf[i][:r.vocab]
	s.samp.Probs(r.masked(s, logits, ctx), ctx, p)
	return p
}

// commit appends toks (truncated at the token budget and after an
// end-of-generation token) to s and reports how many it kept.
func (r *Runner) commit(s *runSeq, toks []int32) int {
	tk := r.m.Tokenizer()
	kept := 0
	for _, t := range toks {
		if s.done {
			break
		}
		s.tokens = append(s.tokens, t)
		s.gen++
		kept++
		if s.gen >= s.req.MaxTokens || (tk != nil && tk.IsEOG(t)) {
			s.done = true
		}
	}
	return kept
}

// step runs one speculative decoding step for the live sequences.
func (r *Runner) step(live []*runSeq) error {
	start := r.clock()
	shape := r.disp.Pick(len(live))
	if !r.Trees() {
		shape = mainChain(shape)
	}
	// Propose.
	var ctxs []Context
	var trees []*Tree
	for _, s := range live {
		s.shape = s.req.Policy.Shape(shape, len(live))
		if room := len(s.table)*r.bs - len(s.tokens) - 1; s.shape.Len() > min(room, MaxTreeNodes) {
			s.shape = Off
		}
		s.tree.Reset()
		if s.shape.Off() || r.cfg.Drafter == nil {
			continue
		}
		ctxs = append(ctxs, Context{Slot: s.slot, Tokens: s.tokens, History: s.req.History,
			Shape: s.shape, Params: s.req.Params, Mask: s.req.Mask})
		trees = append(trees, &s.tree)
	}
	if len(ctxs) > 0 {
		if err := r.cfg.Drafter.Propose(ctxs, trees); err != nil {
			r.stats.DraftErrors++
			for _, t := range trees {
				t.Reset()
			}
		}
	}
	// Build one batch: each sequence's root, then its tree nodes. Node i
	// of a tree is written to the slot of position n+1+i (n = the root's
	// position) and placed at position n+depth; on a chain the two agree,
	// so only branching trees need the tree mask.
	b := &r.batch
	b.Reset()
	tree := false
	for _, s := range live {
		t := &s.tree
		if t.Validate() != nil || t.Len() > s.shape.Len() {
			t.Reset()
		}
		r.depths = t.Depths(r.depths)
		branch := false
		for i, d := range r.depths {
			branch = branch || int(d) != i+1
		}
		if branch && r.sc == nil {
			t.Reset() // cannot verify branches without tree attention
			branch = false
		}
		tree = tree || branch
		s.res.Drafted += t.Len()
		r.stats.Drafted += t.Len()
	}
	r.mask.Rows = r.mask.Rows[:0]
	for _, s := range live {
		t := &s.tree
		n := len(s.tokens) - 1
		s.logit0 = len(b.Logits)
		b.Add(s.tokens[n], int32(n), r.slotOf(s, n), s.table, true)
		if tree {
			// ancSlot holds each node's visible slots back to back: the
			// root's, then per node its parent's list plus its own.
			s.ancSlot = append(s.ancSlot[:0], r.slotOf(s, n))
			r.mask.Rows = append(r.mask.Rows, kernels.TreeRow{Prefix: int32(n), Slots: s.ancSlot[0:1:1]})
		}
		r.depths = t.Depths(r.depths)
		starts := make([]int, t.Len()+1) // offset of node i's list in ancSlot, root at 0
		for i, tok := range t.Tokens {
			slot := r.slotOf(s, n+1+i)
			b.Add(tok, int32(n)+r.depths[i], slot, s.table, true)
			if tree {
				ps := 0
				if p := t.Parent[i]; p >= 0 {
					ps = starts[p+1]
				}
				plen := int(r.depths[i]) // the parent's list: root + depth-1 ancestors
				st := len(s.ancSlot)
				s.ancSlot = append(s.ancSlot, s.ancSlot[ps:ps+plen]...)
				s.ancSlot = append(s.ancSlot, slot)
				starts[i+1] = st
			}
		}
		if tree {
			// Slices are taken after ancSlot stopped growing.
			for i := range t.Tokens {
				st := starts[i+1]
				r.mask.Rows = append(r.mask.Rows, kernels.TreeRow{Prefix: int32(n), Slots: s.ancSlot[st : st+int(r.depths[i])+1]})
			}
		}
	}
	var mask *kernels.TreeMask
	if tree {
		mask = &r.mask
	}
	if err := r.forward(mask); err != nil {
		return err
	}
	// Verify, compact, commit.
	r.moves = r.moves[:0]
	committed := 0
	for _, s := range live {
		t := &s.tree
		n := len(s.tokens) - 1
		row := func(node int32) []float32 {
			o := (s.logit0 + 1 + int(node)) * r.vocab
			return r.logits[o : o+r.vocab]
		}
		ctxOf := func(node int32) []int32 {
			ctx := slices.Clip(s.tokens)
			var rev []int32
			for j := node; j >= 0; j = t.Parent[j] {
				rev = append(rev, t.Tokens[j])
			}
			for j := len(rev) - 1; j >= 0; j-- {
				ctx = append(ctx, rev[j])
			}
			return ctx
		}
		var path []int32
		var next int32
		if s.samp.Greedy() {
			target := make([]int32, t.Len()+1)
			for node := Root; int(node) < t.Len(); node++ {
				target[node+1] = sample.Argmax(r.probs(s, row(node), ctxOf(node), 0))
			}
			path, next = VerifyGreedy(t, target)
		} else {
			// The verifier is done with a node's distribution when it
			// asks for the next, so one buffer serves the walk.
			path, next = verifySampled(t, func(node int32) []float32 {
				return r.probs(s, row(node), ctxOf(node), 0)
			}, s.rng, r.reject)
		}
		toks := make([]int32, 0, len(path)+1)
		for d, node := range path {
			toks = append(toks, t.Tokens[node])
			// Node's KV sits at position n+1+node, its place is n+1+d.
			if node != int32(d) {
				r.moves = append(r.moves, kernels.SlotCopy{Src: r.slotOf(s, n+1+int(node)), Dst: r.slotOf(s, n+1+d)})
			}
		}
		toks = append(toks, next)
		kept := r.commit(s, toks)
		acc := min(len(path), kept)
		s.res.Steps++
		s.res.Accepted += acc
		r.stats.Accepted += acc
		r.stats.SeqSteps++
		r.stats.Tokens += kept
		committed += kept
		for len(r.stats.AcceptLen) <= acc {
			r.stats.AcceptLen = append(r.stats.AcceptLen, 0)
		}
		r.stats.AcceptLen[acc]++
		if r.cfg.Drafter != nil {
			if s.done {
				r.cfg.Drafter.Rewind(s.slot, 0)
			} else {
				r.cfg.Drafter.Rewind(s.slot, len(s.tokens))
			}
		}
	}
	if len(r.moves) > 0 {
		r.sc.CopySlots(r.kv, r.moves)
	}
	r.stats.Steps++
	r.disp.Observe(len(live), shape, committed, r.clock().Sub(start))
	return nil
}

// mainChain returns the chain of s's rank-0 path (its first nodes).
func mainChain(s Shape) Shape {
	k := 0
	for k < s.Len() && s.Depth[k] == int32(k+1) && s.Rank[k] == 0 {
		k++
	}
	if k == s.Len() {
		return s
	}
	c := Chain(k)
	if k == 0 {
		return Off
	}
	return c
}
