package gguf

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/specgate/specgate/internal/testmodels"
	"github.com/specgate/specgate/kernels"
)

// The golden facts of the stories260K files (see the model directory's
// README): the quantized files add two keys and store tensors in another
// order, so everything is looked up by name.
func TestStoriesGolden(t *testing.T) {
	type tensor struct {
		name string
		dims []uint64
		typ  kernels.DType
	}
	tests := []struct {
		file       string
		keys       int
		dataOffset uint64
		fileType   int64 // -1: no general.file_type key
		tensors    []tensor
	}{
		{testmodels.Stories260K, 19, 14176, -1, []tensor{
			{"token_embd.weight", []uint64{64, 512}, kernels.F32},
			{"output.weight", []uint64{64, 512}, kernels.F32},
			{"output_norm.weight", []uint64{64}, kernels.F32},
			{"blk.0.attn_q.weight", []uint64{64, 64}, kernels.F32},
			{"blk.0.attn_k.weight", []uint64{64, 32}, kernels.F32},
			{"blk.2.attn_v.weight", []uint64{64, 32}, kernels.F32},
			{"blk.4.attn_output.weight", []uint64{64, 64}, kernels.F32},
			{"blk.4.ffn_gate.weight", []uint64{64, 172}, kernels.F32},
			{"blk.4.ffn_up.weight", []uint64{64, 172}, kernels.F32},
			{"blk.4.ffn_down.weight", []uint64{172, 64}, kernels.F32},
			{"blk.4.ffn_norm.weight", []uint64{64}, kernels.F32},
			{"blk.4.attn_norm.weight", []uint64{64}, kernels.F32},
		}},
		{testmodels.Stories260KQ8_0, 21, 14240, 7, []tensor{
			{"token_embd.weight", []uint64{64, 512}, kernels.Q8_0},
			{"output.weight", []uint64{64, 512}, kernels.Q8_0},
			{"output_norm.weight", []uint64{64}, kernels.F32},
			{"blk.0.attn_q.weight", []uint64{64, 64}, kernels.Q8_0},
			{"blk.3.ffn_up.weight", []uint64{64, 172}, kernels.Q8_0},
			{"blk.3.ffn_down.weight", []uint64{172, 64}, kernels.F16},
			{"blk.3.ffn_norm.weight", []uint64{64}, kernels.F32},
		}},
		{testmodels.Stories260KQ4_0, 21, 14240, 2, []tensor{
			{"token_embd.weight", []uint64{64, 512}, kernels.Q4_0},
			{"output.weight", []uint64{64, 512}, kernels.Q8_0},
			{"blk.1.attn_k.weight", []uint64{64, 32}, kernels.Q4_0},
			{"blk.1.ffn_down.weight", []uint64{172, 64}, kernels.F16},
			{"blk.1.attn_norm.weight", []uint64{64}, kernels.F32},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			f, err := Open(testmodels.Path(t, tt.file))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if f.Version != 3 || f.Alignment != 32 {
				t.Errorf("version, alignment: have %d, %d; want 3, 32", f.Version, f.Alignment)
			}
			if n := len(f.Keys()); n != tt.keys {
				t.Errorf("keys: have %d; want %d", n, tt.keys)
			}
			if n := len(f.Tensors); n != 48 {
				t.Errorf("tensors: have %d; want 48", n)
			}
			if f.DataOffset != tt.dataOffset {
				t.Errorf("data offset: have %d; want %d", f.DataOffset, tt.dataOffset)
			}
			for _, want := range tt.tensors {
				ti, ok := f.Tensor(want.name)
				if !ok {
					t.Errorf("tensor %s missing", want.name)
					continue
				}
				if !slices.Equal(ti.Dims, want.dims) || ti.Type != want.typ {
					t.Errorf("%s: have %v %v; want %v %v", want.name, ti.Dims, ti.Type, want.dims, want.typ)
				}
				rb, err := ti.Type.RowBytes(ti.Cols())
				if err != nil {
					t.Fatal(err)
				}
				if d := f.Data(ti); len(d) != rb*ti.Rows() || uint64(len(d)) != ti.Size {
					t.Errorf("%s: have %d data bytes, size %d; want %d", want.name, len(d), ti.Size, rb*ti.Rows())
				}
			}
			ft, ok := f.Int("general.file_type")
			if !ok {
				ft = -1
			}
			if ft != tt.fileType {
				t.Errorf("general.file_type: have %d; want %d", ft, tt.fileType)
			}
			checkStoriesMetadata(t, f)
		})
	}
}

func checkStoriesMetadata(t *testing.T, f *File) {
	t.Helper()
	if s, _ := f.String("general.architecture"); s != "llama" {
		t.Errorf("general.architecture: have %q; want llama", s)
	}
	if s, _ := f.String("tokenizer.ggml.model"); s != "llama" {
		t.Errorf("tokenizer.ggml.model: have %q; want llama", s)
	}
	for key, want := range map[string]uint64{
		"llama.block_count":                 5,
		"llama.embedding_length":            64,
		"llama.feed_forward_length":         172,
		"llama.attention.head_count":        8,
		"llama.attention.head_count_kv":     4,
		"llama.rope.dimension_count":        8,
		"llama.context_length":              2048,
		"tokenizer.ggml.bos_token_id":       1,
		"tokenizer.ggml.eos_token_id":       2,
		"tokenizer.ggml.unknown_token_id":   0,
		"tokenizer.ggml.padding_token_id":   math.MaxUint32,
		"tokenizer.ggml.seperator_token_id": math.MaxUint32,
	} {
		if v, ok := f.Uint(key); !ok || v != want {
			t.Errorf("%s: have %d, %v; want %d", key, v, ok, want)
		}
	}
	if v, ok := f.Float("llama.attention.layer_norm_rms_epsilon"); !ok || float32(v) != 1e-5 {
		t.Errorf("rms epsilon: have %v, %v; want 1e-5", v, ok)
	}
	toks, _ := f.Strings("tokenizer.ggml.tokens")
	scores, _ := f.Float32s("tokenizer.ggml.scores")
	types, _ := f.Int32s("tokenizer.ggml.token_type")
	if len(toks) != 512 || len(scores) != 512 || len(types) != 512 {
		t.Fatalf("tokenizer arrays: have %d tokens, %d scores, %d types; want 512 each", len(toks), len(scores), len(types))
	}
	for _, c := range []struct {
		id  int
		tok string
		typ int32
	}{{0, "<unk>", 2}, {1, "<s>", 3}, {2, "</s>", 3}, {3, "<0x00>", 6}, {258, "<0xFF>", 6}} {
		if toks[c.id] != c.tok || types[c.id] != c.typ {
			t.Errorf("token %d: have %q type %d; want %q type %d", c.id, toks[c.id], types[c.id], c.tok, c.typ)
		}
	}
	// "Once upon a time" tokenizes through these pieces.
	for id, want := range map[int]string{403: "▁Once", 407: "▁upon", 261: "▁a", 378: "▁time"} {
		if toks[id] != want {
			t.Errorf("token %d: have %q; want %q", id, toks[id], want)
		}
	}
}

// Writing a parsed file's metadata and tensors back gives the same bytes:
// the Writer lays files out the way llama.cpp does.
func TestRewriteStories(t *testing.T) {
	for _, name := range []string{testmodels.Stories260K, testmodels.Stories260KQ8_0, testmodels.Stories260KQ4_0} {
		t.Run(name, func(t *testing.T) {
			orig, err := os.ReadFile(testmodels.Path(t, name))
			if err != nil {
				t.Fatal(err)
			}
			f, err := Parse(orig)
			if err != nil {
				t.Fatal(err)
			}
			var w Writer
			for _, k := range f.Keys() {
				v, _ := f.Value(k)
				if err := w.Set(k, v); err != nil {
					t.Fatal(err)
				}
			}
			for _, ti := range f.Tensors {
				if err := w.AddTensor(ti.Name, ti.Type, ti.Dims, f.Data(ti)); err != nil {
					t.Fatal(err)
				}
			}
			var buf bytes.Buffer
			n, err := w.WriteTo(&buf)
			if err != nil {
				t.Fatal(err)
			}
			if n != int64(buf.Len()) {
				t.Errorf("WriteTo count: have %d; want %d", n, buf.Len())
			}
			g, err := Parse(buf.Bytes())
			if err != nil {
				t.Fatal(err)
			}
			sameFile(t, g, f)
			if !bytes.Equal(buf.Bytes(), orig) {
				t.Errorf("rewritten file differs from the original: have %d bytes; want %d", buf.Len(), len(orig))
			}
		})
	}
}

// sameFile compares two files' metadata, tensor infos and tensor bytes.
func sameFile(t *testing.T, have, want *File) {
	t.Helper()
	if !slices.Equal(have.Keys(), want.Keys()) {
		t.Fatalf("keys: have %v; want %v", have.Keys(), want.Keys())
	}
	for _, k := range want.Keys() {
		hv, _ := have.Value(k)
		wv, _ := want.Value(k)
		if !reflect.DeepEqual(hv, wv) {
			t.Errorf("key %s: have %#v; want %#v", k, hv, wv)
		}
	}
	if len(have.Tensors) != len(want.Tensors) {
		t.Fatalf("tensors: have %d; want %d", len(have.Tensors), len(want.Tensors))
	}
	for i, wt := range want.Tensors {
		ht := have.Tensors[i]
		if ht.Name != wt.Name || ht.Type != wt.Type || !slices.Equal(ht.Dims, wt.Dims) || ht.Size != wt.Size {
			t.Errorf("tensor %d: have %s %v %v %d; want %s %v %v %d", i, ht.Name, ht.Type, ht.Dims, ht.Size, wt.Name, wt.Type, wt.Dims, wt.Size)
		}
		if !bytes.Equal(have.Data(ht), want.Data(wt)) {
			t.Errorf("tensor %s: data differs", wt.Name)
		}
	}
}

// allValues holds one value of every kind the format can store.
func allValues() []kv {
	return []kv{
		{"u8", uint8(200)},
		{"i8", int8(-100)},
		{"u16", uint16(60000)},
		{"i16", int16(-30000)},
		{"u32", uint32(4000000000)},
		{"i32", int32(-2000000000)},
		{"u64", uint64(math.MaxUint64)},
		{"i64", int64(math.MinInt64)},
		{"f32", float32(1.5)},
		{"f64", math.Pi},
		{"true", true},
		{"false", false},
		{"str", "héllo ▁world"},
		{"empty", ""},
		{"a.u8", []uint8{1, 2, 3}},
		{"a.i8", []int8{-1, 0, 1}},
		{"a.u16", []uint16{1, 65535}},
		{"a.i16", []int16{-32768, 32767}},
		{"a.u32", []uint32{0, math.MaxUint32}},
		{"a.i32", []int32{-1, 2, 6}},
		{"a.u64", []uint64{1 << 63}},
		{"a.i64", []int64{-1 << 62}},
		{"a.f32", []float32{0.5, -2, float32(math.Inf(1))}},
		{"a.f64", []float64{1e300}},
		{"a.bool", []bool{true, false, true}},
		{"a.str", []string{"<unk>", "", "▁the", "a b"}},
		{"a.empty", []uint32{}},
		{"a.nested", []any{[]int32{1, 2}, []string{"x"}, []any{[]bool{true}}, []any{}}},
	}
}

func TestRoundTrip(t *testing.T) {
	var w Writer
	for _, e := range allValues() {
		if err := w.Set(e.key, e.val); err != nil {
			t.Fatal(err)
		}
	}
	w.SetAlignment(64)
	// One tensor of every type kernels can encode, made by its reference
	// encoder, plus one that is written by a fill function.
	want := map[string][]byte{}
	for i, dt := range []kernels.DType{kernels.F32, kernels.F16, kernels.BF16, kernels.Q8_0, kernels.Q4_0} {
		src := make([]float32, 64*3)
		for j := range src {
			src[j] = float32(j%17-8) / float32(i+1)
		}
		data, err := kernels.Quantize(dt, src)
		if err != nil {
			t.Fatal(err)
		}
		name := "t." + dt.String()
		want[name] = data
		if err := w.AddTensor(name, dt, []uint64{64, 3}, data); err != nil {
			t.Fatal(err)
		}
	}
	fill := bytes.Repeat([]byte{7}, 4*5)
	want["filled"] = fill
	if err := w.AddTensorFunc("filled", kernels.F32, []uint64{5}, func(dst []byte) error { copy(dst, fill); return nil }); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "rt.gguf")
	if err := w.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Alignment != 64 || f.DataOffset%64 != 0 {
		t.Errorf("alignment, data offset: have %d, %d; want 64, a multiple of 64", f.Alignment, f.DataOffset)
	}
	wantKeys := []string{}
	for _, e := range allValues() {
		wantKeys = append(wantKeys, e.key)
		v, _ := f.Value(e.key)
		if !reflect.DeepEqual(v, e.val) {
			t.Errorf("%s: have %#v; want %#v", e.key, v, e.val)
		}
	}
	wantKeys = append(wantKeys, KeyAlignment)
	if !slices.Equal(f.Keys(), wantKeys) {
		t.Errorf("keys: have %v; want %v", f.Keys(), wantKeys)
	}
	if len(f.Tensors) != len(want) {
		t.Fatalf("tensors: have %d; want %d", len(f.Tensors), len(want))
	}
	for _, ti := range f.Tensors {
		if ti.Offset%64 != 0 {
			t.Errorf("%s: offset %d is not 64-aligned", ti.Name, ti.Offset)
		}
		if !bytes.Equal(f.Data(ti), want[ti.Name]) {
			t.Errorf("%s: data differs", ti.Name)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if d := f.Data(f.Tensors[0]); d != nil {
		t.Errorf("Data after Close: have %d bytes; want nil", len(d))
	}
	if err := f.Close(); err != nil {
		t.Errorf("second Close: have %v; want nil", err)
	}
}

func TestAccessors(t *testing.T) {
	var w Writer
	for _, e := range allValues() {
		if err := w.Set(e.key, e.val); err != nil {
			t.Fatal(err)
		}
	}
	w.SetInt32("neg", -5)
	w.SetUint8s("bytes", []byte{1, 2})
	w.SetUint32s("u32s", []uint32{1, math.MaxUint32})
	f := mustParse(t, &w)

	uints := []struct {
		key  string
		want uint64
		ok   bool
	}{
		{"u8", 200, true}, {"u32", 4000000000, true}, {"u64", math.MaxUint64, true},
		{"i8", 0, false}, {"neg", 0, false}, {"f32", 0, false}, {"str", 0, false}, {"missing", 0, false},
	}
	for _, c := range uints {
		if v, ok := f.Uint(c.key); v != c.want || ok != c.ok {
			t.Errorf("Uint(%s): have %d, %v; want %d, %v", c.key, v, ok, c.want, c.ok)
		}
	}
	ints := []struct {
		key  string
		want int64
		ok   bool
	}{
		{"i8", -100, true}, {"u16", 60000, true}, {"i64", math.MinInt64, true}, {"neg", -5, true},
		{"u64", 0, false}, {"f64", 0, false},
	}
	for _, c := range ints {
		if v, ok := f.Int(c.key); v != c.want || ok != c.ok {
			t.Errorf("Int(%s): have %d, %v; want %d, %v", c.key, v, ok, c.want, c.ok)
		}
	}
	floats := []struct {
		key  string
		want float64
		ok   bool
	}{
		{"f32", 1.5, true}, {"f64", math.Pi, true}, {"i16", -30000, true}, {"u64", math.MaxUint64, true}, {"str", 0, false},
	}
	for _, c := range floats {
		if v, ok := f.Float(c.key); v != c.want || ok != c.ok {
			t.Errorf("Float(%s): have %v, %v; want %v, %v", c.key, v, ok, c.want, c.ok)
		}
	}
	if v, ok := f.Bool("true"); !v || !ok {
		t.Errorf("Bool(true): have %v, %v; want true, true", v, ok)
	}
	if _, ok := f.Bool("u8"); ok {
		t.Errorf("Bool(u8): have ok; want not ok")
	}
	if v, ok := f.String("str"); v != "héllo ▁world" || !ok {
		t.Errorf("String(str): have %q, %v", v, ok)
	}
	if _, ok := f.String("a.str"); ok {
		t.Errorf("String(a.str): have ok; want not ok")
	}
	if v, ok := f.Strings("a.str"); !ok || len(v) != 4 || v[2] != "▁the" {
		t.Errorf("Strings(a.str): have %q, %v", v, ok)
	}
	if v, ok := f.Float32s("a.f64"); !ok || len(v) != 1 || !math.IsInf(float64(v[0]), 1) {
		t.Errorf("Float32s(a.f64): have %v, %v; want [+Inf] true", v, ok)
	}
	int32s := []struct {
		key  string
		want []int32
		ok   bool
	}{
		{"a.i32", []int32{-1, 2, 6}, true},
		{"a.u8", []int32{1, 2, 3}, true},
		{"a.i16", []int32{-32768, 32767}, true},
		{"a.u32", nil, false}, // MaxUint32 does not fit
		{"a.f32", nil, false},
		{"u32", nil, false},
	}
	for _, c := range int32s {
		if v, ok := f.Int32s(c.key); !slices.Equal(v, c.want) || ok != c.ok {
			t.Errorf("Int32s(%s): have %v, %v; want %v, %v", c.key, v, ok, c.want, c.ok)
		}
	}
	if v, ok := f.Uint32s("u32s"); !ok || !slices.Equal(v, []uint32{1, math.MaxUint32}) {
		t.Errorf("Uint32s(u32s): have %v, %v", v, ok)
	}
	if v, ok := f.Uint32s("a.i32"); ok {
		t.Errorf("Uint32s(a.i32): have %v, ok; want not ok (negative)", v)
	}
	if _, ok := f.Tensor("nope"); ok {
		t.Errorf("Tensor(nope): have ok; want not ok")
	}
	ti := TensorInfo{Dims: []uint64{8, 3, 2}}
	if ti.Rows() != 6 || ti.Cols() != 8 || ti.Elems() != 48 {
		t.Errorf("Rows, Cols, Elems of %v: have %d, %d, %d; want 6, 8, 48", ti.Dims, ti.Rows(), ti.Cols(), ti.Elems())
	}
	if got := f.Data(TensorInfo{Offset: 1 << 40, Size: 1}); got != nil {
		t.Errorf("Data out of range: have %d bytes; want nil", len(got))
	}
}

func mustParse(t *testing.T, w *Writer) *File {
	t.Helper()
	var buf bytes.Buffer
	if _, err := w.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	f, err := Parse(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestWriterErrors(t *testing.T) {
	f32 := make([]byte, 4*32)
	tests := []struct {
		name string
		do   func(w *Writer) error
		want string
	}{
		{"empty key", func(w *Writer) error { return w.Set("", uint8(1)) }, "empty metadata key"},
		{"bad type", func(w *Writer) error { return w.Set("k", 3) }, "cannot encode a int"},
		{"bad nested", func(w *Writer) error { return w.Set("k", []any{uint8(1)}) }, "is not an array"},
		{"typed setter empty key", func(w *Writer) error { w.SetString("", "x"); _, err := w.WriteTo(discard{}); return err }, "empty metadata key"},
		{"bad alignment", func(w *Writer) error { w.SetAlignment(48); _, err := w.WriteTo(discard{}); return err }, "not a power of two"},
		{"empty name", func(w *Writer) error { return w.AddTensor("", kernels.F32, []uint64{32}, f32) }, "empty tensor name"},
		{"twice", func(w *Writer) error {
			w.AddTensor("a", kernels.F32, []uint64{32}, f32)
			return w.AddTensor("a", kernels.F32, []uint64{32}, f32)
		}, "added twice"},
		{"size", func(w *Writer) error { return w.AddTensor("a", kernels.F32, []uint64{31}, f32) }, "124"},
		{"blocks", func(w *Writer) error { return w.AddTensor("a", kernels.Q8_0, []uint64{33}, f32) }, "not a whole number"},
		{"type", func(w *Writer) error { return w.AddTensor("a", 4, []uint64{32}, f32) }, "unknown tensor type 4"},
		{"dims", func(w *Writer) error { return w.AddTensor("a", kernels.F32, []uint64{1, 1, 1, 1, 1}, f32) }, "5 dimensions"},
		{"overflow", func(w *Writer) error { return w.AddTensor("a", kernels.F32, []uint64{1 << 40, 1 << 40}, f32) }, "overflow"},
		{"nil fill", func(w *Writer) error { return w.AddTensorFunc("a", kernels.F32, []uint64{32}, nil) }, "nil fill"},
		{"fill fails", func(w *Writer) error {
			w.AddTensorFunc("a", kernels.F32, []uint64{32}, func([]byte) error { return errors.New("boom") })
			_, err := w.WriteTo(discard{})
			return err
		}, "boom"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var w Writer
			err := tt.do(&w)
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.HasPrefix(err.Error(), "gguf: ") {
				t.Errorf("have %v; want an error containing %q", err, tt.want)
			}
		})
	}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// raw builds GGUF bytes field by field, so tests can write what the Writer
// refuses to.
type raw struct{ bytes.Buffer }

func (r *raw) u32(v uint32) *raw { binary.Write(&r.Buffer, binary.LittleEndian, v); return r }
func (r *raw) u64(v uint64) *raw { binary.Write(&r.Buffer, binary.LittleEndian, v); return r }
func (r *raw) str(s string) *raw { r.u64(uint64(len(s))); r.WriteString(s); return r }
func (r *raw) b(p ...byte) *raw  { r.Write(p); return r }

// header starts a v3 file with nt tensors and nkv keys.
func header(nt, nkv uint64) *raw {
	r := &raw{}
	r.WriteString("GGUF")
	return r.u32(3).u64(nt).u64(nkv)
}

// tensor writes a tensor info.
func (r *raw) tensor(name string, typ uint32, off uint64, dims ...uint64) *raw {
	r.str(name).u32(uint32(len(dims)))
	for _, d := range dims {
		r.u64(d)
	}
	return r.u32(typ).u64(off)
}

// data pads to 32 and appends n zero bytes.
func (r *raw) data(n int) *raw {
	for r.Len()%32 != 0 {
		r.WriteByte(0)
	}
	r.Write(make([]byte, n))
	return r
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name string
		file []byte
		want string
	}{
		{"empty", nil, "offset 0: magic: need 4 bytes"},
		{"magic", []byte("GGML\x03\x00\x00\x00"), "not a GGUF file"},
		{"v1", (&raw{}).b('G', 'G', 'U', 'F').u32(1).u32(0).u32(0).Bytes(), "version 1 is not supported"},
		{"v4", (&raw{}).b('G', 'G', 'U', 'F').u32(4).Bytes(), "version 4 is not supported"},
		{"big endian", (&raw{}).b('G', 'G', 'U', 'F', 0, 0, 0, 3).Bytes(), "big-endian"},
		{"truncated header", []byte("GGUF\x03\x00\x00\x00\x01\x00"), "tensor count: need 8 bytes, only 2 left"},
		{"huge counts", header(1<<60, 1<<60).Bytes(), "cannot fit"},
		{"counts beyond file", header(0, 2).str("k").u32(typeUint8).b(1).Bytes(), "cannot fit"},
		{"key length", header(0, 1).u64(1 << 62).b(make([]byte, 20)...).Bytes(), "metadata key 0: string length 4611686018427387904 exceeds"},
		{"value type", header(0, 1).str("k.x").u32(13).b(make([]byte, 8)...).Bytes(), `offset 35: key "k.x": unknown value type 13`},
		{"truncated value", header(0, 1).str("k.x").u32(typeUint64).b(1, 2, 3, 4, 5).Bytes(), `key "k.x": need 8 bytes, only 5 left`},
		{"bool", header(0, 1).str("k.b").u32(typeBool).b(2).b(make([]byte, 12)...).Bytes(), "bool byte 2"},
		{"string value", header(0, 1).str("k.s").u32(typeString).u64(100).b('x').Bytes(), `key "k.s": string length 100 exceeds the 1 bytes left`},
		{"huge array", header(0, 1).str("tokenizer.ggml.tokens").u32(typeArray).u32(typeString).u64(1 << 60).b(make([]byte, 1000)...).Bytes(),
			`key "tokenizer.ggml.tokens": array of 1152921504606846976 string elements cannot fit in the 1000 bytes left`},
		{"huge u64 array", header(0, 1).str("k").u32(typeArray).u32(typeUint64).u64(1 << 61).b(make([]byte, 100)...).Bytes(), "cannot fit"},
		{"array elem type", header(0, 1).str("k").u32(typeArray).u32(99).u64(1).b(make([]byte, 8)...).Bytes(), `key "k": unknown array element type 99`},
		{"array string", header(0, 1).str("k").u32(typeArray).u32(typeString).u64(2).str("a").u64(50).b(make([]byte, 8)...).Bytes(), `key "k": element 1: string length 50 exceeds`},
		{"array bool", header(0, 1).str("k").u32(typeArray).u32(typeBool).u64(3).b(0, 1, 5).b(make([]byte, 8)...).Bytes(), "element 2: bool byte 5"},
		{"nested deep", deepArray(maxDepth + 1), "nested deeper than 16"},
		{"duplicate key", header(0, 2).str("k").u32(typeUint8).b(1).str("k").u32(typeUint8).b(2).b(make([]byte, 16)...).Bytes(), `metadata key "k" appears twice`},
		{"alignment", header(0, 1).str(KeyAlignment).u32(typeUint32).u32(24).b(make([]byte, 16)...).Bytes(), "alignment 24 is not a power of two"},
		{"alignment type", header(0, 1).str(KeyAlignment).u32(typeString).str("32").b(make([]byte, 16)...).Bytes(), "alignment 32 is not a power of two"},
		{"tensor name", header(1, 0).u64(1 << 40).b(make([]byte, 30)...).Bytes(), "tensor 0 name: string length"},
		{"dims count", header(1, 0).tensor("t", 0, 0, 1, 1, 1, 1, 1).data(4).Bytes(), `tensor "t": 5 dimensions, at most 4`},
		{"dims overflow", header(1, 0).tensor("t", 0, 0, 1<<32, 1<<32).data(4).Bytes(), `tensor "t": dims [4294967296 4294967296] overflow`},
		{"bytes overflow", header(1, 0).tensor("t", 0, 0, 1<<31, 1<<31).data(4).Bytes(), `tensor "t": 4611686018427387904 elements of F32 overflow the byte size`},
		{"tensor type", header(1, 0).tensor("t", 5, 0, 32).data(4).Bytes(), `tensor "t": unknown tensor type 5`},
		{"tensor type big", header(1, 0).tensor("t", 1000, 0, 32).data(4).Bytes(), `unknown tensor type 1000`},
		{"blocks", header(1, 0).tensor("blk.0.ffn_down.weight", uint32(kernels.Q4_0), 0, 172, 64).data(4).Bytes(),
			`tensor "blk.0.ffn_down.weight": row length 172 is not a whole number of 32-element Q4_0 blocks`},
		{"truncated info", header(1, 0).str("t").u32(2).u64(4).b(1, 2, 3).Bytes(), `offset 45: tensor "t": need 8 bytes, only 3 left`},
		{"duplicate tensor", header(2, 0).tensor("t", 0, 0, 4).tensor("t", 0, 32, 4).data(64).Bytes(), `tensor "t" appears twice`},
		{"misaligned", header(1, 0).tensor("t", 0, 4, 4).data(64).Bytes(), `tensor "t": data offset 4 is not a multiple of the alignment 32`},
		{"past end", header(1, 0).tensor("t", 0, 0, 64).data(100).Bytes(), `tensor "t": data [64, 64+256) runs past the end of the 164-byte file`},
		{"offset overflow", header(1, 0).tensor("t", 0, math.MaxUint64-31, 4).data(16).Bytes(), "runs past the end"},
		{"overlap", header(2, 0).tensor("a", 0, 0, 16).tensor("b", 0, 32, 16).data(128).Bytes(), `tensor "b": data overlaps tensor "a"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := Parse(tt.file)
			if err == nil {
				t.Fatalf("have a file with %d tensors; want an error containing %q", len(f.Tensors), tt.want)
			}
			if !errors.Is(err, ErrFormat) {
				t.Errorf("have %v; want an error wrapping ErrFormat", err)
			}
			if !strings.Contains(err.Error(), tt.want) || !strings.HasPrefix(err.Error(), "gguf: offset ") {
				t.Errorf("have %q; want it to contain %q", err, tt.want)
			}
		})
	}
}

// deepArray nests arrays depth levels deep.
func deepArray(depth int) []byte {
	r := header(0, 1).str("deep").u32(typeArray)
	for range depth - 1 {
		r.u32(typeArray).u64(1)
	}
	r.u32(typeUint8).u64(0)
	return r.data(0).Bytes()
}

// Every truncation of a valid file is an error, never a panic.
func TestTruncations(t *testing.T) {
	file := smallFile(t)
	for n := range len(file) {
		if _, err := Parse(file[:n]); err == nil {
			// Only the zero padding after the last tensor may go.
			if n < len(file)-31 {
				t.Errorf("prefix of %d of %d bytes: have no error; want one", n, len(file))
			}
		}
	}
	if _, err := Parse(file); err != nil {
		t.Fatal(err)
	}
}

// smallFile returns a valid file with a little of everything.
func smallFile(tb testing.TB) []byte {
	tb.Helper()
	var w Writer
	for _, e := range allValues() {
		if err := w.Set(e.key, e.val); err != nil {
			tb.Fatal(err)
		}
	}
	q, _ := kernels.Quantize(kernels.Q8_0, make([]float32, 64))
	if err := w.AddTensor("q", kernels.Q8_0, []uint64{32, 2}, q); err != nil {
		tb.Fatal(err)
	}
	if err := w.AddTensor("n", kernels.F32, []uint64{3}, make([]byte, 12)); err != nil {
		tb.Fatal(err)
	}
	var buf bytes.Buffer
	if _, err := w.WriteTo(&buf); err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes()
}

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty.gguf")
	bad := filepath.Join(dir, "bad.gguf")
	os.WriteFile(empty, nil, 0o644)
	os.WriteFile(bad, []byte("GGUF\x01\x00\x00\x00"), 0o644)
	tests := []struct {
		path   string
		want   string
		format bool
	}{
		{filepath.Join(dir, "missing.gguf"), "no such file", false},
		{empty, "magic: need 4 bytes", true},
		{bad, "version 1 is not supported", true},
	}
	for _, tt := range tests {
		_, err := Open(tt.path)
		if err == nil || !strings.Contains(err.Error(), tt.want) || errors.Is(err, ErrFormat) != tt.format {
			t.Errorf("Open(%s): have %v; want an error containing %q (ErrFormat %v)", filepath.Base(tt.path), err, tt.want, tt.format)
		}
	}
}

func BenchmarkParseStories(b *testing.B) {
	data, err := os.ReadFile(testmodels.Path(b, testmodels.Stories260K))
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := Parse(data); err != nil {
			b.Fatal(err)
		}
	}
}

// A 128k-token vocabulary, the size of Llama 3's, parses in milliseconds.
func BenchmarkParseVocab128k(b *testing.B) {
	const n = 128256
	tokens := make([]string, n)
	scores := make([]float32, n)
	types := make([]int32, n)
	for i := range tokens {
		tokens[i] = "▁tok" + strings.Repeat("x", i%7)
		scores[i] = -float32(i)
		types[i] = 1
	}
	var w Writer
	w.SetStrings("tokenizer.ggml.tokens", tokens)
	w.SetFloat32s("tokenizer.ggml.scores", scores)
	w.SetInt32s("tokenizer.ggml.token_type", types)
	var buf bytes.Buffer
	if _, err := w.WriteTo(&buf); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(buf.Len()))
	for b.Loop() {
		if _, err := Parse(buf.Bytes()); err != nil {
			b.Fatal(err)
		}
	}
}

// The Writer accepts exactly the nesting depths the reader does.
func TestNestingDepth(t *testing.T) {
	nest := func(levels int) any {
		var v any = []uint8{1}
		for range levels - 1 {
			v = []any{v}
		}
		return v
	}
	for _, levels := range []int{1, 2, maxDepth, maxDepth + 1} {
		var w Writer
		err := w.Set("k", nest(levels))
		if (err == nil) != (levels <= maxDepth) {
			t.Errorf("%d levels: have %v; want an error only beyond %d", levels, err, maxDepth)
		}
		if err != nil {
			continue
		}
		f := mustParse(t, &w)
		if v, _ := f.Value("k"); !reflect.DeepEqual(v, nest(levels)) {
			t.Errorf("%d levels: have %#v", levels, v)
		}
	}
	if _, err := Parse(deepArray(maxDepth)); err != nil {
		t.Errorf("%d levels: have %v; want no error", maxDepth, err)
	}
}
