package cpu

import (
	"fmt"
	"math"

	"github.com/specgate/specgate/kernels"
)

var (
	_ kernels.TreeAttention = (*Backend)(nil)
	_ kernels.SlotCopier    = (*Backend)(nil)
)

type treeTask struct {
	b      *Backend
	dst, q *Tensor
	kv     *KV
	layer  int
	a      kernels.Attn
	tree   kernels.TreeMask
	group  int // query heads per kv head
	chunk  int // query heads per task: a whole number of groups
	chunks int // tasks per row group
	scale  float32
	rows   []treeRows
}

// treeRows is a run of consecutive rows [r0, r1) with one prefix: the same
// block table and prefix length, as a speculated sequence's draft tokens
// have.
type treeRows struct{ r0, r1 int }

// TreeAttention computes each row's attention over its prefix (through the
// block table, unmasked) and over its explicit tree slots, as two partial
// softmaxes merged by their log-sum-exp: the prefix part is the same
// streaming work as Attention, and the tree part is a handful of scattered
// slots. dst may be q.
//
// Rows that share a prefix (a sequence's draft tokens, verified together)
// read it once: their queries become extra heads of each kv head's group
// (head-major, rows inner), so the grouped-query kernels score every
// row's heads against a slot as they stream it. Work is split over (run of
// rows, chunk of heads).
func (b *Backend) TreeAttention(dst, q kernels.Tensor, c kernels.KVCache, layer int, a kernels.Attn, tree kernels.TreeMask) {
	b.live()
	d, qt := writable(dst, "TreeAttention"), f32Tensor(q, "TreeAttention")
	kv := kvCache(c, "TreeAttention")
	kv.layer("TreeAttention", layer)
	sameShape("TreeAttention", d, qt)
	if a.Heads <= 0 || a.KVHeads <= 0 || a.HeadDim <= 0 || a.Heads%a.KVHeads != 0 ||
		qt.cols != a.Heads*a.HeadDim || kv.spec.Width != a.KVHeads*a.HeadDim ||
		len(a.Rows) != qt.rows || len(tree.Rows) != qt.rows {
		panic(fmt.Sprintf("cpu: TreeAttention: %d heads, %d kv heads of %d for q %d×%d, cache width %d, %d rows, %d tree rows",
			a.Heads, a.KVHeads, a.HeadDim, qt.rows, qt.cols, kv.spec.Width, len(a.Rows), len(tree.Rows)))
	}
	nslots := kv.spec.Blocks * kv.spec.BlockSize
	work := 0
	for i, r := range a.Rows {
		tr := tree.Rows[i]
		if tr.Prefix < 0 || int(tr.Prefix) > len(r.Table)*kv.spec.BlockSize {
			panic(fmt.Sprintf("cpu: TreeAttention: row %d has prefix %d and %d blocks of %d", i, tr.Prefix, len(r.Table), kv.spec.BlockSize))
		}
		for _, s := range tr.Slots {
			if s < 0 || int(s) >= nslots {
				panic(fmt.Sprintf("cpu: TreeAttention: row %d names slot %d of %d", i, s, nslots))
			}
		}
		work += int(tr.Prefix) + len(tr.Slots)
	}
	scale := a.Scale
	if scale == 0 {
		scale = float32(1 / math.Sqrt(float64(a.HeadDim)))
	}
	runs := b.treeRuns[:0]
	for r := range a.Rows {
		if n := len(runs); n > 0 && samePrefix(a.Rows[runs[n-1].r0], tree.Rows[runs[n-1].r0], a.Rows[r], tree.Rows[r]) {
			runs[n-1].r1 = r + 1
			continue
		}
		runs = append(runs, treeRows{r, r + 1})
	}
	b.treeRuns = runs
	// As in Attention: the fewest chunks of kv heads that give about two
	// tasks per worker.
	chunks := 1
	for chunks < a.KVHeads && len(runs)*chunks < 2*b.threads {
		chunks++
		for a.KVHeads%chunks != 0 {
			chunks++
		}
	}
	t := &treeTask{b: b, dst: d, q: qt, kv: kv, layer: layer, a: a, tree: tree, group: a.Heads / a.KVHeads,
		chunk: a.Heads / chunks, chunks: chunks, scale: scale, rows: runs}
	grain := 1
	if work*a.Heads*a.HeadDim < 1<<14 {
		grain = len(runs) * chunks
	}
	b.pool.run(t, len(runs)*chunks, grain)
}

// samePrefix reports whether two rows attend over the same prefix: the
// same block table (one backing array) and prefix length.
func samePrefix(a kernels.AttnRow, at kernels.TreeRow, b kernels.AttnRow, bt kernels.TreeRow) bool {
	if at.Prefix != bt.Prefix || len(a.Table) != len(b.Table) {
		return false
	}
	return at.Prefix == 0 || len(a.Table) > 0 && &a.Table[0] == &b.Table[0]
}

func (t *treeTask) run(wk, lo, hi int) {
	a := &t.a
	hd, bs, w := a.HeadDim, t.kv.spec.BlockSize, t.kv.spec.Width
	f16 := t.kv.f16()
	sc := &t.b.scratch[wk]
	for item := lo; item < hi; item++ {
		run, h0 := t.rows[item/t.chunks], (item%t.chunks)*t.chunk
		nr, nh := run.r1-run.r0, t.chunk
		nv := nh * nr // the run's (head, row) pairs: virtual heads
		gv := t.group * nr
		row := a.Rows[run.r0]
		n := int(t.tree.Rows[run.r0].Prefix)
		m8 := 0
		for r := run.r0; r < run.r1; r++ {
			m8 = max(m8, (len(t.tree.Rows[r].Slots)+7)&^7)
		}
		// Scores of the prefix (position-major, nv per position) and of
		// one row's tree slots, each padded with -Inf to whole stretches
		// of 8 for softmaxPos; the queries are copied out (times the
		// scale) because dst may alias q.
		n8 := (n + 7) &^ 7
		need := n8*nv + m8 + 2*nv*hd + hd + softmaxScratch(nv)
		if cap(sc.att) < need {
			sc.att = make([]float32, need+need/2)
		}
		at := sc.att[:need]
		s, at := at[:n8*nv], at[n8*nv:]
		ts, at := at[:m8], at[m8:]
		qs, at := at[:nv*hd], at[nv*hd:]
		po, at := at[:nv*hd], at[nv*hd:]
		acc, soft := at[:hd], at[hd:]
		for h := range nh {
			for r := range nr {
				q := t.q.row(run.r0 + r)[(h0+h)*hd : (h0+h+1)*hd]
				v := qs[(h*nr+r)*hd : (h*nr+r+1)*hd]
				for i, x := range q {
					v[i] = x * t.scale
				}
			}
		}

		// Prefix part, every row at once: maxima, sums and unnormalised
		// outputs, one per virtual head.
		var mx, sum []float32
		clear(po)
		if n > 0 {
			kv0 := (h0 / t.group) * hd
			for p := 0; p < n; p += bs {
				base, e := t.slot(row.Table[p/bs])*w, min(n, p+bs)
				if f16 {
					dotsF16(qs, t.kv.k16[t.layer][base+kv0:base+(e-p)*w], hd, gv, w, s[p*nv:e*nv])
					continue
				}
				for j := p; j < e; j++ {
					o := base + (j-p)*w + kv0
					dotsF32(qs, t.kv.k[t.layer][o:base+(j-p+1)*w], hd, gv, s[j*nv:(j+1)*nv])
				}
			}
			if a.SoftCap > 0 {
				kernels.SoftCapRef(s[:n*nv], a.SoftCap)
			}
			if a.Window > 0 {
				t.window(s, run, n, nv)
			}
			for i := n * nv; i < len(s); i++ {
				s[i] = negInf
			}
			mx, sum = softmaxPos(s, nv, soft)
			for p := 0; p < n; p += bs {
				base, e := t.slot(row.Table[p/bs])*w, min(n, p+bs)
				if f16 {
					axpysF16(po, s[p*nv:e*nv], t.kv.v16[t.layer][base+kv0:base+(e-p)*w], hd, gv, w)
					continue
				}
				for j := p; j < e; j++ {
					o := base + (j-p)*w + kv0
					axpysF32(po, s[j*nv:(j+1)*nv], t.kv.v[t.layer][o:base+(j-p+1)*w], hd, gv)
				}
			}
		}

		for h := range nh {
			koff := ((h0 + h) / t.group) * hd
			for r := range nr {
				v := h*nr + r
				tr := t.tree.Rows[run.r0+r]
				m := len(tr.Slots)
				out := t.dst.row(run.r0 + r)[(h0+h)*hd : (h0+h+1)*hd]
				if n+m == 0 {
					clear(out)
					continue
				}
				m1, z1 := negInf, float32(0)
				if n > 0 {
					m1, z1 = mx[v], sum[v]
				}
				// Tree part: max m2, sum z2, unnormalised output in acc.
				m2, z2 := negInf, float32(0)
				clear(acc)
				if m > 0 {
					q := qs[v*hd : (v+1)*hd]
					for j, sl := range tr.Slots {
						t.dots(ts[j:j+1], q, int(sl)*w+koff)
					}
					if a.SoftCap > 0 {
						kernels.SoftCapRef(ts[:m], a.SoftCap)
					}
					m2, z2 = t.softmax(ts[:(m+7)&^7], m, soft)
					for j, sl := range tr.Slots {
						t.axpys(acc, ts[j:j+1], int(sl)*w+koff)
					}
				}
				// Merge: rescale both parts to the common maximum. A part
				// that saw nothing has max -Inf and weight 0.
				mm := max(m1, m2)
				var f1, f2 float32
				if n > 0 {
					f1 = expf(m1 - mm)
				}
				if m > 0 {
					f2 = expf(m2 - mm)
				}
				inv := 1 / (z1*f1 + z2*f2)
				pv := po[v*hd : (v+1)*hd]
				for i := range out {
					out[i] = (pv[i]*f1 + acc[i]*f2) * inv
				}
			}
		}
	}
}

// dots sets out[j] = q·k for the head-wide keys of len(out) consecutive
// slots, the first at element o of the layer.
func (t *treeTask) dots(out, q []float32, o int) {
	hd, w := len(q), t.kv.spec.Width
	if t.kv.f16() {
		dotsF16(q, t.kv.k16[t.layer][o:o+(len(out)-1)*w+hd], hd, 1, w, out)
		return
	}
	K := t.kv.k[t.layer]
	for j := range out {
		out[j] = dotF32(q, K[o+j*w:o+j*w+hd])
	}
}

// axpys adds to y the head-wide values of len(a) consecutive slots, the
// first at element o of the layer, weighted by a, in order.
func (t *treeTask) axpys(y, a []float32, o int) {
	hd, w := len(y), t.kv.spec.Width
	if t.kv.f16() {
		axpysF16(y, a, t.kv.v16[t.layer][o:o+(len(a)-1)*w+hd], hd, 1, w)
		return
	}
	V := t.kv.v[t.layer]
	for j, x := range a {
		axpy(y, x, V[o+j*w:o+j*w+hd])
	}
}

// softmax exponentiates the n scores of s (padded to len(s), a multiple of
// 8, with -Inf) against their maximum, which it returns with the sum.
func (t *treeTask) softmax(s []float32, n int, scratch []float32) (mx, sum float32) {
	for i := n; i < len(s); i++ {
		s[i] = negInf
	}
	m, z := softmaxPos(s, 1, scratch)
	return m[0], z[0]
}

func (t *treeTask) slot(blk int32) int {
	if blk < 0 || int(blk) >= t.kv.spec.Blocks {
		panic(fmt.Sprintf("cpu: TreeAttention: block %d of %d", blk, t.kv.spec.Blocks))
	}
	return int(blk) * t.kv.spec.BlockSize
}

// CopySlots copies single token slots, every layer, K and V, in order.
func (b *Backend) CopySlots(c kernels.KVCache, moves []kernels.SlotCopy) {
	b.live()
	kv := kvCache(c, "CopySlots")
	w, nslots := kv.spec.Width, kv.spec.Blocks*kv.spec.BlockSize
	for _, m := range moves {
		if m.Src < 0 || int(m.Src) >= nslots || m.Dst < 0 || int(m.Dst) >= nslots {
			panic(fmt.Sprintf("cpu: CopySlots: slot %d → %d of %d", m.Src, m.Dst, nslots))
		}
		if m.Src == m.Dst {
			continue
		}
		for l := range kv.spec.Layers {
			kv.copyElems(l, int(m.Dst)*w, kv, int(m.Src)*w, w)
		}
	}
}

// window masks the prefix scores s (n positions × nv virtual heads, head
// h of row r at h·nr+r) outside each row's sliding window. A tree row's
// query sits at position Prefix + len(Slots) − 1 (its slots are its
// ancestors and itself), so it sees prefix positions from
// Prefix + len(Slots) − Window on. A row whose window holds no prefix
// position keeps its nearest one, so its softmax stays defined: the model
// never builds such a tree (it refuses trees deeper than the window).
func (t *treeTask) window(s []float32, run treeRows, n, nv int) {
	nr := run.r1 - run.r0
	for r := range nr {
		lo := n + len(t.tree.Rows[run.r0+r].Slots) - int(t.a.Window)
		lo = min(lo, n-1)
		for j := 0; j < lo; j++ {
			for h := range nv / nr {
				s[j*nv+h*nr+r] = negInf
			}
		}
	}
}
