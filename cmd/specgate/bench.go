package main

import (
	"context"
	"fmt"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/specgate/specgate/engine/model"
	"github.com/specgate/specgate/kernels/cpu"
	"github.com/specgate/specgate/kernels/sample"
)

func runBench(ctx context.Context, args []string) error {
	fs := newFlags("bench", "--model FILE [--batches 1,8] [--prompt N] [--steps N] [--kv-type f16|f32] [--spec draft|ngram [--draft-model FILE]]")
	path := fs.String("model", "", "GGUF model `file`")
	batches := fs.String("batches", "1,8", "comma-separated decode batch sizes")
	promptLen := fs.Int("prompt", 128, "prompt tokens for the prefill measurement")
	steps := fs.Int("steps", 32, "decode steps per batch size")
	ctxLen := fs.Int("ctx", 64, "tokens already in each sequence when decoding starts (0: one, the least a decode needs)")
	backend := fs.String("backend", "cpu", "compute backend")
	threads := fs.Int("threads", 0, "worker threads (0 = one per CPU)")
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile of the decode runs (with --spec: of the whole comparison) to `file`")
	bandwidth := fs.Float64("bandwidth", 0, "memory bandwidth of the backend's device in GB/s for the floor (0: measure host memory)")
	kvType := kvTypeFlag(fs)
	var sb specBench
	fs.StringVar(&sb.kind, "spec", "", "measure speculative decoding against plain decoding, interleaved, through the engine: draft (a draft model, --draft-model) or ngram (lookup in the conversation); prints one line per batch size")
	draftPath := fs.String("draft-model", "", "with --spec draft: the draft model `file` (same vocabulary as --model)")
	fs.IntVar(&sb.tokens, "tokens", 128, "with --spec: tokens each stream generates")
	fs.IntVar(&sb.rounds, "rounds", 2, "with --spec: timed rounds per batch size, each a plain/speculative pair of every batch of prompts, the speculative run first in every second round")
	fs.IntVar(&sb.pairs, "pairs", 8, "with --spec: the fewest timed pairs per batch size; where --rounds gives fewer (large batches hold every prompt in one batch), more rounds run")
	fs.StringVar(&sb.shape, "shape", "auto", "with --spec: the tree shape of every step: auto (the engine's dispatcher chooses per batch size, off included), off (the speculating engine never drafts: what its machinery costs), chain:N, dynamic:N (a budget of N nodes grown by draft confidence), confident:N,D,W,S (at most N nodes, D deep, W wide, each with an estimated chance of acceptance of at least S), bushy or wide")
	fs.IntVar(&sb.warmup, "warmup", 2, "with --spec: extra untimed speculative runs per batch size, so the dispatcher has measured its options (one untimed run of each engine always comes first, so both have the prompts cached)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *path == "" {
		return fmt.Errorf("--model is required")
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	var sizes []int
	for _, f := range strings.Split(*batches, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return fmt.Errorf("--batches: %q is not a positive number", f)
		}
		sizes = append(sizes, n)
	}
	if err := sb.check(*draftPath); err != nil {
		return err
	}
	m, closeModel, err := loadModel(*backend, *threads, *path, *kvType)
	if err != nil {
		return err
	}
	defer closeModel()
	if sb.kind != "" {
		sb.target, sb.kvType = m, *kvType
		if *draftPath != "" {
			// On the target's backend, as serve loads it: one worker
			// pool. A pool of its own would keep its workers spinning
			// after each small draft pass, on the cores the target's
			// pass is about to need.
			d, err := model.Load(*draftPath, m.Backend())
			if err != nil {
				return fmt.Errorf("--draft-model: %w", err)
			}
			defer d.Close()
			if err := d.SetKVType(kvType.DType(m.Backend())); err != nil {
				return fmt.Errorf("--draft-model: --kv-type: %w", err)
			}
			sb.draft = d
		}
		if *cpuprofile != "" {
			stop, err := startCPUProfile(*cpuprofile)
			if err != nil {
				return err
			}
			defer stop()
		}
		return sb.run(ctx, os.Stdout, sizes)
	}
	c := m.Config()
	switch {
	case *promptLen < 1 || *ctxLen < 0 || *steps < 1:
		return fmt.Errorf("--prompt and --steps must be positive and --ctx not negative")
	case *promptLen > c.Context:
		return fmt.Errorf("--prompt %d exceeds the model's context of %d", *promptLen, c.Context)
	case decodePositions(*ctxLen, *steps) > c.Context:
		return fmt.Errorf("--ctx %d plus --steps %d (and a warm-up step) exceed the model's context of %d", *ctxLen, *steps, c.Context)
	}

	bw := *bandwidth * 1e9
	how := "given"
	if bw <= 0 {
		bw, how = cpu.MeasureBandwidth(256<<20, 500*time.Millisecond), "measured, all threads"
	}
	fmt.Printf("model %s: %s, %.1fM parameters, %d layers, dim %d, vocab %d; weights read per pass %.1f MB\n",
		*path, c.WeightType, float64(c.Params)/1e6, c.Layers, c.Dim, c.Vocab, float64(c.WeightBytes)/1e6)
	fmt.Printf("backend %s, %v KV cache; memory bandwidth (%s): %.2f GB/s\n\n", m.Backend().Name(), m.KVType(), how, bw/1e9)

	// Prefill: one prompt in one pass, as llama-bench's ppN: a prompt may
	// fill the whole context.
	seqs, err := model.NewSequences(m, 1, *promptLen)
	if err != nil {
		return err
	}
	prompt := make([]int32, *promptLen)
	for i := range prompt {
		prompt[i] = int32(3 + (i*7919)%(c.Vocab-3))
	}
	if _, err := seqs.Step([][]int32{prompt}); err != nil { // warm up
		return err
	}
	const prefillRuns = 3
	t0 := time.Now()
	for r := 0; r < prefillRuns; r++ {
		seqs.Reset(0)
		if _, err := seqs.Step([][]int32{prompt}); err != nil {
			return err
		}
	}
	prefill := time.Since(t0) / prefillRuns

	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "phase\tbatch\ttokens/s\tms/step\tMB/step\tfloor ms/step\tof floor\t\n")
	fmt.Fprintf(tw, "prefill\t%d\t%.1f\t%.2f\t%.1f\t%.2f\t%.0f%%\t\n", *promptLen, float64(*promptLen)/prefill.Seconds(),
		ms(prefill), float64(c.WeightBytes)/1e6, 1e3*float64(c.WeightBytes)/bw, 100*float64(c.WeightBytes)/bw/prefill.Seconds())
	if *cpuprofile != "" {
		stop, err := startCPUProfile(*cpuprofile)
		if err != nil {
			return err
		}
		defer stop()
	}
	var base float64
	for _, b := range sizes {
		if err := ctx.Err(); err != nil {
			return err
		}
		tps, step, err := decodeRate(m, b, *ctxLen, *steps)
		if err != nil {
			return err
		}
		// Each step reads every weight once plus each sequence's KV.
		kvBytes := int64(b) * int64(c.Layers) * 2 * int64(*ctxLen+*steps/2) * int64(c.KVWidth()) * int64(m.KVType().BlockBytes())
		bytes := float64(c.WeightBytes + kvBytes)
		floor := bytes / bw
		if base == 0 {
			base = tps
		}
		fmt.Fprintf(tw, "decode\t%d\t%.1f\t%.2f\t%.1f\t%.2f\t%.0f%%\t(%.2fx batch %d)\n", b, tps, ms(step), bytes/1e6,
			1e3*floor, 100*floor/step.Seconds(), tps/base, sizes[0])
	}
	return tw.Flush()
}

// startCPUProfile profiles the process into path until the returned stop.
func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// decodePositions is how many positions decodeRate uses: the context
// (at least one token, which the first logits need), a warm-up step, and
// the timed steps.
func decodePositions(ctx, steps int) int { return max(ctx, 1) + 1 + steps }

// decodeRate prefills b sequences to ctx tokens (at least one), then times
// steps decode steps of one greedy token per sequence in one batch.
func decodeRate(m model.Model, b, ctx, steps int) (tokensPerSec float64, perStep time.Duration, err error) {
	c := m.Config()
	ctx = max(ctx, 1)
	seqs, err := model.NewSequences(m, b, decodePositions(ctx, steps))
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
	for s := 0; s < steps; s++ {
		next()
		if logits, err = seqs.Step(in); err != nil {
			return 0, 0, err
		}
	}
	d := time.Since(t0)
	return float64(b*steps) / d.Seconds(), d / time.Duration(steps), nil
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

// storyPrompts open stories in the manner of the TinyStories data: what the
// stories260K family continues well, for drafts that follow a small model.
var storyPrompts = []string{
	"Once upon a time, there was a little girl named Lily.",
	"One day, a boy named Tom went to the park with his mom.",
	"There was a big red ball in the garden.",
	"Once upon a time, in a small house, there lived a cat.",
	"Sue had a new toy. It was a little blue car.",
	"Ben and Mia were friends. They liked to play in the sand.",
	"The sun was shining and the birds were singing.",
	"One day, a little bird could not fly.",
}
