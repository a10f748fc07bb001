// Package engine serves many tenants' generation requests on one model:
// admission, a priority-aware fair scheduler, continuous batching over a
// paged KV cache, preemption, and streaming of results.
//
// One goroutine owns the engine state and runs step(); everything else talks
// to it through Submit, Cancel and the returned Streams.
package engine

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/specgate/specgate/engine/guided"
	"github.com/specgate/specgate/engine/model/chat"
	"github.com/specgate/specgate/engine/spec"
	"github.com/specgate/specgate/kernels/sample"
)

// Priority is a request's scheduling class. Classes are strict (with aging,
// so a lower class is never starved forever); the zero value is Standard.
type Priority int

const (
	Standard Priority = iota
	Interactive
	Batch
)

func (p Priority) String() string {
	switch p {
	case Interactive:
		return "interactive"
	case Standard:
		return "standard"
	case Batch:
		return "batch"
	}
	return fmt.Sprintf("priority(%d)", int(p))
}

// Rank orders classes: a lower rank is served first.
func (p Priority) Rank() int {
	switch p {
	case Interactive:
		return 0
	case Batch:
		return 2
	}
	return 1
}

// ParsePriority reads a class name; "" is Standard.
func ParsePriority(s string) (Priority, error) {
	switch s {
	case "interactive":
		return Interactive, nil
	case "standard", "":
		return Standard, nil
	case "batch":
		return Batch, nil
	}
	return Standard, fmt.Errorf("engine: unknown priority %q (want interactive, standard or batch)", s)
}

// TenantLimits are one tenant's scheduling weight and caps. Zero values mean
// the engine's defaults (weight 1, caps from Options).
type TenantLimits struct {
	Weight          float64
	MaxConcurrent   int // running sequences
	MaxQueued       int // waiting requests
	TokensPerMinute int // prompt + completion tokens
	MaxContext      int // prompt + max tokens
	// Speculation is the tenant's say over speculative decoding, on top
	// of the engine's dispatcher and its class's policy (the zero value
	// leaves it to them).
	Speculation spec.Policy
	// Speculate is which drafter the tenant allows: a mode of package
	// specmode ("" reads as specmode.Auto).
	Speculate string
}

// Message is one chat turn, for requests that give messages instead of
// prompt tokens; the engine renders them with the model's chat template.
// ToolCalls (assistant) and ToolCallID ("tool" results) reach templates
// that render tools natively (see Engine.NativeTools); others never see
// them, so callers turn such turns into text for those.
type Message struct {
	Role       string          `json:"role"`
	Content    string          `json:"content"`
	ToolCalls  []chat.ToolCall `json:"tool_calls,omitempty"`
	ToolCallID string          `json:"tool_call_id,omitempty"`
}

// Guided constrains generation to a language. At most one field is set.
type Guided struct {
	Regex   string          `json:"regex,omitempty"`
	Schema  json.RawMessage `json:"schema,omitempty"`
	Choices []string        `json:"choices,omitempty"`
	JSON    bool            `json:"json,omitempty"` // any JSON value
	// Calls, with Schema, asks for tagged Schema values (tool calls), see
	// guided.Calls.
	Calls *guided.Calls `json:"calls,omitempty"`
}

// Request is one generation.
type Request struct {
	// ID names the request for Cancel; unique among live requests.
	ID      string
	Tenant  string
	User    string
	Session string // conversation key: prefix affinity and retention
	// Priority is the class; Limits the tenant's weight and caps as the
	// caller knows them (the engine keeps the latest per tenant).
	Priority Priority
	Limits   TenantLimits
	// Prompt is the token ids; when empty, Messages are rendered with the
	// chat template and tokenized.
	Prompt   []int32
	Messages []Message
	// Text is a raw prompt (OpenAI's /v1/completions) for requests with
	// neither Prompt nor Messages: the engine that runs the request
	// tokenizes it as the model wants (BOS included).
	Text string `json:",omitempty"`
	// Tools are function definitions in OpenAI's shape, given to a chat
	// template that renders tools natively (Engine.NativeTools) along with
	// Messages; without such a template they are ignored.
	Tools []json.RawMessage `json:",omitempty"`
	// SharedPrefix is how many leading prompt tokens the tenant marks
	// public, such as a system prompt common to all its users: their KV
	// is cached once, in a namespace every tenant's requests may match
	// (rounded down to whole blocks; at most the prompt). Zero keeps the
	// request's cached blocks private to its tenant: another tenant's
	// identical prompt never hits them, so cache timing cannot reveal one
	// tenant's prompts to another. Negative is a bad request.
	SharedPrefix int
	Sample       sample.Params
	// MaxTokens caps the completion; zero means what the context has
	// left, at most Options.DefaultMaxTokens. A chat given as Messages
	// that leaves too little room loses old turns (see
	// Options.DefaultMaxTokens and Final.DroppedMessages) unless
	// KeepTurns is set.
	MaxTokens int
	// KeepTurns refuses a chat given as Messages that does not fit the
	// context with context_too_long instead of dropping its oldest turns:
	// an API whose client resends the whole conversation must not answer
	// a conversation it did not read.
	KeepTurns bool
	// Stop ends generation when the text contains one of these (the stop
	// string itself is not emitted); StopTokens likewise for ids. EOS and
	// end-of-turn tokens always stop.
	Stop       []string
	StopTokens []int32
	Guided     *Guided
	// Deadline, when set, ends generation with reason "cancelled" at that
	// time.
	Deadline time.Time
	// Logprobs asks each delta for its tokens' log probabilities, with the
	// TopLogprobs (at most MaxTopLogprobs) most likely alternatives. They
	// are the model's own distribution: log-softmax of the raw logits,
	// before temperature, penalties and guided masks. Such a request
	// decodes without speculation.
	Logprobs    bool
	TopLogprobs int
	// Speculate narrows the tenant's speculation mode for this request
	// (Limits.Speculate): the request speculates only with a drafter both
	// allow. "" is specmode.Auto, which leaves it to the tenant.
	Speculate string
	// Generated are tokens already streamed to the client by an earlier
	// attempt (failover): the engine re-prefills prompt+generated and
	// continues, numbering deltas after them.
	Generated []int32
}

// Finish reasons.
const (
	FinishStop      = "stop"
	FinishLength    = "length"
	FinishCancelled = "cancelled"
	FinishError     = "error"
)

// Usage counts tokens.
type Usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	// CachedTokens is how many of the prompt tokens the prefix cache
	// served when the request started, so they were not prefilled.
	CachedTokens int `json:"cached_tokens"`
}

// Stats are a request's timings and speculation figures.
type Stats struct {
	Queue           time.Duration   // submit → first scheduled
	TTFT            time.Duration   // submit → first token
	Total           time.Duration   // submit → done
	InterToken      []time.Duration // gaps between deltas
	TokensPerSecond float64         // completion tokens / decode time
	AcceptedPerStep float64         // mean tokens committed per decode step
	Preemptions     int
	// Drafted is how many draft tokens the model verified for the
	// request (every node of every tree, siblings included), Accepted
	// how many of them it took; Drafted-Accepted were wasted. Both are
	// 0 when the request never speculated.
	Drafted, Accepted int
	// Seed is the seed the request sampled with (Request.Sample.Seed), so
	// that a client can reproduce the reply. Callers that take requests
	// without a seed draw a fresh one rather than leave it zero, so that
	// unseeded requests differ (the gateway does).
	Seed uint64
}

// Final is the last event of a stream.
type Final struct {
	FinishReason string
	Usage        Usage
	Stats        Stats
	// DroppedMessages is how many of the request's Messages (never system
	// messages or the last one) were left out of the prompt so that the
	// conversation fits the context.
	DroppedMessages int
	// Err is set when FinishReason is "error".
	Err error
}

// Event is one item of a Stream: a delta (Tokens/Text, numbered from 1 by
// Seq) or, last, Final.
type Event struct {
	Seq    int
	Tokens []int32
	Text   string
	// Logprobs, when the request asked for them, has one entry per token
	// of Tokens.
	Logprobs []TokenLogprob `json:",omitempty"`
	Final    *Final
}

// MaxTopLogprobs bounds Request.TopLogprobs (OpenAI's bound).
const MaxTopLogprobs = 20

// TokenLogprob is one generated token's log probability and the most
// likely alternatives at its position, most likely first.
type TokenLogprob struct {
	Token   int32
	Piece   string // the token's bytes (not always whole UTF-8)
	Logprob float32
	Top     []TopLogprob `json:",omitempty"`
}

// TopLogprob is one alternative at a position.
type TopLogprob struct {
	Token   int32
	Piece   string
	Logprob float32
}

// Error codes, shared with the gateway protocol.
const (
	CodeBadRequest     = "bad_request"
	CodeOverQuota      = "over_quota"
	CodeQueueFull      = "queue_full"
	CodeContextTooLong = "context_too_long"
	CodeInternal       = "internal"
)

// Reasons refine an over_quota refusal: which of the tenant's caps it hit.
const (
	ReasonTokensPerMinute = "tokens_per_minute"
	ReasonQueue           = "queue"       // the tenant's waiting requests
	ReasonConcurrency     = "concurrency" // the tenant's concurrent requests
)

// Error is a typed refusal with a stable code. Message is for the client:
// it names no internals.
type Error struct {
	Code string
	// Reason refines Code (see ReasonTokensPerMinute); may be empty.
	Reason  string
	Message string
	// Temporary says retrying later may succeed (queue full, rate limit).
	Temporary bool
}

func (e *Error) Error() string { return "engine: " + e.Code + ": " + e.Message }

// ErrClosed is returned by Submit after the engine stopped.
var ErrClosed = errors.New("engine: closed")

// ErrGone says a generation named by a handle no longer exists: it ended
// and its output expired, so attaching to it can never succeed.
var ErrGone = errors.New("engine: no such generation")
