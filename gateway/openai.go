package gateway

// The OpenAI-compatible HTTP API, for tools and SDKs written against
// OpenAI's (or vLLM's) server:
//
//	POST /v1/chat/completions   chat; "stream": true answers with SSE
//	POST /v1/completions        raw-prompt completion (legacy API)
//	GET  /v1/models             the served model
//	GET  /v1/models/{model}     one model
//
// Every route needs "Authorization: Bearer <JWT>", verified like the
// socket's: the SDKs' "API key" is the tenant's JWT. A request runs with
// the same tenant, caps (tokens per minute, concurrent requests) and
// scheduler priority as a socket chat; it has no session and stores
// nothing in the history.
//
// Differences from OpenAI, all deliberate:
//   - "model" may be omitted (the served model); another name is 404
//     model_not_found. A gateway without a model (--role=gateway) serves
//     the name its engines report in their heartbeats, and takes any name
//     until one has.
//   - "n" (1 to 16) generates that many choices, each its own engine
//     request; choice i samples with seed+i, so choice 0 is what n=1
//     gives. best_of, when set, must equal n.
//   - "temperature" defaults to 1 as OpenAI's does, so omitting it samples;
//     0 is greedy. Without "seed" a sampled request draws a random seed
//     (53 bits, exact in a double); the response's "seed" says which, to
//     reproduce the reply.
//   - /v1/completions defaults "max_tokens" to 16 as OpenAI's does; chat
//     completions default to the rest of the context.
//   - logprobs / top_logprobs (chat: a boolean and 0 to 20; completions:
//     0 to 5) are the model's own log-softmax over the raw logits, before
//     temperature, penalties and guided masks (vLLM's default).
//   - tools and tool_choice (none, auto, required, a named function) and
//     parallel_tool_calls: see openai_tools.go. Calls stream as
//     tool_calls deltas, one whole call per delta.
//   - echo, suffix, logit_bias and the deprecated functions are refused
//     with 400 rather than silently ignored (empty, or a logit_bias of only
//     zeros, they ask for nothing and pass). Other unknown fields are
//     ignored, as OpenAI does.
//   - "user", when set, becomes the engine request's session key, so one
//     end user's calls (each resending the conversation) share a cache
//     affinity; the JWT's sub stays the user that quotas and logs name.
//   - Extensions (vLLM's names): "top_k", "min_p", "repetition_penalty",
//     and "priority" (interactive, standard, batch), which may lower the
//     tenant's class, never raise it.
//   - "speculate" (auto, off, ngram, draft), specgate's own, narrows the
//     tenant's speculative decoding as the socket's params.speculate does
//     (gateway/PROTOCOL.md): asking for more than the tenant allows
//     decodes plainly; another value is a 400 with param "speculate".
//   - usage.completion_tokens_details reports speculative decoding's drafts
//     in OpenAI's names for predicted outputs: accepted_prediction_tokens
//     (draft tokens the model took) and rejected_prediction_tokens (those
//     it verified and threw away), summed over the choices, 0 and 0 without
//     speculation; streamed with include_usage too. Unlike OpenAI, rejected
//     tokens are not in completion_tokens: they are never charged.
//   - "response_format" json_object (a top-level object) and json_schema
//     become guided decoding.
//   - A conversation longer than the context is refused with
//     context_length_exceeded; the API never drops turns it was sent.
//   - finish_reason is "stop", "length" or "tool_calls". A generation cut short by the
//     server (shutdown, deadline) reports "stop" with the text it had, since
//     OpenAI's enum has no "cancelled"; a client that disconnects cancels
//     its generation and sees nothing more.
//   - A failure after a stream started is sent as one SSE event
//     `data: {"error":{…}}`, then `data: [DONE]`, as vLLM does.
//
// Errors are OpenAI's shape, {"error":{"message","type","param","code"}}:
// 401 invalid_api_key (missing, expired, bad token), 403 tenant disabled,
// 400 invalid_request_error (context_length_exceeded for a prompt too long),
// 413 request_too_large (a body over 8 MiB), 404 model_not_found, 404
// unknown_url, 405 method_not_allowed (with Allow), 429
// rate_limit_exceeded / queue_full with Retry-After (type "tokens" for the
// tokens-per-minute limit, "requests" for the others), 503
// service_unavailable with Retry-After, 500 server_error. A 400 names the
// field at fault in "param" (null only for a body that is not JSON).
// Every /v1/ response carries x-request-id.

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/engine/specmode"
	"github.com/specgate/specgate/tenants"
)

const (
	// oaiMaxBody bounds a request body; long conversations are large, the
	// engine's context limit bounds them anyway.
	oaiMaxBody = 8 << 20
	// completionsDefaultMaxTokens is OpenAI's default for /v1/completions.
	completionsDefaultMaxTokens = 16
	// oaiMaxUser bounds the "user" field.
	oaiMaxUser = 256
)

// OpenAI error types.
const (
	oaiInvalidRequest = "invalid_request_error"
	oaiServerError    = "server_error"
)

// oaiError is an error in OpenAI's shape, with the HTTP status and the
// Retry-After (seconds, 0: none) it is sent with.
type oaiError struct {
	Message    string  `json:"message"`
	Type       string  `json:"type"`
	Param      *string `json:"param"`
	Code       *string `json:"code"`
	status     int
	retryAfter int
}

func (e *oaiError) Error() string { return "gateway: openai: " + e.Type + ": " + e.Message }

func strPtr(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func oaiInvalid(param, msg string) *oaiError {
	return &oaiError{status: http.StatusBadRequest, Type: oaiInvalidRequest, Message: msg, Param: strPtr(param)}
}

// oaiFrom maps a gateway or engine error onto OpenAI's shape. param names
// the field a context-length error or a bad request is about.
func oaiFrom(err error, param string) *oaiError {
	var oe *oaiError
	if errors.As(err, &oe) {
		return oe
	}
	e := clientError(err)
	o := &oaiError{status: httpStatus(e.Code), Message: e.Message, Type: oaiInvalidRequest}
	switch e.Code {
	case CodeUnauthorized:
		o.Code = strPtr("invalid_api_key")
	case CodeForbidden:
		o.Type = "permission_error"
		o.Code = strPtr(e.Reason)
	case CodeNotFound:
		o.Code = strPtr("not_found")
	case CodeContextTooLong:
		o.Code = strPtr("context_length_exceeded")
		o.Param = strPtr(param)
	case CodeOverQuota:
		o.Type = "requests"
		o.Code = strPtr("rate_limit_exceeded")
		o.retryAfter = 1
		if e.Reason == ReasonTokensPerMinute {
			// OpenAI types a token limit "tokens". The window slides over
			// a minute; a few seconds is a fair first wait, and the SDKs
			// back off further on their own.
			o.Type = "tokens"
			o.retryAfter = 5
		}
	case CodeQueueFull:
		o.Type = "requests"
		o.Code = strPtr("queue_full")
		o.retryAfter = 1
	case CodeUnavailable:
		o.Type = oaiServerError
		o.Code = strPtr("service_unavailable")
		o.retryAfter = 1
	case CodeBadRequest:
		o.Param = strPtr(param)
	default:
		o.Type = oaiServerError
	}
	return o
}

func writeOAIError(w http.ResponseWriter, e *oaiError) {
	if e.retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(e.retryAfter))
	}
	if e.status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="specgate"`)
	}
	httpJSON(w, e.status, map[string]any{"error": e})
}

// ---- request bodies ------------------------------------------------------

// oaiStop is "stop": a string, an array of strings, or null.
type oaiStop []string

func (s *oaiStop) UnmarshalJSON(b []byte) error {
	var one string
	if err := json.Unmarshal(b, &one); err == nil {
		*s = nil
		if one != "" {
			*s = oaiStop{one}
		}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return &fieldError{"stop", "stop must be a string or an array of strings"}
	}
	*s = nil
	for _, v := range many {
		if v != "" { // an empty stop string would end every generation at once
			*s = append(*s, v)
		}
	}
	return nil
}

// oaiContent is a message's "content": a string, null, or an array of
// content parts of which only text parts are supported.
type oaiContent string

func (c *oaiContent) UnmarshalJSON(b []byte) error {
	var s *string
	if err := json.Unmarshal(b, &s); err == nil {
		*c = ""
		if s != nil {
			*c = oaiContent(*s)
		}
		return nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(b, &parts); err != nil {
		return &fieldError{"messages", "content must be a string or an array of content parts"}
	}
	var sb strings.Builder
	for _, p := range parts {
		if p.Type != "text" {
			return &fieldError{"messages", fmt.Sprintf("content part type %q is not supported (only text)", p.Type)}
		}
		sb.WriteString(p.Text)
	}
	*c = oaiContent(sb.String())
	return nil
}

type oaiMessage struct {
	Role       string        `json:"role"`
	Content    oaiContent    `json:"content"`
	ToolCalls  []oaiToolCall `json:"tool_calls"`
	ToolCallID string        `json:"tool_call_id"`
}

// oaiPrompt is /v1/completions' "prompt": a string, token ids, or an array
// of one of either (one prompt per request, like n).
type oaiPrompt struct {
	text   string
	tokens []int32
}

func (p *oaiPrompt) UnmarshalJSON(b []byte) error {
	// Each attempt decodes into its own variable: a failed decode may
	// leave a partial value behind.
	*p = oaiPrompt{}
	var text string
	if err := json.Unmarshal(b, &text); err == nil {
		p.text = text
		return nil
	}
	var tokens []int32
	if err := json.Unmarshal(b, &tokens); err == nil {
		p.tokens = tokens
		return nil
	}
	var texts []string
	if err := json.Unmarshal(b, &texts); err == nil {
		if len(texts) != 1 {
			return &fieldError{"prompt", fmt.Sprintf("prompt: %d prompts given; this server takes one per request", len(texts))}
		}
		p.text = texts[0]
		return nil
	}
	var lists [][]int32
	if err := json.Unmarshal(b, &lists); err == nil {
		if len(lists) != 1 {
			return &fieldError{"prompt", fmt.Sprintf("prompt: %d prompts given; this server takes one per request", len(lists))}
		}
		p.tokens = lists[0]
		return nil
	}
	return &fieldError{"prompt", "prompt must be a string, an array of token ids, or an array of one of either"}
}

// oaiCommon are the fields both completion endpoints share.
type oaiCommon struct {
	Model         string `json:"model"`
	Stream        bool   `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	MaxTokens        *int     `json:"max_tokens"`
	Temperature      *float64 `json:"temperature"`
	TopP             *float64 `json:"top_p"`
	N                *int     `json:"n"`
	Stop             oaiStop  `json:"stop"`
	Seed             *int64   `json:"seed"`
	PresencePenalty  *float64 `json:"presence_penalty"`
	FrequencyPenalty *float64 `json:"frequency_penalty"`
	User             string   `json:"user"`
	// Logprobs is a bool in chat and a count in completions.
	Logprobs json.RawMessage `json:"logprobs"`
	// LogitBias is not supported; decoded to refuse it by name.
	LogitBias map[string]float64 `json:"logit_bias"`
	// Extensions, named as vLLM names them.
	TopK              *int     `json:"top_k"`
	MinP              *float64 `json:"min_p"`
	RepetitionPenalty *float64 `json:"repetition_penalty"`
	Priority          string   `json:"priority"`
	Speculate         string   `json:"speculate"`
}

type chatCompletionRequest struct {
	oaiCommon
	Messages            []oaiMessage `json:"messages"`
	MaxCompletionTokens *int         `json:"max_completion_tokens"`
	ResponseFormat      *struct {
		Type       string `json:"type"`
		JSONSchema *struct {
			Name   string          `json:"name"`
			Schema json.RawMessage `json:"schema"`
		} `json:"json_schema"`
	} `json:"response_format"`
	TopLogprobs *int      `json:"top_logprobs"`
	Tools       []oaiTool `json:"tools"`
	// Functions is the deprecated forerunner of tools, not supported.
	Functions         []json.RawMessage `json:"functions"`
	ToolChoice        json.RawMessage   `json:"tool_choice"`
	ParallelToolCalls *bool             `json:"parallel_tool_calls"`
}

type completionRequest struct {
	oaiCommon
	Prompt oaiPrompt `json:"prompt"`
	Echo   bool      `json:"echo"`
	Suffix *string   `json:"suffix"`
	BestOf *int      `json:"best_of"`
}

func decodeOAI(w http.ResponseWriter, r *http.Request, v any) *oaiError {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, oaiMaxBody))
	err := dec.Decode(v)
	if err == nil {
		// One object, as OpenAI reads it: anything after it is an error,
		// not a second request silently dropped.
		if _, next := dec.Token(); next != io.EOF {
			err = next
			if err == nil {
				err = errors.New("data after the top-level object")
			}
		}
	}
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			// Said for what it is: cut short, the body would read as
			// broken JSON.
			return &oaiError{status: http.StatusRequestEntityTooLarge, Type: oaiInvalidRequest, Code: strPtr("request_too_large"),
				Message: fmt.Sprintf("the body is larger than %d MiB", oaiMaxBody>>20)}
		}
		var ute *json.UnmarshalTypeError
		if errors.As(err, &ute) {
			// The shared fields' path starts with the embedded struct's
			// Go name ("oaiCommon.stop"); the client knows only "stop".
			param := strings.TrimPrefix(ute.Field, "oaiCommon.")
			if param == "" {
				return oaiInvalid("", fmt.Sprintf("the body is a JSON %s; want an object", ute.Value))
			}
			return oaiInvalid(param, fmt.Sprintf("%s: have a JSON %s; want %s", param, ute.Value, jsonTypeName(ute.Type)))
		}
		var fe *fieldError
		if errors.As(err, &fe) {
			return oaiInvalid(fe.param, fe.msg)
		}
		return oaiInvalid("", "the body is not valid JSON: "+err.Error())
	}
	return nil
}

// fieldError is a custom decoder's refusal of one field's value; param
// names the field.
type fieldError struct{ param, msg string }

func (e *fieldError) Error() string { return e.msg }

// jsonTypeName names the JSON type a Go type decodes from, so messages
// speak the client's language, not this package's type names.
func jsonTypeName(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t {
	case reflect.TypeFor[oaiStop]():
		return "a string or an array of strings"
	case reflect.TypeFor[oaiContent]():
		return "a string or an array of content parts"
	case reflect.TypeFor[oaiPrompt]():
		return "a string or an array of strings or token ids"
	}
	switch t.Kind() {
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Slice, reflect.Array:
		return "an array of " + strings.TrimPrefix(strings.TrimPrefix(jsonTypeName(t.Elem()), "a "), "an ") + "s"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return "another JSON type"
}

// isSet reports whether a raw JSON field asks for something: present and
// not null, false or 0.
func isSet(raw json.RawMessage) bool {
	switch strings.TrimSpace(string(raw)) {
	case "", "null", "false", "0":
		return false
	}
	return true
}

// engineParams checks the shared fields and fills the engine request's
// sampling, stop, priority and max tokens.
func (c *oaiCommon) engineParams(req *engine.Request, tenantClass string) *oaiError {
	if c.N != nil && (*c.N < 1 || *c.N > maxChoices) {
		return oaiInvalid("n", fmt.Sprintf("n=%d; want 1 to %d", *c.N, maxChoices))
	}
	if len(c.User) > oaiMaxUser {
		return oaiInvalid("user", fmt.Sprintf("user is %d bytes; want at most %d", len(c.User), oaiMaxUser))
	}
	for _, b := range c.LogitBias {
		if b != 0 {
			// A bias of zero asks for nothing; any other would be
			// ignored, so it is refused by name.
			return oaiInvalid("logit_bias", "logit_bias is not supported")
		}
	}
	if len(c.Stop) > MaxStops {
		return oaiInvalid("stop", fmt.Sprintf("%d stop sequences; want at most %d", len(c.Stop), MaxStops))
	}
	if c.MaxTokens != nil {
		if *c.MaxTokens < 1 {
			return oaiInvalid("max_tokens", fmt.Sprintf("max_tokens=%d; want at least 1", *c.MaxTokens))
		}
		req.MaxTokens = *c.MaxTokens
	}
	p := engine.Sampling{Temperature: 1}
	inRange := func(name string, v *float64, lo, hi float64, dst *float32) *oaiError {
		if v == nil {
			return nil
		}
		if !(*v >= lo && *v <= hi) { // also refuses NaN
			return oaiInvalid(name, fmt.Sprintf("%s=%g; want %g to %g", name, *v, lo, hi))
		}
		*dst = float32(*v)
		return nil
	}
	for _, f := range []struct {
		name   string
		v      *float64
		lo, hi float64
		dst    *float32
	}{
		{"temperature", c.Temperature, 0, 2, &p.Temperature},
		{"top_p", c.TopP, 0, 1, &p.TopP},
		{"presence_penalty", c.PresencePenalty, -2, 2, &p.PresencePenalty},
		{"frequency_penalty", c.FrequencyPenalty, -2, 2, &p.FrequencyPenalty},
		{"min_p", c.MinP, 0, 1, &p.MinP},
		{"repetition_penalty", c.RepetitionPenalty, 0, 10, &p.RepeatPenalty},
	} {
		if err := inRange(f.name, f.v, f.lo, f.hi, f.dst); err != nil {
			return err
		}
	}
	if c.TopK != nil {
		if *c.TopK < -1 {
			return oaiInvalid("top_k", fmt.Sprintf("top_k=%d; want -1 or 0 (off) or a positive count", *c.TopK))
		}
		p.TopK = max(*c.TopK, 0)
	}
	if c.Seed != nil {
		p.Seed = uint64(*c.Seed) // OpenAI seeds are signed; keep every bit
	} else {
		// OpenAI's sampling differs from call to call unless seeded.
		p.Seed = freshSeed()
	}
	req.Sample = p
	req.Stop = c.Stop
	if c.User != "" {
		// OpenAI clients send the whole conversation every call: a stable
		// key per end user routes their calls where their prefix is
		// cached (gateways route by session).
		req.Session = "openai:" + c.User
	}
	if c.Priority != "" {
		if _, err := engine.ParsePriority(c.Priority); err != nil {
			return oaiInvalid("priority", "priority must be interactive, standard or batch")
		}
	}
	req.Priority = requestPriority(tenantClass, c.Priority)
	if err := specmode.Check(c.Speculate); err != nil {
		return oaiInvalid("speculate", "speculate: "+err.Error())
	}
	req.Speculate = c.Speculate
	return nil
}

// ---- responses -----------------------------------------------------------

type oaiUsage struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	TotalTokens         int `json:"total_tokens"`
	PromptTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
	// Speculative decoding's drafts, in the fields OpenAI gives its
	// predicted outputs: draft tokens the model took, and those it
	// verified and threw away. Unlike OpenAI's, rejected tokens are not
	// in completion_tokens: they are never charged.
	CompletionTokensDetails struct {
		AcceptedPredictionTokens int `json:"accepted_prediction_tokens"`
		RejectedPredictionTokens int `json:"rejected_prediction_tokens"`
	} `json:"completion_tokens_details"`
}

// usageOf is the usage of a prompt's finals, one per choice: the prompt
// counted once (OpenAI does), every choice's completion and drafts.
func usageOf(finals []*engine.Final) *oaiUsage {
	u := finals[0].Usage
	o := &oaiUsage{PromptTokens: u.PromptTokens}
	o.PromptTokensDetails.CachedTokens = u.CachedTokens
	for _, f := range finals {
		o.CompletionTokens += f.Usage.CompletionTokens
		o.CompletionTokensDetails.AcceptedPredictionTokens += f.Stats.Accepted
		o.CompletionTokensDetails.RejectedPredictionTokens += f.Stats.Drafted - f.Stats.Accepted
	}
	o.TotalTokens = o.PromptTokens + o.CompletionTokens
	return o
}

// finishReason maps the engine's reasons onto OpenAI's enum; see the
// comment at the top for why cancelled reads as stop.
func finishReason(r string) string {
	if r == engine.FinishLength {
		return "length"
	}
	return "stop"
}

type oaiChatMessage struct {
	Role      string        `json:"role"`
	Content   *string       `json:"content"` // null beside tool calls
	Refusal   *string       `json:"refusal"`
	ToolCalls []oaiToolCall `json:"tool_calls,omitempty"`
}

type oaiChatChoice struct {
	Index        int             `json:"index"`
	Message      *oaiChatMessage `json:"message,omitempty"`
	Delta        *oaiDelta       `json:"delta,omitempty"`
	Text         *string         `json:"text,omitempty"` // completions
	Logprobs     any             `json:"logprobs"`       // nil: null
	FinishReason *string         `json:"finish_reason"`
}

type oaiDelta struct {
	Role      string        `json:"role,omitempty"`
	Content   *string       `json:"content,omitempty"`
	ToolCalls []oaiToolCall `json:"tool_calls,omitempty"`
}

// oaiResponse is a whole response or one stream chunk of either endpoint.
type oaiResponse struct {
	ID                string `json:"id"`
	Object            string `json:"object"`
	Created           int64  `json:"created"`
	Model             string `json:"model"`
	SystemFingerprint string `json:"system_fingerprint"`
	// Seed is the seed the reply was sampled with (the request's, or the
	// one drawn for it), signed as requests give it: asking again with it
	// reproduces the reply.
	Seed    int64           `json:"seed"`
	Choices []oaiChatChoice `json:"choices"`
	// Usage is *oaiUsage, or json.RawMessage("null") on the chunks of a
	// stream with include_usage (OpenAI sends null there), or nil: absent.
	Usage any `json:"usage,omitempty"`
}

// ---- routes --------------------------------------------------------------

func (s *Server) openaiRoutes(mux *http.ServeMux) {
	created := s.o.Clock.Now().Unix()
	model := func(info *ModelInfo) map[string]any {
		m := map[string]any{"id": info.Name, "object": "model", "created": created, "owned_by": "specgate"}
		// specgate's additions (clients ignore unknown fields): what the
		// ready frame's model says.
		if info.Arch != "" {
			m["arch"], m["context_length"], m["quantization"] = info.Arch, info.Context, info.Quantization
		}
		return m
	}
	mux.HandleFunc("GET /v1/models", s.oaiAuthed(func(w http.ResponseWriter, r *http.Request, _ Identity) {
		httpJSON(w, http.StatusOK, map[string]any{"object": "list", "data": []any{model(s.modelInfo())}})
	}))
	mux.HandleFunc("GET /v1/models/{model...}", s.oaiAuthed(func(w http.ResponseWriter, r *http.Request, _ Identity) {
		info := s.modelInfo()
		if r.PathValue("model") != info.Name {
			writeOAIError(w, modelNotFound(r.PathValue("model")))
			return
		}
		httpJSON(w, http.StatusOK, model(info))
	}))
	mux.HandleFunc("POST /v1/chat/completions", s.oaiAuthed(s.serveChatCompletions))
	mux.HandleFunc("POST /v1/completions", s.oaiAuthed(s.serveCompletions))
}

func modelNotFound(name string) *oaiError {
	return &oaiError{
		status: http.StatusNotFound, Type: oaiInvalidRequest, Param: strPtr("model"), Code: strPtr("model_not_found"),
		Message: fmt.Sprintf("The model %q does not exist or you do not have access to it.", name),
	}
}

// oaiAuthed is authed with OpenAI-shaped errors.
func (s *Server) oaiAuthed(h func(http.ResponseWriter, *http.Request, Identity)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		// The scheme is case-insensitive (RFC 9110); SDKs send "Bearer".
		token := ""
		if h := r.Header.Get("Authorization"); len(h) > 7 && strings.EqualFold(h[:7], "bearer ") {
			token = strings.TrimSpace(h[7:])
		}
		id, err := s.auth.verify(r.Context(), token)
		if err != nil {
			s.metrics.authFailures.WithLabelValues(err.Reason).Inc()
			writeOAIError(w, oaiFrom(err, ""))
			return
		}
		h(w, r, id)
	}
}

// checkModel checks the body's "model" and sets the name the response
// gives. Until a gateway without a model has heard its engines name theirs,
// any name is taken: the engines, once up, run the request.
func (s *Server) checkModel(c *oaiCall, name string) *oaiError {
	info, known := s.servedModel()
	c.model = info.Name
	switch {
	case name == "" || name == info.Name:
	case !known:
		c.model = name
	default:
		return modelNotFound(name)
	}
	return nil
}

func (s *Server) serveChatCompletions(w http.ResponseWriter, r *http.Request, id Identity) {
	var body chatCompletionRequest
	if err := decodeOAI(w, r, &body); err != nil {
		writeOAIError(w, err)
		return
	}
	c := s.newOAICall(id, "chatcmpl-", "chat.completion", "messages", &body.oaiCommon)
	if err := s.checkModel(c, body.Model); err != nil {
		writeOAIError(w, err)
		return
	}
	if err := body.engineParams(&c.req, id.Tenant.Priority); err != nil {
		writeOAIError(w, err)
		return
	}
	if body.MaxCompletionTokens != nil {
		if *body.MaxCompletionTokens < 1 {
			writeOAIError(w, oaiInvalid("max_completion_tokens", fmt.Sprintf("max_completion_tokens=%d; want at least 1", *body.MaxCompletionTokens)))
			return
		}
		c.req.MaxTokens = *body.MaxCompletionTokens
	}
	if isSet(body.Logprobs) {
		var on bool
		if err := json.Unmarshal(body.Logprobs, &on); err != nil {
			writeOAIError(w, oaiInvalid("logprobs", "logprobs must be a boolean"))
			return
		}
		c.req.Logprobs = on
	}
	if body.TopLogprobs != nil {
		if n := *body.TopLogprobs; n < 0 || n > engine.MaxTopLogprobs || n > 0 && !c.req.Logprobs {
			writeOAIError(w, oaiInvalid("top_logprobs", fmt.Sprintf("top_logprobs=%d; want 0 to %d, with logprobs true", n, engine.MaxTopLogprobs)))
			return
		}
		c.req.TopLogprobs = *body.TopLogprobs
	}
	if len(body.Functions) > 0 {
		writeOAIError(w, oaiInvalid("functions", "functions (deprecated) is not supported; use tools"))
		return
	}
	plan, oe := planTools(body.Tools, body.ToolChoice, body.ParallelToolCalls, s.o.ToolFormat)
	if oe != nil {
		writeOAIError(w, oe)
		return
	}
	if len(body.Messages) == 0 {
		writeOAIError(w, oaiInvalid("messages", "messages must hold at least one message"))
		return
	}
	calls := make([][]oaiToolCall, len(body.Messages))
	results := make([]bool, len(body.Messages))
	ids := make([]string, len(body.Messages))
	for i, m := range body.Messages {
		role := m.Role
		switch role {
		case "developer":
			role = "system" // OpenAI's newer name for the system role
		case "system", "user":
		case "assistant":
			for j, tc := range m.ToolCalls {
				if tc.Function.Name == "" || !json.Valid([]byte(tc.Function.Arguments)) {
					writeOAIError(w, oaiInvalid(fmt.Sprintf("messages[%d].tool_calls[%d].function", i, j), "a tool call needs a function name and arguments that are JSON"))
					return
				}
			}
			calls[i] = m.ToolCalls
		case "tool":
			results[i] = true
			ids[i] = m.ToolCallID
		default:
			writeOAIError(w, oaiInvalid(fmt.Sprintf("messages[%d].role", i), fmt.Sprintf("role %q is not supported (want system, developer, user, assistant or tool)", m.Role)))
			return
		}
		c.req.Messages = append(c.req.Messages, engine.Message{Role: role, Content: string(m.Content)})
	}
	if s.o.ToolFormat != nil {
		c.req.Messages = nativeMessages(c.req.Messages, calls, ids)
		if plan != nil {
			c.req.Tools = plan.tools
		}
	} else {
		c.req.Messages = toolMessages(c.req.Messages, calls, results)
	}
	if plan != nil && plan.system != "" {
		// The tools join the system prompt, or lead as one.
		if c.req.Messages[0].Role == "system" {
			c.req.Messages[0].Content += "\n\n" + plan.system
		} else {
			c.req.Messages = append([]engine.Message{{Role: "system", Content: plan.system}}, c.req.Messages...)
		}
	}
	// The client sends the whole conversation and expects it read whole.
	c.req.KeepTurns = true
	if plan != nil && plan.guided != nil {
		if rf := body.ResponseFormat; rf != nil && rf.Type != "" && rf.Type != "text" {
			writeOAIError(w, oaiInvalid("response_format", "response_format with tools is not supported unless tool_choice is none"))
			return
		}
		c.req.Guided = plan.guided
		c.guidedParam = "tools"
		c.tools = plan
	}
	if rf := body.ResponseFormat; rf != nil {
		switch rf.Type {
		case "", "text":
		case "json_object":
			// OpenAI's JSON mode answers an object, not any JSON value.
			c.req.Guided = &engine.Guided{Schema: json.RawMessage(`{"type":"object"}`)}
			c.guidedParam = "response_format"
		case "json_schema":
			if rf.JSONSchema == nil || !isSet(rf.JSONSchema.Schema) {
				writeOAIError(w, oaiInvalid("response_format.json_schema.schema", "json_schema needs a schema"))
				return
			}
			c.req.Guided = &engine.Guided{Schema: rf.JSONSchema.Schema}
			c.guidedParam = "response_format.json_schema.schema"
		default:
			writeOAIError(w, oaiInvalid("response_format.type", fmt.Sprintf("response_format type %q is not supported (want text, json_object or json_schema)", rf.Type)))
			return
		}
	}
	s.oaiGenerate(w, r, c)
}

func (s *Server) serveCompletions(w http.ResponseWriter, r *http.Request, id Identity) {
	var body completionRequest
	if err := decodeOAI(w, r, &body); err != nil {
		writeOAIError(w, err)
		return
	}
	c := s.newOAICall(id, "cmpl-", "text_completion", "prompt", &body.oaiCommon)
	if err := s.checkModel(c, body.Model); err != nil {
		writeOAIError(w, err)
		return
	}
	c.req.MaxTokens = completionsDefaultMaxTokens
	if err := body.engineParams(&c.req, id.Tenant.Priority); err != nil {
		writeOAIError(w, err)
		return
	}
	if isSet(body.Logprobs) {
		var n int
		if err := json.Unmarshal(body.Logprobs, &n); err != nil || n < 0 || n > 5 {
			writeOAIError(w, oaiInvalid("logprobs", "logprobs must be an integer from 0 to 5"))
			return
		}
		c.req.Logprobs, c.req.TopLogprobs = true, n
	}
	switch {
	case body.BestOf != nil && *body.BestOf != 1 && (body.N == nil || *body.BestOf != *body.N):
		writeOAIError(w, oaiInvalid("best_of", "best_of must equal n: this server returns every choice it generates"))
		return
	case body.Echo:
		writeOAIError(w, oaiInvalid("echo", "echo is not supported"))
		return
	case body.Suffix != nil && *body.Suffix != "":
		writeOAIError(w, oaiInvalid("suffix", "suffix is not supported"))
		return
	}
	p := body.Prompt
	switch {
	case len(p.tokens) > 0:
		c.req.Prompt = p.tokens // the engine checks them against the vocabulary
	case p.text != "":
		c.req.Text = p.text // the engine that runs it tokenizes it
	default:
		writeOAIError(w, oaiInvalid("prompt", "prompt is required"))
		return
	}
	s.oaiGenerate(w, r, c)
}

// ---- one generation ------------------------------------------------------

// oaiCall is one OpenAI-API generation being served.
type oaiCall struct {
	ident        Identity
	respID       string
	model        string // the model the response names
	object       string // "chat.completion" or "text_completion"
	param        string // the field a context-length error names
	guidedParam  string // the field the guided constraint came from
	n            int    // choices
	tools        *toolsPlan
	created      int64
	stream       bool
	includeUsage bool
	req          engine.Request
}

func (c *oaiCall) chat() bool { return c.object == "chat.completion" }

// choices is how many choices the call generates.
func (c *oaiCall) choices() int { return max(c.n, 1) }

// toolsGuided reports whether the output may hold tool calls to parse.
func (c *oaiCall) toolsGuided() bool { return c.tools != nil && c.tools.guided != nil }

// refusedParam names the field an engine's refusal is about: the guided
// constraint's source when the engine says the constraint is at fault,
// else the prompt.
func (c *oaiCall) refusedParam(err error) string {
	var ee *engine.Error
	if c.guidedParam != "" && errors.As(err, &ee) && ee.Code == engine.CodeBadRequest && strings.HasPrefix(ee.Message, "guided decoding") {
		return c.guidedParam
	}
	return c.param
}

func (s *Server) newOAICall(id Identity, idPrefix, object, param string, common *oaiCommon) *oaiCall {
	var b [12]byte
	_, _ = rand.Read(b[:])
	respID := idPrefix + hex.EncodeToString(b[:])
	ten := id.Tenant
	c := &oaiCall{
		ident: id, respID: respID, object: object, param: param,
		created: s.o.Clock.Now().Unix(), stream: common.Stream, n: 1,
		includeUsage: common.Stream && common.StreamOptions != nil && common.StreamOptions.IncludeUsage,
		req: engine.Request{
			// Engine ids must be unique among live requests of every
			// tenant; the response id is random.
			ID:     "openai/" + ten.ID + "/" + respID,
			Tenant: ten.ID,
			User:   id.User,
			Limits: engine.TenantLimits{
				Weight:          ten.Weight,
				MaxConcurrent:   ten.Limits.MaxConcurrent,
				TokensPerMinute: ten.Limits.TokensPerMinute,
				MaxContext:      ten.Limits.MaxContext,
				Speculate:       ten.Limits.Speculate,
			},
		},
	}
	if common.N != nil && *common.N > 1 {
		c.n = *common.N
	}
	return c
}

func fingerprint(model string) string {
	sum := sha256.Sum256([]byte("specgate\x00" + model))
	return "fp_" + hex.EncodeToString(sum[:5])
}

// oaiGenerate takes the tenant's quota, submits the request and answers
// with one JSON response or an SSE stream. The generation is bound to the
// HTTP request: a client that goes away cancels it.
func (s *Server) oaiGenerate(w http.ResponseWriter, r *http.Request, c *oaiCall) {
	ten := c.ident.Tenant
	s.mu.Lock()
	draining := s.draining
	s.mu.Unlock()
	if draining {
		writeOAIError(w, oaiFrom(&Error{Code: CodeUnavailable, Reason: ReasonShutdown, Message: "gateway shutting down", Temporary: true}, ""))
		return
	}
	ok, err := s.limiter.AllowTokens(r.Context(), ten.ID, 0, ten.Limits.TokensPerMinute)
	if err != nil {
		writeOAIError(w, oaiFrom(s.down("cannot reach the rate limiter", err), ""))
		return
	}
	if !ok {
		s.metrics.chats.WithLabelValues(ten.ID, CodeOverQuota).Inc()
		writeOAIError(w, oaiFrom(&Error{Code: CodeOverQuota, Reason: ReasonTokensPerMinute, Message: "tokens per minute exceeded", Temporary: true}, ""))
		return
	}
	ok, err = s.limiter.Acquire(r.Context(), ten.ID, tenants.LeaseRequests, c.req.ID, ten.Limits.MaxConcurrent, s.o.LeaseTTL)
	if err != nil {
		writeOAIError(w, oaiFrom(s.down("cannot reach the rate limiter", err), ""))
		return
	}
	if !ok {
		s.metrics.chats.WithLabelValues(ten.ID, CodeOverQuota).Inc()
		writeOAIError(w, oaiFrom(&Error{Code: CodeOverQuota, Reason: ReasonConcurrency, Message: "too many concurrent requests", Temporary: true}, ""))
		return
	}
	if ten.Limits.MaxConcurrent > 0 {
		// The socket's leases are refreshed by the server's sweep over its
		// turns; this request is not a turn, so it refreshes its own.
		done := make(chan struct{})
		go s.refreshLease(ten.ID, c.req.ID, done)
		defer func() {
			close(done)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_ = s.limiter.Release(ctx, ten.ID, tenants.LeaseRequests, c.req.ID)
			cancel()
		}()
	}

	// The generation lives while the client waits and the server runs.
	genCtx, cancelGen := context.WithCancel(r.Context())
	defer cancelGen()
	stopAfter := context.AfterFunc(s.runCtx, cancelGen)
	defer stopAfter()

	streams, err := s.submitChoices(genCtx, c)
	if err != nil {
		e := oaiFrom(err, c.refusedParam(err))
		s.metrics.chats.WithLabelValues(ten.ID, clientError(err).Code).Inc()
		writeOAIError(w, e)
		return
	}
	events := s.mergeChoices(streams)
	var finals []*engine.Final
	if c.stream {
		finals = s.oaiStream(w, c, events)
	} else {
		finals = s.oaiWhole(w, c, events)
	}
	used := 0
	for _, f := range finals {
		s.metrics.chats.WithLabelValues(ten.ID, f.FinishReason).Inc()
		used += f.Usage.PromptTokens + f.Usage.CompletionTokens
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	_ = s.limiter.ChargeTokens(ctx, ten.ID, used, ten.Limits.TokensPerMinute)
	cancel()
}

// refreshLease keeps one request slot alive until done closes.
func (s *Server) refreshLease(tenant, holder string, done <-chan struct{}) {
	t := time.NewTicker(s.o.LeaseTTL / 3)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-s.runCtx.Done():
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(s.runCtx, 5*time.Second)
		if err := s.limiter.Refresh(ctx, tenant, tenants.LeaseRequests, s.o.LeaseTTL, holder); err != nil {
			s.o.Logger.Warn("gateway: refresh lease", "request", holder, "err", err)
		}
		cancel()
	}
}

// ---- every API response ----------------------------------------------------

// maxRequestID bounds a client's X-Request-Id that is echoed back.
const maxRequestID = 128

// apiResponses gives every /v1/ response an x-request-id (the client's,
// when it sent a sane one, else a fresh one) and answers the routes and
// methods mux does not know in OpenAI's error shape, so an SDK reads an
// error instead of failing on a text/plain body.
func apiResponses(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.URL.Path, "/v1/") {
			mux.ServeHTTP(w, r)
			return
		}
		w.Header().Set("X-Request-Id", requestID(r.Header.Get("X-Request-Id")))
		h, pattern := mux.Handler(r)
		if pattern != "" {
			mux.ServeHTTP(w, r) // which sets the path's wildcards on r
			return
		}
		// No route: the mux answers 404, 405 (with Allow) or a redirect.
		rec := &headerRecorder{header: http.Header{}}
		h.ServeHTTP(rec, r)
		switch rec.status {
		case http.StatusNotFound:
			writeOAIError(w, &oaiError{status: http.StatusNotFound, Type: oaiInvalidRequest, Code: strPtr("unknown_url"),
				Message: fmt.Sprintf("Unknown request URL: %s %s.", r.Method, r.URL.Path)})
		case http.StatusMethodNotAllowed:
			w.Header().Set("Allow", rec.header.Get("Allow"))
			writeOAIError(w, &oaiError{status: http.StatusMethodNotAllowed, Type: oaiInvalidRequest, Code: strPtr("method_not_allowed"),
				Message: fmt.Sprintf("Method %s is not allowed on %s (allowed: %s).", r.Method, r.URL.Path, rec.header.Get("Allow"))})
		default:
			for k, v := range rec.header {
				w.Header()[k] = v
			}
			w.WriteHeader(rec.status)
			_, _ = w.Write(rec.body.Bytes())
		}
	})
}

// headerRecorder keeps what the mux's fallback handlers write, so it can
// be replaced; they write small bodies only.
type headerRecorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (h *headerRecorder) Header() http.Header { return h.header }

func (h *headerRecorder) WriteHeader(code int) {
	if h.status == 0 {
		h.status = code
	}
}

func (h *headerRecorder) Write(b []byte) (int, error) {
	h.WriteHeader(http.StatusOK)
	return h.body.Write(b)
}

// requestID returns the client's id when it is short and plain, else a
// new one in OpenAI's style.
func requestID(client string) string {
	ok := client != "" && len(client) <= maxRequestID
	for i := 0; ok && i < len(client); i++ {
		c := client[i]
		ok = c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '-' || c == '_' || c == '.'
	}
	if ok {
		return client
	}
	var b [16]byte
	_, _ = rand.Read(b[:])
	return "req_" + hex.EncodeToString(b[:])
}
