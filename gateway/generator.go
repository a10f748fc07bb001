package gateway

import (
	"crypto/rand"
	"encoding/binary"

	"github.com/specgate/specgate/engine"
)

// The gateway consumes engine.Generator (the in-process engine, or the
// cluster client in --role=gateway) and discovers what else it can do by
// type assertion: engine.Readier for /readyz, engine.SessionWarmer for
// keeping live conversations' prefixes warm.

// samplingParams maps a chat frame's parameters onto the engine's. A
// request without a seed gets a fresh one (done reports it), so unseeded
// chats, and regenerations, differ, and any reply can be reproduced.
func samplingParams(p *ChatParams) engine.Sampling {
	var sp engine.Sampling
	if p != nil {
		sp = engine.Sampling{
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

// freshSeed draws a nonzero sampling seed of 53 bits: replies report it
// to be sent back, and clients that read JSON numbers as doubles
// (browsers, JavaScript's SDKs) hold 53 bits exactly.
func freshSeed() uint64 {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read does not fail
	return max(binary.LittleEndian.Uint64(b[:])&(1<<53-1), 1)
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
