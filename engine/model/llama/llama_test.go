package llama_test

import (
	"bufio"
	"encoding/json"
	"math"
	"os"
	"testing"

	"github.com/specgate/specgate/engine/model"
	_ "github.com/specgate/specgate/engine/model/llama"
	"github.com/specgate/specgate/internal/testmodels"
	"github.com/specgate/specgate/kernels"
	_ "github.com/specgate/specgate/kernels/cpu"
	"github.com/specgate/specgate/kernels/sample"
)

type greedyRef struct {
	Prompt     string  `json:"prompt"`
	PromptIDs  []int32 `json:"prompt_ids"`
	GreedyText string  `json:"greedy_text"`
	GreedyIDs  []int32 `json:"greedy_ids"`
}

type logitsRef struct {
	Prompt    string         `json:"prompt"`
	PromptIDs []int32        `json:"prompt_ids"`
	Last      []float32      `json:"last_prompt_pos_logits"`
	Top5      [][][2]float64 `json:"step_top5"`
}

func readJSONL[T any](t *testing.T, path string) []T {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []T
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var v T
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		out = append(out, v)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func load(t testing.TB, name string, threads int) model.Loaded {
	t.Helper()
	be, err := kernels.Open("cpu", kernels.Options{Threads: threads})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { be.Close() })
	m, err := model.Load(testmodels.Path(t, name), be)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// greedy prefills prompt in one pass and then decodes n tokens one at a time.
func greedy(t testing.TB, m model.Loaded, prompt []int32, n int) []int32 {
	t.Helper()
	s, err := model.NewSequences(m, 1, len(prompt)+n)
	if err != nil {
		t.Fatal(err)
	}
	logits, err := s.Step([][]int32{prompt})
	if err != nil {
		t.Fatal(err)
	}
	var out []int32
	for len(out) < n {
		next := sample.Argmax(logits)
		out = append(out, next)
		if logits, err = s.Step([][]int32{{next}}); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// TestGreedyMatchesReference runs with the default F16 KV cache, as
// llama.cpp made the references, and with an F32 one, which its authors
// found gives the same ids.
func TestGreedyMatchesReference(t *testing.T) {
	type run struct {
		model, ref string
		kv         kernels.DType
	}
	var runs []run
	for _, kv := range []kernels.DType{kernels.F16, kernels.F32} {
		runs = append(runs,
			run{testmodels.Stories260K, "greedy.jsonl", kv},
			run{testmodels.Stories260KQ8_0, "greedy-q8_0.jsonl", kv},
			run{testmodels.Stories260KQ4_0, "greedy-q4_0.jsonl", kv})
	}
	for _, tc := range runs {
		t.Run(tc.model+"/kv="+tc.kv.String(), func(t *testing.T) {
			m := load(t, tc.model, 0)
			if tc.kv == kernels.F16 && m.KVType() != kernels.F16 {
				t.Fatalf("default KV type %v; want F16", m.KVType())
			}
			if err := m.SetKVType(tc.kv); err != nil {
				t.Fatal(err)
			}
			for _, ref := range readJSONL[greedyRef](t, testmodels.Ref(t, tc.ref)) {
				ids := m.Tokenizer().Encode(ref.Prompt)
				if !equal(ids, ref.PromptIDs) {
					t.Fatalf("%q: prompt ids %v; want %v", ref.Prompt, ids, ref.PromptIDs)
				}
				got := greedy(t, m, ids, len(ref.GreedyIDs))
				if !equal(got, ref.GreedyIDs) {
					t.Errorf("%q:\nhave %v\nwant %v", ref.Prompt, got, ref.GreedyIDs)
				}
				det := m.Tokenizer().NewContinuationDetokenizer()
				var text string
				for _, id := range got {
					text += det.Add(id)
				}
				if text += det.Flush(); text != ref.GreedyText {
					t.Errorf("%q: have text %q; want %q", ref.Prompt, text, ref.GreedyText)
				}
			}
		})
	}
}

func TestLogitsMatchReference(t *testing.T) {
	m := load(t, testmodels.Stories260K, 0)
	// The reference logits were computed with an F32 KV cache; rounding K
	// and V to F16 (the default, which the greedy references cover) moves
	// them by several times the 1e-3 this test allows.
	if err := m.SetKVType(kernels.F32); err != nil {
		t.Fatal(err)
	}
	for _, ref := range readJSONL[logitsRef](t, testmodels.Ref(t, "logits.jsonl")) {
		s, err := model.NewSequences(m, 1, len(ref.PromptIDs)+len(ref.Top5))
		if err != nil {
			t.Fatal(err)
		}
		logits, err := s.Step([][]int32{ref.PromptIDs})
		if err != nil {
			t.Fatal(err)
		}
		if d := maxDiff(logits, ref.Last); d > 1e-3 {
			t.Errorf("%q: last prompt logits differ by %g; want ≤ 1e-3", ref.Prompt, d)
		}
		for step, top := range ref.Top5 {
			for _, e := range top {
				if d := math.Abs(float64(logits[int(e[0])]) - e[1]); d > 2e-3 {
					t.Fatalf("%q step %d: logit of %d is %g; want %g", ref.Prompt, step, int(e[0]), logits[int(e[0])], e[1])
				}
			}
			next := int32(top[0][0])
			if logits, err = s.Step([][]int32{{next}}); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestBatchingIsExact checks that how tokens are packed into forward passes
// does not change the result: a prompt prefilled in one pass or token by
// token, and several sequences decoded in one batch or each alone.
func TestBatchingIsExact(t *testing.T) {
	m := load(t, testmodels.Stories260K, 2)
	tok := m.Tokenizer()
	prompts := [][]int32{
		tok.Encode("Once upon a time"),
		tok.Encode("The little dog"),
		tok.Encode("Lily and Tom went to the park to play with a big red ball"),
		tok.Encode("One day"),
	}
	const n = 24
	alone := make([][]int32, len(prompts))
	for i, p := range prompts {
		alone[i] = greedy(t, m, p, n)
	}
	// Token by token prefill of the first prompt.
	s, err := model.NewSequences(m, 1, len(prompts[0])+n)
	if err != nil {
		t.Fatal(err)
	}
	var logits []float32
	for _, id := range prompts[0] {
		if logits, err = s.Step([][]int32{{id}}); err != nil {
			t.Fatal(err)
		}
	}
	if got := sample.Argmax(logits); got != alone[0][0] {
		t.Errorf("token-by-token prefill: first token %d; want %d", got, alone[0][0])
	}
	// All sequences in one batch, prompts of different lengths together.
	bs, err := model.NewSequences(m, len(prompts), 64+n)
	if err != nil {
		t.Fatal(err)
	}
	vocab := m.Config().Vocab
	in := append([][]int32(nil), prompts...)
	got := make([][]int32, len(prompts))
	for step := 0; step < n; step++ {
		if logits, err = bs.Step(in); err != nil {
			t.Fatal(err)
		}
		for i := range in {
			next := sample.Argmax(logits[i*vocab : (i+1)*vocab])
			got[i] = append(got[i], next)
			in[i] = []int32{next}
		}
	}
	for i := range prompts {
		if !equal(got[i], alone[i]) {
			t.Errorf("sequence %d in a batch:\nhave %v\nwant %v", i, got[i], alone[i])
		}
	}
}

func TestForwardRejectsBadBatches(t *testing.T) {
	m := load(t, testmodels.Stories260K, 1)
	kv, err := model.NewKV(m, 2, 16)
	if err != nil {
		t.Fatal(err)
	}
	table := []int32{0, 1}
	cases := map[string]model.Batch{
		"empty":          {},
		"token range":    {Tokens: []int32{9999}, Pos: []int32{0}, Slots: []int32{0}, Attn: []kernels.AttnRow{{Table: table, Len: 1}}},
		"slot range":     {Tokens: []int32{1}, Pos: []int32{0}, Slots: []int32{32}, Attn: []kernels.AttnRow{{Table: table, Len: 1}}},
		"block range":    {Tokens: []int32{1}, Pos: []int32{0}, Slots: []int32{0}, Attn: []kernels.AttnRow{{Table: []int32{7}, Len: 1}}},
		"len past table": {Tokens: []int32{1}, Pos: []int32{0}, Slots: []int32{0}, Attn: []kernels.AttnRow{{Table: table, Len: 40}}},
		"ragged":         {Tokens: []int32{1, 2}, Pos: []int32{0}, Slots: []int32{0}, Attn: []kernels.AttnRow{{Table: table, Len: 1}}},
		"logits row":     {Tokens: []int32{1}, Pos: []int32{0}, Slots: []int32{0}, Attn: []kernels.AttnRow{{Table: table, Len: 1}}, Logits: []int32{3}},
		"tree rows":      {Tokens: []int32{1}, Pos: []int32{0}, Slots: []int32{0}, Attn: []kernels.AttnRow{{Table: table, Len: 1}}, Tree: &kernels.TreeMask{}},
		"tree slot":      {Tokens: []int32{1}, Pos: []int32{0}, Slots: []int32{0}, Attn: []kernels.AttnRow{{Table: table, Len: 1}}, Tree: &kernels.TreeMask{Rows: []kernels.TreeRow{{Prefix: 0, Slots: []int32{99}}}}},
		"tree prefix":    {Tokens: []int32{1}, Pos: []int32{0}, Slots: []int32{0}, Attn: []kernels.AttnRow{{Table: table, Len: 1}}, Tree: &kernels.TreeMask{Rows: []kernels.TreeRow{{Prefix: 33, Slots: []int32{0}}}}},
	}
	for name, b := range cases {
		t.Run(name, func(t *testing.T) {
			if _, err := m.Forward(kv, &b); err == nil {
				t.Errorf("have nil error; want one")
			}
		})
	}
}

func equal(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func maxDiff(a, b []float32) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	var d float64
	for i := range a {
		d = math.Max(d, math.Abs(float64(a[i]-b[i])))
	}
	return d
}

// TestKVType checks that the model makes caches of its KV type and refuses
// a type the backend does not store.
func TestKVType(t *testing.T) {
	m := load(t, testmodels.Stories260K, 1)
	for _, dt := range []kernels.DType{kernels.F16, kernels.F32} {
		if err := m.SetKVType(dt); err != nil {
			t.Fatal(err)
		}
		kv, err := model.NewKV(m, 2, 16)
		if err != nil {
			t.Fatal(err)
		}
		if have := kv.Spec().DType; have != dt {
			t.Errorf("NewKV after SetKVType(%v): cache of %v", dt, have)
		}
	}
	if err := m.SetKVType(kernels.BF16); err == nil {
		t.Error("SetKVType(BF16): have nil error; want one")
	}
	if m.KVType() != kernels.F32 {
		t.Errorf("a refused SetKVType changed the type to %v", m.KVType())
	}
}
