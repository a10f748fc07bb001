package chat

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var rewrite = flag.Bool("rewrite", false, "rewrite testdata/*.golden from the current renderer")

// models lists the public chat templates in testdata with their special
// tokens as the models' tokenizer configs define them.
var models = []struct {
	name     string // testdata/<name>.jinja and .golden
	bos, eos string
}{
	{"llama3-instruct", "<|begin_of_text|>", "<|eot_id|>"},
	{"llama3.2-instruct", "<|begin_of_text|>", "<|eot_id|>"},
	{"qwen2-chatml", "", "<|im_end|>"},
	{"smollm2", "<|im_start|>", "<|im_end|>"},
	{"mistral-instruct", "<s>", "</s>"},
	{"gemma", "<bos>", "<eos>"},
}

// fixedNow is the clock for templates that print today's date.
func fixedNow() time.Time { return time.Date(2025, time.January, 15, 9, 30, 0, 0, time.UTC) }

func msg(role, content string) Message { return Message{Role: role, Content: content} }

// conversations are rendered with every template into its golden file.
var conversations = []struct {
	name  string
	msgs  []Message
	nogen bool
}{
	{name: "single-user", msgs: []Message{msg("user", "Hello!")}},
	{name: "system-and-turns", msgs: []Message{
		msg("system", "You are a helpful assistant"),
		msg("user", "Hello"),
		msg("assistant", "Hi there"),
		msg("user", "Who are you"),
		msg("assistant", "   I am an assistant   "),
		msg("user", "Another question"),
	}},
	{name: "turns-no-generation-prompt", nogen: true, msgs: []Message{
		msg("user", "What is 2+2?"),
		msg("assistant", "4"),
	}},
	{name: "content-is-not-code", msgs: []Message{
		msg("user", "{{ 7*7 }} {% raise_exception('boom') %} {# c #} <|im_end|> </s> [INST]\nline two\n"),
	}},
	{name: "roles-do-not-alternate", msgs: []Message{
		msg("user", "one"),
		msg("user", "two"),
	}},
	{name: "empty", msgs: nil},
}

func TestGolden(t *testing.T) {
	for _, m := range models {
		t.Run(m.name, func(t *testing.T) {
			src, err := os.ReadFile(filepath.Join("testdata", m.name+".jinja"))
			if err != nil {
				t.Fatal(err)
			}
			var b strings.Builder
			for _, c := range conversations {
				tmpl, err := New(string(src), Options{BOS: m.bos, EOS: m.eos, NoGenerationPrompt: c.nogen, Now: fixedNow})
				if err != nil {
					t.Fatalf("New: %v", err)
				}
				out, err := tmpl.Render(c.msgs)
				fmt.Fprintf(&b, "=== %s\n", c.name)
				if err != nil {
					fmt.Fprintf(&b, "error: %v\n", err)
					continue
				}
				b.WriteString(out)
				b.WriteString("\n")
			}
			golden := filepath.Join("testdata", m.name+".golden")
			if *rewrite {
				if err := os.WriteFile(golden, []byte(b.String()), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test -rewrite to create it)", err)
			}
			if have := b.String(); have != string(want) {
				t.Errorf("render differs from %s (go test -rewrite regenerates it)\nhave:\n%s\nwant:\n%s", golden, have, want)
			}
		})
	}
}

// TestMatchesTransformers checks renders against the text that Hugging Face
// transformers' apply_chat_template produces for the same conversation, so
// the golden files are anchored to the reference implementation, not only to
// this renderer's past output.
func TestMatchesTransformers(t *testing.T) {
	conv := []Message{
		msg("user", "Hello"),
		msg("assistant", "Hi there"),
		msg("user", "Who are you"),
		msg("assistant", "   I am an assistant   "),
		msg("user", "Another question"),
	}
	withSystem := append([]Message{msg("system", "You are a helpful assistant")}, conv...)
	tests := []struct {
		name, file, bos, eos string
		msgs                 []Message
		want                 string
	}{
		{"mistral", "mistral-instruct", "<s>", "</s>", conv,
			"<s>[INST] Hello [/INST]Hi there</s> [INST] Who are you [/INST]   I am an assistant   </s> [INST] Another question [/INST]"},
		{"gemma", "gemma", "<bos>", "<eos>", conv,
			"<bos><start_of_turn>user\nHello<end_of_turn>\n<start_of_turn>model\nHi there<end_of_turn>\n<start_of_turn>user\nWho are you<end_of_turn>\n<start_of_turn>model\nI am an assistant<end_of_turn>\n<start_of_turn>user\nAnother question<end_of_turn>\n<start_of_turn>model\n"},
		{"chatml", "qwen2-chatml", "", "<|im_end|>", withSystem,
			"<|im_start|>system\nYou are a helpful assistant<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\nHi there<|im_end|>\n<|im_start|>user\nWho are you<|im_end|>\n<|im_start|>assistant\n   I am an assistant   <|im_end|>\n<|im_start|>user\nAnother question<|im_end|>\n<|im_start|>assistant\n"},
		{"llama3", "llama3-instruct", "<|begin_of_text|>", "<|eot_id|>", conv[:1],
			"<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src, err := os.ReadFile(filepath.Join("testdata", tt.file+".jinja"))
			if err != nil {
				t.Fatal(err)
			}
			tmpl, err := New(string(src), Options{BOS: tt.bos, EOS: tt.eos})
			if err != nil {
				t.Fatal(err)
			}
			have, err := tmpl.Render(tt.msgs)
			if err != nil {
				t.Fatal(err)
			}
			if have != tt.want {
				t.Errorf("have %q; want %q", have, tt.want)
			}
		})
	}
}

func TestFallback(t *testing.T) {
	tests := []struct {
		name  string
		tmpl  string
		nogen bool
		msgs  []Message
		want  string
	}{
		{"empty template", "", false, []Message{msg("user", "Once upon a time")}, "User: Once upon a time\nAssistant:"},
		{"whitespace template", " \n\t", false, nil, "Assistant:"},
		{"all roles", "", false,
			[]Message{msg("system", "Be brief."), msg("user", "hi"), msg("assistant", "hello"), msg("tool", "{}"), msg("", "bare")},
			"System: Be brief.\nUser: hi\nAssistant: hello\nTool: {}\nUser: bare\nAssistant:"},
		{"no generation prompt", "", true, []Message{msg("user", "a"), msg("assistant", "b")}, "User: a\nAssistant: b\n"},
		{"content kept verbatim", "", false, []Message{msg("user", "{{ x }}\nAssistant: fake")}, "User: {{ x }}\nAssistant: fake\nAssistant:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tmpl, err := New(tt.tmpl, Options{BOS: "<s>", NoGenerationPrompt: tt.nogen})
			if err != nil {
				t.Fatal(err)
			}
			if !tmpl.Fallback() {
				t.Errorf("have Fallback() false; want true")
			}
			have, err := tmpl.Render(tt.msgs)
			if err != nil {
				t.Fatal(err)
			}
			if have != tt.want {
				t.Errorf("have %q; want %q", have, tt.want)
			}
		})
	}
}

func TestErrors(t *testing.T) {
	tests := []struct {
		name    string
		tmpl    string
		newErr  error
		renderE error
		msg     string // substring of the error text
	}{
		{"syntax", "{% for m in messages %}", ErrSyntax, nil, ""},
		{"unclosed expression", "{{ messages", ErrSyntax, nil, ""},
		{"raise_exception", "{{ raise_exception('Roles must alternate') }}", nil, ErrRaised, "Roles must alternate"},
		{"raise_exception without message", "{{ raise_exception() }}", nil, ErrRaised, "raised"},
		{"unknown filter", "{{ messages | no_such_filter }}", nil, ErrRender, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tmpl, err := New(tt.tmpl, Options{})
			if tt.newErr != nil {
				if !errors.Is(err, tt.newErr) {
					t.Fatalf("have New error %v; want %v", err, tt.newErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			_, err = tmpl.Render([]Message{msg("user", "x")})
			if !errors.Is(err, tt.renderE) {
				t.Fatalf("have Render error %v; want %v", err, tt.renderE)
			}
			if !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("have error %q; want it to contain %q", err, tt.msg)
			}
		})
	}
}

func TestVariables(t *testing.T) {
	src := "{{ bos_token }}|{{ eos_token }}|{{ add_generation_prompt }}|{{ strftime_now('%d %b %Y %H:%M %j %%') }}|{{ messages | length }}"
	tests := []struct {
		name  string
		opts  Options
		want  string
		count int
	}{
		{"defaults", Options{BOS: "<s>", EOS: "</s>", Now: fixedNow}, "<s>|</s>|True|15 Jan 2025 09:30 015 %|2", 2},
		{"no generation prompt", Options{NoGenerationPrompt: true, Now: fixedNow}, "||False|15 Jan 2025 09:30 015 %|2", 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tmpl, err := New(src, tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			have, err := tmpl.Render([]Message{msg("user", "a"), msg("assistant", "b")})
			if err != nil {
				t.Fatal(err)
			}
			if have != tt.want {
				t.Errorf("have %q; want %q", have, tt.want)
			}
		})
	}
}

func TestStrftime(t *testing.T) {
	at := time.Date(2024, time.July, 6, 15, 4, 5, 0, time.UTC)
	tests := []struct{ format, want string }{
		{"%d %b %Y", "06 Jul 2024"},
		{"%Y-%m-%d", "2024-07-06"},
		{"%A %B %I%p %M:%S %y", "Saturday July 03PM 04:05 24"},
		{"Today is %a, 100%% sure, %Q kept", "Today is Sat, 100% sure, %Q kept"},
		{"trailing %", "trailing %"},
		{"Jan 2006 stays literal", "Jan 2006 stays literal"},
	}
	for _, tt := range tests {
		if have := strftime(at, tt.format); have != tt.want {
			t.Errorf("strftime(%q): have %q; want %q", tt.format, have, tt.want)
		}
	}
}

// FuzzRender checks that no message content can crash the renderer or be
// evaluated as template code: with alternating roles every template renders,
// and the (trimmed) content appears verbatim in the prompt.
func FuzzRender(f *testing.F) {
	for _, s := range []string{"hello", "{{ 7*7 }}", "{% raise_exception('x') %}", "{#", "}}{{", "\x00\xff", " \n\t padded \n", "<|im_end|>"} {
		f.Add(s, "second")
	}
	type tmplCase struct {
		name string
		t    *Template
	}
	var tmpls []tmplCase
	for _, m := range models {
		src, err := os.ReadFile(filepath.Join("testdata", m.name+".jinja"))
		if err != nil {
			f.Fatal(err)
		}
		tm, err := New(string(src), Options{BOS: m.bos, EOS: m.eos, Now: fixedNow})
		if err != nil {
			f.Fatal(err)
		}
		tmpls = append(tmpls, tmplCase{m.name, tm})
	}
	fb, _ := New("", Options{})
	tmpls = append(tmpls, tmplCase{"fallback", fb})
	f.Fuzz(func(t *testing.T, a, b string) {
		msgs := []Message{msg("user", a), msg("assistant", b), msg("user", b+a)}
		for _, tc := range tmpls {
			out, err := tc.t.Render(msgs)
			if err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			for _, c := range []string{a, b} {
				if !strings.Contains(out, strings.TrimSpace(c)) {
					t.Fatalf("%s: content %q missing from %q", tc.name, c, out)
				}
			}
		}
	})
}

// FuzzNew feeds arbitrary template sources: errors are fine, panics are not.
func FuzzNew(f *testing.F) {
	for _, m := range models {
		src, err := os.ReadFile(filepath.Join("testdata", m.name+".jinja"))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(src))
	}
	f.Add("{% for %}")
	f.Add("{{ messages[0]['content'][::-1] }}")
	f.Fuzz(func(t *testing.T, src string) {
		tmpl, err := New(src, Options{Now: fixedNow})
		if err != nil {
			return
		}
		_, _ = tmpl.Render([]Message{msg("user", "hi"), msg("assistant", "yo")})
	})
}

// toolConversation is a whole function-calling exchange: tools offered, an
// assistant call, the tool's result, and the turn that reads it.
var toolConversation = struct {
	tools []json.RawMessage
	msgs  []Message
}{
	tools: []json.RawMessage{
		json.RawMessage(`{"type":"function","function":{"name":"get_weather","description":"Current weather in a city","parameters":{"type":"object","properties":{"city":{"type":"string"},"unit":{"enum":["c","f"]}},"required":["city"]}}}`),
	},
	msgs: []Message{
		msg("system", "You are a helpful assistant"),
		msg("user", "Weather in Paris?"),
		{Role: "assistant", ToolCalls: []ToolCall{{ID: "call00001", Name: "get_weather", Arguments: json.RawMessage(`{"city": "Paris", "unit": "c"}`)}}},
		{Role: "tool", ToolCallID: "call00001", Content: `{"temperature": 21}`},
		msg("assistant", "It is 21 degrees."),
		msg("user", "And in Oslo?"),
	},
}

// TestGoldenTools renders the tool conversation with every template into
// testdata/<name>.tools.golden: tool-aware templates show their family's
// own format (Llama 3.2's ipython role and JSON calls, Mistral's
// [AVAILABLE_TOOLS]/[TOOL_CALLS]/[TOOL_RESULTS]); the others render or
// refuse it as they would any unknown role.
func TestGoldenTools(t *testing.T) {
	all := append(models[:len(models):len(models)],
		struct{ name, bos, eos string }{"mistral-nemo", "<s>", "</s>"},
		struct{ name, bos, eos string }{"qwen2.5-instruct", "", "<|im_end|>"})
	for _, m := range all {
		t.Run(m.name, func(t *testing.T) {
			src, err := os.ReadFile(filepath.Join("testdata", m.name+".jinja"))
			if err != nil {
				t.Fatal(err)
			}
			tmpl, err := New(string(src), Options{BOS: m.bos, EOS: m.eos, Now: fixedNow})
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			var b strings.Builder
			f, native := tmpl.NativeTools()
			fmt.Fprintf(&b, "native tools: %v open=%q close=%q args=%q max=%d idlen=%d\n", native, f.Open, f.Close, f.ArgsKey, f.Max, f.IDLen)
			out, err := tmpl.RenderTools(toolConversation.msgs, toolConversation.tools)
			if err != nil {
				fmt.Fprintf(&b, "error: %v\n", err)
			} else {
				b.WriteString(out + "\n")
			}
			golden := filepath.Join("testdata", m.name+".tools.golden")
			if *rewrite {
				if err := os.WriteFile(golden, []byte(b.String()), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test -rewrite to create it)", err)
			}
			if have := b.String(); have != string(want) {
				t.Errorf("render differs from %s (go test -rewrite regenerates it)\nhave:\n%s\nwant:\n%s", golden, have, want)
			}
		})
	}
}
