package kernelstest

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/specgate/specgate/kernels"
)

// BatchInvariance checks, bit for bit, that every op gives a row the same
// result whatever else is in its call: each row of a random batch is
// recomputed in random other batches (random size, order, repeats,
// position) and alone, for every weight type, both KV types, attention
// rows of random lengths (long ones included, which a backend may split
// into parts) and random draft trees, whose rows must equal the causal
// rows over the same positions. A request's tokens then never depend on
// batching or speculation. Run it with a few seeds; each call takes well
// under a second on a CPU.
//
// It is separate from Run: a backend may be correct within tolerance yet
// not batch-invariant.
func BatchInvariance(t *testing.T, b kernels.Backend, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	t.Run("MatMul", func(t *testing.T) { invMatMul(t, b, r) })
	t.Run("RowOps", func(t *testing.T) { invRowOps(t, b, r) })
	for _, dt := range KVTypes {
		if !kernels.SupportsKV(b, dt) {
			continue
		}
		t.Run(fmt.Sprintf("Attention/%v", dt), func(t *testing.T) { invAttention(t, b, r, dt) })
	}
}

// batches returns random compositions of rows [0, n): every row alone,
// then mixes of random size with repeats, in random order.
func batches(r *rand.Rand, n, mixes int) [][]int {
	var out [][]int
	for i := range n {
		out = append(out, []int{i})
	}
	for range mixes {
		m := 1 + r.IntN(2*n)
		bt := make([]int, m)
		for j := range bt {
			bt[j] = r.IntN(n)
		}
		out = append(out, bt)
	}
	return out
}

// smallBatches returns one random composition of rows [0, n) of each size
// from 2 to 9: the batches of a speculative verification and of a few
// streams, which a backend may give kernels of their own.
func smallBatches(r *rand.Rand, n int) [][]int {
	var out [][]int
	for m := 2; m <= 9; m++ {
		bt := make([]int, m)
		for j := range bt {
			bt[j] = r.IntN(n)
		}
		out = append(out, bt)
	}
	return out
}

// pick gathers rows idx of vals (rows of width w).
func pick(vals []float32, w int, idx []int) []float32 {
	out := make([]float32, 0, len(idx)*w)
	for _, i := range idx {
		out = append(out, vals[i*w:(i+1)*w]...)
	}
	return out
}

// sameRows reports the first row of have (rows idx of want, width w) whose
// bits differ, or -1.
func sameRows(have, want []float32, w int, idx []int) int {
	for j, i := range idx {
		h, x := have[j*w:(j+1)*w], want[i*w:(i+1)*w]
		for c := range h {
			if math.Float32bits(h[c]) != math.Float32bits(x[c]) && !(h[c] != h[c] && x[c] != x[c]) {
				return j
			}
		}
	}
	return -1
}

func invMatMul(t *testing.T, b kernels.Backend, r *rand.Rand) {
	for _, dt := range weightTypes(b) {
		for trial := range 3 {
			k := max(kernels.QK, dt.BlockElems()) * (1 + r.IntN(24*kernels.QK/max(kernels.QK, dt.BlockElems())))
			if dt.BlockElems() == 1 && trial == 1 {
				k = 1 + r.IntN(300) // F32 tails
			}
			if dt.BlockElems() == 1 && trial == 2 {
				k = 512 * (1 + r.IntN(3)) // rows a power-of-two-ish stride apart, which a backend may pack
			}
			m := 1 + r.IntN(160)
			n := 1 + r.IntN(40)
			w, _ := weights(t, b, dt, m, k, randFloats(r, m*k, 0.5))
			xs := randFloats(r, n*k, 2)
			mm := func(idx []int) []float32 {
				x := upload(b, len(idx), k, pick(xs, k, idx))
				d := b.Alloc(len(idx), m)
				b.MatMul(d, x, w)
				return download(b, d)
			}
			all := make([]int, n)
			for i := range all {
				all[i] = i
			}
			ref := mm(all)
			bts := batches(r, n, 6)
			if trial == 0 {
				bts = append(bts, smallBatches(r, n)...)
			}
			for _, bt := range bts {
				if j := sameRows(mm(bt), ref, m, bt); j >= 0 {
					t.Fatalf("%v %d×%d: row %d in a batch of %d differs from it in the batch of %d", dt, m, k, bt[j], len(bt), n)
				}
			}
			many, ok := b.(kernels.MatMulMany)
			if !ok {
				continue
			}
			// Weights fused in one call, a whole number of tiles each, as
			// a model's q, k, v are (float weights, any number of rows).
			m2 := 4 * (1 + r.IntN(20))
			w2, _ := weights(t, b, dt, m2, k, randFloats(r, m2*k, 0.5))
			bt := batches(r, n, 1)[n]
			x := upload(b, len(bt), k, pick(xs, k, bt))
			d1, d2 := b.Alloc(len(bt), m), b.Alloc(len(bt), m2)
			if m%4 == 0 || dt.BlockElems() == 1 {
				many.MatMulMany([]kernels.Tensor{d1, d2}, x, []kernels.Tensor{w, w2})
			} else {
				b.MatMul(d1, x, w)
				many.MatMulMany([]kernels.Tensor{d2}, x, []kernels.Tensor{w2})
			}
			if j := sameRows(download(b, d1), ref, m, bt); j >= 0 {
				t.Fatalf("%v: MatMulMany row %d differs from MatMul", dt, bt[j])
			}
			for j, i := range bt {
				one := upload(b, 1, k, xs[i*k:(i+1)*k])
				d := b.Alloc(1, m2)
				b.MatMul(d, one, w2)
				if sameRows(download(b, d2)[j*m2:(j+1)*m2], download(b, d), m2, []int{0}) >= 0 {
					t.Fatalf("%v: MatMulMany's second weight, row %d, differs from MatMul alone", dt, i)
				}
			}
		}
	}
}

// invRowOps checks the per-row ops: RMSNorm, SwiGLU, Add, AddBias, RoPE
// (at random positions).
func invRowOps(t *testing.T, b kernels.Backend, r *rand.Rand) {
	const heads, hd = 4, 32
	k := heads * hd
	n := 1 + r.IntN(24)
	xs, ys := randFloats(r, n*k, 3), randFloats(r, n*k, 3)
	pos := make([]int32, n)
	for i := range pos {
		pos[i] = int32(r.IntN(5000))
	}
	norm, _ := weights(t, b, kernels.F32, 1, k, randFloats(r, k, 1))
	bias := upload(b, 1, k, randFloats(r, k, 1))
	rope := kernels.RoPE{HeadDim: hd}
	ops := func(idx []int) []float32 {
		x, y := upload(b, len(idx), k, pick(xs, k, idx)), upload(b, len(idx), k, pick(ys, k, idx))
		d := b.Alloc(len(idx), k)
		var out []float32
		b.RMSNorm(d, x, norm, 1e-5)
		out = append(out, download(b, d)...)
		b.SwiGLU(d, x, y)
		out = append(out, download(b, d)...)
		b.Add(d, x, y)
		b.AddBias(d, bias)
		out = append(out, download(b, d)...)
		p := make([]int32, len(idx))
		for j, i := range idx {
			p[j] = pos[i]
		}
		b.RoPE(x, p, rope)
		return append(out, download(b, x)...)
	}
	all := make([]int, n)
	for i := range all {
		all[i] = i
	}
	ref := ops(all)
	for _, bt := range batches(r, n, 4) {
		have := ops(bt)
		for o, name := range []string{"RMSNorm", "SwiGLU", "Add+AddBias", "RoPE"} {
			if j := sameRows(have[o*len(bt)*k:(o+1)*len(bt)*k], ref[o*n*k:(o+1)*n*k], k, bt); j >= 0 {
				t.Fatalf("%s: row %d in a batch of %d differs from it in the batch of %d", name, bt[j], len(bt), n)
			}
		}
	}
}

// invAttention checks Attention rows (causal rows of random lengths over a
// few sequences) across batches, and TreeAttention rows of random trees
// against the causal rows over the same positions.
func invAttention(t *testing.T, b kernels.Backend, r *rand.Rand, dt kernels.DType) {
	shapes := []struct{ heads, kvHeads, hd, bs int }{{4, 4, 16, 4}, {8, 2, 32, 16}, {6, 3, 8, 16}}
	g := shapes[r.IntN(len(shapes))]
	lens := []int{1 + r.IntN(40), 1 + r.IntN(300), 250 + r.IntN(400)}
	blocks := 0
	for _, n := range lens {
		blocks += (n+g.bs-1)/g.bs + 1
	}
	spec := kernels.KVSpec{Layers: 1, Blocks: blocks, BlockSize: g.bs, Width: g.kvHeads * g.hd, DType: dt}
	f := fillKV(t, b, r, spec, 0, lens)
	qw := g.heads * g.hd
	// Query rows: random causal lengths within the sequences.
	var rows []kernels.AttnRow
	var seqOf []int
	for range 3 + r.IntN(12) {
		s := r.IntN(len(lens))
		rows = append(rows, kernels.AttnRow{Table: f.rows[s].Table, Len: int32(1 + r.IntN(lens[s]))})
		seqOf = append(seqOf, s)
	}
	n := len(rows)
	qs := randFloats(r, n*qw, 2)
	attend := func(idx []int) []float32 {
		a := kernels.Attn{Heads: g.heads, KVHeads: g.kvHeads, HeadDim: g.hd}
		for _, i := range idx {
			a.Rows = append(a.Rows, rows[i])
		}
		q := upload(b, len(idx), qw, pick(qs, qw, idx))
		d := b.Alloc(len(idx), qw)
		b.Attention(d, q, f.cache, 0, a)
		return download(b, d)
	}
	all := make([]int, n)
	for i := range all {
		all[i] = i
	}
	ref := attend(all)
	for _, bt := range batches(r, n, 6) {
		if j := sameRows(attend(bt), ref, qw, bt); j >= 0 {
			row := rows[bt[j]]
			t.Fatalf("row %d (length %d) in a batch of %d differs from it in the batch of %d", bt[j], row.Len, len(bt), n)
		}
	}
	ta, ok := b.(kernels.TreeAttention)
	if !ok {
		return
	}
	// A draft tree over each query row: the row's last d positions are
	// tree slots (its ancestors and itself), the rest its prefix. Rows
	// of one sequence with one prefix length share a table, as a
	// speculated sequence's draft tokens do, and the tree rows are mixed
	// in random order.
	slotOf := func(s, p int) int32 {
		return f.rows[s].Table[p/g.bs]*int32(g.bs) + int32(p%g.bs)
	}
	a := kernels.Attn{Heads: g.heads, KVHeads: g.kvHeads, HeadDim: g.hd}
	var tm kernels.TreeMask
	order := r.Perm(n)
	for _, i := range order {
		s, ln := seqOf[i], int(rows[i].Len)
		depth := r.IntN(min(ln, 9) + 1)
		tr := kernels.TreeRow{Prefix: int32(ln - depth)}
		for p := ln - depth; p < ln; p++ {
			tr.Slots = append(tr.Slots, slotOf(s, p))
		}
		a.Rows = append(a.Rows, kernels.AttnRow{Table: f.rows[s].Table, Len: 1})
		tm.Rows = append(tm.Rows, tr)
	}
	q := upload(b, n, qw, pick(qs, qw, order))
	d := b.Alloc(n, qw)
	ta.TreeAttention(d, q, f.cache, 0, a, tm)
	if j := sameRows(download(b, d), ref, qw, order); j >= 0 {
		i := order[j]
		t.Fatalf("tree row %d (prefix %d, %d tree slots) differs from the causal row of length %d",
			i, tm.Rows[j].Prefix, len(tm.Rows[j].Slots), rows[i].Len)
	}
}
