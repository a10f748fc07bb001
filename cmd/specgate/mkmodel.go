package main

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/specgate/specgate/engine/model/synth"
	"github.com/specgate/specgate/kernels"
)

func runMkmodel(ctx context.Context, args []string) error {
	fs := newFlags("mkmodel", "--out FILE [shape flags]")
	out := fs.String("out", "", "output GGUF `file`")
	var o synth.Options
	fs.IntVar(&o.Layers, "layers", 0, "transformer blocks (0 = default)")
	fs.IntVar(&o.Dim, "dim", 0, "embedding width (0 = default)")
	fs.IntVar(&o.Heads, "heads", 0, "attention heads (0 = default)")
	fs.IntVar(&o.KVHeads, "kv-heads", 0, "key/value heads (0 = heads)")
	fs.IntVar(&o.FFN, "ffn", 0, "feed-forward width (0 = default)")
	fs.IntVar(&o.Vocab, "vocab", 0, "vocabulary size (0 = default)")
	fs.IntVar(&o.Context, "context", 0, "context length (0 = default)")
	fs.Int64Var(&o.Seed, "seed", 1, "weight seed")
	fs.BoolVar(&o.TiedOutput, "tied", false, "share the output head with the token embedding")
	fs.StringVar(&o.Tokenizer, "tokenizer", "llama", "tokenizer kind: llama (SentencePiece) or gpt2 (byte-level BPE)")
	typ := fs.String("type", "F32", "weight type: F32, F16, BF16, Q8_0 or Q4_0")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *out == "" {
		return fmt.Errorf("--out is required")
	}
	dt, err := parseDType(*typ)
	if err != nil {
		return err
	}
	o.Type = dt
	if err := synth.WriteFile(*out, o); err != nil {
		return err
	}
	st, err := os.Stat(*out)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "wrote %s (%.1f MB)\n", *out, float64(st.Size())/1e6)
	return nil
}

func parseDType(s string) (kernels.DType, error) {
	for _, t := range []kernels.DType{kernels.F32, kernels.F16, kernels.BF16, kernels.Q8_0, kernels.Q4_0} {
		if strings.EqualFold(s, t.String()) || strings.EqualFold(strings.ReplaceAll(s, "_", ""), strings.ReplaceAll(t.String(), "_", "")) {
			return t, nil
		}
	}
	return 0, fmt.Errorf("unknown weight type %q (want F32, F16, BF16, Q8_0 or Q4_0)", s)
}
