package gateway

// Tool calling (OpenAI's "tools" and "tool_choice").
//
// The tools are described to the model in a system message, in the
// <tools>/<tool_call> convention that Hermes- and Qwen-style chat
// templates use, so any model and template can take them: a call is
//
//	<tool_call>
//	{"name": "<function>", "arguments": {…}}
//	</tool_call>
//
// Generation is guided (engine/guided's Calls): a call's JSON must name
// one of the offered functions and its arguments must satisfy that
// function's parameters schema. tool_choice decides the grammar:
// "required" and a named function allow calls only; "auto" allows either
// calls or text that does not open one; "none" describes no tools and
// guides nothing. parallel_tool_calls false allows one call, else up to
// maxToolCalls. Earlier turns go back to the model the same way: an
// assistant message's tool_calls as <tool_call> blocks, a "tool" message
// as a user turn holding <tool_response> blocks (consecutive ones
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

// toolsPlan is what a request's tools and tool_choice became.
type toolsPlan struct {
	system string         // the system text describing the tools
	guided *engine.Guided // nil: unguided (tool_choice none)
}

// planTools checks tools and tool_choice and builds the prompt text and
// the grammar. A nil plan means no tools are in play.
func planTools(tools []oaiTool, choice json.RawMessage, parallel *bool) (*toolsPlan, *oaiError) {
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
	seen := map[string]bool{}
	var branches []string
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
		if named != "" && name != named {
			continue
		}
		// Refs inside parameters point at the parameters' root: give
		// each its own document by nesting it under $defs.
		branch := fmt.Sprintf(`{"type":"object","properties":{"name":{"const":%q},"arguments":{"$ref":"#/$defs/f%d"}},"required":["name","arguments"],"additionalProperties":false}`, name, i)
		branches = append(branches, branch)
	}
	if named != "" && !seen[named] {
		return nil, oaiInvalid("tool_choice", fmt.Sprintf("tool_choice names function %q, which is not among the tools", named))
	}
	if mode == "none" {
		return &toolsPlan{}, nil
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
	plan := &toolsPlan{guided: &engine.Guided{Schema: json.RawMessage(schema),
		Calls: &guided.Calls{Open: toolOpen, Close: toolClose, Max: calls, Optional: mode == "auto"}}}
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

func newCallID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "call_" + hex.EncodeToString(b[:])
}

// toolParser splits one choice's text, as it streams, into content and
// calls. Text that could still become a call is held until it is decided.
type toolParser struct {
	buf   string
	mode  int // toolUndecided, toolText or toolCalls
	calls []oaiToolCall
}

const (
	toolUndecided = iota
	toolText
	toolCalls
)

// feed takes more text and returns content to emit and calls completed.
func (p *toolParser) feed(text string) (content string, done []oaiToolCall) {
	p.buf += text
	if p.mode == toolUndecided {
		switch {
		case strings.HasPrefix(p.buf, toolOpen):
			p.mode = toolCalls
		case strings.HasPrefix(toolOpen, p.buf):
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
		rest := strings.TrimPrefix(strings.TrimPrefix(p.buf, "\n"), toolOpen)
		if len(rest) == len(strings.TrimPrefix(p.buf, "\n")) {
			return "", done // no complete opening yet
		}
		end := strings.Index(rest, toolClose)
		if end < 0 {
			return "", done
		}
		c, ok := parseCall(rest[:end])
		if !ok {
			return "", done // the grammar makes this unreachable; end() reports the text
		}
		p.calls = append(p.calls, c)
		done = append(done, c)
		p.buf = rest[end+len(toolClose):]
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

func parseCall(s string) (oaiToolCall, bool) {
	var raw struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	}
	if err := json.Unmarshal([]byte(s), &raw); err != nil || raw.Name == "" {
		return oaiToolCall{}, false
	}
	var c oaiToolCall
	c.ID, c.Type = newCallID(), "function"
	c.Function.Name = raw.Name
	var buf bytes.Buffer
	if json.Compact(&buf, raw.Arguments) == nil {
		c.Function.Arguments = buf.String()
	} else {
		c.Function.Arguments = string(raw.Arguments)
	}
	return c, true
}
