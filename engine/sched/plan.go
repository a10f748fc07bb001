package sched

import (
	"cmp"
	"math"
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
	s.steps++
	p := planner{s: s, now: now, budget: r.Tokens, free: r.FreeBlocks, hostFree: r.FreeHostBlocks, cache: r.Cache, at: map[*seq]int{}}
	run := slices.Clone(s.running)
	// Priority order; the last entry is the preemption victim. Aging
	// counts here too: a sequence that waited its way up a class is not
	// the victim of a fresher request of that class.
	lv := map[*seq]Class{}
	for _, q := range run {
		lv[q] = s.level(q, now)
	}
	slices.SortFunc(run, func(a, b *seq) int {
		if lv[a] != lv[b] {
			return int(lv[a] - lv[b])
		}
		if c := a.started.Compare(b.started); c != 0 {
			return c
		}
		return compareStr(a.id, b.id)
	})
	p.run, p.lv = run, lv
	p.slotBound = len(run) >= s.cfg.MaxRunning
	target := r.Target
	if target > r.Tokens {
		target = 0
	}
	if n := p.weightedCap(target, r.Efficient); n > 0 {
		p.budget, p.share = min(n, p.budget), true
	} else {
		s.carry = 0
	}
	if r.InteractiveFirst {
		p.runAll(func(q *seq) bool { return lv[q] == Interactive })
		p.admit(Interactive)
	}
	p.runAll(func(*seq) bool { return true })
	p.admit(numClasses - 1)
	return p.commit()
}

// weightedCap is the token budget of a saturated step, or 0 when the step
// is not saturated. It is saturated when the running sequences' pending
// tokens belong to more than one tenant and do not fit target tokens (the
// engine is time-bound), or fill at least an efficient step (efficient
// tokens: the machine, not the demand, bounds throughput). Weights share
// a class among its tenants; classes go by priority. So the budget is the
// pending tokens of the classes above the first class whose work belongs
// to more than one tenant, plus the most tokens in which every tenant of
// that class can still take its weighted share (see Resources.Efficient);
// never fewer than efficient and never more than target. A fractional cap
// is carried to the next step. When no class has more than one tenant, a
// time-bound step holds the target and is shared as before.
//
// Capping a time-bound step at the weighted share too, not only at the
// target, is what makes weights hold when a heavy tenant's running work
// is less than its share of the target: otherwise the light tenant takes
// the rest of every step and its share follows the target, not its weight.
// Taking it over one class only is what keeps a lone batch request under
// an interactive flood from shrinking every step to two tokens: its
// tenant's weight counts against its own class, not the flood's.
func (p *planner) weightedCap(target, efficient int) int {
	// Tenants in run order, so that the sums do not depend on map order.
	// Each tenant's pending tokens per class sit in its scratch fields,
	// stamped with this call, so a step allocates nothing here.
	s := p.s
	s.mark++
	var tenants [numClasses][]*tenant
	for cl := range tenants {
		tenants[cl] = s.capTenants[cl][:0]
	}
	var classDemand [numClasses]int
	seen := 0
	demand := 0
	for _, q := range p.run {
		if d := q.total - q.kv; d > 0 {
			t := q.t
			if t.pendMark[q.class] != s.mark {
				t.pendMark[q.class], t.pend[q.class] = s.mark, 0
				tenants[q.class] = append(tenants[q.class], t)
			}
			if t.seenMark != s.mark {
				t.seenMark = s.mark
				seen++
			}
			t.pend[q.class] += d
			classDemand[q.class] += d
			demand += d
		}
	}
	s.capTenants = tenants
	timeBound := target > 0 && demand > target
	if seen < 2 || !timeBound && (efficient <= 0 || demand < efficient) {
		return 0
	}
	above, c := 0, math.Inf(1)
	for cl := range numClasses {
		ts := tenants[cl]
		if len(ts) < 2 {
			above += classDemand[cl]
			continue
		}
		w := 0.0
		for _, t := range ts {
			w += t.lim.Weight
		}
		for _, t := range ts {
			c = math.Min(c, float64(t.pend[cl])*w/t.lim.Weight)
		}
		break
	}
	if math.IsInf(c, 1) || timeBound && efficient <= 0 {
		// No class is shared among tenants, or there is no cost model
		// to tell what a shorter step costs: a time-bound step holds
		// the target, and otherwise nothing is held back.
		p.s.carry = 0
		if timeBound {
			return target
		}
		return 0
	}
	c += float64(above) + p.s.carry
	n := math.Floor(c)
	p.s.carry = c - n
	switch {
	case int(n) < efficient:
		p.s.carry = 0
		n = float64(efficient)
	case timeBound && int(n) > target:
		p.s.carry = 0
		n = float64(target)
	}
	if timeBound {
		return min(int(n), target)
	}
	return int(n)
}

// runAll plans the running sequences that accept allows: decodes first,
// then prefill chunks, each in priority order. In a saturated step whose
// running work does not fit, the tokens are shared by weight instead (see
// fair); one token is kept for admissions when requests wait, so new
// requests keep moving.
func (p *planner) runAll(accept func(*seq) bool) {
	var cands []*seq
	demand := 0
	for _, q := range p.run {
		pending := q.total - q.kv
		if _, planned := p.at[q]; planned || p.gone[q] || !accept(q) || pending <= 0 {
			continue
		}
		cands = append(cands, q)
		demand += pending
	}
	if p.share {
		room := p.budget
		if p.s.waiting > 0 && room > 1 {
			room--
		}
		if demand > room {
			alloc := p.fair(cands, room)
			for _, decode := range [2]bool{true, false} {
				for _, q := range cands {
					pending := q.total - q.kv
					if n := alloc[q]; n > 0 && (pending == 1) == decode && !p.gone[q] && p.budget > 0 {
						p.runChunk(q, n, decode)
					}
				}
			}
			return
		}
	}
	for _, decode := range [2]bool{true, false} {
		for _, q := range cands {
			if p.budget == 0 {
				break
			}
			pending := q.total - q.kv
			if _, planned := p.at[q]; planned || p.gone[q] || (pending == 1) != decode {
				continue
			}
			p.runChunk(q, pending, decode)
		}
	}
}

// fair shares n tokens among the running sequences cands (in priority
// order), whose pending tokens come to more than n: the levels in order,
// and inside the level that does not fit whole, one token at a time to the
// tenant with the least tokens served per weight. A tenant spends its
// tokens on its decodes first (the sequence that ran least recently
// first), then on its prefills in priority order. A tenant back from idle
// is first brought to within one Quantum of the others, so it cannot bank
// its idle time. It returns the tokens each sequence gets.
func (p *planner) fair(cands []*seq, n int) map[*seq]int {
	alloc := map[*seq]int{}
	for lvl := Interactive; lvl < numClasses && n > 0; lvl++ {
		var group []*seq
		need := 0
		for _, q := range cands {
			if p.lv[q] == lvl {
				group = append(group, q)
				need += q.total - q.kv
			}
		}
		if need <= n {
			for _, q := range group {
				alloc[q] = q.total - q.kv
			}
			n -= need
			continue
		}
		var ts []*tenant
		per := map[*tenant][]*seq{}
		for _, q := range group {
			if per[q.t] == nil {
				ts = append(ts, q.t)
			}
			per[q.t] = append(per[q.t], q)
		}
		slices.SortFunc(ts, func(a, b *tenant) int { return compareStr(a.name, b.name) })
		lead := math.Inf(-1)
		for _, t := range ts {
			lead = math.Max(lead, t.vt)
		}
		vt := make([]float64, len(ts))
		for i, t := range ts {
			t.vt = math.Max(t.vt, lead-float64(p.s.cfg.Quantum)/t.lim.Weight)
			vt[i] = t.vt
			slices.SortStableFunc(per[t], func(a, b *seq) int {
				da, db := a.total-a.kv == 1, b.total-b.kv == 1
				switch {
				case da != db && da:
					return -1
				case da != db:
					return 1
				case da:
					return cmp.Compare(a.lastRun, b.lastRun)
				}
				return 0
			})
		}
		for ; n > 0; n-- {
			best := -1
			for i, t := range ts {
				if len(per[t]) > 0 && (best < 0 || vt[i] < vt[best]) {
					best = i
				}
			}
			if best < 0 {
				break
			}
			t := ts[best]
			q := per[t][0]
			alloc[q]++
			if alloc[q] == q.total-q.kv {
				per[t] = per[t][1:]
			}
			vt[best] += 1 / t.lim.Weight
		}
		break
	}
	return alloc
}

type planner struct {
	s                      *Scheduler
	now                    time.Time
	budget, free, hostFree int
	cache                  PrefixCache    // nil: no prefix cache
	share                  bool           // the step is saturated: decodes are shared by weight
	slotBound              bool           // every running slot was taken at the start of the step
	run                    []*seq         // running at the start of the step, priority order
	lv                     map[*seq]Class // the level of each of run
	plan                   Plan
	at                     map[*seq]int // index of a sequence's chunk in plan.Run
	gone                   map[*seq]bool
	admitted               []*seq
}

// runChunk plans up to pending tokens of a running sequence, preempting
// lower-priority sequences (or, for a decode, itself) when blocks run out.
func (p *planner) runChunk(q *seq, pending int, decode bool) {
	bs := p.s.cfg.BlockSize
	n := min(pending, p.budget)
	held := p.s.blocks(q.kv)
	for {
		need := p.s.blocks(q.kv+n) - held
		if need <= p.free {
			break
		}
		if !decode {
			// A prefill chunk may shrink to what fits.
			if fit := (held+p.free)*bs - q.kv; fit > 0 {
				n = fit
				break
			}
		}
		v := p.victim(func(v *seq) bool { return v != q }, q)
		if v == nil {
			if !decode {
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
	q.t.vt += float64(n) / q.t.lim.Weight
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
		// strictly lower classes only, and among those only from
		// sequences that have not aged to q's level: an aged sequence
		// keeps what it waited for. A request that has aged into a
		// higher level may also take them from that level's own
		// sequences (not aged ones), so its wait is bounded by the
		// aging even when no slot frees.
		ql := s.level(q, p.now)
		aged := ql < q.class
		lower := func(v *seq) bool {
			return (v.class > q.class && p.lv[v] > ql) || (aged && p.lv[v] == v.class && p.lv[v] >= ql)
		}
		for running >= s.cfg.MaxRunning {
			v := p.victim(lower, nil)
			if v == nil {
				return
			}
			p.preempt(v)
			running--
		}
		resume := q.swapped
		start, claim := q.kv, 0
		if !resume && q.kv == 0 && p.cache != nil {
			// The budget pays for computed tokens only: what the
			// prefix cache holds costs no step time, only the
			// blocks it claims.
			start, claim = p.cache.Cached(q.id)
			start = max(min(start, q.total-1), 0)
			if claim < 0 || claim >= p.free {
				// Never wait for room the match itself would
				// free: planned from the start, the lookup
				// fits what it can (as without the hint).
				start, claim = 0, 0
			}
		}
		pending := q.total - start
		var n int
		for {
			if resume {
				// Swapped KV comes back whole, plus room for the
				// pending tokens.
				n = min(pending, p.budget)
				if s.blocks(q.kv+n) <= p.free {
					break
				}
			} else {
				n = min(pending, p.budget, (p.free-claim)*bs)
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
		q.kv = start
		p.free -= claim
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
	for _, c := range Classes {
		rank, found := 0.0, false
		for _, t := range s.rings[c].ts {
			if !ok(t) || len(t.queue[c]) == 0 {
				continue
			}
			if r := s.rank(t.queue[c][0], p.now); !found || r < rank {
				rank, found = r, true
			}
		}
		// A class past last takes part once its oldest request has aged
		// into last: an aged request is not held back by a step that
		// serves the higher class first.
		if !found || (c > last && rank > float64(last)) {
			continue
		}
		// On a tie the lower class wins: its request aged to this rank.
		if best < 0 || rank <= bestRank {
			best, bestRank = c, rank
		}
	}
	if best < 0 {
		return nil
	}
	if p.share || p.slotBound {
		// A saturated step shares tokens by weight among running
		// sequences, and one whose running slots are all taken runs every
		// running sequence's decode: either way what a tenant needs is
		// running sequences in proportion to its weight, so the slot goes
		// to the tenant with the fewest per weight.
		var pick *tenant
		for _, t := range s.rings[best].ts {
			if ok(t) && len(t.queue[best]) > 0 && (pick == nil || float64(t.running)/t.lim.Weight < float64(pick.running)/pick.lim.Weight) {
				pick = t
			}
		}
		return pick.queue[best][0]
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
	q.stopWaiting(p.now)
	p.lv[q] = s.level(q, p.now)
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
		if v.since.IsZero() {
			v.since = p.now
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
		q.lastRun = s.steps
		q.stopWaiting(p.now)
		run = append(run, c)
	}
	p.plan.Run = run
	s.ageQueued(p.now)
	// A running sequence with work the step left out waits, and ages,
	// like a queued one, while its whole class is left out. A class that
	// ran is sharing by weight, which is no starvation, whether or not
	// this sequence's tenant got a token in this step: a light tenant's
	// share can be under a token a step. (Nor is it starvation when a
	// sequence of its class that had aged ran first.)
	ran := [numClasses]bool{}
	for _, c := range run {
		ran[s.seqs[c.ID].class] = true
	}
	for _, q := range s.running {
		switch {
		case q.lastRun == s.steps:
		case q.total > q.kv && !ran[q.class]:
			if q.since.IsZero() {
				q.since = p.now
			}
		default:
			q.stopWaiting(p.now)
		}
	}
	return p.plan
}

// ageQueued counts the time since the last step towards the age of each
// waiting request whose tenant has no sequence of its class running, and
// drops it for the others. A request that waits while its tenant runs
// sequences of its class waits on its own tenant's share: that is the
// weights at work, not starvation, and were it to age there it would
// overtake the share it waits on. A light tenant's requests wait longer
// than a heavy one's because of its weight; aged, they were served first
// and, with every running slot taken, preempted the heavy tenant's
// sequences, so the weights no longer governed. Whether the tenant ran in
// the step is not the test: a light tenant's share can be under a token a
// step. If its running sequences are themselves starved, they age (see
// commit), are served, and end; then its queue ages. A request whose
// tenant runs nothing of its class (a batch request under an interactive
// flood, a tenant whose every request waits) ages as before.
func (s *Scheduler) ageQueued(now time.Time) {
	s.mark++
	for _, q := range s.running {
		q.t.servedMark[q.class] = s.mark
	}
	for _, t := range s.tenants {
		for c := range t.queue {
			for _, q := range t.queue[c] {
				if t.servedMark[c] != s.mark {
					q.waited += now.Sub(q.since)
				}
				q.since = now
			}
		}
	}
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
