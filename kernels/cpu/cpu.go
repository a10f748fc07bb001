// Package cpu is the CPU implementation of kernels.Backend: plain Go for
// every op, with the matrix and dot-product kernels in AVX2+FMA assembly on
// amd64 (chosen at run time; the Go versions remain the reference and the
// fallback elsewhere).
//
// Importing the package registers the backend as "cpu".
//
// Work is split across a pool of worker goroutines that the backend owns;
// the goroutine that calls an op takes part as worker 0, so Threads=1 runs
// everything on the caller. Weights are used in place (Q8_0, Q4_0, Q4_K,
// Q5_K and Q6_K ones laid out once in groups of eight rows where the AVX2 kernels
// run: pack.go). Quantized matrices are never dequantized as a whole; MatMul
// quantizes the activation rows once per call (to Q8_0, or for the GGML K-quants and
// legacy types to what llama.cpp pairs them with: Q8_0, Q8_1 or Q8_K, see
// kquant.go) and computes integer dot products on the stored blocks.
package cpu

import (
	"errors"
	"fmt"
	"runtime"
	"unsafe"

	"github.com/specgate/specgate/kernels"
	"github.com/specgate/specgate/kernels/sample"
)

func init() {
	kernels.Register("cpu", func(o kernels.Options) (kernels.Backend, error) { return Open(o) })
}

// Tensor is the CPU backend's tensor: a row-major rows × cols matrix that
// holds either F32 values (activations, or F32 weights viewed in place) or
// the stored bytes of a weight matrix of another type. Slices share memory
// with the tensor they come from.
type Tensor struct {
	dt         kernels.DType
	rows, cols int
	// f32 holds rows*cols values when dt is F32.
	f32 []float32
	// raw holds rows*rowBytes stored bytes for the other types, or, for
	// the types of x8BlockBytes with x8 set, their rows in the ×8 layout
	// (pack.go); rowBytes is GGML's row size either way.
	raw      []byte
	rowBytes int
	x8       bool
	// x8b says the ×8 Q8_0 quants are stored biased, as w+128 (x8Bias).
	x8b bool
	// owned says the tensor's bytes are its own copy, not the slice
	// Weights was given (kernels.DataOwner).
	owned bool
	// readOnly marks weights: their memory belongs to the caller (often a
	// read-only mapping of the model file) and must never be written.
	readOnly bool
}

var _ kernels.Tensor = (*Tensor)(nil)

// DType returns the element type.
func (t *Tensor) DType() kernels.DType { return t.dt }

// Dims returns (rows, cols).
func (t *Tensor) Dims() (rows, cols int) { return t.rows, t.cols }

// F32 returns the tensor's values without copying, or nil when it is not F32.
// The slice aliases the tensor: writes change it, and writing the values of a
// weight tensor is forbidden (they may live in a read-only file mapping).
func (t *Tensor) F32() []float32 { return t.f32 }

func (t *Tensor) row(r int) []float32 { return t.f32[r*t.cols : (r+1)*t.cols] }

// OwnsData reports whether Weights copied the tensor's bytes (the ×8
// layout, or F32 data that was not aligned), so the caller's are no longer
// referenced (kernels.DataOwner).
func (t *Tensor) OwnsData() bool { return t.owned }

var _ kernels.DataOwner = (*Tensor)(nil)

// rawRow returns stored row r; t must not be in the ×8 layout.
func (t *Tensor) rawRow(r int) []byte { return t.raw[r*t.rowBytes : (r+1)*t.rowBytes] }

// convertRow decodes stored row r of t (any layout) into dst.
func (t *Tensor) convertRow(dst []float32, r int) {
	if t.x8 {
		convertRowX8(dst, t.dt, t.raw, r, t.x8Flip())
		return
	}
	convertRow(dst, t.dt, t.rawRow(r))
}

// Backend implements kernels.Backend on the host CPU. Like every backend its
// ops are driven by one goroutine at a time; they are not safe for
// concurrent use.
type Backend struct {
	threads int
	pool    *pool
	closed  bool
	scratch []workerScratch // one per worker, indexed by worker id

	// Per-op task values live here so handing them to the pool does not
	// allocate.
	mm   matmulTask
	many manyTask
	qx   quantTask
	px   packTask
	attn attnTask
	// attnItems and attnPart back Attention's items and long rows'
	// partial results.
	attnItems []attnItem
	attnPart  []float32
	// attnGroupBuf, attnPrev and attnCur back Attention's groups of items.
	attnGroupBuf      []attnGroup
	attnPrev, attnCur []int
	rows              rowTask
	samp              sampleTask
	// samplers are SampleRows' per-worker host samplers, kept for their
	// scratch buffers.
	samplers []sample.Sampler
	// kact, kq and kmm are MatMul's for the types of kquant.go; kg backs
	// kact's x4 layout, kc its block sums.
	kact kAct
	kg   []byte
	kc   []int32
	kq   kQuantTask
	kmm  kMatTask
	// kmany is MatMulMany's for weights of kquant.go in the ×8 layout.
	kmany kManyTask

	// xq and xd hold the activation rows of the current MatMul quantized to
	// Q8_0: int8 values, and one float32 scale per 32-value block.
	xq []int8
	xd []float32
	// xp holds them in the tiled kernels' layout instead (with their
	// scales in xd), when those run.
	xp []byte
	// xc holds the signed tile layout's corrections, and the multi-row
	// kernels' (blockSums8 for Q4_0, blockSumsB for biased Q8_0).
	xc []int32
	// xf holds the activation rows of the current F32 MatMul packed for
	// gemmF32, when that is worth it, or grouped for gemmF32Groups.
	xf []float32
	// wrow holds a weight row converted to F32 for ops that take a small
	// weight (RMSNorm, AddBias).
	wrow []float32
}

// workerScratch is memory one worker reuses across ops.
type workerScratch struct {
	f32   []float32 // weight rows converted to F32 (F16/BF16 MatMul, Gather)
	att   []float32 // attention scores of one (row, chunk of heads), or a group's
	slots []int32   // a group's shared positions' slots
	cs    []float32 // RoPE cos/sin pairs of one row
	// o4 receives the x4 kernels' results; it lives here because a
	// local passed through a function variable would escape to the heap.
	o4 [4]float32
	// o32 receives the tiled kernels' results.
	o32 [tileOut]float32
	// qt and qd hold one activation row quantized, before it is spread
	// into the tile layout.
	qt []int8
	qd []float32
	// gemm is gemmF32's.
	gemm gemmScratch
	// kx8 holds a K-quant weight row put back in GGML's layout (kX8Go),
	// or a chunk of Q5_0, IQ4_NL, Q4_1 or Q5_1 rows rewritten as Q8_0
	// (legacyx8.go); kx8o the ×8 K-quant kernels' results of a last
	// partial group.
	kx8  []byte
	kx8o [maxRowsN * x8Rows]float32
}

func (s *workerScratch) floats(n int) []float32 {
	if cap(s.f32) < n {
		s.f32 = make([]float32, n)
	}
	return s.f32[:n]
}

var _ kernels.Backend = (*Backend)(nil)

// Open starts a CPU backend with o.Threads workers (zero means one per CPU).
// Close stops them.
func Open(o kernels.Options) (*Backend, error) {
	n := o.Threads
	if n < 0 {
		return nil, fmt.Errorf("cpu: %d threads", n)
	}
	if n == 0 {
		n = runtime.NumCPU()
	}
	initTables()
	b := &Backend{
		threads: n,
		pool:    newPool(n),
		scratch: make([]workerScratch, n),
	}
	return b, nil
}

// WeightTypes lists every stored type Weights accepts
// (kernels.WeightTyper).
func (b *Backend) WeightTypes() []kernels.DType {
	return []kernels.DType{kernels.F32, kernels.F16, kernels.BF16, kernels.Q8_0, kernels.Q4_0,
		kernels.Q4_1, kernels.Q5_0, kernels.Q5_1, kernels.IQ4_NL,
		kernels.Q2_K, kernels.Q3_K, kernels.Q4_K, kernels.Q5_K, kernels.Q6_K, kernels.IQ4_XS}
}

var _ kernels.WeightTyper = (*Backend)(nil)

// Name returns "cpu".
func (b *Backend) Name() string { return "cpu" }

// Threads returns the number of workers, the caller included.
func (b *Backend) Threads() int { return b.threads }

// Close stops the workers. It is safe to call more than once; the backend
// must not be used afterwards.
func (b *Backend) Close() error {
	if b.closed {
		return nil
	}
	b.closed = true
	b.pool.stop()
	return nil
}

func (b *Backend) live() {
	if b.closed {
		panic("cpu: backend used after Close")
	}
}

// ErrShortData is returned by Weights when data does not match the shape.
var ErrShortData = errors.New("cpu: weight data does not match its shape")

// Weights wraps data without copying (except F32 data that is not 4-byte
// aligned, which is copied once, and Q8_0, Q4_0, Q4_K, Q5_K and Q6_K data where
// the ×8 layout is in use, which is laid out anew once: pack.go). data is never
// written.
func (b *Backend) Weights(dt kernels.DType, rows, cols int, data []byte) (kernels.Tensor, error) {
	if rows < 0 {
		return nil, fmt.Errorf("cpu: %d rows", rows)
	}
	rb, err := dt.RowBytes(cols)
	if err != nil {
		return nil, err
	}
	if len(data) != rows*rb {
		return nil, fmt.Errorf("%w: %v %d×%d needs %d bytes, have %d", ErrShortData, dt, rows, cols, rows*rb, len(data))
	}
	t := &Tensor{dt: dt, rows: rows, cols: cols, rowBytes: rb, readOnly: true}
	if dt != kernels.F32 {
		t.raw = data
		b.packWeights(t)
		return t, nil
	}
	n := rows * cols
	if n == 0 {
		t.f32 = []float32{}
		return t, nil
	}
	if uintptr(unsafe.Pointer(&data[0]))%4 == 0 && littleEndian {
		t.f32 = unsafe.Slice((*float32)(unsafe.Pointer(&data[0])), n)
		return t, nil
	}
	t.f32 = make([]float32, n)
	if err := kernels.Dequantize(kernels.F32, data, t.f32); err != nil {
		return nil, err
	}
	t.owned = true
	return t, nil
}

var littleEndian = func() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}()

// Alloc returns a zeroed rows × cols F32 tensor.
func (b *Backend) Alloc(rows, cols int) kernels.Tensor {
	if rows < 0 || cols < 0 {
		panic(fmt.Sprintf("cpu: Alloc(%d, %d)", rows, cols))
	}
	return &Tensor{dt: kernels.F32, rows: rows, cols: cols, rowBytes: 4 * cols, f32: make([]float32, rows*cols)}
}

// Slice returns rows [r0, r1) of t, sharing its memory.
func (b *Backend) Slice(t kernels.Tensor, r0, r1 int) kernels.Tensor {
	s := tensor(t, "Slice")
	if r0 < 0 || r1 < r0 || r1 > s.rows {
		panic(fmt.Sprintf("cpu: Slice [%d, %d) of %d rows", r0, r1, s.rows))
	}
	if s.x8 {
		return sliceX8(s, r0, r1)
	}
	v := *s
	v.rows = r1 - r0
	if s.dt == kernels.F32 {
		v.f32 = s.f32[r0*s.cols : r1*s.cols : r1*s.cols]
	} else {
		v.raw = s.raw[r0*s.rowBytes : r1*s.rowBytes : r1*s.rowBytes]
	}
	return &v
}

// Upload copies src into the F32 tensor dst.
func (b *Backend) Upload(dst kernels.Tensor, src []float32) {
	d := writable(dst, "Upload")
	if len(src) != len(d.f32) {
		panic(fmt.Sprintf("cpu: Upload of %d values into %d×%d", len(src), d.rows, d.cols))
	}
	copy(d.f32, src)
}

// Download copies the F32 tensor src into dst.
func (b *Backend) Download(dst []float32, src kernels.Tensor) {
	s := f32Tensor(src, "Download")
	if len(dst) != len(s.f32) {
		panic(fmt.Sprintf("cpu: Download of %d×%d into %d values", s.rows, s.cols, len(dst)))
	}
	copy(dst, s.f32)
}

// tensor converts an interface value made by this package, panicking with
// the op's name otherwise.
func tensor(t kernels.Tensor, op string) *Tensor {
	c, ok := t.(*Tensor)
	if !ok || c == nil {
		panic(fmt.Sprintf("cpu: %s: tensor %T is not a cpu tensor", op, t))
	}
	return c
}

func f32Tensor(t kernels.Tensor, op string) *Tensor {
	c := tensor(t, op)
	if c.dt != kernels.F32 {
		panic(fmt.Sprintf("cpu: %s: %v tensor where F32 is needed", op, c.dt))
	}
	return c
}

func writable(t kernels.Tensor, op string) *Tensor {
	c := f32Tensor(t, op)
	if c.readOnly {
		panic(fmt.Sprintf("cpu: %s: cannot write to a weight tensor", op))
	}
	return c
}

func sameShape(op string, a, b *Tensor) {
	if a.rows != b.rows || a.cols != b.cols {
		panic(fmt.Sprintf("cpu: %s: shapes %d×%d and %d×%d differ", op, a.rows, a.cols, b.rows, b.cols))
	}
}

// weightRow returns row r of t as F32: in place for F32, else converted
// into buf (grown as needed).
func weightRow(t *Tensor, r int, buf *[]float32) []float32 {
	if t.dt == kernels.F32 {
		return t.row(r)
	}
	if cap(*buf) < t.cols {
		*buf = make([]float32, t.cols)
	}
	out := (*buf)[:t.cols]
	t.convertRow(out, r)
	return out
}

func ptr(b []byte) unsafe.Pointer { return unsafe.Pointer(unsafe.SliceData(b)) }
