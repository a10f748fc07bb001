package cluster

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/engine/guided"
	"github.com/specgate/specgate/engine/model/chat"
	"github.com/specgate/specgate/engine/spec"
)

// wireVersion is the encoding of the requests this version queues (queue
// entry field "v"). The request crossing Redis is wireRequest, a struct of
// this package with its own field names, never engine.Request's JSON: a
// field renamed or added in the engine's API then changes nothing on the
// wire until this file maps it, and an engine meets a request written by
// a newer gateway as an explicit refusal instead of a misread one.
// Entries without "v" are read as version 0: engine.Request's JSON, which
// versions before this one queued, so a rolling upgrade loses nothing.
//
// Version 2 is version 1's body in an entry that names a stream log
// (fieldLog): the engine must append the deltas there, numbered in the
// protocol's seq. An engine that reads only up to version 1 would put
// them in the output stream, where nobody reads them, so it refuses the
// request instead. Requests without a log are still queued as version 1.
const wireVersion = 2

// wireRequest is engine.Request on the wire (version 1). The field names
// are the wire's and must never change meaning; a new field is added
// with omitempty, so older engines see the request as it was.
type wireRequest struct {
	ID           string            `json:"id"`
	Tenant       string            `json:"tenant,omitempty"`
	User         string            `json:"user,omitempty"`
	Session      string            `json:"session,omitempty"`
	Priority     string            `json:"priority,omitempty"`
	Limits       wireLimits        `json:"limits"`
	Prompt       []int32           `json:"prompt,omitempty"`
	Messages     []wireMessage     `json:"messages,omitempty"`
	Text         string            `json:"text,omitempty"`
	Tools        []json.RawMessage `json:"tools,omitempty"`
	SharedPrefix int               `json:"shared_prefix,omitempty"`
	Sample       wireSample        `json:"sample"`
	MaxTokens    int               `json:"max_tokens,omitempty"`
	KeepTurns    bool              `json:"keep_turns,omitempty"`
	Stop         []string          `json:"stop,omitempty"`
	StopTokens   []int32           `json:"stop_tokens,omitempty"`
	Guided       *wireGuided       `json:"guided,omitempty"`
	Deadline     int64             `json:"deadline_unix_ns,omitempty"`
	Logprobs     bool              `json:"logprobs,omitempty"`
	TopLogprobs  int               `json:"top_logprobs,omitempty"`
	Speculate    string            `json:"speculate,omitempty"`
	Generated    []int32           `json:"generated,omitempty"`
}

type wireLimits struct {
	Weight          float64 `json:"weight,omitempty"`
	MaxConcurrent   int     `json:"max_concurrent,omitempty"`
	MaxQueued       int     `json:"max_queued,omitempty"`
	TokensPerMinute int     `json:"tokens_per_minute,omitempty"`
	MaxContext      int     `json:"max_context,omitempty"`
	SpecOff         bool    `json:"spec_off,omitempty"`
	SpecMaxBatch    int     `json:"spec_max_batch,omitempty"`
	Speculate       string  `json:"speculate,omitempty"`
}

type wireMessage struct {
	Role       string         `json:"role"`
	Content    string         `json:"content"`
	ToolCalls  []wireToolCall `json:"tool_calls,omitempty"`
	ToolCallID string         `json:"tool_call_id,omitempty"`
}

type wireToolCall struct {
	ID        string          `json:"id,omitempty"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
}

type wireSample struct {
	Temperature      float32 `json:"temperature,omitempty"`
	TopK             int     `json:"top_k,omitempty"`
	TopP             float32 `json:"top_p,omitempty"`
	MinP             float32 `json:"min_p,omitempty"`
	RepeatPenalty    float32 `json:"repeat_penalty,omitempty"`
	RepeatLastN      int     `json:"repeat_last_n,omitempty"`
	PresencePenalty  float32 `json:"presence_penalty,omitempty"`
	FrequencyPenalty float32 `json:"frequency_penalty,omitempty"`
	// Seed is a string: JSON numbers lose uint64 precision in some readers.
	Seed string `json:"seed,omitempty"`
}

type wireGuided struct {
	Regex   string          `json:"regex,omitempty"`
	Schema  json.RawMessage `json:"schema,omitempty"`
	Choices []string        `json:"choices,omitempty"`
	JSON    bool            `json:"json,omitempty"`
	Calls   *wireCalls      `json:"calls,omitempty"`
}

type wireCalls struct {
	Open     string `json:"open"`
	Close    string `json:"close"`
	Max      int    `json:"max,omitempty"`
	Optional bool   `json:"optional,omitempty"`
}

func toWireRequest(r engine.Request) wireRequest {
	w := wireRequest{
		ID: r.ID, Tenant: r.Tenant, User: r.User, Session: r.Session, Priority: r.Priority.String(),
		Limits: wireLimits{
			Weight: r.Limits.Weight, MaxConcurrent: r.Limits.MaxConcurrent, MaxQueued: r.Limits.MaxQueued,
			TokensPerMinute: r.Limits.TokensPerMinute, MaxContext: r.Limits.MaxContext,
			SpecOff: r.Limits.Speculation.Off, SpecMaxBatch: r.Limits.Speculation.MaxBatch,
			Speculate: r.Limits.Speculate,
		},
		Prompt: r.Prompt, Text: r.Text, Tools: r.Tools, SharedPrefix: r.SharedPrefix,
		Sample: wireSample{
			Temperature: r.Sample.Temperature, TopK: r.Sample.TopK, TopP: r.Sample.TopP, MinP: r.Sample.MinP,
			RepeatPenalty: r.Sample.RepeatPenalty, RepeatLastN: r.Sample.RepeatLastN,
			PresencePenalty: r.Sample.PresencePenalty, FrequencyPenalty: r.Sample.FrequencyPenalty,
		},
		MaxTokens: r.MaxTokens, KeepTurns: r.KeepTurns, Stop: r.Stop, StopTokens: r.StopTokens,
		Logprobs: r.Logprobs, TopLogprobs: r.TopLogprobs, Speculate: r.Speculate, Generated: r.Generated,
	}
	if r.Sample.Seed != 0 {
		w.Sample.Seed = strconv.FormatUint(r.Sample.Seed, 10)
	}
	for _, m := range r.Messages {
		wm := wireMessage{Role: m.Role, Content: m.Content, ToolCallID: m.ToolCallID}
		for _, c := range m.ToolCalls {
			wm.ToolCalls = append(wm.ToolCalls, wireToolCall{ID: c.ID, Name: c.Name, Arguments: c.Arguments})
		}
		w.Messages = append(w.Messages, wm)
	}
	if g := r.Guided; g != nil {
		w.Guided = &wireGuided{Regex: g.Regex, Schema: g.Schema, Choices: g.Choices, JSON: g.JSON}
		if c := g.Calls; c != nil {
			w.Guided.Calls = &wireCalls{Open: c.Open, Close: c.Close, Max: c.Max, Optional: c.Optional}
		}
	}
	if !r.Deadline.IsZero() {
		w.Deadline = r.Deadline.UnixNano()
	}
	return w
}

func (w wireRequest) request() (engine.Request, error) {
	pri, err := engine.ParsePriority(w.Priority)
	if err != nil {
		return engine.Request{}, err
	}
	r := engine.Request{
		ID: w.ID, Tenant: w.Tenant, User: w.User, Session: w.Session, Priority: pri,
		Limits: engine.TenantLimits{
			Weight: w.Limits.Weight, MaxConcurrent: w.Limits.MaxConcurrent, MaxQueued: w.Limits.MaxQueued,
			TokensPerMinute: w.Limits.TokensPerMinute, MaxContext: w.Limits.MaxContext,
			Speculation: spec.Policy{Off: w.Limits.SpecOff, MaxBatch: w.Limits.SpecMaxBatch},
			Speculate:   w.Limits.Speculate,
		},
		Prompt: w.Prompt, Text: w.Text, Tools: w.Tools, SharedPrefix: w.SharedPrefix,
		Sample: engine.Sampling{
			Temperature: w.Sample.Temperature, TopK: w.Sample.TopK, TopP: w.Sample.TopP, MinP: w.Sample.MinP,
			RepeatPenalty: w.Sample.RepeatPenalty, RepeatLastN: w.Sample.RepeatLastN,
			PresencePenalty: w.Sample.PresencePenalty, FrequencyPenalty: w.Sample.FrequencyPenalty,
		},
		MaxTokens: w.MaxTokens, KeepTurns: w.KeepTurns, Stop: w.Stop, StopTokens: w.StopTokens,
		Logprobs: w.Logprobs, TopLogprobs: w.TopLogprobs, Speculate: w.Speculate, Generated: w.Generated,
	}
	if w.Sample.Seed != "" {
		if r.Sample.Seed, err = strconv.ParseUint(w.Sample.Seed, 10, 64); err != nil {
			return engine.Request{}, fmt.Errorf("seed: %w", err)
		}
	}
	for _, m := range w.Messages {
		em := engine.Message{Role: m.Role, Content: m.Content, ToolCallID: m.ToolCallID}
		for _, c := range m.ToolCalls {
			em.ToolCalls = append(em.ToolCalls, chat.ToolCall{ID: c.ID, Name: c.Name, Arguments: c.Arguments})
		}
		r.Messages = append(r.Messages, em)
	}
	if g := w.Guided; g != nil {
		r.Guided = &engine.Guided{Regex: g.Regex, Schema: g.Schema, Choices: g.Choices, JSON: g.JSON}
		if c := g.Calls; c != nil {
			r.Guided.Calls = &guided.Calls{Open: c.Open, Close: c.Close, Max: c.Max, Optional: c.Optional}
		}
	}
	if w.Deadline != 0 {
		r.Deadline = time.Unix(0, w.Deadline)
	}
	return r, nil
}

// encodeRequest is a queue entry's version and request fields; logged:
// the entry names a stream log.
func encodeRequest(r engine.Request, logged bool) (version string, body []byte, err error) {
	body, err = json.Marshal(toWireRequest(r))
	if logged {
		return "2", body, err
	}
	return "1", body, err
}

// decodeRequest reads a queue entry's request of the given version ("":
// version 0).
func decodeRequest(version, body string) (engine.Request, error) {
	switch version {
	case "", "0":
		var r engine.Request
		if err := json.Unmarshal([]byte(body), &r); err != nil {
			return engine.Request{}, fmt.Errorf("cluster: request (version 0): %w", err)
		}
		return r, nil
	case "1", "2":
		var w wireRequest
		if err := json.Unmarshal([]byte(body), &w); err != nil {
			return engine.Request{}, fmt.Errorf("cluster: request (version %s): %w", version, err)
		}
		r, err := w.request()
		if err != nil {
			return engine.Request{}, fmt.Errorf("cluster: request (version %s): %w", version, err)
		}
		return r, nil
	}
	return engine.Request{}, &engine.Error{Code: engine.CodeBadRequest,
		Message: fmt.Sprintf("the request was queued in wire version %q; this engine reads up to %d", version, wireVersion)}
}
