// Package llama is the Llama-family decoder (Llama 2/3, Mistral, SmolLM,
// Qwen2, Phi-3, Gemma 2): token embedding, pre-norm blocks of grouped-query
// attention with RoPE and a gated feed-forward, a final RMSNorm and the
// output head.
//
// Layers are structs whose fields are the GGUF tensors they are read from;
// each has a Forward written once against kernels.Backend. What sets one
// architecture apart is a few switches in an archSpec, read once at load.
package llama

import (
	"errors"
	"fmt"
	"math"

	"github.com/specgate/specgate/engine/model"
	"github.com/specgate/specgate/engine/model/gguf"
	"github.com/specgate/specgate/engine/tokenizer"
	"github.com/specgate/specgate/kernels"
)

func init() {
	for arch := range archSpecs {
		model.Register(arch, New)
	}
}

// archSpec is how an architecture departs from Llama's forward pass, as
// llama.cpp computes each.
type archSpec struct {
	// neoxRoPE rotates halves of each head (pairs i and i+d/2) rather
	// than adjacent pairs.
	neoxRoPE bool
	// fused reads Q, K and V from one attn_qkv tensor (rows Q, then K,
	// then V) and the gate and up projections from one ffn_up tensor
	// (gate rows first): Phi-3.
	fused bool
	// gemma is Gemma 2: embeddings scaled by sqrt(dim); norms after the
	// attention and the feed-forward too (post_attention_norm,
	// post_ffw_norm), applied to the sublayer's output before the
	// residual add; a GELU-gated feed-forward; attention and final logit
	// soft-capping; the sliding window on even layers; the query scaled
	// by 1/sqrt(head dim) (by 1/sqrt(dim/heads) for the 46-layer 27B).
	// The norm weights are used as stored: GGUF files hold Gemma's
	// (1 + w) already.
	gemma bool
	// windowAll applies attention.sliding_window to every layer (Phi-3).
	windowAll bool
}

var archSpecs = map[string]archSpec{
	"llama":   {},
	"mistral": {},
	"qwen2":   {neoxRoPE: true},
	"phi3":    {neoxRoPE: true, fused: true, windowAll: true},
	"gemma2":  {neoxRoPE: true, gemma: true},
}

// Attention is one block's self-attention: blk.N.attn_*.
type Attention struct {
	Norm       kernels.Tensor // attn_norm
	Q, K, V, O kernels.Tensor // attn_q, attn_k, attn_v, attn_output (row ranges of attn_qkv when fused)
	// QB, KB, VB are optional biases (Qwen2).
	QB, KB, VB kernels.Tensor
	// PostNorm (post_attention_norm, Gemma 2) normalises the output
	// before the residual add; nil means none.
	PostNorm kernels.Tensor
	// Window is the layer's sliding window (0: none).
	Window int32
}

// FeedForward is one block's gated MLP: blk.N.ffn_*.
type FeedForward struct {
	Norm           kernels.Tensor // ffn_norm
	Gate, Up, Down kernels.Tensor // (row ranges of ffn_up when fused)
	// PostNorm (post_ffw_norm, Gemma 2) normalises the output before the
	// residual add; nil means none.
	PostNorm kernels.Tensor
	// GELU gates with GELU (Gemma) rather than SiLU.
	GELU bool
}

// Layer is one transformer block.
type Layer struct {
	Attention
	FeedForward
}

// Model is a loaded Llama-family model.
type Model struct {
	cfg    model.Config
	be     kernels.Backend
	file   *gguf.File
	tok    *tokenizer.Tokenizer
	tmpl   string
	eps    float32
	rope   kernels.RoPE
	embed  kernels.Tensor // token_embd
	norm   kernels.Tensor // output_norm
	output kernels.Tensor // output, or token_embd when tied
	layers []Layer
	kvType kernels.DType // of the caches NewKV makes

	// embedScale multiplies the embeddings (Gemma: sqrt(dim)); 0 is off.
	embedScale float32
	// attnScale multiplies q·k; attnCap and finalCap soft-cap the
	// attention scores and the logits (0 is off).
	attnScale, attnCap, finalCap float32
	// window is the sliding window of the layers that have one; a tree
	// batch must fit in it (see check).
	window int32

	s scratch
}

var _ model.Loaded = (*Model)(nil)

// scratch holds activations sized for the largest batch seen so far; a
// forward pass works on row-slices of it, so steady-state decoding does not
// allocate.
type scratch struct {
	rows, logitRows       int
	x, h, q, k, v, att, o kernels.Tensor
	p                     kernels.Tensor // a sublayer's output before its post-norm
	gate, up              kernels.Tensor
	xl, hl, logits        kernels.Tensor
}

// New builds a model from an open GGUF file. It takes ownership of f.
func New(f *gguf.File, be kernels.Backend) (model.Loaded, error) {
	arch, _ := f.String("general.architecture")
	name, _ := f.String("general.name")
	key := func(k string) string { return arch + "." + k }
	need := func(k string) (int, error) {
		v, ok := f.Uint(key(k))
		if !ok {
			return 0, fmt.Errorf("llama: metadata %s missing", key(k))
		}
		if v == 0 || v > 1<<24 {
			return 0, fmt.Errorf("llama: metadata %s = %d out of range", key(k), v)
		}
		return int(v), nil
	}
	spec, ok := archSpecs[arch]
	if !ok {
		return nil, fmt.Errorf("llama: architecture %q is not one of this package's", arch)
	}
	c := model.Config{Arch: arch, Name: name}
	var err error
	if c.Layers, err = need("block_count"); err != nil {
		return nil, err
	}
	if c.Dim, err = need("embedding_length"); err != nil {
		return nil, err
	}
	if c.Heads, err = need("attention.head_count"); err != nil {
		return nil, err
	}
	if c.FFN, err = need("feed_forward_length"); err != nil {
		return nil, err
	}
	c.KVHeads = c.Heads
	if v, ok := f.Uint(key("attention.head_count_kv")); ok {
		c.KVHeads = int(v)
	}
	if c.KVHeads <= 0 || c.Heads%c.KVHeads != 0 {
		return nil, fmt.Errorf("llama: %d heads and %d kv heads do not divide", c.Heads, c.KVHeads)
	}
	// A head is dim/heads wide unless the file says otherwise (Gemma 2
	// 2B: 8 heads of 256 in a dim of 2304).
	if v, ok := f.Uint(key("attention.key_length")); ok {
		if v == 0 || v > 1<<16 || v%2 != 0 {
			return nil, fmt.Errorf("llama: attention.key_length %d out of range", v)
		}
		c.HeadDim = int(v)
	} else if c.Dim%c.Heads == 0 {
		c.HeadDim = c.Dim / c.Heads
	} else {
		return nil, fmt.Errorf("llama: dim %d is not a whole number of %d heads", c.Dim, c.Heads)
	}
	if v, ok := f.Uint(key("attention.value_length")); ok && int(v) != c.HeadDim {
		return nil, fmt.Errorf("llama: value_length %d differs from key_length %d (not supported)", v, c.HeadDim)
	}
	c.Context = 2048
	if v, ok := f.Uint(key("context_length")); ok && v > 0 && v < 1<<24 {
		c.Context = int(v)
	}
	eps := 1e-5
	if v, ok := f.Float(key("attention.layer_norm_rms_epsilon")); ok {
		eps = v
	}

	rope := kernels.RoPE{HeadDim: c.HeadDim, Base: 10000, NeoX: spec.neoxRoPE}
	if v, ok := f.Uint(key("rope.dimension_count")); ok {
		if int(v) > c.HeadDim || v%2 != 0 {
			return nil, fmt.Errorf("llama: rope.dimension_count %d invalid for head dim %d", v, c.HeadDim)
		}
		rope.Dims = int(v)
	}
	if v, ok := f.Float(key("rope.freq_base")); ok && v > 0 {
		rope.Base = float32(v)
	}
	if t, _ := f.String(key("rope.scaling.type")); t == "linear" {
		if v, ok := f.Float(key("rope.scaling.factor")); ok && v > 0 {
			rope.Scale = float32(v)
		}
	}

	tok, err := model.NewTokenizer(f)
	if err != nil {
		return nil, err
	}
	c.Vocab = tok.VocabSize()
	tmpl, _ := f.String("tokenizer.chat_template")

	m := &Model{cfg: c, be: be, file: f, tok: tok, tmpl: tmpl, eps: float32(eps), rope: rope, kvType: model.DefaultKVType(be)}
	m.attnScale = float32(1 / math.Sqrt(float64(c.HeadDim)))
	var window int32
	if spec.gemma || spec.windowAll {
		if v, ok := f.Uint(key("attention.sliding_window")); ok && v > 0 && v < 1<<30 {
			window = int32(v)
		}
	}
	if spec.gemma {
		m.embedScale = float32(math.Sqrt(float64(c.Dim)))
		if c.Layers == 46 { // Gemma 2 27B scales by its head width in the model dim
			m.attnScale = float32(1 / math.Sqrt(float64(c.Dim/c.Heads)))
		}
		if v, ok := f.Float(key("attn_logit_softcapping")); ok && v > 0 {
			m.attnCap = float32(v)
		}
		if v, ok := f.Float(key("final_logit_softcapping")); ok && v > 0 {
			m.finalCap = float32(v)
		}
	}
	if _, ok := f.Tensor("rope_factors_long.weight"); ok {
		return nil, fmt.Errorf("llama: long-context RoPE factors (rope_factors_long) are not supported")
	}
	probe := kernels.Attn{SoftCap: m.attnCap, Window: window}
	if !kernels.SupportsAttn(be, probe) {
		if m.attnCap != 0 {
			return nil, fmt.Errorf("llama: %s needs soft-capped attention, which the %s backend does not compute", arch, be.Name())
		}
		// Without sliding-window attention, stay within the window,
		// where it masks nothing.
		if window > 0 {
			m.cfg.Context = min(m.cfg.Context, int(window))
		}
		window = 0
	}
	m.window = window
	ld := loader{f: f, be: be, cfg: &m.cfg}
	if ti, ok := f.Tensor("rope_freqs.weight"); ok {
		// Llama 3.1 frequency scaling: one divisor per rotated pair.
		pairs := c.HeadDim / 2
		if rope.Dims > 0 {
			pairs = rope.Dims / 2
		}
		if ti.Type != kernels.F32 || ti.Cols() != pairs || ti.Rows() != 1 {
			return nil, fmt.Errorf("llama: rope_freqs.weight: %v of %d, want F32 of %d", ti.Type, ti.Cols(), pairs)
		}
		fr := make([]float32, ti.Cols())
		if err := kernels.Dequantize(kernels.F32, f.Data(ti), fr); err != nil {
			return nil, fmt.Errorf("llama: rope_freqs.weight: %w", err)
		}
		m.rope.Freqs = fr
	}
	m.embed = ld.matrix("token_embd.weight", c.Vocab, c.Dim)
	m.norm = ld.vector("output_norm.weight", c.Dim)
	if _, ok := f.Tensor("output.weight"); ok {
		m.output = ld.matrix("output.weight", c.Vocab, c.Dim)
	} else {
		m.output = m.embed
		ld.countBytes(m.embed) // the tied head reads the whole table
	}
	kvw, qw := c.KVWidth(), c.Heads*c.HeadDim
	m.layers = make([]Layer, c.Layers)
	for i := range m.layers {
		p := fmt.Sprintf("blk.%d.", i)
		l := &m.layers[i]
		l.Attention.Norm = ld.vector(p+"attn_norm.weight", c.Dim)
		if spec.fused {
			qkv := ld.matrix(p+"attn_qkv.weight", qw+2*kvw, c.Dim)
			l.Q, l.K, l.V = ld.rows(qkv, 0, qw), ld.rows(qkv, qw, qw+kvw), ld.rows(qkv, qw+kvw, qw+2*kvw)
		} else {
			l.Q = ld.matrix(p+"attn_q.weight", qw, c.Dim)
			l.K = ld.matrix(p+"attn_k.weight", kvw, c.Dim)
			l.V = ld.matrix(p+"attn_v.weight", kvw, c.Dim)
		}
		l.O = ld.matrix(p+"attn_output.weight", c.Dim, qw)
		l.QB = ld.optionalVector(p+"attn_q.bias", qw)
		l.KB = ld.optionalVector(p+"attn_k.bias", kvw)
		l.VB = ld.optionalVector(p+"attn_v.bias", kvw)
		l.FeedForward.Norm = ld.vector(p+"ffn_norm.weight", c.Dim)
		if spec.fused {
			up := ld.matrix(p+"ffn_up.weight", 2*c.FFN, c.Dim)
			l.Gate, l.Up = ld.rows(up, 0, c.FFN), ld.rows(up, c.FFN, 2*c.FFN)
		} else {
			l.Gate = ld.matrix(p+"ffn_gate.weight", c.FFN, c.Dim)
			l.Up = ld.matrix(p+"ffn_up.weight", c.FFN, c.Dim)
		}
		l.Down = ld.matrix(p+"ffn_down.weight", c.Dim, c.FFN)
		if spec.gemma {
			l.Attention.PostNorm = ld.vector(p+"post_attention_norm.weight", c.Dim)
			l.FeedForward.PostNorm = ld.vector(p+"post_ffw_norm.weight", c.Dim)
			l.GELU = true
			if i%2 == 0 {
				l.Window = window
			}
		} else if spec.windowAll {
			l.Window = window
		}
	}
	if ld.err != nil {
		return nil, ld.err
	}
	for _, n := range []string{"blk.0.attn_q.weight", "blk.0.attn_qkv.weight"} {
		if ti, ok := f.Tensor(n); ok {
			m.cfg.WeightType = ti.Type
			break
		}
	}
	return m, nil
}

// loader reads named tensors, checking shapes, and keeps the first error.
type loader struct {
	f   *gguf.File
	be  kernels.Backend
	cfg *model.Config
	err error
}

func (l *loader) get(name string, rows, cols int, optional bool) kernels.Tensor {
	if l.err != nil {
		return nil
	}
	ti, ok := l.f.Tensor(name)
	if !ok {
		if !optional {
			l.err = fmt.Errorf("llama: tensor %s missing", name)
		}
		return nil
	}
	if ti.Rows() != rows || ti.Cols() != cols {
		l.err = fmt.Errorf("llama: tensor %s is %d×%d, want %d×%d", name, ti.Rows(), ti.Cols(), rows, cols)
		return nil
	}
	t, err := l.be.Weights(ti.Type, rows, cols, l.f.Data(ti))
	if err != nil {
		l.err = fmt.Errorf("llama: tensor %s: %w", name, err)
		return nil
	}
	// A backend that laid the weight out anew keeps none of the file's
	// pages; without this, every such weight would count twice in the
	// process's memory (its copy, and the mapped pages read to make it).
	if o, ok := t.(kernels.DataOwner); ok && o.OwnsData() {
		if err := l.f.Release(ti); err != nil {
			l.err = fmt.Errorf("llama: tensor %s: %w", name, err)
			return nil
		}
	}
	l.cfg.Params += int64(rows * cols)
	// The embedding lookup reads one row per token; everything else is
	// read in full by every forward pass.
	if name != "token_embd.weight" {
		l.countBytes(t)
	}
	return t
}

// countBytes adds a tensor that every forward pass reads in full to the
// model's per-pass byte total.
func (l *loader) countBytes(t kernels.Tensor) {
	r, c := t.Dims()
	n, _ := t.DType().RowBytes(c)
	l.cfg.WeightBytes += int64(r * n)
}

// rows returns rows [r0, r1) of a fused weight t (nil after an error).
func (l *loader) rows(t kernels.Tensor, r0, r1 int) kernels.Tensor {
	if l.err != nil || t == nil {
		return nil
	}
	return l.be.Slice(t, r0, r1)
}

func (l *loader) matrix(name string, rows, cols int) kernels.Tensor {
	return l.get(name, rows, cols, false)
}

func (l *loader) vector(name string, n int) kernels.Tensor { return l.get(name, 1, n, false) }

func (l *loader) optionalVector(name string, n int) kernels.Tensor {
	return l.get(name, 1, n, true)
}

func (m *Model) Config() model.Config            { return m.cfg }
func (m *Model) Tokenizer() *tokenizer.Tokenizer { return m.tok }
func (m *Model) ChatTemplate() string            { return m.tmpl }
func (m *Model) Backend() kernels.Backend        { return m.be }

// Close unmaps the model file. The backend's tensors view that mapping, so
// the model must not be used afterwards.
func (m *Model) Close() error { return m.file.Close() }

// KVType is the element type of the caches model.NewKV makes for m.
func (m *Model) KVType() kernels.DType { return m.kvType }

// SetKVType sets the element type of the caches model.NewKV makes for m
// from now on.
func (m *Model) SetKVType(dt kernels.DType) error {
	if !kernels.SupportsKV(m.be, dt) {
		return fmt.Errorf("llama: the %s backend does not store a %v KV cache", m.be.Name(), dt)
	}
	m.kvType = dt
	return nil
}

// ErrBatch reports a malformed batch.
var ErrBatch = errors.New("llama: bad batch")

func (m *Model) check(kv kernels.KVCache, b *model.Batch) error {
	n := b.Len()
	if n == 0 {
		return fmt.Errorf("%w: empty", ErrBatch)
	}
	if len(b.Pos) != n || len(b.Slots) != n || len(b.Attn) != n {
		return fmt.Errorf("%w: %d tokens, %d positions, %d slots, %d attention rows", ErrBatch, n, len(b.Pos), len(b.Slots), len(b.Attn))
	}
	spec := kv.Spec()
	if spec.Layers != m.cfg.Layers || spec.Width != m.cfg.KVWidth() {
		return fmt.Errorf("%w: KV cache of %d layers × %d wide, model needs %d × %d", ErrBatch, spec.Layers, spec.Width, m.cfg.Layers, m.cfg.KVWidth())
	}
	slots := int32(spec.Blocks * spec.BlockSize)
	for i, t := range b.Tokens {
		if t < 0 || int(t) >= m.cfg.Vocab {
			return fmt.Errorf("%w: token %d at %d outside vocabulary of %d", ErrBatch, t, i, m.cfg.Vocab)
		}
		if b.Slots[i] < 0 || b.Slots[i] >= slots {
			return fmt.Errorf("%w: slot %d at %d outside cache of %d", ErrBatch, b.Slots[i], i, slots)
		}
		if b.Pos[i] < 0 {
			return fmt.Errorf("%w: negative position at %d", ErrBatch, i)
		}
		r := b.Attn[i]
		if r.Len <= 0 || int(r.Len) > len(r.Table)*spec.BlockSize {
			return fmt.Errorf("%w: row %d attends to %d positions through %d blocks", ErrBatch, i, r.Len, len(r.Table))
		}
		for _, blk := range r.Table[:(int(r.Len)+spec.BlockSize-1)/spec.BlockSize] {
			if blk < 0 || int(blk) >= spec.Blocks {
				return fmt.Errorf("%w: row %d names block %d outside cache of %d", ErrBatch, i, blk, spec.Blocks)
			}
		}
	}
	if b.Tree != nil {
		if _, ok := m.be.(kernels.TreeAttention); !ok {
			return fmt.Errorf("%w: tree batch on backend %s, which has no tree attention", ErrBatch, m.be.Name())
		}
		if m.window > 0 {
			// Tree attention windows the prefix only: a row's own tree
			// slots must all lie within its window.
			for i, r := range b.Tree.Rows {
				if len(r.Slots) >= int(m.window) {
					return fmt.Errorf("%w: tree row %d is %d deep, past the sliding window of %d", ErrBatch, i, len(r.Slots), m.window)
				}
			}
		}
		if len(b.Tree.Rows) != n {
			return fmt.Errorf("%w: %d tree rows for %d tokens", ErrBatch, len(b.Tree.Rows), n)
		}
		for i, r := range b.Tree.Rows {
			if r.Prefix < 0 || int(r.Prefix) > len(b.Attn[i].Table)*spec.BlockSize {
				return fmt.Errorf("%w: tree row %d sees a prefix of %d through %d blocks", ErrBatch, i, r.Prefix, len(b.Attn[i].Table))
			}
			for _, s := range r.Slots {
				if s < 0 || s >= slots {
					return fmt.Errorf("%w: tree row %d names slot %d outside cache of %d", ErrBatch, i, s, slots)
				}
			}
		}
	}
	for _, r := range b.Logits {
		if r < 0 || int(r) >= n {
			return fmt.Errorf("%w: logits row %d outside batch of %d", ErrBatch, r, n)
		}
	}
	return nil
}

func (m *Model) grow(n, nl int) {
	be, c, s := m.be, m.cfg, &m.s
	if n > s.rows {
		s.rows = max(n, 2*s.rows)
		r := s.rows
		qw := c.Heads * c.HeadDim
		s.x, s.h, s.o = be.Alloc(r, c.Dim), be.Alloc(r, c.Dim), be.Alloc(r, c.Dim)
		s.q, s.att = be.Alloc(r, qw), be.Alloc(r, qw)
		if m.layers[0].Attention.PostNorm != nil {
			s.p = be.Alloc(r, c.Dim)
		}
		s.k, s.v = be.Alloc(r, c.KVWidth()), be.Alloc(r, c.KVWidth())
		s.gate, s.up = be.Alloc(r, c.FFN), be.Alloc(r, c.FFN)
	}
	if nl > s.logitRows {
		s.logitRows = max(nl, 2*s.logitRows)
		s.xl, s.hl = be.Alloc(s.logitRows, c.Dim), be.Alloc(s.logitRows, c.Dim)
		s.logits = be.Alloc(s.logitRows, c.Vocab)
	}
}

// Forward runs one batch. See model.Model.
func (m *Model) Forward(kv kernels.KVCache, b *model.Batch) (kernels.Tensor, error) {
	if err := m.check(kv, b); err != nil {
		return nil, err
	}
	n, nl := b.Len(), len(b.Logits)
	m.grow(n, max(nl, 1))
	be, s := m.be, &m.s
	rows := func(t kernels.Tensor, k int) kernels.Tensor { return be.Slice(t, 0, k) }
	x, h := rows(s.x, n), rows(s.h, n)
	be.Gather(x, m.embed, b.Tokens)
	if m.embedScale != 0 {
		kernels.Scale(be, x, m.embedScale)
	}
	attn := kernels.Attn{Heads: m.cfg.Heads, KVHeads: m.cfg.KVHeads, HeadDim: m.cfg.HeadDim,
		Scale: m.attnScale, SoftCap: m.attnCap, Rows: b.Attn}
	st := state{m: m, n: n, x: x, h: h}
	st.many, _ = be.(kernels.MatMulMany)
	for i := range m.layers {
		l := &m.layers[i]
		l.Attention.Forward(&st, kv, i, b, attn)
		l.FeedForward.Forward(&st)
	}
	if nl == 0 {
		return nil, nil
	}
	xl, hl, logits := rows(s.xl, nl), rows(s.hl, nl), rows(s.logits, nl)
	be.Gather(xl, x, b.Logits)
	be.RMSNorm(hl, xl, m.norm, m.eps)
	be.MatMul(logits, hl, m.output)
	if m.finalCap != 0 {
		kernels.SoftCap(be, logits, m.finalCap)
	}
	return logits, nil
}

// state is what a block's Forward works on: the residual stream x and the
// model's scratch, both n rows.
type state struct {
	m    *Model
	n    int
	x, h kernels.Tensor
	// many is the backend's fused multi-weight matmul, if it has one;
	// dsts and ws are its argument buffers.
	many     kernels.MatMulMany
	dsts, ws [3]kernels.Tensor
}

// matmuls sets dsts[i] = x · ws[i]ᵀ, in one fused call where the backend
// has one (the weights share their input).
func (st *state) matmuls(x kernels.Tensor, dsts, ws []kernels.Tensor) {
	if st.many != nil {
		st.many.MatMulMany(dsts, x, ws)
		return
	}
	for i := range ws {
		st.m.be.MatMul(dsts[i], x, ws[i])
	}
}

func (st *state) rows(t kernels.Tensor) kernels.Tensor { return st.m.be.Slice(t, 0, st.n) }

// Forward adds the attention output to the residual stream.
func (a *Attention) Forward(st *state, kv kernels.KVCache, layer int, b *model.Batch, attn kernels.Attn) {
	be, s, m := st.m.be, &st.m.s, st.m
	q, k, v, att, o := st.rows(s.q), st.rows(s.k), st.rows(s.v), st.rows(s.att), st.rows(s.o)
	be.RMSNorm(st.h, st.x, a.Norm, m.eps)
	st.dsts, st.ws = [3]kernels.Tensor{q, k, v}, [3]kernels.Tensor{a.Q, a.K, a.V}
	st.matmuls(st.h, st.dsts[:], st.ws[:])
	if a.QB != nil {
		be.AddBias(q, a.QB)
	}
	if a.KB != nil {
		be.AddBias(k, a.KB)
	}
	if a.VB != nil {
		be.AddBias(v, a.VB)
	}
	be.RoPE(q, b.Pos, m.rope)
	be.RoPE(k, b.Pos, m.rope)
	be.StoreKV(kv, layer, k, v, b.Slots)
	attn.Window = a.Window
	if b.Tree != nil {
		be.(kernels.TreeAttention).TreeAttention(att, q, kv, layer, attn, *b.Tree)
	} else {
		be.Attention(att, q, kv, layer, attn)
	}
	be.MatMul(o, att, a.O)
	st.addResidual(o, a.PostNorm)
}

// addResidual adds a sublayer's output o to the residual stream, through
// its post-norm when it has one.
func (st *state) addResidual(o, postNorm kernels.Tensor) {
	be := st.m.be
	if postNorm != nil {
		p := st.rows(st.m.s.p)
		be.RMSNorm(p, o, postNorm, st.m.eps)
		o = p
	}
	be.Add(st.x, st.x, o)
}

// Forward adds the gated feed-forward output to the residual stream.
func (f *FeedForward) Forward(st *state) {
	be, s, m := st.m.be, &st.m.s, st.m
	gate, up, o := st.rows(s.gate), st.rows(s.up), st.rows(s.o)
	be.RMSNorm(st.h, st.x, f.Norm, m.eps)
	st.dsts, st.ws = [3]kernels.Tensor{gate, up}, [3]kernels.Tensor{f.Gate, f.Up}
	st.matmuls(st.h, st.dsts[:2], st.ws[:2])
	if f.GELU {
		kernels.GeGLU(be, gate, gate, up)
	} else {
		be.SwiGLU(gate, gate, up)
	}
	be.MatMul(o, gate, f.Down)
	st.addResidual(o, f.PostNorm)
}
