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
	group  int
	scale  float32
}

// TreeAttention computes each row's attention over its prefix (through the
// block table, unmasked) and over its explicit tree slots, as two partial
// softmaxes merged by their log-sum-exp: the prefix part is the same
// streaming work as Attention, and the tree part is a handful of scattered
// slots. dst may be q. Work is split over (row, head) pairs.
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
	t := &treeTask{b: b, dst: d, q: qt, kv: kv, layer: layer, a: a, tree: tree, group: a.Heads / a.KVHeads, scale: scale}
	grain := 1
	if work*a.Heads*a.HeadDim < 1<<14 {
		grain = len(a.Rows) * a.Heads
	}
	b.pool.run(t, len(a.Rows)*a.Heads, grain)
}

func (t *treeTask) run(wk, lo, hi int) {
	a := &t.a
	hd, bs, w := a.HeadDim, t.kv.spec.BlockSize, t.kv.spec.Width
	sc := &t.b.scratch[wk]
	for item := lo; item < hi; item++ {
		r, h := item/a.Heads, item%a.Heads
		row, tr := a.Rows[r], t.tree.Rows[r]
		n, m := int(tr.Prefix), len(tr.Slots)
		out := t.dst.row(r)[h*hd : (h+1)*hd]
		if n+m == 0 {
			clear(out)
			continue
		}
		// Scores of the prefix first, then of the tree slots, each padded
		// with -Inf to whole stretches of 8 for softmaxPos; the query is
		// copied out (times the scale) because out may alias it and the
		// tree part is accumulated after the prefix part has been written.
		n8, m8 := (n+7)&^7, (m+7)&^7
		need := n8 + m8 + 2*hd + softmaxScratch(1)
		if cap(sc.att) < need {
			sc.att = make([]float32, need+need/2)
		}
		s, ts := sc.att[:n8], sc.att[n8:n8+m8]
		q := sc.att[n8+m8 : n8+m8+hd]
		acc := sc.att[n8+m8+hd : n8+m8+2*hd]
		soft := sc.att[n8+m8+2*hd : need]
		for i, x := range t.q.row(r)[h*hd : (h+1)*hd] {
			q[i] = x * t.scale
		}
		koff := (h / t.group) * hd

		// Prefix part: max m1, sum z1, unnormalised output in out.
		m1, z1 := negInf, float32(0)
		clear(out)
		if n > 0 {
			for p := 0; p < n; p += bs {
				t.dots(s[p:min(n, p+bs)], q, t.slot(row.Table[p/bs])*w+koff)
			}
			m1, z1 = t.softmax(s, n, soft)
			for p := 0; p < n; p += bs {
				t.axpys(out, s[p:min(n, p+bs)], t.slot(row.Table[p/bs])*w+koff)
			}
		}
		// Tree part: max m2, sum z2, unnormalised output in acc.
		m2, z2 := negInf, float32(0)
		clear(acc)
		if m > 0 {
			for j, sl := range tr.Slots {
				t.dots(ts[j:j+1], q, int(sl)*w+koff)
			}
			m2, z2 = t.softmax(ts, m, soft)
			for j, sl := range tr.Slots {
				t.axpys(acc, ts[j:j+1], int(sl)*w+koff)
			}
		}
		// Merge: rescale both parts to the common maximum. A part that
		// saw nothing has max -Inf and weight 0.
		mx := max(m1, m2)
		var f1, f2 float32
		if n > 0 {
			f1 = expf(m1 - mx)
		}
		if m > 0 {
			f2 = expf(m2 - mx)
		}
		inv := 1 / (z1*f1 + z2*f2)
		for i := range out {
			out[i] = (out[i]*f1 + acc[i]*f2) * inv
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
