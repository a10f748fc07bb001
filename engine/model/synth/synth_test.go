package synth

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/specgate/specgate/engine/model/gguf"
	"github.com/specgate/specgate/kernels"
)

func write(t *testing.T, o Options) (*gguf.File, []byte) {
	t.Helper()
	var buf bytes.Buffer
	if err := Write(&buf, o); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Parse(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	return f, buf.Bytes()
}

func TestShapes(t *testing.T) {
	tests := []Options{
		{}, // the defaults
		{Type: kernels.F16, Layers: 1, Dim: 48, Heads: 6, KVHeads: 2, FFN: 100, Vocab: 300},
		{Type: kernels.BF16, TiedOutput: true, Seed: 7},
		{Type: kernels.Q8_0, Layers: 3, Dim: 96, Heads: 4, KVHeads: 1, FFN: 256, Vocab: 1000, Tokenizer: "gpt2", RopeBase: 500000, Context: 8192},
		{Type: kernels.Q4_0, Dim: 128, Heads: 8, KVHeads: 4, Vocab: 2048},
	}
	for _, o := range tests {
		want := o
		if err := want.validate(); err != nil {
			t.Fatal(err)
		}
		name := fmt.Sprintf("%v-L%d-D%d-H%d-KV%d-V%d-%s", want.Type, want.Layers, want.Dim, want.Heads, want.KVHeads, want.Vocab, want.Tokenizer)
		t.Run(name, func(t *testing.T) {
			f, _ := write(t, o)
			checkModel(t, f, want)
		})
	}
}

// checkModel compares a parsed model with the (validated) options.
func checkModel(t *testing.T, f *gguf.File, o Options) {
	t.Helper()
	headDim := o.Dim / o.Heads
	uints := map[string]uint64{
		"llama.block_count":             uint64(o.Layers),
		"llama.context_length":          uint64(o.Context),
		"llama.embedding_length":        uint64(o.Dim),
		"llama.feed_forward_length":     uint64(o.FFN),
		"llama.attention.head_count":    uint64(o.Heads),
		"llama.attention.head_count_kv": uint64(o.KVHeads),
		"llama.rope.dimension_count":    uint64(headDim),
		"llama.vocab_size":              uint64(o.Vocab),
		"general.file_type":             uint64(gguf.FileType(o.Type)),
	}
	for k, want := range uints {
		v, _ := f.Value(k)
		if _, ok := v.(uint32); !ok {
			t.Errorf("%s: have %T; want uint32", k, v)
		}
		if have, _ := f.Uint(k); have != want {
			t.Errorf("%s: have %d; want %d", k, have, want)
		}
	}
	if s, _ := f.String("general.architecture"); s != "llama" {
		t.Errorf("general.architecture: have %q; want llama", s)
	}
	if v, _ := f.Float("llama.rope.freq_base"); float32(v) != o.RopeBase {
		t.Errorf("rope.freq_base: have %v; want %v", v, o.RopeBase)
	}
	if v, _ := f.Float("llama.attention.layer_norm_rms_epsilon"); float32(v) != RMSEpsilon {
		t.Errorf("rms epsilon: have %v; want %v", v, RMSEpsilon)
	}
	_, hasQV := f.Value("general.quantization_version")
	if quant := o.Type == kernels.Q8_0 || o.Type == kernels.Q4_0; hasQV != quant {
		t.Errorf("general.quantization_version present: have %v; want %v", hasQV, quant)
	}
	if toks, _ := f.Strings("tokenizer.ggml.tokens"); len(toks) != o.Vocab {
		t.Errorf("tokens: have %d; want %d", len(toks), o.Vocab)
	}
	if m, _ := f.String("tokenizer.ggml.model"); m != o.Tokenizer {
		t.Errorf("tokenizer.ggml.model: have %q; want %q", m, o.Tokenizer)
	}

	kv := uint64(headDim * o.KVHeads)
	D, F, V := uint64(o.Dim), uint64(o.FFN), uint64(o.Vocab)
	type shape struct {
		dims []uint64
		dt   kernels.DType
	}
	want := map[string]shape{
		"token_embd.weight":  {[]uint64{D, V}, o.Type},
		"output_norm.weight": {[]uint64{D}, kernels.F32},
	}
	if !o.TiedOutput {
		want["output.weight"] = shape{[]uint64{D, V}, o.Type}
	}
	for l := range o.Layers {
		b := fmt.Sprintf("blk.%d.", l)
		want[b+"attn_norm.weight"] = shape{[]uint64{D}, kernels.F32}
		want[b+"ffn_norm.weight"] = shape{[]uint64{D}, kernels.F32}
		want[b+"attn_q.weight"] = shape{[]uint64{D, D}, o.Type}
		want[b+"attn_k.weight"] = shape{[]uint64{D, kv}, o.Type}
		want[b+"attn_v.weight"] = shape{[]uint64{D, kv}, o.Type}
		want[b+"attn_output.weight"] = shape{[]uint64{D, D}, o.Type}
		want[b+"ffn_gate.weight"] = shape{[]uint64{D, F}, o.Type}
		want[b+"ffn_up.weight"] = shape{[]uint64{D, F}, o.Type}
		want[b+"ffn_down.weight"] = shape{[]uint64{F, D}, o.Type}
	}
	if len(f.Tensors) != len(want) {
		t.Errorf("tensors: have %d; want %d", len(f.Tensors), len(want))
	}
	for name, w := range want {
		ti, ok := f.Tensor(name)
		if !ok {
			t.Errorf("tensor %s missing", name)
			continue
		}
		if !slices.Equal(ti.Dims, w.dims) || ti.Type != w.dt {
			t.Errorf("%s: have %v %v; want %v %v", name, ti.Dims, ti.Type, w.dims, w.dt)
			continue
		}
		checkWeights(t, f, ti)
	}
}

// checkWeights decodes a tensor and checks its values are finite and of
// the intended size: norms near 1, matrices with rms near 1/sqrt(fan_in)
// (within the residual down-scaling).
func checkWeights(t *testing.T, f *gguf.File, ti gguf.TensorInfo) {
	t.Helper()
	vals := make([]float32, ti.Elems())
	if err := kernels.Dequantize(ti.Type, f.Data(ti), vals); err != nil {
		t.Fatalf("%s: %v", ti.Name, err)
	}
	var sum, sq float64
	for _, v := range vals {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			t.Fatalf("%s: non-finite value %v", ti.Name, v)
		}
		sum += float64(v)
		sq += float64(v) * float64(v)
	}
	n := float64(len(vals))
	mean, rms := sum/n, math.Sqrt(sq/n)
	if len(ti.Dims) == 1 {
		if math.Abs(mean-1) > 0.05 {
			t.Errorf("%s: mean %.3f; want near 1", ti.Name, mean)
		}
		return
	}
	fanIn := 1 / math.Sqrt(float64(ti.Cols()))
	if rms > 1.2*fanIn || rms < 0.1*fanIn || math.Abs(mean) > 0.2*fanIn {
		t.Errorf("%s: mean %.4f rms %.4f; want mean near 0, rms up to %.4f", ti.Name, mean, rms, fanIn)
	}
}

func TestDeterminism(t *testing.T) {
	o := Options{Type: kernels.Q8_0, Seed: 42, Vocab: 600}
	_, a := write(t, o)
	_, b := write(t, o)
	if !bytes.Equal(a, b) {
		t.Errorf("same seed: files differ")
	}
	o.Seed = 43
	fc, c := write(t, o)
	if len(c) != len(a) {
		t.Fatalf("other seed: have %d bytes; want %d", len(c), len(a))
	}
	fa, _ := gguf.Parse(a)
	for _, ti := range fa.Tensors {
		tc, _ := fc.Tensor(ti.Name)
		if bytes.Equal(fa.Data(ti), fc.Data(tc)) {
			t.Errorf("other seed: tensor %s is the same", ti.Name)
		}
	}
	if !bytes.Equal(a[:fa.DataOffset], c[:fa.DataOffset]) {
		t.Errorf("other seed: metadata differs")
	}
	// Tensors of one model differ from each other too.
	q, _ := fa.Tensor("blk.0.attn_q.weight")
	out, _ := fa.Tensor("blk.0.attn_output.weight")
	if bytes.Equal(fa.Data(q), fa.Data(out)) {
		t.Errorf("attn_q and attn_output are the same")
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		o    Options
		want string
	}{
		{Options{Dim: 64, Heads: 3}, "Dim 64 is not a multiple of Heads 3"},
		{Options{Dim: 60, Heads: 20}, "head width 3"},
		{Options{Heads: 4, KVHeads: 3}, "Heads 4 is not a multiple of KVHeads 3"},
		{Options{Type: kernels.Q8_0, Dim: 48, Heads: 4, FFN: 64}, "Q8_0 needs Dim (48) and FFN (64) to be multiples of 32"},
		{Options{Type: kernels.Q4_0, FFN: 100}, "multiples of 32"},
		{Options{Type: 4}, "weight type type(4)"}, // a removed GGML type
		{Options{Vocab: 258}, "Vocab 258 is below the 259 tokens"},
		{Options{Vocab: 259, Tokenizer: "gpt2"}, `below the 261 tokens a "gpt2" tokenizer`},
		{Options{Tokenizer: "wordpiece"}, `tokenizer "wordpiece"`},
		{Options{Layers: -1}, "Layers -1 out of range"},
		{Options{RopeBase: 0.5}, "RopeBase 0.5"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			err := Write(io.Discard, tt.o)
			if err == nil || !errors.Is(err, ErrOptions) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("have %v; want an ErrOptions containing %q", err, tt.want)
			}
		})
	}
	var o Options
	if err := o.validate(); err != nil {
		t.Fatal(err)
	}
	want := Options{Layers: 2, Dim: 64, Heads: 4, KVHeads: 4, FFN: 192, Vocab: 512, Context: 512, Tokenizer: "llama", RopeBase: 10000}
	if o != want {
		t.Errorf("defaults: have %+v; want %+v", o, want)
	}
}

func TestLlamaVocab(t *testing.T) {
	for _, n := range []int{259, 300, 1000, 32000} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			tokens, scores, types := llamaVocab(n)
			if len(tokens) != n || len(scores) != n || len(types) != n {
				t.Fatalf("have %d tokens, %d scores, %d types; want %d", len(tokens), len(scores), len(types), n)
			}
			fixed := []struct {
				id  int
				tok string
				typ int32
			}{{0, "<unk>", typeUnknown}, {1, "<s>", typeControl}, {2, "</s>", typeControl}, {3, "<0x00>", typeByte}, {3 + 'A', "<0x41>", typeByte}, {258, "<0xFF>", typeByte}}
			for _, c := range fixed {
				if tokens[c.id] != c.tok || types[c.id] != c.typ {
					t.Errorf("token %d: have %q type %d; want %q type %d", c.id, tokens[c.id], types[c.id], c.tok, c.typ)
				}
			}
			index := map[string]int{}
			for i, tok := range tokens {
				if _, dup := index[tok]; dup {
					t.Fatalf("token %q appears twice", tok)
				}
				index[tok] = i
				if i < 259 {
					continue
				}
				if types[i] != typeNormal || !utf8.ValidString(tok) || tok == "" {
					t.Errorf("token %d %q: type %d; want a normal UTF-8 piece", i, tok, types[i])
				}
				if i > 259 && scores[i] >= scores[i-1] {
					t.Errorf("token %d: score %v not below %v", i, scores[i], scores[i-1])
				}
				// Every piece is some earlier piece plus one character,
				// so SentencePiece merges can reach it.
				if r := []rune(tok); len(r) > 1 {
					if j, ok := index[string(r[:len(r)-1])]; !ok || j >= i {
						t.Errorf("token %d %q: prefix %q missing or later", i, tok, string(r[:len(r)-1]))
					}
				}
			}
			if n >= 1000 {
				for _, w := range []string{"▁the", "▁Once", "▁upon", "▁a", "▁time", "ing"} {
					if _, ok := index[w]; !ok {
						t.Errorf("piece %q missing", w)
					}
				}
			}
		})
	}
}

func TestGPT2Vocab(t *testing.T) {
	for _, n := range []int{261, 300, 5000, 128256} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			tokens, types, merges := gpt2Vocab(n)
			if len(tokens) != n || len(types) != n {
				t.Fatalf("have %d tokens, %d types; want %d", len(tokens), len(types), n)
			}
			if len(merges) != n-256-len(gpt2Specials) {
				t.Fatalf("have %d merges; want %d", len(merges), n-256-len(gpt2Specials))
			}
			if tokens[0] != "!" || tokens[n-5] != "<|begin_of_text|>" || tokens[n-1] != "<|eot_id|>" {
				t.Errorf("tokens 0, %d, %d: have %q %q %q", n-5, n-1, tokens[0], tokens[n-5], tokens[n-1])
			}
			index := map[string]int{}
			for i, tok := range tokens {
				if _, dup := index[tok]; dup {
					t.Fatalf("token %q appears twice", tok)
				}
				index[tok] = i
				want := int32(typeNormal)
				if i >= n-len(gpt2Specials) {
					want = typeControl
				}
				if types[i] != want {
					t.Errorf("token %d %q: have type %d; want %d", i, tok, types[i], want)
				}
			}
			// The byte tokens spell every byte; a space is Ġ.
			table, _ := byteRunes()
			for b := range 256 {
				if j, ok := index[string(table[b])]; !ok || j >= 256 {
					t.Errorf("byte %#x: token %q at %d, %v", b, string(table[b]), j, ok)
				}
			}
			if table[' '] != 'Ġ' || table['\n'] != 'Ċ' {
				t.Errorf("space, newline: have %q %q; want Ġ Ċ", table[' '], table['\n'])
			}
			// Merge i joins two earlier tokens into token 256+i.
			for i, m := range merges {
				l, r, ok := strings.Cut(m, " ")
				li, lok := index[l]
				ri, rok := index[r]
				if !ok || !lok || !rok || li >= 256+i || ri >= 256+i || tokens[256+i] != l+r {
					t.Fatalf("merge %d %q: parts at %d, %d; token %q", i, m, li, ri, tokens[256+i])
				}
			}
			if n >= 5000 {
				if _, ok := index["Ġthe"]; !ok {
					t.Errorf("Ġthe missing")
				}
			}
		})
	}
}

func TestSetup(t *testing.T) {
	path := Setup(t, Options{Tokenizer: "gpt2", TiedOutput: true})
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, ok := f.Tensor("output.weight"); ok {
		t.Errorf("tied model has output.weight")
	}
	bos, _ := f.Uint("tokenizer.ggml.bos_token_id")
	toks, _ := f.Strings("tokenizer.ggml.tokens")
	if toks[bos] != "<|begin_of_text|>" {
		t.Errorf("bos %d: have %q; want <|begin_of_text|>", bos, toks[bos])
	}
	eos, _ := f.Uint("tokenizer.ggml.eos_token_id")
	if toks[eos] != "<|end_of_text|>" {
		t.Errorf("eos %d: have %q; want <|end_of_text|>", eos, toks[eos])
	}
}

// BenchmarkWrite100M measures a ~100M-parameter model (the size a
// benchmark uses), written to nowhere.
func BenchmarkWrite100M(b *testing.B) {
	for _, dt := range []kernels.DType{kernels.F32, kernels.Q8_0, kernels.Q4_0} {
		b.Run(dt.String(), func(b *testing.B) {
			o := Options{Layers: 12, Dim: 768, Heads: 12, FFN: 2048, Vocab: 32000, Type: dt}
			for b.Loop() {
				if err := Write(io.Discard, o); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
