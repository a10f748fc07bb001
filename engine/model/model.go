// Package model loads GGUF language models and runs their forward pass on a
// kernels.Backend.
//
// An architecture is a small package (engine/model/llama) that registers a
// constructor by its general.architecture name; Load picks it from the file.
package model

import (
	"fmt"
	"sort"
	"sync"

	"github.com/specgate/specgate/engine/model/gguf"
	"github.com/specgate/specgate/engine/tokenizer"
	"github.com/specgate/specgate/kernels"
)

// Config is the shape of a loaded model.
type Config struct {
	Arch       string
	Name       string
	Layers     int
	Dim        int
	Heads      int
	KVHeads    int
	HeadDim    int
	FFN        int
	Vocab      int
	Context    int // trained context length
	WeightType kernels.DType
	Params     int64 // parameter count
	// WeightBytes is how many bytes of weights one forward pass reads.
	WeightBytes int64
}

// KVWidth is the width of one token's K (or V) row in one layer.
func (c Config) KVWidth() int { return c.KVHeads * c.HeadDim }

// KVSpec is the shape of a paged KV cache the model reads and writes:
// one K and one V row of KVWidth per token slot in each of its layers,
// here in blocks of blockSize slots holding elements of type dt. A caller
// makes the cache through the backend (kernels.Backend.NewKV), so the
// model need not be asked.
func (c Config) KVSpec(blocks, blockSize int, dt kernels.DType) kernels.KVSpec {
	return kernels.KVSpec{Layers: c.Layers, Blocks: blocks, BlockSize: blockSize, Width: c.KVWidth(), DType: dt}
}

// Model is what runs batches: weights on a backend and a forward pass.
// Forward is not safe for concurrent use: one goroutine drives a model.
// The text side of a model file (Text) and its KV element type setting
// (KVTyper) are optional interfaces, so a runner that only feeds token
// ids, such as a draft model, needs neither; a KV cache is made through
// the backend in the shape Config reports (Config.KVSpec, NewKV).
type Model interface {
	Config() Config
	// Backend is the backend the weights live on.
	Backend() kernels.Backend
	// Forward runs b through the model, writing its K/V to kv at b.Slots,
	// and returns the next-token logits of the rows b.Logits names, where
	// the backend computed them: an F32 tensor of len(b.Logits) rows of
	// Vocab values on Backend(), row i for b.Logits[i] (nil when
	// b.Logits is empty). It is the model's scratch, valid until the next
	// Forward: the caller reduces it to tokens with the backend's
	// kernels.Sampler where there is one, and copies rows to the host only
	// where it needs them there (ForwardHost).
	Forward(kv kernels.KVCache, b *Batch) (kernels.Tensor, error)
	// Close releases the model file (not the backend).
	Close() error
}

// Text is an optional Model interface: the tokenizer and chat template
// a model file carries. The engine needs it of the model it serves.
type Text interface {
	Tokenizer() *tokenizer.Tokenizer
	// ChatTemplate is tokenizer.chat_template from the file ("" if none).
	ChatTemplate() string
}

// TokenizerOf returns m's tokenizer, or nil when m has no Text.
func TokenizerOf(m Model) *tokenizer.Tokenizer {
	if t, ok := m.(Text); ok {
		return t.Tokenizer()
	}
	return nil
}

// KVTyper is an optional Model interface: the element type the caches
// for the model are made with (NewKV), kept with the model so one setting
// reaches every runner built on it.
type KVTyper interface {
	// KVType is the element type: at first DefaultKVType(Backend()).
	KVType() kernels.DType
	// SetKVType sets it from then on (caches made before keep theirs).
	// It fails for a type the backend does not store
	// (kernels.SupportsKV).
	SetKVType(dt kernels.DType) error
}

// KVTypeOf returns m's KV element type: its KVType, or
// DefaultKVType(m.Backend()) when m has no KVTyper.
func KVTypeOf(m Model) kernels.DType {
	if t, ok := m.(KVTyper); ok {
		return t.KVType()
	}
	return DefaultKVType(m.Backend())
}

// NewKV allocates, through m's backend, a paged KV cache in m's shape of
// the given number of blocks, holding elements of type KVTypeOf(m).
func NewKV(m Model, blocks, blockSize int) (kernels.KVCache, error) {
	return m.Backend().NewKV(m.Config().KVSpec(blocks, blockSize, KVTypeOf(m)))
}

// Loaded is a model loaded from a file: a Model with its Text and its KV
// element type setting.
type Loaded interface {
	Model
	Text
	KVTyper
}

// ForwardHost runs m.Forward and copies the logits to out
// (len(b.Logits)·Vocab floats, row after row): for callers that work on
// host rows, such as the reference sequence runner and a draft model.
func ForwardHost(m Model, kv kernels.KVCache, b *Batch, out []float32) error {
	lt, err := m.Forward(kv, b)
	if err != nil || lt == nil {
		return err
	}
	rows, cols := lt.Dims()
	if len(out) < rows*cols {
		return fmt.Errorf("model: output of %d floats for %d logit rows of %d", len(out), rows, cols)
	}
	m.Backend().Download(out[:rows*cols], lt)
	return nil
}

// DefaultKVType is the KV cache element type a model starts with on b: F16
// where b stores it, as llama.cpp does by default (half the memory and half
// the bytes attention streams per token, for K and V rounded to 11
// significant bits), and F32 otherwise.
func DefaultKVType(b kernels.Backend) kernels.DType {
	if kernels.SupportsKV(b, kernels.F16) {
		return kernels.F16
	}
	return kernels.F32
}

// Constructor builds a model of one architecture from an open GGUF file.
// The model owns f from then on and closes it.
type Constructor func(f *gguf.File, b kernels.Backend) (Loaded, error)

var (
	archMu sync.Mutex // protects archs
	archs  = map[string]Constructor{}
)

// Register makes an architecture loadable. It panics on an empty name, a nil
// constructor or a duplicate: registration happens in init.
func Register(arch string, c Constructor) {
	archMu.Lock()
	defer archMu.Unlock()
	if arch == "" || c == nil {
		panic("model: Register with empty name or nil constructor")
	}
	if _, dup := archs[arch]; dup {
		panic("model: Register called twice for " + arch)
	}
	archs[arch] = c
}

// Archs returns the registered architectures, sorted.
func Archs() []string {
	archMu.Lock()
	defer archMu.Unlock()
	var n []string
	for a := range archs {
		n = append(n, a)
	}
	sort.Strings(n)
	return n
}

// Load opens a GGUF file and builds its model on b.
func Load(path string, b kernels.Backend) (Loaded, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	arch, _ := f.String("general.architecture")
	archMu.Lock()
	c := archs[arch]
	archMu.Unlock()
	if c == nil {
		f.Close()
		return nil, fmt.Errorf("model: %s: architecture %q is not supported (supported: %v)", path, arch, Archs())
	}
	m, err := c(f, b)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("model: %s: %w", path, err)
	}
	return m, nil
}
