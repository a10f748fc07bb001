package gateway

import (
	"context"
	"testing"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/engine/model"
	_ "github.com/specgate/specgate/engine/model/llama"
	"github.com/specgate/specgate/internal/testmodels"
	"github.com/specgate/specgate/kernels"
	_ "github.com/specgate/specgate/kernels/cpu"
)

// storiesEngine loads stories260K on the CPU backend and starts an engine
// on it, both closed when t ends.
func storiesEngine(t *testing.T) (model.Loaded, *engine.Engine) {
	t.Helper()
	return storiesEngineWith(t, engine.Options{})
}

// storiesEngineWith is storiesEngine with engine options.
func storiesEngineWith(t *testing.T, o engine.Options) (model.Loaded, *engine.Engine) {
	t.Helper()
	be, err := kernels.Open("cpu", kernels.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = be.Close() })
	m, err := model.Load(testmodels.Path(t, testmodels.Stories260K), be)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	eng, err := engine.New(m, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = eng.Close() })
	return m, eng
}

// TestRealModelEndToEnd runs a chat turn over a real socket and Redis
// against the real engine and the tiny TinyStories model.
func TestRealModelEndToEnd(t *testing.T) {
	_, eng := storiesEngine(t)
	e := newEnv(t, nil, "", func(o *Options) { o.Generator = eng })
	c := e.login("alice")
	sid := c.createSession("real")
	c.send(map[string]any{"type": "chat", "session": sid, "request": "r1", "content": "Once upon a time",
		"params": map[string]any{"max_tokens": 24, "temperature": 0, "seed": 1}})
	text, last, done, errs := c.collect("r1")
	if len(errs) > 0 || text == "" || last == 0 {
		t.Fatalf("have %q after %d deltas (errors %v); want some text", text, last, errs)
	}
	if done.FinishReason != engine.FinishStop && done.FinishReason != engine.FinishLength {
		t.Fatalf("have %+v; want stop or length", done)
	}
	if done.Usage == nil || done.Usage.CompletionTokens == 0 || done.Usage.CompletionTokens > 24 {
		t.Fatalf("have usage %+v; want 1..24 completion tokens", done.Usage)
	}
	v, err := e.srv.Sessions().Get(context.Background(), "acme", "alice", sid)
	if err != nil || len(v.Messages) != 2 || v.Messages[1].Content != text {
		t.Fatalf("have %+v, %v; want the reply stored", v, err)
	}

	// Greedy is deterministic: the same prompt in a new session gives the
	// same text.
	sid2 := c.createSession("again")
	c.send(map[string]any{"type": "chat", "session": sid2, "request": "r1", "content": "Once upon a time",
		"params": map[string]any{"max_tokens": 24, "temperature": 0, "seed": 1}})
	if again, _, _, _ := c.collect("r1"); again != text {
		t.Fatalf("have %q; want %q again", again, text)
	}
}

// TestRealModelSeedIsDrawnAndReported: sampled chats without a seed differ,
// done reports the seed each drew, exact in a double as a browser reads
// it, and sending it back gives the same reply.
func TestRealModelSeedIsDrawnAndReported(t *testing.T) {
	_, eng := storiesEngine(t)
	e := newEnv(t, nil, "", func(o *Options) { o.Generator = eng })
	c := e.login("alice")
	chat := func(id string, params map[string]any) (string, ServerFrame) {
		sid := c.createSession(id)
		c.send(map[string]any{"type": "chat", "session": sid, "request": id, "content": "Once upon a time", "params": params})
		text, _, done, errs := c.collect(id)
		if len(errs) > 0 || done.Stats == nil {
			t.Fatalf("%s: have %+v, errors %v", id, done, errs)
		}
		return text, done
	}
	sampled := map[string]any{"max_tokens": 32, "temperature": 1}
	t1, d1 := chat("a", sampled)
	t2, d2 := chat("b", sampled)
	if d1.Stats.Seed == 0 || d2.Stats.Seed == 0 || d1.Stats.Seed == d2.Stats.Seed {
		t.Fatalf("have seeds %d and %d; want two fresh nonzero seeds", d1.Stats.Seed, d2.Stats.Seed)
	}
	if d1.Stats.Seed >= 1<<53 || d2.Stats.Seed >= 1<<53 {
		t.Errorf("have seeds %d and %d; want them under 2^53, so JavaScript reads them exactly", d1.Stats.Seed, d2.Stats.Seed)
	}
	if t1 == t2 {
		t.Errorf("have the same reply %q twice without a seed; want them to differ", t1)
	}
	again, d3 := chat("c", map[string]any{"max_tokens": 32, "temperature": 1, "seed": d1.Stats.Seed})
	if again != t1 || d3.Stats.Seed != d1.Stats.Seed {
		t.Errorf("have %q with seed %d; want %q again", again, d3.Stats.Seed, t1)
	}
}
