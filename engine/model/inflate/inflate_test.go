package inflate_test

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"maps"
	"math"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/specgate/specgate/engine/model"
	"github.com/specgate/specgate/engine/model/gguf"
	"github.com/specgate/specgate/engine/model/inflate"
	_ "github.com/specgate/specgate/engine/model/llama"
	"github.com/specgate/specgate/engine/model/synth"
	"github.com/specgate/specgate/internal/testmodels"
	"github.com/specgate/specgate/kernels"
	_ "github.com/specgate/specgate/kernels/cpu"
	"github.com/specgate/specgate/kernels/sample"
)

// small is a shape that keeps the tests fast while adding every kind of
// thing an inflation adds: width, head width, heads and KV heads, units
// and layers. At the default head width of 64 the source's 8 heads need a
// width of 512; 640 adds two heads and a KV head.
var small = inflate.Options{Layers: 6, Dim: 640, FFN: 256}

// oldLayout keeps the source's head width of 8, as the stand-in did
// before its heads were widened.
var oldLayout = inflate.Options{Layers: 7, Dim: 128, FFN: 256, HeadDim: 8}

var prompts = []string{
	"Once upon a time, there was a little girl named Lily.",
	"Tom and his dog went to the park.",
	"The sun was shining.",
}

func openSource(t *testing.T, name string) *gguf.File {
	t.Helper()
	f, err := gguf.Open(testmodels.Path(t, name))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// inflated writes src inflated with o and loads it.
func inflated(t *testing.T, src *gguf.File, o inflate.Options) model.Loaded {
	t.Helper()
	path := filepath.Join(t.TempDir(), "inflated.gguf")
	if err := inflate.WriteFile(path, src, o); err != nil {
		t.Fatal(err)
	}
	return load(t, path)
}

func load(t *testing.T, path string) model.Loaded {
	t.Helper()
	be, err := kernels.Open("cpu", kernels.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	m, err := model.Load(path, be)
	if err != nil {
		be.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close(); be.Close() })
	return m
}

// greedy continues prompt for n tokens, one sequence alone.
func greedy(t *testing.T, m model.Loaded, prompt []int32, n int) []int32 {
	t.Helper()
	s, err := model.NewSequences(m, 1, len(prompt)+n)
	if err != nil {
		t.Fatal(err)
	}
	var out []int32
	in := prompt
	for range n {
		logits, err := s.Step([][]int32{in})
		if err != nil {
			t.Fatal(err)
		}
		tok := sample.Argmax(logits)
		out = append(out, tok)
		in = []int32{tok}
	}
	return out
}

// maxLogitDiff decodes ids in one batch on both models and returns the
// largest difference between their logits at the last position.
func maxLogitDiff(t *testing.T, m, ref model.Loaded, ids []int32) float64 {
	t.Helper()
	last := func(m model.Loaded) []float32 {
		s, err := model.NewSequences(m, 1, len(ids))
		if err != nil {
			t.Fatal(err)
		}
		l, err := s.Step([][]int32{ids})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	a, b := last(m), last(ref)
	d := 0.0
	for i := range a {
		d = max(d, math.Abs(float64(a[i]-b[i])))
	}
	return d
}

func encode(m model.Loaded) [][]int32 {
	var ps [][]int32
	for _, p := range prompts {
		ps = append(ps, m.Tokenizer().Encode(p))
	}
	return ps
}

// At noise zero the inflated model is the source's function: its greedy
// continuations are the source's, token for token, and its logits the
// source's up to rounding, whatever the head width (the widened heads'
// RoPE pairs turn at the source's frequencies).
func TestNoiseZeroKeepsGreedyOutput(t *testing.T) {
	src := openSource(t, testmodels.Stories260K)
	ref := load(t, testmodels.Path(t, testmodels.Stories260K))
	for _, o := range []inflate.Options{small, oldLayout, {Layers: 5, Dim: 16 * 5 * 2, FFN: 172 + 20, HeadDim: 16}} {
		m := inflated(t, src, o)
		c := m.Config()
		hd := o.HeadDim
		if hd == 0 {
			hd = inflate.DefaultHeadDim
		}
		if c.Layers != o.Layers || c.Dim != o.Dim || c.FFN != o.FFN || c.HeadDim != hd || c.Heads != o.Dim/hd || c.KVHeads != o.Dim/hd/2 {
			t.Fatalf("have config %+v; want %d layers, width %d, FFN %d, heads of %d, 2 per KV head", c, o.Layers, o.Dim, o.FFN, hd)
		}
		for i, p := range encode(ref) {
			have, want := greedy(t, m, p, 40), greedy(t, ref, p, 40)
			if !slices.Equal(have, want) {
				t.Errorf("%+v prompt %d: have %v; want %v", o, i, have, want)
			}
			if d := maxLogitDiff(t, m, ref, append(p, want...)); d > 1e-3 {
				t.Errorf("%+v prompt %d: logits differ from the source's by up to %g; want rounding (at most 1e-3)", o, i, d)
			}
		}
		a, err := inflate.MeasureAgreement(m, ref, encode(ref), 32)
		if err != nil {
			t.Fatal(err)
		}
		if a.Agreed != a.Positions || a.Positions != 32*len(prompts) {
			t.Errorf("%+v: agreement %d of %d; want all of %d", o, a.Agreed, a.Positions, 32*len(prompts))
		}
	}
}

// At Q8_0 the inflated model's own rounding differs from the source file's
// in two places: the source keeps ffn_down in F16 (172 columns are no whole
// number of 32-element blocks) while the padded target stores it as Q8_0
// like every other matrix, and a widened head puts each source head's
// columns of attn_output in blocks of their own (a source block held
// several heads), so those are quantized anew. Its greedy tokens still
// follow the Q8_0 source's at almost every position.
func TestNoiseZeroQ8_0FollowsTheQ8_0Source(t *testing.T) {
	src := openSource(t, testmodels.Stories260KQ8_0)
	ref := load(t, testmodels.Path(t, testmodels.Stories260KQ8_0))
	o := small
	o.Type = kernels.Q8_0
	m := inflated(t, src, o)
	if c := m.Config(); c.WeightType != kernels.Q8_0 {
		t.Fatalf("have weight type %v; want Q8_0", c.WeightType)
	}
	a, err := inflate.MeasureAgreement(m, ref, encode(ref), 48)
	if err != nil {
		t.Fatal(err)
	}
	if a.Rate() < 0.97 {
		t.Errorf("agreement %d of %d; want at least 97%%", a.Agreed, a.Positions)
	}
}

// Noise moves the output by an amount that grows with it, and the same
// options give the same bytes.
func TestNoiseMovesTheOutput(t *testing.T) {
	src := openSource(t, testmodels.Stories260K)
	ref := load(t, testmodels.Path(t, testmodels.Stories260K))
	rate := func(noise float64) float64 {
		o := small
		o.Noise = noise
		a, err := inflate.MeasureAgreement(inflated(t, src, o), ref, encode(ref), 32)
		if err != nil {
			t.Fatal(err)
		}
		return a.Rate()
	}
	low, high := rate(0.05), rate(2)
	if !(low > high) || high > 0.5 || low < 0.5 {
		t.Errorf("agreement at noise 0.05: %.2f, at 2: %.2f; want the first above 0.5 and above the second, the second at most 0.5", low, high)
	}
	sum := func(o inflate.Options) [32]byte { return sha256.Sum256(write(t, src, o)) }
	o := small
	o.Noise = 0.3
	a, b := sum(o), sum(o)
	o.Seed = 2
	if c := sum(o); a != b || a == c {
		t.Errorf("same options gave different bytes (%v) or another seed the same (%v)", a != b, a == c)
	}
}

// TestBytesIgnoreGOMAXPROCS: the drawn values (noise, added units and
// layers) and the quantization are the same bytes however many goroutines
// share the draw.
func TestBytesIgnoreGOMAXPROCS(t *testing.T) {
	src := openSource(t, testmodels.Stories260K)
	o := small
	o.Noise, o.Type = 0.3, kernels.Q8_0
	sum := func(procs int) [32]byte {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
		return sha256.Sum256(write(t, src, o))
	}
	one := sum(1)
	for _, procs := range []int{2, 5} {
		if sum(procs) != one {
			t.Errorf("GOMAXPROCS %d wrote other bytes than GOMAXPROCS 1", procs)
		}
	}
}

// write returns the inflated model's file.
func write(t *testing.T, src *gguf.File, o inflate.Options) []byte {
	t.Helper()
	gw, err := inflate.NewWriter(src, o)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if _, err := gw.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestMetadataSaysItIsNotTrained(t *testing.T) {
	src := openSource(t, testmodels.Stories260K)
	f, err := gguf.Parse(write(t, src, small))
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := f.String("general.description"); !strings.Contains(d, "NOT A TRAINED MODEL") {
		t.Errorf("general.description %q does not say it is not a trained model", d)
	}
	// The tokenizer is the source's, so the source drafts for it.
	for _, k := range []string{"tokenizer.ggml.tokens", "tokenizer.ggml.scores", "tokenizer.ggml.token_type"} {
		have, _ := f.Value(k)
		want, _ := src.Value(k)
		if !equalValues(have, want) {
			t.Errorf("%s differs from the source's", k)
		}
	}
	n, err := inflate.Params(src, small)
	if err != nil {
		t.Fatal(err)
	}
	var have int64
	for _, ti := range f.Tensors {
		have += int64(ti.Elems())
	}
	if have != n {
		t.Errorf("Params says %d; the file holds %d", n, have)
	}
	if n, err := inflate.Params(src, inflate.Options{}); err != nil || n < 90e6 || n > 110e6 {
		t.Errorf("default shape: %d parameters (%v); want about 100M", n, err)
	}
	// llama.cpp refuses a llama file whose RoPE does not turn the whole
	// head; the head width and the KV width are the ones asked for.
	for k, want := range map[string]uint64{
		"llama.rope.dimension_count":    64,
		"llama.attention.key_length":    64,
		"llama.attention.value_length":  64,
		"llama.attention.head_count":    10,
		"llama.attention.head_count_kv": 5,
	} {
		if have, _ := f.Uint(k); have != want {
			t.Errorf("%s = %d; want %d", k, have, want)
		}
	}
}

func equalValues(a, b any) bool {
	switch a := a.(type) {
	case []string:
		return slices.Equal(a, b.([]string))
	case []float32:
		return slices.Equal(a, b.([]float32))
	case []int32:
		return slices.Equal(a, b.([]int32))
	}
	return false
}

func TestBadOptions(t *testing.T) {
	src := openSource(t, testmodels.Stories260K)
	tests := []struct {
		name string
		o    inflate.Options
		want string
	}{
		{"fewer layers", inflate.Options{Layers: 4}, "smaller than the source"},
		{"narrower", inflate.Options{Dim: 32}, "smaller than the source"},
		{"width not whole head groups", inflate.Options{Dim: 136, HeadDim: 8}, "not a multiple of the head width"},
		{"fewer heads than the source", inflate.Options{Dim: 384}, "fewer than the source's 8"},
		{"head width not the source's multiple", inflate.Options{HeadDim: 12}, "not a multiple of the source's 8"},
		{"negative head width", inflate.Options{HeadDim: -8}, "head width -8"},
		{"negative noise", inflate.Options{Noise: -1}, "noise"},
		{"quantized widths", inflate.Options{Dim: 144, FFN: 256, HeadDim: 8, Type: kernels.Q8_0}, "multiples of 32"},
		{"type nothing writes", inflate.Options{Type: kernels.DType(200)}, "cannot be written"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := inflate.NewWriter(src, tt.o)
			if !errors.Is(err, inflate.ErrOptions) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("have %v; want an ErrOptions containing %q", err, tt.want)
			}
		})
	}
}

// Sources whose RoPE a widened head cannot keep are refused before any
// tensor is read.
func TestBadSources(t *testing.T) {
	tests := []struct {
		name string
		keys map[string]any
		want string
	}{
		{"partial rotation", map[string]any{"llama.rope.dimension_count": uint32(4)}, "rotates 4 of its head's 8"},
		{"YaRN", map[string]any{"llama.rope.scaling.type": "yarn"}, `scaling "yarn"`},
		{"odd heads", map[string]any{"llama.embedding_length": uint32(56), "llama.attention.head_count": uint32(8), "llama.attention.head_count_kv": uint32(8)}, "odd"},
		{"not llama", map[string]any{"general.architecture": "gemma2"}, "not llama"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := &gguf.Writer{}
			base := map[string]any{
				"general.architecture":          "llama",
				"llama.block_count":             uint32(5),
				"llama.embedding_length":        uint32(64),
				"llama.feed_forward_length":     uint32(172),
				"llama.attention.head_count":    uint32(8),
				"llama.attention.head_count_kv": uint32(4),
			}
			maps.Copy(base, tt.keys)
			for k, v := range base {
				if err := w.Set(k, v); err != nil {
					t.Fatal(err)
				}
			}
			path := filepath.Join(t.TempDir(), "src.gguf")
			if err := w.WriteFile(path); err != nil {
				t.Fatal(err)
			}
			src, err := gguf.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer src.Close()
			_, err = inflate.NewWriter(src, inflate.Options{})
			if !errors.Is(err, inflate.ErrOptions) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("have %v; want an ErrOptions containing %q", err, tt.want)
			}
		})
	}
}

func TestMeasureAgreementRefusesMismatch(t *testing.T) {
	ref := load(t, testmodels.Path(t, testmodels.Stories260K))
	other := load(t, synth.Setup(t, synth.Options{Vocab: 300}))
	if _, err := inflate.MeasureAgreement(ref, other, encode(ref), 4); err == nil || !strings.Contains(err.Error(), "vocabulary") {
		t.Errorf("have %v; want a vocabulary mismatch", err)
	}
	if _, err := inflate.MeasureAgreement(ref, ref, [][]int32{{}}, 4); err == nil {
		t.Error("an empty prompt was accepted")
	}
	if _, err := inflate.MeasureAgreement(ref, ref, encode(ref), 1<<20); err == nil || !strings.Contains(err.Error(), "context") {
		t.Errorf("have %v; want a context error", err)
	}
}
