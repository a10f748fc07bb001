package kernels

import "math"

// TreeRow is one query row's view of the cache in a tree attention call: a
// causal prefix reached through the row's block table, and an explicit list
// of further slots. For a token of a speculative draft tree the prefix is
// its sequence's committed tokens and Slots hold the tree tokens it may see
// (its ancestors and itself), wherever in the cache they were written.
type TreeRow struct {
	// Prefix is how many positions (from 0) of the row's AttnRow.Table the
	// row attends to, unmasked.
	Prefix int32
	// Slots are further KV slots (block*BlockSize + offset) the row attends
	// to, in any order. A plain causal row has none.
	Slots []int32
}

// TreeMask gives every query row of an attention call its TreeRow; Rows has
// one entry per row of the query tensor.
type TreeMask struct {
	Rows []TreeRow
}

// TreeAttention is an optional Backend op: attention in which each query row
// sees a prefix of its sequence plus an explicit set of slots, so all tokens
// of a draft tree are verified in one forward pass. Callers check for it;
// without it they can only verify chains (a chain's tree mask is the plain
// causal mask, which Attention computes).
//
// For each query row r and head h, with K and V the cache rows of layer at
// the positions [0, tree.Rows[r].Prefix) of a.Rows[r].Table followed by the
// slots tree.Rows[r].Slots (kv head h / (Heads/KVHeads)):
//
//	dst[r][h] = softmax(Scale · q[r][h]·Kᵀ) · V
//
// exactly as TreeAttentionRef computes it; a.Rows[r].Len is not used. A row
// that sees nothing gets zeros. On a backend that is an AttnVariants,
// a.SoftCap caps the scores and a.Window limits the prefix: a row's query
// sits at position Prefix + len(Slots) − 1, so it sees prefix positions
// from Prefix + len(Slots) − Window on; a row as deep as the window or
// deeper is outside the contract. dst may be q. Implementations typically
// compute the prefix and the tree part separately and merge the two partial
// softmaxes by their log-sum-exp, which is the same math.
type TreeAttention interface {
	TreeAttention(dst, q Tensor, c KVCache, layer int, a Attn, tree TreeMask)
}

// SlotCopy moves the keys and values of one token slot to another.
type SlotCopy struct{ Src, Dst int32 }

// SlotCopier is an optional Backend op that copies single token slots
// (every layer, K and V) within one cache: it compacts the accepted tokens
// of a draft tree from the scratch slots they were verified in to their
// final positions. Moves apply in order, as CopySlotsRef does, so a move may
// read a slot an earlier move wrote.
type SlotCopier interface {
	CopySlots(c KVCache, moves []SlotCopy)
}

// TreeAttentionRef is the reference math of TreeAttention on host memory. k
// and v hold one layer of a cache, slot-major (slot s at s·Width, Width =
// KVHeads·HeadDim); q holds len(a.Rows) rows of Heads·HeadDim. It returns
// the attention output, one row per query row, computed in float64 as one
// masked softmax over the prefix and the tree slots together.
func TreeAttentionRef(q, k, v []float32, blockSize int, a Attn, tree TreeMask) []float64 {
	scale := float64(a.Scale)
	if scale == 0 {
		scale = 1 / math.Sqrt(float64(a.HeadDim))
	}
	hd, w, qw := a.HeadDim, a.KVHeads*a.HeadDim, a.Heads*a.HeadDim
	out := make([]float64, len(a.Rows)*qw)
	for r, row := range a.Rows {
		tr := tree.Rows[r]
		slots := make([]int, 0, int(tr.Prefix)+len(tr.Slots))
		lo := 0
		if a.Window > 0 {
			lo = max(0, int(tr.Prefix)+len(tr.Slots)-int(a.Window))
		}
		for p := lo; p < int(tr.Prefix); p++ {
			slots = append(slots, int(row.Table[p/blockSize])*blockSize+p%blockSize)
		}
		for _, s := range tr.Slots {
			slots = append(slots, int(s))
		}
		if len(slots) == 0 {
			continue
		}
		s := make([]float64, len(slots))
		for h := range a.Heads {
			kh := h / (a.Heads / a.KVHeads)
			qh := q[r*qw+h*hd : r*qw+(h+1)*hd]
			mx := math.Inf(-1)
			for j, sl := range slots {
				var d float64
				for i := range hd {
					d += float64(qh[i]) * float64(k[sl*w+kh*hd+i])
				}
				s[j] = d * scale
				if c := float64(a.SoftCap); c > 0 {
					s[j] = c * math.Tanh(s[j]/c)
				}
				mx = max(mx, s[j])
			}
			var sum float64
			for j := range s {
				s[j] = math.Exp(s[j] - mx)
				sum += s[j]
			}
			o := out[r*qw+h*hd : r*qw+(h+1)*hd]
			for j, sl := range slots {
				for i := range hd {
					o[i] += s[j] / sum * float64(v[sl*w+kh*hd+i])
				}
			}
		}
	}
	return out
}

// CopySlotsRef is the reference math of SlotCopier.CopySlots on host
// memory: k[l] and v[l] hold layer l slot-major, width floats a slot; each
// move, in order, copies slot Src to slot Dst in every layer.
func CopySlotsRef(k, v [][]float32, width int, moves []SlotCopy) {
	for _, m := range moves {
		s, d := int(m.Src)*width, int(m.Dst)*width
		for l := range k {
			copy(k[l][d:d+width], k[l][s:s+width])
			copy(v[l][d:d+width], v[l][s:s+width])
		}
	}
}
