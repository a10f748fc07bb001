package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"math"
	"os"
	"strconv"
	"time"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/engine/model"
	"github.com/specgate/specgate/kernels"
	"github.com/specgate/specgate/kernels/sample"
)

func runGenerate(ctx context.Context, args []string) error {
	fs := newFlags("generate", "--model FILE --prompt TEXT [-n N] [--temperature T] [--seed S] [--ids]")
	path := fs.String("model", "", "GGUF model `file`")
	prompt := fs.String("prompt", "", "prompt text")
	n := fs.Int("n", 64, "tokens to generate")
	var p sample.Params
	fs.Var(float32Flag{&p.Temperature}, "temperature", "sampling temperature (0 = greedy)")
	fs.IntVar(&p.TopK, "top-k", 0, "keep the k most likely tokens (0 = off)")
	fs.Var(float32Flag{&p.TopP}, "top-p", "nucleus sampling mass (0 or 1 = off)")
	fs.Var(float32Flag{&p.MinP}, "min-p", "drop tokens below this fraction of the top probability")
	fs.Var(float32Flag{&p.RepeatPenalty}, "repeat-penalty", "repetition penalty (1 = off)")
	fs.Uint64Var(&p.Seed, "seed", 0, "sampling seed")
	ids := fs.Bool("ids", false, "also print the token ids")
	backend := fs.String("backend", "cpu", "compute backend")
	threads := fs.Int("threads", 0, "worker threads (0 = one per CPU)")
	kvType := kvTypeFlag(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *path == "" {
		return fmt.Errorf("--model is required")
	}
	if *prompt == "" {
		return fmt.Errorf("--prompt is required")
	}
	if *n < 0 {
		return fmt.Errorf("-n must not be negative")
	}
	if err := checkSampling(p); err != nil {
		return err
	}
	m, closeModel, err := loadModel(*backend, *threads, *path, *kvType)
	if err != nil {
		return err
	}
	defer closeModel()
	tok := m.Tokenizer()
	in := tok.Encode(*prompt)
	if len(in) == 0 {
		return fmt.Errorf("the prompt encodes to no tokens")
	}
	ctxLen := len(in) + *n
	if ctxLen > m.Config().Context {
		return fmt.Errorf("prompt (%d tokens) plus -n %d exceeds the model's context of %d", len(in), *n, m.Config().Context)
	}
	seqs, err := model.NewSequences(m, 1, ctxLen)
	if err != nil {
		return err
	}
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	smp := sample.New(p)
	det := tok.NewContinuationDetokenizer()
	history := append([]int32(nil), in...)
	var gen []int32

	t0 := time.Now()
	logits, err := seqs.Step([][]int32{in})
	if err != nil {
		return err
	}
	tPrefill := time.Since(t0)
	t1 := time.Now()
	for len(gen) < *n {
		if err := ctx.Err(); err != nil {
			return err
		}
		next := smp.Sample(logits, history)
		if tok.IsEOG(next) {
			break
		}
		gen = append(gen, next)
		history = append(history, next)
		out.WriteString(det.Add(next))
		out.Flush()
		if len(gen) == *n {
			break
		}
		if logits, err = seqs.Step([][]int32{{next}}); err != nil {
			return err
		}
	}
	out.WriteString(det.Flush())
	out.WriteString("\n")
	if *ids {
		fmt.Fprintln(out, "prompt ids:", in)
		fmt.Fprintln(out, "ids:", gen)
	}
	tDecode := time.Since(t1)
	out.Flush()
	fmt.Fprintf(os.Stderr, "prompt: %d tokens in %v (%.1f tok/s); generated: %d tokens in %v (%.1f tok/s)\n",
		len(in), tPrefill.Round(time.Microsecond), rate(len(in), tPrefill),
		len(gen), tDecode.Round(time.Microsecond), rate(len(gen), tDecode))
	return nil
}

// loadModel opens a backend and loads path on it, its KV caches of type
// kvType; closeModel releases both.
func loadModel(backend string, threads int, path string, kvType engine.KVType) (m model.Loaded, closeModel func(), err error) {
	be, err := kernels.Open(backend, kernels.Options{Threads: threads})
	if err != nil {
		return nil, nil, err
	}
	if m, err = model.Load(path, be); err != nil {
		be.Close()
		return nil, nil, err
	}
	if err := m.SetKVType(kvType.DType(be)); err != nil {
		m.Close()
		be.Close()
		return nil, nil, fmt.Errorf("--kv-type: %w", err)
	}
	return m, func() { m.Close(); be.Close() }, nil
}

// kvTypeFlag adds --kv-type to fs: the KV cache's element type.
func kvTypeFlag(fs *flag.FlagSet) *engine.KVType {
	t := new(engine.KVType)
	fs.Var(kvTypeValue{t}, "kv-type", "KV cache element `type`: f16 (half the memory and attention reads of f32; f32 on a backend without F16 caches) or f32")
	return t
}

// kvTypeValue adapts an engine.KVType to flag.Value.
type kvTypeValue struct{ p *engine.KVType }

func (v kvTypeValue) String() string {
	if v.p == nil {
		return "" // the zero flag.Value, so that the default is printed
	}
	return v.p.String()
}

func (v kvTypeValue) Set(s string) error {
	t, err := engine.ParseKVType(s)
	if err != nil {
		return err
	}
	*v.p = t
	return nil
}

func rate(n int, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

// checkSampling refuses parameters the sampler would silently misread.
func checkSampling(p sample.Params) error {
	switch {
	case p.Temperature < 0:
		return fmt.Errorf("--temperature %v: must be >= 0 (0 = greedy)", p.Temperature)
	case p.TopK < 0:
		return fmt.Errorf("--top-k %d: must be >= 0", p.TopK)
	case p.TopP < 0 || p.TopP > 1:
		return fmt.Errorf("--top-p %v: must be in [0, 1]", p.TopP)
	case p.MinP < 0 || p.MinP > 1:
		return fmt.Errorf("--min-p %v: must be in [0, 1]", p.MinP)
	case p.RepeatPenalty < 0:
		return fmt.Errorf("--repeat-penalty %v: must be >= 0", p.RepeatPenalty)
	}
	return nil
}

// float32Flag adapts a float32 to flag.Value.
type float32Flag struct{ p *float32 }

func (f float32Flag) String() string {
	if f.p == nil {
		return "0"
	}
	return fmt.Sprint(*f.p)
}

func (f float32Flag) Set(s string) error {
	v, err := strconv.ParseFloat(s, 32)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return fmt.Errorf("not a number: %q", s)
	}
	*f.p = float32(v)
	return nil
}
