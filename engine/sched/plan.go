package sched

import (
	"slices"
	"time"
)

// Schedule plans one step and updates the scheduler as if the plan runs:
// chunks advance their sequences' cached tokens, preempted sequences go back
// to the front of their tenant's queue, admitted ones start running.
//
// The step's token budget goes first to running sequences that decode (one
// token each), then to running sequences still in prefill, then to waiting
// requests (chunked: a prompt longer than what is left of the budget gets
// the rest now and more next step). Each group is served in priority order:
// class (with aging, for waiting requests), then deficit round robin among
// tenants, then arrival.
//
// When the device pool cannot hold a running sequence's next tokens, the
// lowest-priority, most recently started running sequence is preempted: its
// KV is swapped to the host tier when FreeHostBlocks allow, else dropped to
// be recomputed. A waiting request may also preempt running sequences of a
// strictly lower class when blocks or running slots are short.
//
// After a chunk with Logits, the caller samples and calls Append (or Remove
// when the sequence ends) before the next Schedule.
func (s *Scheduler) Schedule(now time.Time, r Resources) Plan {
	p := planner{s: s, now: now, budget: r.Tokens, free: r.FreeBlocks, hostFree: r.FreeHostBlocks, at: map[*seq]int{}}
	run := slices.Clone(s.running)
	// Priority order; the last entry is the preemption victim.
	slices.SortFunc(run, func(a, b *seq) int {
		if a.class != b.class {
			return int(a.class - b.class)
		}
		if c := a.started.Compare(b.started); c != 0 {
			return c
		}
		return compareStr(a.id, b.id)
	})
	p.run = run
	if r.InteractiveFirst {
		p.runAll(func(q *seq) bool { return q.class == Interactive })
		p.admit(Interactive)
	}
	p.runAll(func(*seq) bool { return true })
	p.admit(numClasses - 1)
	return p.commit()
}

// runAll plans the running sequences that accept allows: decodes first,
// then prefill chunks, each in priority order.
func (p *planner) runAll(accept func(*seq) bool) {
	for _, decode := range [2]bool{true, false} {
		for _, q := range p.run {
			if p.budget == 0 {
				break
			}
			pending := q.total - q.kv
			if _, planned := p.at[q]; planned || p.gone[q] || !accept(q) || pending <= 0 || (pending == 1) != decode {
				continue
			}
			p.runChunk(q, pending)
		}
	}
}

type planner struct {
	s                      *Scheduler
	now                    time.Time
	budget, free, hostFree int
	run                    []*seq // running at the start of the step, priority order
	plan                   Plan
	at                     map[*seq]int // index of a sequence's chunk in plan.Run
	gone                   map[*seq]bool
	admitted               []*seq
}

// runChunk plans up to pending tokens of a running sequence, preempting
// lower-priority sequences (or, for a decode, itself) when blocks run out.
func (p *planner) runChunk(q *seq, pending int) {
	bs := p.s.cfg.BlockSize
	n := min(pending, p.budget)
	held := p.s.blocks(q.kv)
	for {
		need := p.s.blocks(q.kv+n) - held
		if need <= p.free {
			break
		}
		if pending > 1 {
			// A prefill chunk may shrink to what fits.
			if fit := (held+p.free)*bs - q.kv; fit > 0 {
				n = fit
				break
			}
		}
		v := p.victim(func(v *seq) bool { return v != q }, q)
		if v == nil {
			if pending > 1 {
				return // wait: a higher-priority sequence holds the blocks
			}
			v = q // a decode that cannot grow gives way itself
		}
		p.preempt(v)
		if v == q {
			return
		}
	}
	p.add(q, n, false)
}

// victim returns the lowest-priority, most recently started running
// sequence that accept allows and that ranks below q (any, when q is nil),
// holding at least one block.
func (p *planner) victim(accept func(*seq) bool, q *seq) *seq {
	for i := len(p.run) - 1; i >= 0; i-- {
		v := p.run[i]
		if v == q {
			return nil // everything further up ranks above q
		}
		if p.gone[v] || !accept(v) || v.kv == 0 {
			continue
		}
		return v
	}
	return nil
}

func (p *planner) preempt(v *seq) {
	if p.gone == nil {
		p.gone = map[*seq]bool{}
	}
	p.gone[v] = true
	if i, ok := p.at[v]; ok {
		// Undo its chunk planned earlier in this step.
		c := &p.plan.Run[i]
		p.budget += c.N
		p.free += c.Blocks - p.s.blocks(c.Start)
		c.N = 0
		delete(p.at, v)
	}
	held := p.s.blocks(v.kv)
	swap := held <= p.hostFree
	if swap {
		p.hostFree -= held
	}
	p.free += held
	p.plan.Preempt = append(p.plan.Preempt, Preemption{ID: v.id, Swap: swap, Blocks: held})
}

func (p *planner) add(q *seq, n int, resume bool) {
	end := q.kv + n
	blocks := p.s.blocks(end)
	if resume {
		p.free -= blocks
	} else {
		p.free -= blocks - p.s.blocks(q.kv)
	}
	p.budget -= n
	p.at[q] = len(p.plan.Run)
	p.plan.Run = append(p.plan.Run, Chunk{ID: q.id, Start: q.kv, N: n, Logits: end == q.total, Resume: resume, Blocks: blocks})
	q.t.deficit[q.class] -= float64(n)
}

// admit starts waiting requests of classes up to last while the budget,
// the running cap and the blocks allow, highest effective priority first.
func (p *planner) admit(last Class) {
	s := p.s
	bs := s.cfg.BlockSize
	skip := map[*tenant]bool{} // at their concurrency cap this step
	running := len(s.running) - len(p.gone)
	for p.budget > 0 && s.waiting > 0 {
		q := p.pick(skip, last)
		if q == nil {
			return
		}
		if lim := q.t.lim.MaxConcurrent; lim > 0 && q.t.running >= lim {
			skip[q.t] = true
			continue
		}
		// Make room: a running slot, then blocks, taking them from
		// strictly lower classes only.
		lower := func(v *seq) bool { return v.class > q.class }
		for running >= s.cfg.MaxRunning {
			v := p.victim(lower, nil)
			if v == nil {
				return
			}
			p.preempt(v)
			running--
		}
		pending := q.total - q.kv
		var n int
		resume := q.swapped
		for {
			if resume {
				// Swapped KV comes back whole, plus room for the
				// pending tokens.
				n = min(pending, p.budget)
				if s.blocks(q.kv+n) <= p.free {
					break
				}
			} else {
				n = min(pending, p.budget, p.free*bs)
				if n > 0 {
					break
				}
			}
			v := p.victim(lower, nil)
			if v == nil {
				// Head-of-line: nothing behind it may overtake it.
				return
			}
			p.preempt(v)
			running--
		}
		p.take(q)
		running++
		p.add(q, n, resume)
	}
}

// pick chooses the next waiting request of classes up to last: the class
// whose oldest eligible request has the best aged rank, then that class's
// deficit round robin.
func (p *planner) pick(skip map[*tenant]bool, last Class) *seq {
	s := p.s
	ok := func(t *tenant) bool { return !skip[t] }
	best, bestRank := Class(-1), 0.0
	for _, c := range Classes[:last+1] {
		var oldest time.Time
		found := false
		for _, t := range s.rings[c].ts {
			if !ok(t) || len(t.queue[c]) == 0 {
				continue
			}
			if a := t.queue[c][0].arrived; !found || a.Before(oldest) {
				oldest, found = a, true
			}
		}
		if !found {
			continue
		}
		rank := float64(c) - float64(p.now.Sub(oldest))/float64(s.cfg.AgingAfter)
		if best < 0 || rank < bestRank {
			best, bestRank = c, rank
		}
	}
	if best < 0 {
		return nil
	}
	t := s.rings[best].next(best, s.cfg.Quantum, ok)
	if t == nil {
		return nil
	}
	return t.queue[best][0]
}

// take moves a waiting sequence to running.
func (p *planner) take(q *seq) {
	s := p.s
	s.unqueue(q)
	q.running = true
	q.t.running++
	if q.started.IsZero() {
		q.started = p.now
	}
	s.running = append(s.running, q)
	p.admitted = append(p.admitted, q)
}

// commit applies the plan to the scheduler's state and returns it.
func (p *planner) commit() Plan {
	s := p.s
	for _, pr := range p.plan.Preempt {
		v := s.seqs[pr.ID]
		s.stop(v)
		v.preempt++
		v.swapped = pr.Swap
		if !pr.Swap {
			v.kv = 0
		}
		s.push(v, true)
	}
	run := p.plan.Run[:0]
	for _, c := range p.plan.Run {
		if c.N == 0 {
			continue
		}
		q := s.seqs[c.ID]
		q.kv = c.Start + c.N
		q.swapped = false
		run = append(run, c)
	}
	p.plan.Run = run
	return p.plan
}

func compareStr(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
