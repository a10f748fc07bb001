package gateway

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/specgate/specgate/cluster"
	"github.com/specgate/specgate/engine"
)

// wordEngine generates "w<i> " for token i, one every delay.
type wordEngine struct{ delay time.Duration }

type wordEvents struct {
	ctx       context.Context
	next, max int
	delay     time.Duration
}

func (g wordEngine) Generate(ctx context.Context, r engine.Request) (engine.Events, error) {
	return &wordEvents{ctx: ctx, next: len(r.Generated) + 1, max: r.MaxTokens, delay: g.delay}, nil
}
func (g wordEngine) Cancel(string) {}

func (s *wordEvents) Recv(ctx context.Context) (engine.Event, error) {
	if s.next < 0 {
		return engine.Event{}, io.EOF
	}
	if s.next > s.max {
		s.next = -1
		return engine.Event{Final: &engine.Final{FinishReason: engine.FinishLength}}, nil
	}
	select {
	case <-time.After(s.delay):
	case <-s.ctx.Done():
		s.next = -1
		return engine.Event{Final: &engine.Final{FinishReason: engine.FinishCancelled}}, nil
	}
	i := s.next
	s.next++
	return engine.Event{Seq: i, Tokens: []int32{int32(i)}, Text: fmt.Sprintf("w%d ", i)}, nil
}

func words(from, to int) string {
	var b strings.Builder
	for i := from; i <= to; i++ {
		fmt.Fprintf(&b, "w%d ", i)
	}
	return b.String()
}

// TestSplitTakeoverStoresLongReply: split mode, the gateway running a
// turn dies after more deltas than the log's cap; another gateway takes
// the turn over (Attach). TestTakeoverStoresWholeReplyOfTrimmedLog says
// the stored reply must then be the whole generation, and the log must
// end with the done record. An engine that capped the log it writes
// left the attached turn nothing to read: it stored an empty reply and
// its done record (id 1-0) could not be appended.
func TestSplitTakeoverStoresLongReply(t *testing.T) {
	e := newEnv(t, nil, "", func(o *Options) { o.LogMaxLen = 5 })
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	prefix := e.srv.o.Prefix
	ctx, stop := context.WithCancel(context.Background())
	t.Cleanup(stop)
	go cluster.RunEngine(ctx, cluster.EngineOptions{Redis: e.rdb, Prefix: prefix, ID: "e1", Engine: wordEngine{time.Millisecond}, Logger: quiet,
		HeartbeatInterval: 100 * time.Millisecond, HeartbeatTTL: 400 * time.Millisecond, ClaimInterval: 100 * time.Millisecond, ClaimTimeout: 500 * time.Millisecond})
	newClient := func() *cluster.Client {
		c, err := cluster.NewClient(cluster.ClientOptions{Redis: e.rdb, Prefix: prefix, PlaceTimeout: 3 * time.Second, IdleTimeout: 20 * time.Second,
			PollInterval: 100 * time.Millisecond, HeartbeatInterval: 100 * time.Millisecond, HeartbeatTTL: 400 * time.Millisecond,
			RefreshInterval: 50 * time.Millisecond, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		for end := time.Now().Add(5 * time.Second); len(c.Engines()) == 0; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(end) {
				t.Fatal("no engine")
			}
		}
		return c
	}
	dead, live := newClient(), newClient()
	e.srv.o.Generator = live

	c := e.rawLogin("alice")
	sid := rawSession(t, c)
	// What the dead gateway left: its turn, the handle, a generation
	// that writes the log on.
	if err := e.srv.registerTurn(ctx, sid, "r1"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.srv.sessions.StartTurn(ctx, "acme", "alice", sid, "r1", "hello"); err != nil {
		t.Fatal(err)
	}
	const n = 400
	st, err := dead.GenerateToLog(ctx, engine.Request{ID: engineRequestID("acme", sid, "r1"), Tenant: "acme", Session: sid, MaxTokens: n},
		e.srv.log.key(sid, "r1"), e.srv.log.maxLen, e.srv.log.ttl)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.srv.sessions.setAttach(ctx, sid, "r1", dead.Handle(st)); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 300; i++ { // the dead gateway read 300 deltas
		if _, err := st.Recv(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if attached, err := e.srv.recoverTurn(ctx, sid, "r1"); err != nil || !attached {
		t.Fatalf("attached=%v err=%v", attached, err)
	}
	m := waitReply(t, e, sid, "r1")
	// The done record follows the stored reply (persist): wait for it.
	tail, _ := e.srv.log.last(ctx, sid, "r1")
	for end := time.Now().Add(10 * time.Second); (tail == nil || tail.Done == nil) && time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		tail, _ = e.srv.log.last(ctx, sid, "r1")
	}
	if want := words(1, n); m.Partial || m.Content != want || tail == nil || tail.Done == nil {
		t.Fatalf("stored (partial=%v, interrupted=%q, error=%q) %d bytes; the generation is %d bytes; the log ends with %+v",
			m.Partial, m.Interrupted, m.Error, len(m.Content), len(want), tail)
	}
}
