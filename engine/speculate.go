package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/specgate/specgate/engine/guided"
	"github.com/specgate/specgate/engine/model"
	"github.com/specgate/specgate/engine/spec"
	"github.com/specgate/specgate/engine/specmode"
)

// How the engine speculates (all on the step goroutine). The algorithm is
// spec.Step's, the one the spec package's Runner drives too; the engine
// makes one call to it per phase of its step:
//
//   - plan: the scheduler plans as if every decode ran one token. Once the
//     step's chunks are placed, spec.Step.Plan gives the decodes (the
//     step's batch size) a shape from the dispatcher, narrowed per
//     request by its class's and tenant's policy, has the drafter fill
//     it, and adds the trees' nodes to the batch. Blocks for the nodes'
//     slots come from free (or evictable cached) device blocks only
//     (specHost.Grow); when there are too few the tree is cut to what
//     fits, maybe to nothing. Speculation never preempts anyone.
//   - run: every row of the step shares one forward pass.
//   - commit: spec.Step.Commit verifies each tree, taking at every node
//     the very token plain decoding would (specHost.Target: the target's
//     argmax for greedy requests, and for sampled ones its draw with the
//     request's uniform for that position, as package sample keys draws
//     by (seed, position)), so the output is the plain output, token for
//     token, whatever was drafted or batched; guided requests mask drafts
//     and targets alike. It moves the accepted path's K/V to its final
//     slots and hands the tokens to specHost.Commit, where they go
//     through the usual stop checks as one delta; the tree's extra
//     blocks go back to the pool before the step ends.

// Drafter kinds for Speculation.Drafter. The two drafters are named as the
// speculation modes that allow only them.
const (
	DraftNGram = specmode.NGram
	DraftModel = specmode.Draft
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
	// throughput; nil means spec.NewDispatcher(spec.TiersFor(drafter)):
	// dynamic trees and chains alone, smaller ones as the batch grows, off
	// in large batches (lookup is offered no large budgets). The engine
	// owns it from then on; Engine.DispatchStats reads what it measured.
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
	step        *spec.Step
	drafter     string      // the drafter's name, for metrics
	batchPolicy spec.Policy // Speculation.BatchPolicy
	noSampled   bool        // Speculation.NoSampled

	// Per step: the decodes handed to step (seqs[i]'s is decs[i]) and
	// the time commit stamps their tokens with.
	decs []*spec.Seq
	seqs []*sequence
	now  time.Time
}

func newSpecState(m model.Model, o Options, e *Engine) (*specState, error) {
	sp := o.Speculation
	st := &specState{batchPolicy: spec.Policy{MaxBatch: 4}, noSampled: sp.NoSampled}
	if sp.BatchPolicy != nil {
		st.batchPolicy = *sp.BatchPolicy
	}
	var d spec.Drafter
	switch sp.Drafter {
	case DraftOff:
		return nil, nil
	case DraftNGram, "":
		d = &spec.NGram{}
	case DraftModel:
		if sp.Model == nil {
			return nil, fmt.Errorf("engine: speculation with a draft model needs Speculation.Model")
		}
		if v, w := sp.Model.Config().Vocab, m.Config().Vocab; v != w {
			return nil, fmt.Errorf("engine: draft model vocabulary %d differs from the model's %d", v, w)
		}
		dm, err := spec.NewDraftModel(sp.Model, o.MaxRunning, o.MaxContext)
		if err != nil {
			return nil, fmt.Errorf("engine: %w", err)
		}
		d = dm
	default:
		return nil, fmt.Errorf("engine: unknown drafter %q (want %s, %s or %s)", sp.Drafter, DraftNGram, DraftModel, DraftOff)
	}
	step, err := spec.NewStep(spec.StepConfig{Drafter: d, Dispatcher: sp.Dispatcher, KV: e.devKV, Backend: m.Backend(),
		BlockSize: o.BlockSize, Slots: o.MaxRunning, Clock: e.clock.Now})
	if err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	st.step, st.drafter = step, d.Name()
	return st, nil
}

// DispatchStats is what the engine's speculation dispatcher has measured
// for one priority class in the tier that serves a batch size.
type DispatchStats struct {
	// Kappa is the fitted cost of a drafted row per sequence, as a share
	// of a plain step; KappaSteps is how many steps the fit rests on.
	Kappa      float64
	KappaSteps int
	// Shapes are the tier's options, as the dispatcher compares them.
	Shapes []spec.ShapeStats
}

// DispatchStats returns what the dispatcher the engine speculates with has
// measured for class p at batch size batch: the dispatcher Options gave,
// or the one the engine chose for its drafter. It is read on the step
// goroutine, so it may be called while requests run. An engine that does
// not speculate returns the zero value.
func (e *Engine) DispatchStats(ctx context.Context, p Priority, batch int) (DispatchStats, error) {
	if p < Standard || p > Batch {
		return DispatchStats{}, fmt.Errorf("engine: dispatch stats for unknown priority %d", int(p))
	}
	return call(e, ctx, func() DispatchStats {
		var ds DispatchStats
		if e.spec == nil {
			return ds
		}
		d := e.spec.step.Dispatcher()
		ds.Kappa, ds.KappaSteps = d.ClassKappa(int(p), batch)
		ds.Shapes = d.ClassStats(int(p), batch)
		return ds
	})
}

// policy is s's speculation policy: its class's and its tenant's, either
// able to turn it off.
func (st *specState) policy(s *sequence) spec.Policy {
	p := s.req.Limits.Speculation
	if st.noSampled && !s.sampler.Greedy() {
		p.Off = true
	}
	if d := st.drafter; !specmode.Allows(s.req.Limits.Speculate, d) || !specmode.Allows(s.req.Speculate, d) {
		p.Off = true
	}
	if s.req.Logprobs {
		p.Off = true // logprobs are read from the plain decode's row
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
	if e.spec != nil {
		e.spec.step.Release(&s.sp)
	}
}

// draft is the plan phase's speculative call: it describes p's decodes to
// the spec step, which drafts their trees and adds them to the batch.
func (e *Engine) draft(p *stepPlan) {
	st := e.spec
	st.decs, st.seqs = st.decs[:0], st.seqs[:0]
	for _, s := range p.decodes {
		q := &s.sp
		q.Tokens, q.Table = s.tokens, s.table
		q.Left = s.max - s.generated()
		q.Policy = st.policy(s)
		q.Class = int(s.req.Priority)
		q.Params = s.req.Sample
		q.Mask = nil
		if s.matcher != nil {
			if s.draftMask == nil {
				// Made once per sequence, not per step: it reads the
				// cursor and the committed tokens when the drafter
				// calls it, within the step that planned it.
				s.draftMask = func(ctx []int32) []uint64 {
					m := s.matcher
					gr := m.Grammar()
					g, _ := gr.Walk(m.State(), ctx[len(s.tokens):])
					return gr.Mask(g)
				}
			}
			q.Mask = s.draftMask
		}
		q.History = s.history
		st.decs = append(st.decs, q)
		st.seqs = append(st.seqs, s)
	}
	// Every sequence the engine holds counts toward the dispatcher's
	// tier, waiting ones included: they are what a tree would delay.
	st.step.Plan(st.decs, len(e.seqs), &p.batch, specHost{e})
}

// commitDrafts is the commit phase's speculative call: the spec step
// verifies the drafted decodes and commits their tokens through
// specHost.Commit; then the blocks trees took beyond their sequences' K/V
// go back. The counts go into the step's report through specHost.Commit.
func (e *Engine) commitDrafts(now time.Time) {
	st := e.spec
	plain := 0
	for _, s := range st.seqs {
		if !s.sp.Drafting() {
			plain++ // committed by the caller, one token each
		}
	}
	st.now = now
	st.step.Commit(specHost{e}, plain)
	for _, s := range st.seqs {
		// The next decode's block is placed as the scheduler plans it.
		if keep := e.blocks(s.kv); e.seqs[s.req.ID] == s && len(s.table) > keep {
			e.unref(e.dev, s.table[keep:])
			s.table = s.table[:keep]
		}
	}
	st.decs, st.seqs = st.decs[:0], st.seqs[:0]
}

// specHost is the engine as the spec step's host; index i is into
// specState.seqs.
type specHost struct{ e *Engine }

// Grow gives s's tree slots from free or evictable cached device blocks.
func (h specHost) Grow(i, end int) []int32 {
	e := h.e
	s := e.spec.seqs[i]
	if need := e.blocks(end) - len(s.table); need > 0 {
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
	}
	return s.table
}

// Target samples as plain decoding does: the request's sampler, under
// its grammar's mask at the node when it is guided.
func (h specHost) Target(i, row int, node int32, ctx []int32) int32 {
	e := h.e
	s := e.spec.seqs[i]
	if s.matcher == nil {
		return e.logits.sampleOne(row, s.req.Sample, nil, ctx)
	}
	gr, g := s.matcher.Grammar(), s.matcher.State()
	if node == spec.Root {
		t := s.sp.Tree()
		s.states = gr.TreeStates(g, t.Tokens, t.Parent, s.states)
	} else {
		g = s.states[node]
	}
	if g <= 0 {
		return -1
	}
	tok := e.logits.sampleOne(row, s.req.Sample, gr.Mask(g), ctx)
	if !gr.Allowed(g, tok) {
		return -1
	}
	return tok
}

// Commit takes a drafted decode's verified tokens through the usual stop
// checks as one delta.
func (h specHost) Commit(i int, path, toks []int32) (took, held int) {
	e := h.e
	s, now := e.spec.seqs[i], e.spec.now
	if e.seqs[s.req.ID] != s {
		return 0, -1
	}
	// The root and the accepted path now hold their K/V.
	s.kv = len(s.sp.Tokens) + len(path)
	// Counted before accept, which sends the final (with the request's
	// stats) when a token ends the request.
	drafted := s.sp.Tree().Len()
	s.drafted += drafted
	took = e.accept(s, toks, len(path), now)
	e.report.drafted(e.spec.drafter, drafted, min(len(path), took))
	if e.seqs[s.req.ID] != s {
		return took, -1
	}
	// Without a token from the target the grammar allows nothing after
	// the path: unless it is complete (the stop checks then end the
	// request), the output cannot go on.
	noMore := false
	if s.matcher != nil && len(toks) == len(path) {
		g := s.matcher.State()
		noMore = !s.matcher.Grammar().Terminal(g) && g != guided.Final
	}
	if noMore || took == 0 {
		e.release(s, true)
		e.end(s, now, FinishStop, nil)
		return took, -1
	}
	e.sched.SetKV(s.req.ID, s.kv)
	return took, len(s.tokens)
}
