package gateway

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/internal/testredis"
	"github.com/specgate/specgate/tenants"
)

// attachGen is the fake generator plus attacher: a generation that runs
// on elsewhere and is read again from its first event. A handle is the
// engine request id, so Cancel reaches an attached generation too. Attach
// fails with err while it is set.
type attachGen struct {
	*fakeGenerator
	words []string
	err   error
}

func (g *attachGen) Handle(ev engine.Events) string {
	g.mu.Lock()
	defer g.mu.Unlock()
	for id, st := range g.streams {
		if st == ev {
			return id
		}
	}
	return ""
}

func (g *attachGen) Attach(ctx context.Context, handle string) (engine.Events, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.err != nil {
		return nil, g.err
	}
	st := &fakeStream{words: g.words, gate: g.gate, cancel: make(chan struct{}), ctx: context.Background()}
	g.streams[handle] = st
	return st, nil
}

func (g *attachGen) failAttach(err error) {
	g.mu.Lock()
	g.err = err
	g.mu.Unlock()
}

// deadTurn leaves in Redis what a gateway that died mid-reply leaves: its
// index entry, the running record with a generation handle, and the
// deltas it logged.
func deadTurn(t *testing.T, e *env, sid, rid string, logged []string) {
	t.Helper()
	ctx := context.Background()
	if err := e.srv.registerTurn(ctx, sid, rid); err != nil {
		t.Fatal(err)
	}
	if _, err := e.srv.sessions.StartTurn(ctx, "acme", "alice", sid, rid, "hello"); err != nil {
		t.Fatal(err)
	}
	if err := e.srv.sessions.setAttach(ctx, sid, rid, engineRequestID("acme", sid, rid)); err != nil {
		t.Fatal(err)
	}
	for i, w := range logged {
		if _, err := e.srv.log.appendDeltas(ctx, sid, rid, []logEntry{{Seq: i + 1, Text: w}}); err != nil {
			t.Fatal(err)
		}
	}
}

// lastMessage is the session's last stored message.
func lastMessage(t *testing.T, e *env, sid string) Message {
	t.Helper()
	v, err := e.srv.Sessions().Get(context.Background(), "acme", "alice", sid)
	if err != nil {
		t.Fatal(err)
	}
	return v.Messages[len(v.Messages)-1]
}

// waitReply waits for rid's reply to be stored.
func waitReply(t *testing.T, e *env, sid, rid string) Message {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if m := lastMessage(t, e, sid); m.Role == "assistant" && m.Request == rid {
			return m
		}
	}
	t.Fatal("no reply stored")
	return Message{}
}

// TestTakeoverEndsPartialOnlyWhenTheGenerationIsGone: recovery ends a
// dead gateway's split-mode reply partial only when its generation is
// gone. While the generation may still run (this gateway drains, the
// engines or Redis hiccup) nothing is stored and the turn stays in the
// index, so a later try attaches and stores the reply whole.
func TestTakeoverEndsPartialOnlyWhenTheGenerationIsGone(t *testing.T) {
	words := []string{"one ", "two ", "three ", "four"}
	for _, tc := range []struct {
		name     string
		attach   error // Attach's error
		draining bool
		gone     bool // the reply ends partial with the logged text
	}{
		{name: "generation gone", attach: fmt.Errorf("attach: %w", engine.ErrGone), gone: true},
		{name: "engines unreachable", attach: errors.New("cluster: unavailable")},
		{name: "gateway draining", draining: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, nil, "", nil)
			g := &attachGen{fakeGenerator: e.gen, words: words, err: tc.attach}
			e.srv.o.Generator = g
			c := e.rawLogin("alice")
			sid := rawSession(t, c)
			deadTurn(t, e, sid, "r1", words[:2])
			setDraining := func(v bool) {
				e.srv.mu.Lock()
				e.srv.draining = v
				e.srv.mu.Unlock()
			}
			setDraining(tc.draining)
			ctx := context.Background()
			attached, err := e.srv.recoverTurn(ctx, sid, "r1")
			if tc.gone {
				if err != nil || attached {
					t.Fatalf("have attached=%v err=%v; want the reply ended", attached, err)
				}
				m := waitReply(t, e, sid, "r1")
				if !m.Partial || m.Interrupted != interruptCrash || m.Content != "one two " {
					t.Fatalf("stored %+v; want the logged %q, partial (crash)", m, "one two ")
				}
				return
			}
			if err == nil || attached {
				t.Fatalf("have attached=%v err=%v; want an error to retry on", attached, err)
			}
			if m := lastMessage(t, e, sid); m.Role == "assistant" {
				t.Fatalf("stored %+v while the generation may run on", m)
			}
			if _, err := e.rdb.ZScore(ctx, e.srv.ks.RunningTurns(), turnMember(sid, "r1")).Result(); err != nil {
				t.Fatalf("the turn left the index (%v): no gateway would try again", err)
			}
			// The next try, once the cause passed, takes the turn over.
			setDraining(false)
			g.failAttach(nil)
			if attached, err := e.srv.recoverTurn(ctx, sid, "r1"); err != nil || !attached {
				t.Fatalf("retry: attached=%v err=%v", attached, err)
			}
			if m := waitReply(t, e, sid, "r1"); m.Partial || m.Content != strings.Join(words, "") {
				t.Fatalf("stored %+v; want the whole generation %q", m, strings.Join(words, ""))
			}
		})
	}
}

// TestDrainingGatewayClaimsNoTurn: a draining gateway's watcher leaves
// dead gateways' turns to the gateways that stay: it claims none.
func TestDrainingGatewayClaimsNoTurn(t *testing.T) {
	e := newEnv(t, nil, "", nil)
	e.srv.o.Generator = &attachGen{fakeGenerator: e.gen, words: []string{"one"}}
	c := e.rawLogin("alice")
	sid := rawSession(t, c)
	deadTurn(t, e, sid, "r1", nil)
	ctx := context.Background()
	key, member := e.srv.ks.RunningTurns(), turnMember(sid, "r1")
	if err := e.rdb.ZAdd(ctx, key, redis.Z{Score: 1, Member: member}).Err(); err != nil { // long expired
		t.Fatal(err)
	}
	e.srv.mu.Lock()
	e.srv.draining = true
	e.srv.mu.Unlock()
	seen := map[string]expiredSince{}
	for range 2 { // the first round only notes it expired
		e.srv.recoverExpired(seen, 0)
	}
	if score, err := e.rdb.ZScore(ctx, key, member).Result(); err != nil || score != 1 {
		t.Fatalf("index entry: have %v, %v; want it untouched (deadline 1)", score, err)
	}
	if m := lastMessage(t, e, sid); m.Role == "assistant" {
		t.Fatalf("a draining gateway stored %+v", m)
	}
}

// TestTakeoverStoresWholeReplyOfTrimmedLog: a taken-over turn's stored
// reply is the whole generation even when MAXLEN trimmed the stream log's
// beginning away: it is stored as complete, so it must be.
func TestTakeoverStoresWholeReplyOfTrimmedLog(t *testing.T) {
	e := newEnv(t, nil, "", func(o *Options) { o.LogMaxLen = 5 })
	var words []string
	for i := range 400 {
		words = append(words, fmt.Sprintf("w%d ", i+1))
	}
	e.srv.o.Generator = &attachGen{fakeGenerator: e.gen, words: words}
	c := e.rawLogin("alice")
	sid := rawSession(t, c)
	deadTurn(t, e, sid, "r1", words[:300])
	ctx := context.Background()
	if n, err := e.rdb.XLen(ctx, e.srv.log.key(sid, "r1")).Result(); err != nil || n >= 300 {
		t.Fatalf("the log holds %d of 300 logged deltas (%v); want it trimmed", n, err)
	}
	if attached, err := e.srv.recoverTurn(ctx, sid, "r1"); err != nil || !attached {
		t.Fatalf("attached=%v err=%v", attached, err)
	}
	m := waitReply(t, e, sid, "r1")
	if want := strings.Join(words, ""); m.Partial || m.Content != want {
		t.Fatalf("stored (partial=%v) %d bytes starting %.30q; the generation is %d bytes starting %.30q", m.Partial, len(m.Content), m.Content, len(want), want)
	}
}

// TestCancelReachesTakenOverTurn: a client that resumed on the gateway
// running a taken-over turn cancels it from its own socket while the turn
// is being attached (run with -race: the turn's stream is shared).
func TestCancelReachesTakenOverTurn(t *testing.T) {
	e := newEnv(t, nil, "", nil)
	e.gen.gate = make(chan struct{}) // the generation waits: only a cancel ends it
	e.srv.o.Generator = &attachGen{fakeGenerator: e.gen, words: []string{"one ", "two ", "three"}}
	c := e.rawLogin("alice")
	sid := rawSession(t, c)
	deadTurn(t, e, sid, "r1", nil)
	found := make(chan bool)
	go func() {
		for end := time.Now().Add(5 * time.Second); time.Now().Before(end); {
			if e.srv.cancelLocal("acme", "alice", "r1") {
				found <- true
				return
			}
		}
		found <- false
	}()
	if attached, err := e.srv.recoverTurn(context.Background(), sid, "r1"); err != nil || !attached {
		t.Fatalf("attached=%v err=%v", attached, err)
	}
	if !<-found {
		t.Fatal("the cancel never found the taken-over turn")
	}
	if m := waitReply(t, e, sid, "r1"); !m.Partial || m.Interrupted != interruptCancel || m.FinishReason != engine.FinishCancelled {
		t.Fatalf("stored %+v; want it cancelled", m)
	}
}

// TestTakeoverOfLiveOwnerChargesOnce: an owner that was not dead (stalled
// past its lease) and the gateway that took its turn over both read the
// generation to its end. The reply is stored once, and the tenant pays
// for it once.
func TestTakeoverOfLiveOwnerChargesOnce(t *testing.T) {
	e := newEnv(t, nil, "", nil)
	ctx := context.Background()
	if _, err := e.store.Update(ctx, "acme", func(tn *tenants.Tenant) error { tn.Limits.TokensPerMinute = 100000; return nil }); err != nil {
		t.Fatal(err)
	}
	words := strings.SplitAfter(fakeReply("a b"), " ")
	e.gen.gate = make(chan struct{}, 100)
	e.srv.o.Generator = &attachGen{fakeGenerator: e.gen, words: words}
	srv2, err := New(Options{Redis: e.rdb, Generator: &attachGen{fakeGenerator: newFake(), words: words}, Prefix: e.srv.o.Prefix, Logger: e.srv.o.Logger})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv2.Shutdown(context.Background()) })
	c := e.rawLogin("alice")
	sid := rawSession(t, c)
	c.SendJSON(map[string]any{"type": "chat", "session": sid, "request": "r1", "content": "a b"})
	e.gen.gate <- struct{}{}
	if f := c.Read(); f.Type != "delta" {
		t.Fatalf("have %+v; want the first delta", f)
	}
	// The second gateway takes the first for dead and attaches.
	if attached, err := srv2.recoverTurn(ctx, sid, "r1"); err != nil || !attached {
		t.Fatalf("attached=%v err=%v", attached, err)
	}
	for range len(words) {
		e.gen.gate <- struct{}{}
	}
	if _, done, _ := c.Collect("r1", 1); done.FinishReason != engine.FinishStop {
		t.Fatalf("have done %+v", done)
	}
	// Both turns end; each charges, if at all, before it leaves s.turns.
	for _, s := range []*Server{e.srv, srv2} {
		for end := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			s.mu.Lock()
			n := len(s.turns)
			s.mu.Unlock()
			if n == 0 {
				break
			}
			if time.Now().After(end) {
				t.Fatal("a turn never ended")
			}
		}
	}
	keys, err := testredis.Keys(ctx, e.rdb, e.srv.o.Prefix+"*tpm:*")
	if err != nil || len(keys) == 0 {
		t.Fatalf("no token counter (%v): the tenant was never charged", err)
	}
	charged := 0
	for _, k := range keys {
		n, _ := e.rdb.Get(ctx, k).Int()
		charged += n
	}
	if want := 3 + len(words); charged != want { // the fake's prompt is 3 tokens
		t.Fatalf("tenant charged %d tokens for one reply of %d", charged, want)
	}
}

// closingGen closes every socket of the gateway while it places a
// request, as a client that goes away mid-placement does.
type closingGen struct {
	*attachGen
	s *Server
}

func (g *closingGen) Generate(ctx context.Context, r engine.Request) (engine.Events, error) {
	st, err := g.attachGen.Generate(ctx, r)
	g.s.mu.Lock()
	var conns []*Connection
	for c := range g.s.conns {
		conns = append(conns, c)
	}
	g.s.mu.Unlock()
	for _, c := range conns {
		c.Close(CloseGoingAway, "gone")
		<-c.Closing()
	}
	time.Sleep(50 * time.Millisecond) // the socket's context is cancelled on Closing
	return st, err
}

// TestHandleOutlivesTheSocket: a client that goes away while its request
// is placed leaves a generation that runs on; its handle is recorded all
// the same, so a takeover stays possible should this gateway die.
func TestHandleOutlivesTheSocket(t *testing.T) {
	e := newEnv(t, nil, "", nil)
	e.srv.o.Generator = &closingGen{attachGen: &attachGen{fakeGenerator: e.gen}, s: e.srv}
	c := e.rawLogin("alice")
	sid := rawSession(t, c)
	c.SendJSON(map[string]any{"type": "chat", "session": sid, "request": "r1", "content": "a b"})
	id := engineRequestID("acme", sid, "r1")
	for end := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		_, _, handle, err := e.srv.sessions.requestFinish(context.Background(), sid, "r1")
		if err != nil {
			t.Fatal(err)
		}
		if handle == id {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("the request's handle is %q; want %q", handle, id)
		}
	}
}

// TestTakeoverHoldsAConcurrencySlot: a generation another gateway
// started and this one took over counts against the tenant's concurrency
// cap until it ends, as it did on the gateway that died: with a cap of one,
// a new chat is refused (over_quota, concurrency) while it runs and
// admitted after.
func TestTakeoverHoldsAConcurrencySlot(t *testing.T) {
	e := newEnv(t, nil, "", nil)
	ctx := context.Background()
	if _, err := e.store.Update(ctx, "acme", func(tn *tenants.Tenant) error { tn.Limits.MaxConcurrent = 1; return nil }); err != nil {
		t.Fatal(err)
	}
	words := []string{"one ", "two ", "three"}
	e.gen.gate = make(chan struct{}, 100)
	e.srv.o.Generator = &attachGen{fakeGenerator: e.gen, words: words}
	c := e.rawLogin("alice")
	sid := rawSession(t, c)
	deadTurn(t, e, sid, "r1", words[:1])
	if attached, err := e.srv.recoverTurn(ctx, sid, "r1"); err != nil || !attached {
		t.Fatalf("attached=%v err=%v", attached, err)
	}
	other := rawSession(t, c)
	c.SendJSON(map[string]any{"type": "chat", "session": other, "request": "r2", "content": "b"})
	if f := c.Read(); f.Type != "error" || f.Code != CodeOverQuota || f.Reason != ReasonConcurrency || f.Request != "r2" {
		t.Fatalf("have %+v; want over_quota (concurrency) for r2 while the taken-over r1 runs", f)
	}
	for range len(words) {
		e.gen.gate <- struct{}{}
	}
	if m := waitReply(t, e, sid, "r1"); m.Content != strings.Join(words, "") {
		t.Fatalf("stored %+v; want the whole generation", m)
	}
	for end := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		e.srv.mu.Lock()
		n := len(e.srv.turns)
		e.srv.mu.Unlock()
		if n == 0 {
			break
		}
		if time.Now().After(end) {
			t.Fatal("the taken-over turn never ended")
		}
	}
	c.SendJSON(map[string]any{"type": "chat", "session": other, "request": "r3", "content": "c"})
	for range 10 {
		e.gen.gate <- struct{}{}
	}
	if _, done, errs := c.Collect("r3", 0); done.Type != "done" || len(errs) > 0 {
		t.Fatalf("have %+v after %+v; want r3 admitted and done once r1 ended", done, errs)
	}
}
