package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"unicode/utf8"

	"github.com/specgate/specgate/engine/specmode"
)

// ProtocolVersion is the protocol this gateway speaks (PROTOCOL.md).
const ProtocolVersion = 1

// Client → server frame types.
const (
	TypeAuth          = "auth"
	TypeSessionCreate = "session.create"
	TypeSessionResume = "session.resume"
	TypeSessionGet    = "session.get"
	TypeSessionList   = "session.list"
	TypeSessionRename = "session.rename"
	TypeSessionDelete = "session.delete"
	TypeSessionUpdate = "session.update"
	TypeSessionBranch = "session.branch"
	TypeChat          = "chat"
	TypeCancel        = "cancel"
	TypePing          = "ping"
)

// Server → client frame types.
const (
	TypeReady    = "ready"
	TypeSession  = "session"
	TypeSessions = "sessions"
	TypeDeleted  = "session.deleted"
	TypeDelta    = "delta"
	TypeDone     = "done"
	TypeError    = "error"
	TypePong     = "pong"
)

// Limits on client frames. Longer values are refused with bad_request.
const (
	MaxIDLen      = 128
	MaxTitleLen   = 512
	MaxTokenLen   = 8 << 10
	MaxContentLen = 256 << 10
	MaxStops      = 8
	MaxSystemLen  = 32 << 10
)

// ChatParams are a chat frame's generation parameters. Zero values mean the
// engine's defaults (greedy, up to the context limit).
type ChatParams struct {
	MaxTokens   int     `json:"max_tokens,omitempty"`
	Temperature float32 `json:"temperature,omitempty"`
	TopP        float32 `json:"top_p,omitempty"`
	TopK        int     `json:"top_k,omitempty"`
	MinP        float32 `json:"min_p,omitempty"`
	Seed        uint64  `json:"seed,omitempty"`
	// Priority may lower the tenant's class for this request, never raise it.
	Priority string `json:"priority,omitempty"`
	// Speculate (auto, off, ngram, draft) may narrow the tenant's
	// speculative decoding for this request, never widen it.
	Speculate string          `json:"speculate,omitempty"`
	Schema    json.RawMessage `json:"schema,omitempty"`
	Regex     string          `json:"regex,omitempty"`
	Choices   []string        `json:"choices,omitempty"`
	JSON      bool            `json:"json,omitempty"`
	Stop      []string        `json:"stop,omitempty"`
}

// ClientFrame is any client → server frame; Type says which fields matter.
type ClientFrame struct {
	Type string `json:"type"`
	// V, when set, is the protocol version the client speaks; only 1 is
	// accepted.
	V       int         `json:"v,omitempty"`
	Token   string      `json:"token,omitempty"`
	Title   string      `json:"title,omitempty"`
	Session string      `json:"session,omitempty"`
	Request string      `json:"request,omitempty"`
	After   int         `json:"after,omitempty"`
	Content string      `json:"content,omitempty"`
	Limit   int         `json:"limit,omitempty"`
	Params  *ChatParams `json:"params,omitempty"`
	// Replace (chat) names a turn by its request id: the turn and all
	// after it become a sibling branch and the new turn takes their place
	// (regenerate without content, edit with it). branches.go.
	Replace string `json:"replace,omitempty"`
	// System (session.create, session.update) is the session's system
	// prompt; nil leaves it as it is, "" clears it.
	System *string `json:"system,omitempty"`
	// Branch (session.branch) picks which sibling, 0-based, continues the
	// conversation at the turn named by Request.
	Branch *int `json:"branch,omitempty"`
}

// idPattern is what session and request ids may hold. No ':': ids become
// parts of Redis key names, and a separator inside one could name another
// key (a session's message list, a request's log).
var idPattern = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)

// subPattern is what a JWT sub may hold; it never becomes a key part on its
// own (it follows the tenant id, which has no ':'), so ':' is allowed.
var subPattern = regexp.MustCompile(`^[A-Za-z0-9._:-]+$`)

// DecodeFrame reads and validates one client frame (one JSON object).
// Unknown fields are ignored, so clients may be newer than the gateway;
// unknown types, missing or malformed fields are a *Error with code
// bad_request. On error the frame returned carries only Type and Request,
// when they could be read and the request id is valid, so the error can
// name its request. It never panics, whatever the input.
func DecodeFrame(data []byte) (ClientFrame, error) {
	var f ClientFrame
	if !utf8.Valid(data) {
		return f, badRequest("frame is not UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&f); err != nil {
		return frameIdentity(data), badRequest("frame is not a valid JSON object: " + err.Error())
	}
	if dec.More() {
		return frameIdentity(data), badRequest("trailing data after the frame")
	}
	if err := f.validate(); err != nil {
		return frameIdentity(data), err
	}
	return f, nil
}

// frameIdentity reads just the type and request id of a frame that did not
// decode or validate; a field that is missing, of the wrong type or not a
// valid id is left empty.
func frameIdentity(data []byte) ClientFrame {
	var id struct {
		Type    json.RawMessage `json:"type"`
		Request json.RawMessage `json:"request"`
	}
	var f ClientFrame
	if json.Unmarshal(data, &id) != nil {
		return f
	}
	_ = json.Unmarshal(id.Type, &f.Type)
	if json.Unmarshal(id.Request, &f.Request) != nil || checkID("request", f.Request) != nil {
		f.Request = ""
	}
	return f
}

// Decoded is one frame of a message: the frame, or why it is invalid (then
// Frame holds what DecodeFrame could read of it).
type Decoded struct {
	Frame ClientFrame
	Err   error
}

// DecodeMessage splits one WebSocket message into frames: a message may
// carry several frames separated by newlines (JSON never contains a raw
// newline). Blank lines are skipped. An invalid frame does not stop the
// others: each line is decoded on its own, in order, so a client gets an
// answer (or an error) for every frame it sent.
func DecodeMessage(msg []byte) []Decoded {
	var out []Decoded
	for line := range bytes.SplitSeq(msg, []byte("\n")) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		f, err := DecodeFrame(line)
		out = append(out, Decoded{Frame: f, Err: err})
	}
	if len(out) == 0 {
		return []Decoded{{Err: badRequest("empty message")}}
	}
	return out
}

func (f *ClientFrame) validate() error {
	if f.V != 0 && f.V != ProtocolVersion {
		return badRequest(fmt.Sprintf("protocol version %d is not supported (want %d)", f.V, ProtocolVersion))
	}
	needID := func(name, v string) error {
		if v == "" {
			return badRequest(f.Type + ": missing " + name)
		}
		return checkID(name, v)
	}
	optID := func(name, v string) error {
		if v == "" {
			return nil
		}
		return checkID(name, v)
	}
	if len(f.Title) > MaxTitleLen {
		return badRequest(fmt.Sprintf("title longer than %d bytes", MaxTitleLen))
	}
	if f.System != nil && len(*f.System) > MaxSystemLen {
		return badRequest(fmt.Sprintf("system prompt longer than %d bytes", MaxSystemLen))
	}
	switch f.Type {
	case TypeAuth:
		if f.Token == "" {
			return &Error{Code: CodeUnauthorized, Reason: ReasonMissingToken, Message: "auth: missing token"}
		}
		if len(f.Token) > MaxTokenLen {
			return &Error{Code: CodeUnauthorized, Reason: ReasonMalformedToken, Message: "auth: token too long"}
		}
	case TypeSessionCreate:
		return checkParams(f.Type, f.Params)
	case TypePing:
	case TypeSessionList:
		if f.Limit < 0 {
			return badRequest("session.list: limit must be >= 0")
		}
	case TypeSessionUpdate:
		if err := needID("session", f.Session); err != nil {
			return err
		}
		return checkParams(f.Type, f.Params)
	case TypeSessionBranch:
		if err := needID("session", f.Session); err != nil {
			return err
		}
		if err := needID("request", f.Request); err != nil {
			return err
		}
		if f.Branch == nil || *f.Branch < 0 {
			return badRequest("session.branch: branch must be >= 0")
		}
	case TypeSessionGet, TypeSessionDelete:
		return needID("session", f.Session)
	case TypeSessionRename:
		return needID("session", f.Session)
	case TypeSessionResume:
		if err := needID("session", f.Session); err != nil {
			return err
		}
		if err := optID("request", f.Request); err != nil {
			return err
		}
		if f.After < 0 {
			return badRequest("session.resume: after must be >= 0")
		}
	case TypeChat:
		if err := needID("session", f.Session); err != nil {
			return err
		}
		if err := needID("request", f.Request); err != nil {
			return err
		}
		if err := optID("replace", f.Replace); err != nil {
			return err
		}
		// Without content a replacing chat regenerates the named turn.
		if f.Content == "" && f.Replace == "" {
			return badRequest("chat: missing content")
		}
		if len(f.Content) > MaxContentLen {
			return badRequest(fmt.Sprintf("chat: content longer than %d bytes", MaxContentLen))
		}
		return checkParams(f.Type, f.Params)
	case TypeCancel:
		return needID("request", f.Request)
	case "":
		return badRequest("frame without type")
	default:
		return badRequest(fmt.Sprintf("unknown frame type %q", f.Type))
	}
	return nil
}

// checkParams validates generation parameters, of a chat or stored with a
// session.
func checkParams(typ string, p *ChatParams) error {
	if p == nil {
		return nil
	}
	if p.MaxTokens < 0 || p.TopK < 0 || p.Temperature < 0 || p.TopP < 0 || p.MinP < 0 {
		return badRequest(typ + ": negative parameter")
	}
	if p.TopP > 1 || p.MinP > 1 {
		return badRequest(typ + ": top_p and min_p must be between 0 and 1")
	}
	switch p.Priority {
	case "", "interactive", "standard", "batch":
	default:
		return badRequest(typ + ": priority must be interactive, standard or batch")
	}
	if err := specmode.Check(p.Speculate); err != nil {
		return badRequest(typ + ": speculate: " + err.Error())
	}
	n := 0
	for _, set := range []bool{len(p.Schema) > 0, p.Regex != "", len(p.Choices) > 0, p.JSON} {
		if set {
			n++
		}
	}
	if n > 1 {
		return badRequest(typ + ": at most one of schema, regex, choices and json")
	}
	if len(p.Stop) > MaxStops {
		return badRequest(fmt.Sprintf("%s: at most %d stop strings", typ, MaxStops))
	}
	return nil
}

func checkID(name, v string) error {
	if len(v) > MaxIDLen || !idPattern.MatchString(v) {
		return badRequest(fmt.Sprintf("%s must be 1-%d of A-Z a-z 0-9 . _ -", name, MaxIDLen))
	}
	return nil
}

// Usage and Stats as the done frame carries them.
type (
	Usage struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
		CachedTokens     int `json:"cached_tokens"`
	}
	Stats struct {
		QueueMS         float64 `json:"queue_ms"`
		TTFTMS          float64 `json:"ttft_ms"`
		TokensPerSecond float64 `json:"tokens_per_s"`
		AcceptedPerStep float64 `json:"accepted_per_step"`
		// DraftedTokens are the draft tokens the model verified for the
		// reply, AcceptedTokens those it took: 0 and 0 when it did not
		// speculate.
		DraftedTokens  int `json:"drafted_tokens"`
		AcceptedTokens int `json:"accepted_tokens"`
		// Seed is the seed the reply was sampled with: the request's, or
		// a fresh one drawn when it set none.
		Seed uint64 `json:"seed"`
	}
)

// SessionInfo is a session without its messages, for lists.
type SessionInfo struct {
	ID       string `json:"id"`
	Title    string `json:"title"`
	Created  int64  `json:"created"` // Unix milliseconds
	Updated  int64  `json:"updated"` // Unix milliseconds
	Messages int    `json:"message_count"`
}

// SessionView is a session with its history.
type SessionView struct {
	ID       string    `json:"id"`
	Title    string    `json:"title"`
	Created  int64     `json:"created"`
	Updated  int64     `json:"updated"`
	Messages []Message `json:"messages"`
	// System is the session's system prompt; Params its default
	// generation parameters (session_settings.go).
	System string      `json:"system,omitempty"`
	Params *ChatParams `json:"params,omitempty"`
	// Branches lists the turns that have siblings (regenerated or
	// edited), in message order (branches.go).
	Branches []BranchInfo `json:"branches,omitempty"`
}

// BranchInfo is a branch point: the user message at index At (whose
// request is Request) has Count versions, Current of them (0-based) on
// the live path.
type BranchInfo struct {
	At      int    `json:"at"`
	Request string `json:"request"`
	Count   int    `json:"count"`
	Current int    `json:"current"`
}

// ModelInfo describes the served model for clients (ready, /v1/models).
type ModelInfo struct {
	Name string `json:"name"`
	// Arch is the model family (llama, qwen2, ...).
	Arch string `json:"arch,omitempty"`
	// Context is the context length in tokens.
	Context int `json:"context,omitempty"`
	// Quantization is the weights' type (Q8_0, F16, ...).
	Quantization string `json:"quantization,omitempty"`
	// Demo marks random weights whose answers are noise.
	Demo bool `json:"demo,omitempty"`
}

// ServerFrame is any server → client frame; Type says which fields are set.
type ServerFrame struct {
	Type string `json:"type"`
	// ready
	Tenant   string `json:"tenant,omitempty"`
	User     string `json:"user,omitempty"`
	Protocol int    `json:"protocol,omitempty"`
	// Notice is a server-wide message for the user (e.g. that the model is
	// a demo), shown as a banner.
	Notice string `json:"notice,omitempty"`
	// Model describes the served model (absent when unknown).
	Model *ModelInfo `json:"model,omitempty"`
	// session, sessions, session.deleted
	Session   *SessionView  `json:"session,omitempty"`
	Sessions  []SessionInfo `json:"sessions,omitempty"`
	SessionID string        `json:"session_id,omitempty"`
	// delta, done, error
	Request      string `json:"request,omitempty"`
	Seq          int    `json:"seq,omitempty"`
	Text         string `json:"text,omitempty"`
	FinishReason string `json:"finish_reason,omitempty"`
	Usage        *Usage `json:"usage,omitempty"`
	Stats        *Stats `json:"stats,omitempty"`
	// DroppedMessages (done): how many old messages of the session were
	// left out of the prompt so that it fits the model's context.
	DroppedMessages int `json:"dropped_messages,omitempty"`
	// error
	Code      string `json:"code,omitempty"`
	Reason    string `json:"reason,omitempty"`
	Message   string `json:"message,omitempty"`
	Temporary bool   `json:"temporary,omitempty"`
}

func errorFrame(e *Error, request string) ServerFrame {
	return ServerFrame{Type: TypeError, Code: e.Code, Reason: e.Reason, Message: e.Message, Temporary: e.Temporary, Request: request}
}
