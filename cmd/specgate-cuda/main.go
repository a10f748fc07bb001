//go:build cuda

// Command specgate-cuda runs specgate's models on an NVIDIA GPU through the
// CUDA backend (kernels/cuda). It is a separate binary, built by `make cuda`
// with the cuda build tag, because the CUDA driver library it links exits
// the process at start where there is no GPU.
//
//	specgate-cuda generate  print a model's greedy (or sampled) continuation
//	specgate-cuda bench     decode tokens/s against the HBM bandwidth floor
//	specgate-cuda mkmodel   write a random-weight llama GGUF (for bench)
//
// The service itself (serve) stays in cmd/specgate: its flags and wiring
// live in that main package, which this one cannot import.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/specgate/specgate/engine/model"
	_ "github.com/specgate/specgate/engine/model/llama"
	"github.com/specgate/specgate/engine/model/synth"
	"github.com/specgate/specgate/engine/sample"
	"github.com/specgate/specgate/kernels"
	_ "github.com/specgate/specgate/kernels/cpu"
	"github.com/specgate/specgate/kernels/cuda"
)

var commands = map[string]func(ctx context.Context, args []string) error{
	"generate": runGenerate,
	"bench":    runBench,
	"mkmodel":  runMkmodel,
}

func main() {
	if len(os.Args) < 2 || commands[os.Args[1]] == nil {
		fmt.Fprintf(os.Stderr, "usage: specgate-cuda generate|bench|mkmodel [flags]\n")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := commands[os.Args[1]](ctx, os.Args[2:])
	stop()
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "specgate-cuda %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}

func newFlags(name string) *flag.FlagSet {
	return flag.NewFlagSet("specgate-cuda "+name, flag.ContinueOnError)
}

func runGenerate(ctx context.Context, args []string) error {
	fs := newFlags("generate")
	path := fs.String("model", "", "GGUF model `file`")
	prompt := fs.String("prompt", "Once upon a time", "prompt text")
	n := fs.Int("n", 64, "tokens to generate")
	backend := fs.String("backend", "cuda", "compute backend (cuda or cpu)")
	ids := fs.Bool("ids", false, "print the token ids instead of the text")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *path == "" {
		return fmt.Errorf("--model is required")
	}
	be, err := kernels.Open(*backend, kernels.Options{})
	if err != nil {
		return err
	}
	defer be.Close()
	m, err := model.Load(*path, be)
	if err != nil {
		return err
	}
	defer m.Close()
	tok := m.Tokenizer()
	in := tok.Encode(*prompt)
	seqs, err := model.NewSequences(m, 1, len(in)+*n+1)
	if err != nil {
		return err
	}
	logits, err := seqs.Step([][]int32{in})
	if err != nil {
		return err
	}
	var gen []int32
	det := tok.NewContinuationDetokenizer()
	var text strings.Builder
	for len(gen) < *n {
		if err := ctx.Err(); err != nil {
			return err
		}
		next := sample.Argmax(logits)
		if tok.IsEOG(next) {
			break
		}
		gen = append(gen, next)
		text.WriteString(det.Add(next))
		if logits, err = seqs.Step([][]int32{{next}}); err != nil {
			return err
		}
	}
	text.WriteString(det.Flush())
	if *ids {
		fmt.Println(gen)
		return nil
	}
	fmt.Println(text.String())
	return nil
}

func runBench(ctx context.Context, args []string) error {
	fs := newFlags("bench")
	path := fs.String("model", "", "GGUF model `file`")
	batches := fs.String("batches", "1,32", "comma-separated decode batch sizes")
	steps := fs.Int("steps", 32, "decode steps per batch size")
	ctxLen := fs.Int("ctx", 128, "tokens in each sequence when decoding starts")
	hbm := fs.Float64("hbm", 4800, "device memory bandwidth in GB/s for the floor (H200: 4800)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *path == "" {
		return fmt.Errorf("--model is required")
	}
	be, err := cuda.Open(kernels.Options{})
	if err != nil {
		return err
	}
	defer be.Close()
	m, err := model.Load(*path, be)
	if err != nil {
		return err
	}
	defer m.Close()
	c := m.Config()
	bw := *hbm * 1e9
	fmt.Printf("device %s (sm_%d); model %s: %s, %.1fM parameters, %d layers, dim %d; weights %.1f MB\n",
		be.DeviceName(), be.ComputeCapability(), *path, c.WeightType, float64(c.Params)/1e6, c.Layers, c.Dim, float64(c.WeightBytes)/1e6)
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "phase\tbatch\ttokens/s\tms/step\tMB/step\tfloor ms/step\tof floor\t\n")
	for _, f := range strings.Split(*batches, ",") {
		b, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || b <= 0 {
			return fmt.Errorf("--batches: %q is not a positive number", f)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		tps, step, err := decodeRate(m, b, *ctxLen, *steps)
		if err != nil {
			return err
		}
		kv := int64(b) * int64(c.Layers) * 2 * int64(*ctxLen+*steps/2) * int64(c.KVWidth()) * 4
		bytes := float64(c.WeightBytes + kv)
		floor := bytes / bw
		fmt.Fprintf(tw, "decode\t%d\t%.1f\t%.3f\t%.1f\t%.3f\t%.0f%%\t\n", b, tps, float64(step)/1e6, bytes/1e6,
			1e3*floor, 100*floor/step.Seconds())
	}
	return tw.Flush()
}

// decodeRate prefills b sequences to ctx tokens, then times steps greedy
// decode steps of one token per sequence in one batch.
func decodeRate(m model.Model, b, ctx, steps int) (float64, time.Duration, error) {
	c := m.Config()
	seqs, err := model.NewSequences(m, b, ctx+steps+2)
	if err != nil {
		return 0, 0, err
	}
	in := make([][]int32, b)
	for i := range in {
		in[i] = make([]int32, ctx)
		for j := range in[i] {
			in[i][j] = int32(3 + (i*131+j*7919)%(c.Vocab-3))
		}
	}
	logits, err := seqs.Step(in)
	if err != nil {
		return 0, 0, err
	}
	next := func() {
		for i := range in {
			in[i] = append(in[i][:0], sample.Argmax(logits[i*c.Vocab:(i+1)*c.Vocab]))
		}
	}
	next()
	if logits, err = seqs.Step(in); err != nil { // warm up
		return 0, 0, err
	}
	t0 := time.Now()
	for range steps {
		next()
		if logits, err = seqs.Step(in); err != nil {
			return 0, 0, err
		}
	}
	d := time.Since(t0)
	return float64(b*steps) / d.Seconds(), d / time.Duration(steps), nil
}

func runMkmodel(_ context.Context, args []string) error {
	fs := newFlags("mkmodel")
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
	typ := fs.String("type", "BF16", "weight type: F32, F16, BF16, Q8_0 or Q4_0")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *out == "" {
		return fmt.Errorf("--out is required")
	}
	for _, t := range []kernels.DType{kernels.F32, kernels.F16, kernels.BF16, kernels.Q8_0, kernels.Q4_0} {
		if strings.EqualFold(*typ, t.String()) {
			o.Type = t
		}
	}
	if o.Type.String() != strings.ToUpper(*typ) {
		return fmt.Errorf("unknown weight type %q", *typ)
	}
	return synth.WriteFile(*out, o)
}
