package gateway

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// TestOpenAIRealModel serves the OpenAI API from the real engine on the
// tiny TinyStories model: greedy streaming concatenates to the
// non-streaming text, and the engine's refusals come back in OpenAI's shape.
func TestOpenAIRealModel(t *testing.T) {
	_, eng := storiesEngine(t)
	e := newEnv(t, nil, "", func(o *Options) {
		o.Generator = eng
		o.ModelName = "stories260K"
	})
	tok := e.token("alice")

	type result struct {
		text   string
		finish string
		usage  map[string]any
	}
	// run posts body to path and returns the text, whether streamed or not.
	run := func(path string, body map[string]any) result {
		t.Helper()
		resp, raw := e.post(path, tok, body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: have %d %s; want 200", path, resp.StatusCode, raw)
		}
		chat := strings.Contains(path, "chat")
		pick := func(c map[string]any) string {
			if !chat {
				s, _ := c["text"].(string)
				return s
			}
			if msg, ok := c["message"].(map[string]any); ok {
				s, _ := msg["content"].(string)
				return s
			}
			d, _ := c["delta"].(map[string]any)
			s, _ := d["content"].(string)
			return s
		}
		var r result
		if body["stream"] != true {
			m := decodeMap(t, raw)
			c := m["choices"].([]any)[0].(map[string]any)
			r.text, r.finish = pick(c), c["finish_reason"].(string)
			r.usage, _ = m["usage"].(map[string]any)
			return r
		}
		var b strings.Builder
		for _, ev := range sse(t, raw) {
			if ev == "[DONE]" {
				continue
			}
			m := decodeMap(t, []byte(ev))
			if u, ok := m["usage"].(map[string]any); ok {
				r.usage = u
			}
			for _, c := range m["choices"].([]any) {
				c := c.(map[string]any)
				b.WriteString(pick(c))
				if f, ok := c["finish_reason"].(string); ok {
					r.finish = f
				}
			}
		}
		r.text = b.String()
		return r
	}

	for _, path := range []string{"/v1/chat/completions", "/v1/completions"} {
		t.Run(path, func(t *testing.T) {
			body := map[string]any{"model": "stories260K", "max_tokens": 24, "temperature": 0}
			if strings.Contains(path, "chat") {
				body["messages"] = []map[string]any{{"role": "user", "content": "Once upon a time"}}
			} else {
				body["prompt"] = "Once upon a time"
			}
			whole := run(path, body)
			if whole.text == "" || (whole.finish != "stop" && whole.finish != "length") {
				t.Fatalf("have %+v; want text that stops or reaches the limit", whole)
			}
			if n, _ := whole.usage["completion_tokens"].(float64); n < 1 || n > 24 {
				t.Errorf("have usage %v; want 1..24 completion tokens", whole.usage)
			}
			body["stream"] = true
			body["stream_options"] = map[string]any{"include_usage": true}
			streamed := run(path, body)
			if streamed.text != whole.text || streamed.finish != whole.finish {
				t.Errorf("have streamed %q (%s); want %q (%s)", streamed.text, streamed.finish, whole.text, whole.finish)
			}
			if streamed.usage["completion_tokens"] != whole.usage["completion_tokens"] || streamed.usage["prompt_tokens"] != whole.usage["prompt_tokens"] {
				t.Errorf("have streamed usage %v; want %v", streamed.usage, whole.usage)
			}
		})
	}

	t.Run("context too long", func(t *testing.T) {
		resp, raw := e.post("/v1/chat/completions", tok, map[string]any{
			"messages": []map[string]any{{"role": "user", "content": "hi"}}, "max_tokens": 1 << 20,
		})
		checkOAIError(t, resp, raw, http.StatusBadRequest, oaiInvalidRequest, "context_length_exceeded", "messages")
	})

	t.Run("conversation over the context", func(t *testing.T) {
		// The socket may drop old turns; the API refuses instead, since its
		// client believes the model read everything it sent.
		var msgs []map[string]any
		for i := range 40 {
			role := []string{"user", "assistant"}[i%2]
			msgs = append(msgs, map[string]any{"role": role, "content": strings.Repeat("Once upon a time there was a cat. ", 6)})
		}
		msgs = append(msgs, map[string]any{"role": "user", "content": "and then?"})
		resp, raw := e.post("/v1/chat/completions", tok, map[string]any{"messages": msgs, "max_tokens": 8})
		checkOAIError(t, resp, raw, http.StatusBadRequest, oaiInvalidRequest, "context_length_exceeded", "messages")
	})

	t.Run("json_object", func(t *testing.T) {
		// Until the engine decodes guided requests it refuses them, and the
		// refusal is an OpenAI error; once it does, the answer is JSON.
		resp, raw := e.post("/v1/chat/completions", tok, map[string]any{
			"messages": []map[string]any{{"role": "user", "content": "hi"}}, "max_tokens": 16, "temperature": 0,
			"response_format": map[string]any{"type": "json_object"},
		})
		if resp.StatusCode == http.StatusOK {
			var r struct {
				Choices []struct {
					Message      struct{ Content string } `json:"message"`
					FinishReason string                   `json:"finish_reason"`
				} `json:"choices"`
			}
			if err := json.Unmarshal(raw, &r); err != nil || len(r.Choices) != 1 {
				t.Fatalf("have %s; want a completion", raw)
			}
			if c := r.Choices[0]; c.FinishReason == "stop" && !json.Valid([]byte(c.Message.Content)) {
				t.Errorf("have %q; want JSON", c.Message.Content)
			}
			return
		}
		checkOAIError(t, resp, raw, http.StatusBadRequest, oaiInvalidRequest, "", "")
	})
}
