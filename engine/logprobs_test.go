package engine_test

import (
	"bufio"
	"context"
	"encoding/json"
	"math"
	"os"
	"slices"
	"testing"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/internal/testmodels"
)

// TestStoriesLogprobs checks the first token's log probabilities against
// log-softmax of llama.cpp's logits at the last prompt position, and that
// asking for logprobs changes no token.
func TestStoriesLogprobs(t *testing.T) {
	m := loadStories(t)
	e, err := engine.New(m, engine.Options{KVType: engine.KVF32})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	f, err := os.Open(testmodels.Ref(t, "logits.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<22)
	ctx := context.Background()
	for sc.Scan() {
		var ref struct {
			Prompt    string    `json:"prompt"`
			PromptIDs []int32   `json:"prompt_ids"`
			Logits    []float64 `json:"last_prompt_pos_logits"`
		}
		if err := json.Unmarshal(sc.Bytes(), &ref); err != nil {
			t.Fatal(err)
		}
		t.Run(ref.Prompt, func(t *testing.T) {
			maxL := slices.Max(ref.Logits)
			var sum float64
			for _, l := range ref.Logits {
				sum += math.Exp(l - maxL)
			}
			lse := maxL + math.Log(sum)
			order := make([]int32, len(ref.Logits))
			for i := range order {
				order[i] = int32(i)
			}
			slices.SortStableFunc(order, func(a, b int32) int {
				switch {
				case ref.Logits[a] > ref.Logits[b]:
					return -1
				case ref.Logits[a] < ref.Logits[b]:
					return 1
				}
				return 0
			})

			r := engine.Request{Prompt: ref.PromptIDs, MaxTokens: 8, Logprobs: true, TopLogprobs: 5}
			var lps []engine.TokenLogprob
			s, err := e.Submit(ctx, r)
			if err != nil {
				t.Fatal(err)
			}
			var toks []int32
			for {
				ev, err := s.Recv(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if ev.Final != nil {
					break
				}
				if len(ev.Logprobs) != len(ev.Tokens) {
					t.Fatalf("have %d logprobs for %d tokens; want one each", len(ev.Logprobs), len(ev.Tokens))
				}
				toks = append(toks, ev.Tokens...)
				lps = append(lps, ev.Logprobs...)
			}
			first := lps[0]
			if want := float64(first.Token); want != float64(order[0]) {
				t.Fatalf("have first token %d; want llama.cpp's argmax %d", first.Token, order[0])
			}
			for i, tp := range first.Top {
				want := ref.Logits[order[i]] - lse
				if tp.Token != order[i] || math.Abs(float64(tp.Logprob)-want) > 2e-3 {
					t.Errorf("top %d: have %d %.5f; want %d %.5f", i, tp.Token, tp.Logprob, order[i], want)
				}
			}
			for i, lp := range lps {
				if lp.Token != toks[i] || lp.Logprob > 0 || len(lp.Top) != 5 || lp.Top[0].Token != lp.Token || lp.Top[0].Logprob != lp.Logprob {
					t.Errorf("token %d: have %+v; want the greedy token first among its top 5", i, lp)
				}
			}
			plain, _, _, err := generate(ctx, e, engine.Request{Prompt: ref.PromptIDs, MaxTokens: 8})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(plain, toks) {
				t.Errorf("have %v with logprobs; want %v as without", toks, plain)
			}
		})
	}
	if _, err := e.Submit(ctx, engine.Request{Prompt: []int32{1}, TopLogprobs: 3}); err == nil {
		t.Errorf("top logprobs without logprobs: have no error; want bad request")
	}
}
