package loadgen

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/gateway"
	"github.com/specgate/specgate/internal/testredis"
)

// pacedGen is a fake engine that emits like the real one: one goroutine
// (the "step loop") ticks at a steady interval and, on each tick, hands
// one delta to every live request at once. Each delta's text is its emit
// time, in nanoseconds since base, so a client can compute emit → receive
// on the same monotonic clock, and how many requests the step served.
// Deltas go into a per-request buffer big enough for the whole request,
// so a gateway that reads late shows up as latency instead of slowing the
// emitter.
type pacedGen struct {
	interval time.Duration
	tokens   int // per request when MaxTokens is 0
	base     time.Time

	stop context.CancelFunc
	done chan struct{}

	mu      sync.Mutex // protects the fields below
	live    map[string]*pacedStream
	prios   map[engine.Priority]int
	maxLive int
}

type pacedStream struct {
	ch    chan engine.Event
	left  int
	seq   int
	ended bool // Recv has returned the final event
}

// newPacedGen starts the emitter; it stops at tb's cleanup, which runs
// after the gateway's own (registered later, so run earlier).
func newPacedGen(tb testing.TB, interval time.Duration, tokens int) *pacedGen {
	ctx, cancel := context.WithCancel(context.Background())
	g := &pacedGen{
		interval: interval, tokens: tokens, base: time.Now(),
		stop: cancel, done: make(chan struct{}),
		live: map[string]*pacedStream{}, prios: map[engine.Priority]int{},
	}
	go g.emit(ctx)
	tb.Cleanup(func() { g.stop(); <-g.done })
	return g
}

func (g *pacedGen) emit(ctx context.Context) {
	defer close(g.done)
	t := time.NewTicker(g.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		g.mu.Lock()
		stamp := strconv.FormatInt(int64(time.Since(g.base)), 10) + "/" + strconv.Itoa(len(g.live)) + " "
		for id, s := range g.live {
			s.seq++
			s.left--
			s.ch <- engine.Event{Seq: s.seq, Text: stamp}
			if s.left == 0 {
				s.ch <- engine.Event{Final: &engine.Final{FinishReason: engine.FinishLength,
					Usage: engine.Usage{PromptTokens: 8, CompletionTokens: s.seq}}}
				delete(g.live, id)
			}
		}
		g.mu.Unlock()
	}
}

func (g *pacedGen) Generate(_ context.Context, r engine.Request) (engine.Events, error) {
	n := g.tokens
	if r.MaxTokens > 0 {
		n = r.MaxTokens
	}
	s := &pacedStream{ch: make(chan engine.Event, n+1), left: n}
	g.mu.Lock()
	g.live[r.ID] = s
	g.prios[r.Priority]++
	g.maxLive = max(g.maxLive, len(g.live))
	g.mu.Unlock()
	return s, nil
}

func (g *pacedGen) Cancel(id string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if s := g.live[id]; s != nil {
		s.ch <- engine.Event{Final: &engine.Final{FinishReason: engine.FinishCancelled,
			Usage: engine.Usage{PromptTokens: 8, CompletionTokens: s.seq}}}
		delete(g.live, id)
	}
}

// priorities returns how many requests came in each class.
func (g *pacedGen) priorities() map[engine.Priority]int {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make(map[engine.Priority]int, len(g.prios))
	for k, v := range g.prios {
		out[k] = v
	}
	return out
}

func (g *pacedGen) peakLive() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.maxLive
}

// stampOf reads a delta's emit time back from the text pacedGen wrote,
// "<ns since base>/<requests live at the step> ", and how many requests
// were live when it was emitted.
func (g *pacedGen) stampOf(text string) (at time.Time, live int, ok bool) {
	t, l, ok := strings.Cut(strings.TrimSpace(text), "/")
	if !ok {
		return time.Time{}, 0, false
	}
	ns, err := strconv.ParseInt(t, 10, 64)
	if err != nil {
		return time.Time{}, 0, false
	}
	if live, err = strconv.Atoi(l); err != nil {
		return time.Time{}, 0, false
	}
	return g.base.Add(time.Duration(ns)), live, true
}

func (s *pacedStream) Recv(ctx context.Context) (engine.Event, error) {
	if s.ended {
		return engine.Event{}, io.EOF
	}
	select {
	case ev := <-s.ch:
		s.ended = ev.Final != nil
		return ev, nil
	case <-ctx.Done():
		return engine.Event{}, ctx.Err()
	}
}

// gw is an in-process gateway on loopback over the shared test Redis,
// under a prefix of the test's own.
type gw struct {
	url    string // ws://127.0.0.1:port/v1/ws
	rdb    redis.UniversalClient
	prefix string
	srv    *gateway.Server
	reg    *prometheus.Registry
}

// openConns is the gateway's specgate_ws_connections gauge.
func (g *gw) openConns(tb testing.TB) int {
	tb.Helper()
	mfs, err := g.reg.Gather()
	if err != nil {
		tb.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "specgate_ws_connections" && len(mf.GetMetric()) > 0 {
			return int(mf.GetMetric()[0].GetGauge().GetValue())
		}
	}
	return 0
}

func startGateway(tb testing.TB, gen engine.Generator) *gw {
	tb.Helper()
	rdb := testredis.Client(tb)
	prefix := testredis.Prefix(tb)
	reg := prometheus.NewRegistry()
	srv, err := gateway.New(gateway.Options{
		Registry:  reg,
		Redis:     rdb,
		Generator: gen,
		Prefix:    prefix,
		Logger:    slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		tb.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		hs.Close()
	})
	return &gw{url: "ws" + strings.TrimPrefix(hs.URL, "http") + "/v1/ws", rdb: rdb, prefix: prefix, srv: srv, reg: reg}
}
