package prefixcache

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/specgate/specgate/kernels"
)

var (
	// ErrNoTenant means a Namespace has an empty Tenant: the empty name is
	// the shared namespace and nobody may write to it by accident.
	ErrNoTenant = errors.New("prefixcache: empty tenant")
	// ErrShortTable means Insert got fewer blocks than the tokens' full
	// blocks.
	ErrShortTable = errors.New("prefixcache: block table shorter than tokens")
	// ErrBadConfig means New got pools, caches or options that do not fit
	// together.
	ErrBadConfig = errors.New("prefixcache: bad configuration")
)

// Namespace says whose cache a call reads and writes.
//
// A tenant's blocks are private: another tenant's Lookup never matches
// them, so cache timing cannot reveal one tenant's prompts to another. The
// only exception is the shared namespace: the leading blocks a tenant marks
// public on Insert (a common system prompt, say) are cached once for every
// tenant, and any tenant's private blocks may continue a shared chain.
type Namespace struct {
	// Tenant names the private namespace; it must not be empty.
	Tenant string
	// Session, when not empty, names the conversation. If the engine has
	// marked it live with SetSessionLive, the chain a Lookup or Insert
	// touches becomes the session's last prefix, kept on the device in
	// preference to others.
	Session string
	// Public is how many leading tokens Insert puts in the shared
	// namespace, rounded down to whole blocks; zero keeps everything
	// private. Lookup ignores it: it always reads the shared namespace and
	// the tenant's own.
	Public int
}

// Options configure a Cache. The zero value picks defaults.
type Options struct {
	// BlockSize is the number of tokens per block. Zero means the device
	// cache's BlockSize; anything else must equal it.
	BlockSize int
	// TenantCap is the most blocks (trie nodes, device and host together)
	// one namespace may keep cached, so that one tenant cannot evict
	// everybody else's prefixes; the shared namespace has the same cap.
	// At the cap, Insert evicts the tenant's own least recently used
	// blocks, and caches no more when none can go. Zero means no cap.
	TenantCap int
}

// Match is the result of a Lookup.
type Match struct {
	// Blocks are device block ids covering tokens [0, Tokens) in position
	// order. The caller owns one device-pool reference on each (they
	// pin the blocks: the cache never moves or frees a block somebody
	// else holds) and gives them back with Release or, block by block,
	// with Pool.Unref — one or the other, not both.
	Blocks []int32
	// Tokens is the number of leading tokens the blocks hold:
	// len(Blocks) × BlockSize.
	Tokens int
	// DeviceHits and HostHits split Tokens by the tier each block was
	// found in; host blocks were promoted (copied to the device) before
	// Lookup returned.
	DeviceHits, HostHits int
}

// node is one cached full block: its tokens (in key), where its KV lives,
// and its place in the trie.
type node struct {
	parent *node
	kids   map[string]*node
	key    string // this node's key in parent.kids: owner + token ids
	owner  string // namespace: a tenant, or "" for shared
	depth  int    // blocks from the root; the root is 0

	tier  Tier
	block int32 // id in the tier's pool; the cache owns one reference

	devKids int    // kids on the device tier
	pins    int    // > 0 while an operation in progress must keep the node
	last    uint64 // LRU stamp: the clock at the last Lookup or Insert through it
	live    int    // live sessions whose last prefix runs through this node
	idle    bool   // on an idle session's last prefix, untouched since: evict first
	idx     int    // index in Cache.nodes
}

// Cache is a radix trie of full KV blocks with LRU eviction over two tiers.
//
// Concurrency: none. The engine's step goroutine makes every call,
// including Stats; a Cache and its pools must not be used from two
// goroutines at once.
//
// Ownership: the cache holds one pool reference on the block of each
// cached node. Lookup hands the caller an extra device reference per
// matched block; Insert takes its own references and leaves the caller's
// alone. Blocks move between tiers only while the cache is their sole
// holder.
type Cache struct {
	b            BlockCopier
	device, host kernels.KVCache
	dpool, hpool *Pool
	bs           int
	tenantCap    int

	root     *node
	nodes    []*node // every node but the root, in no order
	devNode  []*node // device block id → the node caching it
	clock    uint64
	sessions map[string]*node // live session → its last prefix's node (nil: none yet)
	owners   map[string]int   // namespace → cached blocks

	key   []byte  // scratch for child keys
	chain []*node // scratch for Lookup
	st    Stats
}

// BlockCopier moves whole KV blocks between caches: the one op the cache
// needs of a backend (kernels.Backend.CopyBlocks), to demote blocks to the
// host tier and promote them back.
type BlockCopier interface {
	CopyBlocks(dst, src kernels.KVCache, moves []kernels.BlockCopy)
}

// New makes a cache over the device KVCache and its pool and, optionally,
// the host KVCache and its pool (both nil: no host tier, so eviction drops
// blocks). The pools may manage fewer blocks than their caches hold, so an
// engine can keep some of a KVCache for other uses; the caches must share
// Layers, BlockSize, Width and DType because blocks are copied between
// them.
func New(b BlockCopier, device, host kernels.KVCache, dpool, hpool *Pool, o Options) (*Cache, error) {
	if b == nil || device == nil || dpool == nil {
		return nil, fmt.Errorf("%w: nil block copier, device cache or device pool", ErrBadConfig)
	}
	if (host == nil) != (hpool == nil) {
		return nil, fmt.Errorf("%w: host cache and host pool must both be set or both nil", ErrBadConfig)
	}
	if dpool.Tier() != Device {
		return nil, fmt.Errorf("%w: device pool is a %v pool", ErrBadConfig, dpool.Tier())
	}
	ds := device.Spec()
	if o.BlockSize == 0 {
		o.BlockSize = ds.BlockSize
	}
	if o.BlockSize <= 0 || o.BlockSize != ds.BlockSize {
		return nil, fmt.Errorf("%w: block size %d, device cache has %d", ErrBadConfig, o.BlockSize, ds.BlockSize)
	}
	if o.TenantCap < 0 {
		return nil, fmt.Errorf("%w: negative tenant cap %d", ErrBadConfig, o.TenantCap)
	}
	if dpool.Cap() > ds.Blocks {
		return nil, fmt.Errorf("%w: device pool of %d blocks over a cache of %d", ErrBadConfig, dpool.Cap(), ds.Blocks)
	}
	if host != nil {
		hs := host.Spec()
		if hpool.Tier() != Host {
			return nil, fmt.Errorf("%w: host pool is a %v pool", ErrBadConfig, hpool.Tier())
		}
		if hs.Layers != ds.Layers || hs.BlockSize != ds.BlockSize || hs.Width != ds.Width || hs.DType != ds.DType {
			return nil, fmt.Errorf("%w: host cache %+v does not match device cache %+v", ErrBadConfig, hs, ds)
		}
		if hpool.Cap() > hs.Blocks {
			return nil, fmt.Errorf("%w: host pool of %d blocks over a cache of %d", ErrBadConfig, hpool.Cap(), hs.Blocks)
		}
	} else {
		// An empty pool stands in, so the code below needs no nil checks.
		hpool = NewPool(Host, 0)
	}
	c := &Cache{
		b: b, device: device, host: host, dpool: dpool, hpool: hpool,
		bs: o.BlockSize, tenantCap: o.TenantCap,
		root:     &node{kids: map[string]*node{}, tier: Device, block: -1},
		devNode:  make([]*node, dpool.Cap()),
		sessions: map[string]*node{},
		owners:   map[string]int{},
	}
	c.st.Tenants = map[string]TenantStats{}
	return c, nil
}

// BlockSize returns the number of tokens per block.
func (c *Cache) BlockSize() int { return c.bs }

// childKey builds in c.key the key of the child block holding toks in
// namespace owner: the owner's length and name, then the token ids. The
// owner is part of the key so that tenants' chains never merge.
func (c *Cache) childKey(owner string, toks []int32) []byte {
	k := binary.AppendUvarint(c.key[:0], uint64(len(owner)))
	k = append(k, owner...)
	for _, t := range toks {
		k = binary.LittleEndian.AppendUint32(k, uint32(t))
	}
	c.key = k
	return k
}

func (c *Cache) child(n *node, owner string, toks []int32) *node {
	if len(n.kids) == 0 {
		return nil
	}
	return n.kids[string(c.childKey(owner, toks))]
}

func (c *Cache) blockToks(tokens []int32, i int) []int32 {
	return tokens[i*c.bs : (i+1)*c.bs]
}

// Lookup finds the longest cached chain of full blocks that prefixes
// tokens in the shared namespace and ns.Tenant's, promotes its host blocks
// to the device (allocating device blocks, evicting others when needed),
// and returns it with one device reference per block for the caller.
//
// The match never covers the last token: the engine must compute at least
// one token to get logits, and that token's KV slot must be in a block the
// sequence owns alone. So at most (len(tokens)−1)/BlockSize blocks match.
// When the device has no room to promote every host block, the match
// stops before the first one that did not fit.
//
// An empty match is not an error; the only error is an empty tenant.
func (c *Cache) Lookup(ns Namespace, tokens []int32) (Match, error) {
	if ns.Tenant == "" {
		return Match{}, ErrNoTenant
	}
	c.clock++
	full := 0
	if len(tokens) > 0 {
		full = (len(tokens) - 1) / c.bs
	}
	chain := c.longest(ns.Tenant, tokens, full)

	// Pin the chain so that the evictions promotion may need leave it
	// alone.
	hostN := 0
	for _, n := range chain {
		n.pins++
		if n.tier == Host {
			hostN++
		}
	}
	promoted := 0
	if hostN > 0 {
		keep, moved := c.promote(chain)
		promoted = moved
		for _, n := range chain[keep:] {
			n.pins--
		}
		chain = chain[:keep]
	}
	m := Match{Blocks: make([]int32, len(chain)), Tokens: len(chain) * c.bs}
	for i, n := range chain {
		n.pins--
		// Cannot fail: every chain node is on the device and cached.
		_ = c.dpool.Ref(n.block)
		m.Blocks[i] = n.block
	}
	m.HostHits = promoted * c.bs
	m.DeviceHits = m.Tokens - m.HostHits
	c.touch(chain)
	if len(chain) > 0 {
		c.setLeaf(ns.Session, chain[len(chain)-1])
	}

	c.st.Lookups++
	c.st.DeviceHitTokens += int64(m.DeviceHits)
	c.st.HostHitTokens += int64(m.HostHits)
	c.st.MissTokens += int64(len(tokens) - m.Tokens)
	ts := c.st.Tenants[ns.Tenant]
	ts.DeviceHitTokens += int64(m.DeviceHits)
	ts.HostHitTokens += int64(m.HostHits)
	ts.MissTokens += int64(len(tokens) - m.Tokens)
	c.st.Tenants[ns.Tenant] = ts
	return m, nil
}

// Peek returns how many leading tokens of tokens a Lookup in ns would
// match now (whole blocks, never the last token), counting host blocks as
// if their promotion succeeds, and how many device blocks that Lookup
// would take from those nobody holds: a free one for each host block, and
// each device block only the cache holds (it stops being reclaimable). It
// pins, promotes, touches and counts nothing, so a caller may ask about
// requests it may not start: the scheduler budgets a waiting request's
// prefill by it.
func (c *Cache) Peek(ns Namespace, tokens []int32) (matched, claim int) {
	if ns.Tenant == "" || len(tokens) == 0 {
		return 0, 0
	}
	chain := c.longest(ns.Tenant, tokens, (len(tokens)-1)/c.bs)
	for _, n := range chain {
		if n.tier == Host || c.dpool.Refs(n.block) == 1 {
			claim++
		}
	}
	return len(chain) * c.bs, claim
}

// longest returns (in c.chain) the longest chain of at most full blocks
// matching tokens: some blocks of the shared namespace from the root, then
// the tenant's private blocks. Private blocks may continue any shared
// node, so it tries each shared depth as the switch point.
func (c *Cache) longest(tenant string, tokens []int32, full int) []*node {
	var shared []*node
	n := c.root
	for i := 0; i < full; i++ {
		k := c.child(n, "", c.blockToks(tokens, i))
		if k == nil {
			break
		}
		shared = append(shared, k)
		n = k
	}
	best, bestJ := -1, 0
	var bestTail *node
	for j := len(shared); j >= 0; j-- {
		if j+(full-j) <= best {
			break // cannot beat what we have
		}
		start := c.root
		if j > 0 {
			start = shared[j-1]
		}
		depth, tail := j, start
		for depth < full {
			k := c.child(tail, tenant, c.blockToks(tokens, depth))
			if k == nil {
				break
			}
			tail = k
			depth++
		}
		if depth > best {
			best, bestJ, bestTail = depth, j, tail
		}
	}
	chain := c.chain[:0]
	chain = append(chain, shared[:bestJ]...)
	// Walk the private part back from its tail.
	if best > bestJ {
		chain = chain[:best]
		for i, k := best-1, bestTail; i >= bestJ; i, k = i-1, k.parent {
			chain[i] = k
		}
	}
	c.chain = chain
	return chain
}

// promote copies the chain's host blocks to the device in one CopyBlocks
// call. It returns how many leading chain nodes are now on the device
// (all of them unless the device ran out) and how many it moved.
func (c *Cache) promote(chain []*node) (keep, moved int) {
	need := 0
	for _, n := range chain {
		if n.tier == Host {
			need++
		}
	}
	if short := need - c.dpool.Free(); short > 0 {
		c.EvictDevice(short)
	}
	var moves []kernels.BlockCopy
	keep = len(chain)
	for i, n := range chain {
		if n.tier != Host {
			continue
		}
		db, err := c.dpool.Alloc(1)
		if err != nil {
			keep = i
			break
		}
		moves = append(moves, kernels.BlockCopy{Src: n.block, Dst: db[0]})
		c.retier(n, Device, db[0])
	}
	if len(moves) > 0 {
		c.b.CopyBlocks(c.device, c.host, moves)
		for _, mv := range moves {
			_ = c.hpool.Unref(mv.Src)
		}
	}
	c.st.Promotions += int64(len(moves))
	return keep, len(moves)
}

// retier moves n's bookkeeping to block b of tier t; the caller moves the
// bytes and the old block's reference.
func (c *Cache) retier(n *node, t Tier, b int32) {
	if n.tier == Device {
		c.devNode[n.block] = nil
		n.parent.devKids--
	}
	n.tier, n.block = t, b
	if t == Device {
		c.devNode[b] = n
		n.parent.devKids++
	}
	c.countTier(n.owner, n.tier, 0)
}

// Release gives back the references of a Lookup's match and empties it, so
// a second Release is harmless. The blocks stay cached.
func (c *Cache) Release(m *Match) {
	if m == nil {
		return
	}
	for _, b := range m.Blocks {
		_ = c.dpool.Unref(b)
	}
	*m = Match{}
}

// Insert caches the full blocks of a sequence: tokens are its tokens from
// position 0 (prompt and generated), blocks its device block table, of
// which the first len(tokens)/BlockSize entries must hold those tokens'
// KV. Nothing is copied: a new node takes its own reference on the
// caller's block. The caller keeps its references, and drops them as
// usual when the sequence ends, so Insert may run mid-sequence.
//
// A block whose tokens are already cached is not taken: the cached one is
// kept and the caller's duplicate returns to the free list when the caller
// drops it. A cached block that lives only on the host is replaced by the
// caller's device block (a free promotion). The partial last block is never
// cached.
//
// It returns how many of the sequence's full blocks are cached after the
// call (fewer than all when the tenant cap stops it). Errors (an empty
// tenant, a short table, a block that is not allocated) change nothing.
func (c *Cache) Insert(ns Namespace, tokens []int32, blocks []int32) (int, error) {
	if ns.Tenant == "" {
		return 0, ErrNoTenant
	}
	full := len(tokens) / c.bs
	if len(blocks) < full {
		return 0, fmt.Errorf("%w: %d blocks for %d tokens of %d per block", ErrShortTable, len(blocks), len(tokens), c.bs)
	}
	for _, b := range blocks[:full] {
		if c.dpool.Refs(b) == 0 {
			return 0, fmt.Errorf("%w: insert device block %d", ErrBadBlock, b)
		}
	}
	c.clock++
	pub := min(max(ns.Public, 0)/c.bs, full)
	path := c.chain[:0]
	cur := c.root
	var evs map[string]*evictor // per namespace, built on first need: tenant cap evictions
	for i := range full {
		toks := c.blockToks(tokens, i)
		var k *node
		owner := ns.Tenant
		switch {
		case i < pub && cur.owner == "":
			owner = ""
			if k = c.child(cur, "", toks); k == nil {
				// The tenant cached it privately before marking it
				// public: share that node rather than copy it.
				if k = c.child(cur, ns.Tenant, toks); k != nil {
					c.share(k, toks)
				}
			}
		case cur.owner == "":
			// Still in the shared region (or at the root): a private
			// block may continue it, and an equal shared block is reused
			// as Lookup would have matched it.
			if k = c.child(cur, ns.Tenant, toks); k == nil {
				k = c.child(cur, "", toks)
			}
		default:
			k = c.child(cur, ns.Tenant, toks)
		}
		b := blocks[i]
		switch {
		case k != nil && k.tier == Host:
			if c.devNode[b] != nil {
				k = nil // cached under another chain: a caller's mistake; stop
				break
			}
			_ = c.dpool.Ref(b)
			old := k.block
			c.retier(k, Device, b)
			_ = c.hpool.Unref(old)
			c.st.DedupBlocks++
		case k != nil:
			c.st.DedupBlocks++
		default:
			if c.devNode[b] != nil {
				break // cached under another chain: a caller's mistake; stop
			}
			if !c.makeRoom(owner, &evs) {
				// A full shared namespace still lets the tenant cache
				// the block privately (cur is shared or the root, and
				// has no private child for it: see above).
				if owner != "" || !c.makeRoom(ns.Tenant, &evs) {
					break
				}
				owner = ns.Tenant
			}
			k = c.addNode(cur, owner, toks, b)
		}
		if k == nil {
			break
		}
		k.pins++ // keep the path while tenant-cap evictions run
		path = append(path, k)
		cur = k
	}
	for _, n := range path {
		n.pins--
	}
	c.chain = path
	c.touch(path)
	if len(path) > 0 {
		c.setLeaf(ns.Session, path[len(path)-1])
	}
	return len(path), nil
}

// makeRoom reports whether namespace owner may cache one more block,
// evicting its own least valuable block when it is at the cap. evs keeps
// one eviction pass per namespace for the whole Insert.
func (c *Cache) makeRoom(owner string, evs *map[string]*evictor) bool {
	if c.tenantCap == 0 || c.owners[owner] < c.tenantCap {
		return true
	}
	ev := (*evs)[owner]
	if ev == nil {
		ev = c.newEvictor(func(n *node) bool { return n.owner == owner && c.removable(n) })
		if *evs == nil {
			*evs = map[string]*evictor{}
		}
		(*evs)[owner] = ev
	}
	return ev.run(1, func(n *node) bool { c.remove(n); return true }) == 1
}

// share moves a private node whose parent is shared (or the root) into the
// shared namespace. Its private descendants stay private: a tenant's blocks
// may continue a shared chain. At the shared namespace's cap it stays
// private.
func (c *Cache) share(n *node, toks []int32) {
	if c.tenantCap > 0 && c.owners[""] >= c.tenantCap {
		return
	}
	p := n.parent
	delete(p.kids, n.key)
	n.key = string(c.childKey("", toks))
	p.kids[n.key] = n
	c.countTier(n.owner, n.tier, -1)
	if c.owners[n.owner]--; c.owners[n.owner] == 0 {
		delete(c.owners, n.owner)
	}
	n.owner = ""
	c.owners[""]++
	c.countTier("", n.tier, +1)
}

func (c *Cache) addNode(parent *node, owner string, toks []int32, b int32) *node {
	_ = c.dpool.Ref(b)
	n := &node{
		parent: parent, key: string(c.childKey(owner, toks)), owner: owner,
		depth: parent.depth + 1, tier: Device, block: b, idx: len(c.nodes),
	}
	if parent.kids == nil {
		parent.kids = map[string]*node{}
	}
	parent.kids[n.key] = n
	parent.devKids++
	c.devNode[b] = n
	c.nodes = append(c.nodes, n)
	c.owners[owner]++
	c.countTier(owner, Device, +1)
	c.st.InsertedBlocks++
	return n
}

// remove drops a childless node from the trie and frees its block.
func (c *Cache) remove(n *node) {
	if n.live > 0 {
		// n is the last prefix of some live sessions: their last prefix
		// becomes the parent (whose live count already includes them).
		up := n.parent
		if up == c.root {
			up = nil
		}
		for s, leaf := range c.sessions {
			if leaf == n {
				c.sessions[s] = up
			}
		}
	}
	delete(n.parent.kids, n.key)
	if n.tier == Device {
		n.parent.devKids--
		c.devNode[n.block] = nil
		_ = c.dpool.Unref(n.block)
	} else {
		_ = c.hpool.Unref(n.block)
	}
	c.countTier(n.owner, n.tier, -1)
	last := c.nodes[len(c.nodes)-1]
	last.idx = n.idx
	c.nodes[n.idx] = last
	c.nodes = c.nodes[:len(c.nodes)-1]
	if c.owners[n.owner]--; c.owners[n.owner] == 0 {
		delete(c.owners, n.owner)
	}
	n.parent, n.kids = nil, nil
	c.st.Evictions++
}

// countTier keeps the per-tier and per-namespace block counts. d is +1 for
// a new block, -1 for a removed one, 0 for a tier move (n now in tier t).
func (c *Cache) countTier(owner string, t Tier, d int) {
	ts := c.st.Tenants[owner]
	add := func(t Tier, d int) {
		if t == Device {
			c.st.DeviceBlocks += d
			ts.DeviceBlocks += d
		} else {
			c.st.HostBlocks += d
			ts.HostBlocks += d
		}
	}
	if d == 0 {
		add(t, +1)
		add(1-t, -1)
	} else {
		add(t, d)
	}
	c.st.Tenants[owner] = ts
}

// touch stamps the chain as just used and clears its idle marks.
func (c *Cache) touch(chain []*node) {
	for _, n := range chain {
		n.last = c.clock
		n.idle = false
	}
}

// SetSessionLive tells the cache whether a conversation's connection is
// live. While it is, the last prefix its Lookups and Inserts touched stays
// on the device in preference to others' (it is evicted last). When it goes
// idle that prefix is evicted first, until something touches it again, and
// the cache forgets the session. Unknown sessions going idle are ignored.
func (c *Cache) SetSessionLive(session string, live bool) {
	if session == "" {
		return
	}
	leaf, known := c.sessions[session]
	if live {
		if !known {
			c.sessions[session] = nil
		}
		return
	}
	if !known {
		return
	}
	for n := leaf; n != nil && n != c.root; n = n.parent {
		n.live--
		n.idle = true
	}
	delete(c.sessions, session)
}

// setLeaf makes n the last prefix of a live session.
func (c *Cache) setLeaf(session string, n *node) {
	old, live := c.sessions[session]
	if session == "" || !live || old == n {
		return
	}
	for k := old; k != nil && k != c.root; k = k.parent {
		k.live--
	}
	for k := n; k != nil && k != c.root; k = k.parent {
		k.live++
	}
	c.sessions[session] = n
}
