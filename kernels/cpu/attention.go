package cpu

import (
	"fmt"
	"math"

	"github.com/specgate/specgate/kernels"
)

// KV is the CPU backend's paged KV cache. For each layer, K and V are one
// slice each of Blocks·BlockSize slots of Width floats; slot s starts at
// s·Width, so a block's slots are contiguous.
type KV struct {
	spec kernels.KVSpec
	k, v [][]float32
}

var _ kernels.KVCache = (*KV)(nil)

// Spec returns the cache's shape.
func (c *KV) Spec() kernels.KVSpec { return c.spec }

// NewKV allocates a zeroed cache.
func (b *Backend) NewKV(s kernels.KVSpec) (kernels.KVCache, error) {
	if s.Layers <= 0 || s.Blocks <= 0 || s.BlockSize <= 0 || s.Width <= 0 {
		return nil, fmt.Errorf("cpu: bad KV spec %+v", s)
	}
	n := s.Blocks * s.BlockSize * s.Width
	if n/s.Width/s.BlockSize != s.Blocks {
		return nil, fmt.Errorf("cpu: KV spec %+v overflows", s)
	}
	c := &KV{spec: s, k: make([][]float32, s.Layers), v: make([][]float32, s.Layers)}
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

// StoreKV writes row r of k and v into slot slots[r] of layer. A negative
// slot skips its row (a padding row).
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
	K, V := kv.k[layer], kv.v[layer]
	for r, s := range slots {
		if s < 0 {
			continue
		}
		if int(s) >= nslots {
			panic(fmt.Sprintf("cpu: StoreKV: slot %d of %d", s, nslots))
		}
		copy(K[int(s)*w:(int(s)+1)*w], kt.row(r))
		copy(V[int(s)*w:(int(s)+1)*w], vt.row(r))
	}
}

// CopyBlocks copies whole blocks, every layer, K and V, from src to dst
// (which may be the same cache).
func (b *Backend) CopyBlocks(dst, src kernels.KVCache, moves []kernels.BlockCopy) {
	b.live()
	d, s := kvCache(dst, "CopyBlocks"), kvCache(src, "CopyBlocks")
	ds, ss := d.spec, s.spec
	if ds.Layers != ss.Layers || ds.BlockSize != ss.BlockSize || ds.Width != ss.Width {
		panic(fmt.Sprintf("cpu: CopyBlocks between %+v and %+v", ss, ds))
	}
	bw := ds.BlockSize * ds.Width
	for _, m := range moves {
		if m.Src < 0 || int(m.Src) >= ss.Blocks || m.Dst < 0 || int(m.Dst) >= ds.Blocks {
			panic(fmt.Sprintf("cpu: CopyBlocks: block %d → %d, caches have %d and %d", m.Src, m.Dst, ss.Blocks, ds.Blocks))
		}
		so, do := int(m.Src)*bw, int(m.Dst)*bw
		for l := range ds.Layers {
			copy(d.k[l][do:do+bw], s.k[l][so:so+bw])
			copy(d.v[l][do:do+bw], s.v[l][so:so+bw])
		}
	}
}

type attnTask struct {
	b      *Backend
	dst, q *Tensor
	kv     *KV
	layer  int
	a      kernels.Attn
	group  int // query heads per kv head
	chunk  int // query heads per task: a whole number of groups
	chunks int // tasks per row
	scale  float32
}

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
	work := 0
	for i, r := range a.Rows {
		if r.Len < 0 || int(r.Len) > len(r.Table)*kv.spec.BlockSize {
			panic(fmt.Sprintf("cpu: Attention: row %d has length %d and %d blocks of %d", i, r.Len, len(r.Table), kv.spec.BlockSize))
		}
		work += int(r.Len)
	}
	scale := a.Scale
	if scale == 0 {
		scale = float32(1 / math.Sqrt(float64(a.HeadDim)))
	}
	// Enough tasks to keep every worker busy (a single decode row too),
	// each as wide as possible: split the kv heads into the fewest chunks
	// that give about two tasks per worker.
	group := a.Heads / a.KVHeads
	chunks := 1
	for chunks < a.KVHeads && len(a.Rows)*chunks < 2*b.threads {
		chunks++
		for a.KVHeads%chunks != 0 {
			chunks++
		}
	}
	b.attn = attnTask{b: b, dst: d, q: qt, kv: kv, layer: layer, a: a, group: group,
		chunk: a.Heads / chunks, chunks: chunks, scale: scale}
	grain := 1
	if work*a.Heads*a.HeadDim < 1<<14 {
		grain = len(a.Rows) * chunks
	}
	b.pool.run(&b.attn, len(a.Rows)*chunks, grain)
	b.attn = attnTask{}
}

func (t *attnTask) run(wk, lo, hi int) {
	a := &t.a
	hd, bs, w := a.HeadDim, t.kv.spec.BlockSize, t.kv.spec.Width
	K, V := t.kv.k[t.layer], t.kv.v[t.layer]
	sc := &t.b.scratch[wk]
	for item := lo; item < hi; item++ {
		r, h0 := item/t.chunks, (item%t.chunks)*t.chunk
		nh := t.chunk
		row := a.Rows[r]
		n := int(row.Len)
		qrow, orow := t.q.row(r), t.dst.row(r)
		if n == 0 {
			clear(orow[h0*hd : (h0+nh)*hd])
			continue
		}
		if cap(sc.att) < n*nh {
			sc.att = make([]float32, n*nh+n*nh/2)
		}
		// s holds n rows of nh scores, position-major, so one call
		// fills a position's scores for the whole chunk.
		s := sc.att[:n*nh]
		q := qrow[h0*hd : (h0+nh)*hd]
		kv0 := (h0 / t.group) * hd
		for p := 0; p < n; p += bs {
			base := t.slot(row.Table[p/bs]) * w
			for j := p; j < min(n, p+bs); j++ {
				o := base + (j-p)*w + kv0
				dotsF32(q, K[o:base+(j-p+1)*w], hd, t.group, s[j*nh:(j+1)*nh])
			}
		}
		for i := range nh {
			mx := float32(math.Inf(-1))
			for j := range n {
				mx = max(mx, s[j*nh+i])
			}
			var sum float32
			for j := range n {
				e := expf(t.scale * (s[j*nh+i] - mx))
				s[j*nh+i] = e
				sum += e
			}
			// Normalise the weights now, so the V pass is a plain sum.
			inv := 1 / sum
			for j := range n {
				s[j*nh+i] *= inv
			}
		}
		// q is no longer needed, so out may overwrite it (dst may be q).
		out := orow[h0*hd : (h0+nh)*hd]
		clear(out)
		for p := 0; p < n; p += bs {
			base := t.slot(row.Table[p/bs]) * w
			for j := p; j < min(n, p+bs); j++ {
				o := base + (j-p)*w + kv0
				axpysF32(out, s[j*nh:(j+1)*nh], V[o:base+(j-p+1)*w], hd, t.group)
			}
		}
	}
}

// slot returns the first slot of block blk, checking it exists.
func (t *attnTask) slot(blk int32) int {
	if blk < 0 || int(blk) >= t.kv.spec.Blocks {
		panic(fmt.Sprintf("cpu: Attention: block %d of %d", blk, t.kv.spec.Blocks))
	}
	return int(blk) * t.kv.spec.BlockSize
}
