package gateway

import (
	"testing"

	"github.com/specgate/specgate/internal/wsraw"
)

// The hardening tests speak to the gateway only through internal/wsraw, a
// client that shares no code with it.

type (
	wireFrame = wsraw.Frame
	rawConn   = wsraw.Conn
)

var (
	rawDial       = wsraw.Dial
	mustDial      = wsraw.MustDial
	jwtOf         = wsraw.JWT
	hmacSigner    = wsraw.HMACSigner
	ed25519Signer = wsraw.Ed25519Signer
	claimsFor     = wsraw.Claims
	httpGet       = wsraw.HTTPGet
	decodeJSON    = wsraw.DecodeJSON
)

// hsToken is a hand-signed HS256 token of env's tenant acme for sub.
func (e *env) hsToken(sub string, mod func(map[string]any)) string {
	return jwtOf(e.t, map[string]any{"alg": "HS256", "typ": "JWT", "kid": "acme-1"}, claimsFor(sub, mod), hmacSigner(e.secret))
}

// rawLogin dials with a hand-signed Bearer token for sub and reads ready.
func (e *env) rawLogin(sub string) *rawConn {
	e.t.Helper()
	c := mustDial(e.t, e.http.URL, e.hsToken(sub, nil))
	if f := c.Ready(); f.User != sub {
		e.t.Fatalf("have %+v; want ready for %s", f, sub)
	}
	return c
}

// rawSession creates a session over c and returns its id.
func rawSession(t testing.TB, c *rawConn) string {
	t.Helper()
	c.SendJSON(map[string]any{"type": "session.create", "title": "t"})
	f := c.Read()
	if f.Type != "session" || f.Session == nil || f.Session.ID == "" {
		t.Fatalf("have %+v; want a session", f)
	}
	return f.Session.ID
}
