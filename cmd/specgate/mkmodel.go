package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/specgate/specgate/engine/model/gguf"
	"github.com/specgate/specgate/engine/model/inflate"
	"github.com/specgate/specgate/engine/model/synth"
	"github.com/specgate/specgate/kernels"
)

// defaultInflateNoise is --noise for --from: the perturbation at which
// stories260K, drafting for its default Q8_0 inflation (heads of 64), has
// about 77% of its greedy tokens accepted position by position (mkmodel
// measures and prints that rate; 76.8% at 0.12, 74.6% at 0.13, 79.9% at
// 0.115, 81.6% at 0.11) and about 60% of the tokens it proposes in
// speculation's chains accepted (a chain stops at its first miss; bench
// --spec prints that one). The heads of 8 the stand-in had before took 0.13 for 79%; a
// noisier target drafts below the 60-80% a well-aligned small sibling
// gives.
const defaultInflateNoise = 0.12

// agreementTokens is how many tokens per story prompt mkmodel compares to
// report the draft's acceptance rate.
const agreementTokens = 64

func runMkmodel(ctx context.Context, args []string) error {
	fs := newFlags("mkmodel", "--out FILE [--from SRC.gguf [--noise X]] [shape flags]")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `usage: specgate mkmodel --out FILE [shape flags]
       specgate mkmodel --from SRC.gguf --out FILE [--type Q8_0] [--noise X] [--layers N --dim N --ffn N --head-dim N]

Without --from: a llama model of any shape with seeded random weights; its
text is noise.

With --from: an inflated copy of SRC (a llama model), about 100M parameters
by default, for measuring speculative decoding where a step is bound by
reading weights. It is NOT a trained model: it computes SRC's function
(padded widths, and heads, units and layers whose outputs are zero) up to a
controlled perturbation (--noise; 0 keeps SRC's greedy output at F32/F16,
and up to requantization at a quantized type). Its heads
are a real model's width (--head-dim, 64 by default; from stories260K: 16 heads
of 64 sharing 8 KV heads), SRC's heads padded to it with their RoPE
frequencies kept. SRC, or a quantization of it, is its natural draft;
mkmodel prints the share of the draft's greedy tokens it accepts.

`)
		fs.PrintDefaults()
	}
	out := fs.String("out", "", "output GGUF `file`")
	from := fs.String("from", "", "inflate this llama GGUF `file` instead of drawing random weights")
	noise := fs.Float64("noise", defaultInflateNoise, "with --from: size of the perturbation put into the added output paths (0: SRC's function)")
	draft := fs.String("draft", "", "with --from: the draft whose acceptance rate to print (default: SRC itself)")
	headDim := fs.Int("head-dim", 0, fmt.Sprintf("with --from: head width, a multiple of SRC's (0 = %d)", inflate.DefaultHeadDim))
	var o synth.Options
	fs.IntVar(&o.Layers, "layers", 0, fmt.Sprintf("transformer blocks (0 = default; %d with --from)", inflate.DefaultLayers))
	fs.IntVar(&o.Dim, "dim", 0, fmt.Sprintf("embedding width (0 = default; %d with --from)", inflate.DefaultDim))
	fs.IntVar(&o.Heads, "heads", 0, "attention heads (0 = default)")
	fs.IntVar(&o.KVHeads, "kv-heads", 0, "key/value heads (0 = heads)")
	fs.IntVar(&o.FFN, "ffn", 0, fmt.Sprintf("feed-forward width (0 = default; %d with --from)", inflate.DefaultFFN))
	fs.IntVar(&o.Vocab, "vocab", 0, "vocabulary size (0 = default)")
	fs.IntVar(&o.Context, "context", 0, "context length (0 = default)")
	fs.Int64Var(&o.Seed, "seed", 1, "weight seed")
	fs.BoolVar(&o.TiedOutput, "tied", false, "share the output head with the token embedding")
	fs.StringVar(&o.Tokenizer, "tokenizer", "llama", "tokenizer kind: llama (SentencePiece) or gpt2 (byte-level BPE)")
	typ := fs.String("type", "F32", "weight type: F32, F16, BF16, Q8_0, Q4_0 (and with --from Q4_K, Q5_K, Q6_K)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *out == "" {
		return fmt.Errorf("--out is required")
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	dt, err := parseDType(*typ)
	if err != nil {
		return err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if *from == "" {
		for _, n := range []string{"noise", "draft", "head-dim"} {
			if set[n] {
				return fmt.Errorf("--%s needs --from", n)
			}
		}
		o.Type = dt
		if err := synth.WriteFile(*out, o); err != nil {
			return err
		}
		return reportSize(*out)
	}
	for _, n := range []string{"heads", "kv-heads", "vocab", "context", "tied", "tokenizer"} {
		if set[n] {
			return fmt.Errorf("--%s does not apply to --from: the source fixes it", n)
		}
	}
	return inflateModel(ctx, *from, *out, *draft, inflate.Options{Layers: o.Layers, Dim: o.Dim, FFN: o.FFN, HeadDim: *headDim, Type: dt, Noise: *noise, Seed: o.Seed})
}

// inflateModel writes src inflated to out and prints how often draft's
// greedy tokens agree with it.
func inflateModel(ctx context.Context, src, out, draft string, o inflate.Options) error {
	f, err := gguf.Open(src)
	if err != nil {
		return fmt.Errorf("--from: %w", err)
	}
	defer f.Close()
	params, err := inflate.Params(f, o)
	if err != nil {
		return err
	}
	if err := inflate.WriteFile(out, f, o); err != nil {
		return err
	}
	if err := reportSize(out); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "%.1fM parameters, %v, noise %g: not a trained model, %s's function up to the noise\n", float64(params)/1e6, o.Type, o.Noise, src)
	if err := ctx.Err(); err != nil {
		return err
	}
	if draft == "" {
		draft = src
	}
	a, err := measureAgreement(out, draft)
	if err != nil {
		return fmt.Errorf("measuring the draft's acceptance: %w", err)
	}
	fmt.Printf("draft %s: %.1f%% of greedy draft tokens accepted (%d of %d positions, %d story prompts × %d tokens, teacher-forced)\n",
		draft, 100*a.Rate(), a.Agreed, a.Positions, len(storyPrompts), agreementTokens)
	return nil
}

func measureAgreement(target, draft string) (inflate.Agreement, error) {
	tm, closeT, err := loadModel("cpu", 0, target, 0)
	if err != nil {
		return inflate.Agreement{}, err
	}
	defer closeT()
	dm, closeD, err := loadModel("cpu", 0, draft, 0)
	if err != nil {
		return inflate.Agreement{}, err
	}
	defer closeD()
	prompts := make([][]int32, len(storyPrompts))
	for i, p := range storyPrompts {
		prompts[i] = tm.Tokenizer().Encode(p)
	}
	return inflate.MeasureAgreement(tm, dm, prompts, agreementTokens)
}

func reportSize(path string) error {
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "wrote %s (%.1f MB)\n", path, float64(st.Size())/1e6)
	return nil
}

func parseDType(s string) (kernels.DType, error) {
	for _, t := range []kernels.DType{kernels.F32, kernels.F16, kernels.BF16, kernels.Q8_0, kernels.Q4_0, kernels.Q4_K, kernels.Q5_K, kernels.Q6_K} {
		if strings.EqualFold(s, t.String()) || strings.EqualFold(strings.ReplaceAll(s, "_", ""), strings.ReplaceAll(t.String(), "_", "")) {
			return t, nil
		}
	}
	return 0, fmt.Errorf("unknown weight type %q (want F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K or Q6_K)", s)
}
