//go:build cuda

package cuda

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"unsafe"

	"gorgonia.org/cu"

	"github.com/specgate/specgate/kernels"
)

// Tensor is the CUDA backend's tensor: a rows × cols matrix in device
// memory. F32, F16 and BF16 are stored row-major as given. Q8_0 and Q4_0
// weights are repacked at upload into aligned quantized values (data) and a
// separate array of F16 block scales (scales), the layout kernels.cu
// documents. Slices share memory with the tensor they come from.
type Tensor struct {
	dt         kernels.DType
	rows, cols int
	data       cu.DevicePtr
	scales     cu.DevicePtr
	rowBytes   int // bytes of data per row
	scaleBytes int // bytes of scales per row
	readOnly   bool
	// mem keeps the allocation alive while any view of it is reachable.
	mem *allocation
	// row0 caches row 0 converted to F32, for the weights RMSNorm and
	// AddBias take (nil for F32 tensors, which are used in place).
	row0 *Tensor
}

var _ kernels.Tensor = (*Tensor)(nil)

// DType returns the element type.
func (t *Tensor) DType() kernels.DType { return t.dt }

// Dims returns (rows, cols).
func (t *Tensor) Dims() (rows, cols int) { return t.rows, t.cols }

// OwnsData reports true: a tensor lives in device memory, so the host
// bytes a weight was made from are not retained (kernels.DataOwner).
func (t *Tensor) OwnsData() bool { return true }

var _ kernels.DataOwner = (*Tensor)(nil)

// allocation is one device allocation; a cleanup hands it back to the
// backend's pool when no tensor refers to it any more.
type allocation struct{ ptr cu.DevicePtr }

// ErrShortData is returned by Weights when data does not match the shape.
var ErrShortData = errors.New("cuda: weight data does not match its shape")

// Weights copies data to the device (repacking Q8_0 and Q4_0); data is not
// retained.
func (b *Backend) Weights(dt kernels.DType, rows, cols int, data []byte) (kernels.Tensor, error) {
	if rows < 0 {
		return nil, fmt.Errorf("cuda: %d rows", rows)
	}
	if !slices.Contains(kernels.BaseWeightTypes, dt) {
		return nil, fmt.Errorf("cuda: %v weights are not supported (%v are)", dt, kernels.BaseWeightTypes)
	}
	rb, err := dt.RowBytes(cols)
	if err != nil {
		return nil, err
	}
	if len(data) != rows*rb {
		return nil, fmt.Errorf("%w: %v %d×%d needs %d bytes, have %d", ErrShortData, dt, rows, cols, rows*rb, len(data))
	}
	defer b.enter()()
	t := &Tensor{dt: dt, rows: rows, cols: cols, rowBytes: rb, readOnly: true}
	nb := cols / kernels.QK
	switch dt {
	case kernels.Q8_0:
		t.rowBytes, t.scaleBytes = cols, 2*nb
	case kernels.Q4_0:
		t.rowBytes, t.scaleBytes = cols/2, 2*nb
	}
	if rows == 0 || cols == 0 {
		return t, nil
	}
	payload, scales := data, []byte(nil)
	if dt == kernels.Q8_0 || dt == kernels.Q4_0 {
		payload, scales = repack(dt, rows, cols, data)
	}
	aligned := (len(payload) + 255) &^ 255
	size := aligned + len(scales)
	p, err := cu.MemAlloc(int64(size))
	if err != nil {
		return nil, fmt.Errorf("cuda: %v weights %d×%d: %w", dt, rows, cols, err)
	}
	t.mem = &allocation{ptr: p}
	runtime.AddCleanup(t.mem, func(d cu.DevicePtr) { b.pool.release(d) }, p)
	t.data = p
	must(cu.MemcpyHtoDAsync(p, unsafe.Pointer(&payload[0]), int64(len(payload)), b.stream))
	if len(scales) > 0 {
		t.scales = p + cu.DevicePtr(aligned)
		must(cu.MemcpyHtoDAsync(t.scales, unsafe.Pointer(&scales[0]), int64(len(scales)), b.stream))
	}
	must(b.stream.Synchronize())
	return t, nil
}

// repack splits GGML Q8_0/Q4_0 blocks into their quantized bytes and their
// F16 scales.
func repack(dt kernels.DType, rows, cols int, data []byte) (payload, scales []byte) {
	nb := rows * cols / kernels.QK
	bb, qb := dt.BlockBytes(), dt.BlockBytes()-2
	payload = make([]byte, nb*qb)
	scales = make([]byte, 2*nb)
	for i := range nb {
		blk := data[i*bb : (i+1)*bb]
		binary.LittleEndian.PutUint16(scales[2*i:], binary.LittleEndian.Uint16(blk))
		copy(payload[i*qb:(i+1)*qb], blk[2:])
	}
	return payload, scales
}

// Alloc returns a zeroed rows × cols F32 tensor.
func (b *Backend) Alloc(rows, cols int) kernels.Tensor {
	if rows < 0 || cols < 0 {
		panic(fmt.Sprintf("cuda: Alloc(%d, %d)", rows, cols))
	}
	defer b.enter()()
	t := &Tensor{dt: kernels.F32, rows: rows, cols: cols, rowBytes: 4 * cols}
	n := rows * cols
	if n == 0 {
		return t
	}
	p, size, err := b.pool.get(4 * n)
	if err != nil {
		panic(fmt.Sprintf("cuda: Alloc(%d, %d): %v", rows, cols, err))
	}
	t.mem = &allocation{ptr: p}
	runtime.AddCleanup(t.mem, func(d cu.DevicePtr) { b.pool.put(d, size) }, p)
	t.data = p
	must(cu.MemsetD32Async(p, 0, int64(n), b.stream))
	return t
}

// Slice returns rows [r0, r1) of t, sharing its memory.
func (b *Backend) Slice(t kernels.Tensor, r0, r1 int) kernels.Tensor {
	s := tensor(t, "Slice")
	if r0 < 0 || r1 < r0 || r1 > s.rows {
		panic(fmt.Sprintf("cuda: Slice [%d, %d) of %d rows", r0, r1, s.rows))
	}
	v := *s
	v.rows = r1 - r0
	v.row0 = nil
	if s.data != 0 {
		v.data = s.data + cu.DevicePtr(r0*s.rowBytes)
	}
	if s.scales != 0 {
		v.scales = s.scales + cu.DevicePtr(r0*s.scaleBytes)
	}
	return &v
}

// Upload copies src into the F32 tensor dst. The copy goes through pinned
// memory and is queued on the stream, so src may be reused at once.
func (b *Backend) Upload(dst kernels.Tensor, src []float32) {
	d := writable(dst, "Upload")
	if len(src) != d.rows*d.cols {
		panic(fmt.Sprintf("cuda: Upload of %d values into %d×%d", len(src), d.rows, d.cols))
	}
	if len(src) == 0 {
		return
	}
	defer b.enter()()
	n := 4 * len(src)
	if n <= arenaBytes/4 {
		staged := b.stageFloat32(src)
		if b.mode != modeArgs {
			must(cu.MemcpyDtoDAsync(d.data, staged, int64(n), b.stream))
		}
		return
	}
	if b.mode != modeRun {
		panic("cuda: Upload too large for the argument arena during graph capture")
	}
	must(cu.MemcpyHtoDAsync(d.data, unsafe.Pointer(&src[0]), int64(n), b.stream))
}

// Download waits for every queued op, then copies the F32 tensor src into
// dst.
func (b *Backend) Download(dst []float32, src kernels.Tensor) {
	s := f32Tensor(src, "Download")
	if len(dst) != s.rows*s.cols {
		panic(fmt.Sprintf("cuda: Download of %d×%d into %d values", s.rows, s.cols, len(dst)))
	}
	if b.mode != modeRun {
		panic("cuda: Download during graph capture")
	}
	defer b.enter()()
	if len(dst) > 0 {
		must(cu.MemcpyDtoHAsync(unsafe.Pointer(&dst[0]), s.data, int64(4*len(dst)), b.stream))
	}
	b.sync()
}

func tensor(t kernels.Tensor, op string) *Tensor {
	c, ok := t.(*Tensor)
	if !ok || c == nil {
		panic(fmt.Sprintf("cuda: %s: tensor %T is not a cuda tensor", op, t))
	}
	return c
}

func f32Tensor(t kernels.Tensor, op string) *Tensor {
	c := tensor(t, op)
	if c.dt != kernels.F32 {
		panic(fmt.Sprintf("cuda: %s: %v tensor where F32 is needed", op, c.dt))
	}
	return c
}

func writable(t kernels.Tensor, op string) *Tensor {
	c := f32Tensor(t, op)
	if c.readOnly {
		panic(fmt.Sprintf("cuda: %s: cannot write to a weight tensor", op))
	}
	return c
}

func sameShape(op string, a, b *Tensor) {
	if a.rows != b.rows || a.cols != b.cols {
		panic(fmt.Sprintf("cuda: %s: shapes %d×%d and %d×%d differ", op, a.rows, a.cols, b.rows, b.cols))
	}
}

// row0F32 returns the device address of w's row 0 as F32 values,
// converting (once) when w has another type.
func (b *Backend) row0F32(w *Tensor) cu.DevicePtr {
	if w.dt == kernels.F32 {
		return w.data
	}
	if w.row0 == nil {
		if b.mode != modeRun {
			panic("cuda: weight row converted during graph capture; run the step once before capturing it")
		}
		r := b.Alloc(1, w.cols).(*Tensor)
		b.gather(r, w, []int32{0})
		w.row0 = r
	}
	return w.row0.data
}
