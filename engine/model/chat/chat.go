// Package chat turns a conversation into the prompt text a model was trained
// on, by rendering the model's tokenizer.chat_template (a Jinja template, as
// Hugging Face's apply_chat_template does).
//
// Message contents are passed to the template as data, never as template
// source: a user who types "{{ 7*7 }}" or "{% raise_exception('x') %}" gets
// those characters in the prompt, not their evaluation.
//
// Models without a template (tiny test models such as stories260K) get a plain
// transcript; see Fallback.
package chat

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/ardanlabs/jinja"
)

// Message is one turn of a conversation. Role is usually "system", "user" or
// "assistant"; templates decide what other roles mean (many reject them).
//
// ToolCalls (on an assistant message) and ToolCallID (on a "tool" message)
// carry function calling turns; templates that know tools render them in
// their family's own format.
type Message struct {
	Role       string     `json:"role"`
	Content    string     `json:"content"`
	ToolCalls  []ToolCall `json:"tool_calls,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"`
}

// ToolCall is one function call an assistant made. Arguments is a JSON
// object; templates see it decoded, as Hugging Face's apply_chat_template
// passes it, so that "| tojson" prints it once, not as a quoted string.
type ToolCall struct {
	ID        string          `json:"id,omitempty"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
}

// Options configure a Template. The zero value is valid.
type Options struct {
	// BOS and EOS are the model's special token strings, exposed to the
	// template as bos_token and eos_token ("" when the model has none).
	// The rendered text contains them as text; encode it with a tokenizer
	// that maps special-token text to ids (EncodeSpecial).
	BOS, EOS string
	// NoGenerationPrompt sets add_generation_prompt to false. The zero value
	// (false) adds the generation prompt, which is what serving a chat turn
	// needs: the prompt ends where the assistant's answer begins.
	NoGenerationPrompt bool
	// Now is the clock behind the strftime_now function that some templates
	// (Llama 3.1+) call to print today's date. nil means time.Now. Tests pass
	// a fixed clock so that renders are reproducible.
	Now func() time.Time
}

// Errors. Render's errors wrap one of these; check with errors.Is.
var (
	// ErrSyntax: the template does not parse.
	ErrSyntax = errors.New("chat: template syntax error")
	// ErrRaised: the template called raise_exception, usually because the
	// conversation breaks its rules ("Conversation roles must alternate
	// user/assistant/user/assistant/..."). The message is the client's
	// mistake, so servers report it as a bad request.
	ErrRaised = errors.New("chat: template rejected the conversation")
	// ErrRender: the template failed while running for any other reason
	// (an undefined filter, a type error, a bug in the template).
	ErrRender = errors.New("chat: template render error")
)

// Template renders conversations for one model. It is safe for concurrent
// use: New compiles once and each Render has its own scope.
type Template struct {
	tmpl  *jinja.Template // nil: plain transcript fallback
	opts  Options
	calls *CallFormat // nil: no native tool format known
}

// CallFormat is how a model family writes function calls, so that a server
// can guide and parse them: each call is Open, a JSON object
// {"name": …, ArgsKey: {…}}, then Close; several calls are separated by a
// newline.
type CallFormat struct {
	// Open and Close surround each call. An empty Open means bare JSON
	// objects (Llama 3.1+): text that starts with "{" is then a call.
	Open, Close string
	// ArgsKey names the arguments member: "arguments", or "parameters"
	// as Llama 3.1+ is told to write.
	ArgsKey string
	// Max is how many calls one answer may hold in this format (0: no
	// limit of the format's own).
	Max int
	// IDLen, when not zero, is the length of the alphanumeric call ids the
	// template insists on when calls come back in the history (Mistral: 9).
	IDLen int
}

// callFormats tells families apart by the markup their templates write;
// the first match wins.
var callFormats = []struct {
	marker string
	format CallFormat
}{
	// Hermes, Qwen2.5 and their many fine-tunes.
	{"<tool_call>", CallFormat{Open: "<tool_call>\n", Close: "\n</tool_call>", ArgsKey: "arguments"}},
	// Mistral v0.3, Nemo, Small: one [TOOL_CALLS] list per answer; the
	// grammar writes one call per list.
	{"[TOOL_CALLS]", CallFormat{Open: "[TOOL_CALLS][", Close: "]", ArgsKey: "arguments", Max: 1, IDLen: 9}},
	// Llama 3.1+: custom tools answer a bare JSON object, results come
	// back in the ipython role; the template takes one call per turn.
	{"ipython", CallFormat{ArgsKey: "parameters", Max: 1}},
}

// New compiles a chat template. An empty (or all-whitespace) template selects
// the plain transcript fallback described on Fallback.
func New(template string, opts Options) (*Template, error) {
	t := &Template{opts: opts}
	if strings.TrimSpace(template) == "" {
		return t, nil
	}
	tmpl, err := compile(template)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSyntax, err)
	}
	t.tmpl = tmpl
	if strings.Contains(template, "tools") {
		for _, f := range callFormats {
			if strings.Contains(template, f.marker) {
				t.calls = &f.format
				break
			}
		}
	}
	return t, nil
}

// compile guards against a panic inside the Jinja parser: a model file is
// input, and a bad one must give an error, not take the server down.
func compile(src string) (t *jinja.Template, err error) {
	defer func() {
		if r := recover(); r != nil {
			t, err = nil, fmt.Errorf("parser panic: %v", r)
		}
	}()
	return jinja.Compile(src)
}

// Fallback reports whether t renders the plain transcript because the model
// has no chat template. The transcript is one line group per message,
//
//	System: <content>
//	User: <content>
//	Assistant: <content>
//
// each "<Role>: <content>\n" (the role capitalised as written, so "tool"
// becomes "Tool"), then "Assistant:" when the generation prompt is on. No BOS
// is added: the tokenizer adds its own, as plain-text models expect.
func (t *Template) Fallback() bool { return t.tmpl == nil }

// NativeTools reports whether the template renders tool definitions,
// assistant tool calls and "tool" results itself, in a family format it
// returns (Llama 3.1+, Qwen2.5/Hermes, Mistral). When it does not, callers
// describe tools some other way, e.g. in a system message.
func (t *Template) NativeTools() (CallFormat, bool) {
	if t.calls == nil {
		return CallFormat{}, false
	}
	return *t.calls, true
}

// Render returns the prompt text for messages. Message contents are data to
// the template, never code. The error wraps ErrRaised or ErrRender.
func (t *Template) Render(messages []Message) (string, error) {
	return t.RenderTools(messages, nil)
}

// RenderTools is Render with function definitions, each a JSON object in
// OpenAI's shape ({"type":"function","function":{"name":…,"parameters":…}}),
// passed to the template as its tools variable (left undefined when there
// are none, which is how templates tell a plain chat). The fallback
// transcript ignores them; see NativeTools.
func (t *Template) RenderTools(messages []Message, tools []json.RawMessage) (string, error) {
	if t.tmpl == nil {
		return t.transcript(messages), nil
	}
	msgs := make([]jinja.Value, len(messages))
	for i, m := range messages {
		d := jinja.NewDict()
		d.AsDict().Set("role", jinja.NewString(m.Role))
		d.AsDict().Set("content", jinja.NewString(m.Content))
		if len(m.ToolCalls) > 0 {
			calls := make([]jinja.Value, len(m.ToolCalls))
			for j, c := range m.ToolCalls {
				args, err := decode(c.Arguments)
				if err != nil {
					return "", fmt.Errorf("%w: messages[%d].tool_calls[%d].arguments: %w", ErrRender, i, j, err)
				}
				f := jinja.NewDict()
				f.AsDict().Set("name", jinja.NewString(c.Name))
				f.AsDict().Set("arguments", args)
				call := jinja.NewDict()
				call.AsDict().Set("id", jinja.NewString(c.ID))
				call.AsDict().Set("type", jinja.NewString("function"))
				call.AsDict().Set("function", f)
				calls[j] = call
			}
			d.AsDict().Set("tool_calls", jinja.NewList(calls))
		}
		if m.ToolCallID != "" {
			d.AsDict().Set("tool_call_id", jinja.NewString(m.ToolCallID))
		}
		msgs[i] = d
	}
	now := t.opts.Now
	if now == nil {
		now = time.Now
	}
	data := map[string]jinja.Value{
		"messages":              jinja.NewList(msgs),
		"bos_token":             jinja.NewString(t.opts.BOS),
		"eos_token":             jinja.NewString(t.opts.EOS),
		"add_generation_prompt": jinja.NewBool(!t.opts.NoGenerationPrompt),
		// Our own raise_exception, so that its error is recognisable
		// whatever the library wraps it in.
		"raise_exception": jinja.NewCallable("raise_exception", raiseException),
		"strftime_now": jinja.NewCallable("strftime_now", func(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
			format := "%Y-%m-%d"
			if len(args) > 0 {
				format = text(args[0])
			}
			return jinja.NewString(strftime(now(), format)), nil
		}),
	}
	if len(tools) > 0 {
		list := make([]jinja.Value, len(tools))
		for i, raw := range tools {
			v, err := decode(raw)
			if err != nil {
				return "", fmt.Errorf("%w: tools[%d]: %w", ErrRender, i, err)
			}
			list[i] = v
		}
		data["tools"] = jinja.NewList(list)
	}
	out, err := t.render(data)
	if err != nil {
		var r *raised
		if errors.As(err, &r) {
			return "", fmt.Errorf("%w: %s", ErrRaised, r.msg)
		}
		return "", fmt.Errorf("%w: %w", ErrRender, err)
	}
	return out, nil
}

func (t *Template) render(data map[string]jinja.Value) (out string, err error) {
	defer func() {
		if r := recover(); r != nil {
			out, err = "", fmt.Errorf("renderer panic: %v", r)
		}
	}()
	return t.tmpl.RenderValues(data)
}

// decode turns JSON into template values with object keys in their
// written order, so that a template's "| tojson" prints what was given.
func decode(raw json.RawMessage) (jinja.Value, error) {
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.UseNumber()
	v, err := decodeValue(dec)
	if err != nil {
		return jinja.Undefined(), err
	}
	if dec.More() {
		return jinja.Undefined(), errors.New("trailing data after the JSON value")
	}
	return v, nil
}

func decodeValue(dec *json.Decoder) (jinja.Value, error) {
	tok, err := dec.Token()
	if err != nil {
		return jinja.Undefined(), err
	}
	switch x := tok.(type) {
	case json.Delim:
		switch x {
		case '{':
			d := jinja.NewDict()
			for dec.More() {
				k, err := dec.Token()
				if err != nil {
					return jinja.Undefined(), err
				}
				v, err := decodeValue(dec)
				if err != nil {
					return jinja.Undefined(), err
				}
				d.AsDict().Set(k.(string), v)
			}
			_, err := dec.Token()
			return d, err
		case '[':
			var items []jinja.Value
			for dec.More() {
				v, err := decodeValue(dec)
				if err != nil {
					return jinja.Undefined(), err
				}
				items = append(items, v)
			}
			_, err := dec.Token()
			return jinja.NewList(items), err
		}
		return jinja.Undefined(), fmt.Errorf("unexpected %v", x)
	case json.Number:
		if n, err := x.Int64(); err == nil {
			return jinja.NewInt(n), nil
		}
		f, err := x.Float64()
		return jinja.NewFloat(f), err
	case string:
		return jinja.NewString(x), nil
	case bool:
		return jinja.NewBool(x), nil
	case nil:
		return jinja.FromGoValue(nil), nil
	}
	return jinja.Undefined(), fmt.Errorf("unexpected JSON token %v", tok)
}

// raised is the error our raise_exception returns.
type raised struct{ msg string }

func (r *raised) Error() string { return "raise_exception: " + r.msg }

func raiseException(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	msg := "template raised an exception"
	if len(args) > 0 {
		msg = text(args[0])
	}
	return jinja.Undefined(), &raised{msg: msg}
}

// text is v as Jinja's str() prints it.
func text(v jinja.Value) string {
	if v.IsString() {
		return v.AsString()
	}
	return v.String()
}

func (t *Template) transcript(messages []Message) string {
	var b strings.Builder
	for _, m := range messages {
		b.WriteString(roleLabel(m.Role))
		b.WriteString(": ")
		b.WriteString(m.Content)
		b.WriteByte('\n')
	}
	if !t.opts.NoGenerationPrompt {
		b.WriteString("Assistant:")
	}
	return b.String()
}

// roleLabel capitalises the first letter of role ("" becomes "User", the
// role a bare message most likely has).
func roleLabel(role string) string {
	if role == "" {
		return "User"
	}
	r, n := utf8.DecodeRuneInString(role)
	return string(unicode.ToUpper(r)) + role[n:]
}

// strftime formats t with Python's strftime directives, the ones chat
// templates use. Unknown directives are kept as written, as glibc does.
func strftime(t time.Time, format string) string {
	var b strings.Builder
	for i := 0; i < len(format); i++ {
		c := format[i]
		if c != '%' || i+1 == len(format) {
			b.WriteByte(c)
			continue
		}
		i++
		switch format[i] {
		case 'Y':
			b.WriteString(strconv.Itoa(t.Year()))
		case 'y':
			b.WriteString(t.Format("06"))
		case 'm':
			b.WriteString(t.Format("01"))
		case 'd':
			b.WriteString(t.Format("02"))
		case 'H':
			b.WriteString(t.Format("15"))
		case 'I':
			b.WriteString(t.Format("03"))
		case 'M':
			b.WriteString(t.Format("04"))
		case 'S':
			b.WriteString(t.Format("05"))
		case 'p':
			b.WriteString(t.Format("PM"))
		case 'b':
			b.WriteString(t.Format("Jan"))
		case 'B':
			b.WriteString(t.Format("January"))
		case 'a':
			b.WriteString(t.Format("Mon"))
		case 'A':
			b.WriteString(t.Format("Monday"))
		case 'j':
			fmt.Fprintf(&b, "%03d", t.YearDay())
		case 'Z':
			b.WriteString(t.Format("MST"))
		case 'z':
			b.WriteString(t.Format("-0700"))
		case '%':
			b.WriteByte('%')
		default:
			b.WriteByte('%')
			b.WriteByte(format[i])
		}
	}
	return b.String()
}
