//go:build cuda

package cuda

import (
	"fmt"
	"math"
	"runtime"
	"unsafe"

	"gorgonia.org/cu"

	"github.com/specgate/specgate/kernels"
)

// KV is the CUDA backend's paged KV cache: one allocation in which
// section 2l holds layer l's keys and section 2l+1 its values, each
// Blocks·BlockSize slots of Width floats. A device cache lives in device
// memory; a host cache (NewHostKV) lives in pinned host memory mapped into
// the device's address space, so every op works on both, and CopyBlocks
// between the two runs on the copy engines.
type KV struct {
	spec kernels.KVSpec
	base cu.DevicePtr // device address of section 0
	host unsafe.Pointer
	mem  *allocation
}

var _ kernels.KVCache = (*KV)(nil)

// Spec returns the cache's shape.
func (c *KV) Spec() kernels.KVSpec { return c.spec }

// Host reports whether the cache lives in pinned host memory.
func (c *KV) Host() bool { return c.host != nil }

func (c *KV) sectionFloats() int { return c.spec.Blocks * c.spec.BlockSize * c.spec.Width }

// section returns the device address of layer l's K (kind 0) or V (kind 1).
func (c *KV) section(l, kind int) cu.DevicePtr {
	return c.base + cu.DevicePtr(4*(2*l+kind)*c.sectionFloats())
}

func kvBytes(s kernels.KVSpec) (int, error) {
	if s.Layers <= 0 || s.Blocks <= 0 || s.BlockSize <= 0 || s.Width <= 0 {
		return 0, fmt.Errorf("cuda: bad KV spec %+v", s)
	}
	// The attention kernels read float K and V; an F16 cache would need
	// their F16 twins. Without KVTypes, kernels.SupportsKV tells callers
	// so before they ask.
	if s.DType != kernels.F32 {
		return 0, fmt.Errorf("cuda: KV cache of %v elements: the cuda backend stores F32 only", s.DType)
	}
	n := s.Blocks * s.BlockSize * s.Width
	if n/s.Width/s.BlockSize != s.Blocks || n > math.MaxInt/8/s.Layers {
		return 0, fmt.Errorf("cuda: KV spec %+v overflows", s)
	}
	return 8 * s.Layers * n, nil
}

// NewKV allocates a zeroed cache in device memory.
func (b *Backend) NewKV(s kernels.KVSpec) (kernels.KVCache, error) {
	n, err := kvBytes(s)
	if err != nil {
		return nil, err
	}
	defer b.enter()()
	p, err := cu.MemAlloc(int64(n))
	if err != nil {
		return nil, fmt.Errorf("cuda: KV cache of %d bytes: %w", n, err)
	}
	c := &KV{spec: s, base: p, mem: &allocation{ptr: p}}
	runtime.AddCleanup(c.mem, func(d cu.DevicePtr) { b.pool.release(d) }, p)
	must(memsetAsync(p, n/4, b.stream))
	return c, nil
}

// NewHostKV allocates a zeroed cache in pinned host memory: the host tier
// of the prefix cache. Blocks move between it and a device cache with
// CopyBlocks.
func (b *Backend) NewHostKV(s kernels.KVSpec) (*KV, error) {
	n, err := kvBytes(s)
	if err != nil {
		return nil, err
	}
	defer b.enter()()
	h, d, err := hostAlloc(n)
	if err != nil {
		return nil, fmt.Errorf("cuda: host KV cache of %d bytes: %w", n, err)
	}
	clear(unsafe.Slice((*byte)(h), n))
	c := &KV{spec: s, base: d, host: h, mem: &allocation{ptr: d}}
	runtime.AddCleanup(c.mem, func(p unsafe.Pointer) { b.pool.releaseHost(p) }, h)
	return c, nil
}

func kvCache(c kernels.KVCache, op string) *KV {
	kv, ok := c.(*KV)
	if !ok || kv == nil {
		panic(fmt.Sprintf("cuda: %s: cache %T is not a cuda cache", op, c))
	}
	return kv
}

func (c *KV) layer(op string, l int) {
	if l < 0 || l >= c.spec.Layers {
		panic(fmt.Sprintf("cuda: %s: layer %d of %d", op, l, c.spec.Layers))
	}
}

// StoreKV writes row r of k and v into slot slots[r] of layer. A negative
// slot skips its row (a padding row).
func (b *Backend) StoreKV(c kernels.KVCache, layer int, k, v kernels.Tensor, slots []int32) {
	kv := kvCache(c, "StoreKV")
	kv.layer("StoreKV", layer)
	kt, vt := f32Tensor(k, "StoreKV"), f32Tensor(v, "StoreKV")
	w := kv.spec.Width
	if kt.cols != w || vt.cols != w || kt.rows != len(slots) || vt.rows != len(slots) {
		panic(fmt.Sprintf("cuda: StoreKV: k %d×%d, v %d×%d for %d slots of width %d", kt.rows, kt.cols, vt.rows, vt.cols, len(slots), w))
	}
	nslots := kv.spec.Blocks * kv.spec.BlockSize
	for _, s := range slots {
		if int(s) >= nslots {
			panic(fmt.Sprintf("cuda: StoreKV: slot %d of %d", s, nslots))
		}
	}
	if len(slots) == 0 {
		return
	}
	defer b.enter()()
	sp := b.stageInt32(slots)
	b.launch(kStoreKV, len(slots), 1, 1, 256, 0,
		ptr(kv.section(layer, 0)), ptr(kv.section(layer, 1)), ptr(kt.data), ptr(vt.data), ptr(sp), i32(w))
}

// attnArgs mirrors struct AttnArgs in kernels.cu, field for field.
type attnArgs struct {
	dst, q, k, v, table, tabOff, prefix, slots, slotOff, po, pm, pl uint64
	rows, heads, kvHeads, headDim, width, blockSize, chunk, nsplit  int32
	scale                                                           float32
	_                                                               int32
}

// attnCall is one attention launch's host-side arguments.
type attnCall struct {
	table, tabOff, prefix, slots, slotOff []int32
}

func checkAttn(op string, d, qt *Tensor, kv *KV, a kernels.Attn) {
	sameShape(op, d, qt)
	if a.Heads <= 0 || a.KVHeads <= 0 || a.HeadDim <= 0 || a.Heads%a.KVHeads != 0 ||
		qt.cols != a.Heads*a.HeadDim || kv.spec.Width != a.KVHeads*a.HeadDim || len(a.Rows) != qt.rows {
		panic(fmt.Sprintf("cuda: %s: %d heads, %d kv heads of %d for q %d×%d, cache width %d, %d rows",
			op, a.Heads, a.KVHeads, a.HeadDim, qt.rows, qt.cols, kv.spec.Width, len(a.Rows)))
	}
	if a.HeadDim > 256 {
		panic(fmt.Sprintf("cuda: %s: head dim %d over 256", op, a.HeadDim))
	}
}

// Attention computes softmax(Scale·q·Kᵀ)·V for every query row and head over
// the row's block table (flash-decoding: the positions are split in chunks
// whose partial softmaxes merge by log-sum-exp). dst may be q.
func (b *Backend) Attention(dst, q kernels.Tensor, c kernels.KVCache, layer int, a kernels.Attn) {
	d, qt := writable(dst, "Attention"), f32Tensor(q, "Attention")
	kv := kvCache(c, "Attention")
	kv.layer("Attention", layer)
	checkAttn("Attention", d, qt, kv, a)
	bs := kv.spec.BlockSize
	var call attnCall
	for i, r := range a.Rows {
		if r.Len < 0 || int(r.Len) > len(r.Table)*bs {
			panic(fmt.Sprintf("cuda: Attention: row %d has length %d and %d blocks of %d", i, r.Len, len(r.Table), bs))
		}
		call.addRow(kv, "Attention", r, r.Len, nil)
	}
	call.slotOff = append(call.slotOff, 0)
	if len(a.Rows) == 0 {
		return
	}
	defer b.enter()()
	b.attend(d, qt, kv, layer, a, &call)
}

// TreeAttention is kernels.TreeAttention: each row attends to a prefix of
// its block table and then to explicit slots. The prefix and the tree part
// are separate splits of the same flash-decoding launch, merged by
// log-sum-exp.
func (b *Backend) TreeAttention(dst, q kernels.Tensor, c kernels.KVCache, layer int, a kernels.Attn, tree kernels.TreeMask) {
	d, qt := writable(dst, "TreeAttention"), f32Tensor(q, "TreeAttention")
	kv := kvCache(c, "TreeAttention")
	kv.layer("TreeAttention", layer)
	checkAttn("TreeAttention", d, qt, kv, a)
	if len(tree.Rows) != len(a.Rows) {
		panic(fmt.Sprintf("cuda: TreeAttention: %d tree rows for %d query rows", len(tree.Rows), len(a.Rows)))
	}
	bs := kv.spec.BlockSize
	var call attnCall
	for i, r := range a.Rows {
		tr := tree.Rows[i]
		if tr.Prefix < 0 || int(tr.Prefix) > len(r.Table)*bs {
			panic(fmt.Sprintf("cuda: TreeAttention: row %d has prefix %d and %d blocks of %d", i, tr.Prefix, len(r.Table), bs))
		}
		call.addRow(kv, "TreeAttention", r, tr.Prefix, tr.Slots)
	}
	call.slotOff = append(call.slotOff, int32(len(call.slots)))
	if len(a.Rows) == 0 {
		return
	}
	defer b.enter()()
	b.attend(d, qt, kv, layer, a, &call)
}

func (c *attnCall) addRow(kv *KV, op string, r kernels.AttnRow, prefix int32, slots []int32) {
	bs := kv.spec.BlockSize
	nslots := kv.spec.Blocks * bs
	used := (int(prefix) + bs - 1) / bs
	for _, blk := range r.Table[:used] {
		if blk < 0 || int(blk) >= kv.spec.Blocks {
			panic(fmt.Sprintf("cuda: %s: block %d of %d", op, blk, kv.spec.Blocks))
		}
	}
	for _, s := range slots {
		if s < 0 || int(s) >= nslots {
			panic(fmt.Sprintf("cuda: %s: slot %d of %d", op, s, nslots))
		}
	}
	c.tabOff = append(c.tabOff, int32(len(c.table)))
	c.table = append(c.table, r.Table[:used]...)
	c.prefix = append(c.prefix, prefix)
	c.slotOff = append(c.slotOff, int32(len(c.slots)))
	c.slots = append(c.slots, slots...)
}

func (b *Backend) attend(d, qt *Tensor, kv *KV, layer int, a kernels.Attn, call *attnCall) {
	rows := len(a.Rows)
	work, longest := 0, 0
	for r := range rows {
		n := int(call.prefix[r]) + int(call.slotOff[r+1]-call.slotOff[r])
		work += n
		longest = max(longest, n)
	}
	// Aim for a few thousand warps in flight, in chunks of 32 to 2048
	// positions.
	chunk := 32
	for chunk < 2048 && work*a.Heads/chunk > 4096 {
		chunk *= 2
	}
	nsplit := 1
	for r := range rows {
		p, t := int(call.prefix[r]), int(call.slotOff[r+1]-call.slotOff[r])
		nsplit = max(nsplit, ceilDiv(p, chunk)+ceilDiv(t, chunk))
	}
	scale := a.Scale
	if scale == 0 {
		scale = float32(1 / math.Sqrt(float64(a.HeadDim)))
	}
	args := attnArgs{
		dst: ptr(d.data), q: ptr(qt.data), k: ptr(kv.section(layer, 0)), v: ptr(kv.section(layer, 1)),
		table: ptr(b.stageInt32(call.table)), tabOff: ptr(b.stageInt32(call.tabOff)),
		prefix: ptr(b.stageInt32(call.prefix)), slots: ptr(b.stageInt32(call.slots)),
		slotOff: ptr(b.stageInt32(call.slotOff)),
		rows:    int32(rows), heads: int32(a.Heads), kvHeads: int32(a.KVHeads), headDim: int32(a.HeadDim),
		width: int32(kv.spec.Width), blockSize: int32(kv.spec.BlockSize), chunk: int32(chunk),
		nsplit: int32(nsplit), scale: scale,
	}
	items := rows * a.Heads * nsplit
	if nsplit > 1 {
		args.po = ptr(b.grow(&b.po, 4*items*a.HeadDim))
		args.pm = ptr(b.grow(&b.pm, 4*items))
		args.pl = ptr(b.grow(&b.pl, 4*items))
	}
	fn := kAttnE1
	switch {
	case a.HeadDim > 128:
		fn = kAttnE8
	case a.HeadDim > 64:
		fn = kAttnE4
	case a.HeadDim > 32:
		fn = kAttnE2
	}
	b.launchStruct(fn, ceilDiv(items, 4), 1, 1, 128, unsafe.Pointer(&args), int(unsafe.Sizeof(args)))
	if nsplit > 1 {
		b.launchStruct(kAttnMerge, ceilDiv(rows*a.Heads, 4), 1, 1, 128, unsafe.Pointer(&args), int(unsafe.Sizeof(args)))
	}
}

// CopyBlocks copies whole blocks, every layer, K and V, from src to dst
// (which may be the same cache), moves in order. Between two device caches
// (or within one) a kernel copies them on the compute stream. When a host
// cache is involved the copies run as DMA transfers on the backend's copy
// stream, which first waits for the ops queued so far and which the
// compute stream then waits for, so ops before and after see the copy in
// order.
func (b *Backend) CopyBlocks(dst, src kernels.KVCache, moves []kernels.BlockCopy) {
	d, s := kvCache(dst, "CopyBlocks"), kvCache(src, "CopyBlocks")
	ds, ss := d.spec, s.spec
	if ds.Layers != ss.Layers || ds.BlockSize != ss.BlockSize || ds.Width != ss.Width {
		panic(fmt.Sprintf("cuda: CopyBlocks between %+v and %+v", ss, ds))
	}
	for _, m := range moves {
		if m.Src < 0 || int(m.Src) >= ss.Blocks || m.Dst < 0 || int(m.Dst) >= ds.Blocks {
			panic(fmt.Sprintf("cuda: CopyBlocks: block %d → %d, caches have %d and %d", m.Src, m.Dst, ss.Blocks, ds.Blocks))
		}
	}
	if len(moves) == 0 {
		return
	}
	defer b.enter()()
	unit := ds.BlockSize * ds.Width
	if !d.Host() && !s.Host() {
		pairs := make([]int32, 0, 2*len(moves))
		for _, m := range moves {
			pairs = append(pairs, m.Src, m.Dst)
		}
		b.copyUnits(d, s, unit, pairs)
		return
	}
	if b.mode != modeRun {
		panic("cuda: CopyBlocks to or from the host during graph capture")
	}
	b.hostCopies(d, s, unit, moves)
}

func (b *Backend) copyUnits(d, s *KV, unit int, pairs []int32) {
	mp := b.stageInt32(pairs)
	b.launch(kCopyUnits, 2*d.spec.Layers, 1, 1, 256, 0,
		ptr(d.base), i64(d.sectionFloats()), ptr(s.base), i64(s.sectionFloats()), i64(unit), ptr(mp), i32(len(pairs)/2))
}

// hostCopies runs block moves that involve a host cache on the copy
// stream. Runs of consecutive blocks become one transfer per section when
// the caches differ (then no move can overlap another).
func (b *Backend) hostCopies(d, s *KV, unit int, moves []kernels.BlockCopy) {
	before, err := cu.MakeEvent(cu.DisableTiming)
	must(err)
	defer cu.DestroyEvent(&before)
	after, err := cu.MakeEvent(cu.DisableTiming)
	must(err)
	defer cu.DestroyEvent(&after)
	must(before.Record(b.stream))
	must(b.copies.Wait(before, 0))
	ub := 4 * unit
	for i := 0; i < len(moves); {
		run := 1
		if d != s {
			for i+run < len(moves) && moves[i+run].Src == moves[i].Src+int32(run) && moves[i+run].Dst == moves[i].Dst+int32(run) {
				run++
			}
		}
		for l := range d.spec.Layers {
			for kind := range 2 {
				from := s.section(l, kind) + cu.DevicePtr(int(moves[i].Src)*ub)
				to := d.section(l, kind) + cu.DevicePtr(int(moves[i].Dst)*ub)
				must(cu.MemcpyAsync(to, from, int64(run*ub), b.copies))
			}
		}
		i += run
	}
	must(after.Record(b.copies))
	must(b.stream.Wait(after, 0))
}

// CopySlots is kernels.SlotCopier: single-slot moves within one cache,
// every layer, K and V, applied in order.
func (b *Backend) CopySlots(c kernels.KVCache, moves []kernels.SlotCopy) {
	kv := kvCache(c, "CopySlots")
	nslots := kv.spec.Blocks * kv.spec.BlockSize
	pairs := make([]int32, 0, 2*len(moves))
	for _, m := range moves {
		if m.Src < 0 || int(m.Src) >= nslots || m.Dst < 0 || int(m.Dst) >= nslots {
			panic(fmt.Sprintf("cuda: CopySlots: slot %d → %d of %d", m.Src, m.Dst, nslots))
		}
		pairs = append(pairs, m.Src, m.Dst)
	}
	if len(moves) == 0 {
		return
	}
	defer b.enter()()
	b.copyUnits(kv, kv, kv.spec.Width, pairs)
}
