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
	K, V := t.kv.k[t.layer], t.kv.v[t.layer]
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
		// Scores of the prefix first, then of the tree slots; the query is
		// copied out because out may alias it and the tree part is
		// accumulated after the prefix part has been written.
		need := n + m + 2*hd
		if cap(sc.att) < need {
			sc.att = make([]float32, need+need/2)
		}
		s := sc.att[:n+m]
		q := sc.att[n+m : n+m+hd]
		acc := sc.att[n+m+hd : need]
		copy(q, t.q.row(r)[h*hd:(h+1)*hd])
		koff := (h / t.group) * hd

		// Prefix part: max m1, sum z1, unnormalised output in out.
		m1, z1 := float32(math.Inf(-1)), float32(0)
		clear(out)
		if n > 0 {
			for p := 0; p < n; p += bs {
				base := t.slot(row.Table[p/bs]) * w
				for j := p; j < min(n, p+bs); j++ {
					o := base + (j-p)*w + koff
					v := t.scale * dotF32(q, K[o:o+hd])
					s[j] = v
					m1 = max(m1, v)
				}
			}
			for j := range n {
				e := expf(s[j] - m1)
				s[j] = e
				z1 += e
			}
			for p := 0; p < n; p += bs {
				base := t.slot(row.Table[p/bs]) * w
				for j := p; j < min(n, p+bs); j++ {
					o := base + (j-p)*w + koff
					axpy(out, s[j], V[o:o+hd])
				}
			}
		}
		// Tree part: max m2, sum z2, unnormalised output in acc.
		m2, z2 := float32(math.Inf(-1)), float32(0)
		clear(acc)
		if m > 0 {
			ts := s[n:]
			for j, sl := range tr.Slots {
				o := int(sl)*w + koff
				v := t.scale * dotF32(q, K[o:o+hd])
				ts[j] = v
				m2 = max(m2, v)
			}
			for j := range ts {
				e := expf(ts[j] - m2)
				ts[j] = e
				z2 += e
			}
			for j, sl := range tr.Slots {
				o := int(sl)*w + koff
				axpy(acc, ts[j], V[o:o+hd])
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
		s, d := int(m.Src)*w, int(m.Dst)*w
		for l := range kv.spec.Layers {
			copy(kv.k[l][d:d+w], kv.k[l][s:s+w])
			copy(kv.v[l][d:d+w], kv.v[l][s:s+w])
		}
	}
}
