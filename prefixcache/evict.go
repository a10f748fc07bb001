package prefixcache

import (
	"container/heap"
	"fmt"

	"github.com/specgate/specgate/kernels"
)

// Eviction order. Among the nodes a pass may take, it takes the lowest
// class first, then the least recently used, then the deepest (a chain's
// nodes share a stamp, and its tail is the least valuable part):
//
//	class 0: on an idle session's last prefix, untouched since it went idle
//	class 1: everything else
//	class 2: on a live session's last prefix
func class(n *node) int {
	switch {
	case n.live > 0:
		return 2
	case n.idle:
		return 0
	}
	return 1
}

func before(a, b *node) bool {
	if ca, cb := class(a), class(b); ca != cb {
		return ca < cb
	}
	if a.last != b.last {
		return a.last < b.last
	}
	return a.depth > b.depth
}

// evictor is one eviction pass: a heap of the nodes ok accepts, built by one
// scan, refilled with parents as their children go.
type evictor struct {
	c  *Cache
	ok func(*node) bool
	h  []*node
}

func (c *Cache) newEvictor(ok func(*node) bool) *evictor {
	e := &evictor{c: c, ok: ok}
	for _, n := range c.nodes {
		if ok(n) {
			e.h = append(e.h, n)
		}
	}
	heap.Init(e)
	return e
}

func (e *evictor) Len() int           { return len(e.h) }
func (e *evictor) Less(i, j int) bool { return before(e.h[i], e.h[j]) }
func (e *evictor) Swap(i, j int)      { e.h[i], e.h[j] = e.h[j], e.h[i] }
func (e *evictor) Push(x any)         { e.h = append(e.h, x.(*node)) }
func (e *evictor) Pop() any {
	n := e.h[len(e.h)-1]
	e.h = e.h[:len(e.h)-1]
	return n
}

// run applies act to up to n acceptable nodes in eviction order and
// returns how many it acted on (act reports whether it did).
func (e *evictor) run(n int, act func(*node) bool) int {
	done := 0
	for done < n && len(e.h) > 0 {
		k := heap.Pop(e).(*node)
		if k.parent == nil || !e.ok(k) {
			continue // removed or changed since it was queued
		}
		p := k.parent
		if !act(k) {
			continue
		}
		done++
		// Taking k may make its parent a candidate (its last device
		// child demoted, or its last child removed).
		if p != e.c.root && e.ok(p) {
			heap.Push(e, p)
		}
	}
	return done
}

// demotable: a device node nobody but the cache holds, with no device
// children (so the device part of the trie stays closed towards the root).
func (c *Cache) demotable(n *node) bool {
	return n.tier == Device && n.devKids == 0 && n.pins == 0 && c.dpool.Refs(n.block) == 1
}

// removable: a childless node nobody but the cache holds.
func (c *Cache) removable(n *node) bool {
	return len(n.kids) == 0 && n.pins == 0 && (n.tier == Host || c.dpool.Refs(n.block) == 1)
}

// EvictDevice frees up to n device blocks and returns how many it freed.
// It demotes least valuable blocks to the host (a real copy, one
// CopyBlocks call for the pass), evicting host blocks first to make room,
// and drops a block outright when the host has no room. Blocks that
// somebody holds (a Lookup's match, a running sequence) never move.
func (c *Cache) EvictDevice(n int) int {
	if n <= 0 {
		return 0
	}
	if short := n - c.hpool.Free(); short > 0 && c.hpool.Cap() > 0 {
		c.EvictHost(short)
	}
	var moves []kernels.BlockCopy
	freed := 0
	c.newEvictor(c.demotable).run(n, func(k *node) bool {
		if hb, err := c.hpool.Alloc(1); err == nil {
			moves = append(moves, kernels.BlockCopy{Src: k.block, Dst: hb[0]})
			c.retier(k, Host, hb[0])
			c.st.Demotions++
			return true
		}
		if len(k.kids) == 0 {
			c.remove(k)
			freed++
			return true
		}
		return false // its host children pin it to the trie, and the host is full
	})
	if len(moves) > 0 {
		c.b.CopyBlocks(c.host, c.device, moves)
		// The device blocks are free only once their bytes are copied.
		for _, m := range moves {
			_ = c.dpool.Unref(m.Src)
		}
		freed += len(moves)
	}
	return freed
}

// EvictHost drops up to n least valuable host blocks from the cache and
// returns how many it dropped.
func (c *Cache) EvictHost(n int) int {
	if n <= 0 {
		return 0
	}
	hostLeaf := func(k *node) bool { return k.tier == Host && c.removable(k) }
	return c.newEvictor(hostLeaf).run(n, func(k *node) bool { c.remove(k); return true })
}

// Reserve makes sure the device pool has at least n free blocks, evicting
// cached blocks as EvictDevice does. It returns an error wrapping
// ErrNoBlocks when that is impossible (the rest is held by sequences); the
// engine then preempts a sequence.
func (c *Cache) Reserve(n int) error {
	if short := n - c.dpool.Free(); short > 0 {
		c.EvictDevice(short)
	}
	if free := c.dpool.Free(); free < n {
		return fmt.Errorf("%w: device has %d free after eviction, want %d", ErrNoBlocks, free, n)
	}
	return nil
}
