package prefixcache

import (
	"fmt"
	"maps"
)

// Stats is a snapshot of the cache's counters and gauges. Counters (the
// int64 fields) only grow; token counts are in tokens, block counts in
// blocks.
type Stats struct {
	// Lookups counts Lookup calls.
	Lookups int64
	// DeviceHitTokens and HostHitTokens count matched prompt tokens by the
	// tier their block was found in; MissTokens counts the rest of the
	// looked-up tokens (including the last token, which never matches).
	DeviceHitTokens, HostHitTokens, MissTokens int64
	// InsertedBlocks counts new cached blocks; DedupBlocks counts inserted
	// blocks that were already cached.
	InsertedBlocks, DedupBlocks int64
	// Promotions (host → device) and Demotions (device → host) count
	// block copies; Evictions counts blocks dropped from the cache.
	Promotions, Demotions, Evictions int64

	// DeviceBlocks and HostBlocks are the blocks cached now, by tier.
	DeviceBlocks, HostBlocks int
	// DevicePinned is how many cached device blocks somebody besides the
	// cache holds (a match, a running sequence): they cannot be evicted.
	DevicePinned int
	// DeviceFree, DeviceUsed, HostFree and HostUsed are the pools' counts;
	// used blocks include those of running sequences, not only cached ones.
	DeviceFree, DeviceUsed, HostFree, HostUsed int
	// Tenants breaks the numbers down by namespace; "" is the shared
	// namespace. Hit and miss tokens are counted for the tenant that
	// looked up, blocks for the namespace that holds them.
	Tenants map[string]TenantStats
}

// TenantStats is one namespace's part of Stats.
type TenantStats struct {
	DeviceBlocks, HostBlocks                   int
	DeviceHitTokens, HostHitTokens, MissTokens int64
}

// Stats returns a snapshot; the caller owns it. It costs a scan of the
// cached blocks (for DevicePinned), so call it per scrape, not per step.
// Like every method it must be called from the goroutine driving the cache.
func (c *Cache) Stats() Stats {
	s := c.st
	s.Tenants = maps.Clone(c.st.Tenants)
	for _, n := range c.nodes {
		if n.tier == Device && c.dpool.Refs(n.block) > 1 {
			s.DevicePinned++
		}
	}
	s.DeviceFree, s.DeviceUsed = c.dpool.Free(), c.dpool.Used()
	s.HostFree, s.HostUsed = c.hpool.Free(), c.hpool.Used()
	return s
}

// Blocks returns how many blocks are cached now on each tier. Unlike Stats
// it costs nothing, so the engine may call it every step (to count the
// device blocks it can reclaim by eviction).
func (c *Cache) Blocks() (device, host int) { return c.st.DeviceBlocks, c.st.HostBlocks }

// check verifies the cache's invariants: the pools are consistent; every
// cached block is owned by exactly one node; every host block is the
// cache's alone; the device part of the trie is closed towards the root;
// the counters (per tier, per namespace, device children, live sessions)
// agree with the trie; and no operation left a pin behind.
func (c *Cache) check() error {
	if err := c.dpool.check(); err != nil {
		return err
	}
	if err := c.hpool.check(); err != nil {
		return err
	}
	if len(c.root.kids) > 0 && c.root.parent != nil {
		return fmt.Errorf("root has a parent")
	}
	var (
		count    int
		dev, hst int
		owners   = map[string]int{}
		perTier  = map[string][2]int{}
		devOwner = map[int32]*node{}
		hostOwn  = map[int32]*node{}
		live     = map[*node]int{}
	)
	for _, leaf := range c.sessions {
		for k := leaf; k != nil && k != c.root; k = k.parent {
			live[k]++
		}
	}
	var walk func(n *node) error
	walk = func(n *node) error {
		devKids := 0
		for key, k := range n.kids {
			count++
			if k.parent != n || k.key != key || k.depth != n.depth+1 {
				return fmt.Errorf("node %q: bad parent link, key or depth", key)
			}
			if n != c.root && n.owner != "" && k.owner != n.owner {
				return fmt.Errorf("node %q of %q under a node of %q", key, k.owner, n.owner)
			}
			if k.pins != 0 {
				return fmt.Errorf("node %q has %d pins left", key, k.pins)
			}
			if c.nodes[k.idx] != k {
				return fmt.Errorf("node %q: bad index %d", key, k.idx)
			}
			owners[k.owner]++
			pt := perTier[k.owner]
			pt[k.tier]++
			perTier[k.owner] = pt
			switch k.tier {
			case Device:
				dev++
				devKids++
				if n != c.root && n.tier != Device {
					return fmt.Errorf("device node %q under a host node", key)
				}
				if other := devOwner[k.block]; other != nil {
					return fmt.Errorf("device block %d cached twice", k.block)
				}
				devOwner[k.block] = k
				if c.devNode[k.block] != k {
					return fmt.Errorf("device block %d: index does not name its node", k.block)
				}
				if c.dpool.Refs(k.block) < 1 {
					return fmt.Errorf("cached device block %d is free", k.block)
				}
			case Host:
				hst++
				if other := hostOwn[k.block]; other != nil {
					return fmt.Errorf("host block %d cached twice", k.block)
				}
				hostOwn[k.block] = k
				if r := c.hpool.Refs(k.block); r != 1 {
					return fmt.Errorf("host block %d has %d refs; want 1", k.block, r)
				}
			default:
				return fmt.Errorf("node %q in tier %v", key, k.tier)
			}
			if k.live != live[k] {
				return fmt.Errorf("node %q: live %d; sessions say %d", key, k.live, live[k])
			}
			if err := walk(k); err != nil {
				return err
			}
		}
		if n.devKids != devKids {
			return fmt.Errorf("node at depth %d: devKids %d; counted %d", n.depth, n.devKids, devKids)
		}
		return nil
	}
	if err := walk(c.root); err != nil {
		return err
	}
	if count != len(c.nodes) {
		return fmt.Errorf("trie has %d nodes; index has %d", count, len(c.nodes))
	}
	for b, n := range c.devNode {
		if n != nil && devOwner[int32(b)] != n {
			return fmt.Errorf("device index names block %d for a node not in the trie", b)
		}
	}
	if hst != c.hpool.Used() {
		return fmt.Errorf("host pool has %d used blocks; trie holds %d", c.hpool.Used(), hst)
	}
	if dev != c.st.DeviceBlocks || hst != c.st.HostBlocks {
		return fmt.Errorf("stats say %d device, %d host blocks; trie holds %d, %d", c.st.DeviceBlocks, c.st.HostBlocks, dev, hst)
	}
	if !maps.Equal(owners, c.owners) {
		return fmt.Errorf("namespace counts %v; trie holds %v", c.owners, owners)
	}
	for o, ts := range c.st.Tenants {
		if pt := perTier[o]; ts.DeviceBlocks != pt[Device] || ts.HostBlocks != pt[Host] {
			return fmt.Errorf("stats for %q say %d device, %d host blocks; trie holds %v", o, ts.DeviceBlocks, ts.HostBlocks, pt)
		}
	}
	if c.tenantCap > 0 {
		for o, n := range owners {
			if n > c.tenantCap {
				return fmt.Errorf("namespace %q holds %d blocks over the cap of %d", o, n, c.tenantCap)
			}
		}
	}
	return nil
}

// checkRefs verifies device-block conservation against the references the
// caller holds (held[b] = how many): every device block is free, or its
// count is exactly the cache's one plus the caller's.
func (c *Cache) checkRefs(held map[int32]int) error {
	for b := range int32(c.dpool.Cap()) {
		want := held[b]
		if c.devNode[b] != nil {
			want++
		}
		if have := c.dpool.Refs(b); have != want {
			return fmt.Errorf("device block %d: have %d refs; want %d (cache %v, caller %d)", b, have, want, c.devNode[b] != nil, held[b])
		}
	}
	return nil
}
