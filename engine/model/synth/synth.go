// Package synth writes synthetic LLaMA-architecture GGUF models of any shape
// with seeded random weights, for tests and benchmarks that need a model of
// a size or type no real test file has.
//
// The files follow llama.cpp's layout for LLaMA (tensor names, GGUF dims,
// metadata keys and types) and carry a working tokenizer, so they load in
// this module's engine and in llama.cpp alike. The weights are noise: the
// text they produce is meaningless, but activations stay finite and outputs
// are reproducible from the seed.
package synth

import (
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/specgate/specgate/engine/model/gguf"
	"github.com/specgate/specgate/engine/model/internal/seeded"
	"github.com/specgate/specgate/kernels"
)

// ErrOptions is wrapped by every error about invalid Options.
var ErrOptions = errors.New("synth: invalid options")

// Options shape a model. The zero value is a tiny F32 model with a 512-token
// "llama" tokenizer.
type Options struct {
	// Layers is the number of transformer blocks; zero means 2.
	Layers int
	// Dim is the embedding width; zero means 64.
	Dim int
	// Heads is the number of query heads; zero means 4. Dim/Heads is the
	// head width, which must be even (RoPE rotates pairs).
	Heads int
	// KVHeads is the number of key/value heads (grouped-query attention);
	// zero means Heads. It must divide Heads.
	KVHeads int
	// FFN is the SwiGLU hidden width; zero means 8·Dim/3 rounded up to a
	// multiple of 32.
	FFN int
	// Vocab is the number of tokens; zero means 512. "llama" needs at
	// least 259 (3 control and 256 byte tokens), "gpt2" at least 261.
	Vocab int
	// Context is llama.context_length; zero means 512.
	Context int
	// Type is the type of the weight matrices (token embedding included):
	// F32 (the zero value), F16, BF16, Q8_0 or Q4_0. Norms stay F32. The
	// quantized types need Dim and FFN to be multiples of 32.
	Type kernels.DType
	// Seed seeds the weights; the same Options give the same bytes.
	Seed int64
	// TiedOutput leaves out output.weight, so the output projection reuses
	// token_embd.weight.
	TiedOutput bool
	// Tokenizer is "llama" (SentencePiece-style, the default when empty)
	// or "gpt2" (byte-level BPE with Llama 3's special tokens).
	Tokenizer string
	// RopeBase is llama.rope.freq_base; zero means 10000.
	RopeBase float32
}

// RMSEpsilon is the llama.attention.layer_norm_rms_epsilon of every model.
const RMSEpsilon = 1e-5

// validate fills defaults and checks the shape.
func (o *Options) validate() error {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&o.Layers, 2)
	def(&o.Dim, 64)
	def(&o.Heads, 4)
	def(&o.KVHeads, o.Heads)
	def(&o.FFN, (8*o.Dim/3+31)/32*32)
	def(&o.Vocab, 512)
	def(&o.Context, 512)
	if o.Tokenizer == "" {
		o.Tokenizer = "llama"
	}
	if o.RopeBase == 0 {
		o.RopeBase = 10000
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrOptions, fmt.Sprintf(format, args...))
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"Layers", o.Layers}, {"Dim", o.Dim}, {"Heads", o.Heads}, {"KVHeads", o.KVHeads}, {"FFN", o.FFN}, {"Vocab", o.Vocab}, {"Context", o.Context}} {
		if f.v < 0 || int64(f.v) > math.MaxUint32 {
			return bad("%s %d out of range", f.name, f.v)
		}
	}
	switch {
	case o.Dim%o.Heads != 0:
		return bad("Dim %d is not a multiple of Heads %d", o.Dim, o.Heads)
	case (o.Dim/o.Heads)%2 != 0:
		return bad("head width %d (Dim %d / Heads %d) is odd; RoPE needs pairs", o.Dim/o.Heads, o.Dim, o.Heads)
	case o.Heads%o.KVHeads != 0:
		return bad("Heads %d is not a multiple of KVHeads %d", o.Heads, o.KVHeads)
	case math.IsNaN(float64(o.RopeBase)) || o.RopeBase <= 1:
		return bad("RopeBase %v is not above 1", o.RopeBase)
	}
	switch o.Type {
	case kernels.F32, kernels.F16, kernels.BF16:
	case kernels.Q8_0, kernels.Q4_0:
		if o.Dim%kernels.QK != 0 || o.FFN%kernels.QK != 0 {
			return bad("%v needs Dim (%d) and FFN (%d) to be multiples of %d", o.Type, o.Dim, o.FFN, kernels.QK)
		}
	default:
		return bad("weight type %v is not F32, F16, BF16, Q8_0 or Q4_0", o.Type)
	}
	need := map[string]int{"llama": 259, "gpt2": 256 + len(gpt2Specials)}[o.Tokenizer]
	if need == 0 {
		return bad("tokenizer %q is not \"llama\" or \"gpt2\"", o.Tokenizer)
	}
	if o.Vocab < need {
		return bad("Vocab %d is below the %d tokens a %q tokenizer needs", o.Vocab, need, o.Tokenizer)
	}
	return nil
}

// tensor describes one weight and how to draw it.
type tensor struct {
	name string
	dt   kernels.DType
	cols int // ne0: the input width
	rows int // ne1: the output width; 1 for a norm
	// std is the weights' standard deviation; zero marks a norm, drawn
	// around 1.
	std float64
}

func (o *Options) tensors() []tensor {
	dim, kv, ffn := o.Dim, o.Dim/o.Heads*o.KVHeads, o.FFN
	in := 1 / math.Sqrt(float64(dim))
	// The projections back into the residual stream are scaled down by
	// the number of them, so the stream's size stays near 1 however deep
	// the model is.
	res := 1 / math.Sqrt(float64(2*o.Layers))
	ts := []tensor{{"token_embd.weight", o.Type, dim, o.Vocab, in}}
	for l := range o.Layers {
		b := fmt.Sprintf("blk.%d.", l)
		ts = append(ts,
			tensor{b + "attn_norm.weight", kernels.F32, dim, 1, 0},
			tensor{b + "attn_q.weight", o.Type, dim, dim, in},
			tensor{b + "attn_k.weight", o.Type, dim, kv, in},
			tensor{b + "attn_v.weight", o.Type, dim, kv, in},
			tensor{b + "attn_output.weight", o.Type, dim, dim, in * res},
			tensor{b + "ffn_norm.weight", kernels.F32, dim, 1, 0},
			tensor{b + "ffn_gate.weight", o.Type, dim, ffn, in},
			tensor{b + "ffn_up.weight", o.Type, dim, ffn, in},
			tensor{b + "ffn_down.weight", o.Type, ffn, dim, res / math.Sqrt(float64(ffn))},
		)
	}
	ts = append(ts, tensor{"output_norm.weight", kernels.F32, dim, 1, 0})
	if !o.TiedOutput {
		ts = append(ts, tensor{"output.weight", o.Type, dim, o.Vocab, in})
	}
	return ts
}

// NewWriter returns a gguf.Writer holding the model's metadata and tensors
// (drawn while it writes), for callers that add keys of their own (a chat
// template, say) before writing.
func NewWriter(o Options) (*gguf.Writer, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	w := &gguf.Writer{}
	w.SetString("general.architecture", "llama")
	w.SetString("general.name", "synth")
	w.SetUint32("llama.block_count", uint32(o.Layers))
	w.SetUint32("llama.context_length", uint32(o.Context))
	w.SetUint32("llama.embedding_length", uint32(o.Dim))
	w.SetUint32("llama.feed_forward_length", uint32(o.FFN))
	w.SetUint32("llama.attention.head_count", uint32(o.Heads))
	w.SetUint32("llama.attention.head_count_kv", uint32(o.KVHeads))
	w.SetFloat32("llama.rope.freq_base", o.RopeBase)
	w.SetFloat32("llama.attention.layer_norm_rms_epsilon", RMSEpsilon)
	w.SetUint32("general.file_type", gguf.FileType(o.Type))
	w.SetUint32("llama.vocab_size", uint32(o.Vocab))
	w.SetUint32("llama.rope.dimension_count", uint32(o.Dim/o.Heads))
	switch o.Tokenizer {
	case "llama":
		tokens, scores, types := llamaVocab(o.Vocab)
		w.SetString("tokenizer.ggml.model", "llama")
		w.SetStrings("tokenizer.ggml.tokens", tokens)
		w.SetFloat32s("tokenizer.ggml.scores", scores)
		w.SetInt32s("tokenizer.ggml.token_type", types)
		w.SetUint32("tokenizer.ggml.bos_token_id", 1)
		w.SetUint32("tokenizer.ggml.eos_token_id", 2)
		w.SetUint32("tokenizer.ggml.unknown_token_id", 0)
		w.SetBool("tokenizer.ggml.add_bos_token", true)
		w.SetBool("tokenizer.ggml.add_eos_token", false)
	case "gpt2":
		tokens, types, merges := gpt2Vocab(o.Vocab)
		special := uint32(len(tokens) - len(gpt2Specials))
		w.SetString("tokenizer.ggml.model", "gpt2")
		w.SetString("tokenizer.ggml.pre", "llama-bpe")
		w.SetStrings("tokenizer.ggml.tokens", tokens)
		w.SetInt32s("tokenizer.ggml.token_type", types)
		w.SetStrings("tokenizer.ggml.merges", merges)
		w.SetUint32("tokenizer.ggml.bos_token_id", special)   // <|begin_of_text|>
		w.SetUint32("tokenizer.ggml.eos_token_id", special+1) // <|end_of_text|>
		w.SetUint32("tokenizer.ggml.eot_token_id", special+4) // <|eot_id|>
		w.SetBool("tokenizer.ggml.add_bos_token", true)
	}
	if o.Type == kernels.Q8_0 || o.Type == kernels.Q4_0 {
		w.SetUint32("general.quantization_version", 2)
	}
	for i, t := range o.tensors() {
		dims := []uint64{uint64(t.cols), uint64(t.rows)}
		if t.std == 0 {
			dims = dims[:1]
		}
		seed := seeded.TensorSeed(o.Seed, i, t.name)
		if err := w.AddTensorFunc(t.name, t.dt, dims, func(dst []byte) error { return draw(dst, t, seed) }); err != nil {
			return nil, fmt.Errorf("synth: %w", err)
		}
	}
	return w, nil
}

// Write writes the model described by o to w.
func Write(w io.Writer, o Options) error {
	gw, err := NewWriter(o)
	if err != nil {
		return err
	}
	if _, err := gw.WriteTo(w); err != nil {
		return fmt.Errorf("synth: %w", err)
	}
	return nil
}

// WriteFile writes the model described by o to path.
func WriteFile(path string, o Options) error {
	gw, err := NewWriter(o)
	if err != nil {
		return err
	}
	if err := gw.WriteFile(path); err != nil {
		return fmt.Errorf("synth: %w", err)
	}
	return nil
}

// Setup writes the model described by o into tb's temporary directory and
// returns its path; it fails tb on error. Tests of other packages use it to
// get a model of the shape they need.
func Setup(tb testing.TB, o Options) string {
	tb.Helper()
	path := filepath.Join(tb.TempDir(), "synth.gguf")
	if err := WriteFile(path, o); err != nil {
		tb.Fatalf("synth.Setup: %v", err)
	}
	return path
}

// chunkElems is about how many elements one chunk of a tensor's draw
// covers: big enough to amortise the goroutine hand-off, small enough to
// spread a tensor over every core. Changing it changes every model's bytes.
const chunkElems = 1 << 16

// draw fills dst with the tensor's weights, encoded as t.dt.
func draw(dst []byte, t tensor, seed [2]uint64) error {
	return seeded.Fill(dst, t.dt, t.rows, t.cols, max(1, chunkElems/t.cols), seed, func(c seeded.Chunk) {
		fillChunk(c.Vals, t.std, c.Src)
	})
}

// fillChunk draws uniform values with standard deviation std (a uniform
// distribution is cheap to draw and as good as a normal one for noise), or
// for a norm (std 0) values within 0.1 of 1.
func fillChunk(vals []float32, std float64, src *rand.PCG) {
	scale, bias := float32(std*math.Sqrt(3)), float32(0)
	if std == 0 {
		scale, bias = 0.1, 1
	}
	// Each 64-bit draw gives two values in [-1, 1). The explicit float32
	// conversions keep the compiler from fusing the multiply and add (as it
	// may on arm64), so the bytes are the same on every architecture.
	scale /= 1 << 31
	for i := 0; i < len(vals); i += 2 {
		u := src.Uint64()
		vals[i] = float32(float32(int32(u))*scale) + bias
		if i+1 < len(vals) {
			vals[i+1] = float32(float32(int32(u>>32))*scale) + bias
		}
	}
}
