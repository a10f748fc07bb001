package engine

import (
	"errors"
	"fmt"
	"time"

	"github.com/specgate/specgate/engine/guided"
	"github.com/specgate/specgate/engine/model"
	"github.com/specgate/specgate/engine/sched"
	"github.com/specgate/specgate/kernels"
	"github.com/specgate/specgate/kernels/sample"
)

// enqueue hands a prepared submission to the scheduler: the request waits,
// or is refused with a typed error.
func (e *Engine) enqueue(now time.Time, sub *submission) error {
	r := sub.req
	err := e.sched.Enqueue(now, sched.Request{
		ID:     r.ID,
		Tenant: r.Tenant,
		Class:  sched.Class(r.Priority.Rank()),
		Limits: schedLimits(r.Limits),
		Tokens: len(sub.tokens),
		Charge: sub.prompt,
		// The completion cap is reserved now and what is not generated
		// is refunded at the end, so requests admitted together cannot
		// overshoot the tenant's tokens per minute.
		Reserve: sub.max - len(r.Generated),
	})
	if err != nil {
		return refusal(err)
	}
	s := &sequence{
		req:      r,
		stream:   sub.stream,
		tokens:   sub.tokens,
		prompt:   sub.prompt,
		replayed: len(r.Generated),
		max:      sub.max,
		dropped:  sub.dropped,
		history:  sub.history,
		stopToks: r.StopTokens,
		sampler:  sample.New(r.Sample),
		matcher:  sub.matcher,
		detok:    e.tok.NewContinuationDetokenizer(),
	}
	s.submitted = sub.at
	for _, t := range r.Generated {
		s.detok.Add(t) // already streamed: only the decoder state matters
	}
	e.seqs[r.ID] = s
	return nil
}

// refusal turns the scheduler's refusal into the client's: a stable code
// and reason, and a message that names neither the tenant nor the
// scheduler.
func refusal(err error) error {
	switch {
	case errors.Is(err, sched.ErrQueueFull):
		return &Error{Code: CodeQueueFull, Message: "the server has too many requests waiting; retry later", Temporary: true}
	case errors.Is(err, sched.ErrTokensPerMinute):
		return &Error{Code: CodeOverQuota, Reason: ReasonTokensPerMinute, Message: "tokens per minute exceeded; retry later", Temporary: true}
	case errors.Is(err, sched.ErrOverQuota):
		return &Error{Code: CodeOverQuota, Reason: ReasonQueue, Message: "too many requests waiting for this tenant; retry later", Temporary: true}
	case errors.Is(err, sched.ErrDuplicate):
		return &Error{Code: CodeBadRequest, Message: "a live request already has this id"}
	case errors.Is(err, sched.ErrInvalid):
		return &Error{Code: CodeBadRequest, Message: "the request cannot be scheduled"}
	}
	return &Error{Code: CodeInternal, Message: "request refused"}
}

// step runs one scheduling round and one forward pass at time now, and
// reports whether it made progress (ran tokens or found cached ones). It is
// the engine's whole core: tests call it directly, with a fake clock and no
// goroutines. It reads as its three phases: plan decides the batch, run is
// the forward pass, commit turns the pass's logits into tokens and events.
func (e *Engine) step(now time.Time) bool {
	e.expire(now)
	if len(e.seqs) == 0 {
		e.publish(now, true)
		return false
	}
	p := e.plan(now)
	for _, s := range p.failed {
		e.end(s, now, FinishError, &Error{Code: CodeInternal, Message: "KV blocks ran out"})
	}
	if p.batch.Len() == 0 {
		e.publish(now, false)
		return p.progress
	}
	err := e.run(p)
	took := e.clock.Now().Sub(now)
	e.report.forward(len(p.chunks), p.batch.Len(), took)
	e.count.Steps++
	e.count.ForwardTokens += int64(p.batch.Len())
	if err != nil {
		// The pass's output is unusable for every sequence in it.
		ferr := &Error{Code: CodeInternal, Message: fmt.Sprintf("forward pass: %v", err)}
		for _, c := range p.chunks {
			if s := e.seqs[c.ID]; s != nil {
				e.end(s, now, FinishError, ferr)
			}
		}
		e.publish(now, false)
		return true
	}
	e.rate.observe(p.batch.Len(), took)
	// Tokens are stamped when the pass ends: that is when a client could
	// first see them.
	now = e.clock.Now()
	e.commit(p, now)
	e.publish(now, false)
	return true
}

// expire ends the requests whose deadline has passed.
func (e *Engine) expire(now time.Time) {
	for _, s := range e.seqs {
		if d := s.req.Deadline; !d.IsZero() && !now.Before(d) {
			e.end(s, now, FinishCancelled, nil)
		}
	}
}

// stepPlan is one step's batch as planned: the chunks the scheduler chose,
// the forward batch that runs them (with any draft trees), and which
// sequence each logits row belongs to. plan builds it; run reads it;
// commit consumes it. The engine keeps one and reuses its buffers.
type stepPlan struct {
	// chunks are the scheduler's chunks for the step, placed or not.
	chunks []sched.Chunk
	batch  model.Batch
	// placed are the chunks that went into batch, in batch order.
	placed []placedChunk
	// rows[i] is the sequence of logits row i (a drafted sequence's
	// tree rows follow every planned row; see speculate.go).
	rows []*sequence
	// decodes are the rows that decode one token after the sequence's
	// last: the candidates for speculation.
	decodes []*sequence
	// failed are sequences whose blocks could not be placed; the step
	// ends them.
	failed []*sequence
	// progress says the plan found cached tokens (a prefix cache hit),
	// progress even when nothing runs.
	progress bool
}

// plan runs the scheduling round and builds the step's batch: preemptions,
// prefix cache lookups, block placement, the planned rows and the draft
// trees. It neither runs the model nor emits anything: sequences it could
// not place are returned in failed for the caller to end.
func (e *Engine) plan(now time.Time) *stepPlan {
	p := &e.cur
	budget, target, first := e.stepBudget()
	e.count.StepTokens = budget
	efficient := 0
	if target > 0 {
		// Under the latency target with more than one request: shares
		// by weight apply from an efficient step up (see budget.go).
		efficient = e.rate.efficient()
	}
	sp := e.sched.Schedule(now, sched.Resources{Tokens: budget, Target: target, Efficient: efficient, FreeBlocks: e.allocatable(), FreeHostBlocks: e.swapRoom(), InteractiveFirst: first, Cache: e.hints()})
	for _, pr := range sp.Preempt {
		e.preempt(e.seqs[pr.ID], pr)
	}
	p.chunks = sp.Run
	p.batch.Reset()
	p.placed, p.rows, p.decodes, p.failed = p.placed[:0], p.rows[:0], p.decodes[:0], p.failed[:0]
	p.progress = false
	// slack is how many blocks the device can give beyond what the plan's
	// chunks take as planned; a cache hit spends it (see lookup).
	slack := e.allocatable()
	for _, c := range sp.Run {
		slack -= e.planned(c)
	}
	for _, c := range sp.Run {
		s := e.seqs[c.ID]
		if e.cache != nil && len(s.table) == 0 && !c.Resume {
			// A start with no KV, planned from where the cache said
			// its match ends (see cacheHints).
			var hit bool
			c, slack, hit = e.lookup(s, c, slack)
			p.progress = p.progress || hit
		}
		c, err := e.place(s, c)
		if err != nil {
			p.failed = append(p.failed, s)
			continue
		}
		if s.scheduled.IsZero() {
			s.scheduled = now
		}
		if c.N == 0 {
			continue
		}
		bs := int32(e.o.BlockSize)
		for i := c.Start; i < c.Start+c.N; i++ {
			pos := int32(i)
			slot := s.table[pos/bs]*bs + pos%bs
			last := i == c.Start+c.N-1
			p.batch.Add(s.tokens[i], pos, slot, s.table, last && c.Logits)
		}
		p.placed = append(p.placed, placedChunk{s: s, c: c})
		if c.Logits {
			p.rows = append(p.rows, s)
			if c.N == 1 && c.Start == len(s.tokens)-1 {
				s.sp.Row = len(p.rows) - 1
				p.decodes = append(p.decodes, s)
			}
		}
		if fresh := min(c.Start+c.N, s.prompt) - max(c.Start, s.prefilled); fresh > 0 {
			s.prefilled += fresh
			e.report.tokens(s.req.Tenant, fresh, 0)
		}
		if input := min(c.Start+c.N, s.prompt+s.replayed) - c.Start; input > 0 {
			e.count.PromptTokens += int64(input)
		}
	}
	if e.spec != nil && p.batch.Len() > 0 {
		e.draft(p)
	}
	return p
}

// run is the step's forward pass: p's batch through the model. Its
// logits stay on the backend (see passLogits).
func (e *Engine) run(p *stepPlan) error {
	lt, err := e.m.Forward(e.devKV, &p.batch)
	if err != nil {
		return err
	}
	e.logits.take(e.m.Backend(), lt, e.m.Config().Vocab)
	return nil
}

// commit takes the forward pass's logits for p at time now: the K/V the
// pass wrote, the next token of every row (verifying drafted trees) and
// their events. What it did goes into the step's report (e.report).
func (e *Engine) commit(p *stepPlan, now time.Time) {
	for _, pc := range p.placed {
		pc.s.kv = pc.c.Start + pc.c.N
	}
	// Every plain row is drawn in one call of the backend's ops.
	reqs := e.logits.reqs[:0]
	for i, s := range p.rows {
		if e.seqs[s.req.ID] != s || s.sp.Drafting() {
			continue // drafted rows are verified and committed below
		}
		reqs = append(reqs, kernels.SampleRow{Row: i, Params: s.req.Sample, Mask: e.mask(s), History: s.tokens})
	}
	toks := e.logits.sample(reqs)
	for k := range reqs {
		r := &reqs[k]
		s, tok := p.rows[r.Row], toks[k]
		if r.Mask != nil && !guided.Bitset(r.Mask).Has(tok) {
			// The grammar allows no token the vocabulary has: the
			// output is as complete as it can get.
			e.release(s, true)
			e.end(s, now, FinishStop, nil)
			continue
		}
		if s.req.Logprobs {
			s.nextLP = e.logprobs(e.logits.hostRow(r.Row), tok, s.req.TopLogprobs)
		}
		e.accept(s, []int32{tok}, 0, now)
	}
	clear(reqs) // drop the borrowed masks and histories
	e.logits.reqs = reqs[:0]
	if e.spec != nil && len(p.decodes) > 0 {
		e.commitDrafts(now)
	}
}

// placedChunk is a chunk that went into the step's batch.
type placedChunk struct {
	s *sequence
	c sched.Chunk
}

// blocks is how many blocks hold n tokens.
func (e *Engine) blocks(n int) int { return (n + e.o.BlockSize - 1) / e.o.BlockSize }

// planned is how many device blocks chunk c takes as the scheduler planned
// it.
func (e *Engine) planned(c sched.Chunk) int {
	if c.Resume {
		return c.Blocks
	}
	return c.Blocks - e.blocks(c.Start)
}

// place makes sure s's blocks are on the device and cover chunk c, and
// returns the chunk as it can run. When the device cannot give every block
// the plan counted on (it counted blocks that turned out to be held, as
// when a preempted sequence shared its prefix with others), the chunk runs
// the tokens that fit, maybe none, and the scheduler is told.
func (e *Engine) place(s *sequence, c sched.Chunk) (sched.Chunk, error) {
	if c.Resume && len(s.host) > 0 {
		dst, err := e.dev.Alloc(len(s.host))
		if err != nil {
			return c, fmt.Errorf("engine: swap in %s: %w", s.req.ID, err)
		}
		moves := make([]kernels.BlockCopy, len(dst))
		for i := range dst {
			moves[i] = kernels.BlockCopy{Src: s.host[i], Dst: dst[i]}
		}
		e.kvb.CopyBlocks(e.devKV, e.hostKV, moves)
		e.unref(e.host, s.host)
		s.host = nil
		s.table = dst
	}
	n := c.Blocks - len(s.table)
	if n <= 0 {
		return c, nil
	}
	if e.cache != nil {
		// Evict cached blocks for the room; a shortfall is handled below.
		_ = e.cache.Reserve(n)
	}
	k := min(n, e.dev.Free())
	b, err := e.dev.Alloc(k)
	if err != nil {
		return c, fmt.Errorf("engine: grow %s: %w", s.req.ID, err)
	}
	s.table = append(s.table, b...)
	if k < n {
		end := max(min(c.Start+c.N, len(s.table)*e.o.BlockSize), c.Start)
		c.N, c.Logits, c.Blocks = end-c.Start, end == len(s.tokens), e.blocks(end)
		e.sched.SetKV(s.req.ID, end)
	}
	return c, nil
}

// preempt takes s off the device as p says. With the prefix cache its full
// blocks are cached (and so may be demoted to the host tier and promoted
// back when it resumes) and it resumes through a lookup; without it its KV
// is swapped to the host tier or dropped (the scheduler will have it
// recomputed).
func (e *Engine) preempt(s *sequence, p sched.Preemption) {
	s.preemptions++
	e.count.Preemptions++
	// A draft model re-reads the sequence when it drafts for it again.
	e.releaseSlot(s)
	if e.cache != nil {
		// The scheduler was given no swap room, so it planned a drop.
		e.report.preempted(s.req.Tenant, s.kv >= e.o.BlockSize)
		e.dropKV(s, true)
		return
	}
	e.report.preempted(s.req.Tenant, p.Swap)
	if p.Swap && e.host != nil {
		if dst, err := e.host.Alloc(len(s.table)); err == nil {
			moves := make([]kernels.BlockCopy, len(dst))
			for i := range dst {
				moves[i] = kernels.BlockCopy{Src: s.table[i], Dst: dst[i]}
			}
			e.kvb.CopyBlocks(e.hostKV, e.devKV, moves)
			s.host = dst
		}
	}
	e.unref(e.dev, s.table)
	s.table = nil
	if s.host == nil {
		s.kv = 0
	}
	if p.Swap && s.host == nil {
		// The scheduler counted on the swap; without it the KV is
		// gone, so the sequence must restart from scratch. Removing
		// and failing is the honest outcome of this internal error.
		e.end(s, e.clock.Now(), FinishError, &Error{Code: CodeInternal, Message: "host tier refused a planned swap"})
	}
}

func (e *Engine) unref(p blockAllocator, blocks []int32) {
	for _, b := range blocks {
		// An error here means the block was already free: a bug that
		// the leak test catches through the pool counts.
		_ = p.Unref(b)
	}
}

// mask is s's guided mask for its next token, nil when s is not
// constrained.
func (e *Engine) mask(s *sequence) []uint64 {
	if s.matcher == nil {
		return nil
	}
	// Wall time, not the engine's clock: this measures CPU cost, and a
	// fake clock would report none.
	t0 := time.Now()
	mask := s.matcher.Mask()
	e.report.guidedMask(time.Since(t0))
	return mask
}

// accept takes the tokens one step produced for s, in order: stop checks,
// text, and one delta for them all; the first drafted of them are
// accepted drafts (counted before a token that ends the request sends the
// final with its stats). It stops early, dropping the rest, when a token
// ends the request; it reports how many it took.
func (e *Engine) accept(s *sequence, toks []int32, drafted int, now time.Time) int {
	if len(toks) == 0 {
		return 0
	}
	s.steps++
	if s.first.IsZero() {
		s.first = now
		e.report.firstToken(s, now.Sub(s.submitted))
	} else {
		// Tokens of one step reach the client together; each is
		// counted as an equal share of the wait for them.
		gap := now.Sub(s.last) / time.Duration(len(toks))
		for range toks {
			s.inter = append(s.inter, gap)
			e.report.tokenGap(s, gap)
		}
	}
	s.last = now
	for i, tok := range toks {
		s.committed++
		if i < drafted {
			s.acceptedDrafts++
		}
		if !e.take(s, tok, now) {
			return i + 1
		}
	}
	e.flush(s)
	e.sched.Append(now, s.req.ID, len(toks))
	return len(toks)
}

// flush emits s's held text and tokens, except a tail that could begin a
// stop string: its tokens stay held until their text is settled, and the
// text before it goes out alone.
func (e *Engine) flush(s *sequence) {
	if len(s.req.Stop) > 0 {
		if _, hold := stopMatch(s.held, s.req.Stop); hold > 0 {
			if n := len(s.held) - hold; n > 0 {
				s.stream.push(Event{Seq: s.generated(), Text: s.held[:n]})
				s.held = s.held[n:]
			}
			return
		}
	}
	e.release(s, false)
}

// take appends one token to s and reports whether s goes on; when it does
// not, s has ended (its text released).
func (e *Engine) take(s *sequence, tok int32, now time.Time) bool {
	s.tokens = append(s.tokens, tok)
	e.report.tokens(s.req.Tenant, 0, 1)
	if e.tok.IsEOG(tok) || s.isStopToken(tok) {
		e.release(s, true)
		e.end(s, now, FinishStop, nil)
		return false
	}
	if s.matcher != nil {
		if err := s.matcher.Advance(tok); err != nil {
			// Tokens are sampled under the mask: this is a bug, and
			// the output must not go on past a forbidden token.
			e.end(s, now, FinishError, &Error{Code: CodeInternal, Message: err.Error()})
			return false
		}
	}
	s.held += s.detok.Add(tok)
	s.heldToks = append(s.heldToks, tok)
	if s.req.Logprobs {
		s.heldLPs = append(s.heldLPs, s.nextLP)
	}
	if len(s.req.Stop) > 0 {
		if at, _ := stopMatch(s.held, s.req.Stop); at >= 0 {
			// Text after the stop string, a partial rune included,
			// is never shown.
			s.held = s.held[:at]
			e.release(s, false)
			e.end(s, now, FinishStop, nil)
			return false
		}
	}
	if s.matcher != nil && s.matcher.Done() {
		// The grammar is complete and nothing may follow.
		e.release(s, true)
		e.end(s, now, FinishStop, nil)
		return false
	}
	if s.generated() >= s.max {
		e.release(s, true)
		e.end(s, now, FinishLength, nil)
		return false
	}
	return true
}

// release emits the held text and tokens as one delta; at the end it also
// flushes the detokenizer's partial rune.
func (e *Engine) release(s *sequence, final bool) {
	if final {
		s.held += s.detok.Flush()
	}
	if s.held == "" && len(s.heldToks) == 0 {
		return
	}
	s.stream.push(Event{Seq: s.generated(), Tokens: s.heldToks, Text: s.held, Logprobs: s.heldLPs})
	s.held, s.heldToks, s.heldLPs = "", nil, nil
}

// end finishes s: frees its blocks, forgets it, and sends the final event.
func (e *Engine) end(s *sequence, now time.Time, reason string, err error) {
	if e.seqs[s.req.ID] != s {
		return
	}
	delete(e.seqs, s.req.ID)
	e.sched.Remove(s.req.ID)
	e.releaseSlot(s)
	// A failed sequence's KV may be half written: only the others'
	// blocks are worth caching.
	e.dropKV(s, reason != FinishError)
	if e.host != nil {
		e.unref(e.host, s.host)
	}
	s.host = nil
	if reason != FinishStop && reason != FinishLength {
		s.held, s.heldToks = "", nil // a cancelled stream ends where it was
	}
	st := Stats{Total: now.Sub(s.submitted), InterToken: s.inter, Preemptions: s.preemptions, Seed: s.req.Sample.Seed,
		Drafted: s.drafted, Accepted: s.acceptedDrafts}
	if !s.scheduled.IsZero() {
		st.Queue = s.scheduled.Sub(s.submitted)
	}
	gen := s.generated() - s.replayed
	if !s.first.IsZero() {
		st.TTFT = s.first.Sub(s.submitted)
		if d := s.last.Sub(s.first); d > 0 && gen > 1 {
			st.TokensPerSecond = float64(gen-1) / d.Seconds()
		}
		st.AcceptedPerStep = float64(s.committed) / float64(max(s.steps, 1))
	}
	f := &Final{
		FinishReason:    reason,
		Usage:           Usage{PromptTokens: s.prompt, CompletionTokens: gen, CachedTokens: s.cached},
		Stats:           st,
		DroppedMessages: s.dropped,
		Err:             err,
	}
	if reason == FinishError && err == nil {
		f.Err = &Error{Code: CodeInternal, Message: "request failed"}
	}
	e.report.finished(s, f)
	s.stream.finish(f)
}
