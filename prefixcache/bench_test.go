package prefixcache

import (
	"testing"

	"github.com/specgate/specgate/kernels"
)

// benchRig is a cache with the engine's default block size and a KV shape
// that does not matter for trie costs (no bytes move).
func benchRig(b *testing.B, layers, width, devBlocks, hostBlocks int) *rig {
	b.Helper()
	be, err := kernels.Open("cpu", kernels.Options{Threads: 1})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { be.Close() })
	r := &rig{b: be}
	spec := kernels.KVSpec{Layers: layers, BlockSize: 16, Width: width, Blocks: devBlocks}
	if r.dev, err = be.NewKV(spec); err != nil {
		b.Fatal(err)
	}
	r.dp = NewPool(Device, devBlocks)
	if hostBlocks > 0 {
		spec.Blocks = hostBlocks
		if r.host, err = be.NewKV(spec); err != nil {
			b.Fatal(err)
		}
		r.hp = NewPool(Host, hostBlocks)
	}
	if r.c, err = New(be, r.dev, r.host, r.dp, r.hp, Options{}); err != nil {
		b.Fatal(err)
	}
	return r
}

const histTokens = 1500 // a long conversation: 93 full blocks of 16

// BenchmarkLookup1500 is the per-request cost of finding a cached 1,500
// token history (all on the device) and releasing the match.
func BenchmarkLookup1500(b *testing.B) {
	r := benchRig(b, 1, 8, 256, 0)
	ns := Namespace{Tenant: "t", Session: "s"}
	r.c.SetSessionLive("s", true)
	hist := toks(1, histTokens)
	blocks, _ := r.dp.Alloc(histTokens/16 + 1)
	if _, err := r.c.Insert(ns, hist, blocks); err != nil {
		b.Fatal(err)
	}
	prompt := append(hist, toks(5000, 20)...) // the next user turn
	b.ReportAllocs()
	for b.Loop() {
		m, _ := r.c.Lookup(ns, prompt)
		if m.Tokens != 1488 {
			b.Fatalf("have %d tokens; want 1488", m.Tokens)
		}
		r.c.Release(&m)
	}
}

// BenchmarkInsert1500 is the cost of caching a finished 1,500 token
// sequence: "new" creates every node, "dedup" finds them all cached.
func BenchmarkInsert1500(b *testing.B) {
	hist := toks(1, histTokens)
	nb := histTokens/16 + 1
	b.Run("new", func(b *testing.B) {
		r := benchRig(b, 1, 8, 2*nb, 0)
		ns := Namespace{Tenant: "t"}
		b.ReportAllocs()
		for b.Loop() {
			b.StopTimer()
			r.c.EvictDevice(nb) // no host tier: drops the last round's nodes
			blocks, err := r.dp.Alloc(nb)
			if err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			if n, _ := r.c.Insert(ns, hist, blocks); n != histTokens/16 {
				b.Fatalf("cached %d", n)
			}
			b.StopTimer()
			for _, x := range blocks {
				r.dp.Unref(x)
			}
			b.StartTimer()
		}
	})
	b.Run("dedup", func(b *testing.B) {
		r := benchRig(b, 1, 8, 2*nb, 0)
		ns := Namespace{Tenant: "t"}
		blocks, _ := r.dp.Alloc(nb)
		r.c.Insert(ns, hist, blocks)
		b.ReportAllocs()
		for b.Loop() {
			if n, _ := r.c.Insert(ns, hist, blocks); n != histTokens/16 {
				b.Fatalf("cached %d", n)
			}
		}
	})
}

// BenchmarkPromote compares moving KV blocks host → device through the
// backend (CopyBlocks, as promotion does) with a plain copy() of the same
// number of bytes: on the CPU backend both are memory bandwidth, so the
// two MB/s figures should be close. "Lookup" is a whole promoting Lookup
// (demotion before it is not timed).
//
// Shape: 8 layers × 16 tokens × 512 floats (8 kv heads × 64), K and V: 512
// KiB per block, 64 blocks (32 MiB) per op.
func BenchmarkPromote(b *testing.B) {
	const (
		layers, width, blocks = 8, 512, 64
		blockBytes            = layers * 2 * 16 * width * 4
	)
	b.Run("CopyBlocks", func(b *testing.B) {
		r := benchRig(b, layers, width, blocks, blocks)
		moves := make([]kernels.BlockCopy, blocks)
		for i := range moves {
			moves[i] = kernels.BlockCopy{Src: int32(i), Dst: int32(blocks - 1 - i)}
		}
		b.SetBytes(blocks * blockBytes)
		for b.Loop() {
			r.b.CopyBlocks(r.dev, r.host, moves)
		}
	})
	b.Run("copy", func(b *testing.B) {
		src := make([]byte, blocks*blockBytes)
		dst := make([]byte, blocks*blockBytes)
		for i := range src {
			src[i] = byte(i)
		}
		b.SetBytes(blocks * blockBytes)
		for b.Loop() {
			copy(dst, src)
		}
	})
	b.Run("Lookup", func(b *testing.B) {
		r := benchRig(b, layers, width, blocks, blocks)
		ns := Namespace{Tenant: "t"}
		hist := toks(1, blocks*16+1)
		bl, _ := r.dp.Alloc(blocks)
		r.c.Insert(ns, hist, bl)
		for _, x := range bl {
			r.dp.Unref(x)
		}
		b.SetBytes(blocks * blockBytes)
		for b.Loop() {
			b.StopTimer()
			if n := r.c.EvictDevice(blocks); n != blocks {
				b.Fatalf("demoted %d", n)
			}
			b.StartTimer()
			m, _ := r.c.Lookup(ns, hist)
			if m.HostHits != blocks*16 {
				b.Fatalf("have %+v", m)
			}
			r.c.Release(&m)
		}
	})
}
