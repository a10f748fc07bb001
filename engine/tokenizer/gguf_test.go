package tokenizer

import (
	"sync"
	"testing"

	"github.com/specgate/specgate/engine/model/gguf"
	"github.com/specgate/specgate/internal/testmodels"
)

// specFromGGUF builds a Spec from a GGUF file's tokenizer.ggml.* keys with
// llama.cpp's defaults for absent keys. (The model package has the
// production version; the tokenizer cannot import it.)
func specFromGGUF(f *gguf.File) Spec {
	s := Spec{BOS: -1, EOS: -1, UNK: -1, PAD: -1, EOT: -1}
	s.Model, _ = f.String("tokenizer.ggml.model")
	s.Pre, _ = f.String("tokenizer.ggml.pre")
	s.Tokens, _ = f.Strings("tokenizer.ggml.tokens")
	s.Scores, _ = f.Float32s("tokenizer.ggml.scores")
	s.Types, _ = f.Int32s("tokenizer.ggml.token_type")
	s.Merges, _ = f.Strings("tokenizer.ggml.merges")
	id := func(key string) int32 {
		v, ok := f.Uint("tokenizer.ggml." + key)
		if !ok || v >= uint64(len(s.Tokens)) {
			return -1 // absent, or 0xFFFFFFFF meaning none
		}
		return int32(v)
	}
	s.BOS, s.EOS, s.UNK = id("bos_token_id"), id("eos_token_id"), id("unknown_token_id")
	s.PAD, s.EOT = id("padding_token_id"), id("eot_token_id")
	s.AddBOS = s.Model == "llama"
	s.AddSpacePrefix = s.Model == "llama"
	if v, ok := f.Bool("tokenizer.ggml.add_bos_token"); ok {
		s.AddBOS = v
	}
	if v, ok := f.Bool("tokenizer.ggml.add_space_prefix"); ok {
		s.AddSpacePrefix = v
	}
	return s
}

var (
	storiesOnce sync.Once
	storiesTok  *Tokenizer
	storiesErr  error
)

// stories260K returns the tokenizer of the stories260K test model, built
// once per test binary.
func stories260K(tb testing.TB) *Tokenizer {
	tb.Helper()
	path := testmodels.Path(tb, testmodels.Stories260K)
	storiesOnce.Do(func() {
		f, err := gguf.Open(path)
		if err != nil {
			storiesErr = err
			return
		}
		defer f.Close()
		storiesTok, storiesErr = New(specFromGGUF(f))
	})
	if storiesErr != nil {
		tb.Fatalf("stories260K tokenizer: %v", storiesErr)
	}
	return storiesTok
}
