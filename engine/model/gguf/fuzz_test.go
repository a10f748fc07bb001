package gguf

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/specgate/specgate/internal/testmodels"
	"github.com/specgate/specgate/kernels"
)

// FuzzParse checks that no input makes Parse panic or allocate without
// bound, that its errors wrap ErrFormat, and that whatever it accepts is
// consistent: tensor data lies in the file and the Writer can write it back
// into a file that parses to the same values.
func FuzzParse(f *testing.F) {
	small := smallFile(f)
	f.Add(small)
	for _, n := range []int{4, 8, 24, 40, 100, len(small) / 2, len(small) - 40} {
		f.Add(small[:n])
	}
	var w Writer
	w.SetString("general.architecture", "llama")
	w.SetStrings("tokenizer.ggml.tokens", []string{"<unk>", "<s>", "▁a"})
	w.AddTensor("t", kernels.F16, []uint64{2, 2}, make([]byte, 8))
	var buf bytes.Buffer
	w.WriteTo(&buf)
	f.Add(buf.Bytes())
	f.Add(deepArray(4))
	// The start of a real model: its header, vocabulary and tensor infos. It
	// is optional here (a seed, not a test of the model), so a missing file
	// is no reason to skip.
	if data, err := os.ReadFile(filepath.Join(testmodels.Dir(), testmodels.Stories260K)); err == nil {
		f.Add(data[:min(len(data), 16<<10)])
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := Parse(data)
		if err != nil {
			if !errors.Is(err, ErrFormat) {
				t.Fatalf("error does not wrap ErrFormat: %v", err)
			}
			return
		}
		for _, ti := range file.Tensors {
			if d := file.Data(ti); uint64(len(d)) != ti.Size {
				t.Fatalf("tensor %q: have %d bytes; want %d", ti.Name, len(d), ti.Size)
			}
			_ = ti.Rows() * ti.Cols()
		}
		for _, k := range file.Keys() {
			file.Uint(k)
			file.Int(k)
			file.Float(k)
			file.Int32s(k)
			file.Float32s(k)
		}
		// Rewriting pads to the alignment, so skip huge alignments, and
		// the Writer refuses empty names that the format allows.
		if file.Alignment > 4096 {
			return
		}
		var w Writer
		for _, k := range file.Keys() {
			v, _ := file.Value(k)
			if err := w.Set(k, v); err != nil {
				return
			}
		}
		for _, ti := range file.Tensors {
			if err := w.AddTensor(ti.Name, ti.Type, ti.Dims, file.Data(ti)); err != nil {
				return
			}
		}
		var buf bytes.Buffer
		if _, err := w.WriteTo(&buf); err != nil {
			t.Fatalf("rewrite: %v", err)
		}
		again, err := Parse(buf.Bytes())
		if err != nil {
			t.Fatalf("rewritten file does not parse: %v", err)
		}
		if len(again.Keys()) != len(file.Keys()) || len(again.Tensors) != len(file.Tensors) {
			t.Fatalf("rewrite: have %d keys, %d tensors; want %d, %d", len(again.Keys()), len(again.Tensors), len(file.Keys()), len(file.Tensors))
		}
		for i, ti := range file.Tensors {
			if !bytes.Equal(again.Data(again.Tensors[i]), file.Data(ti)) {
				t.Fatalf("rewrite: tensor %q data differs", ti.Name)
			}
		}
	})
}
