package gateway

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/specgate/specgate/internal/testredis"
	"github.com/specgate/specgate/tenants"
)

// The tests in this file speak to the gateway only through the
// independent client of rawclient_test.go.

// TestTokenChecksOnEveryPath: each token is offered in the Bearer header of
// the upgrade, in an auth frame, and to the HTTP API; all three answer the
// same, as PROTOCOL.md's table says.
func TestTokenChecksOnEveryPath(t *testing.T) {
	// The 667 KB auth frame must arrive within the auth timeout, also on
	// a loaded machine.
	e := newEnv(t, nil, "", func(o *Options) { o.AuthTimeout = 10 * time.Second })
	edPub, edPriv, _ := ed25519.GenerateKey(rand.Reader)
	edPEM, _ := tenants.EncodePublicKey(edPub)
	if _, err := e.store.Create(context.Background(), tenants.Tenant{ID: "edco", Keys: []tenants.Key{{ID: "ed-1", Alg: tenants.EdDSA, PublicKey: edPEM}}}); err != nil {
		t.Fatal(err)
	}
	now := time.Now().Unix()
	hs := func(header map[string]any, mod func(map[string]any)) string {
		if header == nil {
			header = map[string]any{"alg": "HS256", "typ": "JWT", "kid": "acme-1"}
		}
		return jwtOf(t, header, claimsFor("alice", mod), hmacSigner(e.secret))
	}
	withAlg := func(alg string) map[string]any { return map[string]any{"alg": alg, "typ": "JWT", "kid": "acme-1"} }
	pad := func(n int) func(map[string]any) { return func(c map[string]any) { c["pad"] = strings.Repeat("p", n) } }

	tests := []struct {
		name, token, reason string // reason "" means accepted
	}{
		{"valid hs256", hs(nil, nil), ""},
		{"valid eddsa", jwtOf(t, map[string]any{"alg": "EdDSA", "kid": "ed-1"}, claimsFor("alice", nil), ed25519Signer(edPriv)), ""},
		{"iat within the leeway", hs(nil, func(c map[string]any) { c["iat"] = now + 10 }), ""},
		{"iat in 10 minutes", hs(nil, func(c map[string]any) { c["iat"] = now + 600 }), ReasonNotYetValid},
		{"iat in 10 years", hs(nil, func(c map[string]any) { c["iat"] = now + 10*365*86400 }), ReasonNotYetValid},
		{"nbf in 10 minutes", hs(nil, func(c map[string]any) { c["nbf"] = now + 600 }), ReasonNotYetValid},
		{"alg nOnE", hs(withAlg("nOnE"), nil), ReasonAlgNotAllowed},
		{"alg none unsigned", strings.TrimRight(hs(withAlg("none"), nil), "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_"), ReasonAlgNotAllowed},
		{"alg foo", hs(withAlg("foo"), nil), ReasonAlgNotAllowed},
		{"alg with a trailing space", hs(withAlg("HS256 "), nil), ReasonAlgNotAllowed},
		{"alg hs512", hs(withAlg("HS512"), nil), ReasonAlgNotAllowed},
		{"alg not a string", hs(map[string]any{"alg": 1, "kid": "acme-1"}, nil), ReasonAlgNotAllowed},
		{"eddsa token for an hs256 kid", jwtOf(t, map[string]any{"alg": "EdDSA", "kid": "acme-1"}, claimsFor("alice", nil), ed25519Signer(edPriv)), ReasonAlgNotAllowed},
		{"8 KiB", "", ""}, // filled below
		{"12 KB, validly signed", hs(nil, pad(9000)), ReasonMalformedToken},
		{"667 KB, validly signed", hs(nil, pad(500_000)), ReasonMalformedToken},
		{"two parts", "a.b", ReasonMalformedToken},
		{"header not base64", "!!!.e30.sig", ReasonMalformedToken},
	}
	// The longest token within MaxTokenLen passes: the cap is inclusive.
	for n := 5800; ; n++ {
		tok := hs(nil, pad(n))
		if len(tok) > MaxTokenLen {
			break
		}
		tests[13].token = tok
	}
	if len(tests[13].token) < MaxTokenLen-3 {
		t.Fatalf("have a %d-byte token; want one of about 8 KiB", len(tests[13].token))
	}

	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// 1. Bearer header on the upgrade.
			c, err := rawDial(t, e.http.URL, map[string]string{"Authorization": "Bearer " + tt.token})
			if err != nil {
				t.Fatal(err)
			}
			checkRefusal(t, c, tt.reason, ClosePolicyViolation)
			// 2. Auth frame.
			if len(tt.token) < 900_000 {
				c, err = rawDial(t, e.http.URL, nil)
				if err != nil {
					t.Fatal(err)
				}
				c.SendJSON(map[string]any{"type": "auth", "token": tt.token})
				checkRefusal(t, c, tt.reason, ClosePolicyViolation)
			}
			// 3. HTTP.
			status, body := httpGet(t, e.http.URL, "/v1/sessions", tt.token)
			if tt.reason == "" {
				if status != http.StatusOK {
					t.Fatalf("HTTP: have %d %+v; want 200", status, body)
				}
			} else if status != http.StatusUnauthorized || body.Reason != tt.reason {
				t.Fatalf("HTTP: have %d %+v; want 401 %s", status, body, tt.reason)
			}
		})
	}
}

// checkRefusal reads the answer to a sign-in: ready when reason is "",
// else an error frame with that reason and a close with closeCode and the
// reason as text.
func checkRefusal(t *testing.T, c *rawConn, reason string, closeCode int) {
	t.Helper()
	if reason == "" {
		c.Ready()
		return
	}
	frames := c.UntilClose(5 * time.Second)
	if len(frames) != 1 || frames[0].Type != "error" || frames[0].Reason != reason {
		t.Fatalf("have frames %+v; want one error %s", frames, reason)
	}
	if c.CloseCode != closeCode || c.CloseText != reason {
		t.Fatalf("have close %d %q; want %d %q", c.CloseCode, c.CloseText, closeCode, reason)
	}
}

// TestTemporaryRefusalCloses1013: with Redis down, a sign-in cannot be
// checked; the client is told to retry (1013, temporary unavailable), not
// that its token is bad (1008).
func TestTemporaryRefusalCloses1013(t *testing.T) {
	rs := testredis.Start(t)
	e := newEnv(t, rs.Client(), "", nil)
	tok := e.hsToken("alice", nil)
	rs.Kill()
	for _, frame := range []bool{false, true} {
		var c *rawConn
		if frame {
			c = mustDial(t, e.http.URL, "")
			c.SendJSON(map[string]any{"type": "auth", "token": tok})
		} else {
			c = mustDial(t, e.http.URL, tok)
		}
		frames := c.UntilClose(10 * time.Second)
		if len(frames) != 1 || frames[0].Code != CodeUnavailable || !frames[0].Temporary {
			t.Fatalf("auth frame %v: have %+v; want one temporary unavailable error", frame, frames)
		}
		if c.CloseCode != CloseTryAgainLater {
			t.Fatalf("auth frame %v: have close %d %q; want 1013", frame, c.CloseCode, c.CloseText)
		}
	}
	if status, body := httpGet(t, e.http.URL, "/v1/sessions", tok); status != http.StatusServiceUnavailable || body.Code != CodeUnavailable {
		t.Fatalf("HTTP: have %d %+v; want 503 unavailable", status, body)
	}
}

// TestIDsAreNoOracle: ids that would name other Redis keys are refused by
// their shape, the same whether the key they aim at exists or not, and the
// same for the owner and for anyone else.
func TestIDsAreNoOracle(t *testing.T) {
	e := newEnv(t, nil, "", nil)
	alice := e.rawLogin("alice")
	mallory := e.rawLogin("mallory")
	sid := rawSession(t, alice)
	alice.SendJSON(map[string]any{"type": "chat", "session": sid, "request": "r1", "content": "hi"})
	if _, done, _ := alice.Collect("r1", 0); done.FinishReason != "stop" {
		t.Fatalf("have %+v", done)
	}
	targets := []string{sid + ":msgs", sid + ":req:r1:log", sid + ":req:r1", "s_000000000000000000000000:msgs", "s_missing"}
	type answer struct{ code, message string }
	ws := map[string]answer{}
	for _, c := range []*rawConn{alice, mallory} {
		for _, target := range targets {
			for _, typ := range []string{"session.get", "session.delete", "session.rename"} {
				c.SendJSON(map[string]any{"type": typ, "session": target, "title": "x"})
				f := c.Read()
				if f.Type != "error" {
					t.Fatalf("%s %q: have %+v; want an error", typ, target, f)
				}
				a := answer{f.Code, f.Message}
				if strings.Contains(target, ":") {
					if prev, ok := ws[typ]; ok && prev != a {
						t.Fatalf("%s %q: have %+v; want the same answer as for every other bad id, %+v", typ, target, a, prev)
					}
					ws[typ] = a
				} else if f.Code != CodeNotFound {
					t.Fatalf("%s %q: have %+v; want not_found", typ, target, f)
				}
			}
			status, body := httpGet(t, e.http.URL, "/v1/sessions/"+target, e.hsToken("mallory", nil))
			if status != http.StatusNotFound || body.Code != CodeNotFound {
				t.Fatalf("HTTP GET %q: have %d %+v; want 404 not_found", target, status, body)
			}
		}
	}
	if a := ws["session.get"]; a.code != CodeBadRequest {
		t.Fatalf("have %+v; want bad_request for an id with ':'", a)
	}
	// A request id with ':' is refused before it reaches a key.
	alice.SendJSON(map[string]any{"type": "chat", "session": sid, "request": "r1:log", "content": "hi"})
	if f := alice.Read(); f.Type != "error" || f.Code != CodeBadRequest {
		t.Fatalf("have %+v; want bad_request", f)
	}
	// The session is intact.
	alice.SendJSON(map[string]any{"type": "session.get", "session": sid})
	if f := alice.Read(); f.Type != "session" || len(f.Session.Messages) != 2 {
		t.Fatalf("have %+v; want the session with its two messages", f)
	}
}

// TestRunningRequestIDDoesNotLeak: another user reusing a running request
// id in someone's session reads exactly like any other attempt on a session
// that is not theirs.
func TestRunningRequestIDDoesNotLeak(t *testing.T) {
	e := newEnv(t, nil, "", nil)
	e.gen.gate = make(chan struct{}, 100)
	alice := e.rawLogin("alice")
	bob := e.rawLogin("bob")
	sid := rawSession(t, alice)
	alice.SendJSON(map[string]any{"type": "chat", "session": sid, "request": "r1", "content": "a b c"}, map[string]any{"type": "ping"})
	if f := alice.Read(); f.Type != "pong" {
		t.Fatalf("have %+v; want pong after the chat started: the turn runs, so bob comes after it", f)
	}
	var answers []wireFrame
	for _, rid := range []string{"r1", "r2"} {
		bob.SendJSON(map[string]any{"type": "chat", "session": sid, "request": rid, "content": "x"})
		f := bob.Read()
		if f.Type != "error" || f.Code != CodeNotFound || f.Request != rid {
			t.Fatalf("request %s: have %+v; want not_found for it", rid, f)
		}
		answers = append(answers, f)
	}
	if answers[0].Message != answers[1].Message {
		t.Fatalf("have %q and %q; want the same answer for a running and an unused id", answers[0].Message, answers[1].Message)
	}
	// Bob's cancel of alice's running request finds nothing either.
	bob.SendJSON(map[string]any{"type": "cancel", "request": "r1"})
	if f := bob.Read(); f.Type != "error" || f.Code != CodeNotFound {
		t.Fatalf("have %+v; want not_found", f)
	}
	// The owner is told the id is in use.
	alice.SendJSON(map[string]any{"type": "chat", "session": sid, "request": "r1", "content": "again"})
	if f := alice.Read(); f.Type != "error" || f.Code != CodeBadRequest || f.Request != "r1" {
		t.Fatalf("have %+v; want bad_request for r1", f)
	}
	for range 10 {
		e.gen.gate <- struct{}{}
	}
	if text, _, _ := alice.Collect("r1", 0); text != fakeReply("a b c") {
		t.Fatalf("have %q", text)
	}
}

// TestParamErrorsNameTheRequest: every invalid chat whose request id is
// valid gets an error carrying that id, and the frames batched after an
// invalid one are still answered.
func TestParamErrorsNameTheRequest(t *testing.T) {
	e := newEnv(t, nil, "", nil)
	c := e.rawLogin("alice")
	sid := rawSession(t, c)
	bad := []string{
		`{"max_tokens":-1}`,
		`{"max_tokens":"NaN"}`,
		`{"temperature":1e39}`,
		`{"temperature":-0.5}`,
		`{"top_p":5}`,
		`{"min_p":1.5}`,
		`{"top_k":-3}`,
		`{"regex":"a+","choices":["x"]}`,
		`{"schema":{"type":"string"},"json":true}`,
		`{"priority":"urgent"}`,
		`{"stop":["1","2","3","4","5","6","7","8","9"]}`,
		`{"seed":-1}`,
		`"not an object"`,
	}
	for i, p := range bad {
		rid := fmt.Sprintf("bad-%d", i)
		c.Send(fmt.Sprintf(`{"type":"chat","session":%q,"request":%q,"content":"x","params":%s}`, sid, rid, p) + "\n" + `{"type":"ping"}`)
		f := c.Read()
		if f.Type != "error" || f.Code != CodeBadRequest || f.Request != rid {
			t.Fatalf("params %s: have %+v; want bad_request for %s", p, f, rid)
		}
		if f := c.Read(); f.Type != "pong" {
			t.Fatalf("params %s: have %+v; want the batched ping answered", p, f)
		}
	}
	// An invalid frame in the middle of a batch: the ones before and after
	// are answered, in order.
	c.Send(`{"type":"ping"}` + "\n" + `{"type":"nope","request":"r9"}` + "\n" + `not json` + "\n" + `{"type":"session.list"}`)
	want := []string{"pong", "error", "error", "sessions"}
	for i, w := range want {
		if f := c.Read(); f.Type != w {
			t.Fatalf("frame %d: have %+v; want %s", i, f, w)
		} else if i == 1 && f.Request != "r9" {
			t.Fatalf("have %+v; want the error to name r9", f)
		}
	}
	// session.list: over the maximum reads as the maximum; negative is bad.
	c.SendJSON(map[string]any{"type": "session.list", "limit": -1})
	if f := c.Read(); f.Type != "error" || f.Code != CodeBadRequest {
		t.Fatalf("have %+v; want bad_request", f)
	}
}

// TestSessionListLimit: limit above the maximum returns the maximum
// (PROTOCOL.md: max 1000), over the socket and HTTP.
func TestSessionListLimit(t *testing.T) {
	e := newEnv(t, nil, "", nil)
	ctx := context.Background()
	for range MaxListLimit + 5 {
		if _, err := e.srv.Sessions().Create(ctx, "acme", "alice", "t"); err != nil {
			t.Fatal(err)
		}
	}
	c := e.rawLogin("alice")
	for _, tt := range []struct{ limit, want int }{{5000, MaxListLimit}, {0, DefaultListLimit}, {7, 7}} {
		c.SendJSON(map[string]any{"type": "session.list", "limit": tt.limit})
		if f := c.Read(); f.Type != "sessions" || len(f.Sessions) != tt.want {
			t.Fatalf("limit %d: have %d sessions; want %d", tt.limit, len(f.Sessions), tt.want)
		}
	}
	req, _ := http.NewRequest(http.MethodGet, e.http.URL+"/v1/sessions?limit=5000", nil)
	req.Header.Set("Authorization", "Bearer "+e.hsToken("alice", nil))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Sessions []struct{ ID string } `json:"sessions"`
	}
	if err := decodeJSON(resp, &body); err != nil || len(body.Sessions) != MaxListLimit {
		t.Fatalf("HTTP: have %d sessions, %v; want %d", len(body.Sessions), err, MaxListLimit)
	}
}

// TestOversizeMessage: a message over the read limit gets an error frame
// and a 1009 close with a reason, however much more the client is still
// sending.
func TestOversizeMessage(t *testing.T) {
	// The auth timeout covers reading the first message; give a loaded
	// machine time to carry the megabytes before auth.
	e := newEnv(t, nil, "", func(o *Options) { o.AuthTimeout = 10 * time.Second })
	for _, size := range []int{1<<20 + 1, 3 << 20, 8 << 20} {
		c := e.rawLogin("alice")
		if err := c.WriteFrame(0x1, []byte(`{"type":"ping","pad":"`+strings.Repeat("x", size)+`"}`), true); err != nil {
			t.Fatalf("%d bytes: write: %v", size, err)
		}
		frames := c.UntilClose(5 * time.Second)
		if len(frames) != 1 || frames[0].Code != CodeBadRequest || frames[0].Reason != ReasonFrameTooBig {
			t.Fatalf("%d bytes: have %+v; want one bad_request frame_too_big", size, frames)
		}
		if c.CloseCode != CloseMessageTooBig || c.CloseText != ReasonFrameTooBig {
			t.Fatalf("%d bytes: have close %d %q; want 1009 %q", size, c.CloseCode, c.CloseText, ReasonFrameTooBig)
		}
	}
	// The same when the message comes in fragments, and before auth.
	c := mustDial(t, e.http.URL, "")
	chunk := []byte(strings.Repeat("y", 256<<10))
	if err := c.WriteFrame(0x1, chunk, false); err != nil {
		t.Fatal(err)
	}
	for range 6 {
		if err := c.WriteFrame(0x0, chunk, false); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.WriteFrame(0x0, chunk, true); err != nil {
		t.Fatal(err)
	}
	frames := c.UntilClose(5 * time.Second)
	if len(frames) != 1 || frames[0].Reason != ReasonFrameTooBig || c.CloseCode != CloseMessageTooBig {
		t.Fatalf("fragmented, before auth: have %+v, close %d %q", frames, c.CloseCode, c.CloseText)
	}
}

// TestResumePastTheEnd: a resume after the last seq of a finished request
// answers at once instead of waiting for deltas that will never come.
func TestResumePastTheEnd(t *testing.T) {
	e := newEnv(t, nil, "", func(o *Options) { o.ResumeIdle = time.Minute })
	c := e.rawLogin("alice")
	sid := rawSession(t, c)
	c.SendJSON(map[string]any{"type": "chat", "session": sid, "request": "r1", "content": "one two"})
	text, _, _ := c.Collect("r1", 0)
	last := len(strings.SplitAfter(text, " "))
	start := time.Now()
	c.SendJSON(map[string]any{"type": "session.resume", "session": sid, "request": "r1", "after": last + 5})
	if f := c.Read(); f.Type != "session" {
		t.Fatalf("have %+v; want session", f)
	}
	if f := c.Read(); f.Type != "error" || f.Code != CodeBadRequest || f.Request != "r1" {
		t.Fatalf("have %+v; want bad_request for r1", f)
	}
	c.SendJSON(map[string]any{"type": "session.resume", "session": sid, "request": "r1", "after": last})
	if f := c.Read(); f.Type != "session" {
		t.Fatalf("have %+v; want session", f)
	}
	if f := c.Read(); f.Type != "done" || f.Request != "r1" {
		t.Fatalf("have %+v; want done", f)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("took %v; want an answer at once", d)
	}
}
