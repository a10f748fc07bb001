// Package wsraw is a test client of the gateway that shares no code with
// it: a WebSocket written from RFC 6455 over a net.Conn (not the gateway's
// WebSocket library), frames decoded into its own struct, and JWTs built by
// hand with crypto/hmac and ed25519 (not the gateway's JWT library). Tests
// that check the protocol as an outsider meets it speak only through it.
package wsraw

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

// Frame is a server frame as an outside client reads it.
type Frame struct {
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
	Usage        *struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
	} `json:"usage"`
	Stats *struct {
		DraftedTokens  int    `json:"drafted_tokens"`
		AcceptedTokens int    `json:"accepted_tokens"`
		Seed           uint64 `json:"seed"`
	} `json:"stats"`
	Session *struct {
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

// Conn is one client socket.
type Conn struct {
	t       testing.TB
	c       net.Conn
	br      *bufio.Reader
	pending []Frame
	// Timeout bounds each Read (0: 5 s).
	Timeout time.Duration
	closed  bool
	// CloseCode and CloseText are the server's close, once read; 1006
	// when the connection ended without one.
	CloseCode int
	CloseText string
}

// Dial opens a WebSocket to base (http://host:port) at /v1/ws with the
// given extra headers. A refused upgrade is returned as an error with the
// HTTP status.
func Dial(t testing.TB, base string, header map[string]string) (*Conn, error) {
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
	return &Conn{t: t, c: c, br: br}, nil
}

// MustDial is Dial that fails the test on error; token, when set, goes
// in an Authorization: Bearer header.
func MustDial(t testing.TB, base, token string) *Conn {
	t.Helper()
	h := map[string]string{}
	if token != "" {
		h["Authorization"] = "Bearer " + token
	}
	c, err := Dial(t, base, h)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	return c
}

// writeFrame writes one masked frame (clients must mask).
func (r *Conn) WriteFrame(op byte, payload []byte, fin bool) error {
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
func (r *Conn) Send(text string) {
	r.t.Helper()
	if err := r.WriteFrame(0x1, []byte(text), true); err != nil {
		r.t.Fatalf("send: %v", err)
	}
}

// sendJSON writes frames (each JSON-encoded) batched in one message.
func (r *Conn) SendJSON(frames ...any) {
	r.t.Helper()
	lines := make([]string, len(frames))
	for i, f := range frames {
		b, err := json.Marshal(f)
		if err != nil {
			r.t.Fatal(err)
		}
		lines[i] = string(b)
	}
	r.Send(strings.Join(lines, "\n"))
}

// readRaw reads one server frame: opcode, fin and payload.
func (r *Conn) readRaw() (op byte, fin bool, payload []byte, err error) {
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

// Silent reports whether the server sends nothing (no frame, no close)
// for d.
func (r *Conn) Silent(d time.Duration) bool {
	if len(r.pending) > 0 || r.closed {
		return false
	}
	_ = r.c.SetReadDeadline(time.Now().Add(d))
	_, err := r.br.Peek(1)
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// Next returns the next frame of a text message, or ok=false once the
// server closed (see CloseCode). It fails the test after d.
func (r *Conn) Next(d time.Duration) (Frame, bool) {
	r.t.Helper()
	for len(r.pending) == 0 {
		if r.closed {
			return Frame{}, false
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
				r.closed, r.CloseCode = true, 1006 // ended without a close frame
				return Frame{}, false
			}
			switch op {
			case 0x9: // ping
				_ = r.WriteFrame(0xA, payload, true)
				continue
			case 0xA:
				continue
			case 0x8:
				r.closed, r.CloseCode = true, 1005
				if len(payload) >= 2 {
					r.CloseCode = int(binary.BigEndian.Uint16(payload))
					r.CloseText = string(payload[2:])
				}
				// Answer the close, as RFC 6455 asks.
				_ = r.WriteFrame(0x8, payload[:min(2, len(payload))], true)
				return Frame{}, false
			}
			msg = append(msg, payload...)
			if fin {
				break
			}
		}
		for line := range strings.SplitSeq(string(msg), "\n") {
			var f Frame
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
func (r *Conn) Read() Frame {
	r.t.Helper()
	d := r.Timeout
	if d <= 0 {
		d = 5 * time.Second
	}
	f, ok := r.Next(d)
	if !ok {
		r.t.Fatalf("closed %d %q; want a frame", r.CloseCode, r.CloseText)
	}
	return f
}

// untilClose reads frames until the server closes, returning them.
func (r *Conn) UntilClose(d time.Duration) []Frame {
	r.t.Helper()
	var out []Frame
	for {
		f, ok := r.Next(d)
		if !ok {
			return out
		}
		out = append(out, f)
	}
}

// ready reads the ready frame.
func (r *Conn) Ready() Frame {
	r.t.Helper()
	f := r.Read()
	if f.Type != "ready" {
		r.t.Fatalf("have %+v; want ready", f)
	}
	return f
}

// collect reads request's deltas to its done, checking seqs run on from
// after, and returns the text and the done frame; errors for the request
// are returned too, other frames fail the test.
func (r *Conn) Collect(request string, after int) (string, Frame, []Frame) {
	r.t.Helper()
	var b strings.Builder
	var errs []Frame
	seq := after
	for {
		f := r.Read()
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
func JWT(t testing.TB, header, claims map[string]any, sign func([]byte) []byte) string {
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

func HMACSigner(secret []byte) func([]byte) []byte {
	return func(b []byte) []byte {
		m := hmac.New(sha256.New, secret)
		m.Write(b)
		return m.Sum(nil)
	}
}

func Ed25519Signer(priv ed25519.PrivateKey) func([]byte) []byte {
	return func(b []byte) []byte { return ed25519.Sign(priv, b) }
}

// claimsFor are valid claims for sub at the default audience, expiring in
// an hour; mod changes them.
func Claims(sub string, mod func(map[string]any)) map[string]any {
	now := time.Now().Unix()
	c := map[string]any{"sub": sub, "aud": "specgate", "exp": now + 3600, "iat": now}
	if mod != nil {
		mod(c)
	}
	return c
}

// httpGet does GET base+path with a Bearer token and returns the status
// and the decoded error body, if any.
func HTTPGet(t testing.TB, base, path, token string) (int, Frame) {
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
		Error Frame `json:"error"`
	}
	b, _ := io.ReadAll(resp.Body)
	_ = json.Unmarshal(b, &body)
	return resp.StatusCode, body.Error
}

func DecodeJSON(resp *http.Response, v any) error {
	return json.NewDecoder(resp.Body).Decode(v)
}
