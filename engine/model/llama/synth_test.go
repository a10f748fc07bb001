package llama_test

import (
	"math"
	"testing"

	"github.com/specgate/specgate/engine/model"
	"github.com/specgate/specgate/engine/model/synth"
	"github.com/specgate/specgate/kernels"
)

func loadSynth(t *testing.T, o synth.Options) model.Loaded {
	t.Helper()
	be, err := kernels.Open("cpu", kernels.Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { be.Close() })
	m, err := model.Load(synth.Setup(t, o), be)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// TestSynthTypes runs every weight type through the forward pass: the
// logits of each type stay close to the F32 model made from the same seed,
// and a batch of sequences decodes exactly as each does alone.
func TestSynthTypes(t *testing.T) {
	base := synth.Options{Layers: 2, Dim: 128, Heads: 4, KVHeads: 2, FFN: 256, Vocab: 600, Seed: 7, Tokenizer: "gpt2"}
	prompt := []int32{5, 77, 300, 12, 599, 41, 8, 250, 251, 3}
	ref := loadSynth(t, base)
	refLogits := lastLogits(t, ref, prompt)
	for _, tc := range []struct {
		dt  kernels.DType
		tol float64 // of the logits' spread
	}{
		{kernels.F16, 0.01}, {kernels.BF16, 0.05}, {kernels.Q8_0, 0.05}, {kernels.Q4_0, 0.25},
	} {
		t.Run(tc.dt.String(), func(t *testing.T) {
			o := base
			o.Type = tc.dt
			m := loadSynth(t, o)
			if m.Config().WeightType != tc.dt {
				t.Fatalf("have weight type %v; want %v", m.Config().WeightType, tc.dt)
			}
			got := lastLogits(t, m, prompt)
			spread := stddev(refLogits)
			if d := maxDiff(got, refLogits); d > tc.tol*spread*4 {
				t.Errorf("logits differ from F32 by %g (spread %g); want ≤ %g", d, spread, tc.tol*spread*4)
			}
			checkBatchExact(t, m, [][]int32{prompt, prompt[:3], {9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9}})
		})
	}
	t.Run("tied output", func(t *testing.T) {
		o := base
		o.TiedOutput = true
		checkBatchExact(t, loadSynth(t, o), [][]int32{prompt, {1, 2}})
	})
}

func lastLogits(t *testing.T, m model.Loaded, prompt []int32) []float32 {
	t.Helper()
	s, err := model.NewSequences(m, 1, len(prompt))
	if err != nil {
		t.Fatal(err)
	}
	l, err := s.Step([][]int32{prompt})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range l {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			t.Fatalf("non-finite logit %v", v)
		}
	}
	return append([]float32(nil), l...)
}

func checkBatchExact(t *testing.T, m model.Loaded, prompts [][]int32) {
	t.Helper()
	const n = 12
	alone := make([][]int32, len(prompts))
	for i, p := range prompts {
		alone[i] = greedy(t, m, p, n)
	}
	s, err := model.NewSequences(m, len(prompts), 32+n)
	if err != nil {
		t.Fatal(err)
	}
	v := m.Config().Vocab
	in := append([][]int32(nil), prompts...)
	for step := 0; step < n; step++ {
		logits, err := s.Step(in)
		if err != nil {
			t.Fatal(err)
		}
		for i := range in {
			in[i] = []int32{argmax(logits[i*v : (i+1)*v])}
			if in[i][0] != alone[i][step] {
				t.Fatalf("sequence %d step %d in a batch: have %d; want %d", i, step, in[i][0], alone[i][step])
			}
		}
	}
}

func argmax(x []float32) int32 {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return int32(best)
}

func stddev(x []float32) float64 {
	var s, s2 float64
	for _, v := range x {
		s += float64(v)
		s2 += float64(v) * float64(v)
	}
	n := float64(len(x))
	return math.Sqrt(s2/n - (s/n)*(s/n))
}
