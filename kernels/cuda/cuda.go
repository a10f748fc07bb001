//go:build cuda

package cuda

import (
	_ "embed"
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"runtime"
	"sync"
	"unsafe"

	"gorgonia.org/cu"

	"github.com/specgate/specgate/kernels"
)

// The PTX is generated from kernels.cu by `make ptx` and committed; a test
// without the cuda tag checks it is not stale (ptx.stamp).
var (
	//go:embed kernels_sm80.ptx
	ptxSM80 string
	//go:embed kernels_sm90.ptx
	ptxSM90 string
)

func init() {
	kernels.Register("cuda", func(o kernels.Options) (kernels.Backend, error) { return Open(o) })
}

// kernel names a function of the PTX module.
type kernel int

const (
	kGather kernel = iota
	kRMSNorm
	kAdd
	kAddBias
	kSwiGLU
	kRoPE
	kMMGeneric
	kSplitHalf
	kMMF16n8
	kMMF16n16
	kMMF16n32
	kMMBF16n8
	kMMBF16n16
	kMMBF16n32
	kQuantQ8
	kMMQ8n1
	kMMQ8n2
	kMMQ8n4
	kMMQ8n8
	kMMQ4n1
	kMMQ4n2
	kMMQ4n4
	kMMQ4n8
	kStoreKV
	kCopyUnits
	kAttnE1
	kAttnE2
	kAttnE4
	kAttnE8
	kAttnMerge
	kMaskLogits
	kArgmaxRows
	kSampleRows
	kPenalizeRows
	numKernels
)

var kernelNames = [numKernels]string{
	kGather: "gather", kRMSNorm: "rmsnorm", kAdd: "add", kAddBias: "add_bias", kSwiGLU: "swiglu",
	kRoPE: "rope", kMMGeneric: "mm_generic", kSplitHalf: "split_half",
	kMMF16n8: "mm_f16_n8", kMMF16n16: "mm_f16_n16", kMMF16n32: "mm_f16_n32",
	kMMBF16n8: "mm_bf16_n8", kMMBF16n16: "mm_bf16_n16", kMMBF16n32: "mm_bf16_n32",
	kQuantQ8: "quant_q8",
	kMMQ8n1:  "mm_q8_n1", kMMQ8n2: "mm_q8_n2", kMMQ8n4: "mm_q8_n4", kMMQ8n8: "mm_q8_n8",
	kMMQ4n1: "mm_q4_n1", kMMQ4n2: "mm_q4_n2", kMMQ4n4: "mm_q4_n4", kMMQ4n8: "mm_q4_n8",
	kStoreKV: "store_kv", kCopyUnits: "copy_units",
	kAttnE1: "attn_e1", kAttnE2: "attn_e2", kAttnE4: "attn_e4", kAttnE8: "attn_e8", kAttnMerge: "attn_merge",
	kMaskLogits: "mask_logits", kArgmaxRows: "argmax_rows", kSampleRows: "sample_rows",
	kPenalizeRows: "penalize_rows",
}

// arenaBytes is the size of the pinned staging area through which each op's
// small host arguments (indices, positions, block tables, masks) reach the
// device.
const arenaBytes = 16 << 20

// Backend implements kernels.Backend on one NVIDIA GPU through the CUDA
// driver API. Like every backend it is driven by one goroutine; its ops are
// not safe for concurrent use. Ops are queued on one stream and return
// before the device has run them; Download waits for them. A device error
// inside an op (which has no error result) panics: it means the device or
// the program is broken, not the input.
type Backend struct {
	dev    cu.Device
	ctx    cu.CUContext
	mod    cu.Module
	fn     [numKernels]cu.Function
	stream cu.Stream // every op
	copies cu.Stream // KV block moves between the device and the host pool
	sm     int       // compute capability, major*10 + minor
	p      params
	closed bool

	// arena is pinned host memory mirrored by a device buffer; ops append
	// their arguments at used and copy them over on the stream. It is
	// rewound when the stream is known to be idle (after a Download).
	arenaHost unsafe.Pointer
	arenaDev  cu.DevicePtr
	used      int

	// Scratch device buffers, grown on demand: x split into halves or
	// quantized for MatMul, and attention partials.
	xh, xl, xq, xd, po, pm, pl buffer

	pool *memPool

	// samp is SampleRows' scratch: rows copied there are masked and
	// penalised without touching the logits.
	samp *Tensor

	// Graph capture (see graph.go).
	mode  mode
	trace maphash.Hash
	seed  maphash.Seed
}

type mode int

const (
	modeRun     mode = iota // launch as the ops come
	modeCapture             // launches are captured into a graph
	modeArgs                // a graph replay: stage arguments only
)

// buffer is a device allocation that grows and never shrinks.
type buffer struct {
	ptr  cu.DevicePtr
	size int
}

var _ kernels.Backend = (*Backend)(nil)
var _ kernels.TreeAttention = (*Backend)(nil)
var _ kernels.SlotCopier = (*Backend)(nil)

// ErrNoDevice is returned by Open when no CUDA device can be used.
var ErrNoDevice = errors.New("cuda: no usable device")

// Open makes a backend on device 0. Options.Threads is ignored.
func Open(o kernels.Options) (*Backend, error) {
	n, err := cu.NumDevices()
	if err != nil || n == 0 {
		return nil, fmt.Errorf("%w: %v", ErrNoDevice, err)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	b := &Backend{seed: maphash.MakeSeed()}
	if b.dev, err = cu.GetDevice(0); err != nil {
		return nil, fmt.Errorf("cuda: device 0: %w", err)
	}
	major, minor, err := b.dev.ComputeCapability()
	if err != nil {
		return nil, fmt.Errorf("cuda: compute capability: %w", err)
	}
	b.sm = major*10 + minor
	if b.sm < 80 {
		return nil, fmt.Errorf("%w: compute capability %d.%d, need 8.0 or newer", ErrNoDevice, major, minor)
	}
	if b.ctx, err = b.dev.RetainPrimaryCtx(); err != nil {
		return nil, fmt.Errorf("cuda: primary context: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			b.release()
		}
	}()
	if err := cu.SetCurrentContext(b.ctx); err != nil {
		return nil, fmt.Errorf("cuda: set context: %w", err)
	}
	image := ptxSM80
	if b.sm >= 90 {
		image = ptxSM90
	}
	if b.mod, err = cu.LoadData(image); err != nil {
		return nil, fmt.Errorf("cuda: load PTX for sm_%d: %w", b.sm, err)
	}
	for k, name := range kernelNames {
		if b.fn[k], err = b.mod.Function(name); err != nil {
			return nil, fmt.Errorf("cuda: kernel %s: %w", name, err)
		}
	}
	if b.stream, err = cu.MakeStream(cu.NonBlocking); err != nil {
		return nil, fmt.Errorf("cuda: stream: %w", err)
	}
	if b.copies, err = cu.MakeStream(cu.NonBlocking); err != nil {
		return nil, fmt.Errorf("cuda: copy stream: %w", err)
	}
	if b.arenaHost, _, err = hostAlloc(arenaBytes); err != nil {
		return nil, err
	}
	if b.arenaDev, err = cu.MemAlloc(arenaBytes); err != nil {
		return nil, fmt.Errorf("cuda: arena: %w", err)
	}
	b.p = newParams()
	b.pool = &memPool{free: map[int][]cu.DevicePtr{}}
	ok = true
	return b, nil
}

// Name returns "cuda".
func (b *Backend) Name() string { return "cuda" }

// ComputeCapability returns the device's major*10 + minor version.
func (b *Backend) ComputeCapability() int { return b.sm }

// DeviceName returns the device's name.
func (b *Backend) DeviceName() string {
	n, _ := b.dev.Name()
	return n
}

// Close waits for queued work and releases the device memory, streams and
// context. It is safe to call more than once; the backend must not be
// used afterwards. Tensors and caches made by the backend become invalid.
func (b *Backend) Close() error {
	if b.closed {
		return nil
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := cu.SetCurrentContext(b.ctx); err != nil {
		return err
	}
	err := b.stream.Synchronize()
	b.release()
	return err
}

func (b *Backend) release() {
	b.closed = true
	for _, buf := range []*buffer{&b.xh, &b.xl, &b.xq, &b.xd, &b.po, &b.pm, &b.pl} {
		if buf.ptr != 0 {
			cu.MemFree(buf.ptr)
			*buf = buffer{}
		}
	}
	if b.pool != nil {
		b.pool.drain()
	}
	if b.arenaDev != 0 {
		cu.MemFree(b.arenaDev)
	}
	if b.arenaHost != nil {
		hostFree(b.arenaHost)
	}
	if b.p.slots != nil {
		b.p.free()
	}
	if b.mod != (cu.Module{}) {
		b.mod.Unload()
	}
	if b.stream != (cu.Stream{}) {
		b.stream.Destroy()
	}
	if b.copies != (cu.Stream{}) {
		b.copies.Destroy()
	}
	b.dev.ReleasePrimaryCtx()
}

// enter makes the backend's context current on the calling OS thread for
// the length of one op; the returned func undoes the thread lock.
func (b *Backend) enter() func() {
	if b.closed {
		panic("cuda: backend used after Close")
	}
	runtime.LockOSThread()
	if err := cu.SetCurrentContext(b.ctx); err != nil {
		runtime.UnlockOSThread()
		panic(fmt.Sprintf("cuda: set context: %v", err))
	}
	return runtime.UnlockOSThread
}

func must(err error) {
	if err != nil {
		panic(err)
	}
}

// launch queues kernel k with scalar parameters, one 8-byte slot each:
// device pointers and int64s as they are, int32s and float32s in the low
// half (see kernels.cu). In a replay it only checks that the launch is the
// one captured.
func (b *Backend) launch(k kernel, gx, gy, gz, block, shm int, args ...uint64) {
	if len(args) > maxParams {
		panic("cuda: too many kernel parameters")
	}
	b.note(k, gx, gy, gz, block, args)
	if b.mode == modeArgs {
		return
	}
	copy(b.p.slots[:], args)
	for i := range args {
		b.p.ptrs[i] = unsafe.Pointer(&b.p.slots[i])
	}
	must(launchRaw(b.fn[k], gx, gy, gz, block, shm, b.stream, &b.p))
}

// launchStruct queues kernel k whose single parameter is the C struct at
// s (size bytes, a multiple of 8 and at most 8*maxParams).
func (b *Backend) launchStruct(k kernel, gx, gy, gz, block int, s unsafe.Pointer, size int) {
	words := unsafe.Slice((*uint64)(s), size/8)
	b.note(k, gx, gy, gz, block, words)
	if b.mode == modeArgs {
		return
	}
	copy(b.p.slots[:], words)
	b.p.ptrs[0] = unsafe.Pointer(&b.p.slots[0])
	must(launchRaw(b.fn[k], gx, gy, gz, block, 0, b.stream, &b.p))
}

// Argument encoders for launch.
func ptr(d cu.DevicePtr) uint64 { return uint64(d) }
func i32(v int) uint64          { return uint64(uint32(int32(v))) }
func i64(v int) uint64          { return uint64(int64(v)) }
func f32(v float32) uint64      { return uint64(math.Float32bits(v)) }
func f64(v float64) uint64      { return math.Float64bits(v) }

// stage copies host words to the device through the arena and returns
// their device address, 16-byte aligned. The copy is queued on the stream,
// so kernels queued after it see the data.
func (b *Backend) stage(src unsafe.Pointer, n int) cu.DevicePtr {
	if n == 0 {
		return b.arenaDev
	}
	off := (b.used + 15) &^ 15
	if off+n > arenaBytes {
		if b.mode != modeRun {
			panic("cuda: argument arena full during graph capture")
		}
		must(b.stream.Synchronize())
		off = 0
	}
	if n > arenaBytes {
		panic(fmt.Sprintf("cuda: %d bytes of arguments exceed the %d-byte arena", n, arenaBytes))
	}
	copy(unsafe.Slice((*byte)(unsafe.Add(b.arenaHost, off)), n), unsafe.Slice((*byte)(src), n))
	b.used = off + n
	d := b.arenaDev + cu.DevicePtr(off)
	if b.mode != modeArgs {
		must(cu.MemcpyHtoDAsync(d, unsafe.Add(b.arenaHost, off), int64(n), b.stream))
	}
	return d
}

func (b *Backend) stageInt32(v []int32) cu.DevicePtr {
	if len(v) == 0 {
		return b.stage(nil, 0)
	}
	return b.stage(unsafe.Pointer(&v[0]), 4*len(v))
}

func (b *Backend) stageFloat64(v []float64) cu.DevicePtr {
	if len(v) == 0 {
		return b.stage(nil, 0)
	}
	return b.stage(unsafe.Pointer(&v[0]), 8*len(v))
}

func (b *Backend) stageUint64(v []uint64) cu.DevicePtr {
	if len(v) == 0 {
		return b.stage(nil, 0)
	}
	return b.stage(unsafe.Pointer(&v[0]), 8*len(v))
}

func (b *Backend) stageFloat32(v []float32) cu.DevicePtr {
	if len(v) == 0 {
		return b.stage(nil, 0)
	}
	return b.stage(unsafe.Pointer(&v[0]), 4*len(v))
}

// sync waits for the stream, then rewinds the arena and returns freed
// tensors' memory to the pool.
func (b *Backend) sync() {
	must(b.stream.Synchronize())
	if b.mode == modeRun {
		b.used = 0
	}
}

// grow makes buf at least n bytes. The old buffer may still be read by
// queued kernels, so it is freed only after the stream is idle.
func (b *Backend) grow(buf *buffer, n int) cu.DevicePtr {
	if buf.size >= n {
		return buf.ptr
	}
	if b.mode != modeRun {
		panic("cuda: scratch buffer grows during graph capture; run the step once before capturing it")
	}
	if buf.ptr != 0 {
		must(b.stream.Synchronize())
		must(cu.MemFree(buf.ptr))
	}
	size := max(n, 2*buf.size, 1<<16)
	p, err := cu.MemAlloc(int64(size))
	if err != nil {
		panic(fmt.Sprintf("cuda: scratch of %d bytes: %v", size, err))
	}
	*buf = buffer{ptr: p, size: size}
	return p
}

// memPool recycles device allocations of F32 tensors by size class, so the
// per-step scratch tensors of a model do not call cuMemAlloc each time.
// Tensors give their memory back through a cleanup when they become
// unreachable; since every op runs on one stream, a reuse is ordered after
// every kernel that used the memory before.
type memPool struct {
	mu   sync.Mutex // protects the fields below
	free map[int][]cu.DevicePtr
	// freed holds memory returned by cleanups, which run on another
	// goroutine; the backend moves it to free on its own goroutine.
	freed []pooled
	// dead holds weight memory to free outright (weights are not pooled:
	// their sizes are exact, not size classes).
	dead     []cu.DevicePtr
	deadHost []unsafe.Pointer
}

type pooled struct {
	ptr  cu.DevicePtr
	size int
}

func sizeClass(n int) int {
	if n <= 256 {
		return 256
	}
	c := 256
	for c < n {
		c *= 2
	}
	return c
}

func (p *memPool) get(n int) (cu.DevicePtr, int, error) {
	c := sizeClass(n)
	p.mu.Lock()
	for _, f := range p.freed {
		p.free[f.size] = append(p.free[f.size], f.ptr)
	}
	p.freed = p.freed[:0]
	for _, d := range p.dead {
		cu.MemFree(d)
	}
	p.dead = p.dead[:0]
	for _, h := range p.deadHost {
		hostFree(h)
	}
	p.deadHost = p.deadHost[:0]
	if l := p.free[c]; len(l) > 0 {
		d := l[len(l)-1]
		p.free[c] = l[:len(l)-1]
		p.mu.Unlock()
		return d, c, nil
	}
	p.mu.Unlock()
	d, err := cu.MemAlloc(int64(c))
	return d, c, err
}

func (p *memPool) put(d cu.DevicePtr, size int) {
	p.mu.Lock()
	p.freed = append(p.freed, pooled{d, size})
	p.mu.Unlock()
}

// release queues memory for cuMemFree on the backend's goroutine.
func (p *memPool) release(d cu.DevicePtr) {
	p.mu.Lock()
	p.dead = append(p.dead, d)
	p.mu.Unlock()
}

func (p *memPool) drain() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, f := range p.freed {
		cu.MemFree(f.ptr)
	}
	for _, d := range p.dead {
		cu.MemFree(d)
	}
	for _, h := range p.deadHost {
		hostFree(h)
	}
	for _, l := range p.free {
		for _, d := range l {
			cu.MemFree(d)
		}
	}
	p.freed, p.dead, p.deadHost, p.free = nil, nil, nil, map[int][]cu.DevicePtr{}
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// gridFor returns a 1-D grid of block-sized blocks covering n items,
// capped so grid-stride loops take the rest.
func gridFor(n, block int) int { return max(1, min(ceilDiv(n, block), 65535)) }

func memsetAsync(d cu.DevicePtr, n int, s cu.Stream) error {
	return cu.MemsetD32Async(d, 0, int64(n), s)
}

// releaseHost queues pinned host memory for cuMemFreeHost on the
// backend's goroutine.
func (p *memPool) releaseHost(h unsafe.Pointer) {
	p.mu.Lock()
	p.deadHost = append(p.deadHost, h)
	p.mu.Unlock()
}
