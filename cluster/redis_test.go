package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/internal/testredis"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// discardLogger silences go-redis's own logging of failed dials, which
// the outage tests cause on purpose.
type discardLogger struct{}

func (discardLogger) Printf(context.Context, string, ...any) {}

func TestMain(m *testing.M) {
	redis.SetLogger(discardLogger{})
	os.Exit(m.Run())
}

// fast are timings that keep takeovers within a test's patience.
func fastEngine(rdb redis.UniversalClient, prefix, id string, run engine.Generator) EngineOptions {
	return EngineOptions{Redis: rdb, Prefix: prefix, ID: id, Engine: run, Capacity: 8,
		HeartbeatInterval: 100 * time.Millisecond, HeartbeatTTL: 400 * time.Millisecond,
		ClaimInterval: 100 * time.Millisecond, ClaimTimeout: 500 * time.Millisecond,
		RetryTimeout: 20 * time.Second, DrainTimeout: 5 * time.Second, Logger: quiet}
}

func fastClient(t *testing.T, rdb redis.UniversalClient, prefix string) *Client {
	t.Helper()
	c, err := NewClient(ClientOptions{Redis: rdb, Prefix: prefix, PlaceTimeout: 3 * time.Second, IdleTimeout: 20 * time.Second,
		PollInterval: 100 * time.Millisecond, HeartbeatInterval: 100 * time.Millisecond, HeartbeatTTL: 400 * time.Millisecond,
		RefreshInterval: 50 * time.Millisecond, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// startEngine runs a worker until the returned stop is called (or the
// test ends); stop waits for RunEngine to return.
func startEngine(t *testing.T, o EngineOptions) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- RunEngine(ctx, o) }()
	var once bool
	stop = func() {
		if once {
			return
		}
		once = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("RunEngine: %v", err)
		}
	}
	t.Cleanup(stop)
	return stop
}

// waitEngines waits until c routes over n engines.
func waitEngines(t *testing.T, c *Client, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for len(c.Engines()) != n {
		if time.Now().After(deadline) {
			t.Fatalf("have engines %+v; want %d", c.Engines(), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func readAll(t *testing.T, s *Stream) (string, *engine.Final) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var text string
	var final *engine.Final
	for {
		ev, err := s.Recv(ctx)
		if errors.Is(err, io.EOF) {
			return text, final
		}
		if err != nil {
			t.Fatalf("recv: %v", err)
		}
		if ev.Final != nil {
			final = ev.Final
		}
		text += ev.Text
	}
}

// pendingTotal sums the pending entries of every request stream.
func pendingTotal(t *testing.T, rdb redis.UniversalClient, prefix string) int64 {
	t.Helper()
	ctx := context.Background()
	k := newKeys(prefix)
	qs, err := rdb.SMembers(ctx, k.queues()).Result()
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, q := range qs {
		p, err := rdb.XPending(ctx, q, group).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			continue // deleted meanwhile
		}
		if p != nil {
			n += p.Count
		}
	}
	return n
}

func TestFencing(t *testing.T) {
	rdb := testredis.Client(t)
	k := newKeys(testredis.Prefix(t))
	ctx := context.Background()
	rk := "r#1"
	acquire := func(who string) []int64 {
		res, err := acquireScript.Run(ctx, rdb, []string{k.req(rk)}, who, 60000).Int64Slice()
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	// appendAs appends delta seq, or the final when seq is 0.
	appendAs := func(fence int64, seq int) int64 {
		fin, fields := "0", []any{"k", kindDelta, "s", seq, "x", "a", "t", "1"}
		if seq == 0 {
			fin, fields = "1", []any{"k", kindFinal, "j", "{}"}
		}
		args := append([]any{fence, fin, 60000, "", rk, seq}, fields...)
		n, err := appendScript.Run(ctx, rdb, []string{k.req(rk), k.out(rk)}, args...).Int64()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	xlen := func() int64 { return rdb.XLen(ctx, k.out(rk)).Val() }
	steps := []struct {
		name string
		do   func() int64
		want int64
		len  int64 // output entries after the step
	}{
		{"a acquires", func() int64 { return acquire("a")[0] }, 1, 0},
		{"a appends", func() int64 { return appendAs(1, 1) }, appendOK, 1},
		{"b takes over", func() int64 { return acquire("b")[0] }, 2, 1},
		{"zombie a is fenced", func() int64 { return appendAs(1, 2) }, appendFenced, 1},
		{"b appends", func() int64 { return appendAs(2, 2) }, appendOK, 2},
		// A retry of an append whose answer was lost (the primary
		// failed over after replicating it) must not repeat the delta.
		{"b's retry is not written twice", func() int64 { return appendAs(2, 2) }, appendOK, 2},
		{"nor an older delta", func() int64 { return appendAs(2, 1) }, appendOK, 2},
		{"cancel flag is reported", func() int64 {
			rdb.HSet(ctx, k.req(rk), "cancel", "1")
			return appendAs(2, 3)
		}, appendCancelled, 3},
		{"cancel flag is reported on a retry", func() int64 { return appendAs(2, 3) }, appendCancelled, 3},
		{"b ends it", func() int64 { return appendAs(2, 0) }, appendCancelled, 4},
		{"nothing after the end", func() int64 { return appendAs(2, 4) }, appendDone, 4},
		{"a done request is not acquired", func() int64 { return acquire("c")[0] }, appendDone, 4},
	}
	for _, s := range steps {
		if have := s.do(); have != s.want {
			t.Fatalf("%s: have %d; want %d", s.name, have, s.want)
		}
		if n := xlen(); n != s.len {
			t.Fatalf("%s: have %d output entries; want %d", s.name, n, s.len)
		}
	}
}

func TestSubmitAndRefuse(t *testing.T) {
	rdb := testredis.Client(t)
	prefix := testredis.Prefix(t)
	fe := newFakeEngine(time.Millisecond)
	startEngine(t, fastEngine(rdb, prefix, "e1", fe))
	c := fastClient(t, rdb, prefix)
	waitEngines(t, c, 1)
	ctx := context.Background()

	s, err := c.Submit(ctx, engine.Request{ID: "r1", Tenant: "acme", Session: "s1", MaxTokens: 5})
	if err != nil {
		t.Fatal(err)
	}
	text, final := readAll(t, s)
	if want := fakeText(1, 5); text != want || final == nil || final.FinishReason != engine.FinishLength || final.Usage.CompletionTokens != 5 {
		t.Fatalf("have %q, %+v; want %q, length, 5 tokens", text, final, want)
	}
	if s.Engine() != "e1" {
		t.Fatalf("have engine %q; want e1", s.Engine())
	}

	_, err = c.Submit(ctx, engine.Request{ID: "r2", MaxTokens: -1})
	var ee *engine.Error
	if !errors.As(err, &ee) || ee.Code != engine.CodeBadRequest {
		t.Fatalf("have %v; want the engine's bad_request", err)
	}
	waitPending(t, rdb, prefix)
}

func waitPending(t *testing.T, rdb redis.UniversalClient, prefix string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		n := pendingTotal(t, rdb, prefix)
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("have %d pending entries; want none", n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestFailover abandons a running request on one engine (its worker stops
// without finishing, as if killed) and checks another takes it over where
// it stopped: the text has no gap and no duplicate.
func TestFailover(t *testing.T) {
	rdb := testredis.Client(t)
	prefix := testredis.Prefix(t)
	c := fastClient(t, rdb, prefix)
	f1, f2 := newFakeEngine(5*time.Millisecond), newFakeEngine(5*time.Millisecond)
	o1 := fastEngine(rdb, prefix, "e1", f1)
	o1.DrainTimeout = time.Millisecond // a crash: nothing finishes
	stop1 := startEngine(t, o1)
	startEngine(t, fastEngine(rdb, prefix, "e2", f2))
	waitEngines(t, c, 2)

	// A session that routes to e1.
	sess := ""
	for i := 0; sess == ""; i++ {
		if id, _ := Route("acme/s"+string(rune('a'+i)), c.Engines()); id == "e1" {
			sess = "s" + string(rune('a'+i))
		}
	}
	ctx := context.Background()
	s, err := c.Submit(ctx, engine.Request{ID: "r1", Tenant: "acme", Session: sess, MaxTokens: 60})
	if err != nil {
		t.Fatal(err)
	}
	var text string
	for len(text) < len(fakeText(1, 10)) {
		ev, err := s.Recv(ctx)
		if err != nil || ev.Final != nil {
			t.Fatalf("have %+v, %v; want deltas", ev, err)
		}
		text += ev.Text
	}
	if s.Engine() != "e1" {
		t.Fatalf("have engine %q; want e1 first", s.Engine())
	}
	stop1()
	rest, final := readAll(t, s)
	if want := fakeText(1, 60); text+rest != want {
		t.Fatalf("have %q; want %q", text+rest, want)
	}
	if final.FinishReason != engine.FinishLength || final.Usage.CompletionTokens != 60 {
		t.Fatalf("have %+v; want length with 60 completion tokens", final)
	}
	if s.Engine() != "e2" {
		t.Fatalf("have engine %q; want e2 after the takeover", s.Engine())
	}
	subs := f2.submissions()
	if len(subs) != 1 || len(subs[0].Generated) == 0 {
		t.Fatalf("have e2 submissions %+v; want one with the generated tokens", subs)
	}
	waitPending(t, rdb, prefix)
}

// TestCancelRoutes cancels through the client and checks the engine
// stopped the request.
func TestCancel(t *testing.T) {
	rdb := testredis.Client(t)
	prefix := testredis.Prefix(t)
	fe := newFakeEngine(5 * time.Millisecond)
	startEngine(t, fastEngine(rdb, prefix, "e1", fe))
	c := fastClient(t, rdb, prefix)
	waitEngines(t, c, 1)
	ctx := context.Background()
	s, err := c.Submit(ctx, engine.Request{ID: "r1", Tenant: "acme", Session: "s", MaxTokens: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Recv(ctx); err != nil {
		t.Fatal(err)
	}
	c.Cancel("r1")
	_, final := readAll(t, s)
	if final.FinishReason != engine.FinishCancelled || final.Usage.CompletionTokens >= 1000 {
		t.Fatalf("have %+v; want cancelled early", final)
	}
	waitPending(t, rdb, prefix)
}

// nanLogprobs is a fakeEngine whose token at gives a NaN log probability,
// as a model with a broken row would.
type nanLogprobs struct {
	*fakeEngine
	at int
}

func (g nanLogprobs) Generate(ctx context.Context, r engine.Request) (engine.Events, error) {
	st, err := g.fakeEngine.Generate(ctx, r)
	if err != nil {
		return nil, err
	}
	return nanEvents{st, g.at}, nil
}

type nanEvents struct {
	engine.Events
	at int
}

func (s nanEvents) Recv(ctx context.Context) (engine.Event, error) {
	ev, err := s.Events.Recv(ctx)
	for _, tok := range ev.Tokens {
		lp := float32(-0.5)
		if int(tok) == s.at {
			lp = float32(math.NaN())
		}
		ev.Logprobs = append(ev.Logprobs, engine.TokenLogprob{Token: tok, Piece: "x", Logprob: lp})
	}
	return ev, err
}

// TestUnencodableLogprobs: log probabilities that JSON cannot carry end
// the request with an internal error that says why, after the deltas
// before them, rather than reaching the client without them; the request
// is not left for another engine to fail the same way.
func TestUnencodableLogprobs(t *testing.T) {
	rdb := testredis.Client(t)
	prefix := testredis.Prefix(t)
	startEngine(t, fastEngine(rdb, prefix, "e1", nanLogprobs{newFakeEngine(time.Millisecond), 3}))
	c := fastClient(t, rdb, prefix)
	waitEngines(t, c, 1)
	s, err := c.Submit(context.Background(), engine.Request{ID: "r1", Tenant: "acme", Session: "s", MaxTokens: 5, Logprobs: true})
	if err != nil {
		t.Fatal(err)
	}
	text, final := readAll(t, s)
	var ee *engine.Error
	if want := fakeText(1, 2); text != want || final == nil || final.FinishReason != engine.FinishError ||
		!errors.As(final.Err, &ee) || ee.Code != engine.CodeInternal || !strings.Contains(ee.Message, "encode the log probabilities of delta 3") {
		t.Fatalf("have %q, %+v; want %q and an internal error naming delta 3's log probabilities", text, final, want)
	}
	waitPending(t, rdb, prefix)
}

// TestRedisOutage kills Redis mid-stream: the stream goes on after Redis
// returns, with every token once; a Submit while it is down fails with a
// typed error at once.
func TestRedisOutage(t *testing.T) {
	srv := testredis.Start(t)
	rdb := srv.Client()
	const prefix = "t:"
	c := fastClient(t, rdb, prefix)
	fe := newFakeEngine(10 * time.Millisecond)
	startEngine(t, fastEngine(rdb, prefix, "e1", fe))
	waitEngines(t, c, 1)
	ctx := context.Background()
	s, err := c.Submit(ctx, engine.Request{ID: "r1", Tenant: "acme", Session: "s", MaxTokens: 150})
	if err != nil {
		t.Fatal(err)
	}
	var text string
	for len(text) < len(fakeText(1, 5)) {
		ev, err := s.Recv(ctx)
		if err != nil {
			t.Fatal(err)
		}
		text += ev.Text
	}
	srv.Kill()
	t0 := time.Now()
	_, err = c.Submit(ctx, engine.Request{ID: "r2", Tenant: "acme", Session: "s2", MaxTokens: 5})
	took := time.Since(t0)
	var ue *UnavailableError
	if !errors.As(err, &ue) || !errors.Is(err, engine.ErrClosed) {
		t.Fatalf("have %v; want an *UnavailableError that is engine.ErrClosed", err)
	}
	// At once: refused by the failed write, not after waiting out
	// PlaceTimeout for an engine. Said by the cause, not by a clock,
	// which a loaded machine stretches.
	if ue.Reason != "cannot queue the request" || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("have %v; want the refusal of the write that queues the request", err)
	}
	// A bound far above a loaded machine's delays still tells a refusal
	// from a write retried until a timeout (the engines' RetryTimeout is
	// 20 s here).
	if took > 10*time.Second {
		t.Fatalf("refused after %v; want it without retrying the write", took)
	}
	time.Sleep(1500 * time.Millisecond)
	srv.Restart()
	rest, final := readAll(t, s)
	if want := fakeText(1, 150); text+rest != want {
		t.Fatalf("have %q; want %q", text+rest, want)
	}
	if final.FinishReason != engine.FinishLength {
		t.Fatalf("have %+v; want length", final)
	}
	// And new requests flow again.
	s, err = c.Submit(ctx, engine.Request{ID: "r3", Tenant: "acme", Session: "s3", MaxTokens: 3})
	if err != nil {
		t.Fatal(err)
	}
	if text, _ := readAll(t, s); text != fakeText(1, 3) {
		t.Fatalf("have %q; want %q", text, fakeText(1, 3))
	}
	waitPending(t, rdb, prefix)
}

// TestAttach: a second gateway attaches to a running request by the
// handle of the first one's stream and reads it whole, from its first
// delta to its final, with no gap or duplicate; the engine's notifications
// follow it there; and its cancel reaches the engine.
func TestAttach(t *testing.T) {
	rdb := testredis.Client(t)
	prefix := testredis.Prefix(t)
	startEngine(t, fastEngine(rdb, prefix, "e1", newFakeEngine(20*time.Millisecond)))
	a := fastClient(t, rdb, prefix)
	waitEngines(t, a, 1)
	// b polls too rarely for this test to pass on polls: it must be told.
	b, err := NewClient(ClientOptions{Redis: rdb, Prefix: prefix, PlaceTimeout: 3 * time.Second, IdleTimeout: 20 * time.Second,
		PollInterval: time.Hour, HeartbeatInterval: 100 * time.Millisecond, HeartbeatTTL: 400 * time.Millisecond,
		RefreshInterval: 50 * time.Millisecond, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	ctx := context.Background()

	for _, tc := range []struct{ logged, cancel bool }{{false, false}, {false, true}, {true, false}, {true, true}} {
		cancel := tc.cancel
		id := fmt.Sprintf("attach-%v-%v", tc.logged, cancel)
		req := engine.Request{ID: id, MaxTokens: 30, Prompt: []int32{1}}
		var st engine.Events
		if tc.logged { // the handle names the log too
			st, err = a.GenerateToLog(ctx, req, logTarget(prefix, "s", id).Key, 1000, time.Minute)
		} else {
			st, err = a.Generate(ctx, req)
		}
		if err != nil {
			t.Fatal(err)
		}
		for i := 1; i <= 3; i++ {
			if ev, err := st.Recv(ctx); err != nil || ev.Text != fakeText(i, i) {
				t.Fatalf("first reader, delta %d: have %+v, %v", i, ev, err)
			}
		}
		h := a.Handle(st)
		if h == "" {
			t.Fatal("no handle for a stream of the client")
		}
		at, err := b.Attach(ctx, h)
		if err != nil {
			t.Fatal(err)
		}
		if cancel {
			b.Cancel(id)
		}
		var text string
		var final *engine.Final
		for final == nil {
			rctx, stop := context.WithTimeout(ctx, 5*time.Second)
			ev, err := at.Recv(rctx)
			stop()
			if err != nil {
				t.Fatalf("attached reader: %v after %q", err, text)
			}
			text += ev.Text
			final = ev.Final
		}
		switch {
		case !cancel && (final.FinishReason != engine.FinishLength || text != fakeText(1, 30)):
			t.Fatalf("have %q, %+v; want every delta from the first, then length", text, final)
		case cancel && (final.FinishReason != engine.FinishCancelled || !strings.HasPrefix(fakeText(1, 30), text)):
			t.Fatalf("have %q, %+v; want a prefix of the reply, then cancelled", text, final)
		}
		go func() { // the first reader drains what is left
			for {
				if _, err := st.Recv(ctx); err != nil {
					return
				}
			}
		}()
	}
	// Gone says no retry can succeed: the gateway then ends the reply
	// with what its log holds instead of trying again.
	for _, h := range []string{"no-suffix", "acme/gone#0123"} {
		if _, err := b.Attach(ctx, h); !errors.Is(err, engine.ErrGone) {
			t.Fatalf("attach to %q: have %v; want engine.ErrGone", h, err)
		}
	}
}
