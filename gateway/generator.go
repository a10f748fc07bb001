package gateway

import (
	"context"
	"crypto/rand"
	"encoding/binary"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/engine/sample"
)

// EventStream is one request's events: deltas, then one Final, then io.EOF.
type EventStream interface {
	Recv(ctx context.Context) (engine.Event, error)
}

// Generator is what the gateway needs of the engine. Submit's ctx lives as
// long as the generation: cancelling it cancels the request. Cancel stops a
// request by id; unknown ids are ignored.
type Generator interface {
	Submit(ctx context.Context, r engine.Request) (EventStream, error)
	Cancel(id string)
}

// Readier is optionally implemented by a Generator: /readyz calls Ready,
// and a non-nil error (model not loaded yet) makes the gateway not ready.
type Readier interface {
	Ready() error
}

// Adapt makes a Generator from an engine's Submit and Cancel methods, so
// the gateway never names the engine's concrete types:
//
//	gen := gateway.Adapt(eng.Submit, eng.Cancel)
func Adapt[S EventStream](submit func(context.Context, engine.Request) (S, error), cancel func(string)) Generator {
	return adapted[S]{submit: submit, cancel: cancel}
}

type adapted[S EventStream] struct {
	submit func(context.Context, engine.Request) (S, error)
	cancel func(string)
}

func (a adapted[S]) Submit(ctx context.Context, r engine.Request) (EventStream, error) {
	s, err := a.submit(ctx, r)
	if err != nil {
		// Never hand out a typed nil inside a non-nil interface.
		return nil, err
	}
	return s, nil
}

func (a adapted[S]) Cancel(id string) { a.cancel(id) }

// samplingParams maps a chat frame's parameters onto the engine's. A
// request without a seed gets a fresh one (done reports it), so unseeded
// chats, and regenerations, differ, and any reply can be reproduced.
func samplingParams(p *ChatParams) sample.Params {
	var sp sample.Params
	if p != nil {
		sp = sample.Params{
			Temperature: p.Temperature,
			TopK:        p.TopK,
			TopP:        p.TopP,
			MinP:        p.MinP,
			Seed:        p.Seed,
		}
	}
	if sp.Seed == 0 {
		sp.Seed = freshSeed()
	}
	return sp
}

// freshSeed draws a nonzero sampling seed.
func freshSeed() uint64 {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read does not fail
	return max(binary.LittleEndian.Uint64(b[:]), 1)
}

// guidedParams maps the grammar fields; nil when none is set.
func guidedParams(p *ChatParams) *engine.Guided {
	if p == nil {
		return nil
	}
	switch {
	case len(p.Schema) > 0:
		return &engine.Guided{Schema: p.Schema}
	case p.Regex != "":
		return &engine.Guided{Regex: p.Regex}
	case len(p.Choices) > 0:
		return &engine.Guided{Choices: p.Choices}
	case p.JSON:
		return &engine.Guided{JSON: true}
	}
	return nil
}

// requestPriority is the tenant's class, or the requested one when it is
// lower (a request may lower its priority, never raise it).
func requestPriority(tenantClass, requested string) engine.Priority {
	base, err := engine.ParsePriority(tenantClass)
	if err != nil {
		base = engine.Standard
	}
	if requested == "" {
		return base
	}
	r, err := engine.ParsePriority(requested)
	if err != nil || r.Rank() <= base.Rank() {
		return base
	}
	return r
}
