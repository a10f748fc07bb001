package cpu

import (
	"fmt"
	"math"
	"slices"

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
	groups []attnGroup // what a task (per chunk of heads) takes: items of rows of one sequence
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

// attnGroupRows is the most rows one grouped task takes: their scores are
// all held at once (a verification tree has up to about 16 rows).
const attnGroupRows = 16

// attnGroupMin is the fewest shared positions worth a grouped task: below
// about that the transposes and the spread cost what the grouped kernels
// save (BenchmarkAttentionSeqRows at ctx 16 was even; from 48 on grouped
// rows were faster).
const attnGroupMin = 32

// attnGroup is the items one task takes: a row's item alone, or items of
// adjacent rows that start at the same position and read the same blocks
// up to e: a draft tree's rows, a prefill chunk's, or rows of two
// sequences that share cached prefix blocks. Those positions'
// keys and values are read and converted once for all of them; every
// row's arithmetic is the one it gets alone.
type attnGroup struct {
	n int // items in m
	e int // the members' positions before e are shared
	m [attnGroupRows]int32
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
	group := a.Heads / a.KVHeads
	groups, shared := b.attnGroups(a, tree, kv, items, group)
	chunks := attnChunks(a.Heads, a.KVHeads, len(groups), b.threads, shared)
	t := attnTask{b: b, dst: d, q: qt, kv: kv, layer: layer, a: a, tree: tree, group: group,
		chunk: a.Heads / chunks, chunks: chunks, scale: scale, items: items, groups: groups}
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
		grain = len(groups) * chunks
	}
	b.pool.run(&b.attn, len(groups)*chunks, grain)
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

// attnChunks returns how many chunks of heads each of tasks groups is
// split into. Enough tasks to keep every worker busy (a single short
// decode row too), each as wide as possible: the fewest chunks of whole kv
// heads that give about two tasks per worker. When shared (some group has
// several rows), a chunk takes at most 32 heads, since a grouped task
// holds every member's scores at once and they must stay in L2; and it
// stays a whole number of eight heads, which the grouped kernels need:
// with more workers than that allows, they get fewer tasks rather than
// every group falling back to one row at a time.
func attnChunks(heads, kvHeads, tasks, threads int, shared bool) int {
	chunks := 1
	for chunks < kvHeads && (tasks*chunks < 2*threads || shared && heads/chunks > 32) {
		next := chunks + 1
		for kvHeads%next != 0 {
			next++
		}
		if shared && heads/chunks <= 32 && (heads/chunks)%8 == 0 && (heads/next)%8 != 0 {
			break
		}
		chunks = next
	}
	return chunks
}

func (t *attnTask) run(wk, lo, hi int) {
	sc := &t.b.scratch[wk]
	for task := lo; task < hi; task++ {
		g, c := &t.groups[task/t.chunks], task%t.chunks
		if g.n > 1 && t.chunk%8 == 0 {
			t.runGroup(sc, g, c)
			continue
		}
		for _, m := range g.m[:g.n] {
			t.runItem(sc, t.items[m], c)
		}
	}
}

// runItem computes one item for chunk c of heads.
func (t *attnTask) runItem(sc *workerScratch, it attnItem, c int) {
	hd, nh := t.a.HeadDim, t.chunk
	r, h0 := it.r, c*nh
	n := it.p1 - it.p0 // the item's positions, from p0
	qrow, orow := t.q.row(r), t.dst.row(r)
	if n == 0 {
		clear(orow[h0*hd : (h0+nh)*hd])
		return
	}
	// s holds the scores, position-major (nh per position, so one call
	// fills a position's scores for the whole chunk), padded with -Inf to
	// whole stretches of 8 positions for softmaxPos; qs is the chunk's
	// query times the scale, which also frees out to overwrite q (dst may
	// be q).
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
	t.scores(r, h0, it.p0, it.p0, it.p1, qs, s)
	mx, sum := t.softmax(it, s, soft)
	t.keepPart(it, c, mx, sum)
	out := t.outOf(it, c)
	clear(out)
	t.accumulate(r, h0, it.p0, it.p0, it.p1, s, out)
	t.normalize(it, out, sum)
}

// scores sets s[(p−p0)·nh+h] to the scores of row r's positions from to
// end, for the chunk's heads from h0 (nh of them): one call per run of
// consecutive slots (a block's, or one tree slot) for the F16 kernels, one
// per position for the F32 ones.
func (t *attnTask) scores(r, h0, p0, from, end int, qs, s []float32) {
	hd, w, nh := t.a.HeadDim, t.kv.spec.Width, t.chunk
	kv0 := (h0 / t.group) * hd
	for p, e, base := from, 0, 0; p < end; p = e {
		base, e = t.span(r, p, end)
		if t.kv.f16() {
			dotsF16(qs, t.kv.k16[t.layer][base+kv0:base+(e-p)*w], hd, t.group, w, s[(p-p0)*nh:(e-p0)*nh])
			continue
		}
		K := t.kv.k[t.layer]
		for j := p; j < e; j++ {
			o, end := base+(j-p)*w+kv0, base+(j-p+1)*w
			dotsF32(qs, K[o:end], hd, t.group, s[(j-p0)*nh:(j-p0+1)*nh])
		}
	}
}

// accumulate adds to out the values of row r's positions from to end
// weighted by s (indexed as scores indexes it), in order of position.
func (t *attnTask) accumulate(r, h0, p0, from, end int, s, out []float32) {
	hd, w, nh := t.a.HeadDim, t.kv.spec.Width, t.chunk
	kv0 := (h0 / t.group) * hd
	for p, e, base := from, 0, 0; p < end; p = e {
		base, e = t.span(r, p, end)
		if t.kv.f16() {
			axpysF16(out, s[(p-p0)*nh:(e-p0)*nh], t.kv.v16[t.layer][base+kv0:base+(e-p)*w], hd, t.group, w)
			continue
		}
		V := t.kv.v[t.layer]
		for j := p; j < e; j++ {
			o, end := base+(j-p)*w+kv0, base+(j-p+1)*w
			axpysF32(out, s[(j-p0)*nh:(j-p0+1)*nh], V[o:end], hd, t.group)
		}
	}
}

// softmax caps, masks and pads an item's scores s (whole stretches of 8
// positions) and replaces them by their unnormalised exponents; it
// returns each head's maximum and sum, in soft.
func (t *attnTask) softmax(it attnItem, s, soft []float32) (mx, sum []float32) {
	nh, n := t.chunk, it.p1-it.p0
	if t.a.SoftCap > 0 {
		kernels.SoftCapRef(s[:n*nh], t.a.SoftCap)
	}
	// Masked positions (out of the window, padding) are set after the
	// cap, as GGML adds its mask to capped scores.
	for i := range max(0, min(n, it.lo-it.p0)) * nh {
		s[i] = negInf
	}
	for i := n * nh; i < len(s); i++ {
		s[i] = negInf
	}
	return softmaxPos(s, nh, soft)
}

// outOf returns where an item's output for chunk c goes: the row's, or for
// a part of a long row the part's buffer.
func (t *attnTask) outOf(it attnItem, c int) []float32 {
	hd, nh := t.a.HeadDim, t.chunk
	if it.part < 0 {
		return t.dst.row(it.r)[c*nh*hd : (c+1)*nh*hd]
	}
	j := (it.part*t.chunks + c) * nh
	return t.po[j*hd : (j+nh)*hd]
}

// keepPart keeps a part's maxima and sums for merge.
func (t *attnTask) keepPart(it attnItem, c int, mx, sum []float32) {
	if it.part < 0 {
		return
	}
	j := (it.part*t.chunks + c) * t.chunk
	copy(t.pm[j:j+t.chunk], mx)
	copy(t.ps[j:j+t.chunk], sum)
}

// normalize divides a whole row's outputs by their head's sum (a part's
// are left for merge): cheaper than dividing the n·nh weights.
func (t *attnTask) normalize(it attnItem, out, sum []float32) {
	if it.part >= 0 {
		return
	}
	hd := t.a.HeadDim
	for h := range t.chunk {
		inv := 1 / sum[h]
		oh := out[h*hd : (h+1)*hd]
		for i := range oh {
			oh[i] *= inv
		}
	}
}

// runGroup computes a group's items for chunk c of heads: the shared
// positions with the grouped kernels, for every member at once, and each
// member's own positions after them (a tree row's slots, a causal row's
// last ones) as runItem does, in order of position, so each member gets
// runItem's bits.
func (t *attnTask) runGroup(sc *workerScratch, g *attnGroup, c int) {
	const tile = 32 // positions spread at a time: 8 KiB, in L1
	hd, nh, w := t.a.HeadDim, t.chunk, t.kv.spec.Width
	R, h0, nb := g.n, c*nh, nh/8
	lead := t.items[g.m[0]]
	p0, ns := lead.p0, g.e-lead.p0
	stride := 0 // floats between members' scores
	for _, m := range g.m[:R] {
		stride = max(stride, (t.items[m].p1-p0+7)&^7*nh)
	}
	qw := nh * hd
	need := R*stride + 3*R*qw + tile*64 + softmaxScratch(nh) + R*nh
	if cap(sc.att) < need {
		sc.att = make([]float32, need+need/2)
	}
	buf := sc.att[:need]
	S, buf := buf[:R*stride], buf[R*stride:]
	qs, buf := buf[:R*qw], buf[R*qw:]
	qt, buf := buf[:R*qw], buf[R*qw:]
	acc, buf := buf[:R*qw], buf[R*qw:]
	kx, buf := buf[:tile*64], buf[tile*64:]
	soft, sums := buf[:softmaxScratch(nh)], buf[softmaxScratch(nh):]
	// qt is each member's scaled query with each block of 8 heads
	// transposed: vector i of a block holds element i of its 8 heads.
	for k, m := range g.m[:R] {
		q, qk, tk := t.q.row(t.items[m].r)[h0*hd:(h0+nh)*hd], qs[k*qw:(k+1)*qw], qt[k*qw:(k+1)*qw]
		for i, x := range q {
			qk[i] = x * t.scale
		}
		transpose8(tk, qk, nb, 64, 64)
	}
	if cap(sc.slots) < ns {
		sc.slots = make([]int32, ns+ns/2)
	}
	slots := sc.slots[:ns]
	table, bs := t.a.Rows[lead.r].Table, t.kv.spec.BlockSize
	for j := range slots {
		p := p0 + j
		slots[j] = int32(t.slot(table[p/bs]) + p%bs)
	}
	kv0 := (h0 / t.group) * hd
	K, V := t.kv.k16[t.layer][kv0:], t.kv.v16[t.layer][kv0:]
	for t0 := 0; t0 < ns; t0 += tile {
		n := min(tile, ns-t0)
		for b := range nb {
			spreadG2(kx, K[b*32:], slots[t0:t0+n], w)
			dotsG2(kx[:n*64], qt[b*64:], S[t0*nh+b*8:], R, qw, nh, stride)
		}
	}
	for k, m := range g.m[:R] {
		it := t.items[m]
		s := S[k*stride : k*stride+(it.p1-p0+7)&^7*nh]
		t.scores(it.r, h0, p0, g.e, it.p1, qs[k*qw:(k+1)*qw], s)
		mx, sum := t.softmax(it, s, soft)
		copy(sums[k*nh:(k+1)*nh], sum)
		t.keepPart(it, c, mx, sum)
	}
	clear(acc)
	for t0 := 0; t0 < ns; t0 += tile {
		n := min(tile, ns-t0)
		for b := range nb {
			spreadG2(kx, V[b*32:], slots[t0:t0+n], w)
			axpysG2(kx[:n*64], S[t0*nh+b*8:], acc[b*R*64:(b+1)*R*64], nh, stride)
		}
	}
	for k, m := range g.m[:R] {
		it := t.items[m]
		out := t.outOf(it, c)
		transpose8(out, acc[k*64:], nb, 64, R*64)
		s := S[k*stride : k*stride+(it.p1-p0+7)&^7*nh]
		t.accumulate(it.r, h0, p0, g.e, it.p1, s, out)
		t.normalize(it, out, sums[k*nh:(k+1)*nh])
	}
}

// attnGroups puts items into groups: an item joins a group of the row
// before's when the grouped kernels can take them (an F16 cache, heads of
// 8 in pairs: the stand-in's shape), both start at the same position, and
// their rows read the same blocks for at least attnGroupMin positions (up
// to the shorter row's end, or a tree row's prefix). Rows of one sequence
// come together in a batch, so looking back one row finds them. It
// reports whether any group has more than one item.
func (b *Backend) attnGroups(a kernels.Attn, tree []kernels.TreeRow, kv *KV, items []attnItem, group int) ([]attnGroup, bool) {
	groups, shared := b.attnGroupBuf[:0], false
	ok := groupedG2 && kv.f16() && a.HeadDim == 8 && group == 2 && a.Heads%8 == 0
	bs := kv.spec.BlockSize
	// prev and cur are the groups the row before's and this row's items
	// are in.
	prev, cur := b.attnPrev[:0], b.attnCur[:0]
	for i, it := range items {
		if i > 0 && items[i-1].r != it.r {
			prev, cur = cur, prev[:0]
		}
		e := it.p1
		if tree != nil {
			e = min(e, int(tree[it.r].Prefix))
		}
		joined := false
		for _, gi := range prev {
			g := &groups[gi]
			lead := items[g.m[0]]
			ge := min(g.e, e)
			if !ok || g.n == attnGroupRows || lead.p0 != it.p0 || ge-it.p0 < attnGroupMin ||
				!sameBlocks(a.Rows[lead.r].Table, a.Rows[it.r].Table, it.p0/bs, (ge-1)/bs) {
				continue
			}
			g.m[g.n], g.n, g.e = int32(i), g.n+1, ge
			cur, joined, shared = append(cur, gi), true, true
			break
		}
		if !joined {
			groups = append(groups, attnGroup{n: 1, e: e})
			groups[len(groups)-1].m[0] = int32(i)
			cur = append(cur, len(groups)-1)
		}
	}
	b.attnGroupBuf, b.attnPrev, b.attnCur = groups, prev, cur
	return groups, shared
}

// sameBlocks reports whether two block tables agree from block b0 to b1.
func sameBlocks(x, y []int32, b0, b1 int) bool {
	if b1 >= len(x) || b1 >= len(y) {
		return false
	}
	return &x[0] == &y[0] || slices.Equal(x[b0:b1+1], y[b0:b1+1])
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
