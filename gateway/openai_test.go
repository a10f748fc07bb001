package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/tenants"
)

const testModel = "stories-test"

// promptFake lets the echoing fake answer raw prompts: it tokenizes a
// text prompt as an engine does, one token per byte, and echoes the
// prompt's token ids as if they were a user message.
type promptFake struct{ *fakeGenerator }

func (g promptFake) Generate(ctx context.Context, r engine.Request) (engine.Events, error) {
	if len(r.Messages) == 0 {
		ids := r.Prompt
		if len(ids) == 0 {
			for i := range len(r.Text) {
				ids = append(ids, int32(r.Text[i]))
			}
		}
		r.Messages = []engine.Message{{Role: "user", Content: fmt.Sprint(ids)}}
	}
	return g.fakeGenerator.Generate(ctx, r)
}

// newOAIEnv is a gateway whose model is testModel and whose (fake)
// engine's tokenizer makes one token per byte.
func newOAIEnv(t *testing.T, mod func(*Options)) *env {
	t.Helper()
	return newEnv(t, nil, "", func(o *Options) {
		o.ModelName = testModel
		o.Generator = promptFake{o.Generator.(*fakeGenerator)}
		if mod != nil {
			mod(o)
		}
	})
}

// post sends body as JSON with token (none when "") and returns the
// response with its body read.
func (e *env) post(path, token string, body any) (*http.Response, []byte) {
	e.t.Helper()
	var b []byte
	switch v := body.(type) {
	case string:
		b = []byte(v)
	default:
		var err error
		if b, err = json.Marshal(v); err != nil {
			e.t.Fatal(err)
		}
	}
	return e.send(http.MethodPost, path, token, bytes.NewReader(b))
}

// get sends a GET with token (none when "") and returns the response
// with its body read.
func (e *env) get(path, token string) (*http.Response, []byte) {
	e.t.Helper()
	return e.send(http.MethodGet, path, token, nil)
}

// send makes one request with token (none when "") and a JSON body when
// body is not nil, and returns the response with its body read.
func (e *env) send(method, path, token string, body io.Reader) (*http.Response, []byte) {
	e.t.Helper()
	req, err := http.NewRequest(method, e.http.URL+path, body)
	if err != nil {
		e.t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return resp, data
}

// sse splits an event-stream body into its data payloads; it fails on any
// line that is neither "data: …" nor the blank line ending an event.
func sse(t *testing.T, body []byte) []string {
	t.Helper()
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(body))
	blank := true
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			if blank {
				t.Fatalf("have two blank lines in a row in %q", body)
			}
			blank = true
			continue
		}
		d, ok := strings.CutPrefix(line, "data: ")
		if !ok || !blank {
			t.Fatalf("have line %q; want one `data: …` line per event", line)
		}
		blank = false
		out = append(out, d)
	}
	if !blank {
		t.Fatalf("have a last event without its blank line in %q", body)
	}
	return out
}

func keys(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func decodeMap(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("have %q: %v; want a JSON object", b, err)
	}
	return m
}

// checkOAIError checks OpenAI's error shape: exactly message, type, param
// and code under "error".
func checkOAIError(t *testing.T, resp *http.Response, body []byte, status int, typ, code, param string) {
	t.Helper()
	if resp.StatusCode != status {
		t.Fatalf("have status %d (%s); want %d", resp.StatusCode, body, status)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("have Content-Type %q; want application/json", ct)
	}
	e, ok := decodeMap(t, body)["error"].(map[string]any)
	if !ok {
		t.Fatalf("have %s; want {\"error\":{…}}", body)
	}
	if have, want := keys(e), []string{"code", "message", "param", "type"}; !slices.Equal(have, want) {
		t.Errorf("have error keys %v; want %v", have, want)
	}
	if msg, _ := e["message"].(string); msg == "" {
		t.Errorf("have message %v; want text", e["message"])
	}
	if e["type"] != typ {
		t.Errorf("have type %v; want %s", e["type"], typ)
	}
	wantOrNull := func(name, want string) {
		if want == "" {
			if e[name] != nil {
				t.Errorf("have %s %v; want null", name, e[name])
			}
		} else if e[name] != want {
			t.Errorf("have %s %v; want %s", name, e[name], want)
		}
	}
	wantOrNull("code", code)
	wantOrNull("param", param)
}

func TestOpenAIChatCompletion(t *testing.T) {
	e := newOAIEnv(t, nil)
	resp, body := e.post("/v1/chat/completions", e.token("alice"), map[string]any{
		"model":    testModel,
		"messages": []map[string]any{{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello there"}},
		"seed":     7, "temperature": 0, "max_tokens": 50,
		"some_future_field": map[string]any{"ignored": true},
	})
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("have %d %s; want 200", resp.StatusCode, body)
	}
	m := decodeMap(t, body)
	if have, want := keys(m), []string{"choices", "created", "id", "model", "object", "seed", "system_fingerprint", "usage"}; !slices.Equal(have, want) {
		t.Errorf("have keys %v; want %v", have, want)
	}
	var r struct {
		ID                string `json:"id"`
		Object            string `json:"object"`
		Created           int64  `json:"created"`
		Model             string `json:"model"`
		SystemFingerprint string `json:"system_fingerprint"`
		Choices           []struct {
			Index   int `json:"index"`
			Message struct {
				Role    string `json:"role"`
				Content string `json:"content"`
			} `json:"message"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
		Usage struct {
			PromptTokens        int `json:"prompt_tokens"`
			CompletionTokens    int `json:"completion_tokens"`
			TotalTokens         int `json:"total_tokens"`
			PromptTokensDetails struct {
				CachedTokens *int `json:"cached_tokens"`
			} `json:"prompt_tokens_details"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(r.ID, "chatcmpl-") || r.Object != "chat.completion" || r.Model != testModel ||
		!strings.HasPrefix(r.SystemFingerprint, "fp_") || time.Since(time.Unix(r.Created, 0)) > time.Minute {
		t.Errorf("have %+v; want a chat.completion of %s", r, testModel)
	}
	if len(r.Choices) != 1 || r.Choices[0].Index != 0 || r.Choices[0].Message.Role != "assistant" ||
		r.Choices[0].Message.Content != fakeReply("hello there") || r.Choices[0].FinishReason != "stop" {
		t.Errorf("have choices %+v; want one assistant reply %q", r.Choices, fakeReply("hello there"))
	}
	choice := m["choices"].([]any)[0].(map[string]any)
	if v, ok := choice["logprobs"]; !ok || v != nil {
		t.Errorf("have logprobs %v (present %v); want null", v, ok)
	}
	if u := r.Usage; u.PromptTokens != 3 || u.CompletionTokens != 4 || u.TotalTokens != 7 || u.PromptTokensDetails.CachedTokens == nil {
		t.Errorf("have usage %+v; want 3 + 4 = 7 with cached_tokens", u)
	}
	req := e.gen.lastRequest()
	want := []engine.Message{{Role: "system", Content: "be brief"}, {Role: "user", Content: "hello there"}}
	if !reflect.DeepEqual(req.Messages, want) || req.Tenant != "acme" || req.User != "alice" || req.MaxTokens != 50 ||
		req.Sample.Temperature != 0 || req.Sample.Seed != 7 {
		t.Errorf("have request %+v; want the messages, acme/alice, 50 tokens, greedy, seed 7", req)
	}
}

// TestOpenAIRequestMapping checks how body fields become the engine's
// request.
func TestOpenAIRequestMapping(t *testing.T) {
	e := newOAIEnv(t, nil)
	if _, err := e.store.Update(context.Background(), "acme", func(tn *tenants.Tenant) error {
		tn.Priority = tenants.Standard
		tn.Limits.MaxContext = 512
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	user := []map[string]any{{"role": "user", "content": "x"}}
	tests := []struct {
		name  string
		body  map[string]any
		check func(r engine.Request) string
	}{
		{"defaults sample at temperature 1 with a random seed", map[string]any{"messages": user},
			func(r engine.Request) string {
				if r.Sample.Temperature != 1 || r.MaxTokens != 0 || r.Guided != nil || r.Priority != engine.Standard || r.Limits.MaxContext != 512 {
					return fmt.Sprintf("%+v", r)
				}
				return ""
			}},
		{"sampling fields", map[string]any{"messages": user, "temperature": 0.5, "top_p": 0.9, "top_k": 40, "min_p": 0.05,
			"presence_penalty": 0.5, "frequency_penalty": -0.5, "repetition_penalty": 1.1, "seed": -1},
			func(r engine.Request) string {
				p := r.Sample
				if p.Temperature != 0.5 || p.TopP != 0.9 || p.TopK != 40 || p.MinP != 0.05 || p.PresencePenalty != 0.5 ||
					p.FrequencyPenalty != -0.5 || p.RepeatPenalty != float32(1.1) || p.Seed != ^uint64(0) {
					return fmt.Sprintf("%+v", p)
				}
				return ""
			}},
		// Empty, they ask for nothing: SDKs and proxies send them so.
		{"empty logit_bias and functions", map[string]any{"messages": user, "logit_bias": map[string]any{}, "functions": []any{}, "function_call": nil},
			func(r engine.Request) string { return "" }},
		{"zero logit_bias", map[string]any{"messages": user, "logit_bias": map[string]any{"7": 0, "9": 0.0}},
			func(r engine.Request) string { return "" }},
		{"user is the session key", map[string]any{"messages": user, "user": "end-user-7"},
			func(r engine.Request) string {
				if r.Session != "openai:end-user-7" || r.User != "alice" {
					return fmt.Sprintf("session %q user %q", r.Session, r.User)
				}
				return ""
			}},
		{"stop as a string", map[string]any{"messages": user, "stop": "END"},
			func(r engine.Request) string {
				if !slices.Equal(r.Stop, []string{"END"}) {
					return fmt.Sprint(r.Stop)
				}
				return ""
			}},
		{"stop as an array without empties", map[string]any{"messages": user, "stop": []string{"a", "", "b"}},
			func(r engine.Request) string {
				if !slices.Equal(r.Stop, []string{"a", "b"}) {
					return fmt.Sprint(r.Stop)
				}
				return ""
			}},
		{"max_completion_tokens wins over max_tokens", map[string]any{"messages": user, "max_tokens": 5, "max_completion_tokens": 9},
			func(r engine.Request) string {
				if r.MaxTokens != 9 {
					return fmt.Sprint(r.MaxTokens)
				}
				return ""
			}},
		{"priority lowered", map[string]any{"messages": user, "priority": "batch"},
			func(r engine.Request) string {
				if r.Priority != engine.Batch {
					return r.Priority.String()
				}
				return ""
			}},
		{"priority never raised", map[string]any{"messages": user, "priority": "interactive"},
			func(r engine.Request) string {
				if r.Priority != engine.Standard {
					return r.Priority.String()
				}
				return ""
			}},
		{"developer is system, content parts are joined", map[string]any{"messages": []map[string]any{
			{"role": "developer", "content": "sys"},
			{"role": "user", "content": []map[string]any{{"type": "text", "text": "a"}, {"type": "text", "text": "b"}}},
			{"role": "assistant", "content": nil},
			{"role": "user", "content": "c", "name": "bob"},
		}},
			func(r engine.Request) string {
				want := []engine.Message{{Role: "system", Content: "sys"}, {Role: "user", Content: "ab"}, {Role: "assistant"}, {Role: "user", Content: "c"}}
				if !reflect.DeepEqual(r.Messages, want) {
					return fmt.Sprint(r.Messages)
				}
				return ""
			}},
		{"json_object is a top-level object", map[string]any{"messages": user, "response_format": map[string]any{"type": "json_object"}},
			func(r engine.Request) string {
				if r.Guided == nil || string(r.Guided.Schema) != `{"type":"object"}` {
					return fmt.Sprint(r.Guided)
				}
				return ""
			}},
		{"a chat is read whole, never trimmed", map[string]any{"messages": user},
			func(r engine.Request) string {
				if !r.KeepTurns {
					return "KeepTurns unset"
				}
				return ""
			}},
		{"json_schema is the schema", map[string]any{"messages": user, "response_format": map[string]any{"type": "json_schema",
			"json_schema": map[string]any{"name": "a", "strict": true, "schema": map[string]any{"type": "object"}}}},
			func(r engine.Request) string {
				if r.Guided == nil || string(r.Guided.Schema) != `{"type":"object"}` {
					return fmt.Sprint(r.Guided)
				}
				return ""
			}},
		{"text format is unguided", map[string]any{"messages": user, "response_format": map[string]any{"type": "text"}, "n": 1, "tools": []any{}},
			func(r engine.Request) string {
				if r.Guided != nil {
					return fmt.Sprint(r.Guided)
				}
				return ""
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := e.post("/v1/chat/completions", e.token("alice"), tt.body)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("have %d %s; want 200", resp.StatusCode, body)
			}
			if bad := tt.check(e.gen.lastRequest()); bad != "" {
				t.Errorf("have %s; want the mapping named by the test", bad)
			}
		})
	}
	// Two unseeded requests draw different seeds.
	e.post("/v1/chat/completions", e.token("alice"), map[string]any{"messages": user})
	s1 := e.gen.lastRequest().Sample.Seed
	e.post("/v1/chat/completions", e.token("alice"), map[string]any{"messages": user})
	if s2 := e.gen.lastRequest().Sample.Seed; s1 == s2 {
		t.Errorf("have seed %d twice; want a fresh random seed per request", s1)
	}
}

func TestOpenAIChatStream(t *testing.T) {
	e := newOAIEnv(t, nil)
	msgs := []map[string]any{{"role": "user", "content": "stream me please"}}
	_, whole := e.post("/v1/chat/completions", e.token("alice"), map[string]any{"messages": msgs, "temperature": 0})
	var w struct {
		Choices []struct {
			Message struct{ Content string } `json:"message"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(whole, &w); err != nil || len(w.Choices) != 1 {
		t.Fatalf("have %s, %v; want a completion", whole, err)
	}

	for _, includeUsage := range []bool{false, true} {
		t.Run(fmt.Sprintf("include_usage=%v", includeUsage), func(t *testing.T) {
			body := map[string]any{"messages": msgs, "temperature": 0, "stream": true}
			if includeUsage {
				body["stream_options"] = map[string]any{"include_usage": true}
			}
			resp, raw := e.post("/v1/chat/completions", e.token("alice"), body)
			if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
				t.Fatalf("have %d %q %s; want 200 text/event-stream", resp.StatusCode, resp.Header.Get("Content-Type"), raw)
			}
			events := sse(t, raw)
			if len(events) < 4 || events[len(events)-1] != "[DONE]" {
				t.Fatalf("have events %q; want chunks then [DONE]", events)
			}
			events = events[:len(events)-1]
			var usageChunk map[string]any
			if includeUsage {
				usageChunk, events = decodeMap(t, []byte(events[len(events)-1])), events[:len(events)-1]
			}
			var text strings.Builder
			var id string
			for i, ev := range events {
				m := decodeMap(t, []byte(ev))
				if have, want := keys(m), []string{"choices", "created", "id", "model", "object", "seed", "system_fingerprint"}; includeUsage {
					want = append(want, "usage")
					sort.Strings(want)
					if !slices.Equal(have, want) || m["usage"] != nil {
						t.Fatalf("chunk %d: have %s; want keys %v with usage null", i, ev, want)
					}
				} else if !slices.Equal(have, want) {
					t.Fatalf("chunk %d: have keys %v; want %v", i, have, want)
				}
				if i == 0 {
					id, _ = m["id"].(string)
				}
				if m["object"] != "chat.completion.chunk" || m["id"] != id || !strings.HasPrefix(id, "chatcmpl-") || m["model"] != testModel {
					t.Fatalf("chunk %d: have %s; want a chat.completion.chunk of one id", i, ev)
				}
				choices := m["choices"].([]any)
				if len(choices) != 1 {
					t.Fatalf("chunk %d: have %d choices; want 1", i, len(choices))
				}
				c := choices[0].(map[string]any)
				delta := c["delta"].(map[string]any)
				switch {
				case i == 0:
					if delta["role"] != "assistant" || delta["content"] != "" || c["finish_reason"] != nil {
						t.Fatalf("chunk 0: have %s; want the assistant role with empty content", ev)
					}
				case i == len(events)-1:
					if len(delta) != 0 || c["finish_reason"] != "stop" {
						t.Fatalf("last chunk: have %s; want an empty delta and finish_reason stop", ev)
					}
				default:
					s, ok := delta["content"].(string)
					if !ok || c["finish_reason"] != nil {
						t.Fatalf("chunk %d: have %s; want content and no finish_reason", i, ev)
					}
					text.WriteString(s)
				}
			}
			if text.String() != w.Choices[0].Message.Content {
				t.Errorf("have streamed %q; want the whole response's %q", text.String(), w.Choices[0].Message.Content)
			}
			if includeUsage {
				u, _ := usageChunk["usage"].(map[string]any)
				ch, _ := usageChunk["choices"].([]any)
				words := float64(len(strings.Fields(fakeReply("stream me please"))))
				if ch == nil || len(ch) != 0 || u == nil || u["prompt_tokens"] != 3.0 || u["completion_tokens"] != words || u["total_tokens"] != 3+words {
					t.Errorf("have usage chunk %v; want empty choices and 3 + %v tokens", usageChunk, words)
				}
			}
		})
	}
}

func TestOpenAICompletions(t *testing.T) {
	e := newOAIEnv(t, nil)
	tests := []struct {
		name       string
		prompt     any
		maxTokens  any
		wantPrompt []int32 // as the gateway passes it on
		wantText   string  // for the engine to tokenize
		wantMax    int
	}{
		{"text goes to the engine", "hi", nil, nil, "hi", completionsDefaultMaxTokens},
		{"token ids", []int{5, 6, 7}, 3, []int32{5, 6, 7}, "", 3},
		{"one text in an array", []string{"ab"}, 2, nil, "ab", 2},
		{"one token list in an array", [][]int{{9}}, 1, []int32{9}, "", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := map[string]any{"model": testModel, "prompt": tt.prompt}
			if tt.maxTokens != nil {
				body["max_tokens"] = tt.maxTokens
			}
			resp, raw := e.post("/v1/completions", e.token("alice"), body)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("have %d %s; want 200", resp.StatusCode, raw)
			}
			if r := e.gen.lastRequest(); !slices.Equal(r.Prompt, tt.wantPrompt) || r.Text != tt.wantText || r.MaxTokens != tt.wantMax {
				t.Errorf("have prompt %v text %q max %d; want %v %q max %d", r.Prompt, r.Text, r.MaxTokens, tt.wantPrompt, tt.wantText, tt.wantMax)
			}
			var r struct {
				ID      string `json:"id"`
				Object  string `json:"object"`
				Choices []struct {
					Text         string `json:"text"`
					Index        int    `json:"index"`
					FinishReason string `json:"finish_reason"`
				} `json:"choices"`
				Usage struct {
					TotalTokens int `json:"total_tokens"`
				} `json:"usage"`
			}
			if err := json.Unmarshal(raw, &r); err != nil {
				t.Fatal(err)
			}
			ids := tt.wantPrompt // as the fake engine tokenizes text: a token per byte
			for i := range len(tt.wantText) {
				ids = append(ids, int32(tt.wantText[i]))
			}
			want := fakeReply(fmt.Sprint(ids))
			if !strings.HasPrefix(r.ID, "cmpl-") || r.Object != "text_completion" || len(r.Choices) != 1 ||
				r.Choices[0].Text != want || r.Choices[0].FinishReason != "stop" || r.Usage.TotalTokens == 0 {
				t.Errorf("have %s; want a text_completion of %q", raw, want)
			}
		})
	}

	t.Run("stream", func(t *testing.T) {
		resp, raw := e.post("/v1/completions", e.token("alice"), map[string]any{"prompt": "hi", "stream": true,
			"stream_options": map[string]any{"include_usage": true}})
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("have %d %s; want 200", resp.StatusCode, raw)
		}
		events := sse(t, raw)
		if n := len(events); n < 3 || events[n-1] != "[DONE]" {
			t.Fatalf("have %q; want chunks, usage, [DONE]", events)
		}
		var text strings.Builder
		for i, ev := range events[:len(events)-2] {
			m := decodeMap(t, []byte(ev))
			c := m["choices"].([]any)[0].(map[string]any)
			if m["object"] != "text_completion" {
				t.Fatalf("chunk %d: have %s; want text_completion", i, ev)
			}
			text.WriteString(c["text"].(string))
			if last := i == len(events)-3; (c["finish_reason"] == "stop") != last {
				t.Fatalf("chunk %d: have %s; want finish_reason stop on the last chunk only", i, ev)
			}
		}
		if want := fakeReply(fmt.Sprint([]int32{'h', 'i'})); text.String() != want {
			t.Errorf("have %q; want %q", text.String(), want)
		}
		if u := decodeMap(t, []byte(events[len(events)-2]))["usage"]; u == nil {
			t.Errorf("have %s; want the usage chunk", events[len(events)-2])
		}
	})
}

func TestOpenAIModels(t *testing.T) {
	e := newOAIEnv(t, nil)
	get := e.get
	resp, body := get("/v1/models", e.token("alice"))
	var list struct {
		Object string `json:"object"`
		Data   []struct {
			ID      string `json:"id"`
			Object  string `json:"object"`
			Created int64  `json:"created"`
			OwnedBy string `json:"owned_by"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &list); err != nil || resp.StatusCode != 200 || list.Object != "list" || len(list.Data) != 1 ||
		list.Data[0].ID != testModel || list.Data[0].Object != "model" || list.Data[0].Created == 0 || list.Data[0].OwnedBy == "" {
		t.Fatalf("have %d %s; want a list of %s", resp.StatusCode, body, testModel)
	}
	if resp, body := get("/v1/models/"+testModel, e.token("alice")); resp.StatusCode != 200 || decodeMap(t, body)["id"] != testModel {
		t.Errorf("have %d %s; want the model", resp.StatusCode, body)
	}
	resp, body = get("/v1/models/gpt-4o", e.token("alice"))
	checkOAIError(t, resp, body, 404, oaiInvalidRequest, "model_not_found", "model")
	resp, body = get("/v1/models", "")
	checkOAIError(t, resp, body, 401, oaiInvalidRequest, "invalid_api_key", "")
}

func TestOpenAIErrors(t *testing.T) {
	e := newOAIEnv(t, nil)
	ok := e.token("alice")
	exp := time.Now().Add(time.Minute).Unix()
	expired := signHS(t, "acme-1", e.secret, jwt.MapClaims{"sub": "alice", "aud": "specgate", "exp": time.Now().Add(-time.Hour).Unix()})
	badSig := signHS(t, "acme-1", []byte("not the secret"), jwt.MapClaims{"sub": "alice", "aud": "specgate", "exp": exp})
	user := []map[string]any{{"role": "user", "content": "x"}}
	tests := []struct {
		name   string
		path   string
		token  string
		body   any
		refuse error
		status int
		typ    string
		code   string
		param  string
	}{
		{"missing token", "/v1/chat/completions", "", map[string]any{"messages": user}, nil, 401, oaiInvalidRequest, "invalid_api_key", ""},
		{"expired token", "/v1/chat/completions", expired, map[string]any{"messages": user}, nil, 401, oaiInvalidRequest, "invalid_api_key", ""},
		{"bad signature", "/v1/completions", badSig, map[string]any{"prompt": "x"}, nil, 401, oaiInvalidRequest, "invalid_api_key", ""},
		{"not a JWT", "/v1/chat/completions", "sk-abc", map[string]any{"messages": user}, nil, 401, oaiInvalidRequest, "invalid_api_key", ""},
		{"not JSON", "/v1/chat/completions", ok, "{", nil, 400, oaiInvalidRequest, "", ""},
		{"not JSON: data after the object", "/v1/chat/completions", ok, `{"messages":[{"role":"user","content":"x"}]} {"model":"x"}`, nil, 400, oaiInvalidRequest, "", ""},
		// A valid body over the limit is refused for its size, not read
		// cut short and reported as broken JSON.
		{"body over the limit", "/v1/chat/completions", ok, map[string]any{"messages": []map[string]any{{"role": "user", "content": strings.Repeat("a", oaiMaxBody)}}},
			nil, 413, oaiInvalidRequest, "request_too_large", ""},
		{"wrong type", "/v1/chat/completions", ok, map[string]any{"messages": "hi"}, nil, 400, oaiInvalidRequest, "", "messages"},
		{"wrong nested type", "/v1/chat/completions", ok, map[string]any{"messages": []any{map[string]any{"role": 1}}}, nil, 400, oaiInvalidRequest, "", "messages.role"},
		{"wrong stop", "/v1/chat/completions", ok, map[string]any{"messages": user, "stop": 3}, nil, 400, oaiInvalidRequest, "", "stop"},
		{"unknown model", "/v1/chat/completions", ok, map[string]any{"model": "gpt-4o", "messages": user}, nil, 404, oaiInvalidRequest, "model_not_found", "model"},
		{"no messages", "/v1/chat/completions", ok, map[string]any{"messages": []any{}}, nil, 400, oaiInvalidRequest, "", "messages"},
		{"function role", "/v1/chat/completions", ok, map[string]any{"messages": []map[string]any{{"role": "function", "content": "x"}}}, nil, 400, oaiInvalidRequest, "", "messages[0].role"},
		{"tool call without arguments", "/v1/chat/completions", ok, map[string]any{"messages": []map[string]any{{"role": "assistant", "tool_calls": []map[string]any{{"id": "c", "type": "function", "function": map[string]any{"name": "f", "arguments": "{"}}}}}}, nil, 400, oaiInvalidRequest, "", "messages[0].tool_calls[0].function"},
		{"image content", "/v1/chat/completions", ok, map[string]any{"messages": []map[string]any{{"role": "user", "content": []map[string]any{{"type": "image_url"}}}}}, nil, 400, oaiInvalidRequest, "", "messages"},
		{"n=0", "/v1/chat/completions", ok, map[string]any{"messages": user, "n": 0}, nil, 400, oaiInvalidRequest, "", "n"},
		{"n=17", "/v1/chat/completions", ok, map[string]any{"messages": user, "n": 17}, nil, 400, oaiInvalidRequest, "", "n"},
		{"temperature too high", "/v1/chat/completions", ok, map[string]any{"messages": user, "temperature": 2.5}, nil, 400, oaiInvalidRequest, "", "temperature"},
		{"max_tokens zero", "/v1/chat/completions", ok, map[string]any{"messages": user, "max_tokens": 0}, nil, 400, oaiInvalidRequest, "", "max_tokens"},
		{"logprobs not a boolean", "/v1/chat/completions", ok, map[string]any{"messages": user, "logprobs": 3}, nil, 400, oaiInvalidRequest, "", "logprobs"},
		{"top_logprobs without logprobs", "/v1/chat/completions", ok, map[string]any{"messages": user, "top_logprobs": 2}, nil, 400, oaiInvalidRequest, "", "top_logprobs"},
		{"top_logprobs 21", "/v1/chat/completions", ok, map[string]any{"messages": user, "logprobs": true, "top_logprobs": 21}, nil, 400, oaiInvalidRequest, "", "top_logprobs"},
		{"completion logprobs 6", "/v1/completions", ok, map[string]any{"prompt": "a", "logprobs": 6}, nil, 400, oaiInvalidRequest, "", "logprobs"},
		{"tool without a name", "/v1/chat/completions", ok, map[string]any{"messages": user, "tools": []map[string]any{{"type": "function"}}}, nil, 400, oaiInvalidRequest, "", "tools[0].function.name"},
		{"tool of another type", "/v1/chat/completions", ok, map[string]any{"messages": user, "tools": []map[string]any{{"type": "retrieval"}}}, nil, 400, oaiInvalidRequest, "", "tools[0].type"},
		{"tool_choice names no tool", "/v1/chat/completions", ok, map[string]any{"messages": user, "tools": []map[string]any{{"type": "function", "function": map[string]any{"name": "f"}}},
			"tool_choice": map[string]any{"type": "function", "function": map[string]any{"name": "g"}}}, nil, 400, oaiInvalidRequest, "", "tool_choice"},
		{"tool_choice required without tools", "/v1/chat/completions", ok, map[string]any{"messages": user, "tool_choice": "required"}, nil, 400, oaiInvalidRequest, "", "tool_choice"},
		{"tool_choice unknown", "/v1/chat/completions", ok, map[string]any{"messages": user, "tool_choice": "always"}, nil, 400, oaiInvalidRequest, "", "tool_choice"},
		{"tools with json_object", "/v1/chat/completions", ok, map[string]any{"messages": user, "tools": []map[string]any{{"type": "function", "function": map[string]any{"name": "f"}}},
			"response_format": map[string]any{"type": "json_object"}}, nil, 400, oaiInvalidRequest, "", "response_format"},
		{"unknown priority", "/v1/chat/completions", ok, map[string]any{"messages": user, "priority": "urgent"}, nil, 400, oaiInvalidRequest, "", "priority"},
		{"bad response_format", "/v1/chat/completions", ok, map[string]any{"messages": user, "response_format": map[string]any{"type": "xml"}}, nil, 400, oaiInvalidRequest, "", "response_format.type"},
		{"json_schema without schema", "/v1/chat/completions", ok, map[string]any{"messages": user, "response_format": map[string]any{"type": "json_schema"}}, nil, 400, oaiInvalidRequest, "", "response_format.json_schema.schema"},
		{"no prompt", "/v1/completions", ok, map[string]any{}, nil, 400, oaiInvalidRequest, "", "prompt"},
		{"two prompts", "/v1/completions", ok, map[string]any{"prompt": []string{"a", "b"}}, nil, 400, oaiInvalidRequest, "", "prompt"},
		{"echo", "/v1/completions", ok, map[string]any{"prompt": "a", "echo": true}, nil, 400, oaiInvalidRequest, "", "echo"},
		// Fields that change the output are refused rather than ignored.
		{"logit_bias", "/v1/chat/completions", ok, map[string]any{"messages": user, "logit_bias": map[string]any{"50256": -100}}, nil, 400, oaiInvalidRequest, "", "logit_bias"},
		{"logit_bias (completions)", "/v1/completions", ok, map[string]any{"prompt": "a", "logit_bias": map[string]any{"7": 5}}, nil, 400, oaiInvalidRequest, "", "logit_bias"},
		{"logit_bias not a map", "/v1/chat/completions", ok, map[string]any{"messages": user, "logit_bias": []int{1}}, nil, 400, oaiInvalidRequest, "", "logit_bias"},
		{"functions (deprecated)", "/v1/chat/completions", ok, map[string]any{"messages": user, "functions": []map[string]any{{"name": "f"}}}, nil, 400, oaiInvalidRequest, "", "functions"},
		{"context too long", "/v1/chat/completions", ok, map[string]any{"messages": user},
			&engine.Error{Code: engine.CodeContextTooLong, Message: "prompt of 9000 tokens exceeds 2048"}, 400, oaiInvalidRequest, "context_length_exceeded", "messages"},
		{"context too long (prompt)", "/v1/completions", ok, map[string]any{"prompt": "x"},
			&engine.Error{Code: engine.CodeContextTooLong, Message: "too long"}, 400, oaiInvalidRequest, "context_length_exceeded", "prompt"},
		{"engine refuses guided", "/v1/chat/completions", ok, map[string]any{"messages": user, "response_format": map[string]any{"type": "json_object"}},
			&engine.Error{Code: engine.CodeBadRequest, Message: "guided decoding: unsupported"}, 400, oaiInvalidRequest, "", "response_format"},
		{"engine refuses schema", "/v1/chat/completions", ok, map[string]any{"messages": user, "response_format": map[string]any{"type": "json_schema", "json_schema": map[string]any{"schema": map[string]any{"type": "object"}}}},
			&engine.Error{Code: engine.CodeBadRequest, Message: "guided decoding: unsupported"}, 400, oaiInvalidRequest, "", "response_format.json_schema.schema"},
		{"engine refuses the prompt", "/v1/completions", ok, map[string]any{"prompt": "x"},
			&engine.Error{Code: engine.CodeBadRequest, Message: "token 99999 is outside the vocabulary"}, 400, oaiInvalidRequest, "", "prompt"},
		{"queue full", "/v1/chat/completions", ok, map[string]any{"messages": user},
			&engine.Error{Code: engine.CodeQueueFull, Message: "queue full", Temporary: true}, 429, "requests", "queue_full", ""},
		{"engine over quota", "/v1/chat/completions", ok, map[string]any{"messages": user, "stream": true},
			&engine.Error{Code: engine.CodeOverQuota, Message: "over", Temporary: true}, 429, "requests", "rate_limit_exceeded", ""},
		// The engine's own minute counts tokens: OpenAI's type for that is "tokens".
		{"engine over quota (tokens per minute)", "/v1/chat/completions", ok, map[string]any{"messages": user},
			&engine.Error{Code: engine.CodeOverQuota, Reason: engine.ReasonTokensPerMinute, Message: "tokens per minute exceeded", Temporary: true}, 429, "tokens", "rate_limit_exceeded", ""},
		{"engine stopped", "/v1/chat/completions", ok, map[string]any{"messages": user}, engine.ErrClosed, 503, oaiServerError, "service_unavailable", ""},
		{"internal", "/v1/chat/completions", ok, map[string]any{"messages": user, "stream": true}, errors.New("secret detail"), 500, oaiServerError, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e.gen.refuse = tt.refuse
			defer func() { e.gen.refuse = nil }()
			resp, body := e.post(tt.path, tt.token, tt.body)
			checkOAIError(t, resp, body, tt.status, tt.typ, tt.code, tt.param)
			if retry := resp.Header.Get("Retry-After"); (tt.status == 429 || tt.status == 503) != (retry != "") {
				t.Errorf("have Retry-After %q with status %d; want one exactly on 429 and 503", retry, tt.status)
			}
			if strings.Contains(string(body), "secret detail") || strings.Contains(string(body), "gateway.") {
				t.Errorf("have %s; want internals kept out", body)
			}
			if tt.status == 400 && tt.param == "" && !strings.HasPrefix(tt.name, "not JSON") {
				t.Errorf("the table wants no param for a 400; every refusal of a field names it")
			}
			if id := resp.Header.Get("X-Request-Id"); id == "" {
				t.Errorf("have no X-Request-Id; want one on every response")
			}
		})
	}
}

// TestOpenAIUnknownRoutes checks that routes and methods the server does
// not serve answer in OpenAI's error shape, and that x-request-id is set
// (and echoed when the client sends a plain one).
func TestOpenAIUnknownRoutes(t *testing.T) {
	e := newOAIEnv(t, nil)
	tok := e.token("alice")
	tests := []struct {
		method, path string
		status       int
		code, allow  string
	}{
		{"GET", "/v1/nothing", 404, "unknown_url", ""},
		{"POST", "/v1/embeddings", 404, "unknown_url", ""},
		{"GET", "/v1/chat/completions", 405, "method_not_allowed", "POST"},
		{"DELETE", "/v1/models", 405, "method_not_allowed", "GET, HEAD"},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			req, err := http.NewRequest(tt.method, e.http.URL+tt.path, strings.NewReader("{}"))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Authorization", "Bearer "+tok)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			checkOAIError(t, resp, body, tt.status, oaiInvalidRequest, tt.code, "")
			if have := resp.Header.Get("Allow"); have != tt.allow {
				t.Errorf("have Allow %q; want %q", have, tt.allow)
			}
			if id := resp.Header.Get("X-Request-Id"); !strings.HasPrefix(id, "req_") || len(id) != 36 {
				t.Errorf("have X-Request-Id %q; want req_ and 32 hex digits", id)
			}
		})
	}
	req, _ := http.NewRequest("GET", e.http.URL+"/v1/models", nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("X-Request-Id", "trace-42.a_b")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if id := resp.Header.Get("X-Request-Id"); id != "trace-42.a_b" {
		t.Errorf("have X-Request-Id %q; want the client's echoed", id)
	}
}

// finalErrGen ends every stream with an error after optional deltas, as an
// engine does when a request fails while it runs.
type finalErrGen struct {
	engine.Generator
	deltas []string
	err    error
}

type finalErrStream struct {
	events []engine.Event
}

func (g finalErrGen) Generate(ctx context.Context, r engine.Request) (engine.Events, error) {
	st := &finalErrStream{}
	for i, d := range g.deltas {
		st.events = append(st.events, engine.Event{Seq: i + 1, Text: d})
	}
	st.events = append(st.events, engine.Event{Final: &engine.Final{FinishReason: engine.FinishError, Err: g.err}})
	return st, nil
}

func (s *finalErrStream) Recv(context.Context) (engine.Event, error) {
	if len(s.events) == 0 {
		return engine.Event{}, io.EOF
	}
	ev := s.events[0]
	s.events = s.events[1:]
	return ev, nil
}

func TestOpenAIFailureWhileGenerating(t *testing.T) {
	refusal := &engine.Error{Code: engine.CodeBadRequest, Message: "guided decoding is not supported by this engine yet"}
	user := []map[string]any{{"role": "user", "content": "x"}}

	// Before any text: a proper HTTP error, streaming or not.
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			e := newOAIEnv(t, func(o *Options) { o.Generator = finalErrGen{Generator: o.Generator, err: refusal} })
			resp, body := e.post("/v1/chat/completions", e.token("alice"), map[string]any{"messages": user, "stream": stream})
			checkOAIError(t, resp, body, 400, oaiInvalidRequest, "", "messages")
		})
	}

	// After text has streamed: an error event, then [DONE].
	t.Run("after text", func(t *testing.T) { failAfterText(t, user) })
}

func failAfterText(t *testing.T, user []map[string]any) {
	e := newOAIEnv(t, func(o *Options) {
		o.Generator = finalErrGen{Generator: o.Generator, deltas: []string{"par", "tial"}, err: errors.New("boom")}
	})
	resp, body := e.post("/v1/chat/completions", e.token("alice"), map[string]any{"messages": user, "stream": true})
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("have %d %s; want 200", resp.StatusCode, body)
	}
	events := sse(t, body)
	if n := len(events); n != 5 || events[n-1] != "[DONE]" {
		t.Fatalf("have %q; want role, 2 deltas, error, [DONE]", events)
	}
	var ev struct {
		Error *oaiError `json:"error"`
	}
	if err := json.Unmarshal([]byte(events[3]), &ev); err != nil || ev.Error == nil || ev.Error.Type != oaiServerError {
		t.Errorf("have %s; want a server_error event", events[3])
	}
}

func TestOpenAIQuotas(t *testing.T) {
	user := []map[string]any{{"role": "user", "content": "x"}}
	t.Run("tokens per minute", func(t *testing.T) {
		e := newOAIEnv(t, nil)
		if _, err := e.store.Update(context.Background(), "acme", func(tn *tenants.Tenant) error {
			tn.Limits.TokensPerMinute = 5
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if resp, body := e.post("/v1/chat/completions", e.token("alice"), map[string]any{"messages": user}); resp.StatusCode != 200 {
			t.Fatalf("have %d %s; want the first request served", resp.StatusCode, body)
		}
		// The first used 3 + 3 tokens of the 5 a minute allows.
		resp, body := e.post("/v1/chat/completions", e.token("alice"), map[string]any{"messages": user})
		checkOAIError(t, resp, body, 429, "tokens", "rate_limit_exceeded", "")
		if resp.Header.Get("Retry-After") == "" {
			t.Errorf("have no Retry-After; want one")
		}
		// The socket and the HTTP API share the tenant's minute.
		c := e.login("bob")
		sid := c.createSession("")
		c.send(map[string]any{"type": "chat", "session": sid, "request": "r1", "content": "a"})
		if f := c.read(); f.Type != TypeError || f.Code != CodeOverQuota || f.Reason != ReasonTokensPerMinute {
			t.Errorf("have %+v; want over_quota (tokens_per_minute) on the socket too", f)
		}
	})

	t.Run("concurrent requests", func(t *testing.T) {
		e := newOAIEnv(t, nil)
		if _, err := e.store.Update(context.Background(), "acme", func(tn *tenants.Tenant) error {
			tn.Limits.MaxConcurrent = 1
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		e.gen.gate = make(chan struct{}, 100)
		first := make(chan int, 1)
		go func() {
			req, _ := http.NewRequest(http.MethodPost, e.http.URL+"/v1/chat/completions",
				strings.NewReader(`{"messages":[{"role":"user","content":"x"}]}`))
			req.Header.Set("Authorization", "Bearer "+e.token("alice"))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				first <- 0
				return
			}
			resp.Body.Close()
			first <- resp.StatusCode
		}()
		waitFor(t, func() bool {
			e.gen.mu.Lock()
			defer e.gen.mu.Unlock()
			return len(e.gen.requests) == 1
		})
		resp, body := e.post("/v1/chat/completions", e.token("alice"), map[string]any{"messages": user})
		checkOAIError(t, resp, body, 429, "requests", "rate_limit_exceeded", "")
		for range 10 {
			e.gen.gate <- struct{}{}
		}
		if code := <-first; code != 200 {
			t.Fatalf("have %d; want the first request served", code)
		}
		// Its slot is free again.
		for range 10 {
			e.gen.gate <- struct{}{}
		}
		if resp, body := e.post("/v1/chat/completions", e.token("alice"), map[string]any{"messages": user}); resp.StatusCode != 200 {
			t.Fatalf("have %d %s; want 200 once the slot is free", resp.StatusCode, body)
		}
	})
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestOpenAIDisconnectCancels checks that a client leaving mid-stream
// cancels its generation and frees its slot.
func TestOpenAIDisconnectCancels(t *testing.T) {
	e := newOAIEnv(t, nil)
	if _, err := e.store.Update(context.Background(), "acme", func(tn *tenants.Tenant) error {
		tn.Limits.MaxConcurrent = 1
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	e.gen.gate = make(chan struct{}, 100)
	e.gen.gate <- struct{}{} // one delta, then it waits
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, e.http.URL+"/v1/chat/completions",
		strings.NewReader(`{"stream":true,"messages":[{"role":"user","content":"a long story"}]}`))
	req.Header.Set("Authorization", "Bearer "+e.token("alice"))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	for n := 0; n < 2; { // the role chunk and the first delta
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("have %v; want the first chunks", err)
		}
		if strings.HasPrefix(line, "data: ") {
			n++
		}
	}
	cancel()
	resp.Body.Close()
	var st *fakeStream
	e.gen.mu.Lock()
	for _, s := range e.gen.streams {
		st = s
	}
	e.gen.mu.Unlock()
	select {
	case <-st.ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("have the generation running; want it cancelled when the client left")
	}
	// The slot is released once the handler has ended.
	waitFor(t, func() bool {
		n, err := e.srv.limiter.Held(context.Background(), "acme", tenants.LeaseRequests)
		return err == nil && n == 0
	})
}

// TestOpenAIDrawnSeedSurvivesJavaScript: the seed drawn for an unseeded
// request is what the response says, and a client that parses JSON
// numbers as doubles (JavaScript's SDK, many others) reads it exactly, so
// sending it back reproduces the reply.
func TestOpenAIDrawnSeedSurvivesJavaScript(t *testing.T) {
	e := newOAIEnv(t, nil)
	tok := e.token("alice")
	const maxSafe = 1<<53 - 1 // Number.MAX_SAFE_INTEGER
	for i := range 32 {
		resp, body := e.post("/v1/chat/completions", tok, map[string]any{"messages": []map[string]any{{"role": "user", "content": "x"}}})
		if resp.StatusCode != 200 {
			t.Fatalf("have %d %s; want 200", resp.StatusCode, body)
		}
		var r struct{ Seed json.Number }
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.UseNumber()
		if err := dec.Decode(&r); err != nil {
			t.Fatal(err)
		}
		seed, err := r.Seed.Int64()
		if err != nil {
			t.Fatalf("have seed %q: %v; want an integer", r.Seed, err)
		}
		if seed < -maxSafe || seed > maxSafe {
			t.Fatalf("request %d: have seed %d; want one a double holds exactly (|seed| <= 2^53-1)", i, seed)
		}
		e.gen.mu.Lock()
		drawn := e.gen.requests[len(e.gen.requests)-1].Sample.Seed
		e.gen.mu.Unlock()
		if uint64(seed) != drawn {
			t.Fatalf("have seed %d in the response; the engine sampled with %d", seed, drawn)
		}
	}
}

// reportingFake names its model only once told to, as the cluster client
// does when an engine's heartbeat arrives.
type reportingFake struct {
	promptFake
	mu   sync.Mutex
	card *engine.ModelCard
}

func (g *reportingFake) ServedModel() (engine.ModelCard, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.card == nil {
		return engine.ModelCard{}, false
	}
	return *g.card, true
}

// TestOpenAIModelFromEngines: a gateway without a model of its own names
// the one its engines report, in /v1/models, responses and ready frames,
// and refuses other names; before any engine has said, it takes any name
// rather than refusing the one the engines will serve.
func TestOpenAIModelFromEngines(t *testing.T) {
	var g *reportingFake
	e := newOAIEnv(t, func(o *Options) {
		o.ModelName = ""
		g = &reportingFake{promptFake: o.Generator.(promptFake)}
		o.Generator = g
	})
	tok := e.token("alice")
	user := []map[string]any{{"role": "user", "content": "x"}}
	modelOf := func(path string, body any) string {
		t.Helper()
		resp, b := e.post(path, tok, body)
		if resp.StatusCode != 200 {
			t.Fatalf("have %d %s; want 200", resp.StatusCode, b)
		}
		m, _ := decodeMap(t, b)["model"].(string)
		return m
	}
	listed := func() map[string]any {
		t.Helper()
		resp, b := e.get("/v1/models", tok)
		var list struct{ Data []map[string]any }
		if err := json.Unmarshal(b, &list); resp.StatusCode != 200 || err != nil || len(list.Data) != 1 {
			t.Fatalf("have %d %s; want one model", resp.StatusCode, b)
		}
		return list.Data[0]
	}

	if have := listed()["id"]; have != defaultModelName {
		t.Errorf("no engine yet: have %v listed; want %s", have, defaultModelName)
	}
	if have := modelOf("/v1/chat/completions", map[string]any{"model": "tiny-x", "messages": user}); have != "tiny-x" {
		t.Errorf("no engine yet: have model %q; want the name asked for taken", have)
	}

	g.mu.Lock()
	g.card = &engine.ModelCard{Name: "tiny-x", Arch: "llama", Context: 512, Quantization: "Q8_0"}
	g.mu.Unlock()
	if m := listed(); m["id"] != "tiny-x" || m["arch"] != "llama" || m["context_length"] != float64(512) || m["quantization"] != "Q8_0" {
		t.Errorf("have %v listed; want the engines' model", m)
	}
	if resp, b := e.get("/v1/models/tiny-x", tok); resp.StatusCode != 200 {
		t.Errorf("have %d %s for the engines' model; want 200", resp.StatusCode, b)
	}
	for _, body := range []map[string]any{{"model": "tiny-x", "prompt": "a"}, {"prompt": "a"}} {
		if have := modelOf("/v1/completions", body); have != "tiny-x" {
			t.Errorf("%v: have model %q; want tiny-x", body, have)
		}
	}
	resp, b := e.post("/v1/chat/completions", tok, map[string]any{"model": "gpt-4o", "messages": user})
	checkOAIError(t, resp, b, 404, oaiInvalidRequest, "model_not_found", "model")

	c := e.dial(tok, nil)
	if f := c.read(); f.Type != TypeReady || f.Model == nil || f.Model.Name != "tiny-x" || f.Model.Arch != "llama" {
		t.Errorf("have ready %+v (model %+v); want the engines' model", f, f.Model)
	}
}

// TestOpenAIDefaultModelName: a server with no model name and a generator
// that cannot report one (an embedded engine, say) serves the default
// name and refuses others, as the API documents; only a generator that
// reports its model may leave the name open until it does.
func TestOpenAIDefaultModelName(t *testing.T) {
	e := newOAIEnv(t, func(o *Options) { o.ModelName = "" })
	tok := e.token("alice")
	user := []map[string]any{{"role": "user", "content": "x"}}
	resp, b := e.post("/v1/chat/completions", tok, map[string]any{"model": "gpt-4o", "messages": user})
	checkOAIError(t, resp, b, 404, oaiInvalidRequest, "model_not_found", "model")
	resp, b = e.post("/v1/chat/completions", tok, map[string]any{"model": defaultModelName, "messages": user})
	if resp.StatusCode != 200 {
		t.Fatalf("have %d %s for %s; want 200", resp.StatusCode, b, defaultModelName)
	}
}
