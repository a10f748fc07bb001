package cpu

import (
	"fmt"
	"math"

	"github.com/specgate/specgate/kernels"
)

// KV is the CPU backend's paged KV cache. For each layer, K and V are one
// slice each of Blocks·BlockSize slots of Width elements; slot s starts at
// s·Width, so a block's slots are contiguous. Elements are float32 (k, v)
// or IEEE half bits (k16, v16), as the spec's DType says; the other pair is
// nil.
type KV struct {
	spec     kernels.KVSpec
	k, v     [][]float32
	k16, v16 [][]uint16
}

var (
	_ kernels.KVCache = (*KV)(nil)
	_ kernels.KVTyper = (*Backend)(nil)
)

// Spec returns the cache's shape.
func (c *KV) Spec() kernels.KVSpec { return c.spec }

// f16 reports whether the cache stores halves.
func (c *KV) f16() bool { return c.spec.DType == kernels.F16 }

// KVTypes lists the element types NewKV stores: F16 costs a conversion in
// StoreKV and one per element read (VCVTPH2PS, nearly free next to the
// memory it saves), and halves what attention streams.
func (b *Backend) KVTypes() []kernels.DType { return []kernels.DType{kernels.F32, kernels.F16} }

// NewKV allocates a zeroed cache.
func (b *Backend) NewKV(s kernels.KVSpec) (kernels.KVCache, error) {
	if s.Layers <= 0 || s.Blocks <= 0 || s.BlockSize <= 0 || s.Width <= 0 {
		return nil, fmt.Errorf("cpu: bad KV spec %+v", s)
	}
	if s.DType != kernels.F32 && s.DType != kernels.F16 {
		return nil, fmt.Errorf("cpu: KV cache of %v elements: the cpu backend stores F32 and F16", s.DType)
	}
	n := s.Blocks * s.BlockSize * s.Width
	if n/s.Width/s.BlockSize != s.Blocks {
		return nil, fmt.Errorf("cpu: KV spec %+v overflows", s)
	}
	c := &KV{spec: s}
	if c.f16() {
		c.k16, c.v16 = make([][]uint16, s.Layers), make([][]uint16, s.Layers)
		for l := range s.Layers {
			c.k16[l] = make([]uint16, n)
			c.v16[l] = make([]uint16, n)
		}
		return c, nil
	}
	c.k, c.v = make([][]float32, s.Layers), make([][]float32, s.Layers)
	for l := range s.Layers {
		c.k[l] = make([]float32, n)
		c.v[l] = make([]float32, n)
	}
	return c, nil
}

func kvCache(c kernels.KVCache, op string) *KV {
	kv, ok := c.(*KV)
	if !ok || kv == nil {
		panic(fmt.Sprintf("cpu: %s: cache %T is not a cpu cache", op, c))
	}
	return kv
}

func (c *KV) layer(op string, l int) {
	if l < 0 || l >= c.spec.Layers {
		panic(fmt.Sprintf("cpu: %s: layer %d of %d", op, l, c.spec.Layers))
	}
}

// copyElems copies n elements from offset src to offset dst of layer l's K
// and V in c, from those of s (which may be c).
func (c *KV) copyElems(l, dst int, s *KV, src, n int) {
	if c.f16() {
		copy(c.k16[l][dst:dst+n], s.k16[l][src:src+n])
		copy(c.v16[l][dst:dst+n], s.v16[l][src:src+n])
		return
	}
	copy(c.k[l][dst:dst+n], s.k[l][src:src+n])
	copy(c.v[l][dst:dst+n], s.v[l][src:src+n])
}

// StoreKV writes row r of k and v into slot slots[r] of layer, rounded to
// the nearest half (ties to even) in an F16 cache. A negative slot skips
// its row (a padding row).
func (b *Backend) StoreKV(c kernels.KVCache, layer int, k, v kernels.Tensor, slots []int32) {
	b.live()
	kv := kvCache(c, "StoreKV")
	kv.layer("StoreKV", layer)
	kt, vt := f32Tensor(k, "StoreKV"), f32Tensor(v, "StoreKV")
	w := kv.spec.Width
	if kt.cols != w || vt.cols != w || kt.rows != len(slots) || vt.rows != len(slots) {
		panic(fmt.Sprintf("cpu: StoreKV: k %d×%d, v %d×%d for %d slots of width %d", kt.rows, kt.cols, vt.rows, vt.cols, len(slots), w))
	}
	nslots := kv.spec.Blocks * kv.spec.BlockSize
	for r, s := range slots {
		if s < 0 {
			continue
		}
		if int(s) >= nslots {
			panic(fmt.Sprintf("cpu: StoreKV: slot %d of %d", s, nslots))
		}
		o := int(s) * w
		if kv.f16() {
			f32ToF16Row(kv.k16[layer][o:o+w], kt.row(r))
			f32ToF16Row(kv.v16[layer][o:o+w], vt.row(r))
			continue
		}
		copy(kv.k[layer][o:o+w], kt.row(r))
		copy(kv.v[layer][o:o+w], vt.row(r))
	}
}

// CopyBlocks copies whole blocks, every layer, K and V, from src to dst
// (which may be the same cache). The caches must store the same type: a
// block moves between tiers unchanged.
func (b *Backend) CopyBlocks(dst, src kernels.KVCache, moves []kernels.BlockCopy) {
	b.live()
	d, s := kvCache(dst, "CopyBlocks"), kvCache(src, "CopyBlocks")
	ds, ss := d.spec, s.spec
	if ds.Layers != ss.Layers || ds.BlockSize != ss.BlockSize || ds.Width != ss.Width || ds.DType != ss.DType {
		panic(fmt.Sprintf("cpu: CopyBlocks between %+v and %+v", ss, ds))
	}
	bw := ds.BlockSize * ds.Width
	for _, m := range moves {
		if m.Src < 0 || int(m.Src) >= ss.Blocks || m.Dst < 0 || int(m.Dst) >= ds.Blocks {
			panic(fmt.Sprintf("cpu: CopyBlocks: block %d → %d, caches have %d and %d", m.Src, m.Dst, ss.Blocks, ds.Blocks))
		}
		for l := range ds.Layers {
			d.copyElems(l, int(m.Dst)*bw, s, int(m.Src)*bw, bw)
		}
	}
}

type attnTask struct {
	b      *Backend
	dst, q *Tensor
	kv     *KV
	layer  int
	a      kernels.Attn
	tree   []kernels.TreeRow // TreeAttention's rows, or nil
	group  int               // query heads per kv head
	chunk  int               // query heads per task: a whole number of groups
	chunks int               // tasks per item
	scale  float32
	items  []attnItem
	// A long row's parts leave their unnormalised outputs (chunk·HeadDim
	// floats a task) in po, and each head's maximum score and sum of
	// exponents in pm and ps (chunk floats a task), for Attention to
	// merge.
	po, pm, ps []float32
}

// attnItem is a run of one row's positions that one task (per chunk of
// heads) attends over.
type attnItem struct {
	r, p0, p1 int
	part      int // the item's index among parts, or -1 for a whole row
	// lo is the row's first position in its sliding window: scores of
	// positions before it are masked. p0 is the block that holds it.
	lo int
}

// attnPart is the most positions (in whole blocks) one task takes of a
// long row. A single long row then spreads over every worker, and each task
// streams whole slots, every head of them, rather than a chunk of heads at
// a slot-width stride: decode attention over a long context is bound by
// how fast the cache streams. The parts' softmaxes are merged by their
// maxima. The split depends on the row's length only, never on the batch,
// so a row's result is the same alone or in any batch.
const attnPart = 256

// Attention computes softmax(Scale·q·Kᵀ)·V for every query row and head over
// the row's block table. dst may be q.
//
// Work is split over (row, chunk of heads). A task walks the row's
// positions once, reading each position's K (then V) for all its heads as
// one contiguous run of the slot, rather than once per head at a
// slot-width stride: decode attention is a stream over the KV cache, and
// this keeps it one.
func (b *Backend) Attention(dst, q kernels.Tensor, c kernels.KVCache, layer int, a kernels.Attn) {
	b.live()
	d, qt := writable(dst, "Attention"), f32Tensor(q, "Attention")
	kv := kvCache(c, "Attention")
	kv.layer("Attention", layer)
	sameShape("Attention", d, qt)
	if a.Heads <= 0 || a.KVHeads <= 0 || a.HeadDim <= 0 || a.Heads%a.KVHeads != 0 ||
		qt.cols != a.Heads*a.HeadDim || kv.spec.Width != a.KVHeads*a.HeadDim || len(a.Rows) != qt.rows {
		panic(fmt.Sprintf("cpu: Attention: %d heads, %d kv heads of %d for q %d×%d, cache width %d, %d rows",
			a.Heads, a.KVHeads, a.HeadDim, qt.rows, qt.cols, kv.spec.Width, len(a.Rows)))
	}
	for i, r := range a.Rows {
		if r.Len < 0 || int(r.Len) > len(r.Table)*kv.spec.BlockSize {
			panic(fmt.Sprintf("cpu: Attention: row %d has length %d and %d blocks of %d", i, r.Len, len(r.Table), kv.spec.BlockSize))
		}
	}
	b.attend(d, qt, kv, layer, a, nil)
}

// attend runs Attention, or TreeAttention when tree is not nil: a tree
// row is the row of length Prefix+len(Slots) whose positions from Prefix
// on are its slots, computed exactly as Attention computes a row, so a
// draft token verified in a tree gets the bits it would get decoded alone.
func (b *Backend) attend(d, qt *Tensor, kv *KV, layer int, a kernels.Attn, tree []kernels.TreeRow) {
	work := 0
	for i := range a.Rows {
		work += rowLen(a, tree, i)
	}
	scale := a.Scale
	if scale == 0 {
		scale = float32(1 / math.Sqrt(float64(a.HeadDim)))
	}
	bs := kv.spec.BlockSize
	span := max(1, attnPart/bs) * bs
	items, parts := b.attnItems[:0], 0
	for r := range a.Rows {
		n, lo := rowLen(a, tree, r), 0
		if a.Window > 0 && n > int(a.Window) {
			lo = n - int(a.Window)
		}
		first := lo / bs * bs
		if n-first <= span {
			items = append(items, attnItem{r: r, p0: first, p1: n, part: -1, lo: lo})
			continue
		}
		for p0 := first; p0 < n; p0 += span {
			items = append(items, attnItem{r: r, p0: p0, p1: min(n, p0+span), part: parts, lo: lo})
			parts++
		}
	}
	b.attnItems = items
	// Enough tasks to keep every worker busy (a single short decode row
	// too), each as wide as possible: split the kv heads into the fewest
	// chunks that give about two tasks per worker.
	group := a.Heads / a.KVHeads
	chunks := 1
	for chunks < a.KVHeads && len(items)*chunks < 2*b.threads {
		chunks++
		for a.KVHeads%chunks != 0 {
			chunks++
		}
	}
	t := attnTask{b: b, dst: d, q: qt, kv: kv, layer: layer, a: a, tree: tree, group: group,
		chunk: a.Heads / chunks, chunks: chunks, scale: scale, items: items}
	if parts > 0 {
		no, nm := parts*a.Heads*a.HeadDim, parts*a.Heads
		if cap(b.attnPart) < no+2*nm {
			b.attnPart = make([]float32, no+2*nm)
		}
		t.po, t.pm, t.ps = b.attnPart[:no], b.attnPart[no:no+nm], b.attnPart[no+nm:no+2*nm]
	}
	b.attn = t
	grain := 1
	if work*a.Heads*a.HeadDim < 1<<14 {
		grain = len(items) * chunks
	}
	b.pool.run(&b.attn, len(items)*chunks, grain)
	if parts > 0 {
		b.attn.merge()
	}
	b.attn = attnTask{}
}

// merge combines each long row's parts: with M the largest of a head's
// part maxima m_p, out = Σ_p e^(m_p−M)·o_p / Σ_p e^(m_p−M)·s_p.
func (t *attnTask) merge() {
	hd, nh := t.a.HeadDim, t.chunk
	for i := 0; i < len(t.items); {
		it := t.items[i]
		if it.part < 0 {
			i++
			continue
		}
		k0 := i
		for i < len(t.items) && t.items[i].r == it.r {
			i++
		}
		orow := t.dst.row(it.r)
		for c := range t.chunks {
			for hh := range nh {
				m := negInf
				for k := k0; k < i; k++ {
					m = max(m, t.pm[(t.items[k].part*t.chunks+c)*nh+hh])
				}
				out := orow[(c*nh+hh)*hd : (c*nh+hh+1)*hd]
				clear(out)
				var den float32
				for k := k0; k < i; k++ {
					j := (t.items[k].part*t.chunks + c) * nh
					wgt := expf(t.pm[j+hh] - m)
					den += wgt * t.ps[j+hh]
					axpy(out, wgt, t.po[(j+hh)*hd:(j+hh+1)*hd])
				}
				inv := 1 / den
				for x := range out {
					out[x] *= inv
				}
			}
		}
	}
}

func (t *attnTask) run(wk, lo, hi int) {
	a := &t.a
	hd, w := a.HeadDim, t.kv.spec.Width
	f16 := t.kv.f16()
	var K, V []float32
	var K16, V16 []uint16
	if f16 {
		K16, V16 = t.kv.k16[t.layer], t.kv.v16[t.layer]
	} else {
		K, V = t.kv.k[t.layer], t.kv.v[t.layer]
	}
	sc := &t.b.scratch[wk]
	for item := lo; item < hi; item++ {
		it, c := t.items[item/t.chunks], item%t.chunks
		r, h0 := it.r, c*t.chunk
		nh := t.chunk
		p0, n := it.p0, it.p1-it.p0 // the item's positions, from p0
		qrow, orow := t.q.row(r), t.dst.row(r)
		if n == 0 {
			clear(orow[h0*hd : (h0+nh)*hd])
			continue
		}
		// s holds the scores, position-major (nh per position, so one
		// call fills a position's scores for the whole chunk), padded
		// with -Inf to whole stretches of 8 positions for softmaxPos; qs
		// is the chunk's query times the scale, which also frees out to
		// overwrite q (dst may be q).
		np := (n + 7) &^ 7
		need := np*nh + nh*hd + softmaxScratch(nh)
		if cap(sc.att) < need {
			sc.att = make([]float32, need+need/2)
		}
		s := sc.att[:np*nh]
		qs := sc.att[np*nh : np*nh+nh*hd]
		soft := sc.att[np*nh+nh*hd : need]
		for i, x := range qrow[h0*hd : (h0+nh)*hd] {
			qs[i] = x * t.scale
		}
		// A run of consecutive slots (a block's, or one tree slot): the
		// F16 kernels take it in one call, the F32 ones one position at a
		// time. Positions (from p0) are indexed from 0 here.
		kv0 := (h0 / t.group) * hd
		for p, e, base := 0, 0, 0; p < n; p = e {
			base, e = t.span(r, p0+p, p0+n)
			e -= p0
			if f16 {
				dotsF16(qs, K16[base+kv0:base+(e-p)*w], hd, t.group, w, s[p*nh:e*nh])
				continue
			}
			for j := p; j < e; j++ {
				o, end := base+(j-p)*w+kv0, base+(j-p+1)*w
				dotsF32(qs, K[o:end], hd, t.group, s[j*nh:(j+1)*nh])
			}
		}
		if a.SoftCap > 0 {
			kernels.SoftCapRef(s[:n*nh], a.SoftCap)
		}
		// Masked positions (out of the window, padding) are set after
		// the cap, as GGML adds its mask to capped scores.
		for i := range max(0, min(n, it.lo-p0)) * nh {
			s[i] = negInf
		}
		for i := n * nh; i < len(s); i++ {
			s[i] = negInf
		}
		mx, sum := softmaxPos(s, nh, soft)
		out := orow[h0*hd : (h0+nh)*hd]
		if it.part >= 0 {
			// A part of a long row: merge normalises.
			j := (it.part*t.chunks + c) * nh
			out = t.po[j*hd : (j+nh)*hd]
			copy(t.pm[j:j+nh], mx)
			copy(t.ps[j:j+nh], sum)
		}
		clear(out)
		for p, e, base := 0, 0, 0; p < n; p = e {
			base, e = t.span(r, p0+p, p0+n)
			e -= p0
			if f16 {
				axpysF16(out, s[p*nh:e*nh], V16[base+kv0:base+(e-p)*w], hd, t.group, w)
				continue
			}
			for j := p; j < e; j++ {
				o, end := base+(j-p)*w+kv0, base+(j-p+1)*w
				axpysF32(out, s[j*nh:(j+1)*nh], V[o:end], hd, t.group)
			}
		}
		if it.part >= 0 {
			continue
		}
		// The weights were left unnormalised: dividing the nh·hd outputs
		// by their head's sum is cheaper than dividing the n·nh weights.
		for h := range nh {
			inv := 1 / sum[h]
			oh := out[h*hd : (h+1)*hd]
			for i := range oh {
				oh[i] *= inv
			}
		}
	}
}

// rowLen is the number of positions row r attends to.
func rowLen(a kernels.Attn, tree []kernels.TreeRow, r int) int {
	if tree != nil {
		return int(tree[r].Prefix) + len(tree[r].Slots)
	}
	return int(a.Rows[r].Len)
}

// span returns the element offset of row r's position p in the layer and the
// end (at most end) of the run of consecutive slots it starts: up to the
// end of its block, or of the tree row's prefix; a tree slot alone.
func (t *attnTask) span(r, p, end int) (base, e int) {
	bs, w := t.kv.spec.BlockSize, t.kv.spec.Width
	if t.tree != nil {
		tr := t.tree[r]
		if pre := int(tr.Prefix); p >= pre {
			return int(tr.Slots[p-pre]) * w, p + 1
		} else {
			end = min(end, pre)
		}
	}
	return (t.slot(t.a.Rows[r].Table[p/bs]) + p%bs) * w, min(end, (p/bs+1)*bs)
}

// slot returns the first slot of block blk, checking it exists.
func (t *attnTask) slot(blk int32) int {
	if blk < 0 || int(blk) >= t.kv.spec.Blocks {
		panic(fmt.Sprintf("cpu: Attention: block %d of %d", blk, t.kv.spec.Blocks))
	}
	return int(blk) * t.kv.spec.BlockSize
}
