package gateway

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/engine/model/chat"
)

// oaiResult is the part of a chat or completion response these tests
// read, whole or assembled from a stream.
type oaiResult struct {
	Choices []oaiResultChoice
	Usage   map[string]any
}

type oaiResultChoice struct {
	Text      string
	Finish    string
	ToolCalls []wireToolCall
	Logprobs  []wireTokenLogprob      // chat
	Legacy    *wireCompletionLogprobs // completions
	NullText  bool                    // chat content was null
}

// The response shapes as OpenAI's API reference writes them, declared
// here with their own JSON names rather than borrowed from the gateway,
// so that a renamed or misspelt key fails these tests.
type wireToolCall struct {
	Index    *int   `json:"index"` // stream deltas only
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

type wireTopLogprob struct {
	Token   string  `json:"token"`
	Logprob float32 `json:"logprob"`
	Bytes   []int   `json:"bytes"`
}

type wireTokenLogprob struct {
	Token       string           `json:"token"`
	Logprob     float32          `json:"logprob"`
	Bytes       []int            `json:"bytes"`
	TopLogprobs []wireTopLogprob `json:"top_logprobs"`
}

type wireChatLogprobs struct {
	Content []wireTokenLogprob `json:"content"`
}

type wireCompletionLogprobs struct {
	Tokens        []string             `json:"tokens"`
	TokenLogprobs []float32            `json:"token_logprobs"`
	TopLogprobs   []map[string]float32 `json:"top_logprobs"`
	TextOffset    []int                `json:"text_offset"`
}

// runOAI posts body and returns the result, assembling streamed chunks by
// choice index the way SDKs do.
func runOAI(t *testing.T, e *env, tok, path string, body map[string]any) oaiResult {
	t.Helper()
	resp, raw := e.post(path, tok, body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: have %d %s; want 200", path, resp.StatusCode, raw)
	}
	type choice struct {
		Index   int `json:"index"`
		Message *struct {
			Content   *string        `json:"content"`
			ToolCalls []wireToolCall `json:"tool_calls"`
		} `json:"message"`
		Delta *struct {
			Content   *string        `json:"content"`
			ToolCalls []wireToolCall `json:"tool_calls"`
		} `json:"delta"`
		Text         *string         `json:"text"`
		Logprobs     json.RawMessage `json:"logprobs"`
		FinishReason *string         `json:"finish_reason"`
	}
	type response struct {
		Choices []choice       `json:"choices"`
		Usage   map[string]any `json:"usage"`
	}
	var res oaiResult
	at := func(i int) *oaiResultChoice {
		for len(res.Choices) <= i {
			res.Choices = append(res.Choices, oaiResultChoice{})
		}
		return &res.Choices[i]
	}
	take := func(c choice) {
		r := at(c.Index)
		if c.FinishReason != nil {
			r.Finish = *c.FinishReason
		}
		switch {
		case c.Message != nil:
			if c.Message.Content == nil {
				r.NullText = true
			} else {
				r.Text += *c.Message.Content
			}
			r.ToolCalls = c.Message.ToolCalls
		case c.Delta != nil:
			if c.Delta.Content != nil {
				r.Text += *c.Delta.Content
			}
			for _, tc := range c.Delta.ToolCalls {
				if tc.Index == nil {
					t.Fatalf("have a tool call delta without index: %+v", tc)
				}
				for len(r.ToolCalls) <= *tc.Index {
					r.ToolCalls = append(r.ToolCalls, wireToolCall{})
				}
				d := &r.ToolCalls[*tc.Index]
				if tc.ID != "" {
					d.ID, d.Type, d.Function.Name = tc.ID, tc.Type, tc.Function.Name
				}
				d.Function.Arguments += tc.Function.Arguments
			}
		case c.Text != nil:
			r.Text += *c.Text
		}
		if len(c.Logprobs) > 0 && string(c.Logprobs) != "null" {
			if strings.Contains(path, "chat") {
				var lp wireChatLogprobs
				if err := json.Unmarshal(c.Logprobs, &lp); err != nil {
					t.Fatal(err)
				}
				r.Logprobs = append(r.Logprobs, lp.Content...)
			} else {
				var lp wireCompletionLogprobs
				if err := json.Unmarshal(c.Logprobs, &lp); err != nil {
					t.Fatal(err)
				}
				if r.Legacy == nil {
					r.Legacy = &wireCompletionLogprobs{}
				}
				r.Legacy.Tokens = append(r.Legacy.Tokens, lp.Tokens...)
				r.Legacy.TokenLogprobs = append(r.Legacy.TokenLogprobs, lp.TokenLogprobs...)
				r.Legacy.TopLogprobs = append(r.Legacy.TopLogprobs, lp.TopLogprobs...)
				r.Legacy.TextOffset = append(r.Legacy.TextOffset, lp.TextOffset...)
			}
		}
	}
	if body["stream"] != true {
		var r response
		if err := json.Unmarshal(raw, &r); err != nil {
			t.Fatal(err)
		}
		for _, c := range r.Choices {
			take(c)
		}
		res.Usage = r.Usage
		return res
	}
	for _, ev := range sse(t, raw) {
		if ev == "[DONE]" {
			continue
		}
		var r response
		if err := json.Unmarshal([]byte(ev), &r); err != nil {
			t.Fatalf("chunk %s: %v", ev, err)
		}
		if strings.Contains(ev, `"error"`) {
			t.Fatalf("have error event %s", ev)
		}
		for _, c := range r.Choices {
			take(c)
		}
		if r.Usage != nil {
			res.Usage = r.Usage
		}
	}
	return res
}

// TestOpenAIChoicesAndLogprobs runs n and logprobs on the real engine:
// choice 0 of n is what n=1 gives with the seed, streams assemble to the
// whole answers, and log probabilities cover the generated text token by
// token with their alternatives.
func TestOpenAIChoicesAndLogprobs(t *testing.T) {
	_, eng := storiesEngine(t)
	e := newEnv(t, nil, "", func(o *Options) {
		o.Generator = eng
		o.ModelName = "stories260K"
	})
	tok := e.token("alice")
	user := []map[string]any{{"role": "user", "content": "Once upon a time"}}

	t.Run("n", func(t *testing.T) {
		body := map[string]any{"messages": user, "n": 3, "temperature": 1, "seed": 7, "max_tokens": 12}
		whole := runOAI(t, e, tok, "/v1/chat/completions", body)
		if len(whole.Choices) != 3 {
			t.Fatalf("have %d choices; want 3", len(whole.Choices))
		}
		var sum float64
		for _, c := range whole.Choices {
			if c.Text == "" || c.Finish == "" {
				t.Errorf("have choice %+v; want text and a finish reason", c)
			}
		}
		sum = whole.Usage["completion_tokens"].(float64)
		if sum < 3 || sum > 36 {
			t.Errorf("have %v completion tokens; want the three choices' sum", sum)
		}
		one := runOAI(t, e, tok, "/v1/chat/completions", map[string]any{"messages": user, "temperature": 1, "seed": 7, "max_tokens": 12})
		if one.Choices[0].Text != whole.Choices[0].Text {
			t.Errorf("have choice 0 %q; want %q as with n=1 and the same seed", whole.Choices[0].Text, one.Choices[0].Text)
		}
		if whole.Choices[0].Text == whole.Choices[1].Text && whole.Choices[1].Text == whole.Choices[2].Text {
			t.Errorf("have three equal sampled choices %q; want each its own seed", whole.Choices[0].Text)
		}
		body["stream"] = true
		streamed := runOAI(t, e, tok, "/v1/chat/completions", body)
		for i := range whole.Choices {
			if streamed.Choices[i].Text != whole.Choices[i].Text || streamed.Choices[i].Finish != whole.Choices[i].Finish {
				t.Errorf("choice %d: have streamed %+v; want %+v", i, streamed.Choices[i], whole.Choices[i])
			}
		}
		legacy := runOAI(t, e, tok, "/v1/completions", map[string]any{"prompt": "The little dog", "n": 2, "best_of": 2, "temperature": 1, "seed": 3, "max_tokens": 8})
		if len(legacy.Choices) != 2 || legacy.Choices[0].Text == "" {
			t.Errorf("have %+v; want two completions", legacy.Choices)
		}
	})

	t.Run("chat logprobs", func(t *testing.T) {
		body := map[string]any{"messages": user, "temperature": 0, "max_tokens": 10, "logprobs": true, "top_logprobs": 3}
		whole := runOAI(t, e, tok, "/v1/chat/completions", body)
		c := whole.Choices[0]
		var text []byte
		for i, lp := range c.Logprobs {
			for _, b := range lp.Bytes {
				text = append(text, byte(b))
			}
			if len(lp.TopLogprobs) != 3 || lp.Logprob > 0 {
				t.Fatalf("token %d: have %+v; want a log probability and 3 alternatives", i, lp)
			}
			if lp.TopLogprobs[0].Token != lp.Token || lp.TopLogprobs[0].Logprob != lp.Logprob {
				t.Errorf("token %d: have %q first among %+v; want the greedy token", i, lp.Token, lp.TopLogprobs)
			}
			if !slices.IsSortedFunc(lp.TopLogprobs, func(a, b wireTopLogprob) int {
				return -cmpFloat(a.Logprob, b.Logprob)
			}) {
				t.Errorf("token %d: have %+v; want alternatives most likely first", i, lp.TopLogprobs)
			}
		}
		if string(text) != c.Text {
			t.Errorf("have token bytes %q; want the text %q", text, c.Text)
		}
		body["stream"] = true
		streamed := runOAI(t, e, tok, "/v1/chat/completions", body)
		have, _ := json.Marshal(streamed.Choices[0].Logprobs)
		want, _ := json.Marshal(c.Logprobs)
		if !bytes.Equal(have, want) {
			t.Errorf("have streamed logprobs %s; want %s", have, want)
		}
		plain := runOAI(t, e, tok, "/v1/chat/completions", map[string]any{"messages": user, "temperature": 0, "max_tokens": 10})
		if plain.Choices[0].Text != c.Text || plain.Choices[0].Logprobs != nil {
			t.Errorf("have %+v without logprobs; want the same text and no logprobs", plain.Choices[0])
		}
	})

	t.Run("completion logprobs", func(t *testing.T) {
		for _, stream := range []bool{false, true} {
			r := runOAI(t, e, tok, "/v1/completions", map[string]any{"prompt": "Once upon a time", "temperature": 0, "max_tokens": 8, "logprobs": 2, "stream": stream})
			c := r.Choices[0]
			lp := c.Legacy
			if lp == nil || len(lp.Tokens) == 0 || len(lp.Tokens) != len(lp.TokenLogprobs) || len(lp.Tokens) != len(lp.TopLogprobs) || len(lp.Tokens) != len(lp.TextOffset) {
				t.Fatalf("stream=%v: have %+v; want parallel lists", stream, lp)
			}
			if strings.Join(lp.Tokens, "") != c.Text {
				t.Errorf("stream=%v: have tokens %q; want them to spell %q", stream, lp.Tokens, c.Text)
			}
			for i := range lp.Tokens {
				if len(lp.TopLogprobs[i]) == 0 || len(lp.TopLogprobs[i]) > 2 || (i > 0 && lp.TextOffset[i] != lp.TextOffset[i-1]+len(lp.Tokens[i-1])) {
					t.Errorf("stream=%v token %d: have top %v offset %d; want at most 2 alternatives and running offsets", stream, i, lp.TopLogprobs[i], lp.TextOffset[i])
				}
			}
		}
	})
}

func cmpFloat(a, b float32) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

var weatherTools = []map[string]any{
	{"type": "function", "function": map[string]any{"name": "get_weather", "description": "Weather in a city",
		"parameters": map[string]any{"type": "object", "properties": map[string]any{
			"city": map[string]any{"type": "string", "minLength": 1, "maxLength": 12},
			"unit": map[string]any{"enum": []string{"celsius", "fahrenheit"}},
		}, "required": []string{"city"}, "additionalProperties": false}}},
	{"type": "function", "function": map[string]any{"name": "add",
		"parameters": map[string]any{"type": "object", "properties": map[string]any{
			"a": map[string]any{"type": "integer", "minimum": 0, "maximum": 1000},
			"b": map[string]any{"type": "integer"},
		}, "required": []string{"a", "b"}}}},
}

// checkCalls validates each call's arguments against its tool's
// parameters with an independent JSON Schema validator.
// callID is OpenAI's call id, or the 9 alphanumerics Mistral's template
// insists on.
var callID = regexp.MustCompile(`^(call_[0-9a-f]{24}|[A-Za-z0-9]{9})$`)

func checkCalls(t *testing.T, calls []wireToolCall, only string) {
	t.Helper()
	for _, tc := range calls {
		if tc.ID == "" || tc.Type != "function" {
			t.Fatalf("have a call with id %q and type %q; want an id and type \"function\"", tc.ID, tc.Type)
		}
		var params any
		for _, tool := range weatherTools {
			f := tool["function"].(map[string]any)
			if f["name"] == tc.Function.Name {
				params = f["parameters"]
			}
		}
		if params == nil || only != "" && tc.Function.Name != only {
			t.Fatalf("have a call to %q; want one of the offered tools (%q)", tc.Function.Name, only)
		}
		if !callID.MatchString(tc.ID) || tc.Type != "function" {
			t.Errorf("have call id %q type %q; want call_… (or Mistral's 9 alphanumerics) and function", tc.ID, tc.Type)
		}
		raw, _ := json.Marshal(params)
		doc, _ := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
		c := jsonschema.NewCompiler()
		if err := c.AddResource("mem://p.json", doc); err != nil {
			t.Fatal(err)
		}
		sch, err := c.Compile("mem://p.json")
		if err != nil {
			t.Fatal(err)
		}
		inst, err := jsonschema.UnmarshalJSON(strings.NewReader(tc.Function.Arguments))
		if err != nil {
			t.Fatalf("arguments %q: %v", tc.Function.Arguments, err)
		}
		if err := sch.Validate(inst); err != nil {
			t.Errorf("arguments %s do not validate: %v", tc.Function.Arguments, err)
		}
	}
}

// TestOpenAITools runs function calling on the real engine: whatever the
// (tiny, untrained for it) model writes, required and named choices give
// calls whose arguments validate, streaming gives the same calls as
// tool_calls deltas, auto gives text or calls, none gives text.
func TestOpenAITools(t *testing.T) {
	_, eng := storiesEngine(t)
	e := newEnv(t, nil, "", func(o *Options) {
		o.Generator = eng
		o.ModelName = "stories260K"
	})
	tok := e.token("alice")
	user := []map[string]any{{"role": "user", "content": "What is the weather in Oslo?"}}
	base := func(extra map[string]any) map[string]any {
		b := map[string]any{"messages": user, "tools": weatherTools, "max_tokens": 120}
		for k, v := range extra {
			b[k] = v
		}
		return b
	}
	for _, seed := range []int{1, 2, 3} {
		r := runOAI(t, e, tok, "/v1/chat/completions", base(map[string]any{"tool_choice": "required", "temperature": 1, "seed": seed, "parallel_tool_calls": false}))
		c := r.Choices[0]
		if c.Finish != "tool_calls" || len(c.ToolCalls) != 1 || !c.NullText {
			t.Fatalf("required, seed %d: have %+v; want one tool call, content null", seed, c)
		}
		checkCalls(t, c.ToolCalls, "")
	}
	// Parallel calls: several, each valid; one cut short by max_tokens is
	// dropped, never shown as text.
	par := runOAI(t, e, tok, "/v1/chat/completions", base(map[string]any{"tool_choice": "required", "temperature": 1, "seed": 5, "n": 2}))
	for _, c := range par.Choices {
		if len(c.ToolCalls) == 0 || c.Text != "" || (c.Finish != "tool_calls" && c.Finish != "length") {
			t.Errorf("parallel: have %+v; want calls only", c)
		}
		checkCalls(t, c.ToolCalls, "")
	}
	named := map[string]any{"type": "function", "function": map[string]any{"name": "add"}}
	whole := runOAI(t, e, tok, "/v1/chat/completions", base(map[string]any{"tool_choice": named, "temperature": 0}))
	if c := whole.Choices[0]; c.Finish != "tool_calls" || len(c.ToolCalls) != 1 {
		t.Fatalf("named: have %+v; want one call to add", c)
	}
	checkCalls(t, whole.Choices[0].ToolCalls, "add")
	streamed := runOAI(t, e, tok, "/v1/chat/completions", base(map[string]any{"tool_choice": named, "temperature": 0, "stream": true}))
	sc := streamed.Choices[0]
	if sc.Finish != "tool_calls" || len(sc.ToolCalls) != 1 || sc.ToolCalls[0].Function != whole.Choices[0].ToolCalls[0].Function || sc.Text != "" {
		t.Errorf("streamed: have %+v; want the whole answer's call %+v", sc, whole.Choices[0].ToolCalls)
	}
	checkCalls(t, sc.ToolCalls, "add")

	for _, seed := range []int{1, 2} {
		r := runOAI(t, e, tok, "/v1/chat/completions", base(map[string]any{"temperature": 1, "seed": seed, "max_tokens": 40}))
		c := r.Choices[0]
		if strings.Contains(c.Text, "<tool_call>") {
			t.Errorf("auto: have text %q with a call left in it", c.Text)
		}
		checkCalls(t, c.ToolCalls, "")
	}
	none := runOAI(t, e, tok, "/v1/chat/completions", base(map[string]any{"tool_choice": "none", "temperature": 0, "max_tokens": 12}))
	if c := none.Choices[0]; len(c.ToolCalls) != 0 || c.Finish == "tool_calls" {
		t.Errorf("none: have %+v; want text only", c)
	}

	// A conversation that already called a tool and has its result.
	call := whole.Choices[0].ToolCalls[0]
	follow := []map[string]any{
		user[0],
		{"role": "assistant", "content": nil, "tool_calls": []map[string]any{{"id": call.ID, "type": "function", "function": map[string]any{"name": call.Function.Name, "arguments": call.Function.Arguments}}}},
		{"role": "tool", "tool_call_id": call.ID, "content": "42"},
	}
	r := runOAI(t, e, tok, "/v1/chat/completions", map[string]any{"messages": follow, "tools": weatherTools, "tool_choice": "none", "temperature": 0, "max_tokens": 8})
	if len(r.Choices) != 1 {
		t.Fatalf("follow-up: have %+v; want an answer", r)
	}
}

// TestOpenAIToolsNativeTemplates serves stories260K with public chat
// templates that render tools themselves (Qwen2.5's <tool_call>, Llama
// 3.2's bare JSON with an ipython role, Mistral Nemo's [TOOL_CALLS]):
// the tools and the tool turns go through the template, calls are
// generated in the family's format and parsed back, and whatever the tiny
// model says, each call's arguments validate against its schema.
func TestOpenAIToolsNativeTemplates(t *testing.T) {
	for _, tt := range []struct{ name, marker string }{
		{"qwen2.5-instruct", "<tool_call>"},
		{"llama3.2-instruct", `"parameters"`},
		{"mistral-nemo", "[TOOL_CALLS]"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			src, err := os.ReadFile(filepath.Join("..", "engine", "model", "chat", "testdata", tt.name+".jinja"))
			if err != nil {
				t.Fatal(err)
			}
			m, eng := storiesEngineWith(t, engine.Options{ChatTemplate: string(src)})
			format, ok := eng.NativeTools()
			if !ok {
				t.Fatalf("template %s: have no native tool format", tt.name)
			}
			e := newEnv(t, nil, "", func(o *Options) {
				o.Generator = eng
				o.ModelName = "stories260K"
				o.ToolFormat = &format
			})
			tok := e.token("alice")
			user := []map[string]any{{"role": "user", "content": "What is the weather in Oslo?"}}
			base := func(extra map[string]any) map[string]any {
				b := map[string]any{"messages": user, "tools": weatherTools, "max_tokens": 120}
				for k, v := range extra {
					b[k] = v
				}
				return b
			}
			var first wireToolCall
			for _, seed := range []int{1, 2} {
				for _, stream := range []bool{false, true} {
					r := runOAI(t, e, tok, "/v1/chat/completions", base(map[string]any{"tool_choice": "required", "temperature": 1, "seed": seed, "stream": stream, "parallel_tool_calls": false}))
					c := r.Choices[0]
					if c.Finish != "tool_calls" || len(c.ToolCalls) != 1 || c.Text != "" {
						t.Fatalf("required, seed %d, stream %v: have %+v; want one tool call", seed, stream, c)
					}
					checkCalls(t, c.ToolCalls, "")
					first = c.ToolCalls[0]
				}
			}
			named := map[string]any{"type": "function", "function": map[string]any{"name": "add"}}
			r := runOAI(t, e, tok, "/v1/chat/completions", base(map[string]any{"tool_choice": named, "temperature": 0}))
			if c := r.Choices[0]; c.Finish != "tool_calls" || len(c.ToolCalls) != 1 {
				t.Fatalf("named: have %+v; want one call to add", c)
			}
			checkCalls(t, r.Choices[0].ToolCalls, "add")
			for _, seed := range []int{1, 2, 3} {
				r := runOAI(t, e, tok, "/v1/chat/completions", base(map[string]any{"temperature": 1, "seed": seed, "max_tokens": 40}))
				c := r.Choices[0]
				if strings.Contains(c.Text, tt.marker) && len(c.ToolCalls) == 0 {
					t.Errorf("auto: have text %q with a call left in it", c.Text)
				}
				checkCalls(t, c.ToolCalls, "")
			}

			// Multi-turn: the call and its result go back through the
			// template, which the prompt's length shows.
			follow := []map[string]any{
				user[0],
				{"role": "assistant", "content": nil, "tool_calls": []map[string]any{{"id": first.ID, "type": "function", "function": map[string]any{"name": first.Function.Name, "arguments": first.Function.Arguments}}}},
				{"role": "tool", "tool_call_id": first.ID, "content": `{"temp": 3}`},
			}
			r = runOAI(t, e, tok, "/v1/chat/completions", map[string]any{"messages": follow, "tools": weatherTools, "tool_choice": "required", "temperature": 1, "seed": 7, "max_tokens": 120})
			checkCalls(t, r.Choices[0].ToolCalls, "")
			tmpl, err := chat.New(string(src), chat.Options{BOS: m.Tokenizer().Token(m.Tokenizer().BOS()), EOS: m.Tokenizer().Token(m.Tokenizer().EOS())})
			if err != nil {
				t.Fatal(err)
			}
			var tools []json.RawMessage
			for _, tool := range weatherTools {
				raw, _ := json.Marshal(tool)
				tools = append(tools, raw)
			}
			text, err := tmpl.RenderTools([]chat.Message{
				{Role: "user", Content: "What is the weather in Oslo?"},
				{Role: "assistant", ToolCalls: []chat.ToolCall{{ID: first.ID, Name: first.Function.Name, Arguments: json.RawMessage(first.Function.Arguments)}}},
				{Role: "tool", ToolCallID: first.ID, Content: `{"temp": 3}`},
			}, tools)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(text, first.Function.Name) || !strings.Contains(text, "temp") {
				t.Fatalf("reference render lacks the call or its result:\n%s", text)
			}
			want := len(m.Tokenizer().EncodeSpecial(text))
			if have, _ := r.Usage["prompt_tokens"].(float64); int(have) != want {
				t.Errorf("follow-up prompt_tokens %v; want %d, the template's render with tools and tool turns", r.Usage["prompt_tokens"], want)
			}
		})
	}
}
