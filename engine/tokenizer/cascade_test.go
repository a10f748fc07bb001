package tokenizer

import (
	"slices"
	"testing"
)

// TestCascades checks the regex pre-tokenizers on splits worked out by hand
// from their regexes, covering each bridge cascade.go builds: the cascade
// itself, the collapsed categories, ECMAScript's \s and the emulated
// \s+(?!\S). (The vocab suites cover deepseek-llm, deepseek-coder and
// falcon end to end.)
func TestCascades(t *testing.T) {
	for _, tc := range []struct {
		pre, in string
		want    []string
	}{
		// Punctuation runs first, then GPT-2, then digit runs, then
		// groups of three digits.
		{"default", "Hello, world 12345!!", []string{"Hello", ",", " world", " ", "123", "45", "!!"}},
		{"", "a~b", []string{"a", "~", "b"}},
		{"falcon", "x`y 1234", []string{"x", "`", "y", " ", "123", "4"}},
		// The emulated lookahead gives a space run's last space to the
		// word after it.
		{"deepseek-v3", "Hi  there\n\nok", []string{"Hi", " ", " there", "\n\n", "ok"}},
		{"deepseek-v3", "12345 .Net", []string{"123", "45", " .", "Net"}},
		{"deepseek-v3", "end  ", []string{"end", "  "}},
		{"deepseek-coder", "foo(bar);\n", []string{"foo", "(", "bar", ");", "\n"}},
		{"deepseek-llm", "Hi 你好 123", []string{"Hi", " ", "你好", " ", "123"}},
		// A non-ASCII space counts as \s (it is \v to the regex).
		{"deepseek-coder", "a\u3000b", []string{"a", "\u3000b"}},
		// Text between two matches stays one fragment.
		{"bloom", "Hello, world. (x)", []string{"Hello", ",", " world", ". (", "x", ")"}},
		{"viking", "abc12 d", []string{"abc", "1", "2", " d"}},
		// Tekken splits case runs: capitals then lower case, or the
		// reverse; a lone lower run ends at a capital.
		{"tekken", "HTTPServer camelCase x1/2\n", []string{"HTTPServer", " camel", "Case", " x", "1", "/", "2", "\n"}},
		{"tekken", "Ünïcode  ok", []string{"Ünïcode", " ", " ok"}},
		// Later regexes split what earlier ones matched, as in llama.cpp.
		{"chameleon", "a<sentinel:12>IMGIMGABZ  x7;", []string{"a", "<", "sentinel", ":", "1", "2", ">", "IMGIMGABZ", "  ", "x", "7", ";"}},
	} {
		p, ok := preKinds[tc.pre]
		if !ok {
			t.Fatalf("pre-tokenizer %q unknown", tc.pre)
		}
		have := p.split(tc.in, nil)
		if !slices.Equal(have, tc.want) {
			t.Errorf("%s %q: have %q; want %q", tc.pre, tc.in, have, tc.want)
		}
		if j := join(have); j != tc.in {
			t.Errorf("%s %q: words join to %q", tc.pre, tc.in, j)
		}
	}
}

func join(w []string) string {
	var s string
	for _, x := range w {
		s += x
	}
	return s
}
