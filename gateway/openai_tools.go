package gateway

// Tool calling (OpenAI's "tools" and "tool_choice").
//
// When the served chat template renders tools itself (Options.ToolFormat,
// from engine.NativeTools: Llama 3.1+, Qwen2.5/Hermes, Mistral), the tools,
// the assistant's earlier tool_calls and the "tool" results go to the
// template as data and calls are generated in the family's own format
// (chat.CallFormat): a bare {"name": …, "parameters": …} for Llama,
// [TOOL_CALLS][…] for Mistral, <tool_call> blocks for Hermes.
//
// Otherwise the tools are described to the model in a system message, in
// the <tools>/<tool_call> convention that Hermes- and Qwen-style chat
// templates use, so any model and template can take them: a call is
//
//	<tool_call>
//	{"name": "<function>", "arguments": {…}}
//	</tool_call>
//
// Either way generation is guided (engine/guided's Calls): a call's JSON must name
// one of the offered functions and its arguments must satisfy that
// function's parameters schema. tool_choice decides the grammar:
// "required" and a named function allow calls only; "auto" allows either
// calls or text that does not open one; "none" describes no tools and
// guides nothing. parallel_tool_calls false allows one call, else up to
// maxToolCalls. Earlier turns go back to the model the same way: an
// assistant message's tool_calls as <tool_call> blocks, a "tool" message
// (without a native template) as a user turn holding <tool_response> blocks (consecutive ones
// merged), since many templates accept only system, user and assistant.

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/engine/guided"
	"github.com/specgate/specgate/engine/model/chat"
)

const (
	toolOpen  = "<tool_call>\n"
	toolClose = "\n</tool_call>"
	// maxToolCalls bounds the calls of one answer (parallel_tool_calls).
	maxToolCalls = 4
	// maxTools bounds the tools of one request.
	maxTools = 128
)

// toolName is OpenAI's rule for function names.
var toolName = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

type oaiTool struct {
	Type     string `json:"type"`
	Function struct {
		Name        string          `json:"name"`
		Description string          `json:"description,omitempty"`
		Parameters  json.RawMessage `json:"parameters,omitempty"`
		Strict      *bool           `json:"strict,omitempty"`
	} `json:"function"`
	// raw is the tool as the client wrote it: a native template prints
	// it, and should print what the client sent, keys in its order.
	raw json.RawMessage
}

func (t *oaiTool) UnmarshalJSON(b []byte) error {
	type plain oaiTool // without this method
	if err := json.Unmarshal(b, (*plain)(t)); err != nil {
		return err
	}
	t.raw = append(json.RawMessage(nil), b...)
	return nil
}

// oaiToolCall is a call in a response, a stream delta or a request's
// assistant message.
type oaiToolCall struct {
	Index    *int   `json:"index,omitempty"` // stream deltas only
	ID       string `json:"id,omitempty"`
	Type     string `json:"type,omitempty"`
	Function struct {
		Name      string `json:"name,omitempty"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// hermesCalls is the call format of the system-message fallback.
var hermesCalls = chat.CallFormat{Open: toolOpen, Close: toolClose, ArgsKey: "arguments"}

// toolsPlan is what a request's tools and tool_choice became.
type toolsPlan struct {
	system string            // the system text describing the tools ("" when native)
	tools  []json.RawMessage // the tools for a native template
	guided *engine.Guided    // nil: unguided (tool_choice none)
	format chat.CallFormat   // how calls are written
}

// parser returns a parser of this plan's call format.
func (p *toolsPlan) parser() *toolParser { return &toolParser{f: p.format} }

// planTools checks tools and tool_choice and builds the prompt text and
// the grammar. A nil plan means no tools are in play. native is the
// template's own call format, nil when it has none.
func planTools(tools []oaiTool, choice json.RawMessage, parallel *bool, native *chat.CallFormat) (*toolsPlan, *oaiError) {
	mode, named := "auto", ""
	if isSet(choice) {
		var s string
		if err := json.Unmarshal(choice, &s); err == nil {
			switch s {
			case "none", "auto", "required":
				mode = s
			default:
				return nil, oaiInvalid("tool_choice", fmt.Sprintf("tool_choice %q: want none, auto, required or a function", s))
			}
		} else {
			var f struct {
				Type     string `json:"type"`
				Function struct {
					Name string `json:"name"`
				} `json:"function"`
			}
			if err := json.Unmarshal(choice, &f); err != nil || f.Type != "function" || f.Function.Name == "" {
				return nil, oaiInvalid("tool_choice", `tool_choice must be none, auto, required or {"type":"function","function":{"name":…}}`)
			}
			mode, named = "function", f.Function.Name
		}
	}
	if len(tools) == 0 {
		if mode == "required" || mode == "function" {
			return nil, oaiInvalid("tool_choice", "tool_choice asks for a tool call but no tools are given")
		}
		return nil, nil
	}
	if len(tools) > maxTools {
		return nil, oaiInvalid("tools", fmt.Sprintf("%d tools; want at most %d", len(tools), maxTools))
	}
	format := hermesCalls
	if native != nil {
		format = *native
	}
	seen := map[string]bool{}
	var branches []string
	var defsNative []json.RawMessage
	var desc bytes.Buffer
	for i, t := range tools {
		param := fmt.Sprintf("tools[%d]", i)
		if t.Type != "function" {
			return nil, oaiInvalid(param+".type", fmt.Sprintf("tool type %q is not supported (want function)", t.Type))
		}
		name := t.Function.Name
		if !toolName.MatchString(name) {
			return nil, oaiInvalid(param+".function.name", fmt.Sprintf("function name %q: want 1 to 64 letters, digits, _ or -", name))
		}
		if seen[name] {
			return nil, oaiInvalid(param+".function.name", fmt.Sprintf("function %q is given twice", name))
		}
		seen[name] = true
		params := t.Function.Parameters
		if !isSet(params) {
			params = json.RawMessage(`{"type":"object","properties":{}}`)
		}
		var probe map[string]any
		if err := json.Unmarshal(params, &probe); err != nil {
			return nil, oaiInvalid(param+".function.parameters", "parameters must be a JSON Schema object")
		}
		line, _ := json.Marshal(map[string]any{"type": "function", "function": map[string]any{
			"name": name, "description": t.Function.Description, "parameters": json.RawMessage(params)}})
		desc.Write(line)
		desc.WriteByte('\n')
		defsNative = append(defsNative, t.raw)
		if named != "" && name != named {
			continue
		}
		// Refs inside parameters point at the parameters' root: give
		// each its own document by nesting it under $defs.
		branch := fmt.Sprintf(`{"type":"object","properties":{"name":{"const":%q},%q:{"$ref":"#/$defs/f%d"}},"required":["name",%[2]q],"additionalProperties":false}`, name, format.ArgsKey, i)
		branches = append(branches, branch)
	}
	if named != "" && !seen[named] {
		return nil, oaiInvalid("tool_choice", fmt.Sprintf("tool_choice names function %q, which is not among the tools", named))
	}
	if mode == "none" {
		return &toolsPlan{format: format}, nil
	}
	defs := make([]string, len(tools))
	for i, t := range tools {
		params := t.Function.Parameters
		if !isSet(params) {
			params = json.RawMessage(`{"type":"object","properties":{}}`)
		}
		defs[i] = fmt.Sprintf(`"f%d":%s`, i, rebaseRefs(params, fmt.Sprintf("#/$defs/f%d", i)))
	}
	schema := fmt.Sprintf(`{"$defs":{%s},"anyOf":[%s]}`, strings.Join(defs, ","), strings.Join(branches, ","))
	calls := maxToolCalls
	if parallel != nil && !*parallel || named != "" {
		calls = 1
	}
	if format.Max > 0 {
		calls = min(calls, format.Max)
	}
	plan := &toolsPlan{format: format, guided: &engine.Guided{Schema: json.RawMessage(schema),
		Calls: &guided.Calls{Open: format.Open, Close: format.Close, Max: calls, Optional: mode == "auto"}}}
	if native != nil {
		// The template describes the tools; named and required are
		// enforced by the grammar alone.
		plan.tools = defsNative
		return plan, nil
	}
	var sys strings.Builder
	sys.WriteString("# Tools\n\nYou can call functions to answer. Their signatures, one JSON object per line:\n<tools>\n")
	sys.Write(desc.Bytes())
	sys.WriteString("</tools>\n\nTo call a function, write only this, once per call:\n<tool_call>\n{\"name\": <function name>, \"arguments\": <arguments as a JSON object>}\n</tool_call>")
	switch {
	case named != "":
		fmt.Fprintf(&sys, "\n\nCall the function %s now.", named)
	case mode == "required":
		sys.WriteString("\n\nAnswer with one or more function calls.")
	}
	plan.system = sys.String()
	return plan, nil
}

// rebaseRefs rewrites a parameters schema's document-local refs ("#…")
// to point under base, where the schema now lives.
func rebaseRefs(schema json.RawMessage, base string) json.RawMessage {
	var v any
	if err := json.Unmarshal(schema, &v); err != nil {
		return schema
	}
	var walk func(x any) any
	walk = func(x any) any {
		switch t := x.(type) {
		case map[string]any:
			for k, e := range t {
				if s, ok := e.(string); ok && k == "$ref" && strings.HasPrefix(s, "#") {
					t[k] = base + s[1:]
					continue
				}
				t[k] = walk(e)
			}
		case []any:
			for i, e := range t {
				t[i] = walk(e)
			}
		}
		return x
	}
	out, err := json.Marshal(walk(v))
	if err != nil {
		return schema
	}
	return out
}

// toolMessages renders the conversation's tool turns as text the model
// reads: tool_calls as <tool_call> blocks after the assistant's text, tool
// results as a user turn of <tool_response> blocks.
func toolMessages(in []engine.Message, calls [][]oaiToolCall, results []bool) []engine.Message {
	var out []engine.Message
	for i, m := range in {
		switch {
		case results[i]:
			block := "<tool_response>\n" + m.Content + "\n</tool_response>"
			if n := len(out); n > 0 && out[n-1].Role == "user" && strings.HasPrefix(out[n-1].Content, "<tool_response>") {
				out[n-1].Content += "\n" + block
				continue
			}
			out = append(out, engine.Message{Role: "user", Content: block})
		case len(calls[i]) > 0:
			var sb strings.Builder
			sb.WriteString(m.Content)
			for j, c := range calls[i] {
				if j > 0 || m.Content != "" {
					sb.WriteString("\n")
				}
				fmt.Fprintf(&sb, "%s{\"name\": %q, \"arguments\": %s}%s", toolOpen, c.Function.Name, c.Function.Arguments, toolClose)
			}
			out = append(out, engine.Message{Role: "assistant", Content: sb.String()})
		default:
			out = append(out, m)
		}
	}
	return out
}

// nativeMessages hands the conversation's tool turns to a template that
// renders them: tool_calls as data, results with their call ids.
func nativeMessages(in []engine.Message, calls [][]oaiToolCall, ids []string) []engine.Message {
	out := make([]engine.Message, len(in))
	for i, m := range in {
		out[i] = m
		out[i].ToolCallID = ids[i]
		for _, c := range calls[i] {
			out[i].ToolCalls = append(out[i].ToolCalls, chat.ToolCall{ID: c.ID, Name: c.Function.Name, Arguments: json.RawMessage(c.Function.Arguments)})
		}
	}
	return out
}

// newCallID makes a call id: OpenAI's call_<hex>, or n alphanumerics when
// the template insists on a length (Mistral's 9).
func newCallID(n int) string {
	if n > 0 {
		const alnum = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
		b := make([]byte, n)
		_, _ = rand.Read(b)
		for i := range b {
			b[i] = alnum[int(b[i])%len(alnum)]
		}
		return string(b)
	}
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "call_" + hex.EncodeToString(b[:])
}

// toolParser splits one choice's text, as it streams, into content and
// calls. Text that could still become a call is held until it is decided.
// f is the call format; the zero value means the <tool_call> fallback.
type toolParser struct {
	f     chat.CallFormat
	buf   string
	mode  int // toolUndecided, toolText or toolCalls
	calls []oaiToolCall
}

const (
	toolUndecided = iota
	toolText
	toolCalls
)

// format is the parser's call format, the fallback's when unset.
func (p *toolParser) format() chat.CallFormat {
	if p.f.ArgsKey == "" {
		return hermesCalls
	}
	return p.f
}

// feed takes more text and returns content to emit and calls completed.
func (p *toolParser) feed(text string) (content string, done []oaiToolCall) {
	f := p.format()
	lead := f.Open
	if lead == "" {
		lead = "{" // bare calls are JSON objects
	}
	p.buf += text
	if p.mode == toolUndecided {
		switch {
		case strings.HasPrefix(p.buf, lead):
			p.mode = toolCalls
		case strings.HasPrefix(lead, p.buf):
			return "", nil // still a prefix of the tag
		default:
			p.mode = toolText
		}
	}
	if p.mode == toolText {
		content, p.buf = p.buf, ""
		return content, nil
	}
	for {
		s := p.buf
		if len(p.calls) > 0 {
			s = strings.TrimPrefix(s, "\n")
		}
		if !strings.HasPrefix(s, f.Open) {
			return "", done // no complete opening yet
		}
		rest := s[len(f.Open):]
		// The call's JSON ends where a decoder says it does; a closing
		// tag's characters may also occur inside the arguments.
		dec := json.NewDecoder(strings.NewReader(rest))
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return "", done // not whole yet; the grammar makes it whole
		}
		after := rest[dec.InputOffset():]
		if !strings.HasPrefix(after, f.Close) {
			return "", done
		}
		c, ok := parseCall(raw, f)
		if !ok {
			return "", done // the grammar makes this unreachable; end() reports the text
		}
		p.calls = append(p.calls, c)
		done = append(done, c)
		p.buf = after[len(f.Close):]
	}
}

// end returns what is left undecided as content: text that only began
// like the opening tag. A call cut short (max_tokens) is dropped: its
// markup is no answer, and finish_reason "length" says it was cut.
func (p *toolParser) end() string {
	rest := p.buf
	p.buf = ""
	if p.mode == toolCalls {
		return ""
	}
	return rest
}

func parseCall(s []byte, f chat.CallFormat) (oaiToolCall, bool) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(s, &raw); err != nil {
		return oaiToolCall{}, false
	}
	var name string
	if err := json.Unmarshal(raw["name"], &name); err != nil || name == "" {
		return oaiToolCall{}, false
	}
	args, ok := raw[f.ArgsKey]
	if !ok {
		return oaiToolCall{}, false
	}
	var c oaiToolCall
	c.ID, c.Type = newCallID(f.IDLen), "function"
	c.Function.Name = name
	var buf bytes.Buffer
	if json.Compact(&buf, args) == nil {
		c.Function.Arguments = buf.String()
	} else {
		c.Function.Arguments = string(args)
	}
	return c, true
}
