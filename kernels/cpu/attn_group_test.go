package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/specgate/specgate/kernels"
)

// TestAttentionGroupedBits draws random batches (draft trees over a
// shared prefix, causal runs of a prefill chunk, another sequence's rows
// between them, sliding windows, soft caps, contexts across the long-row
// split) and checks that every row gets, computed with the rows of its
// sequence, the bits it gets alone. Keys and queries hold exact zeros in
// whole heads, as a padded model's do, so products of either sign of zero
// are formed. On the assembly kernels most trials group rows; that is
// checked too, so the test cannot pass by never taking the grouped path.
func TestAttentionGroupedBits(t *testing.T) {
	shapes := []struct{ heads, kvHeads, hd int }{{128, 64, 8}, {16, 8, 8}, {32, 16, 8}, {16, 4, 8}, {8, 8, 16}}
	r := rand.New(rand.NewPCG(15, 2026))
	grouped, trials := 0, 0
	for trial := range 48 {
		sh := shapes[trial%len(shapes)]
		dt := []kernels.DType{kernels.F16, kernels.F32}[trial/len(shapes)%2]
		bs := []int{1, 4, 16, 32}[r.IntN(4)]
		threads := 1 + r.IntN(3)
		name := fmt.Sprintf("%d/%v/heads=%d/kv=%d/hd=%d/bs=%d/threads=%d", trial, dt, sh.heads, sh.kvHeads, sh.hd, bs, threads)
		t.Run(name, func(t *testing.T) {
			b := open(t, threads)
			const ctx = 700
			blocks := 2*ctx/bs + 2
			spec := kernels.KVSpec{Layers: 1, Blocks: blocks, BlockSize: bs, Width: sh.kvHeads * sh.hd, DType: dt}
			kv := groupFixture(t, b, r, spec)
			a := kernels.Attn{Heads: sh.heads, KVHeads: sh.kvHeads, HeadDim: sh.hd}
			if r.IntN(3) == 0 {
				a.Window = int32(1 + r.IntN(400))
			}
			if r.IntN(4) == 0 {
				a.SoftCap = 2 + 10*r.Float32()
			}
			// Two sequences with their own scattered blocks: the first
			// blocks/2 slots' worth belong to sequence 0.
			perm := r.Perm(blocks)
			tables := [][]int32{make([]int32, blocks/2), make([]int32, blocks/2)}
			for i := range tables[0] {
				tables[0][i], tables[1][i] = int32(perm[i]), int32(perm[blocks/2+i])
			}
			slotOf := func(s, p int) int32 { return tables[s][p/bs]*int32(bs) + int32(p%bs) }
			var tree []kernels.TreeRow
			tr := r.IntN(2) == 0
			for s := range 2 {
				rows := 1 + r.IntN(10)
				prefix := r.IntN(ctx - 20)
				if r.IntN(4) == 0 {
					prefix = 256 - r.IntN(3) + r.IntN(3) // across the split
				}
				if !tr {
					for i := range rows {
						a.Rows = append(a.Rows, kernels.AttnRow{Table: tables[s], Len: int32(prefix + 1 + i)})
					}
					continue
				}
				// A random tree: node i hangs under an earlier node or the
				// prefix, and sees the slots of its path.
				paths := make([][]int32, rows)
				for i := range rows {
					if p := r.IntN(i + 1); p < i {
						paths[i] = slices.Clone(paths[p])
					}
					paths[i] = append(paths[i], slotOf(s, prefix+i))
					a.Rows = append(a.Rows, kernels.AttnRow{Table: tables[s], Len: int32(prefix)})
					tree = append(tree, kernels.TreeRow{Prefix: int32(prefix), Slots: paths[i]})
				}
			}
			qw := sh.heads * sh.hd
			n := len(a.Rows)
			qs := randVals(r, n*qw, 2)
			for h := range sh.heads {
				if r.IntN(5) == 0 {
					for row := range n {
						clear(qs[row*qw+h*sh.hd : row*qw+(h+1)*sh.hd])
					}
				}
			}
			call := func(r0, r1 int) []float32 {
				one := a
				one.Rows = a.Rows[r0:r1]
				q, d := b.Alloc(r1-r0, qw), b.Alloc(r1-r0, qw)
				b.Upload(q, qs[r0*qw:r1*qw])
				if tree != nil {
					b.TreeAttention(d, q, kv, 0, one, kernels.TreeMask{Rows: tree[r0:r1]})
				} else {
					b.Attention(d, q, kv, 0, one)
				}
				out := make([]float32, (r1-r0)*qw)
				b.Download(out, d)
				return out
			}
			together := call(0, n)
			for _, g := range b.attnGroupBuf {
				if g.n > 1 {
					grouped++
					break
				}
			}
			trials++
			for row := range n {
				alone := call(row, row+1)
				if !slices.EqualFunc(together[row*qw:(row+1)*qw], alone, sameBits) {
					t.Errorf("row %d of %d: together and alone differ", row, n)
				}
			}
		})
	}
	if groupedG2 && grouped < trials/4 {
		t.Errorf("only %d of %d trials grouped rows", grouped, trials)
	}
}

// groupFixture is a cache of random keys and values in which a fifth of
// the kv heads are exact zeros, as a padded model's are.
func groupFixture(t *testing.T, b *Backend, r *rand.Rand, spec kernels.KVSpec) *KV {
	t.Helper()
	c, err := b.NewKV(spec)
	if err != nil {
		t.Fatal(err)
	}
	kv := c.(*KV)
	n := spec.Blocks * spec.BlockSize
	k, v := randVals(r, n*spec.Width, 3), randVals(r, n*spec.Width, 1)
	hd := 8
	for h := 0; h+hd <= spec.Width; h += hd {
		if r.IntN(5) == 0 {
			for s := range n {
				clear(k[s*spec.Width+h : s*spec.Width+h+hd])
			}
		}
	}
	kt, vt := b.Alloc(n, spec.Width), b.Alloc(n, spec.Width)
	b.Upload(kt, k)
	b.Upload(vt, v)
	slots := make([]int32, n)
	for i := range slots {
		slots[i] = int32(i)
	}
	b.StoreKV(kv, 0, kt, vt, slots)
	return kv
}

// TestGroupedKernelsBits holds the grouped kernels to the single-row
// assembly kernels bit for bit, NaN payloads included, on values with
// both zeros, infinities, NaNs and subnormal products.
func TestGroupedKernelsBits(t *testing.T) {
	asmKernels(t)
	if !groupedG2 {
		t.Skip("no grouped kernels")
	}
	r := rand.New(rand.NewPCG(8, 2))
	special := []float32{0, float32(math.Copysign(0, -1)), float32(math.Inf(1)), float32(math.Inf(-1)),
		math.Float32frombits(0x7fc12345), math.Float32frombits(0xffc00abc), 1e-30, -1e-30, 65504}
	draw := func(n int) []float32 {
		x := randVals(r, n, 4)
		for i := range x {
			if r.IntN(12) == 0 {
				x[i] = special[r.IntN(len(special))]
			}
		}
		return x
	}
	const nh, hd, group, rows = 16, 8, 2, 3
	for _, npos := range []int{1, 3, 4, 5, 31, 32, 33} {
		w := nh / group * hd // a slot holds exactly the chunk's kv heads
		k16, v16 := make([]uint16, npos*w), make([]uint16, npos*w)
		f32ToF16Row(k16, draw(npos*w))
		f32ToF16Row(v16, draw(npos*w))
		slots := make([]int32, npos)
		for i := range slots {
			slots[i] = int32(i)
		}
		q := draw(rows * nh * hd)
		wts := draw(rows * npos * nh)
		qt := make([]float32, len(q))
		for row := range rows {
			transpose8(qt[row*nh*hd:], q[row*nh*hd:], nh/8, 64, 64)
		}
		s := make([]float32, rows*npos*nh)
		acc := make([]float32, rows*nh*hd)
		kx := make([]float32, npos*64)
		for b := range nh / 8 {
			spreadG2(kx, k16[b*32:], slots, w)
			dotsG2(kx, qt[b*64:], s[b*8:], rows, nh*hd, nh, npos*nh)
			spreadG2(kx, v16[b*32:], slots, w)
			axpysG2(kx, wts[b*8:], acc[b*rows*64:(b+1)*rows*64], nh, npos*nh)
		}
		for row := range rows {
			want := make([]float32, npos*nh)
			dotsF16(q[row*nh*hd:(row+1)*nh*hd], k16, hd, group, w, want)
			wantY := make([]float32, nh*hd)
			axpysF16(wantY, wts[row*npos*nh:(row+1)*npos*nh], v16, hd, group, w)
			haveY := make([]float32, nh*hd)
			transpose8(haveY, acc[row*64:], nh/8, 64, rows*64)
			for i, x := range want {
				if math.Float32bits(x) != math.Float32bits(s[row*npos*nh+i]) {
					t.Errorf("npos %d row %d score %d: have %08x; want %08x", npos, row, i, math.Float32bits(s[row*npos*nh+i]), math.Float32bits(x))
				}
			}
			for i, x := range wantY {
				if math.Float32bits(x) != math.Float32bits(haveY[i]) {
					t.Errorf("npos %d row %d output %d: have %08x; want %08x", npos, row, i, math.Float32bits(haveY[i]), math.Float32bits(x))
				}
			}
		}
	}
}

// TestAttnChunks: a task that groups rows takes whole runs of eight heads
// however many workers there are (more workers than that allows get fewer
// tasks), and at most 32 heads; ungrouped tasks split down to about two
// per worker.
func TestAttnChunks(t *testing.T) {
	for _, tc := range []struct {
		heads, kvHeads, tasks, threads int
		shared                         bool
		want                           int // heads per chunk
	}{
		{128, 64, 1, 1, true, 32},
		{128, 64, 1, 2, true, 32},
		{128, 64, 1, 8, true, 8},
		{128, 64, 1, 9, true, 8},
		{128, 64, 1, 16, true, 8},
		{128, 64, 1, 64, true, 8},
		{128, 64, 2, 16, true, 8},
		{128, 64, 1, 16, false, 4},
		{128, 64, 1, 64, false, 2},
		{128, 64, 40, 2, false, 128},
		{32, 8, 1, 64, true, 8},
		{8, 8, 1, 4, true, 8},
	} {
		c := attnChunks(tc.heads, tc.kvHeads, tc.tasks, tc.threads, tc.shared)
		if got := tc.heads / c; got != tc.want || tc.kvHeads%c != 0 {
			t.Errorf("%d heads (%d kv), %d tasks, %d threads, shared %v: %d chunks of %d heads; want chunks of %d, a whole number of kv heads",
				tc.heads, tc.kvHeads, tc.tasks, tc.threads, tc.shared, c, got, tc.want)
		}
	}
}
