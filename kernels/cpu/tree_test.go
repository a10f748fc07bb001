package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/specgate/specgate/kernels"
)

func randVals(r *rand.Rand, n int, scale float32) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = (r.Float32()*2 - 1) * scale
	}
	return out
}

// treeFixture is a cache filled with random K/V in one layer, with a
// scattered block table per sequence.
func treeFixture(t testing.TB, b *Backend, r *rand.Rand, spec kernels.KVSpec, layer int) *KV {
	t.Helper()
	c, err := b.NewKV(spec)
	if err != nil {
		t.Fatal(err)
	}
	kv := c.(*KV)
	n := spec.Blocks * spec.BlockSize
	slots := make([]int32, n)
	for i := range slots {
		slots[i] = int32(i)
	}
	k := b.Alloc(n, spec.Width)
	v := b.Alloc(n, spec.Width)
	b.Upload(k, randVals(r, n*spec.Width, 1))
	b.Upload(v, randVals(r, n*spec.Width, 1))
	b.StoreKV(kv, layer, k, v, slots)
	return kv
}

func checkClose(t *testing.T, what string, have []float32, want []float64) {
	t.Helper()
	if len(have) != len(want) {
		t.Fatalf("%s: have %d values; want %d", what, len(have), len(want))
	}
	bad := 0
	for i := range have {
		if d := math.Abs(float64(have[i]) - want[i]); !(d <= 2e-5+1e-4*math.Abs(want[i])) {
			if bad < 5 {
				t.Errorf("%s[%d]: have %g; want %g", what, i, have[i], want[i])
			}
			bad++
		}
	}
}

// TestTreeAttention checks the op against the reference masked softmax for
// bushy trees over scattered prefixes, including rows with no prefix, rows
// with no tree slots and rows that see nothing.
func TestTreeAttention(t *testing.T) {
	cases := []struct {
		name                   string
		heads, kvHeads, hd, bs int
		prefixes               []int32
		qscale                 float32
		softCap                float32
		window                 int32
	}{
		{"mha", 4, 4, 16, 4, []int32{1, 7, 13}, 1, 0, 0},
		{"gqa", 8, 2, 32, 16, []int32{40, 17}, 1, 0, 0},
		{"mqa", 4, 1, 64, 8, []int32{0, 9, 64}, 1, 0, 0},
		{"peaked", 2, 2, 32, 16, []int32{33, 3}, 200, 0, 0},
		{"long", 4, 2, 16, 16, []int32{300, 5}, 1, 0, 0},
		// Gemma 2: capped scores, a sliding window over the prefix
		// (trees are at most 3 deep here).
		{"softcap_window", 4, 1, 32, 8, []int32{0, 3, 9, 40, 300}, 60, 30, 8},
	}
	for _, dt := range []kernels.DType{kernels.F32, kernels.F16} {
		for _, threads := range []int{1, 2} {
			for _, tc := range cases {
				t.Run(fmt.Sprintf("%v/%s/threads=%d", dt, tc.name, threads), func(t *testing.T) {
					b := open(t, threads)
					r := rand.New(rand.NewPCG(21, uint64(threads)))
					spec := kernels.KVSpec{Layers: 2, Blocks: 24, BlockSize: tc.bs, Width: tc.kvHeads * tc.hd, DType: dt}
					kv := treeFixture(t, b, r, spec, 1)
					nslots := spec.Blocks * spec.BlockSize
					var a kernels.Attn
					a.Heads, a.KVHeads, a.HeadDim = tc.heads, tc.kvHeads, tc.hd
					a.SoftCap, a.Window = tc.softCap, tc.window
					var tree kernels.TreeMask
					for _, pre := range tc.prefixes {
						nb := (int(pre)+tc.bs-1)/tc.bs + 1
						table := make([]int32, nb)
						for i := range table {
							table[i] = int32(r.IntN(spec.Blocks))
						}
						// A tree of 6 nodes: parents before children.
						parent := []int{-1, 0, 0, 1, -1, 4}
						tslots := make([]int32, len(parent))
						for i := range tslots {
							tslots[i] = int32(r.IntN(nslots))
						}
						for i := range parent {
							var vis []int32
							for j := i; j >= 0; j = parent[j] {
								vis = append(vis, tslots[j])
							}
							a.Rows = append(a.Rows, kernels.AttnRow{Table: table, Len: 1})
							tree.Rows = append(tree.Rows, kernels.TreeRow{Prefix: pre, Slots: vis})
						}
						// A plain row (no tree slots) and, when the prefix is
						// empty, a row that sees nothing.
						a.Rows = append(a.Rows, kernels.AttnRow{Table: table, Len: 1})
						tree.Rows = append(tree.Rows, kernels.TreeRow{Prefix: pre})
					}
					qw := tc.heads * tc.hd
					qs := randVals(r, len(a.Rows)*qw, tc.qscale)
					q := b.Alloc(len(a.Rows), qw)
					b.Upload(q, qs)
					dst := b.Alloc(len(a.Rows), qw)
					b.TreeAttention(dst, q, kv, 1, a, tree)
					// The reference reads the values the cache holds: rounded
					// to halves in an F16 cache.
					k1, v1 := kvLayer(kv, 1)
					want := kernels.TreeAttentionRef(qs, k1, v1, tc.bs, a, tree)
					have := make([]float32, len(qs))
					b.Download(have, dst)
					checkClose(t, "TreeAttention", have, want)
					// Rows with one prefix are computed together; each must come
					// out bit for bit as it does alone.
					for i := range a.Rows {
						one, tone := a, tree
						one.Rows, tone.Rows = a.Rows[i:i+1], tree.Rows[i:i+1]
						q1, d1 := b.Alloc(1, qw), b.Alloc(1, qw)
						b.Upload(q1, qs[i*qw:(i+1)*qw])
						b.TreeAttention(d1, q1, kv, 1, one, tone)
						alone := make([]float32, qw)
						b.Download(alone, d1)
						if !slices.Equal(alone, have[i*qw:(i+1)*qw]) {
							t.Errorf("row %d: alone and with its prefix's other rows differ", i)
						}
					}
					// In place (dst = q), as the model calls it.
					b.TreeAttention(q, q, kv, 1, a, tree)
					b.Download(have, q)
					checkClose(t, "TreeAttention in place", have, want)
				})
			}
		}
	}
}

// TestTreeAttentionChainIsCausal checks that a chain's tree mask gives what
// plain causal Attention gives when the chain's tokens sit at the next
// positions of the sequence: the tree op and the existing op agree.
func TestTreeAttentionChainIsCausal(t *testing.T) {
	for _, dt := range []kernels.DType{kernels.F32, kernels.F16} {
		t.Run(dt.String(), func(t *testing.T) { testTreeChainIsCausal(t, dt) })
	}
}

func testTreeChainIsCausal(t *testing.T, dt kernels.DType) {
	b := open(t, 2)
	r := rand.New(rand.NewPCG(22, 23))
	spec := kernels.KVSpec{Layers: 1, Blocks: 10, BlockSize: 4, Width: 2 * 16, DType: dt}
	kv := treeFixture(t, b, r, spec, 0)
	table := []int32{7, 2, 9, 0, 5}
	slot := func(p int) int32 { return table[p/4]*4 + int32(p%4) }
	const prefix, chain = 9, 6
	a := kernels.Attn{Heads: 4, KVHeads: 2, HeadDim: 16}
	var tree kernels.TreeMask
	plain := a
	for d := range chain {
		var vis []int32
		for j := 0; j <= d; j++ {
			vis = append(vis, slot(prefix+j))
		}
		a.Rows = append(a.Rows, kernels.AttnRow{Table: table, Len: 1})
		tree.Rows = append(tree.Rows, kernels.TreeRow{Prefix: prefix, Slots: vis})
		plain.Rows = append(plain.Rows, kernels.AttnRow{Table: table, Len: int32(prefix + d + 1)})
	}
	qs := randVals(r, chain*64, 1)
	q := b.Alloc(chain, 64)
	b.Upload(q, qs)
	d1, d2 := b.Alloc(chain, 64), b.Alloc(chain, 64)
	b.TreeAttention(d1, q, kv, 0, a, tree)
	b.Attention(d2, q, kv, 0, plain)
	h1, h2 := make([]float32, chain*64), make([]float32, chain*64)
	b.Download(h1, d1)
	b.Download(h2, d2)
	if !slices.Equal(h1, h2) {
		t.Errorf("TreeAttention and causal Attention differ:\n%v\n%v", h1, h2)
	}
}

func TestCopySlots(t *testing.T) {
	for _, dt := range []kernels.DType{kernels.F32, kernels.F16} {
		t.Run(dt.String(), func(t *testing.T) { testCopySlots(t, dt) })
	}
}

func testCopySlots(t *testing.T, dt kernels.DType) {
	b := open(t, 1)
	r := rand.New(rand.NewPCG(24, 25))
	spec := kernels.KVSpec{Layers: 2, Blocks: 4, BlockSize: 4, Width: 8, DType: dt}
	kv := treeFixture(t, b, r, spec, 0)
	kv2 := treeFixture(t, b, r, spec, 1)
	kv.copyElems(1, 0, kv2, 0, spec.Blocks*spec.BlockSize*spec.Width)
	layer := func(l int) (k, v []float32) {
		k, v = kvLayer(kv, l)
		return slices.Clone(k), slices.Clone(v)
	}
	k0, v0 := layer(0)
	k1, v1 := layer(1)
	wantK, wantV := [][]float32{k0, k1}, [][]float32{v0, v1}
	// The second move reads the slot the first one wrote; the third is a
	// no-op.
	moves := []kernels.SlotCopy{{Src: 9, Dst: 3}, {Src: 3, Dst: 15}, {Src: 4, Dst: 4}, {Src: 0, Dst: 1}}
	kernels.CopySlotsRef(wantK, wantV, spec.Width, moves)
	b.CopySlots(kv, moves)
	for l := range 2 {
		if k, v := kvLayer(kv, l); !slices.Equal(k, wantK[l]) || !slices.Equal(v, wantV[l]) {
			t.Errorf("layer %d: have K %v; want %v", l, k[:24], wantK[l][:24])
		}
	}
	mustPanic(t, "CopySlots", func() { b.CopySlots(kv, []kernels.SlotCopy{{Src: 16, Dst: 0}}) })
}

// BenchmarkTreeAttention is one layer of a speculative verification step:
// a draft chain of 5 tokens over a shared prefix, in an F16 cache of the
// 134M model's shape (12 heads of 64). The prefix is read once for all
// five rows.
func BenchmarkTreeAttention(b *testing.B) {
	for _, prefix := range []int{256, 2048} {
		b.Run(fmt.Sprintf("prefix=%d", prefix), func(b *testing.B) {
			be := open(b, 0)
			r := rand.New(rand.NewPCG(41, 42))
			const heads, hd, bs, rows = 12, 64, 16, 5
			blocks := prefix/bs + 2
			spec := kernels.KVSpec{Layers: 1, Blocks: blocks, BlockSize: bs, Width: heads * hd, DType: kernels.F16}
			kv := treeFixture(b, be, r, spec, 0)
			table := make([]int32, blocks)
			for i := range table {
				table[i] = int32(i)
			}
			a := kernels.Attn{Heads: heads, KVHeads: heads, HeadDim: hd}
			var tree kernels.TreeMask
			var chain []int32
			for i := range rows {
				chain = append(chain, int32(prefix+i))
				a.Rows = append(a.Rows, kernels.AttnRow{Table: table, Len: int32(prefix)})
				tree.Rows = append(tree.Rows, kernels.TreeRow{Prefix: int32(prefix), Slots: slices.Clone(chain)})
			}
			q, dst := be.Alloc(rows, heads*hd), be.Alloc(rows, heads*hd)
			be.Upload(q, randVals(r, rows*heads*hd, 1))
			for b.Loop() {
				be.TreeAttention(dst, q, kv, 0, a, tree)
			}
		})
	}
}

// BenchmarkTreeAttentionSeq is one layer of a batch-1 speculative
// verification step in the speculation stand-in's shape (128 heads of 8
// over 64 kv heads, F16): R rows of one sequence, a draft chain over a
// shared prefix of 256 or 512 positions, on one thread. Row 1 is a plain
// decode; what R rows cost over R times that is the price of a drafted row.
func BenchmarkTreeAttentionSeq(b *testing.B) {
	const heads, kvHeads, hd, bs = 128, 64, 8, 16
	for _, prefix := range []int{256, 512} {
		for _, rows := range []int{1, 3, 5, 9} {
			b.Run(fmt.Sprintf("prefix=%d/rows=%d", prefix, rows), func(b *testing.B) {
				be := open(b, 1)
				r := rand.New(rand.NewPCG(43, 44))
				blocks := (prefix+rows)/bs + 1
				spec := kernels.KVSpec{Layers: 1, Blocks: blocks, BlockSize: bs, Width: kvHeads * hd, DType: kernels.F16}
				kv := treeFixture(b, be, r, spec, 0)
				table := make([]int32, blocks)
				for i := range table {
					table[i] = int32(i)
				}
				a := kernels.Attn{Heads: heads, KVHeads: kvHeads, HeadDim: hd}
				var tree kernels.TreeMask
				var chain []int32
				for i := range rows {
					chain = append(chain, int32(prefix+i))
					a.Rows = append(a.Rows, kernels.AttnRow{Table: table, Len: int32(prefix)})
					tree.Rows = append(tree.Rows, kernels.TreeRow{Prefix: int32(prefix), Slots: slices.Clone(chain)})
				}
				q, dst := be.Alloc(rows, heads*hd), be.Alloc(rows, heads*hd)
				be.Upload(q, randVals(r, rows*heads*hd, 1))
				loopThreadCPU(b, func() {
					be.TreeAttention(dst, q, kv, 0, a, tree)
				})
			})
		}
	}
}
