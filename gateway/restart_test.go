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
// reply and starts it again: generation goes on, the deltas the log could
// not take are written once Redis is back, the reply is stored complete
// (not partial), a resume reads every delta, the gateway reconnects by
// itself and the next turn works.
func TestRedisRestartMidChat(t *testing.T) {
	rs := testredis.Start(t)
	e := newEnv(t, rs.Client(), "", func(o *Options) { o.PersistTimeout = 20 * time.Second })
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

	content := "a b c d e f"
	c.send(map[string]any{"type": "chat", "session": sid, "request": "r2", "content": content})
	e.gen.gate <- struct{}{}
	if f := c.read(); f.Type != TypeDelta || f.Seq != 1 {
		t.Fatalf("have %+v; want delta 1", f)
	}
	rs.Kill()
	for range 20 {
		e.gen.gate <- struct{}{}
	}
	// Generation goes on while Redis is away: the client sees every delta.
	words := len(strings.SplitAfter(fakeReply(content), " "))
	for seq := 2; seq <= words; seq++ {
		if f := c.read(); f.Type != TypeDelta || f.Seq != seq {
			t.Fatalf("have %+v; want delta %d", f, seq)
		}
	}
	rs.Restart() // back while the gateway retries storing the reply
	if f := c.read(); f.Type != TypeDone || f.FinishReason != engine.FinishStop {
		t.Fatalf("have %+v; want done with finish_reason stop", f)
	}

	// The log has every delta: a resume from the start reads them all.
	c.send(map[string]any{"type": "session.resume", "session": sid, "request": "r2", "after": 0})
	if f := c.read(); f.Type != TypeSession {
		t.Fatalf("have %+v; want session", f)
	}
	if text, _, done, errs := c.collect("r2"); text != fakeReply(content) || len(errs) > 0 || done.FinishReason != engine.FinishStop {
		t.Fatalf("resume: have %q %v %+v; want the whole reply", text, errs, done)
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
	want := []string{"before", fakeReply("before"), content, fakeReply(content), "after", fakeReply("after")}
	if len(v.Messages) != len(want) {
		t.Fatalf("have %d messages %+v; want %d", len(v.Messages), v.Messages, len(want))
	}
	for i, w := range want {
		if m := v.Messages[i]; m.Content != w || m.Partial || m.Interrupted != "" {
			t.Errorf("message %d: have %+v; want %q, complete", i, m, w)
		}
	}
}

// TestRedisOutageWaitedOutOnce: while Redis refuses connections a reply
// streams at the engine's pace (80 deltas in well under the 80 x sentWait
// that holding each for its log would take: a refused append releases
// its delta at once instead of retrying first), and once Redis is back
// the turn ends stored and a resume returns the whole reply. A Redis that
// refuses never makes a delta wait, so that a turn waits at most once
// when appends hang is TestHeldDeltasGoOutWhenRedisHangs's to show.
func TestRedisOutageWaitedOutOnce(t *testing.T) {
	rs := testredis.Start(t)
	e := newEnv(t, rs.Client(), "", func(o *Options) { o.PersistTimeout = 20 * time.Second })
	e.gen.gate = make(chan struct{}, 200)
	c := e.login("alice")
	sid := c.createSession("outage")

	content := strings.TrimSpace(strings.Repeat("w ", 80))
	words := len(strings.SplitAfter(fakeReply(content), " "))
	c.send(map[string]any{"type": "chat", "session": sid, "request": "r1", "content": content})
	e.gen.gate <- struct{}{}
	if f := c.read(); f.Type != TypeDelta || f.Seq != 1 {
		t.Fatalf("have %+v; want delta 1", f)
	}
	rs.Kill()
	start := time.Now()
	for range words + 1 {
		e.gen.gate <- struct{}{}
	}
	for seq := 2; seq <= words; seq++ {
		if f := c.read(); f.Type != TypeDelta || f.Seq != seq {
			t.Fatalf("have %+v; want delta %d", f, seq)
		}
	}
	if took, perDelta := time.Since(start), time.Duration(words-1)*sentWait; took > perDelta/2 {
		t.Fatalf("%d deltas took %v through the outage; waiting for each takes %v", words-1, took, perDelta)
	}
	rs.Restart()
	if f := c.read(); f.Type != TypeDone || f.FinishReason != engine.FinishStop {
		t.Fatalf("have %+v; want done with finish_reason stop", f)
	}
	c.send(map[string]any{"type": "session.resume", "session": sid, "request": "r1", "after": 0})
	if f := c.read(); f.Type != TypeSession {
		t.Fatalf("have %+v; want session", f)
	}
	if text, _, done, errs := c.collect("r1"); text != fakeReply(content) || len(errs) > 0 || done.FinishReason != engine.FinishStop {
		t.Fatalf("resume: have %q %v %+v; want the whole reply", text, errs, done)
	}
}

// TestGivenUpReplyDropsItsBacklog: when Redis stays away past
// PersistTimeout the turn gives its reply up (an error, then done), and
// with it the deltas its log never took: the log writer stops retrying
// them, instead of holding and retrying them for as long as the gateway
// runs. Seen from Redis once it is back: they never arrive.
func TestGivenUpReplyDropsItsBacklog(t *testing.T) {
	rs := testredis.Start(t)
	e := newEnv(t, rs.Client(), "", func(o *Options) { o.PersistTimeout = 300 * time.Millisecond })
	e.gen.gate = make(chan struct{}, 100)
	c := e.login("alice")
	sid := c.createSession("lost")

	c.send(map[string]any{"type": "chat", "session": sid, "request": "r1", "content": "a b c"})
	e.gen.gate <- struct{}{}
	if f := c.read(); f.Type != TypeDelta || f.Seq != 1 {
		t.Fatalf("have %+v; want delta 1", f)
	}
	rs.Kill()
	for range 10 {
		e.gen.gate <- struct{}{}
	}
	_, _, done, errs := c.collectAfter("r1", 1)
	if len(errs) != 1 || errs[0].Code != CodeUnavailable || done.FinishReason != engine.FinishStop {
		t.Fatalf("have errors %+v, done %+v; want the reply reported unstored, then done", errs, done)
	}
	// A round already in flight may still land once Redis is back; wait
	// until none is (each ends within WriteTimeout).
	for end := time.Now().Add(3 * time.Second); len(e.srv.logw.slots) > 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("log rounds still running (%d) after the reply was given up", len(e.srv.logw.slots))
		}
	}
	rs.Restart()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// A retry comes every logRetry, once the client redials.
	for end := time.Now().Add(8 * logRetry); time.Now().Before(end); time.Sleep(logRetry / 5) {
		es, err := e.srv.log.readAfter(ctx, sid, "r1", 0, 0)
		if err != nil {
			continue // still redialing
		}
		for _, en := range es {
			if en.Seq > 1 {
				t.Fatalf("delta %d reached the log after its reply was given up", en.Seq)
			}
		}
	}
}
