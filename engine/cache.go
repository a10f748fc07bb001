package engine

import (
	"github.com/specgate/specgate/engine/sched"
	"github.com/specgate/specgate/prefixcache"
)

// How the engine drives the prefix cache (all on the step goroutine):
//
//   - A sequence that starts, or restarts after a preemption, with no KV is
//     looked up with all its known tokens. The match's blocks (one device
//     reference each, now the sequence's) become the head of its block
//     table; the scheduler is told its KV already covers them, and only
//     the rest is prefilled. The match never covers the last token, and it
//     ends on a block boundary, so every token the sequence computes is
//     written to a block it owns alone: shared blocks are never written.
//   - When a sequence gives its blocks up (it finished, was cancelled or
//     preempted) the full blocks of its computed tokens are inserted
//     (the cache takes its own references, dedups, and never takes the
//     partial last block), then the sequence drops its references.
//   - Before allocating, the engine reserves: the cache evicts (demotes to
//     the host tier, or drops) least valuable blocks nobody holds.

// anonymous is the cache namespace of requests without a tenant: the
// empty name is the cache's shared namespace, and no tenant ID has this
// form.
const anonymous = "(anonymous)"

func (e *Engine) namespace(s *sequence) prefixcache.Namespace {
	t := s.req.Tenant
	if t == "" {
		t = anonymous
	}
	return prefixcache.Namespace{Tenant: t, Session: s.req.Session, Public: s.req.SharedPrefix}
}

// allocatable is how many device blocks the engine can get: the free ones
// and the cached ones that no sequence holds (eviction can take every one
// of them, since sequences hold cached blocks only as whole chains from a
// Lookup).
func (e *Engine) allocatable() int {
	n := e.dev.Free()
	if e.cache != nil {
		dev, _ := e.cache.Blocks()
		n += dev - len(e.shared)
	}
	return n
}

// swapRoom is the host room the scheduler may plan swaps into: none with
// the prefix cache, whose host tier it is (preempted blocks go through the
// cache instead).
func (e *Engine) swapRoom() int {
	if e.cache != nil || e.host == nil {
		return 0
	}
	return e.host.Free()
}

// cacheHints answers the scheduler's admissions: how much of a waiting
// request's tokens the prefix cache holds, by a Peek that pins nothing.
type cacheHints struct{ e *Engine }

func (h cacheHints) Cached(id string) (tokens, blocks int) {
	s := h.e.seqs[id]
	if s == nil {
		return 0, 0
	}
	return h.e.peek(s)
}

// peek is how many of s's tokens a lookup would find now, and how many
// allocatable blocks it would take: none when s holds KV already or the
// prefix cache is off.
func (e *Engine) peek(s *sequence) (tokens, blocks int) {
	if e.cache == nil || len(s.table) > 0 || s.kv > 0 {
		return 0, 0
	}
	return e.cache.Peek(e.namespace(s), s.tokens)
}

// hints is what the scheduler asks about cached prompts: nil without the
// prefix cache.
func (e *Engine) hints() sched.PrefixCache {
	if e.cache == nil {
		return nil
	}
	return cacheHints{e}
}

// lookup serves the head of s's tokens from the prefix cache for chunk c,
// planned as [Start, Start+N) of a sequence with no KV (Start: the match
// the scheduler was told of, or 0), and returns the chunk moved to start
// where the match really ends, the slack left, and whether anything was
// found. The moved chunk runs as many tokens as planned unless the blocks
// the match pinned (and promoted) eat more of the device than the slack
// allows: then fewer, maybe none this step. A match shorter than told
// (blocks evicted since) costs progress, never budget.
func (e *Engine) lookup(s *sequence, c sched.Chunk, slack int) (sched.Chunk, int, bool) {
	before := e.allocatable()
	m, err := e.cache.Lookup(e.namespace(s), s.tokens)
	if err != nil {
		// Only an empty tenant fails, and namespace never gives one;
		// were it to, the chunk runs from the start.
		m = prefixcache.Match{}
	}
	e.report.prefixLookup(s.req.Tenant, m.DeviceHits, m.HostHits, len(s.tokens)-m.Tokens)
	e.count.CachedTokens += int64(m.Tokens)
	if !s.looked {
		s.looked = true
		s.cached = min(m.Tokens, s.prompt)
	}
	if m.Tokens == 0 && c.Start == 0 {
		return c, slack, false
	}
	for _, b := range m.Blocks {
		e.shared[b]++
	}
	// Pinned blocks were reclaimable, promoted ones were free: both come
	// out of what the plan counted on (its blocks past Start).
	used := before - e.allocatable()
	held := len(m.Blocks)
	planned := e.planned(c)
	end := min(m.Tokens+c.N, len(s.tokens))
	if room := planned + slack - used; e.blocks(end)-held > room {
		end = m.Tokens + max(room, 0)*e.o.BlockSize
	}
	slack -= used + e.blocks(end) - held - planned
	s.table, s.matched, s.kv = m.Blocks, held, m.Tokens
	s.prefilled = max(s.prefilled, min(m.Tokens, s.prompt))
	if end != c.Start+c.N {
		e.sched.SetKV(s.req.ID, end)
	}
	return sched.Chunk{ID: c.ID, Start: m.Tokens, N: end - m.Tokens, Logits: end == len(s.tokens), Blocks: e.blocks(end)}, slack, m.Tokens > 0
}

// dropKV gives up s's device blocks. With keep, and the prefix cache on,
// the full blocks of its computed tokens are cached first.
func (e *Engine) dropKV(s *sequence, keep bool) {
	// A speculative step may end a sequence on a stop inside its
	// accepted drafts: K/V past its last token is not its own.
	kv := min(s.kv, len(s.tokens))
	if e.cache != nil && keep && kv >= e.o.BlockSize {
		// The only errors are an empty tenant and a table that does not
		// hold the tokens: both bugs, and caching nothing is safe.
		_, _ = e.cache.Insert(e.namespace(s), s.tokens[:kv], s.table)
	}
	for _, b := range s.table[:s.matched] {
		if e.shared[b]--; e.shared[b] <= 0 {
			delete(e.shared, b)
		}
	}
	e.unref(e.dev, s.table)
	s.table, s.matched, s.kv = nil, 0, 0
}

// counters returns a snapshot of the running totals.
func (e *Engine) counters() Counters {
	c := e.count
	c.TokensPerSecond = e.rate.perSecond()
	if e.cache != nil {
		c.Cache = e.cache.Stats()
	}
	return c
}
