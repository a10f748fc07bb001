package gateway

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestRecoveryFinalizesOrphansOnly: a turn left running by a gateway that
// is gone (its record, user message and deltas in Redis, its lease run
// out) is finalized by a live gateway within about 1.5 leases; a turn whose
// gateway is alive and renewing is left alone however long it runs.
func TestRecoveryFinalizesOrphansOnly(t *testing.T) {
	lease := 300 * time.Millisecond
	e := newEnv(t, nil, "", func(o *Options) { o.TurnLease = lease })
	e.gen.gate = make(chan struct{}, 100)
	ctx := context.Background()
	c := e.rawLogin("alice")
	sid := rawSession(t, c)

	// The dead gateway's leftovers, written the way a turn writes them.
	if err := e.srv.registerTurn(ctx, sid, "dead"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.srv.sessions.StartTurn(ctx, "acme", "alice", sid, "dead", "hello"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.srv.log.appendDeltas(ctx, sid, "dead", []logEntry{{Seq: 1, Text: "one "}, {Seq: 2, Text: "two"}}); err != nil {
		t.Fatal(err)
	}
	past := float64(time.Now().Add(-time.Second).UnixMilli())
	if err := e.rdb.ZAdd(ctx, e.srv.ks.RunningTurns(), redis.Z{Score: past, Member: turnMember(sid, "dead")}).Err(); err != nil {
		t.Fatal(err)
	}

	// A live turn on this gateway, held mid-reply by the gate.
	c.SendJSON(map[string]any{"type": "chat", "session": sid, "request": "live", "content": "a b c"})
	e.gen.gate <- struct{}{}
	if f := c.Read(); f.Type != "delta" || f.Request != "live" {
		t.Fatalf("have %+v; want the live turn's first delta", f)
	}

	// A resume of the orphan gets its deltas and a done, without waiting
	// for ResumeIdle.
	start := time.Now()
	r := e.rawLogin("alice")
	r.SendJSON(map[string]any{"type": "session.resume", "session": sid, "request": "dead", "after": 0})
	if f := r.Read(); f.Type != "session" {
		t.Fatalf("have %+v; want session", f)
	}
	text, done, _ := r.Collect("dead", 0)
	if text != "one two" || done.FinishReason != "error" {
		t.Fatalf("have %q, %+v; want the logged deltas and done error", text, done)
	}
	if d := time.Since(start); d > 3*lease+2*time.Second {
		t.Fatalf("recovered after %v; want about 1.5 leases", d)
	}
	v, err := e.srv.Sessions().Get(ctx, "acme", "alice", sid)
	if err != nil {
		t.Fatal(err)
	}
	m := v.Messages[len(v.Messages)-1]
	if m.Request != "dead" || m.Content != "one two" || !m.Partial || m.Interrupted != interruptCrash {
		t.Fatalf("have %+v; want the orphan's deltas stored partial, interrupted crash", m)
	}

	// Several leases later the live turn is still running, then ends
	// whole.
	time.Sleep(3 * lease)
	for range 10 {
		e.gen.gate <- struct{}{}
	}
	rest, done, errs := c.Collect("live", 1)
	if len(errs) > 0 || done.FinishReason != "stop" || !strings.HasSuffix(fakeReply("a b c"), rest) {
		t.Fatalf("live turn: have %q %+v %v; want it to finish", rest, done, errs)
	}
	// The turn leaves the index after its done frame is sent, and a renew
	// that raced its end may put it back until recovery finds it done:
	// wait for the index to empty rather than look once.
	deadline := time.Now().Add(4*lease + 2*time.Second)
	for {
		n, _ := e.rdb.ZCard(ctx, e.srv.ks.RunningTurns()).Result()
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("have %d entries in the running-turn index; want none", n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestLateOwnerMendsRecoveredReply: when recovery finalized a turn whose
// gateway was only stalled, the gateway's own end replaces the recovered
// partial reply, so a reply generated in full is stored in full, once.
func TestLateOwnerMendsRecoveredReply(t *testing.T) {
	e := newEnv(t, nil, "", nil)
	e.gen.gate = make(chan struct{}, 100)
	ctx := context.Background()
	c := e.rawLogin("alice")
	sid := rawSession(t, c)
	c.SendJSON(map[string]any{"type": "chat", "session": sid, "request": "r1", "content": "x y"})
	e.gen.gate <- struct{}{}
	if f := c.Read(); f.Type != "delta" || f.Seq != 1 {
		t.Fatalf("have %+v; want delta 1", f)
	}
	// Another gateway takes this one for dead and finalizes the turn.
	if _, err := e.srv.recoverTurn(ctx, sid, "r1"); err != nil {
		t.Fatal(err)
	}
	for range 10 {
		e.gen.gate <- struct{}{}
	}
	if _, done, _ := c.Collect("r1", 1); done.FinishReason != "stop" {
		t.Fatalf("have %+v; want done stop", done)
	}
	v, err := e.srv.Sessions().Get(ctx, "acme", "alice", sid)
	if err != nil {
		t.Fatal(err)
	}
	var replies []Message
	for _, m := range v.Messages {
		if m.Role == "assistant" {
			replies = append(replies, m)
		}
	}
	if len(replies) != 1 || replies[0].Content != fakeReply("x y") || replies[0].Partial {
		t.Fatalf("have replies %+v; want one, complete", replies)
	}
}

// TestCancelAcrossGateways: a cancel sent to one gateway stops the turn
// running on another (the socket reconnected elsewhere); another user's
// cancel of the same request id reaches nothing and reads not_found.
func TestCancelAcrossGateways(t *testing.T) {
	e := newEnv(t, nil, "", nil)
	e.gen.gate = make(chan struct{}, 100)
	srv2, err := New(Options{Redis: e.rdb, Generator: newFake(), Prefix: e.srv.o.Prefix, ControlTimeout: 300 * time.Millisecond, Logger: e.srv.o.Logger})
	if err != nil {
		t.Fatal(err)
	}
	hs2 := newTestHTTP(t, srv2)

	a := e.rawLogin("alice")
	sid := rawSession(t, a)
	a.SendJSON(map[string]any{"type": "chat", "session": sid, "request": "r1", "content": "a b c d e"})
	e.gen.gate <- struct{}{}
	if f := a.Read(); f.Type != "delta" {
		t.Fatalf("have %+v; want a delta", f)
	}

	// Bob, on the second gateway, cannot cancel alice's request.
	bob := mustDial(t, hs2.URL, e.hsToken("bob", nil))
	bob.Ready()
	bob.SendJSON(map[string]any{"type": "cancel", "request": "r1"})
	if f := bob.Read(); f.Type != "error" || f.Code != CodeNotFound || f.Request != "r1" {
		t.Fatalf("have %+v; want not_found for r1", f)
	}

	// Alice, on the second gateway, can: her turn on the first ends
	// cancelled, and the second answers nothing (the done is the turn's).
	b := mustDial(t, hs2.URL, e.hsToken("alice", nil))
	b.Ready()
	b.SendJSON(map[string]any{"type": "cancel", "request": "r1"}, map[string]any{"type": "ping"})
	if f := b.Read(); f.Type != "pong" {
		t.Fatalf("have %+v; want only the pong", f)
	}
	_, done, _ := a.Collect("r1", 1)
	if done.FinishReason != "cancelled" {
		t.Fatalf("have %+v; want done cancelled", done)
	}
	if !b.Silent(time.Second) {
		t.Fatalf("have %+v from the second gateway; want nothing more", b.Read())
	}
}

// TestFinishTurnStoresOnce: a turn finished twice (a retried finish, or
// two gateways that both read one generation to its end after one took
// the other for dead) stores its reply once, and only the gateway that
// stored it is told it ended the turn (a retry of its own included).
func TestFinishTurnStoresOnce(t *testing.T) {
	e := newEnv(t, nil, "", nil)
	ctx := context.Background()
	c := e.rawLogin("alice")
	sid := rawSession(t, c)
	if _, err := e.srv.sessions.StartTurn(ctx, "acme", "alice", sid, "r1", "hello"); err != nil {
		t.Fatal(err)
	}
	for i, step := range []struct {
		finisher string
		ended    bool
	}{{"g_a", true}, {"g_a", true}, {"g_b", false}} {
		ended, err := e.srv.sessions.FinishTurn(ctx, step.finisher, "acme", "alice", sid, Message{Request: "r1", Content: "hi there", FinishReason: "stop"})
		if err != nil || ended != step.ended {
			t.Fatalf("finish %d by %s: have ended=%v err=%v; want ended=%v", i, step.finisher, ended, err, step.ended)
		}
	}
	v, err := e.srv.Sessions().Get(ctx, "acme", "alice", sid)
	if err != nil {
		t.Fatal(err)
	}
	if len(v.Messages) != 2 || v.Messages[1].Content != "hi there" {
		t.Fatalf("have messages %+v; want the user's and one reply", v.Messages)
	}
}

// TestSetAttachNeedsTheRecord: a generation handle lands on a running
// request's record, and never recreates a record deleted meanwhile (it
// would come back without a TTL).
func TestSetAttachNeedsTheRecord(t *testing.T) {
	e := newEnv(t, nil, "", nil)
	ctx := context.Background()
	c := e.rawLogin("alice")
	sid := rawSession(t, c)
	if _, err := e.srv.sessions.StartTurn(ctx, "acme", "alice", sid, "r1", "hello"); err != nil {
		t.Fatal(err)
	}
	for _, rid := range []string{"r1", "gone"} {
		if err := e.srv.sessions.setAttach(ctx, sid, rid, "h-"+rid); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, h, err := e.srv.sessions.requestFinish(ctx, sid, "r1"); err != nil || h != "h-r1" {
		t.Fatalf("have handle %q, %v; want h-r1", h, err)
	}
	if n := e.rdb.Exists(ctx, e.srv.ks.Request(sid, "gone")).Val(); n != 0 {
		t.Fatal("setAttach created a request record")
	}
}

// TestRecoverEndHoldsOnlyAtTheLogsEnd: recovery stores a dead gateway's
// reply and ends its log in one step, and only while the log still ends
// with the delta the reply was read up to: in split mode an engine may
// append after recovery read the log (the dead gateway had not recorded
// the handle a takeover needs), and that delta must be in the stored
// reply, before any resume can read a done.
func TestRecoverEndHoldsOnlyAtTheLogsEnd(t *testing.T) {
	e := newEnv(t, nil, "", nil)
	ctx := context.Background()
	sid := rawSession(t, e.rawLogin("alice"))
	deadTurn(t, e, sid, "r1", []string{"one ", "two"})
	msg := func(text string) Message {
		return Message{Request: "r1", Content: text, FinishReason: "error", Partial: true, Interrupted: interruptCrash}
	}
	done := ServerFrame{Type: TypeDone, Request: "r1", FinishReason: "error"}
	key := e.srv.log.key(sid, "r1")

	// Read up to delta 1, but delta 2 came since: nothing is stored or ended.
	if _, err := e.srv.sessions.RecoverEnd(ctx, "acme", "alice", sid, msg("one "), key, 100, 1, done); !errors.Is(err, errLogMoved) {
		t.Fatalf("have %v; want errLogMoved", err)
	}
	if m := lastMessage(t, e, sid); m.Role == "assistant" {
		t.Fatalf("have reply %+v stored from a stale read", m)
	}
	if tail, err := e.srv.log.last(ctx, sid, "r1"); err != nil || tail.Done != nil {
		t.Fatalf("have log end %+v, %v; want delta 2, not done", tail, err)
	}

	// Read again: stored, and the log ends with done right after delta 2.
	if ok, err := e.srv.sessions.RecoverEnd(ctx, "acme", "alice", sid, msg("one two"), key, 100, 2, done); err != nil || !ok {
		t.Fatalf("have %v, %v; want stored", ok, err)
	}
	if m := lastMessage(t, e, sid); m.Content != "one two" || !m.Partial || m.Interrupted != interruptCrash {
		t.Fatalf("have %+v; want the two deltas stored partial", m)
	}
	if tail, err := e.srv.log.last(ctx, sid, "r1"); err != nil || tail.Done == nil || tail.Seq != 3 {
		t.Fatalf("have log end %+v, %v; want done at 3", tail, err)
	}
	// Once is all: the request is no longer running.
	if ok, err := e.srv.sessions.RecoverEnd(ctx, "acme", "alice", sid, msg("one two"), key, 100, 2, done); err != nil || ok {
		t.Fatalf("have %v, %v; want nothing done", ok, err)
	}
}
