//go:build cuda

package cuda

import (
	"fmt"
	"unsafe"

	"gorgonia.org/cu"

	"github.com/specgate/specgate/kernels"
)

// MaskLogits is kernels.MaskedLogits: row rows[i] of logits keeps the
// tokens whose bit is set in masks[i] and gets -Inf elsewhere, on the
// device. The masks are copied before MaskLogits returns.
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
// NaN gives 0), as engine/sample.Argmax does. It waits for the device.
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
// engine/sample.Params the device applies (penalties stay on the host).
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

// Sample draws one token per row on the device, following engine/sample's
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
