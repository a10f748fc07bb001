package gateway

import (
	"bufio"
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

// This file is a client that shares no code with the gateway: a WebSocket
// written from RFC 6455 over a net.Conn (not gorilla), frames decoded into
// its own struct, and JWTs built by hand with crypto/hmac and ed25519 (not
// golang-jwt). The hardening tests speak to the gateway only through it.

// wireFrame is a server frame as an outside client reads it.
type wireFrame struct {
	Type         string `json:"type"`
	Tenant       string `json:"tenant"`
	User         string `json:"user"`
	Code         string `json:"code"`
	Reason       string `json:"reason"`
	Message      string `json:"message"`
	Request      string `json:"request"`
	Temporary    bool   `json:"temporary"`
	Seq          int    `json:"seq"`
	Text         string `json:"text"`
	FinishReason string `json:"finish_reason"`
	Session      *struct {
		ID       string `json:"id"`
		Messages []struct {
			Role         string `json:"role"`
			Content      string `json:"content"`
			Request      string `json:"request"`
			FinishReason string `json:"finish_reason"`
			Partial      bool   `json:"partial"`
			Interrupted  string `json:"interrupted"`
		} `json:"messages"`
	} `json:"session"`
	Sessions []struct {
		ID string `json:"id"`
	} `json:"sessions"`
}

// rawConn is one client socket.
type rawConn struct {
	t       testing.TB
	c       net.Conn
	br      *bufio.Reader
	pending []wireFrame
	// closeCode and closeText are the server's close, once read; 1006 when
	// the connection ended without one.
	closed    bool
	closeCode int
	closeText string
}

// rawDial opens a WebSocket to base (http://host:port) at /v1/ws with the
// given extra headers. A refused upgrade is returned as an error with the
// HTTP status.
func rawDial(t testing.TB, base string, header map[string]string) (*rawConn, error) {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		return nil, err
	}
	c, err := net.DialTimeout("tcp", u.Host, 5*time.Second)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { c.Close() })
	var nonce [16]byte
	_, _ = rand.Read(nonce[:])
	key := base64.StdEncoding.EncodeToString(nonce[:])
	var req strings.Builder
	fmt.Fprintf(&req, "GET /v1/ws HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n", u.Host)
	fmt.Fprintf(&req, "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n", key)
	for k, v := range header {
		fmt.Fprintf(&req, "%s: %s\r\n", k, v)
	}
	req.WriteString("\r\n")
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, req.String()); err != nil {
		return nil, err
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		return nil, fmt.Errorf("upgrade refused: HTTP %d", resp.StatusCode)
	}
	sum := sha1.Sum([]byte(key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
	if got := resp.Header.Get("Sec-WebSocket-Accept"); got != base64.StdEncoding.EncodeToString(sum[:]) {
		return nil, fmt.Errorf("bad Sec-WebSocket-Accept %q", got)
	}
	_ = c.SetDeadline(time.Time{})
	return &rawConn{t: t, c: c, br: br}, nil
}

// mustDial is rawDial that fails the test on error; token, when set, goes
// in an Authorization: Bearer header.
func mustDial(t testing.TB, base, token string) *rawConn {
	t.Helper()
	h := map[string]string{}
	if token != "" {
		h["Authorization"] = "Bearer " + token
	}
	c, err := rawDial(t, base, h)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	return c
}

// writeFrame writes one masked frame (clients must mask).
func (r *rawConn) writeFrame(op byte, payload []byte, fin bool) error {
	var hdr []byte
	b0 := op
	if fin {
		b0 |= 0x80
	}
	n := len(payload)
	switch {
	case n < 126:
		hdr = []byte{b0, 0x80 | byte(n)}
	case n <= 0xffff:
		hdr = []byte{b0, 0x80 | 126, 0, 0}
		binary.BigEndian.PutUint16(hdr[2:], uint16(n))
	default:
		hdr = make([]byte, 10)
		hdr[0], hdr[1] = b0, 0x80|127
		binary.BigEndian.PutUint64(hdr[2:], uint64(n))
	}
	var mask [4]byte
	_, _ = rand.Read(mask[:])
	hdr = append(hdr, mask[:]...)
	masked := make([]byte, n)
	for i := range payload {
		masked[i] = payload[i] ^ mask[i%4]
	}
	_ = r.c.SetWriteDeadline(time.Now().Add(10 * time.Second))
	_, err := r.c.Write(append(hdr, masked...))
	return err
}

// send writes one text message.
func (r *rawConn) send(text string) {
	r.t.Helper()
	if err := r.writeFrame(0x1, []byte(text), true); err != nil {
		r.t.Fatalf("send: %v", err)
	}
}

// sendJSON writes frames (each JSON-encoded) batched in one message.
func (r *rawConn) sendJSON(frames ...any) {
	r.t.Helper()
	lines := make([]string, len(frames))
	for i, f := range frames {
		b, err := json.Marshal(f)
		if err != nil {
			r.t.Fatal(err)
		}
		lines[i] = string(b)
	}
	r.send(strings.Join(lines, "\n"))
}

// readRaw reads one server frame: opcode, fin and payload.
func (r *rawConn) readRaw() (op byte, fin bool, payload []byte, err error) {
	var h [2]byte
	if _, err = io.ReadFull(r.br, h[:]); err != nil {
		return
	}
	op, fin = h[0]&0x0f, h[0]&0x80 != 0
	if h[1]&0x80 != 0 {
		return 0, false, nil, errors.New("server frame is masked")
	}
	n := uint64(h[1] & 0x7f)
	switch n {
	case 126:
		var b [2]byte
		if _, err = io.ReadFull(r.br, b[:]); err != nil {
			return
		}
		n = uint64(binary.BigEndian.Uint16(b[:]))
	case 127:
		var b [8]byte
		if _, err = io.ReadFull(r.br, b[:]); err != nil {
			return
		}
		n = binary.BigEndian.Uint64(b[:])
	}
	if n > 64<<20 {
		return 0, false, nil, fmt.Errorf("server frame of %d bytes", n)
	}
	payload = make([]byte, n)
	_, err = io.ReadFull(r.br, payload)
	return
}

// next returns the next frame of a text message, or ok=false once the
// server closed (see closeCode). It fails the test after d.
func (r *rawConn) next(d time.Duration) (wireFrame, bool) {
	r.t.Helper()
	for len(r.pending) == 0 {
		if r.closed {
			return wireFrame{}, false
		}
		_ = r.c.SetReadDeadline(time.Now().Add(d))
		var msg []byte
		for {
			op, fin, payload, err := r.readRaw()
			if err != nil {
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					r.t.Fatalf("no frame within %v", d)
				}
				r.closed, r.closeCode = true, 1006 // ended without a close frame
				return wireFrame{}, false
			}
			switch op {
			case 0x9: // ping
				_ = r.writeFrame(0xA, payload, true)
				continue
			case 0xA:
				continue
			case 0x8:
				r.closed, r.closeCode = true, 1005
				if len(payload) >= 2 {
					r.closeCode = int(binary.BigEndian.Uint16(payload))
					r.closeText = string(payload[2:])
				}
				// Answer the close, as RFC 6455 asks.
				_ = r.writeFrame(0x8, payload[:min(2, len(payload))], true)
				return wireFrame{}, false
			}
			msg = append(msg, payload...)
			if fin {
				break
			}
		}
		for line := range strings.SplitSeq(string(msg), "\n") {
			var f wireFrame
			if err := json.Unmarshal([]byte(line), &f); err != nil {
				r.t.Fatalf("frame %q: %v", line, err)
			}
			r.pending = append(r.pending, f)
		}
	}
	f := r.pending[0]
	r.pending = r.pending[1:]
	return f, true
}

// read returns the next frame, failing the test if the server closed.
func (r *rawConn) read() wireFrame {
	r.t.Helper()
	f, ok := r.next(5 * time.Second)
	if !ok {
		r.t.Fatalf("closed %d %q; want a frame", r.closeCode, r.closeText)
	}
	return f
}

// untilClose reads frames until the server closes, returning them.
func (r *rawConn) untilClose(d time.Duration) []wireFrame {
	r.t.Helper()
	var out []wireFrame
	for {
		f, ok := r.next(d)
		if !ok {
			return out
		}
		out = append(out, f)
	}
}

// ready reads the ready frame.
func (r *rawConn) ready() wireFrame {
	r.t.Helper()
	f := r.read()
	if f.Type != "ready" {
		r.t.Fatalf("have %+v; want ready", f)
	}
	return f
}

// collect reads request's deltas to its done, checking seqs run on from
// after, and returns the text and the done frame; errors for the request
// are returned too, other frames fail the test.
func (r *rawConn) collect(request string, after int) (string, wireFrame, []wireFrame) {
	r.t.Helper()
	var b strings.Builder
	var errs []wireFrame
	seq := after
	for {
		f := r.read()
		switch {
		case f.Type == "delta" && f.Request == request:
			if f.Seq != seq+1 {
				r.t.Fatalf("have seq %d after %d", f.Seq, seq)
			}
			seq = f.Seq
			b.WriteString(f.Text)
		case f.Type == "done" && f.Request == request:
			return b.String(), f, errs
		case f.Type == "error" && f.Request == request:
			errs = append(errs, f)
		default:
			r.t.Fatalf("have %+v while collecting %s", f, request)
		}
	}
}

// jwtOf builds a compact JWS by hand: header and claims as given (the
// header map is used as is, so tests can put any alg in it), signed by sign
// over "<header>.<claims>".
func jwtOf(t testing.TB, header, claims map[string]any, sign func([]byte) []byte) string {
	t.Helper()
	enc := func(v any) string {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return base64.RawURLEncoding.EncodeToString(b)
	}
	input := enc(header) + "." + enc(claims)
	return input + "." + base64.RawURLEncoding.EncodeToString(sign([]byte(input)))
}

func hmacSigner(secret []byte) func([]byte) []byte {
	return func(b []byte) []byte {
		m := hmac.New(sha256.New, secret)
		m.Write(b)
		return m.Sum(nil)
	}
}

func ed25519Signer(priv ed25519.PrivateKey) func([]byte) []byte {
	return func(b []byte) []byte { return ed25519.Sign(priv, b) }
}

// claimsFor are valid claims for sub at the default audience, expiring in
// an hour; mod changes them.
func claimsFor(sub string, mod func(map[string]any)) map[string]any {
	now := time.Now().Unix()
	c := map[string]any{"sub": sub, "aud": "specgate", "exp": now + 3600, "iat": now}
	if mod != nil {
		mod(c)
	}
	return c
}

// hsToken is a hand-signed HS256 token of env's tenant acme for sub.
func (e *env) hsToken(sub string, mod func(map[string]any)) string {
	return jwtOf(e.t, map[string]any{"alg": "HS256", "typ": "JWT", "kid": "acme-1"}, claimsFor(sub, mod), hmacSigner(e.secret))
}

// rawLogin dials with a hand-signed Bearer token for sub and reads ready.
func (e *env) rawLogin(sub string) *rawConn {
	e.t.Helper()
	c := mustDial(e.t, e.http.URL, e.hsToken(sub, nil))
	if f := c.ready(); f.User != sub {
		e.t.Fatalf("have %+v; want ready for %s", f, sub)
	}
	return c
}

// rawSession creates a session over c and returns its id.
func rawSession(c *rawConn) string {
	c.t.Helper()
	c.sendJSON(map[string]any{"type": "session.create", "title": "t"})
	f := c.read()
	if f.Type != "session" || f.Session == nil || f.Session.ID == "" {
		c.t.Fatalf("have %+v; want a session", f)
	}
	return f.Session.ID
}

// httpGet does GET base+path with a Bearer token and returns the status
// and the decoded error body, if any.
func httpGet(t testing.TB, base, path, token string) (int, wireFrame) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Error wireFrame `json:"error"`
	}
	b, _ := io.ReadAll(resp.Body)
	_ = json.Unmarshal(b, &body)
	return resp.StatusCode, body.Error
}

func decodeJSON(resp *http.Response, v any) error {
	return json.NewDecoder(resp.Body).Decode(v)
}
