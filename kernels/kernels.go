// Package kernels defines the tensor operations a model needs from a compute
// backend, and a registry of backends by name.
//
// Models are written once against Backend; a backend (kernels/cpu,
// kernels/cuda) implements the ops for its device. Library packages never
// import a backend: cmd/ and tests do, and each backend registers itself in
// its init, the way database/sql drivers do.
//
// A Tensor is a 2-D row-major array (rows × cols) owned by the backend that
// made it. Weights keep their stored type (F32, F16, BF16, Q8_0, Q4_0 and
// the GGML quantizations listed under DType);
// activations are always F32. Faster fused ops (tree attention, masked
// sampling, ...) are separate small interfaces that callers check for, each
// with a reference fallback whose math its doc comment states.
package kernels

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
)

// DType is a tensor element type. The values are GGML's type ids, so a GGUF
// tensor's type converts directly.
type DType uint32

const (
	F32    DType = 0
	F16    DType = 1
	Q4_0   DType = 2
	Q4_1   DType = 3
	Q5_0   DType = 6
	Q5_1   DType = 7
	Q8_0   DType = 8
	Q2_K   DType = 10
	Q3_K   DType = 11
	Q4_K   DType = 12
	Q5_K   DType = 13
	Q6_K   DType = 14
	IQ4_NL DType = 20
	IQ4_XS DType = 23
	BF16   DType = 30
)

// QK is the number of elements in one Q8_0 or Q4_0 block (and in the
// other 32-element blocks: Q4_1, Q5_0, Q5_1, IQ4_NL).
const QK = 32

// QKK is the number of elements in one super-block of the K-quants
// (Q2_K to Q6_K) and IQ4_XS.
const QKK = 256

// typeInfo is a stored type's name and block geometry.
type typeInfo struct {
	name         string
	elems, bytes int
}

var types = map[DType]typeInfo{
	F32:    {"F32", 1, 4},
	F16:    {"F16", 1, 2},
	BF16:   {"BF16", 1, 2},
	Q8_0:   {"Q8_0", QK, 2 + QK},            // f16 d, int8 q[32]
	Q4_0:   {"Q4_0", QK, 2 + QK/2},          // f16 d, nibbles
	Q4_1:   {"Q4_1", QK, 4 + QK/2},          // f16 d, f16 m, nibbles
	Q5_0:   {"Q5_0", QK, 6 + QK/2},          // f16 d, fifth bits, nibbles
	Q5_1:   {"Q5_1", QK, 8 + QK/2},          // f16 d, f16 m, fifth bits, nibbles
	IQ4_NL: {"IQ4_NL", QK, 2 + QK/2},        // f16 d, nibbles indexing a table
	Q2_K:   {"Q2_K", QKK, 16 + 64 + 4},      // scales, 2-bit quants, f16 d, dmin
	Q3_K:   {"Q3_K", QKK, 32 + 64 + 12 + 2}, // high bits, low bits, scales, f16 d
	Q4_K:   {"Q4_K", QKK, 4 + 12 + 128},     // f16 d, dmin, scales, nibbles
	Q5_K:   {"Q5_K", QKK, 4 + 12 + 32 + 128},
	Q6_K:   {"Q6_K", QKK, 128 + 64 + 16 + 2}, // low nibbles, high bits, scales, f16 d
	IQ4_XS: {"IQ4_XS", QKK, 2 + 2 + 4 + 128},
}

func (t DType) String() string {
	if ti, ok := types[t]; ok {
		return ti.name
	}
	return fmt.Sprintf("type(%d)", uint32(t))
}

// Known reports whether the type is one this package can describe.
func (t DType) Known() bool {
	_, ok := types[t]
	return ok
}

// BlockElems is the number of elements stored together in one block
// (1 for plain float types).
func (t DType) BlockElems() int {
	if ti, ok := types[t]; ok {
		return ti.elems
	}
	return 1
}

// BlockBytes is the size in bytes of one block.
func (t DType) BlockBytes() int { return types[t].bytes }

// RowBytes returns the bytes one row of cols elements takes, or an error when
// cols is not a whole number of blocks or the type is unknown.
func (t DType) RowBytes(cols int) (int, error) {
	if !t.Known() {
		return 0, fmt.Errorf("kernels: unknown type %d", uint32(t))
	}
	if cols < 0 || cols%t.BlockElems() != 0 {
		return 0, fmt.Errorf("kernels: %v row of %d elements is not a whole number of %d-element blocks", t, cols, t.BlockElems())
	}
	return cols / t.BlockElems() * t.BlockBytes(), nil
}

// Tensor is a 2-D row-major array owned by a Backend.
type Tensor interface {
	DType() DType
	// Dims returns (rows, cols).
	Dims() (rows, cols int)
}

// DataOwner is implemented by weight tensors that may hold a copy of the
// bytes Backend.Weights was given (laid out anew, or in device memory)
// instead of those bytes. OwnsData reports whether this one does: the
// caller may then let the pages of its bytes go (a model file's mapping,
// where keeping them would count every such weight twice in the process's
// memory).
type DataOwner interface {
	OwnsData() bool
}

// RoPE describes a rotary position embedding.
type RoPE struct {
	// HeadDim is the width of one head; Dims (≤ HeadDim) of its elements
	// are rotated, the rest pass through. Zero Dims means HeadDim.
	HeadDim, Dims int
	// Base is the frequency base (theta); zero means 10000.
	Base float32
	// Scale divides positions (linear scaling); zero means 1.
	Scale float32
	// NeoX selects the rotate-half layout (pairs i and i+Dims/2) used by
	// GPT-NeoX-style models such as Qwen2; otherwise adjacent pairs (2i,
	// 2i+1) rotate, as in the original Llama.
	NeoX bool
	// Freqs, when not nil, holds per-pair frequency divisors (Llama 3
	// style scaling): pair i rotates by pos / (Base^(2i/Dims) * Freqs[i]).
	Freqs []float32
}

// KVSpec sizes a paged KV cache.
type KVSpec struct {
	Layers int
	// Blocks is the number of blocks; each holds BlockSize token slots.
	Blocks, BlockSize int
	// Width is the K (and V) row width: kv heads × head dim.
	Width int
	// DType is the element type K and V are stored as. The zero value,
	// F32, stores StoreKV's rows exactly. F16 (llama.cpp's default KV
	// type) halves the cache's memory and the bytes attention streams per
	// position, rounding each value to the nearest half (ties to even;
	// from ±65520 on it becomes ±Inf); attention still computes in F32.
	// A backend's NewKV refuses a type it does not store: see SupportsKV.
	DType DType
}

// BlockBytes is the memory one block takes: K and V of BlockSize slots in
// every layer.
func (s KVSpec) BlockBytes() int64 {
	return int64(s.Layers) * 2 * int64(s.BlockSize) * int64(s.Width) * int64(s.DType.BlockBytes())
}

// KVTyper is an optional Backend interface for backends whose KV cache
// stores element types other than F32: KVTypes lists the KVSpec.DType
// values NewKV accepts. A backend without it stores F32 only.
type KVTyper interface {
	KVTypes() []DType
}

// SupportsKV reports whether b's NewKV accepts KVSpec.DType dt: F32
// always, other types when b lists them (KVTyper).
func SupportsKV(b Backend, dt DType) bool {
	if dt == F32 {
		return true
	}
	t, ok := b.(KVTyper)
	return ok && slices.Contains(t.KVTypes(), dt)
}

// BaseWeightTypes are the stored types every backend's Weights accepts.
var BaseWeightTypes = []DType{F32, F16, BF16, Q8_0, Q4_0}

// WeightTyper is an optional Backend interface for backends that compute
// with stored types beyond BaseWeightTypes: WeightTypes lists every type
// Weights accepts.
type WeightTyper interface {
	WeightTypes() []DType
}

// SupportsWeights reports whether b's Weights accepts stored type dt: the
// BaseWeightTypes always, others when b lists them (WeightTyper).
func SupportsWeights(b Backend, dt DType) bool {
	if slices.Contains(BaseWeightTypes, dt) {
		return true
	}
	t, ok := b.(WeightTyper)
	return ok && slices.Contains(t.WeightTypes(), dt)
}

// KVCache holds the keys and values of every layer in fixed-size blocks of
// token slots. Slot s lives in block s/BlockSize at offset s%BlockSize.
type KVCache interface {
	Spec() KVSpec
}

// AttnRow is one query row's view of the cache.
type AttnRow struct {
	// Table lists the blocks of the row's sequence in position order.
	Table []int32
	// Len is how many positions (from 0) the row attends to; for causal
	// attention it is the row's position + 1.
	Len int32
}

// Attn describes an attention call over a batch of query rows.
type Attn struct {
	Heads, KVHeads, HeadDim int
	// Scale multiplies q·k; zero means 1/sqrt(HeadDim).
	Scale float32
	// SoftCap, when positive, caps every scaled score s before the
	// softmax: s = SoftCap·tanh(s·(1/SoftCap)), computed in float32
	// (Gemma 2's attention logit soft-capping). Zero means off. Only a
	// backend that is an AttnVariants honours it.
	SoftCap float32
	// Window, when positive, is a sliding window: row r attends only to
	// positions [max(0, Len−Window), Len) (a key at distance Window or
	// more from the query at Len−1 is masked). Zero means every position.
	// Only a backend that is an AttnVariants honours it.
	Window int32
	Rows   []AttnRow
}

// AttnVariants is an optional Backend interface: its Attention (and
// TreeAttention, where it has one) honours Attn.SoftCap and Attn.Window.
// A backend without it ignores both, so a model whose architecture needs
// them checks SupportsAttn first.
type AttnVariants interface {
	// SupportsAttn reports whether the backend computes a's SoftCap and
	// Window. For TreeAttention a Window holds for the prefix only: a
	// tree row's own slots are always seen.
	SupportsAttn(a Attn) bool
}

// SupportsAttn reports whether b computes attention as a describes: always
// when a has neither SoftCap nor Window, otherwise when b says so.
func SupportsAttn(b Backend, a Attn) bool {
	if a.SoftCap == 0 && a.Window == 0 {
		return true
	}
	v, ok := b.(AttnVariants)
	return ok && v.SupportsAttn(a)
}

// BlockCopy moves one block between caches (or within one).
type BlockCopy struct{ Src, Dst int32 }

// Backend is the set of ops a model's forward pass needs. Methods are not
// safe for concurrent use unless an implementation says otherwise: one
// goroutine (the engine's step loop) drives a backend. Shape mismatches are
// programming errors and may panic; anything that depends on input (a token
// id, a position) is checked by the caller or returns an error.
type Backend interface {
	Name() string

	// Weights wraps rows × cols elements of type dt stored in data
	// (rows × RowBytes(cols) bytes). data must stay valid and unchanged
	// for the backend's lifetime: the CPU backend uses most types in
	// place, but may keep a copy in a layout of its own instead (see
	// DataOwner).
	Weights(dt DType, rows, cols int, data []byte) (Tensor, error)
	// Alloc returns a zeroed F32 tensor.
	Alloc(rows, cols int) Tensor
	// Slice returns a view of rows [r0, r1) sharing t's memory.
	Slice(t Tensor, r0, r1 int) Tensor
	// Upload copies host floats into an F32 tensor (len(src) = rows*cols).
	Upload(dst Tensor, src []float32)
	// Download copies an F32 tensor to host floats.
	Download(dst []float32, src Tensor)

	// Gather sets dst row i to src row idx[i], converted to F32. It is the
	// token embedding lookup when src is the embedding table.
	Gather(dst, src Tensor, idx []int32)
	// RMSNorm: dst[r] = x[r] / sqrt(mean(x[r]²) + eps) * w[0].
	RMSNorm(dst, x, w Tensor, eps float32)
	// MatMul: dst[r][o] = Σ_i x[r][i] · w[o][i]. x is F32 (batch rows); w
	// any weight type; each weight row is read once for all of x's rows.
	MatMul(dst, x, w Tensor)
	// AddBias: x[r] += b[0] for every row.
	AddBias(x, b Tensor)
	// Add: dst = a + b, element-wise (dst may alias a).
	Add(dst, a, b Tensor)
	// SwiGLU: dst = silu(gate) * up, element-wise; silu(x) = x/(1+e^-x).
	SwiGLU(dst, gate, up Tensor)
	// RoPE rotates every head of each row of x in place, row r at
	// position pos[r].
	RoPE(x Tensor, pos []int32, p RoPE)

	// NewKV allocates a zeroed paged KV cache. It returns an error for a
	// spec it cannot make, an element type it does not store among them.
	NewKV(s KVSpec) (KVCache, error)
	// StoreKV writes row r of k and v into slot slots[r] of layer,
	// converted to the cache's element type.
	StoreKV(c KVCache, layer int, k, v Tensor, slots []int32)
	// Attention computes, for each query row r of q (Heads × HeadDim
	// wide), softmax(Scale · q·Kᵀ) · V over positions [0, Rows[r].Len) of
	// the row's block table, query head h reading kv head
	// h / (Heads/KVHeads). The result goes to dst (same shape as q).
	Attention(dst, q Tensor, c KVCache, layer int, a Attn)
	// CopyBlocks copies whole blocks (every layer, K and V) from src to
	// dst; the two caches must share Layers, BlockSize, Width and DType.
	// It is how the prefix cache moves blocks between tiers.
	CopyBlocks(dst, src KVCache, moves []BlockCopy)

	// Close releases the backend's workers and memory.
	Close() error
}

// MatMulMany is an optional fast path for several weights against the same
// activations (a layer's Q, K and V; its gate and up): the activations are
// prepared once and one pass covers every weight's rows. Its result is
// exactly MatMul(dsts[i], x, ws[i]) for each i.
type MatMulMany interface {
	MatMulMany(dsts []Tensor, x Tensor, ws []Tensor)
}

// Options configure a backend at Open. The zero value picks defaults.
type Options struct {
	// Threads is the number of worker threads; zero means one per CPU.
	Threads int
}

// Factory makes a backend.
type Factory func(Options) (Backend, error)

var (
	registryMu sync.Mutex // protects registry
	registry   = map[string]Factory{}
)

// Register makes a backend available by name. It panics when name is empty,
// f is nil or the name is already taken: registration happens in init, so a
// clash is a programming error.
func Register(name string, f Factory) {
	registryMu.Lock()
	defer registryMu.Unlock()
	if name == "" {
		panic("kernels: Register with empty name")
	}
	if f == nil {
		panic("kernels: Register " + name + " with nil factory")
	}
	if _, dup := registry[name]; dup {
		panic("kernels: Register called twice for " + name)
	}
	registry[name] = f
}

// Names returns the registered backends, sorted.
func Names() []string {
	registryMu.Lock()
	defer registryMu.Unlock()
	names := make([]string, 0, len(registry))
	for n := range registry {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// ErrUnknownBackend is returned by Open for a name nobody registered.
var ErrUnknownBackend = errors.New("kernels: unknown backend")

// Open makes a backend by its registered name.
func Open(name string, o Options) (Backend, error) {
	registryMu.Lock()
	f := registry[name]
	registryMu.Unlock()
	if f == nil {
		return nil, fmt.Errorf("%w %q (registered: %v)", ErrUnknownBackend, name, Names())
	}
	b, err := f(o)
	if err != nil {
		return nil, fmt.Errorf("kernels: open %s: %w", name, err)
	}
	return b, nil
}
