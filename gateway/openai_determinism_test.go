package gateway

import (
	"fmt"
	"net/http"
	"sync"
	"testing"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/engine/model"
	"github.com/specgate/specgate/internal/testmodels"
	"github.com/specgate/specgate/kernels"
)

// TestOpenAIOneAnswerPerPrompt: through /v1/completions on the real engine
// (speculation on by default) and the Q8_0 TinyStories model, eight
// concurrent copies of greedy requests and of seeded sampled ones each
// return the text the request gets alone: what else is running never
// changes a reply.
func TestOpenAIOneAnswerPerPrompt(t *testing.T) {
	be, err := kernels.Open("cpu", kernels.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = be.Close() })
	m, err := model.Load(testmodels.Path(t, testmodels.Stories260KQ8_0), be)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	eng, err := engine.New(m, engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = eng.Close() })
	e := newEnv(t, nil, "", func(o *Options) {
		o.Generator = eng
		o.ModelName = "stories260K"
	})
	bodies := []map[string]any{
		{"model": "stories260K", "prompt": "Grandma baked cookies for everyone in the house.", "max_tokens": 60, "temperature": 0},
		{"model": "stories260K", "prompt": "Grandma baked cookies for everyone in the house.", "max_tokens": 60, "temperature": 0.9, "top_p": 0.95, "seed": 7},
		{"model": "stories260K", "prompt": "The little dog", "max_tokens": 60, "temperature": 1, "seed": 12345},
		{"model": "stories260K", "prompt": "Lily and Tom went", "max_tokens": 60, "temperature": 0},
	}
	complete := func(user string, body map[string]any) (string, error) {
		resp, raw := e.post("/v1/completions", e.token(user), body)
		if resp.StatusCode != http.StatusOK {
			return "", fmt.Errorf("have %d %s; want 200", resp.StatusCode, raw)
		}
		m := decodeMap(t, raw)
		text, _ := m["choices"].([]any)[0].(map[string]any)["text"].(string)
		return text, nil
	}
	alone := make([]string, len(bodies))
	for i, b := range bodies {
		text, err := complete("alice", b)
		if err != nil {
			t.Fatal(err)
		}
		if text == "" {
			t.Fatalf("request %d: empty text", i)
		}
		alone[i] = text
	}
	const copies = 8
	var wg sync.WaitGroup
	for c := range copies {
		for i, b := range bodies {
			wg.Add(1)
			go func() {
				defer wg.Done()
				text, err := complete(fmt.Sprint("user", c), b)
				if err != nil {
					t.Error(err)
					return
				}
				if text != alone[i] {
					t.Errorf("request %d, copy %d: %q; alone %q", i, c, text, alone[i])
				}
			}()
		}
	}
	wg.Wait()
}
