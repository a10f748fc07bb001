package spec

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/specgate/specgate/engine/model"
	"github.com/specgate/specgate/kernels"
	"github.com/specgate/specgate/kernels/sample"
)

// Config configures a Runner. Seqs and Context are required.
type Config struct {
	// Seqs is how many sequences run at once; Context the most tokens
	// (prompt and completion) one may hold.
	Seqs, Context int
	// Drafter proposes the trees; nil decodes plainly (the baseline).
	Drafter Drafter
	// Dispatcher picks each step's shape; nil means
	// NewDispatcher(TiersFor(Drafter)).
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
// paged KV cache: prefill, then steps of Step.Plan → one target forward
// over every sequence's tree → Step.Commit. It is a harness around the
// same Step the engine drives, for benchmarks and tests of drafters and
// shapes without the engine's scheduling. Not safe for concurrent use.
type Runner struct {
	m     model.Model
	cfg   Config
	step  *Step
	kv    kernels.KVCache
	bs    int
	vocab int

	seqs  []*runSeq
	live  []*runSeq // the step's decodes
	decs  []*Seq
	stats Stats

	batch  model.Batch
	logits []float32
}

type runSeq struct {
	q    Seq // Table is fixed: every sequence owns room for its context
	req  Request
	gen  int
	done bool
	samp *sample.Sampler
	res  Result
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
	kv, err := model.NewKV(m, cfg.Seqs*per, bs)
	if err != nil {
		return nil, fmt.Errorf("spec: KV: %w", err)
	}
	step, err := NewStep(StepConfig{Drafter: cfg.Drafter, Dispatcher: cfg.Dispatcher, KV: kv, Backend: m.Backend(), BlockSize: bs, Slots: cfg.Seqs, Clock: cfg.Clock})
	if err != nil {
		return nil, err
	}
	r := &Runner{m: m, cfg: cfg, step: step, kv: kv, bs: bs, vocab: m.Config().Vocab}
	for i := range cfg.Seqs {
		t := make([]int32, per)
		for j := range t {
			t[j] = int32(i*per + j)
		}
		r.seqs = append(r.seqs, &runSeq{q: Seq{Table: t}})
	}
	return r, nil
}

// Stats returns the totals so far.
func (r *Runner) Stats() Stats { return r.stats }

// Dispatcher returns the runner's dispatcher.
func (r *Runner) Dispatcher() *Dispatcher { return r.step.Dispatcher() }

// Trees reports whether the runner verifies branching trees (its model's
// backend has the tree ops) rather than only chains.
func (r *Runner) Trees() bool { return r.step.Trees() }

func (r *Runner) slotOf(s *runSeq, pos int) int32 {
	return s.q.Table[pos/r.bs]*int32(r.bs) + int32(pos%r.bs)
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
	}
	for i, q := range reqs {
		s := active[i]
		r.step.Release(&s.q)
		s.req, s.gen, s.done, s.res = q, 0, false, Result{}
		s.samp = sample.New(q.Params)
		s.q.Tokens = append(s.q.Tokens[:0], q.Prompt...)
		s.q.Params, s.q.Mask, s.q.History, s.q.Policy = q.Params, q.Mask, q.History, q.Policy
	}
	if err := r.prefill(active); err != nil {
		return nil, err
	}
	for {
		r.live, r.decs = r.live[:0], r.decs[:0]
		for _, s := range active {
			if !s.done {
				r.live = append(r.live, s)
				r.decs = append(r.decs, &s.q)
			}
		}
		if len(r.live) == 0 {
			break
		}
		if err := r.decode(); err != nil {
			return nil, err
		}
	}
	out := make([]Result, len(reqs))
	for i, s := range active {
		s.res.Tokens = slices.Clone(s.q.Tokens[len(s.req.Prompt):])
		out[i] = s.res
		r.step.Release(&s.q)
	}
	return out, nil
}

// prefill runs every prompt and draws each first token.
func (r *Runner) prefill(seqs []*runSeq) error {
	b := &r.batch
	b.Reset()
	for _, s := range seqs {
		for p, t := range s.q.Tokens {
			b.Add(t, int32(p), r.slotOf(s, p), s.q.Table, p == len(s.q.Tokens)-1)
		}
	}
	if err := r.forward(); err != nil {
		return err
	}
	for i, s := range seqs {
		tok := r.pick(s, r.logits[i*r.vocab:(i+1)*r.vocab], s.q.Tokens)
		r.commit(s, []int32{tok})
	}
	return nil
}

func (r *Runner) forward() error {
	b := &r.batch
	if need := len(b.Logits) * r.vocab; cap(r.logits) < need {
		r.logits = make([]float32, need)
	}
	r.logits = r.logits[:len(b.Logits)*r.vocab]
	if err := model.ForwardHost(r.m, r.kv, b, r.logits); err != nil {
		return fmt.Errorf("spec: forward: %w", err)
	}
	return nil
}

// pick is s's next token after ctx as plain decoding draws it: the
// request's sampler keys its draws by position, so a draft accepted in its
// place is the very same token.
func (r *Runner) pick(s *runSeq, logits []float32, ctx []int32) int32 {
	if s.req.Mask != nil {
		if m := s.req.Mask(ctx); m != nil {
			return s.samp.SampleMasked(logits, m, ctx)
		}
	}
	return s.samp.Sample(logits, ctx)
}

// commit appends toks (truncated at the token budget and after an
// end-of-generation token) to s and reports how many it kept.
func (r *Runner) commit(s *runSeq, toks []int32) int {
	tk := model.TokenizerOf(r.m)
	kept := 0
	for _, t := range toks {
		if s.done {
			break
		}
		s.q.Tokens = append(s.q.Tokens, t)
		s.gen++
		kept++
		if s.gen >= s.req.MaxTokens || (tk != nil && tk.IsEOG(t)) {
			s.done = true
		}
	}
	return kept
}

// decode runs one step for the live sequences: their roots, the Step's
// trees, one forward pass, then the plain decodes' tokens and the Step's
// commit.
func (r *Runner) decode() error {
	b := &r.batch
	b.Reset()
	for k, s := range r.live {
		n := len(s.q.Tokens) - 1
		s.q.Row, s.q.Left = k, s.req.MaxTokens-s.gen
		b.Add(s.q.Tokens[n], int32(n), r.slotOf(s, n), s.q.Table, true)
	}
	r.step.Plan(r.decs, len(r.decs), b, runnerHost{r})
	if err := r.forward(); err != nil {
		return err
	}
	plain := 0
	for k, s := range r.live {
		if s.q.Drafting() {
			continue
		}
		tok := r.pick(s, r.logits[k*r.vocab:(k+1)*r.vocab], s.q.Tokens)
		kept := r.commit(s, []int32{tok})
		plain += kept
		r.tally(s, 0, kept)
	}
	rep := r.step.Commit(runnerHost{r}, plain)
	r.stats.Steps++
	r.stats.Drafted += rep.Drafted
	return nil
}

// tally counts one sequence-step that committed kept tokens, accepted of
// them drafts.
func (r *Runner) tally(s *runSeq, accepted, kept int) {
	s.res.Steps++
	s.res.Accepted += accepted
	r.stats.Accepted += accepted
	r.stats.SeqSteps++
	r.stats.Tokens += kept
	for len(r.stats.AcceptLen) <= accepted {
		r.stats.AcceptLen = append(r.stats.AcceptLen, 0)
	}
	r.stats.AcceptLen[accepted]++
}

// runnerHost is the Runner as the Step's Host.
type runnerHost struct{ r *Runner }

// Grow has nothing to give: every sequence owns room for its context and
// a whole tree.
func (h runnerHost) Grow(i, end int) []int32 { return h.r.live[i].q.Table }

func (h runnerHost) Target(i, row int, node int32, ctx []int32) int32 {
	r := h.r
	return r.pick(r.live[i], r.logits[row*r.vocab:(row+1)*r.vocab], ctx)
}

func (h runnerHost) Commit(i int, path, toks []int32) (took, held int) {
	r := h.r
	s := r.live[i]
	kept := r.commit(s, toks)
	s.res.Drafted += s.q.Tree().Len()
	r.tally(s, min(len(path), kept), kept)
	if s.done {
		r.step.Release(&s.q)
		return kept, -1
	}
	return kept, len(s.q.Tokens)
}
