package cpu

import (
	"fmt"

	"github.com/specgate/specgate/kernels"
)

var (
	_ kernels.TreeAttention = (*Backend)(nil)
	_ kernels.SlotCopier    = (*Backend)(nil)
)

// TreeAttention computes each row as Attention computes the row of length
// Prefix+len(Slots) whose positions are the prefix (through the block
// table) followed by the tree slots in order: the same scores, softmax,
// parts and reduction order, so a draft token gets the bits it would get
// decoded alone at those positions, and verification is exact. A sliding
// window and a soft cap apply as they do to that row. dst may be q.
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
	}
	b.attend(d, qt, kv, layer, a, tree.Rows)
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
