package cluster

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/internal/testredis"
)

// silentEngine generates n tokens that make no text (special or hidden
// tokens), one every delay, then one token with text, then the final.
type silentEngine struct {
	n     int
	delay time.Duration
}

func (g silentEngine) Generate(ctx context.Context, r engine.Request) (engine.Events, error) {
	return &silentEvents{ctx: ctx, g: g}, nil
}

func (g silentEngine) Cancel(string) {}

type silentEvents struct {
	ctx  context.Context
	g    silentEngine
	i    int
	done bool
}

func (s *silentEvents) Recv(ctx context.Context) (engine.Event, error) {
	if s.done {
		return engine.Event{}, io.EOF
	}
	if s.i > s.g.n {
		s.done = true
		return engine.Event{Final: &engine.Final{FinishReason: engine.FinishStop, Usage: engine.Usage{CompletionTokens: s.i}}}, nil
	}
	select {
	case <-time.After(s.g.delay):
	case <-s.ctx.Done():
		s.done = true
		return engine.Event{Final: &engine.Final{FinishReason: engine.FinishCancelled}}, nil
	}
	s.i++
	ev := engine.Event{Seq: s.i, Tokens: []int32{int32(s.i)}}
	if s.i > s.g.n {
		ev.Text = "end"
	}
	return ev, nil
}

// TestTextlessTokensAreProgress: a logged request whose tokens make no
// text for longer than the gateway's IdleTimeout is alive all the same:
// the engine says so every ProgressInterval, and the reply is not cut.
func TestTextlessTokensAreProgress(t *testing.T) {
	rdb := testredis.Client(t)
	prefix := testredis.Prefix(t)
	o := fastEngine(rdb, prefix, "e1", silentEngine{n: 150, delay: 10 * time.Millisecond})
	o.ProgressInterval = 100 * time.Millisecond
	startEngine(t, o)
	c, err := NewClient(ClientOptions{Redis: rdb, Prefix: prefix, PlaceTimeout: 3 * time.Second, IdleTimeout: 500 * time.Millisecond,
		PollInterval: 100 * time.Millisecond, HeartbeatInterval: 100 * time.Millisecond, HeartbeatTTL: 400 * time.Millisecond,
		RefreshInterval: 50 * time.Millisecond, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	waitEngines(t, c, 1)
	s, err := c.SubmitToLog(context.Background(), engine.Request{ID: "acme/s/r1", Tenant: "acme", Session: "s", MaxTokens: 200}, logTarget(prefix, "s", "r1"))
	if err != nil {
		t.Fatal(err)
	}
	// 150 text-less tokens take 1.5 s at least: three IdleTimeouts.
	text, final := readSeqs(t, s, 1)
	if text != "end" || final.FinishReason != engine.FinishStop || final.Usage.CompletionTokens != 151 {
		t.Fatalf("have %q, %+v (%v); want \"end\", stop, 151 tokens", text, final.FinishReason, final.Err)
	}
}
