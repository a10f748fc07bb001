package llama_test

import (
	"encoding/binary"
	"math"
	"path/filepath"
	"testing"

	"github.com/specgate/specgate/engine/model"
	"github.com/specgate/specgate/engine/model/gguf"
	"github.com/specgate/specgate/internal/testmodels"
	"github.com/specgate/specgate/kernels"
)

// TestGemma2F32 checks Gemma 2 in float32, where llama.cpp's logits can be
// matched closely: no Gemma 2 F32 file ships with the reference data, so
// the test writes one from synth-gemma2-q8_0 with every tensor
// dequantized, and compares with llama.cpp's outputs on that same file
// (testdata/gemma2-dequantized-f32.jsonl: llama.cpp at the reference
// data's commit, F32 KV cache, one thread, the prompt in one batch, then
// 32 greedy steps, in the reference data's format). Its 26 layers of
// half-precision GELU lookups amplify float32 rounding more than the
// other architectures' 2 layers do: moving the embedding scale by 3e-7
// moves our own logits by 0.006, so the bound is 2e-2 rather than 1e-2
// (measured: 0.008 and 0.011).
func TestGemma2F32(t *testing.T) {
	src := testmodels.Path(t, filepath.Join("synth", "synth-gemma2-q8_0.gguf"))
	path := filepath.Join(t.TempDir(), "gemma2-f32.gguf")
	dequantizeFile(t, src, path)
	refs := readJSONL[synthRef](t, filepath.Join("testdata", "gemma2-dequantized-f32.jsonl"))
	be, err := kernels.Open("cpu", kernels.Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	m := loadPath(t, path, be)
	if err := m.SetKVType(kernels.F32); err != nil {
		t.Fatal(err)
	}
	for _, ref := range refs {
		checkSynthRef(t, m, ref, 2e-2, nearTie, false)
	}
}

// dequantizeFile writes the GGUF file at src to dst with every tensor as
// F32 and the metadata unchanged but for the file type.
func dequantizeFile(t *testing.T, src, dst string) {
	t.Helper()
	f, err := gguf.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var w gguf.Writer
	for _, k := range f.Keys() {
		v, _ := f.Value(k)
		switch k {
		case gguf.KeyAlignment:
			continue
		case "general.file_type":
			v = uint32(0) // all F32
		}
		if err := w.Set(k, v); err != nil {
			t.Fatalf("%s: %v", k, err)
		}
	}
	for _, ti := range f.Tensors {
		vals := make([]float32, ti.Elems())
		if err := kernels.Dequantize(ti.Type, f.Data(ti), vals); err != nil {
			t.Fatalf("%s: %v", ti.Name, err)
		}
		b := make([]byte, 4*len(vals))
		for i, v := range vals {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
		}
		if err := w.AddTensor(ti.Name, kernels.F32, ti.Dims, b); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.WriteFile(dst); err != nil {
		t.Fatal(err)
	}
}

func loadPath(t *testing.T, path string, be kernels.Backend) model.Loaded {
	t.Helper()
	m, err := model.Load(path, be)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}
