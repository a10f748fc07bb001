package gateway

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/internal/testredis"
)

// TestRedisRestartMidChat kills a private Redis (AOF on) in the middle of a
// reply and starts it again: the turn ends with a clear error, the gateway
// reconnects by itself, the next turn works, and no stored message is lost.
func TestRedisRestartMidChat(t *testing.T) {
	rs := testredis.Start(t)
	e := newEnv(t, rs.Client(), "", nil)
	e.gen.gate = make(chan struct{}, 100)
	c := e.login("alice")
	sid := c.createSession("durable")

	for range 10 {
		e.gen.gate <- struct{}{}
	}
	c.send(map[string]any{"type": "chat", "session": sid, "request": "r1", "content": "before"})
	if text, _, _, _ := c.collect("r1"); text != fakeReply("before") {
		t.Fatalf("have %q; want the full first reply", text)
	}

	c.send(map[string]any{"type": "chat", "session": sid, "request": "r2", "content": "a b c d e f"})
	e.gen.gate <- struct{}{}
	if f := c.read(); f.Type != TypeDelta || f.Seq != 1 {
		t.Fatalf("have %+v; want delta 1", f)
	}
	rs.Kill()
	e.gen.gate <- struct{}{}
	var sawError bool
	for {
		f := c.read()
		if f.Type == TypeError && f.Request == "r2" {
			if f.Code != CodeUnavailable || !f.Temporary {
				t.Fatalf("have %+v; want a temporary unavailable error", f)
			}
			if !sawError {
				rs.Restart() // back while the gateway retries storing the reply
			}
			sawError = true
			continue
		}
		if f.Type == TypeDone {
			if !sawError || f.FinishReason != engine.FinishError {
				t.Fatalf("have done %+v after error=%v; want an error first and finish_reason error", f, sawError)
			}
			break
		}
		if f.Type != TypeDelta {
			t.Fatalf("have %+v; want deltas, an error, then done", f)
		}
	}

	// Go-redis redials on its own: the next turn works.
	for range 10 {
		e.gen.gate <- struct{}{}
	}
	c.send(map[string]any{"type": "chat", "session": sid, "request": "r3", "content": "after"})
	if text, _, _, errs := c.collect("r3"); text != fakeReply("after") || len(errs) > 0 {
		t.Fatalf("have %q %v; want the full third reply", text, errs)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	v, err := e.srv.Sessions().Get(ctx, "acme", "alice", sid)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		role, content string
		partial       bool
	}{
		{"user", "before", false},
		{"assistant", fakeReply("before"), false},
		{"user", "a b c d e f", false},
		{"assistant", "echo: a ", true},
		{"user", "after", false},
		{"assistant", fakeReply("after"), false},
	}
	if len(v.Messages) != len(want) {
		t.Fatalf("have %d messages %+v; want %d", len(v.Messages), v.Messages, len(want))
	}
	for i, w := range want {
		m := v.Messages[i]
		if m.Role != w.role || m.Partial != w.partial || (i != 3 && m.Content != w.content) {
			t.Errorf("message %d: have %+v; want %s %q partial=%v", i, m, w.role, w.content, w.partial)
		}
	}
	if m := v.Messages[3]; m.Interrupted != interruptError || m.FinishReason != engine.FinishError || !strings.Contains(m.Error, "storage unavailable") {
		t.Errorf("have %+v; want the cut reply marked interrupted: error, with its error text", m)
	}
}
