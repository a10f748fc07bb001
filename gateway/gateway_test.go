package gateway

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/internal/testredis"
	"github.com/specgate/specgate/tenants"
)

func TestChatEndToEnd(t *testing.T) {
	e := newEnv(t, nil, "", nil)
	c := e.login("alice")
	sid := c.createSession("first")

	c.send(map[string]any{"type": "chat", "session": sid, "request": "r1", "content": "hello world",
		"params": map[string]any{"max_tokens": 16, "priority": "batch", "temperature": 0.5, "seed": 7}})
	text, last, done, errs := c.collect("r1")
	if want := fakeReply("hello world"); text != want || len(errs) > 0 {
		t.Fatalf("have %q (errors %v); want %q", text, errs, want)
	}
	if done.FinishReason != engine.FinishStop || done.Usage == nil || done.Usage.CompletionTokens != last {
		t.Fatalf("have done %+v; want stop with %d completion tokens", done, last)
	}
	req := e.gen.lastRequest()
	if req.Tenant != "acme" || req.User != "alice" || req.Priority != engine.Batch || req.MaxTokens != 16 ||
		req.Sample.Seed != 7 || req.Sample.Temperature != 0.5 || len(req.Messages) != 1 {
		t.Fatalf("have engine request %+v; want acme/alice batch, 16 tokens, seed 7, one message", req)
	}

	v, err := e.srv.Sessions().Get(context.Background(), "acme", "alice", sid)
	if err != nil {
		t.Fatal(err)
	}
	if len(v.Messages) != 2 || v.Messages[0].Role != "user" || v.Messages[0].Content != "hello world" ||
		v.Messages[1].Role != "assistant" || v.Messages[1].Content != text || v.Messages[1].Partial {
		t.Fatalf("have history %+v; want user then the full assistant reply", v.Messages)
	}

	// A second turn sends the whole history; the same request id is refused.
	c.send(map[string]any{"type": "chat", "session": sid, "request": "r2", "content": "again"})
	c.collect("r2")
	if n := len(e.gen.lastRequest().Messages); n != 3 {
		t.Fatalf("have %d messages in the second request; want 3", n)
	}
	c.send(map[string]any{"type": "chat", "session": sid, "request": "r2", "content": "dup"})
	if f := c.read(); f.Type != TypeError || f.Code != CodeBadRequest || f.Request != "r2" {
		t.Fatalf("have %+v; want bad_request for a reused request id", f)
	}
	c.send(map[string]any{"type": "ping"})
	if f := c.read(); f.Type != TypePong {
		t.Fatalf("have %+v; want pong", f)
	}
}

func TestPriorityNeverRaised(t *testing.T) {
	tests := []struct {
		tenant, asked string
		want          engine.Priority
	}{
		{"standard", "", engine.Standard},
		{"standard", "interactive", engine.Standard},
		{"standard", "batch", engine.Batch},
		{"batch", "interactive", engine.Batch},
		{"interactive", "standard", engine.Standard},
		{"", "", engine.Standard},
	}
	for _, tt := range tests {
		if have := requestPriority(tt.tenant, tt.asked); have != tt.want {
			t.Errorf("tenant %q asked %q: have %v; want %v", tt.tenant, tt.asked, have, tt.want)
		}
	}
}

func TestEngineRefusalIsTyped(t *testing.T) {
	e := newEnv(t, nil, "", nil)
	c := e.login("alice")
	sid := c.createSession("")
	for _, ee := range []*engine.Error{
		{Code: engine.CodeQueueFull, Message: "no", Temporary: true},
		{Code: engine.CodeOverQuota, Reason: engine.ReasonTokensPerMinute, Message: "no", Temporary: true},
		{Code: engine.CodeOverQuota, Reason: engine.ReasonQueue, Message: "no", Temporary: true},
		{Code: engine.CodeContextTooLong, Message: "no"},
	} {
		e.gen.refuse = ee
		id := "r-" + ee.Code + ee.Reason
		c.send(map[string]any{"type": "chat", "session": sid, "request": id, "content": "x"})
		if f := c.read(); f.Type != TypeError || f.Code != ee.Code || f.Reason != ee.Reason || f.Request != id {
			t.Fatalf("have %+v; want error %s (%s)", f, ee.Code, ee.Reason)
		}
	}
}

func TestAuthRefusals(t *testing.T) {
	e := newEnv(t, nil, "", nil)
	ctx := context.Background()
	exp := time.Now().Add(time.Minute).Unix()
	claims := func(mod func(jwt.MapClaims)) jwt.MapClaims {
		c := jwt.MapClaims{"sub": "alice", "aud": "specgate", "exp": exp}
		if mod != nil {
			mod(c)
		}
		return c
	}

	// An RS256 tenant, for HS/RS confusion: an HS256 token "signed" with
	// its public key must not pass.
	rsaKey, _ := rsa.GenerateKey(rand.Reader, 2048)
	rsaPEM, _ := tenants.EncodePublicKey(&rsaKey.PublicKey)
	edPub, edPriv, _ := ed25519.GenerateKey(rand.Reader)
	edPEM, _ := tenants.EncodePublicKey(edPub)
	if _, err := e.store.Create(ctx, tenants.Tenant{ID: "rsco", Keys: []tenants.Key{
		{ID: "rs-1", Alg: tenants.RS256, PublicKey: rsaPEM},
		{ID: "ed-1", Alg: tenants.EdDSA, PublicKey: edPEM},
	}}); err != nil {
		t.Fatal(err)
	}
	disabledKey, _ := tenants.NewHS256Key("off-1")
	if _, err := e.store.Create(ctx, tenants.Tenant{ID: "off", Disabled: true, Keys: []tenants.Key{disabledKey}}); err != nil {
		t.Fatal(err)
	}
	sign := func(m jwt.SigningMethod, kid string, key any, c jwt.MapClaims) string {
		tok := jwt.NewWithClaims(m, c)
		if kid != "" {
			tok.Header["kid"] = kid
		}
		s, err := tok.SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	noneTok := sign(jwt.SigningMethodNone, "acme-1", jwt.UnsafeAllowNoneSignatureType, claims(nil))

	// The valid cases first, so the refusals below are refusals of the
	// one thing each changes.
	for _, tok := range []string{
		e.token("alice"),
		sign(jwt.SigningMethodRS256, "rs-1", rsaKey, claims(nil)),
		sign(jwt.SigningMethodEdDSA, "ed-1", edPriv, claims(nil)),
	} {
		c := e.dial(tok, nil)
		if f := c.read(); f.Type != TypeReady {
			t.Fatalf("valid token: have %+v; want ready", f)
		}
	}

	tests := []struct {
		name   string
		token  string
		frame  bool   // send the token in an auth frame instead of the header
		first  any    // a first frame other than auth (frame mode)
		origin string // Origin header
		code   string
		reason string
	}{
		{"alg none", noneTok, false, nil, "", CodeUnauthorized, ReasonAlgNotAllowed},
		{"hs/rs confusion", sign(jwt.SigningMethodHS256, "rs-1", []byte(rsaPEM), claims(nil)), false, nil, "", CodeUnauthorized, ReasonAlgNotAllowed},
		{"rs256 with eddsa kid", sign(jwt.SigningMethodRS256, "ed-1", rsaKey, claims(nil)), false, nil, "", CodeUnauthorized, ReasonAlgNotAllowed},
		{"unknown kid", sign(jwt.SigningMethodHS256, "nope", e.secret, claims(nil)), false, nil, "", CodeUnauthorized, ReasonUnknownKid},
		{"no kid", sign(jwt.SigningMethodHS256, "", e.secret, claims(nil)), false, nil, "", CodeUnauthorized, ReasonUnknownKid},
		{"bad signature", sign(jwt.SigningMethodHS256, "acme-1", []byte(strings.Repeat("x", 32)), claims(nil)), false, nil, "", CodeUnauthorized, ReasonBadSignature},
		{"expired", sign(jwt.SigningMethodHS256, "acme-1", e.secret, claims(func(c jwt.MapClaims) { c["exp"] = time.Now().Add(-time.Hour).Unix() })), false, nil, "", CodeUnauthorized, ReasonTokenExpired},
		{"no exp", sign(jwt.SigningMethodHS256, "acme-1", e.secret, claims(func(c jwt.MapClaims) { delete(c, "exp") })), false, nil, "", CodeUnauthorized, ReasonMissingExp},
		{"wrong audience", sign(jwt.SigningMethodHS256, "acme-1", e.secret, claims(func(c jwt.MapClaims) { c["aud"] = "other" })), false, nil, "", CodeUnauthorized, ReasonWrongAudience},
		{"no audience", sign(jwt.SigningMethodHS256, "acme-1", e.secret, claims(func(c jwt.MapClaims) { delete(c, "aud") })), false, nil, "", CodeUnauthorized, ReasonWrongAudience},
		{"no subject", sign(jwt.SigningMethodHS256, "acme-1", e.secret, claims(func(c jwt.MapClaims) { delete(c, "sub") })), false, nil, "", CodeUnauthorized, ReasonMissingSubject},
		{"malformed", "not.a.jwt", false, nil, "", CodeUnauthorized, ReasonMalformedToken},
		{"disabled tenant", sign(jwt.SigningMethodHS256, "off-1", disabledKey.Secret, claims(nil)), false, nil, "", CodeForbidden, ReasonTenantDisabled},
		{"origin not allowed", e.token("alice"), true, nil, "https://evil.example", CodeForbidden, ReasonOriginNotAllowed},
		{"auth frame: expired", sign(jwt.SigningMethodHS256, "acme-1", e.secret, claims(func(c jwt.MapClaims) { c["exp"] = time.Now().Add(-time.Hour).Unix() })), true, nil, "", CodeUnauthorized, ReasonTokenExpired},
		{"auth frame: empty token", "", true, nil, "", CodeUnauthorized, ReasonMissingToken},
		{"first frame not auth", "", true, map[string]any{"type": "session.create"}, "", CodeUnauthorized, ReasonNotAuthenticated},
		{"auth timeout", "", true, false, "", CodeUnauthorized, ReasonAuthTimeout},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			if tt.origin != "" {
				h.Set("Origin", tt.origin)
			}
			var c *wsClient
			if tt.frame {
				c = e.dial("", h)
				switch first := tt.first.(type) {
				case nil:
					c.send(map[string]any{"type": "auth", "token": tt.token})
				case bool: // send nothing: wait for the timeout
				default:
					c.send(first)
				}
			} else {
				c = e.dial(tt.token, h)
			}
			code, text, last := c.expectClose()
			if last.Type != TypeError || last.Code != tt.code || last.Reason != tt.reason {
				t.Fatalf("have frame %+v; want error %s/%s", last, tt.code, tt.reason)
			}
			if code != ClosePolicyViolation || text != tt.reason {
				t.Fatalf("have close %d %q; want %d %q", code, text, ClosePolicyViolation, tt.reason)
			}
		})
	}

	// The allowed origin passes in a browser-style auth frame.
	h := http.Header{}
	h.Set("Origin", "https://chat.acme.example")
	c := e.dial("", h)
	c.send(map[string]any{"type": "auth", "token": e.token("bob")})
	if f := c.read(); f.Type != TypeReady || f.User != "bob" {
		t.Fatalf("have %+v; want ready for bob", f)
	}
}

func TestCrossTenantAndUserAccess(t *testing.T) {
	e := newEnv(t, nil, "", nil)
	ctx := context.Background()
	otherKey, _ := tenants.NewHS256Key("other-1")
	if _, err := e.store.Create(ctx, tenants.Tenant{ID: "other", Keys: []tenants.Key{otherKey}}); err != nil {
		t.Fatal(err)
	}
	alice := e.login("alice")
	sid := alice.createSession("private")
	alice.send(map[string]any{"type": "chat", "session": sid, "request": "r1", "content": "secret"})
	alice.collect("r1")

	otherTok := signHS(t, "other-1", otherKey.Secret, jwt.MapClaims{"sub": "alice", "aud": "specgate", "exp": time.Now().Add(time.Minute).Unix()})
	intruders := map[string]string{"same tenant, other user": e.token("mallory"), "other tenant, same sub": otherTok}
	for name, tok := range intruders {
		t.Run(name, func(t *testing.T) {
			c := e.dial(tok, nil)
			if f := c.read(); f.Type != TypeReady {
				t.Fatalf("have %+v; want ready", f)
			}
			frames := []map[string]any{
				{"type": "session.get", "session": sid},
				{"type": "session.resume", "session": sid},
				{"type": "session.resume", "session": sid, "request": "r1", "after": 0},
				{"type": "session.rename", "session": sid, "title": "mine"},
				{"type": "session.delete", "session": sid},
				{"type": "chat", "session": sid, "request": "x1", "content": "hi"},
				{"type": "session.get", "session": "s_doesnotexist"},
			}
			for _, fr := range frames {
				c.send(fr)
				f := c.read()
				if f.Type != TypeError || f.Code != CodeNotFound || f.Message != "session not found" {
					t.Fatalf("%v: have %+v; want the plain not_found a missing session gets", fr, f)
				}
			}
			c.send(map[string]any{"type": "session.list"})
			if f := c.read(); f.Type != TypeSessions || len(f.Sessions) != 0 {
				t.Fatalf("have %+v; want an empty list", f)
			}
			for _, method := range []string{"GET", "PATCH", "DELETE"} {
				req, _ := http.NewRequest(method, e.http.URL+"/v1/sessions/"+sid, strings.NewReader(`{"title":"x"}`))
				req.Header.Set("Authorization", "Bearer "+tok)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusNotFound || !strings.Contains(string(body), `"not_found"`) {
					t.Fatalf("HTTP %s: have %d %s; want 404 not_found", method, resp.StatusCode, body)
				}
			}
		})
	}
	v, err := e.srv.Sessions().Get(ctx, "acme", "alice", sid)
	if err != nil || v.Title != "private" || len(v.Messages) != 2 {
		t.Fatalf("have %+v, %v; want alice's session untouched", v, err)
	}
}

func TestResumeAfterDrop(t *testing.T) {
	e := newEnv(t, nil, "", nil)
	e.gen.gate = make(chan struct{}, 100)
	content := "one two three four five six seven"
	want := fakeReply(content)
	nWords := len(strings.SplitAfter(want, " "))

	a := e.login("alice")
	sid := a.createSession("")
	a.send(map[string]any{"type": "chat", "session": sid, "request": "r1", "content": content})
	var got strings.Builder
	for i := 1; i <= 3; i++ {
		e.gen.gate <- struct{}{}
		f := a.read()
		if f.Type != TypeDelta || f.Seq != i {
			t.Fatalf("have %+v; want delta %d", f, i)
		}
		got.WriteString(f.Text)
	}
	a.ws.Close() // drop mid-stream; generation must go on
	e.gen.gate <- struct{}{}
	e.gen.gate <- struct{}{}

	b := e.login("alice")
	b.send(map[string]any{"type": "session.resume", "session": sid, "request": "r1", "after": 3})
	if f := b.read(); f.Type != TypeSession || f.Session.ID != sid {
		t.Fatalf("have %+v; want the session first", f)
	}
	for range nWords - 5 {
		e.gen.gate <- struct{}{}
	}
	seq := 3
	for {
		f := b.read()
		if f.Type == TypeDone {
			break
		}
		if f.Type != TypeDelta || f.Seq != seq+1 {
			t.Fatalf("have %+v; want delta %d", f, seq+1)
		}
		seq = f.Seq
		got.WriteString(f.Text)
	}
	if got.String() != want {
		t.Fatalf("have %q; want %q", got.String(), want)
	}

	// Resuming a finished request replays from the log, and a resume from
	// 0 gives everything.
	b.send(map[string]any{"type": "session.resume", "session": sid, "request": "r1", "after": 0})
	b.read()
	text, _, done, _ := b.collect("r1")
	if text != want || done.FinishReason != engine.FinishStop {
		t.Fatalf("replay: have %q %+v; want %q and stop", text, done, want)
	}
	b.send(map[string]any{"type": "session.resume", "session": sid, "request": "nope"})
	if f := b.read(); f.Type != TypeError || f.Code != CodeNotFound {
		t.Fatalf("have %+v; want not_found", f)
	}
}

func TestResumeOnAnotherGateway(t *testing.T) {
	e := newEnv(t, nil, "", nil)
	// A second gateway over the same Redis and keyspace.
	e2 := &env{t: t}
	srv2, err := New(Options{Redis: e.rdb, Generator: newFake(), Prefix: e.srv.o.Prefix, ResumePoll: 100 * time.Millisecond, Logger: e.srv.o.Logger})
	if err != nil {
		t.Fatal(err)
	}
	e2.srv = srv2
	hs2 := newTestHTTP(t, srv2)
	e2.http = hs2

	e.gen.gate = make(chan struct{}, 100)
	a := e.login("alice")
	sid := a.createSession("")
	a.send(map[string]any{"type": "chat", "session": sid, "request": "r1", "content": "a b c"})
	e.gen.gate <- struct{}{}
	first := a.read()
	a.ws.Close()

	b := e2.dial(e.token("alice"), nil)
	b.read() // ready
	b.send(map[string]any{"type": "session.resume", "session": sid, "request": "r1", "after": first.Seq})
	b.read() // session
	for range 10 {
		e.gen.gate <- struct{}{}
	}
	text, _, _, _ := b.collectAfter("r1", first.Seq)
	if first.Text+text != fakeReply("a b c") {
		t.Fatalf("have %q; want %q", first.Text+text, fakeReply("a b c"))
	}
}

func TestCancelStoresPartial(t *testing.T) {
	e := newEnv(t, nil, "", nil)
	e.gen.gate = make(chan struct{}, 100)
	c := e.login("alice")
	sid := c.createSession("")
	c.send(map[string]any{"type": "chat", "session": sid, "request": "r1", "content": "a b c d e"})
	e.gen.gate <- struct{}{}
	if f := c.read(); f.Type != TypeDelta {
		t.Fatalf("have %+v; want a delta", f)
	}
	c.send(map[string]any{"type": "cancel", "request": "r1"})
	f := c.read()
	if f.Type != TypeDone || f.FinishReason != engine.FinishCancelled {
		t.Fatalf("have %+v; want done cancelled", f)
	}
	v, _ := e.srv.Sessions().Get(context.Background(), "acme", "alice", sid)
	last := v.Messages[len(v.Messages)-1]
	if last.Role != "assistant" || !last.Partial || last.Interrupted != interruptCancel || last.Content != "echo: " {
		t.Fatalf("have %+v; want a partial assistant message marked cancel", last)
	}
}

func TestSlowConsumerDoesNotBlock(t *testing.T) {
	e := newEnv(t, nil, "", func(o *Options) {
		o.WriteQueueFrames = 4
		o.MaxBatch = 1
	})
	c := e.login("alice")
	sid := c.createSession("")
	// 200 words queue far faster than anyone reads; the test client reads
	// nothing until the end.
	content := strings.Repeat("w ", 200)
	c.send(map[string]any{"type": "chat", "session": sid, "request": "r1", "content": content})
	deadline := time.Now().Add(5 * time.Second)
	for {
		v, err := e.srv.Sessions().Get(context.Background(), "acme", "alice", sid)
		if err == nil && len(v.Messages) == 2 {
			if v.Messages[1].Content != fakeReply(content) {
				t.Fatalf("have reply of %d bytes; want the full one", len(v.Messages[1].Content))
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("generation did not finish while the client was not reading")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The server may have closed the socket as slow; either way the
	// generation finished. When it did close, the reason is slow_consumer.
	for {
		_, err := c.tryRead(2 * time.Second)
		if err != nil {
			break
		}
	}
}

func TestHTTPSessionsAndHealth(t *testing.T) {
	e := newEnv(t, nil, "", nil)
	tok := e.token("alice")
	do := func(method, path, body string, auth bool) (int, string) {
		req, _ := http.NewRequest(method, e.http.URL+path, strings.NewReader(body))
		if auth {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	code, body := do("POST", "/v1/sessions", `{"title":"via http"}`, true)
	if code != http.StatusCreated {
		t.Fatalf("create: have %d %s; want 201", code, body)
	}
	id := body[strings.Index(body, `"id":"`)+6:]
	id = id[:strings.Index(id, `"`)]
	tests := []struct {
		method, path, body string
		auth               bool
		want               int
		contains           string
	}{
		{"GET", "/v1/sessions", "", true, 200, `"via http"`},
		{"GET", "/v1/sessions", "", false, 401, `"missing_token"`},
		{"PATCH", "/v1/sessions/" + id, `{"title":"renamed"}`, true, 200, `"renamed"`},
		{"PATCH", "/v1/sessions/" + id, `{"system":"Be brief.","params":{"max_tokens":9}}`, true, 200, `"title":"renamed"`},
		{"GET", "/v1/sessions/" + id, "", true, 200, `"system":"Be brief.","params":{"max_tokens":9}`},
		{"PATCH", "/v1/sessions/" + id, `{"params":{"temperature":-1}}`, true, 400, `"bad_request"`},
		{"GET", "/v1/sessions/" + id, "", true, 200, `"messages":[]`},
		{"DELETE", "/v1/sessions/" + id, "", true, 204, ""},
		{"GET", "/v1/sessions/" + id, "", true, 404, `"not_found"`},
		{"GET", "/healthz", "", false, 200, "ok"},
		{"GET", "/readyz", "", false, 200, "ready"},
		{"GET", "/metrics", "", false, 200, "specgate_auth_failures_total"},
		{"GET", "/admin/v1/tenants", "", false, 404, ""},
	}
	for _, tt := range tests {
		code, body := do(tt.method, tt.path, tt.body, tt.auth)
		if code != tt.want || !strings.Contains(body, tt.contains) {
			t.Errorf("%s %s: have %d %s; want %d containing %q", tt.method, tt.path, code, body, tt.want, tt.contains)
		}
	}
}

func TestRefusedWhenSchemaNewer(t *testing.T) {
	e := newEnv(t, nil, "", nil)
	e.rdb.Set(context.Background(), e.srv.o.Prefix+"schema:version", 9999, 0)
	_, err := New(Options{Redis: e.rdb, Generator: newFake(), Prefix: e.srv.o.Prefix})
	if err == nil || !strings.Contains(err.Error(), "newer than this binary") {
		t.Fatalf("have %v; want a refusal naming the newer schema", err)
	}
}

func TestConcurrencyCap(t *testing.T) {
	e := newEnv(t, nil, "", nil)
	if _, err := e.store.Update(context.Background(), "acme", func(tn *tenants.Tenant) error {
		tn.Limits.MaxConcurrent = 1
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	e.gen.gate = make(chan struct{}, 100)
	c := e.login("alice")
	sid := c.createSession("")
	c.send(map[string]any{"type": "chat", "session": sid, "request": "r1", "content": "a"})
	c.send(map[string]any{"type": "chat", "session": sid, "request": "r2", "content": "b"})
	if f := c.read(); f.Type != TypeError || f.Code != CodeOverQuota || f.Reason != ReasonConcurrency || f.Request != "r2" {
		t.Fatalf("have %+v; want over_quota (concurrency) for r2", f)
	}
	for range 10 {
		e.gen.gate <- struct{}{}
	}
	c.collect("r1")
}

// warmGen is the fake generator with session warmth: it records what the
// gateway tells it.
type warmGen struct {
	*fakeGenerator
	calls chan warmCall
}

type warmCall struct {
	session string
	live    bool
}

func (g warmGen) SetSessionLive(s string, live bool) { g.calls <- warmCall{s, live} }

// TestSessionLiveness checks a generator that keeps sessions warm (an
// engine.SessionWarmer) is told which sessions a socket uses, once each,
// and that they go idle when the socket does.
func TestSessionLiveness(t *testing.T) {
	type call = warmCall
	calls := make(chan call, 16)
	e := newEnv(t, nil, "", func(o *Options) {
		o.Generator = warmGen{o.Generator.(*fakeGenerator), calls}
	})
	c := e.login("alice")
	sid := c.createSession("first")
	for _, r := range []string{"r1", "r2"} {
		c.send(map[string]any{"type": "chat", "session": sid, "request": r, "content": "hi"})
		c.collect(r)
	}
	if got := <-calls; got != (call{sid, true}) {
		t.Fatalf("have %+v; want %s live", got, sid)
	}
	select {
	case got := <-calls:
		t.Fatalf("have a second call %+v; want one per session", got)
	default:
	}
	c.ws.Close()
	select {
	case got := <-calls:
		if got != (call{sid, false}) {
			t.Fatalf("have %+v; want %s idle", got, sid)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the session was not marked idle after the socket closed")
	}
}

// TestStoreFailureIsLoggedWithItsCause: with Redis gone, a client asking
// to create a session is told the storage is unavailable, without the
// cause (an address, a driver's words), and the operator's log has the
// cause.
func TestStoreFailureIsLoggedWithItsCause(t *testing.T) {
	rs := testredis.Start(t)
	logs := &syncBuffer{}
	e := newEnv(t, rs.Client(), "", func(o *Options) { o.Logger = slog.New(slog.NewTextHandler(logs, nil)) })
	c := e.login("alice")
	rs.Kill()
	c.send(map[string]any{"type": "session.create", "title": "t"})
	f := c.read()
	if f.Type != TypeError || f.Code != CodeUnavailable || f.Message != "cannot store the session" || !f.Temporary {
		t.Fatalf("have %+v; want a temporary unavailable error, cannot store the session", f)
	}
	log := logs.String()
	i := strings.Index(log, "cannot store the session")
	if i < 0 {
		t.Fatalf("the log does not say what failed:\n%s", log)
	}
	line, _, _ := strings.Cut(log[i:], "\n")
	_, cause, _ := strings.Cut(line, "err=")
	if cause == "" || strings.HasPrefix(cause, "<nil>") {
		t.Fatalf("the log line gives no cause: %s", line)
	}
}
