package model

import (
	"fmt"

	"github.com/specgate/specgate/engine/model/gguf"
	"github.com/specgate/specgate/engine/tokenizer"
)

// NewTokenizer builds the tokenizer described by a GGUF file's
// tokenizer.ggml.* metadata.
func NewTokenizer(f *gguf.File) (*tokenizer.Tokenizer, error) {
	s := tokenizer.Spec{BOS: -1, EOS: -1, UNK: -1, PAD: -1, EOT: -1, SEP: -1}
	var ok bool
	if s.Model, ok = f.String("tokenizer.ggml.model"); !ok {
		return nil, fmt.Errorf("model: tokenizer.ggml.model missing")
	}
	s.Pre, _ = f.String("tokenizer.ggml.pre")
	if s.Tokens, ok = f.Strings("tokenizer.ggml.tokens"); !ok {
		return nil, fmt.Errorf("model: tokenizer.ggml.tokens missing")
	}
	s.Scores, _ = f.Float32s("tokenizer.ggml.scores")
	s.Types, _ = f.Int32s("tokenizer.ggml.token_type")
	s.Merges, _ = f.Strings("tokenizer.ggml.merges")
	id := func(key string, dst *int32) {
		if v, ok := f.Uint("tokenizer.ggml." + key); ok && v < uint64(len(s.Tokens)) {
			*dst = int32(v)
		}
	}
	id("bos_token_id", &s.BOS)
	id("eos_token_id", &s.EOS)
	id("unknown_token_id", &s.UNK)
	id("padding_token_id", &s.PAD)
	id("eot_token_id", &s.EOT)
	if s.Model == "bert" {
		// llama.cpp's defaults for BERT vocabs, then the file's keys
		// (the separator key is spelled as llama.cpp spells it).
		s.BOS, s.UNK, s.SEP, s.PAD = 101, 100, 102, 0
		if len(s.Tokens) <= 102 {
			s.BOS, s.UNK, s.SEP, s.PAD = -1, -1, -1, -1
		}
		id("bos_token_id", &s.BOS)
		id("unknown_token_id", &s.UNK)
		id("padding_token_id", &s.PAD)
		id("seperator_token_id", &s.SEP)
	}
	// llama.cpp's defaults when the keys are absent: SentencePiece vocabs
	// add BOS and a dummy-prefix space; byte-level BPE vocabs add neither
	// unless told.
	s.AddBOS = s.Model == "llama" || s.Model == "bert" || s.Pre == "tekken" || s.Pre == "chameleon"
	s.AddSpacePrefix = s.Model == "llama"
	if v, ok := f.Bool("tokenizer.ggml.add_bos_token"); ok {
		s.AddBOS = v
	}
	if v, ok := f.Bool("tokenizer.ggml.add_eos_token"); ok {
		s.AddEOS = v
	}
	if v, ok := f.Bool("tokenizer.ggml.add_space_prefix"); ok {
		s.AddSpacePrefix = v
	}
	t, err := tokenizer.New(s)
	if err != nil {
		return nil, fmt.Errorf("model: tokenizer: %w", err)
	}
	return t, nil
}
