//go:build cuda

package cuda

import (
	"fmt"
	"unsafe"

	"gorgonia.org/cu"

	"github.com/specgate/specgate/kernels"
	"github.com/specgate/specgate/kernels/sample"
)

// MaskLogits changes row rows[i] of logits as kernels.MaskLogitsRef does
// with masks[i]: it keeps the tokens whose bit is set and gets -Inf
// elsewhere, on the device. SampleRows runs it on copies of the masked
// rows. The masks are copied before MaskLogits returns.
func (b *Backend) MaskLogits(logits kernels.Tensor, rows []int, masks [][]uint64) {
	lt := writable(logits, "MaskLogits")
	if len(rows) != len(masks) {
		panic(fmt.Sprintf("cuda: MaskLogits: %d rows, %d masks", len(rows), len(masks)))
	}
	if len(rows) == 0 || lt.cols == 0 {
		return
	}
	rs := make([]int32, len(rows))
	off := make([]int32, 0, len(rows)+1)
	var words []uint64
	for i, r := range rows {
		if r < 0 || r >= lt.rows {
			panic(fmt.Sprintf("cuda: MaskLogits: row %d of %d", r, lt.rows))
		}
		rs[i] = int32(r)
		off = append(off, int32(len(words)))
		// Words past the vocabulary change nothing.
		m := masks[i]
		if n := (lt.cols + 63) / 64; len(m) > n {
			m = m[:n]
		}
		words = append(words, m...)
	}
	off = append(off, int32(len(words)))
	defer b.enter()()
	rp, op, wp := b.stageInt32(rs), b.stageInt32(off), b.stageUint64(words)
	b.launch(kMaskLogits, gridFor(lt.cols, 256), len(rows), 1, 256, 0,
		ptr(lt.data), i32(lt.cols), ptr(rp), ptr(op), ptr(wp))
}

// Argmax writes to out[i] the index of the largest value of row rows[i] of
// logits (the lowest index on a tie; NaN never wins; a row of only -Inf or
// NaN gives 0), as kernels/sample.Argmax does. It waits for the device.
func (b *Backend) Argmax(out []int32, logits kernels.Tensor, rows []int) {
	lt := f32Tensor(logits, "Argmax")
	if len(out) != len(rows) {
		panic(fmt.Sprintf("cuda: Argmax: %d outputs for %d rows", len(out), len(rows)))
	}
	if len(rows) == 0 {
		return
	}
	rs := rowIndex(lt, rows, "Argmax")
	defer b.enter()()
	rp := b.stageInt32(rs)
	op := b.grow(&b.xd, 4*len(rows))
	b.launch(kArgmaxRows, len(rows), 1, 1, 1024, 0, ptr(op), ptr(lt.data), i32(lt.cols), ptr(rp))
	b.fetchInt32(out, op)
}

// SampleParams are one row's sampling settings for Sample, the subset of
// kernels/sample.Params the device applies (penalties stay on the host).
type SampleParams struct {
	Temperature float32 // 0 or below: greedy
	TopK        int     // 0, below or ≥ vocab: off
	TopP        float32 // 0 or ≥ 1: off
	MinP        float32 // 0: off
	// U is the row's uniform draw in [0, 1), taken from the request's
	// seeded random source, one per sampled token.
	U float64
}

// sampleArgs mirrors struct SampleArgs in kernels.cu.
type sampleArgs struct {
	out, logits, rows, temp, topP, minP, topK, u uint64
	cols                                         int32
	_                                            int32
}

// Sample draws one token per row on the device, following kernels/sample's
// order without penalties: top-k, then top-p on the untempered
// distribution, then min-p, then softmax at the temperature, then one draw
// with U in token-id order. Greedy rows (Temperature ≤ 0) and rows whose
// maximum is infinite take the argmax. It waits for the device.
func (b *Backend) Sample(out []int32, logits kernels.Tensor, rows []int, ps []SampleParams) {
	lt := f32Tensor(logits, "Sample")
	if len(out) != len(rows) || len(ps) != len(rows) {
		panic(fmt.Sprintf("cuda: Sample: %d outputs and %d params for %d rows", len(out), len(ps), len(rows)))
	}
	if len(rows) == 0 {
		return
	}
	rs := rowIndex(lt, rows, "Sample")
	n := len(rows)
	temp, topP, minP := make([]float32, n), make([]float32, n), make([]float32, n)
	topK, u := make([]int32, n), make([]float64, n)
	for i, p := range ps {
		temp[i], topP[i], minP[i], u[i] = p.Temperature, p.TopP, p.MinP, p.U
		topK[i] = int32(min(max(p.TopK, 0), lt.cols))
	}
	defer b.enter()()
	op := b.grow(&b.xd, 4*n)
	args := sampleArgs{
		out: ptr(op), logits: ptr(lt.data), rows: ptr(b.stageInt32(rs)),
		temp: ptr(b.stageFloat32(temp)), topP: ptr(b.stageFloat32(topP)), minP: ptr(b.stageFloat32(minP)),
		topK: ptr(b.stageInt32(topK)), u: ptr(b.stageFloat64(u)), cols: int32(lt.cols),
	}
	b.launchStruct(kSampleRows, n, 1, 1, 1024, unsafe.Pointer(&args), int(unsafe.Sizeof(args)))
	b.fetchInt32(out, op)
}

func rowIndex(t *Tensor, rows []int, op string) []int32 {
	rs := make([]int32, len(rows))
	for i, r := range rows {
		if r < 0 || r >= t.rows {
			panic(fmt.Sprintf("cuda: %s: row %d of %d", op, r, t.rows))
		}
		rs[i] = int32(r)
	}
	return rs
}

// fetchInt32 copies len(out) int32s from the device and waits.
func (b *Backend) fetchInt32(out []int32, src cu.DevicePtr) {
	if b.mode != modeRun {
		panic("cuda: results fetched during graph capture")
	}
	must(cu.MemcpyDtoHAsync(unsafe.Pointer(&out[0]), src, int64(4*len(out)), b.stream))
	b.sync()
}

var _ kernels.Sampler = (*Backend)(nil)

// SampleRows is kernels.Sampler's draw, all on the device but the
// uniforms and the penalty windows' counts: a row that is a plain argmax
// (greedy, no mask, no penalty) is read where it is; every other row is
// copied to scratch, masked (mask_logits) and penalised (penalize_rows)
// there, so the logits stay as they are, and then reduced by argmax_rows or
// sample_rows. Only token ids come back.
func (b *Backend) SampleRows(out []int32, logits kernels.Tensor, rows []kernels.SampleRow) {
	lt := f32Tensor(logits, "SampleRows")
	if len(out) != len(rows) {
		panic(fmt.Sprintf("cuda: SampleRows: %d outputs for %d rows", len(out), len(rows)))
	}
	idx := make([]int, len(rows))
	var plain, work []int // indices into rows
	for i, r := range rows {
		idx[i] = r.Row
		if r.Mask == nil && r.Params.Greedy() && !penalised(r) {
			plain = append(plain, i)
		} else {
			work = append(work, i)
		}
	}
	rowIndex(lt, idx, "SampleRows")
	b.argmaxAt(out, lt, idx, plain)
	if len(work) == 0 {
		return
	}
	sc, srcs := b.sampleScratch(lt, len(work)), make([]int, len(work))
	var mrows []int
	var masks [][]uint64
	pen := penalties{off: []int32{0}}
	var greedy, sampled []int // rows of sc
	var ps []SampleParams
	for j, i := range work {
		r := &rows[i]
		srcs[j] = r.Row
		if r.Mask != nil {
			mrows, masks = append(mrows, j), append(masks, r.Mask)
		}
		if penalised(*r) {
			pen.add(j, r, lt.cols)
		}
		if r.Params.Greedy() {
			greedy = append(greedy, j)
		} else {
			sampled = append(sampled, j)
			p := r.Params
			ps = append(ps, SampleParams{Temperature: p.Temperature, TopK: p.TopK, TopP: p.TopP, MinP: p.MinP,
				U: sample.Uniform(p.Seed, len(r.History))})
		}
	}
	b.copyRows(sc, lt, srcs)
	if len(mrows) > 0 {
		b.MaskLogits(sc, mrows, masks)
	}
	b.penalize(sc, &pen)
	if len(greedy) > 0 {
		res := make([]int32, len(greedy))
		b.Argmax(res, sc, greedy)
		for k, j := range greedy {
			out[work[j]] = res[k]
		}
	}
	if len(sampled) > 0 {
		res := make([]int32, len(sampled))
		b.Sample(res, sc, sampled, ps)
		for k, j := range sampled {
			out[work[j]] = res[k]
		}
	}
}

// penalised reports whether r's penalties can change a logit, as
// kernels/sample decides it.
func penalised(r kernels.SampleRow) bool { return r.Params.Penalties(len(r.History)) }

// penalties are penalize_rows' arguments: per row, the distinct ids of its
// penalty window with their counts, and its settings.
type penalties struct {
	rows, off, ids, counts []int32
	rep, pres, freq        []float32
	seen                   map[int32]int32
}

// add appends row j of the scratch with r's window: the last RepeatLastN
// tokens of the history (64 for 0, all for -1), ids outside the
// vocabulary left out, as kernels/sample reads it.
func (p *penalties) add(j int, r *kernels.SampleRow, cols int) {
	window := r.History
	switch last := r.Params.RepeatLastN; {
	case last == 0:
		window = window[max(0, len(window)-sample.DefaultRepeatLastN):]
	case last > 0:
		window = window[max(0, len(window)-last):]
	}
	if p.seen == nil {
		p.seen = map[int32]int32{}
	}
	clear(p.seen)
	start := len(p.ids)
	for _, id := range window {
		if id < 0 || int(id) >= cols {
			continue
		}
		k, ok := p.seen[id]
		if !ok {
			k = int32(len(p.ids) - start)
			p.seen[id] = k
			p.ids, p.counts = append(p.ids, id), append(p.counts, 0)
		}
		p.counts[start+int(k)]++
	}
	p.rows = append(p.rows, int32(j))
	p.off = append(p.off, int32(len(p.ids)))
	rep := r.Params.RepeatPenalty
	p.rep, p.pres, p.freq = append(p.rep, rep), append(p.pres, r.Params.PresencePenalty), append(p.freq, r.Params.FrequencyPenalty)
}

// penalize runs penalize_rows over p's rows of t.
func (b *Backend) penalize(t *Tensor, p *penalties) {
	if len(p.rows) == 0 || len(p.ids) == 0 {
		return
	}
	defer b.enter()()
	b.launch(kPenalizeRows, len(p.rows), 1, 1, 128, 0,
		ptr(t.data), i32(t.cols), ptr(b.stageInt32(p.rows)), ptr(b.stageInt32(p.off)),
		ptr(b.stageInt32(p.ids)), ptr(b.stageInt32(p.counts)), ptr(b.stageFloat32(p.rep)),
		ptr(b.stageFloat32(p.pres)), ptr(b.stageFloat32(p.freq)))
}

// argmaxAt sets out[i] for each i in which to the argmax of row rows[i].
func (b *Backend) argmaxAt(out []int32, lt *Tensor, rows []int, which []int) {
	if len(which) == 0 {
		return
	}
	rs := make([]int, len(which))
	for k, i := range which {
		rs[k] = rows[i]
	}
	res := make([]int32, len(which))
	b.Argmax(res, lt, rs)
	for k, i := range which {
		out[i] = res[k]
	}
}

// sampleScratch returns n rows of scratch as wide as lt, grown on demand
// and kept: masks and penalties are written there, never over the logits.
func (b *Backend) sampleScratch(lt *Tensor, n int) *Tensor {
	if b.samp == nil || b.samp.cols != lt.cols || b.samp.rows < n {
		rows := n
		if b.samp != nil && b.samp.cols == lt.cols {
			rows = max(n, 2*b.samp.rows)
		}
		b.samp = tensor(b.Alloc(rows, lt.cols), "sampleScratch")
	}
	return tensor(b.Slice(b.samp, 0, n), "sampleScratch")
}

// copyRows sets row j of dst to row srcs[j] of src, on the device.
func (b *Backend) copyRows(dst, src *Tensor, srcs []int) {
	idx := make([]int32, len(srcs))
	for j, r := range srcs {
		idx[j] = int32(r)
	}
	defer b.enter()()
	b.gather(dst, src, idx)
}
