package gateway

import (
	"slices"
	"testing"
)

// parseAll feeds text to a parser in pieces cut at the given positions.
func parseAll(text string, cuts []int) (string, []oaiToolCall) {
	p := &toolParser{}
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
	tests := []struct {
		name    string
		text    string
		content string
		calls   []string // name:arguments
	}{
		{"text", "Hello there", "Hello there", nil},
		{"tag-like text", "<tool", "<tool", nil},
		{"text mentioning a tag later", "Use <tool_call> tags", "Use <tool_call> tags", nil},
		{"one call", call("f", `{"a": 1}`), "", []string{`f:{"a":1}`}},
		{"two calls", call("f", `{}`) + "\n" + call("g", `{"s":"x}"}`), "", []string{`f:{}`, `g:{"s":"x}"}`}},
		{"cut short", call("f", `{}`) + "\n" + toolOpen + `{"name": "g", "argu`, "", []string{`f:{}`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for step := 1; step <= len(tt.text)+1; step++ {
				var cuts []int
				for c := step; c < len(tt.text); c += step {
					cuts = append(cuts, c)
				}
				content, calls := parseAll(tt.text, cuts)
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
	f.Fuzz(func(t *testing.T, text string, step int) {
		step = max(1, step%64)
		var cuts []int
		for c := step; c < len(text); c += step {
			cuts = append(cuts, c)
		}
		c1, k1 := parseAll(text, nil)
		c2, k2 := parseAll(text, cuts)
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
