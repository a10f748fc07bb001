package prefixcache

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/specgate/specgate/kernels"
	_ "github.com/specgate/specgate/kernels/cpu"
)

// Test geometry: small blocks so that chains are short to write, a width
// at least the block size so that readSlot can pick one slot with a
// one-hot query.
const (
	tLayers = 2
	tBS     = 4
	tWidth  = 8
)

type rig struct {
	b         kernels.Backend
	dev, host kernels.KVCache
	dp, hp    *Pool
	c         *Cache
}

func setup(tb testing.TB, devBlocks, hostBlocks int, o Options) *rig {
	tb.Helper()
	b, err := kernels.Open("cpu", kernels.Options{Threads: 1})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { b.Close() })
	r := &rig{b: b}
	spec := kernels.KVSpec{Layers: tLayers, BlockSize: tBS, Width: tWidth}
	spec.Blocks = devBlocks
	if r.dev, err = b.NewKV(spec); err != nil {
		tb.Fatal(err)
	}
	r.dp = NewPool(Device, devBlocks)
	if hostBlocks > 0 {
		spec.Blocks = hostBlocks
		if r.host, err = b.NewKV(spec); err != nil {
			tb.Fatal(err)
		}
		r.hp = NewPool(Host, hostBlocks)
	}
	if r.c, err = New(b, r.dev, r.host, r.dp, r.hp, o); err != nil {
		tb.Fatal(err)
	}
	return r
}

// toks returns n token ids base, base+1, ...
func toks(base, n int) []int32 {
	t := make([]int32, n)
	for i := range t {
		t[i] = int32(base + i)
	}
	return t
}

func cat(a, b []int32) []int32 { return append(slices.Clone(a), b...) }

// want is the V value a slot holding token tok has at (layer, col): a
// function of the token only, exact in float32, so any copy of a block can
// be checked against its tokens.
func want(tok int32, layer, col int) float32 {
	return float32(tok)*4 + float32(layer) + float32(col)/8
}

// fill writes the KV of tokens into block (of kv): K is one-hot on the
// slot's offset, so readSlot can pick it out; V is want(...).
func (r *rig) fill(kv kernels.KVCache, block int32, tokens []int32) {
	k := r.b.Alloc(len(tokens), tWidth)
	v := r.b.Alloc(len(tokens), tWidth)
	kf := make([]float32, len(tokens)*tWidth)
	slots := make([]int32, len(tokens))
	for j := range tokens {
		kf[j*tWidth+j] = 30
		slots[j] = block*tBS + int32(j)
	}
	r.b.Upload(k, kf)
	for l := range tLayers {
		vf := make([]float32, len(tokens)*tWidth)
		for j, t := range tokens {
			for col := range tWidth {
				vf[j*tWidth+col] = want(t, l, col)
			}
		}
		r.b.Upload(v, vf)
		r.b.StoreKV(kv, l, k, v, slots)
	}
}

// readSlot returns V of slot j of block in layer l, read back through
// Attention: a query one-hot on j scores that slot 900 and the others 0,
// so the softmax picks it alone.
func (r *rig) readSlot(kv kernels.KVCache, block int32, l, j int) []float32 {
	q := r.b.Alloc(1, tWidth)
	qf := make([]float32, tWidth)
	qf[j] = 30
	r.b.Upload(q, qf)
	out := r.b.Alloc(1, tWidth)
	r.b.Attention(out, q, kv, l, kernels.Attn{Heads: 1, KVHeads: 1, HeadDim: tWidth, Scale: 1,
		Rows: []kernels.AttnRow{{Table: []int32{block}, Len: tBS}}})
	got := make([]float32, tWidth)
	r.b.Download(got, out)
	return got
}

// checkBlock verifies that device block holds the KV of tokens.
func (r *rig) checkBlock(tb testing.TB, block int32, tokens []int32) {
	tb.Helper()
	for l := range tLayers {
		for j, t := range tokens {
			got := r.readSlot(r.dev, block, l, j)
			for col, g := range got {
				if w := want(t, l, col); math.Abs(float64(g-w)) > 1e-3 {
					tb.Fatalf("block %d layer %d slot %d col %d: have %v; want %v", block, l, j, col, g, w)
				}
			}
		}
	}
}

// seq is a sequence as the engine would run it: a block table whose every
// entry carries one reference the sequence owns.
type seq struct {
	ns     Namespace
	tokens []int32
	table  []int32
	m      Match
}

// start looks the prompt up, allocates the rest of its blocks (evicting
// cached blocks when short) and "computes" their KV with fill.
func (r *rig) start(tb testing.TB, ns Namespace, prompt []int32) (*seq, error) {
	tb.Helper()
	m, err := r.c.Lookup(ns, prompt)
	if err != nil {
		return nil, err
	}
	s := &seq{ns: ns, tokens: prompt, m: m, table: slices.Clone(m.Blocks)}
	need := (len(prompt)+tBS-1)/tBS - len(m.Blocks)
	if err := r.c.Reserve(need); err != nil {
		r.c.Release(&s.m)
		return nil, err
	}
	nb, err := r.dp.Alloc(need)
	if err != nil {
		tb.Fatalf("Alloc after Reserve: %v", err)
	}
	s.table = append(s.table, nb...)
	for i := len(m.Blocks); i < len(s.table); i++ {
		r.fill(r.dev, s.table[i], prompt[i*tBS:min(len(prompt), (i+1)*tBS)])
	}
	return s, nil
}

// finish caches the sequence's full blocks and drops its references.
func (r *rig) finish(tb testing.TB, s *seq) int {
	tb.Helper()
	n, err := r.c.Insert(s.ns, s.tokens, s.table)
	if err != nil {
		tb.Fatal(err)
	}
	r.cancel(tb, s)
	return n
}

// cancel drops the sequence's references without caching anything: the
// matched part through Release, the rest block by block.
func (r *rig) cancel(tb testing.TB, s *seq) {
	tb.Helper()
	own := s.table[len(s.m.Blocks):]
	r.c.Release(&s.m)
	for _, b := range own {
		if err := r.dp.Unref(b); err != nil {
			tb.Fatal(err)
		}
	}
	s.table = nil
}

// run starts and finishes one sequence.
func (r *rig) run(tb testing.TB, ns Namespace, prompt []int32) Match {
	tb.Helper()
	s, err := r.start(tb, ns, prompt)
	if err != nil {
		tb.Fatal(err)
	}
	m := s.m
	r.finish(tb, s)
	return m
}

func (r *rig) mustCheck(tb testing.TB) {
	tb.Helper()
	if err := r.c.check(); err != nil {
		tb.Fatal(err)
	}
	if err := r.c.checkRefs(nil); err != nil {
		tb.Fatal(err)
	}
}

// tiers returns the tier of each block of the tenant's private chain that
// prefixes tokens, without touching anything.
func (r *rig) tiers(tenant string, tokens []int32) []Tier {
	var out []Tier
	n := r.c.root
	for i := 0; (i+1)*tBS <= len(tokens); i++ {
		k := r.c.child(n, tenant, tokens[i*tBS:(i+1)*tBS])
		if k == nil {
			break
		}
		out = append(out, k.tier)
		n = k
	}
	return out
}

func TestNew(t *testing.T) {
	b, err := kernels.Open("cpu", kernels.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	kvOf := func(blocks, bs, width int, dt kernels.DType) kernels.KVCache {
		c, err := b.NewKV(kernels.KVSpec{Layers: 1, Blocks: blocks, BlockSize: bs, Width: width, DType: dt})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	kv := func(blocks, bs, width int) kernels.KVCache { return kvOf(blocks, bs, width, kernels.F32) }
	dev, host := kv(8, 4, 8), kv(16, 4, 8)
	tests := []struct {
		name      string
		b         kernels.Backend
		dev, host kernels.KVCache
		dp, hp    *Pool
		o         Options
		ok        bool
	}{
		{"both tiers", b, dev, host, NewPool(Device, 8), NewPool(Host, 16), Options{}, true},
		{"device only", b, dev, nil, NewPool(Device, 8), nil, Options{TenantCap: 3}, true},
		{"pool smaller than cache", b, dev, host, NewPool(Device, 4), NewPool(Host, 2), Options{BlockSize: 4}, true},
		{"nil backend", nil, dev, nil, NewPool(Device, 8), nil, Options{}, false},
		{"nil device pool", b, dev, nil, nil, nil, Options{}, false},
		{"host cache without pool", b, dev, host, NewPool(Device, 8), nil, Options{}, false},
		{"pools swapped", b, dev, host, NewPool(Host, 8), NewPool(Device, 16), Options{}, false},
		{"device pool too big", b, dev, nil, NewPool(Device, 9), nil, Options{}, false},
		{"host pool too big", b, dev, host, NewPool(Device, 8), NewPool(Host, 17), Options{}, false},
		{"block size differs", b, dev, nil, NewPool(Device, 8), nil, Options{BlockSize: 16}, false},
		{"host shape differs", b, dev, kv(16, 4, 16), NewPool(Device, 8), NewPool(Host, 16), Options{}, false},
		{"host type differs", b, dev, kvOf(16, 4, 8, kernels.F16), NewPool(Device, 8), NewPool(Host, 16), Options{}, false},
		{"negative cap", b, dev, nil, NewPool(Device, 8), nil, Options{TenantCap: -1}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := New(tt.b, tt.dev, tt.host, tt.dp, tt.hp, tt.o)
			if have := err == nil; have != tt.ok {
				t.Fatalf("have err %v; want ok %v", err, tt.ok)
			}
			if err != nil && !errors.Is(err, ErrBadConfig) {
				t.Errorf("have %v; want ErrBadConfig", err)
			}
			if c != nil && c.BlockSize() != 4 {
				t.Errorf("BlockSize: have %d; want 4", c.BlockSize())
			}
		})
	}
}

func TestLookupBlockBoundaries(t *testing.T) {
	r := setup(t, 32, 0, Options{})
	a := Namespace{Tenant: "a"}
	base := toks(100, 10)                     // 2 full blocks + 2 tokens
	branch := cat(toks(100, 4), toks(500, 9)) // shares block 0 only
	r.run(t, a, base)
	r.run(t, a, branch)
	r.mustCheck(t)
	if have := len(r.c.nodes); have != 4 {
		t.Fatalf("nodes: have %d; want 4 (2 + 1 shared + 1 + the branch's 2nd block)", have)
	}
	tests := []struct {
		name   string
		prompt []int32
		tokens int
	}{
		{"same prompt: full blocks only", base, 8},
		{"exactly 2 blocks: last token never matches", toks(100, 8), 4},
		{"one past 2 blocks", toks(100, 9), 8},
		{"longer prompt", cat(base, toks(900, 30)), 8},
		{"diverges in block 1: split at the boundary", cat(toks(100, 5), toks(0, 10)), 4},
		{"diverges at the last token of block 1", cat(toks(100, 7), toks(0, 10)), 4},
		{"diverges in block 0", cat(toks(0, 1), toks(101, 12)), 0},
		{"branch", branch, 12},
		{"empty", nil, 0},
		{"shorter than a block", toks(100, 3), 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Peek tells what Lookup will find and leaves no trace.
			before := r.c.Stats()
			// Nobody holds the cached blocks: a Lookup claims each.
			if have, claim := r.c.Peek(a, tt.prompt); have != tt.tokens || claim != tt.tokens/tBS {
				t.Errorf("Peek: have %d tokens, %d blocks claimed; want %d, %d", have, claim, tt.tokens, tt.tokens/tBS)
			}
			if after := r.c.Stats(); after.Lookups != before.Lookups || after.DeviceHitTokens != before.DeviceHitTokens || after.MissTokens != before.MissTokens {
				t.Errorf("Peek counted: stats %+v, then %+v", before, after)
			}
			m, err := r.c.Lookup(a, tt.prompt)
			if err != nil {
				t.Fatal(err)
			}
			defer r.c.Release(&m)
			if have, claim := r.c.Peek(a, tt.prompt); have != tt.tokens || claim != 0 {
				t.Errorf("Peek after Lookup: have %d tokens, %d blocks claimed; want %d, 0 (held)", have, claim, tt.tokens)
			}
			if m.Tokens != tt.tokens || len(m.Blocks)*tBS != tt.tokens || m.DeviceHits != tt.tokens || m.HostHits != 0 {
				t.Fatalf("have %+v; want %d device tokens", m, tt.tokens)
			}
			for i, b := range m.Blocks {
				r.checkBlock(t, b, tt.prompt[i*tBS:(i+1)*tBS])
			}
		})
	}
	r.mustCheck(t)
}

func TestInsertDedup(t *testing.T) {
	r := setup(t, 16, 0, Options{})
	a := Namespace{Tenant: "a"}
	p := toks(1, 12)
	// Two sequences compute the same prompt at once: neither hits.
	s1, _ := r.start(t, a, p)
	s2, _ := r.start(t, a, p)
	if s1.m.Tokens != 0 || s2.m.Tokens != 0 {
		t.Fatalf("have hits %d, %d; want none", s1.m.Tokens, s2.m.Tokens)
	}
	if have := r.dp.Used(); have != 6 {
		t.Fatalf("Used: have %d; want 6", have)
	}
	if n := r.finish(t, s1); n != 3 {
		t.Fatalf("first Insert: have %d cached; want 3", n)
	}
	if n := r.finish(t, s2); n != 3 {
		t.Fatalf("second Insert: have %d cached; want 3", n)
	}
	// s2's blocks were duplicates: freed when s2 dropped them.
	if have := r.dp.Used(); have != 3 {
		t.Errorf("Used: have %d; want 3", have)
	}
	if st := r.c.Stats(); st.InsertedBlocks != 3 || st.DedupBlocks != 3 {
		t.Errorf("have inserted %d, dedup %d; want 3, 3", st.InsertedBlocks, st.DedupBlocks)
	}
	// A hit inserted again is a no-op on its own blocks.
	m := r.run(t, a, cat(p, toks(50, 1)))
	if m.Tokens != 12 {
		t.Errorf("hit: have %d tokens; want 12", m.Tokens)
	}
	if have := r.dp.Used(); have != 3 {
		t.Errorf("Used: have %d; want 3", have)
	}
	r.mustCheck(t)
}

func TestInsertErrors(t *testing.T) {
	r := setup(t, 8, 0, Options{})
	blocks, _ := r.dp.Alloc(2)
	tests := []struct {
		name   string
		ns     Namespace
		tokens []int32
		blocks []int32
		want   error
	}{
		{"empty tenant", Namespace{}, toks(0, 8), blocks, ErrNoTenant},
		{"short table", Namespace{Tenant: "a"}, toks(0, 12), blocks, ErrShortTable},
		{"free block", Namespace{Tenant: "a"}, toks(0, 8), []int32{blocks[0], 7}, ErrBadBlock},
		{"out of range block", Namespace{Tenant: "a"}, toks(0, 8), []int32{blocks[0], 99}, ErrBadBlock},
		{"negative block", Namespace{Tenant: "a"}, toks(0, 4), []int32{-1}, ErrBadBlock},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n, err := r.c.Insert(tt.ns, tt.tokens, tt.blocks)
			if !errors.Is(err, tt.want) || n != 0 {
				t.Fatalf("have %d, %v; want 0, %v", n, err, tt.want)
			}
			if len(r.c.nodes) != 0 || r.dp.Used() != 2 {
				t.Fatalf("a failed Insert changed the cache: %d nodes, %d used", len(r.c.nodes), r.dp.Used())
			}
		})
	}
	if _, err := r.c.Lookup(Namespace{}, toks(0, 8)); !errors.Is(err, ErrNoTenant) {
		t.Errorf("Lookup with empty tenant: have %v; want ErrNoTenant", err)
	}
	// The partial block and anything past the full blocks stay with us.
	if n, err := r.c.Insert(Namespace{Tenant: "a"}, toks(0, 6), blocks); n != 1 || err != nil {
		t.Fatalf("have %d, %v; want 1, nil", n, err)
	}
	if have := r.dp.Refs(blocks[1]); have != 1 {
		t.Errorf("partial block refs: have %d; want 1", have)
	}
	for _, b := range blocks {
		r.dp.Unref(b)
	}
	r.mustCheck(t)
}

func TestLRUOrder(t *testing.T) {
	r := setup(t, 16, 16, Options{})
	a := Namespace{Tenant: "a"}
	p1, p2, p3 := toks(100, 8), toks(200, 8), toks(300, 8)
	r.run(t, a, p1)
	r.run(t, a, p2)
	r.run(t, a, p3)
	r.run(t, a, cat(p1, toks(0, 1))) // touches p1: p2 is now the oldest
	steps := []struct {
		evict int
		want  map[string][]Tier
	}{
		// The deepest block of the oldest chain goes first.
		{1, map[string][]Tier{"p1": {Device, Device}, "p2": {Device, Host}, "p3": {Device, Device}}},
		{1, map[string][]Tier{"p1": {Device, Device}, "p2": {Host, Host}, "p3": {Device, Device}}},
		{2, map[string][]Tier{"p1": {Device, Device}, "p2": {Host, Host}, "p3": {Host, Host}}},
		{1, map[string][]Tier{"p1": {Device, Host}, "p2": {Host, Host}, "p3": {Host, Host}}},
	}
	ps := map[string][]int32{"p1": p1, "p2": p2, "p3": p3}
	for i, st := range steps {
		if have := r.c.EvictDevice(st.evict); have != st.evict {
			t.Fatalf("step %d: EvictDevice(%d) freed %d", i, st.evict, have)
		}
		for name, w := range st.want {
			if have := r.tiers("a", ps[name]); !slices.Equal(have, w) {
				t.Fatalf("step %d: %s tiers: have %v; want %v", i, name, have, w)
			}
		}
		r.mustCheck(t)
	}
	// Host eviction takes the least recently used host leaves: p2's.
	if have := r.c.EvictHost(2); have != 2 {
		t.Fatalf("EvictHost(2): have %d", have)
	}
	if have := r.tiers("a", p2); len(have) != 0 {
		t.Fatalf("p2 after host eviction: have %v; want gone", have)
	}
	if have := r.tiers("a", p3); len(have) != 2 {
		t.Fatalf("p3 after host eviction: have %v; want kept", have)
	}
	r.mustCheck(t)
}

func TestPinnedNeverEvicted(t *testing.T) {
	r := setup(t, 8, 8, Options{})
	a := Namespace{Tenant: "a"}
	p := toks(7, 13)
	r.run(t, a, p)
	m, _ := r.c.Lookup(a, p)
	if m.Tokens != 12 {
		t.Fatalf("have %d tokens; want 12", m.Tokens)
	}
	if have := r.c.EvictDevice(100); have != 0 {
		t.Fatalf("EvictDevice with everything pinned freed %d", have)
	}
	if have := r.c.EvictHost(100); have != 0 {
		t.Fatalf("EvictHost freed %d", have)
	}
	if err := r.c.Reserve(r.dp.Free() + 1); !errors.Is(err, ErrNoBlocks) {
		t.Fatalf("Reserve past the pinned blocks: have %v; want ErrNoBlocks", err)
	}
	if st := r.c.Stats(); st.DevicePinned != 3 {
		t.Errorf("DevicePinned: have %d; want 3", st.DevicePinned)
	}
	r.c.Release(&m)
	r.c.Release(&m) // harmless
	if err := r.c.Reserve(r.dp.Cap()); err != nil {
		t.Fatalf("Reserve after release: %v", err)
	}
	if have := r.tiers("a", p); !slices.Equal(have, []Tier{Host, Host, Host}) {
		t.Fatalf("tiers: have %v; want all host", have)
	}
	r.mustCheck(t)
}

// TestPromotedDataEqualsDemoted moves blocks device → host → device through
// the backend and checks every value, with the device blocks they came from
// overwritten in between so that a missing copy would show.
func TestPromotedDataEqualsDemoted(t *testing.T) {
	r := setup(t, 6, 8, Options{})
	a := Namespace{Tenant: "a"}
	p := toks(40, 21) // 5 full blocks + 1
	r.run(t, a, p)
	if have := r.c.EvictDevice(5); have != 5 {
		t.Fatalf("EvictDevice: have %d; want 5", have)
	}
	// Scribble over every device block.
	junk, _ := r.dp.Alloc(r.dp.Free())
	for _, b := range junk {
		r.fill(r.dev, b, toks(9000, tBS))
	}
	for _, b := range junk {
		r.dp.Unref(b)
	}
	m, err := r.c.Lookup(a, p)
	if err != nil {
		t.Fatal(err)
	}
	if m.Tokens != 20 || m.HostHits != 20 || m.DeviceHits != 0 {
		t.Fatalf("have %+v; want 20 host tokens", m)
	}
	for i, b := range m.Blocks {
		r.checkBlock(t, b, p[i*tBS:(i+1)*tBS])
	}
	if st := r.c.Stats(); st.Promotions != 5 || st.Demotions != 5 || st.HostBlocks != 0 || st.DeviceBlocks != 5 {
		t.Errorf("stats: have %+v; want 5 promotions, 5 demotions, all on device", st)
	}
	r.c.Release(&m)
	r.mustCheck(t)
}

// TestPromotionUnderPressure: promoting needs device blocks; the cache
// evicts other chains for them, and truncates the match when it cannot.
func TestPromotionUnderPressure(t *testing.T) {
	r := setup(t, 4, 8, Options{})
	a := Namespace{Tenant: "a"}
	p, q := toks(10, 13), toks(50, 13)
	r.run(t, a, p)
	r.run(t, a, q) // needs 4 blocks: p's 3 are demoted
	if have := r.tiers("a", p); !slices.Equal(have, []Tier{Host, Host, Host}) {
		t.Fatalf("p: have %v; want all host", have)
	}
	m, _ := r.c.Lookup(a, p) // two of q's blocks go to the host for p's
	if m.HostHits != 12 {
		t.Fatalf("have %+v; want 12 host tokens", m)
	}
	for i, b := range m.Blocks {
		r.checkBlock(t, b, p[i*tBS:(i+1)*tBS])
	}
	if have := r.tiers("a", q); !slices.Equal(have, []Tier{Device, Host, Host}) {
		t.Fatalf("q: have %v; want its deepest two demoted", have)
	}
	// p holds 3 blocks and q's first the 4th: q cannot promote the rest,
	// so its match stops at its device part.
	mq, _ := r.c.Lookup(a, q)
	if mq.Tokens != 4 || mq.DeviceHits != 4 {
		t.Fatalf("q with a full device: have %+v; want 4 device tokens", mq)
	}
	r.c.Release(&mq)
	r.c.Release(&m)
	r.mustCheck(t)
	mq, _ = r.c.Lookup(a, q) // p is free to go now: q is promoted
	if mq.HostHits != 8 || mq.DeviceHits != 4 {
		t.Fatalf("q: have %+v; want 4 device and 8 host tokens", mq)
	}
	for i, b := range mq.Blocks {
		r.checkBlock(t, b, q[i*tBS:(i+1)*tBS])
	}
	r.c.Release(&mq)
	r.mustCheck(t)
}

func TestInsertAdoptsHostBlock(t *testing.T) {
	r := setup(t, 8, 8, Options{})
	a := Namespace{Tenant: "a"}
	p := toks(3, 9)
	r.run(t, a, p)
	r.c.EvictDevice(2)
	// A sequence that computed the same blocks (it did its lookup before
	// they were cached, say) inserts them: its device copies replace the
	// host ones.
	blocks, _ := r.dp.Alloc(2)
	r.fill(r.dev, blocks[0], p[:4])
	r.fill(r.dev, blocks[1], p[4:8])
	if n, err := r.c.Insert(a, p, blocks); n != 2 || err != nil {
		t.Fatalf("have %d, %v; want 2, nil", n, err)
	}
	if have := r.tiers("a", p); !slices.Equal(have, []Tier{Device, Device}) {
		t.Fatalf("have %v; want both on device", have)
	}
	if r.hp.Used() != 0 {
		t.Errorf("host Used: have %d; want 0", r.hp.Used())
	}
	for _, b := range blocks {
		r.dp.Unref(b)
	}
	m, _ := r.c.Lookup(a, p)
	if m.DeviceHits != 8 || !slices.Equal(m.Blocks, blocks) {
		t.Fatalf("have %+v; want device hits on %v", m, blocks)
	}
	r.c.Release(&m)
	r.mustCheck(t)
}

func TestTenantIsolation(t *testing.T) {
	r := setup(t, 32, 32, Options{})
	sys := toks(1, 8)               // a system prompt, 2 blocks
	convA := cat(sys, toks(100, 9)) // + A's private turn
	convB := cat(sys, toks(200, 9))
	A := Namespace{Tenant: "a"}
	B := Namespace{Tenant: "b"}

	r.run(t, A, convA)
	if m := r.run(t, B, convA); m.Tokens != 0 {
		t.Fatalf("B looked up A's private prompt: have %+v; want no hit", m)
	}
	if m := r.run(t, A, convA); m.Tokens != 16 {
		t.Fatalf("A's own prompt: have %d tokens; want 16", m.Tokens)
	}

	// A marks the system prompt public: D gets it, not A's turn.
	r.run(t, Namespace{Tenant: "a", Public: len(sys)}, cat(sys, toks(300, 5)))
	m := r.run(t, Namespace{Tenant: "d"}, convA)
	if m.Tokens != 8 {
		t.Fatalf("D on the shared system prompt + A's turn: have %d tokens; want 8", m.Tokens)
	}
	// B's continuation under the shared prefix is B's alone.
	r.run(t, B, convB)
	if m := r.run(t, B, convB); m.Tokens != 16 {
		t.Fatalf("B's own conversation: have %d tokens; want 16", m.Tokens)
	}
	c := Namespace{Tenant: "c"}
	if m := r.run(t, c, convB); m.Tokens != 8 {
		t.Fatalf("C on B's conversation: have %d tokens; want only the shared 8", m.Tokens)
	}
	// The longest match wins whether it starts shared or private.
	if m := r.run(t, A, convA); m.Tokens != 16 {
		t.Fatalf("A after sharing: have %d tokens; want 16", m.Tokens)
	}
	st := r.c.Stats()
	if st.Tenants[""].DeviceBlocks != 2 {
		t.Errorf("shared blocks: have %d; want 2", st.Tenants[""].DeviceBlocks)
	}
	if st.Tenants["b"].MissTokens == 0 || st.Tenants["a"].DeviceHitTokens == 0 {
		t.Errorf("per-tenant hits and misses not counted: %+v", st.Tenants)
	}
	r.mustCheck(t)
}

func TestTenantCap(t *testing.T) {
	r := setup(t, 32, 0, Options{TenantCap: 3})
	A := Namespace{Tenant: "a"}
	B := Namespace{Tenant: "b"}
	pb := toks(900, 9)
	r.run(t, B, pb)
	s, _ := r.start(t, A, toks(0, 21)) // 5 full blocks
	if n := r.finish(t, s); n != 3 {
		t.Fatalf("over the cap: have %d cached; want 3", n)
	}
	if have := r.dp.Used(); have != 5 {
		t.Fatalf("Used: have %d; want 5 (A's 3 + B's 2; the rest freed)", have)
	}
	// A's next chain evicts A's own oldest blocks, never B's.
	r.run(t, A, toks(500, 9))
	if have := r.tiers("a", toks(500, 9)); len(have) != 2 {
		t.Fatalf("A's new chain: have %v; want 2 blocks", have)
	}
	if have := r.tiers("a", toks(0, 21)); len(have) != 1 {
		t.Fatalf("A's old chain: have %v; want 1 block left", have)
	}
	if have := r.tiers("b", pb); len(have) != 2 {
		t.Fatalf("B's chain: have %v; want untouched", have)
	}
	// With all of A's blocks pinned, A caches nothing new.
	m1, _ := r.c.Lookup(A, toks(0, 21))
	m2, _ := r.c.Lookup(A, toks(500, 9))
	if m1.Tokens+m2.Tokens != 12 {
		t.Fatalf("have %d + %d tokens; want 12", m1.Tokens, m2.Tokens)
	}
	s, _ = r.start(t, A, toks(700, 5))
	if n := r.finish(t, s); n != 0 {
		t.Fatalf("at the cap, all pinned: have %d cached; want 0", n)
	}
	r.c.Release(&m1)
	r.c.Release(&m2)
	r.mustCheck(t)
}

func TestSessionRetention(t *testing.T) {
	r := setup(t, 32, 32, Options{})
	live := Namespace{Tenant: "a", Session: "live"}
	gone := Namespace{Tenant: "a", Session: "gone"}
	none := Namespace{Tenant: "a"}
	pl, pn, pg := toks(100, 9), toks(200, 9), toks(300, 9)
	r.c.SetSessionLive("live", true)
	r.c.SetSessionLive("gone", true)
	r.run(t, live, pl) // oldest
	r.run(t, none, pn)
	r.run(t, gone, pg) // newest
	r.c.SetSessionLive("gone", false)
	r.c.SetSessionLive("never", false) // unknown: ignored
	r.mustCheck(t)

	order := []struct {
		name   string
		prompt []int32
	}{{"idle session first", pg}, {"then plain LRU", pn}, {"live session last", pl}}
	for _, o := range order {
		r.c.EvictDevice(2)
		if have := r.tiers("a", o.prompt); !slices.Equal(have, []Tier{Host, Host}) {
			t.Fatalf("%s: have %v; want demoted", o.name, have)
		}
		r.mustCheck(t)
	}

	// A touch clears the idle mark: the idle chain is plain LRU again.
	r2 := setup(t, 32, 32, Options{})
	r2.c.SetSessionLive("gone", true)
	r2.run(t, gone, pg)
	r2.run(t, none, pn)
	r2.c.SetSessionLive("gone", false)
	r2.run(t, none, pg)
	r2.c.EvictDevice(2)
	if have := r2.tiers("a", pn); !slices.Equal(have, []Tier{Host, Host}) {
		t.Fatalf("after a touch: have %v; want the LRU chain demoted", have)
	}
	r2.mustCheck(t)
}

// TestLiveSessionLeafRemoved: a live session's last prefix can still be
// dropped under pressure; the session then points at what is left.
func TestLiveSessionLeafRemoved(t *testing.T) {
	r := setup(t, 8, 0, Options{})
	s := Namespace{Tenant: "a", Session: "s"}
	r.c.SetSessionLive("s", true)
	r.run(t, s, toks(0, 9))
	if have := r.c.EvictDevice(1); have != 1 {
		t.Fatalf("EvictDevice: have %d; want 1", have)
	}
	r.mustCheck(t)
	r.c.EvictDevice(1)
	r.mustCheck(t)
	r.c.SetSessionLive("s", false)
	r.mustCheck(t)
}

// TestConservation runs a random engine-like workload (sequences started,
// finished, cancelled, evictions, sessions going live and idle) and checks
// after every step that every device block is free or held exactly by its
// owners, and that the trie's invariants hold.
func TestConservation(t *testing.T) {
	for _, tc := range []struct {
		name       string
		dev, host  int
		o          Options
		iterations int
	}{
		{"two tiers", 24, 40, Options{}, 1500},
		{"device only", 24, 0, Options{}, 1500},
		{"tight host, tenant cap", 24, 6, Options{TenantCap: 7}, 1500},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := setup(t, tc.dev, tc.host, tc.o)
			rng := rand.New(rand.NewPCG(7, uint64(tc.dev+tc.host)))
			// Prompts are drawn from a few stems so that prefixes repeat.
			stems := [][]int32{toks(1000, 8), toks(2000, 12), toks(3000, 4), nil}
			var running []*seq
			held := func() map[int32]int {
				h := map[int32]int{}
				for _, s := range running {
					for _, b := range s.table {
						h[b]++
					}
				}
				return h
			}
			for step := range tc.iterations {
				switch op := rng.IntN(10); {
				case op < 4 && len(running) < 5:
					ns := Namespace{Tenant: fmt.Sprint("t", rng.IntN(3)), Session: fmt.Sprint("s", rng.IntN(4))}
					if rng.IntN(4) == 0 {
						ns.Public = 8
					}
					p := cat(stems[rng.IntN(len(stems))], toks(rng.IntN(3)*100, 1+rng.IntN(10)))
					if s, err := r.start(t, ns, p); err == nil {
						// Check the matched blocks hold the right KV.
						for i, b := range s.m.Blocks {
							if rng.IntN(8) == 0 {
								r.checkBlock(t, b, p[i*tBS:(i+1)*tBS])
							}
						}
						running = append(running, s)
					} else if !errors.Is(err, ErrNoBlocks) {
						t.Fatalf("step %d: %v", step, err)
					}
				case op < 7 && len(running) > 0:
					i := rng.IntN(len(running))
					if rng.IntN(3) == 0 {
						r.cancel(t, running[i])
					} else {
						r.finish(t, running[i])
					}
					running = slices.Delete(running, i, i+1)
				case op == 7:
					r.c.EvictDevice(rng.IntN(4))
				case op == 8:
					r.c.EvictHost(rng.IntN(4))
				default:
					r.c.SetSessionLive(fmt.Sprint("s", rng.IntN(4)), rng.IntN(2) == 0)
				}
				if err := r.c.check(); err != nil {
					t.Fatalf("step %d: %v", step, err)
				}
				if err := r.c.checkRefs(held()); err != nil {
					t.Fatalf("step %d: %v", step, err)
				}
			}
			for _, s := range running {
				r.cancel(t, s)
			}
			r.mustCheck(t)
			st := r.c.Stats()
			if st.DeviceUsed != st.DeviceBlocks || st.HostUsed != st.HostBlocks {
				t.Fatalf("idle cache: pools used %d/%d; cached %d/%d", st.DeviceUsed, st.HostUsed, st.DeviceBlocks, st.HostBlocks)
			}
			if tc.host > 0 && (st.Promotions == 0 || st.Demotions == 0) {
				t.Errorf("workload never moved blocks: %+v", st)
			}
			t.Logf("%+v", st)
		})
	}
}

func TestSharedCap(t *testing.T) {
	r := setup(t, 32, 0, Options{TenantCap: 2})
	sysA, sysB := toks(10, 8), toks(20, 8)
	A := Namespace{Tenant: "a", Public: 8}
	B := Namespace{Tenant: "b", Public: 8}
	r.run(t, A, cat(sysA, toks(100, 1))) // 2 shared blocks: the cap
	// B's public prefix cannot evict A's shared blocks while they are
	// pinned, so B caches it privately instead.
	m, _ := r.c.Lookup(Namespace{Tenant: "c"}, cat(sysA, toks(0, 1)))
	if m.Tokens != 8 {
		t.Fatalf("shared hit: have %d tokens; want 8", m.Tokens)
	}
	if n := r.run(t, B, cat(sysB, toks(200, 1))); n.Tokens != 0 {
		t.Fatalf("B's first run hit %d tokens", n.Tokens)
	}
	if have := r.tiers("b", sysB); len(have) != 2 {
		t.Fatalf("B's prefix: have %v cached privately; want 2 blocks", have)
	}
	if m2, _ := r.c.Lookup(Namespace{Tenant: "c"}, cat(sysB, toks(0, 1))); m2.Tokens != 0 {
		t.Fatalf("C hit B's private fallback: %+v", m2)
	}
	r.c.Release(&m)
	// Unpinned, A's shared blocks make room for the next public prefix.
	r.run(t, Namespace{Tenant: "d", Public: 8}, cat(toks(30, 8), toks(0, 1)))
	if m3, _ := r.c.Lookup(Namespace{Tenant: "c"}, cat(toks(30, 8), toks(0, 1))); m3.Tokens != 8 {
		t.Fatalf("new shared prefix: have %+v; want 8 tokens", m3)
	} else {
		r.c.Release(&m3)
	}
	r.mustCheck(t)
}
