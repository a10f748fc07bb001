// Package inflate writes a larger LLaMA model that computes a smaller
// one's function: a stand-in for a big model whose small sibling is a
// well-aligned draft, for measuring speculative decoding where a step is
// bound by reading weights. The result is not a trained model; its text is
// the source model's.
//
// The source's residual width is padded with zero channels, and heads, KV
// heads, feed-forward units and whole layers are added whose output
// projections (attn_output and ffn_down columns, whole matrices for new
// layers) are zero, so nothing they compute reaches the residual stream.
// The RMSNorm weights are scaled by sqrt(d/D) and the norm epsilon by d/D
// (d the source width, D the new one), so a norm over the padded stream
// gives the source's values. The vocabulary stays the source's, so the
// source (or a quantization of it) drafts for the result with the same
// tokenizer. Every added weight is read by every forward pass, as a real
// model's would be.
//
// The heads are widened to a real model's width (Options.HeadDim): a
// stand-in with the source's tiny heads would spend its attention on
// per-head work (a softmax per head and position) that a weight-bound
// model of its width does not. Each source head sits in the first heads of
// the target, its RoPE pair j (dimensions 2j, 2j+1) at target pair j·H/h
// (H the target head width, h the source's), whose frequency
// base^(-2(jH/h)/H) is the source pair's base^(-2j/h); the other query and
// key dimensions are zero, and the query rows are scaled by sqrt(H/h) so
// that q·k/sqrt(H) is the source's q·k/sqrt(h). RoPE rotates the whole
// widened head, as llama.cpp requires of a llama file. A source value
// head's dimensions come first in its target head; the rest are added
// units like the added heads'.
//
// Options.Noise puts seeded random values into the otherwise-zero output
// projections, so the output moves away from the source's by a controlled
// amount; at zero it is the source's function up to rounding (greedy
// tokens equal the source's at F32).
package inflate

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/specgate/specgate/engine/model/gguf"
	"github.com/specgate/specgate/engine/model/internal/seeded"
	"github.com/specgate/specgate/kernels"
)

// ErrOptions is wrapped by every error about invalid Options or an
// unsuitable source.
var ErrOptions = errors.New("inflate: invalid options")

// Options shape the inflated model. The zero value makes about 95M
// parameters (for a source as small as stories260K) of F32 weights, noise
// off.
type Options struct {
	// Layers is the number of transformer blocks; zero means 8. The
	// source's blocks come first, the added ones after them.
	Layers int
	// Dim is the residual width; zero means 1024. It must be a multiple
	// of the head width times the source's query heads per KV head, and
	// hold at least the source's heads.
	Dim int
	// HeadDim is the width of a head; zero means 64. It must be a
	// multiple of the source's head width. The target has Dim/HeadDim
	// heads with the source's query heads per KV head, so the KV width
	// (Dim divided by that ratio) does not depend on it.
	HeadDim int
	// FFN is the SwiGLU hidden width; zero means 2816.
	FFN int
	// Type is the type of the weight matrices (token embedding and output
	// head included): F32 (the zero value), F16, BF16 or a block type the
	// kernels quantize (Q8_0, Q4_0, K-quants). Norms stay F32.
	Type kernels.DType
	// Noise is the size of the perturbation: the added heads' and units'
	// output weights into the source's residual channels (zero without
	// noise) are drawn uniformly with standard deviation Noise/sqrt(row
	// length), so each sublayer adds about Noise·sqrt(added/all inputs)
	// per channel for unit activations. The padding channels stay zero
	// whatever the noise. Zero keeps the source's function.
	Noise float64
	// Seed seeds the added weights; the same source and Options give the
	// same bytes.
	Seed int64
}

// Defaults for the zero Options.
const (
	DefaultLayers  = 8
	DefaultDim     = 1024
	DefaultFFN     = 2816
	DefaultHeadDim = 64
)

// shape is the source's and the target's dimensions.
type shape struct {
	layers, dim, ffn, heads, kvHeads, headDim, vocab int // the target's
	sLayers, sDim, sFFN, sHeads, sKVHeads, sHeadDim  int // the source's
	tied                                             bool
	eps                                              float64 // the source's
}

func (s shape) qw() int   { return s.heads * s.headDim }
func (s shape) kvw() int  { return s.kvHeads * s.headDim }
func (s shape) sqw() int  { return s.sHeads * s.sHeadDim }
func (s shape) skvw() int { return s.sKVHeads * s.sHeadDim }

// normScale is sqrt(d/D): a norm over the padded stream divides by an RMS
// that is sqrt(d/D) times the source's.
func (s shape) normScale() float32 { return float32(math.Sqrt(float64(s.sDim) / float64(s.dim))) }

func newShape(src *gguf.File, o *Options) (shape, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrOptions, fmt.Sprintf(format, args...))
	}
	if arch, _ := src.String("general.architecture"); arch != "llama" {
		return shape{}, bad("source architecture %q is not llama", arch)
	}
	get := func(k string) (int, error) {
		v, ok := src.Uint("llama." + k)
		if !ok || v == 0 || v > 1<<24 {
			return 0, bad("source metadata llama.%s missing or out of range", k)
		}
		return int(v), nil
	}
	var s shape
	var err error
	for _, f := range []struct {
		key string
		v   *int
	}{{"block_count", &s.sLayers}, {"embedding_length", &s.sDim}, {"feed_forward_length", &s.sFFN}, {"attention.head_count", &s.sHeads}} {
		if *f.v, err = get(f.key); err != nil {
			return shape{}, err
		}
	}
	s.sKVHeads = s.sHeads
	if v, ok := src.Uint("llama.attention.head_count_kv"); ok {
		s.sKVHeads = int(v)
	}
	if s.sKVHeads <= 0 || s.sHeads%s.sKVHeads != 0 {
		return shape{}, bad("source has %d heads and %d KV heads", s.sHeads, s.sKVHeads)
	}
	if s.sDim%s.sHeads != 0 {
		return shape{}, bad("source width %d is not a whole number of %d heads", s.sDim, s.sHeads)
	}
	s.sHeadDim = s.sDim / s.sHeads
	if v, ok := src.Uint("llama.attention.key_length"); ok && int(v) != s.sHeadDim {
		return shape{}, bad("source head width %d differs from its width per head", v)
	}
	// The widened heads keep the source's RoPE frequencies only if the
	// source rotates its whole head with the plain llama frequencies.
	if v, ok := src.Uint("llama.rope.dimension_count"); ok && int(v) != s.sHeadDim {
		return shape{}, bad("source rotates %d of its head's %d dimensions", v, s.sHeadDim)
	}
	if _, ok := src.Tensor("rope_freqs.weight"); ok {
		return shape{}, bad("source has RoPE frequency factors (rope_freqs.weight)")
	}
	// Linear scaling divides every frequency alike; YaRN and the others
	// shape theirs by the pair's place in a head of a given width, which
	// a pair moved into a wider head does not keep.
	switch t, _ := src.String("llama.rope.scaling.type"); t {
	case "", "none", "linear":
	default:
		return shape{}, bad("source's RoPE scaling %q depends on the head width", t)
	}
	if s.sHeadDim%2 != 0 {
		return shape{}, bad("source head width %d is odd", s.sHeadDim)
	}
	s.eps = 1e-5
	if v, ok := src.Float("llama.attention.layer_norm_rms_epsilon"); ok {
		s.eps = v
	}
	emb, ok := src.Tensor("token_embd.weight")
	if !ok {
		return shape{}, bad("source has no token_embd.weight")
	}
	s.vocab = emb.Rows()
	_, hasOut := src.Tensor("output.weight")
	s.tied = !hasOut

	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&o.Layers, DefaultLayers)
	def(&o.Dim, DefaultDim)
	def(&o.FFN, DefaultFFN)
	def(&o.HeadDim, DefaultHeadDim)
	s.layers, s.dim, s.ffn, s.headDim = o.Layers, o.Dim, o.FFN, o.HeadDim
	group := s.sHeads / s.sKVHeads
	switch {
	case s.layers < s.sLayers || s.dim < s.sDim || s.ffn < s.sFFN:
		return shape{}, bad("target %d layers, width %d, FFN %d is smaller than the source's %d, %d, %d", s.layers, s.dim, s.ffn, s.sLayers, s.sDim, s.sFFN)
	case s.layers > 1<<10 || s.dim > 1<<16 || s.ffn > 1<<18:
		return shape{}, bad("target %d layers, width %d, FFN %d is implausibly large", s.layers, s.dim, s.ffn)
	case s.headDim <= 0 || s.headDim%s.sHeadDim != 0 || s.headDim > 1<<10:
		return shape{}, bad("head width %d is not a multiple of the source's %d up to 1024", s.headDim, s.sHeadDim)
	case s.dim%(s.headDim*group) != 0:
		return shape{}, bad("width %d is not a multiple of the head width %d times %d query heads per KV head", s.dim, s.headDim, group)
	case s.dim/s.headDim < s.sHeads:
		return shape{}, bad("width %d holds %d heads of %d, fewer than the source's %d", s.dim, s.dim/s.headDim, s.headDim, s.sHeads)
	case math.IsNaN(o.Noise) || o.Noise < 0 || o.Noise > 100:
		return shape{}, bad("noise %v is not in [0, 100]", o.Noise)
	}
	s.heads = s.dim / s.headDim
	s.kvHeads = s.heads / group
	switch o.Type {
	case kernels.F32, kernels.F16, kernels.BF16:
	default:
		be := o.Type.BlockElems()
		if be <= 1 {
			return shape{}, bad("weight type %v cannot be written", o.Type)
		}
		for _, w := range []int{s.dim, s.ffn} {
			if w%be != 0 {
				return shape{}, bad("%v needs the width (%d) and FFN (%d) to be multiples of %d", o.Type, s.dim, s.ffn, be)
			}
		}
		if _, err := kernels.Quantize(o.Type, make([]float32, be)); err != nil {
			return shape{}, bad("weight type %v: %v", o.Type, err)
		}
	}
	return s, nil
}

// Params returns the parameter count of the inflated model: what NewWriter
// would write for src and o.
func Params(src *gguf.File, o Options) (int64, error) {
	s, err := newShape(src, &o)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, t := range s.tensors() {
		n += int64(t.rows) * int64(t.cols)
	}
	return n, nil
}

// tensor is one weight of the target.
type tensor struct {
	name       string
	rows, cols int // rows: output width (1 for a vector); cols: input width
	norm       bool
}

func (s shape) tensors() []tensor {
	ts := []tensor{{name: "token_embd.weight", rows: s.vocab, cols: s.dim}}
	for l := range s.layers {
		b := fmt.Sprintf("blk.%d.", l)
		ts = append(ts,
			tensor{name: b + "attn_norm.weight", rows: 1, cols: s.dim, norm: true},
			tensor{name: b + "attn_q.weight", rows: s.qw(), cols: s.dim},
			tensor{name: b + "attn_k.weight", rows: s.kvw(), cols: s.dim},
			tensor{name: b + "attn_v.weight", rows: s.kvw(), cols: s.dim},
			tensor{name: b + "attn_output.weight", rows: s.dim, cols: s.qw()},
			tensor{name: b + "ffn_norm.weight", rows: 1, cols: s.dim, norm: true},
			tensor{name: b + "ffn_gate.weight", rows: s.ffn, cols: s.dim},
			tensor{name: b + "ffn_up.weight", rows: s.ffn, cols: s.dim},
			tensor{name: b + "ffn_down.weight", rows: s.dim, cols: s.ffn},
		)
	}
	ts = append(ts, tensor{name: "output_norm.weight", rows: 1, cols: s.dim, norm: true})
	if !s.tied {
		ts = append(ts, tensor{name: "output.weight", rows: s.vocab, cols: s.dim})
	}
	return ts
}

// Keys the target sets itself rather than copying from the source.
var ownKeys = map[string]bool{
	"general.alignment":                      true,
	"general.file_type":                      true,
	"general.quantization_version":           true,
	"general.name":                           true,
	"general.description":                    true,
	"llama.block_count":                      true,
	"llama.embedding_length":                 true,
	"llama.feed_forward_length":              true,
	"llama.attention.head_count":             true,
	"llama.attention.head_count_kv":          true,
	"llama.attention.key_length":             true,
	"llama.attention.value_length":           true,
	"llama.attention.layer_norm_rms_epsilon": true,
	"llama.rope.dimension_count":             true,
}

// NewWriter returns a gguf.Writer holding the inflated model; its tensors
// are made while it writes, so src must stay open until then.
func NewWriter(src *gguf.File, o Options) (*gguf.Writer, error) {
	s, err := newShape(src, &o)
	if err != nil {
		return nil, err
	}
	w := &gguf.Writer{}
	for _, k := range src.Keys() {
		if ownKeys[k] {
			continue
		}
		v, _ := src.Value(k)
		if err := w.Set(k, v); err != nil {
			return nil, fmt.Errorf("inflate: copying %s: %w", k, err)
		}
	}
	name, _ := src.String("general.name")
	w.SetString("general.name", name+"-inflated")
	w.SetString("general.description", fmt.Sprintf(
		"NOT A TRAINED MODEL: %s (%d layers, width %d, %d heads of %d) padded with zero-output heads, units and layers to %d layers, width %d (%d heads of %d, %d KV heads), FFN %d, noise %g; it computes the source's function up to that noise",
		name, s.sLayers, s.sDim, s.sHeads, s.sHeadDim, s.layers, s.dim, s.heads, s.headDim, s.kvHeads, s.ffn, o.Noise))
	w.SetUint32("general.file_type", gguf.FileType(o.Type))
	if o.Type.BlockElems() > 1 {
		w.SetUint32("general.quantization_version", 2)
	}
	w.SetUint32("llama.block_count", uint32(s.layers))
	w.SetUint32("llama.embedding_length", uint32(s.dim))
	w.SetUint32("llama.feed_forward_length", uint32(s.ffn))
	w.SetUint32("llama.attention.head_count", uint32(s.heads))
	w.SetUint32("llama.attention.head_count_kv", uint32(s.kvHeads))
	w.SetUint32("llama.attention.key_length", uint32(s.headDim))
	w.SetUint32("llama.attention.value_length", uint32(s.headDim))
	w.SetUint32("llama.rope.dimension_count", uint32(s.headDim))
	w.SetFloat32("llama.attention.layer_norm_rms_epsilon", float32(s.eps*float64(s.sDim)/float64(s.dim)))

	for i, t := range s.tensors() {
		dt := o.Type
		dims := []uint64{uint64(t.cols), uint64(t.rows)}
		if t.norm {
			dt, dims = kernels.F32, dims[:1]
		}
		b := &builder{s: s, src: src, t: t, noise: o.Noise, seed: seeded.TensorSeed(o.Seed, i, t.name)}
		if err := w.AddTensorFunc(t.name, dt, dims, func(dst []byte) error { return b.fill(dst, dt) }); err != nil {
			return nil, fmt.Errorf("inflate: %w", err)
		}
	}
	return w, nil
}

// WriteFile writes the inflated model to path.
func WriteFile(path string, src *gguf.File, o Options) error {
	gw, err := NewWriter(src, o)
	if err != nil {
		return err
	}
	if err := gw.WriteFile(path); err != nil {
		return fmt.Errorf("inflate: %w", err)
	}
	return nil
}

// builder makes one target tensor's values.
type builder struct {
	s     shape
	src   *gguf.File
	t     tensor
	noise float64
	seed  [2]uint64
}

// source returns the source tensor name's values (rows × cols, row-major)
// and its shape, or nil when this target tensor has no source (an added
// layer).
func (b *builder) source(name string) ([]float32, int, int, error) {
	ti, ok := b.src.Tensor(name)
	if !ok {
		return nil, 0, 0, nil
	}
	data := b.src.Data(ti)
	if data == nil {
		return nil, 0, 0, fmt.Errorf("source tensor %s lies outside the file", name)
	}
	vals := make([]float32, ti.Elems())
	if err := kernels.Dequantize(ti.Type, data, vals); err != nil {
		return nil, 0, 0, fmt.Errorf("source tensor %s: %w", name, err)
	}
	return vals, ti.Rows(), ti.Cols(), nil
}

// region says how to make one target tensor from its source. A target
// row whose rowSrc is a source row takes, in each column whose colSrc is a
// source column, that source value times scale. Rows marked read are
// added units, drawn at random with readStd; columns marked noise are
// output paths of added units, drawn with the noise's spread in the rows
// of the source's channels. Everything else is zero: the padding channels
// stay zero, so the norms' RMS sees only the source's channels and the
// noise moves them alone; so do the widened source heads' added query and
// key dimensions, so their scores are the source's.
type region struct {
	sCols          int     // the source's row length
	rowSrc, colSrc []int32 // target row/column → source's, or -1
	read, noise    []bool  // by row, by column
	readStd        float64
	scale          float32
}

// identity maps the first sn of n indices to themselves.
func identity(n, sn int) []int32 {
	m := make([]int32, n)
	for i := range m {
		m[i] = -1
		if i < sn {
			m[i] = int32(i)
		}
	}
	return m
}

// headMap maps n target indices, heads of the target width, to the source's
// sHeads heads of its width: source dimension d of a head sits at target
// dimension d, or with rope at the dimension of the target RoPE pair that
// turns at the same frequency.
func (s shape) headMap(n, sHeads int, rope bool) []int32 {
	m := identity(n, 0)
	stride := s.headDim / s.sHeadDim
	for h := range sHeads {
		for d := range s.sHeadDim {
			td := d
			if rope {
				td = d/2*2*stride + d%2
			}
			m[h*s.headDim+td] = int32(h*s.sHeadDim + d)
		}
	}
	return m
}

// unmapped marks the indices m maps to no source index, from index from on.
func unmapped(m []int32, from int) []bool {
	b := make([]bool, len(m))
	for i := from; i < len(m); i++ {
		b[i] = m[i] < 0
	}
	return b
}

func (b *builder) region() (region, error) {
	s, t := b.s, b.t
	layer, kind := -1, t.name
	if n, _ := fmt.Sscanf(t.name, "blk.%d.", &layer); n == 1 {
		kind = t.name[len(fmt.Sprintf("blk.%d.", layer)):]
	}
	added := layer >= s.sLayers
	// Added heads and units read the normalised stream, whose source
	// channels are about 1 each: a spread of 1/sqrt(d) keeps their
	// activations about 1 too.
	r := region{sCols: s.sDim, readStd: 1 / math.Sqrt(float64(s.sDim)), scale: 1}
	r.colSrc = identity(t.cols, s.sDim)
	r.noise = make([]bool, t.cols)
	switch kind {
	case "attn_q.weight", "attn_k.weight":
		sHeads := s.sHeads
		if kind == "attn_q.weight" {
			r.scale = float32(math.Sqrt(float64(s.headDim) / float64(s.sHeadDim)))
		} else {
			sHeads = s.sKVHeads
		}
		r.rowSrc = s.headMap(t.rows, sHeads, true)
		// The source heads' added dimensions stay zero; the added
		// heads are drawn.
		r.read = unmapped(r.rowSrc, sHeads*s.headDim)
	case "attn_v.weight":
		r.rowSrc = s.headMap(t.rows, s.sKVHeads, false)
		r.read = unmapped(r.rowSrc, 0)
	case "ffn_gate.weight", "ffn_up.weight":
		r.rowSrc = identity(t.rows, s.sFFN)
		r.read = unmapped(r.rowSrc, 0)
	case "attn_output.weight":
		r.sCols = s.sqw()
		r.rowSrc, r.colSrc = identity(t.rows, s.sDim), s.headMap(t.cols, s.sHeads, false)
		r.noise = unmapped(r.colSrc, 0)
	case "ffn_down.weight":
		r.sCols = s.sFFN
		r.rowSrc, r.colSrc = identity(t.rows, s.sDim), identity(t.cols, s.sFFN)
		r.noise = unmapped(r.colSrc, 0)
	case "token_embd.weight", "output.weight":
		r.rowSrc = identity(t.rows, s.vocab)
	default:
		return region{}, fmt.Errorf("no rule for tensor %s", t.name)
	}
	if r.read == nil {
		r.read = make([]bool, t.rows)
	}
	if added {
		// A whole added layer: everything it reads is drawn, everything
		// it writes is noise.
		r.rowSrc = identity(t.rows, 0)
		readLayer := kind != "attn_output.weight" && kind != "ffn_down.weight"
		for i := range r.read {
			r.read[i] = readLayer
		}
		for j := range r.noise {
			r.noise[j] = !readLayer
		}
	}
	return r, nil
}

// rowChunk is how many rows one draw task covers.
const rowChunk = 64

// fill writes the tensor's values into dst, encoded as dt.
func (b *builder) fill(dst []byte, dt kernels.DType) error {
	t, s := b.t, b.s
	if t.norm {
		src, _, n, err := b.source(t.name)
		if err != nil {
			return err
		}
		scale := s.normScale()
		// One row, one chunk; nothing is drawn.
		return seeded.Fill(dst, dt, 1, t.cols, 1, b.seed, func(c seeded.Chunk) {
			for i := range c.Vals {
				c.Vals[i] = scale
				if i < n {
					c.Vals[i] = src[i] * scale
				}
			}
		})
	}
	r, err := b.region()
	if err != nil {
		return err
	}
	var src []float32
	if sRows := mapped(r.rowSrc); sRows > 0 {
		var sr, sc int
		if src, sr, sc, err = b.source(t.name); err != nil {
			return err
		}
		if src == nil || sr != sRows || sc != r.sCols {
			return fmt.Errorf("source tensor %s is %d×%d, want %d×%d", t.name, sr, sc, sRows, r.sCols)
		}
	}
	noiseStd := b.noise / math.Sqrt(float64(t.cols))
	return seeded.Fill(dst, dt, t.rows, t.cols, rowChunk, b.seed, func(c seeded.Chunk) {
		rng := rand.New(c.Src)
		for i := range len(c.Vals) / t.cols {
			row := c.Row + i
			out := c.Vals[i*t.cols : (i+1)*t.cols]
			sr := int(r.rowSrc[row])
			for j := range out {
				switch {
				case sr >= 0 && r.colSrc[j] >= 0:
					out[j] = src[sr*r.sCols+int(r.colSrc[j])] * r.scale
				case r.read[row]:
					out[j] = uniform(rng, r.readStd)
				case r.noise[j] && row < s.sDim && noiseStd > 0:
					out[j] = uniform(rng, noiseStd)
				default:
					out[j] = 0
				}
			}
		}
	})
}

// mapped is how many of m's indices map to a source index.
func mapped(m []int32) int {
	n := 0
	for _, v := range m {
		if v >= 0 {
			n++
		}
	}
	return n
}

// uniform draws from a uniform distribution with standard deviation std.
func uniform(rng *rand.Rand, std float64) float32 {
	return float32((2*rng.Float64() - 1) * std * math.Sqrt(3))
}
