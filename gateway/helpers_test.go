package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/gorilla/websocket"
	"github.com/redis/go-redis/v9"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/internal/testredis"
	"github.com/specgate/specgate/tenants"
)

// fakeGenerator answers every request deterministically: the words of
// "echo: <last user message> ." one delta each. When gate is set, each
// delta waits for a value from it, so tests control the pace.
type fakeGenerator struct {
	gate chan struct{}
	// refuse, when set, is returned by Submit.
	refuse error

	mu       sync.Mutex // protects the fields below
	requests []engine.Request
	streams  map[string]*fakeStream
}

func newFake() *fakeGenerator { return &fakeGenerator{streams: map[string]*fakeStream{}} }

func fakeReply(content string) string { return "echo: " + content + " ." }

func (g *fakeGenerator) Generate(ctx context.Context, r engine.Request) (engine.Events, error) {
	if g.refuse != nil {
		return nil, g.refuse
	}
	last := r.Messages[len(r.Messages)-1].Content
	words := strings.SplitAfter(fakeReply(last), " ")
	st := &fakeStream{words: words, gate: g.gate, cancel: make(chan struct{}), ctx: ctx}
	g.mu.Lock()
	g.requests = append(g.requests, r)
	g.streams[r.ID] = st
	g.mu.Unlock()
	return st, nil
}

func (g *fakeGenerator) Cancel(id string) {
	g.mu.Lock()
	st := g.streams[id]
	g.mu.Unlock()
	if st != nil {
		st.once.Do(func() { close(st.cancel) })
	}
}

func (g *fakeGenerator) lastRequest() engine.Request {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.requests[len(g.requests)-1]
}

type fakeStream struct {
	words  []string
	gate   chan struct{}
	cancel chan struct{}
	once   sync.Once
	ctx    context.Context
	i      int
	ended  bool
	final  bool
}

func (s *fakeStream) Recv(ctx context.Context) (engine.Event, error) {
	if s.ended {
		return engine.Event{}, io.EOF
	}
	finish := func(reason string) (engine.Event, error) {
		s.ended = true
		return engine.Event{Final: &engine.Final{FinishReason: reason, Usage: engine.Usage{PromptTokens: 3, CompletionTokens: s.i}}}, nil
	}
	if s.i == len(s.words) {
		return finish(engine.FinishStop)
	}
	if s.gate != nil {
		select {
		case <-s.gate:
		case <-s.cancel:
			return finish(engine.FinishCancelled)
		case <-s.ctx.Done():
			return finish(engine.FinishCancelled)
		case <-ctx.Done():
			return engine.Event{}, ctx.Err()
		}
	}
	select {
	case <-s.cancel:
		return finish(engine.FinishCancelled)
	default:
	}
	s.i++
	return engine.Event{Seq: s.i, Text: s.words[s.i-1]}, nil
}

// env is a gateway under test with one tenant, acme, keyed by HS256 "acme-1".
type env struct {
	t      *testing.T
	srv    *Server
	http   *httptest.Server
	gen    *fakeGenerator
	rdb    redis.UniversalClient
	store  *tenants.Store
	secret []byte
}

func newEnv(t *testing.T, rdb redis.UniversalClient, prefix string, mod func(*Options)) *env {
	t.Helper()
	if rdb == nil {
		rdb = testredis.Client(t)
		prefix = testredis.Prefix(t)
	}
	gen := newFake()
	// The gateway's log is shown with a failing test, not otherwise:
	// goroutines may still log after the test ends, which t.Log forbids.
	logs := &syncBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("gateway log:\n%s", logs.String())
		}
	})
	opts := Options{
		Redis:          rdb,
		Generator:      gen,
		Prefix:         prefix,
		AuthTimeout:    200 * time.Millisecond,
		ResumePoll:     100 * time.Millisecond,
		ResumeIdle:     5 * time.Second,
		PersistTimeout: 5 * time.Second,
		WriteTimeout:   2 * time.Second,
		ControlTimeout: 300 * time.Millisecond,
		Logger:         slog.New(slog.NewTextHandler(logs, nil)),
	}
	if mod != nil {
		mod(&opts)
	}
	srv, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	e := &env{t: t, srv: srv, http: hs, gen: gen, rdb: rdb, store: srv.Tenants()}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		hs.Close()
	})
	k, err := tenants.NewHS256Key("acme-1")
	if err != nil {
		t.Fatal(err)
	}
	e.secret = k.Secret
	if _, err := e.store.Create(context.Background(), tenants.Tenant{ID: "acme", Keys: []tenants.Key{k}, Origins: []string{"https://chat.acme.example"}}); err != nil {
		t.Fatal(err)
	}
	return e
}

// token signs claims for user with acme's key, valid for a minute.
func (e *env) token(user string) string {
	return signHS(e.t, "acme-1", e.secret, jwt.MapClaims{"sub": user, "aud": "specgate", "exp": time.Now().Add(time.Minute).Unix()})
}

func signHS(t *testing.T, kid string, secret []byte, claims jwt.MapClaims) string {
	t.Helper()
	tok := jwt.NewWithClaims(jwt.SigningMethodHS256, claims)
	tok.Header["kid"] = kid
	s, err := tok.SignedString(secret)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func (e *env) wsURL() string { return "ws" + strings.TrimPrefix(e.http.URL, "http") + "/v1/ws" }

// wsClient is a test client that reads frames one at a time, splitting
// batched messages.
type wsClient struct {
	t       *testing.T
	ws      *websocket.Conn
	pending []ServerFrame
}

// dial connects with a Bearer token (token != "") and no Origin.
func (e *env) dial(token string, header http.Header) *wsClient {
	e.t.Helper()
	if header == nil {
		header = http.Header{}
	}
	if token != "" {
		header.Set("Authorization", "Bearer "+token)
	}
	ws, _, err := websocket.DefaultDialer.Dial(e.wsURL(), header)
	if err != nil {
		e.t.Fatalf("dial: %v", err)
	}
	e.t.Cleanup(func() { ws.Close() })
	return &wsClient{t: e.t, ws: ws}
}

// login dials with a Bearer token for user and reads ready.
func (e *env) login(user string) *wsClient {
	e.t.Helper()
	c := e.dial(e.token(user), nil)
	if f := c.read(); f.Type != TypeReady || f.Tenant != "acme" || f.User != user || f.Protocol != 1 {
		e.t.Fatalf("have %+v; want ready for acme/%s protocol 1", f, user)
	}
	return c
}

func (c *wsClient) send(v any) {
	c.t.Helper()
	if err := c.ws.WriteJSON(v); err != nil {
		c.t.Fatalf("send: %v", err)
	}
}

// read returns the next frame, failing the test after 5 s.
func (c *wsClient) read() ServerFrame {
	c.t.Helper()
	f, err := c.tryRead(5 * time.Second)
	if err != nil {
		c.t.Fatalf("read: %v", err)
	}
	return f
}

func (c *wsClient) tryRead(d time.Duration) (ServerFrame, error) {
	if len(c.pending) == 0 {
		_ = c.ws.SetReadDeadline(time.Now().Add(d))
		_, msg, err := c.ws.ReadMessage()
		if err != nil {
			return ServerFrame{}, err
		}
		for line := range strings.SplitSeq(string(msg), "\n") {
			var f ServerFrame
			if err := json.Unmarshal([]byte(line), &f); err != nil {
				return ServerFrame{}, fmt.Errorf("frame %q: %w", line, err)
			}
			c.pending = append(c.pending, f)
		}
	}
	f := c.pending[0]
	c.pending = c.pending[1:]
	return f, nil
}

// createSession creates a session and returns its id.
func (c *wsClient) createSession(title string) string {
	c.t.Helper()
	c.send(map[string]any{"type": "session.create", "title": title})
	f := c.read()
	if f.Type != TypeSession || f.Session == nil || f.Session.ID == "" {
		c.t.Fatalf("have %+v; want a session frame", f)
	}
	return f.Session.ID
}

// collect reads deltas of request until done and returns their text, the
// last seq and the done frame. Other frames fail the test unless they are
// errors for the request, which are returned.
func (c *wsClient) collect(request string) (text string, lastSeq int, done ServerFrame, errs []ServerFrame) {
	c.t.Helper()
	return c.collectAfter(request, 0)
}

// collectAfter is collect for a stream resumed after seq after.
func (c *wsClient) collectAfter(request string, after int) (text string, lastSeq int, done ServerFrame, errs []ServerFrame) {
	c.t.Helper()
	lastSeq = after
	var b strings.Builder
	for {
		f := c.read()
		switch {
		case f.Type == TypeDelta && f.Request == request:
			if f.Seq != lastSeq+1 {
				c.t.Fatalf("have seq %d after %d; want %d", f.Seq, lastSeq, lastSeq+1)
			}
			lastSeq = f.Seq
			b.WriteString(f.Text)
		case f.Type == TypeDone && f.Request == request:
			return b.String(), lastSeq, f, errs
		case f.Type == TypeError && f.Request == request:
			errs = append(errs, f)
		default:
			c.t.Fatalf("have %+v while collecting %s", f, request)
		}
	}
}

// expectClose reads until the server closes and returns the close code and
// text, and the last error frame seen.
func (c *wsClient) expectClose() (code int, text string, last ServerFrame) {
	c.t.Helper()
	for {
		f, err := c.tryRead(5 * time.Second)
		if err != nil {
			if ce, ok := err.(*websocket.CloseError); ok {
				return ce.Code, ce.Text, last
			}
			c.t.Fatalf("have %v; want a close frame", err)
		}
		last = f
	}
}

func newTestHTTP(t *testing.T, srv *Server) *httptest.Server {
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		hs.Close()
	})
	return hs
}

// syncBuffer is a bytes.Buffer for a logger that goroutines share.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
