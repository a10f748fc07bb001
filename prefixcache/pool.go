// Package prefixcache keeps the KV blocks of finished prompts and replies so
// that a later request with the same prefix skips their prefill.
//
// KV lives in fixed blocks of BlockSize token slots. A Pool hands out the
// block ids of one tier (device or host) and counts references to each
// block; a Cache is a radix trie of full blocks keyed by their token ids,
// with one namespace per tenant plus an explicitly shared one, LRU eviction
// from device to host to gone, and promotion of host blocks back to the
// device on a hit.
//
// Nothing here locks: the engine's single step goroutine drives the pools
// and the cache.
package prefixcache

import (
	"errors"
	"fmt"
)

// Tier is where a block's bytes live.
type Tier int

const (
	// Device is accelerator memory (HBM on a GPU; on the CPU backend a RAM
	// arena with its own capacity). Attention reads only device blocks.
	Device Tier = iota
	// Host is the larger, slower tier (DRAM) that device blocks are
	// demoted to.
	Host
)

func (t Tier) String() string {
	switch t {
	case Device:
		return "device"
	case Host:
		return "host"
	}
	return fmt.Sprintf("tier(%d)", int(t))
}

var (
	// ErrNoBlocks means a pool has fewer free blocks than asked for.
	ErrNoBlocks = errors.New("prefixcache: no free blocks")
	// ErrBadBlock means a block id is out of range or not allocated.
	ErrBadBlock = errors.New("prefixcache: block not allocated")
)

// Pool allocates the blocks of one tier's KVCache: ids 0..Cap()-1, a free
// list, and a reference count per block. A block is free exactly when its
// count is zero.
//
// Every holder of a block (a sequence's block table, a cache node) owns one
// reference; the last Unref returns the block to the free list. A Pool is
// not safe for concurrent use.
type Pool struct {
	tier Tier
	refs []int32 // per block; 0 = free
	free []int32 // stack of free ids; Alloc pops from the end
}

// NewPool returns a pool of blocks ids 0..blocks-1, all free. A negative
// count is treated as zero.
func NewPool(t Tier, blocks int) *Pool {
	blocks = max(blocks, 0)
	p := &Pool{tier: t, refs: make([]int32, blocks), free: make([]int32, blocks)}
	// Stacked in reverse so that a fresh pool hands out 0, 1, 2, ...:
	// tests and traces read better.
	for i := range p.free {
		p.free[i] = int32(blocks - 1 - i)
	}
	return p
}

// Alloc takes n free blocks, each with one reference owned by the caller.
// It is all-or-nothing: when fewer than n are free it returns an error
// wrapping ErrNoBlocks and allocates nothing. n <= 0 returns nil, nil.
func (p *Pool) Alloc(n int) ([]int32, error) {
	if n <= 0 {
		return nil, nil
	}
	if n > len(p.free) {
		return nil, fmt.Errorf("%w: %s pool has %d, want %d", ErrNoBlocks, p.tier, len(p.free), n)
	}
	out := make([]int32, n)
	k := len(p.free)
	for i := range out {
		b := p.free[k-1-i]
		p.refs[b] = 1
		out[i] = b
	}
	p.free = p.free[:k-n]
	return out, nil
}

// Ref adds a reference to an allocated block (a second holder, such as a
// forked sequence or a cache node). It returns an error wrapping
// ErrBadBlock, and changes nothing, when b is out of range or free.
func (p *Pool) Ref(b int32) error {
	if !p.allocated(b) {
		return fmt.Errorf("%w: ref %s block %d", ErrBadBlock, p.tier, b)
	}
	p.refs[b]++
	return nil
}

// Unref drops one reference; the block is free again when the count
// reaches zero. It returns an error wrapping ErrBadBlock, and changes
// nothing, when b is out of range or already free: a double free is caught
// instead of corrupting the free list.
func (p *Pool) Unref(b int32) error {
	if !p.allocated(b) {
		return fmt.Errorf("%w: unref %s block %d", ErrBadBlock, p.tier, b)
	}
	p.refs[b]--
	if p.refs[b] == 0 {
		p.free = append(p.free, b)
	}
	return nil
}

// Refs returns b's reference count (0 when free or out of range).
func (p *Pool) Refs(b int32) int {
	if b < 0 || int(b) >= len(p.refs) {
		return 0
	}
	return int(p.refs[b])
}

func (p *Pool) allocated(b int32) bool {
	return b >= 0 && int(b) < len(p.refs) && p.refs[b] > 0
}

// Free returns the number of free blocks.
func (p *Pool) Free() int { return len(p.free) }

// Used returns the number of allocated blocks.
func (p *Pool) Used() int { return len(p.refs) - len(p.free) }

// Cap returns the number of blocks the pool manages.
func (p *Pool) Cap() int { return len(p.refs) }

// Tier returns the tier the pool's blocks live in.
func (p *Pool) Tier() Tier { return p.tier }

// check verifies that the free list and the counts agree: every id is free
// (count 0, on the list once) or allocated (count > 0, not on the list).
func (p *Pool) check() error {
	seen := make([]bool, len(p.refs))
	for _, b := range p.free {
		if b < 0 || int(b) >= len(p.refs) {
			return fmt.Errorf("%s pool: free list holds out-of-range block %d", p.tier, b)
		}
		if seen[b] {
			return fmt.Errorf("%s pool: block %d on the free list twice", p.tier, b)
		}
		seen[b] = true
		if p.refs[b] != 0 {
			return fmt.Errorf("%s pool: free block %d has %d refs", p.tier, b, p.refs[b])
		}
	}
	for b, r := range p.refs {
		if r < 0 {
			return fmt.Errorf("%s pool: block %d has %d refs", p.tier, b, r)
		}
		if r == 0 && !seen[b] {
			return fmt.Errorf("%s pool: block %d has no refs but is not free", p.tier, b)
		}
	}
	return nil
}
