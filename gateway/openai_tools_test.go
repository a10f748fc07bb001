package gateway

import (
	"slices"
	"testing"

	"github.com/specgate/specgate/engine/model/chat"
)

// parserFormats are the call formats the parser is tested in: the
// fallback (zero value), Llama 3.1+'s bare objects, Mistral's list.
var parserFormats = []chat.CallFormat{
	{},
	{ArgsKey: "parameters", Max: 1},
	{Open: "[TOOL_CALLS][", Close: "]", ArgsKey: "arguments", Max: 1, IDLen: 9},
}

// parseAll feeds text to a parser in pieces cut at the given positions.
func parseAll(f chat.CallFormat, text string, cuts []int) (string, []oaiToolCall) {
	p := &toolParser{f: f}
	var content string
	var calls []oaiToolCall
	prev := 0
	for _, c := range append(slices.Clone(cuts), len(text)) {
		c = min(max(c, prev), len(text))
		got, done := p.feed(text[prev:c])
		content += got
		calls = append(calls, done...)
		prev = c
	}
	return content + p.end(), calls
}

func TestToolParser(t *testing.T) {
	call := func(name, args string) string {
		return toolOpen + `{"name": "` + name + `", "arguments": ` + args + `}` + toolClose
	}
	llama, mistral := parserFormats[1], parserFormats[2]
	tests := []struct {
		name    string
		f       chat.CallFormat
		text    string
		content string
		calls   []string // name:arguments
	}{
		{"llama call", llama, `{"name": "f", "parameters": {"a": [1, "}"]}}`, "", []string{`f:{"a":[1,"}"]}`}},
		{"llama text", llama, "Hi {there}", "Hi {there}", nil},
		{"llama cut short", llama, `{"name": "f", "para`, "", nil},
		{"mistral call", mistral, `[TOOL_CALLS][{"name": "f", "arguments": {"s": "]"}}]`, "", []string{`f:{"s":"]"}`}},
		{"mistral tag-like text", mistral, "[TOOL", "[TOOL", nil},
		{"text", chat.CallFormat{}, "Hello there", "Hello there", nil},
		{"tag-like text", chat.CallFormat{}, "<tool", "<tool", nil},
		{"text mentioning a tag later", chat.CallFormat{}, "Use <tool_call> tags", "Use <tool_call> tags", nil},
		{"one call", chat.CallFormat{}, call("f", `{"a": 1}`), "", []string{`f:{"a":1}`}},
		{"two calls", chat.CallFormat{}, call("f", `{}`) + "\n" + call("g", `{"s":"x}"}`), "", []string{`f:{}`, `g:{"s":"x}"}`}},
		{"cut short", chat.CallFormat{}, call("f", `{}`) + "\n" + toolOpen + `{"name": "g", "argu`, "", []string{`f:{}`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for step := 1; step <= len(tt.text)+1; step++ {
				var cuts []int
				for c := step; c < len(tt.text); c += step {
					cuts = append(cuts, c)
				}
				content, calls := parseAll(tt.f, tt.text, cuts)
				var have []string
				for _, c := range calls {
					have = append(have, c.Function.Name+":"+c.Function.Arguments)
				}
				if content != tt.content || !slices.Equal(have, tt.calls) {
					t.Fatalf("pieces of %d: have %q %q; want %q %q", step, content, have, tt.content, tt.calls)
				}
			}
		})
	}
}

// FuzzToolParser checks that how a stream is cut never changes what the
// parser makes of it, and that it never panics on model output.
func FuzzToolParser(f *testing.F) {
	f.Add(toolOpen+`{"name":"f","arguments":{}}`+toolClose, 3)
	f.Add("plain text", 1)
	f.Add(toolOpen+"{", 2)
	f.Add(`{"name":"f","parameters":{"a":"}"}}`, 4)
	f.Add(`[TOOL_CALLS][{"name":"f","arguments":{}}]`, 5)
	f.Fuzz(func(t *testing.T, text string, step int) {
		f := parserFormats[(step%256+256)%256%len(parserFormats)]
		step = max(1, step%64)
		var cuts []int
		for c := step; c < len(text); c += step {
			cuts = append(cuts, c)
		}
		c1, k1 := parseAll(f, text, nil)
		c2, k2 := parseAll(f, text, cuts)
		if c1 != c2 || len(k1) != len(k2) {
			t.Fatalf("%q: whole gives %q %d calls; in pieces of %d %q %d calls", text, c1, len(k1), step, c2, len(k2))
		}
		for i := range k1 {
			if k1[i].Function != k2[i].Function {
				t.Fatalf("%q: call %d differs", text, i)
			}
		}
	})
}
