package engine

import (
	"context"

	"github.com/specgate/specgate/kernels/sample"
)

// The generation contract. It is declared here, once, and implemented by
// the in-process *Engine and by the cluster client that carries requests
// to engines in other processes; the gateway and the cluster's engine side
// consume it. What only some implementations can do is an optional
// interface below, discovered by type assertion, never a function field a
// caller has to fill in per deployment.

// Events is one request's events: deltas (numbered from 1 by Seq; after a
// failover they continue after Request.Generated), then one Event carrying
// Final, then io.EOF. Seq counts the tokens generated so far: it never
// falls, and a delta with text but no tokens keeps the Seq of the one
// before it. Recv is for one goroutine at a time; it blocks until
// an event is ready or ctx ends (then ctx's error, and the stream stays
// usable).
type Events interface {
	Recv(ctx context.Context) (Event, error)
}

// Generator runs generation requests. Generate refuses a request at once
// with an *Error (or ErrClosed) or returns its events; its ctx lives as
// long as the generation: cancelling it cancels the request, whose events
// then end with finish reason "cancelled". Cancel stops a request by id;
// unknown ids are ignored. A request with neither Prompt nor Messages but
// Text is tokenized by the engine that runs it, wherever that is.
type Generator interface {
	Generate(ctx context.Context, r Request) (Events, error)
	Cancel(id string)
}

// Readier is implemented by a Generator that can say whether it serves
// now: a non-nil error (model not loaded, no engine live) means not ready.
type Readier interface {
	Ready() error
}

// SessionWarmer is implemented by a Generator that keeps the prefixes of
// live conversations warm: SetSessionLive says when a client starts using
// a session (Request.Session) and when it stops, so the prefix cache
// demotes idle conversations first. It must not block.
type SessionWarmer interface {
	SetSessionLive(session string, live bool)
}

// ModelCard names and describes a served model for clients.
type ModelCard struct {
	// Name is the model as clients name it (the OpenAI API's "model").
	Name string `json:"name"`
	// Arch is the model family (llama, qwen2, ...).
	Arch string `json:"arch,omitempty"`
	// Context is the context length in tokens.
	Context int `json:"context,omitempty"`
	// Quantization is the weights' type (Q8_0, F16, ...).
	Quantization string `json:"quantization,omitempty"`
}

// ModelReporter is implemented by a Generator whose model is loaded
// elsewhere (the cluster client: its engines say in their heartbeats), so
// a process without the model still names it; ok is false while no
// engine has said.
type ModelReporter interface {
	ServedModel() (card ModelCard, ok bool)
}

// Sampling is a request's sampling parameters (Request.Sample), named
// here so the engine's callers need no import of kernels/sample.
type Sampling = sample.Params

// Generate is Submit behind the Generator contract.
func (e *Engine) Generate(ctx context.Context, r Request) (Events, error) {
	s, err := e.Submit(ctx, r)
	if err != nil {
		return nil, err // never a typed nil inside the interface
	}
	return s, nil
}

// Ready reports ErrClosed once the engine is closed; a running engine
// has its model loaded and serves.
func (e *Engine) Ready() error {
	select {
	case <-e.done:
		return ErrClosed
	default:
		return nil
	}
}

// textPrompt tokenizes r.Text the way the model wants a raw prompt (BOS
// included) when r gives neither prompt tokens nor messages.
func (e *Engine) textPrompt(r Request) ([]int32, error) {
	ids := e.tok.Encode(r.Text)
	if len(ids) == 0 {
		return nil, &Error{Code: CodeBadRequest, Message: "the prompt text encodes to no tokens"}
	}
	return ids, nil
}

var (
	_ Generator     = (*Engine)(nil)
	_ Readier       = (*Engine)(nil)
	_ SessionWarmer = (*Engine)(nil)
)
