package gateway

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func FuzzDecodeFrame(f *testing.F) {
	seeds := []string{
		`{"type":"auth","token":"a.b.c"}`,
		`{"type":"session.create","title":"t"}`,
		`{"type":"session.resume","session":"s_1","request":"r1","after":3}`,
		`{"type":"chat","session":"s_1","request":"r1","content":"hi","params":{"max_tokens":64,"temperature":0,"top_p":1,"top_k":0,"seed":1,"priority":"batch","regex":"a+"}}`,
		`{"type":"cancel","request":"r1"}`,
		`{"type":"ping","v":1}`,
		`{"type":"ping","v":2}`,
		`{"type":"chat","session":"../x","request":"r","content":"c"}`,
		`{"type":"chat","params":{"schema":{"type":"object"},"regex":"x"}}`,
		`{"type":"chat","session":"s_1","request":"r2","replace":"r1"}`,
		`{"type":"chat","session":"s_1","request":"r3","replace":"r1","content":"edited"}`,
		`{"type":"session.branch","session":"s_1","request":"r1","branch":0}`,
		`{"type":"session.branch","session":"s_1","request":"r1","branch":-1}`,
		`{"type":"session.update","session":"s_1","system":"Be brief.","params":{"max_tokens":9}}`,
		`{"type":"session.create","title":"t","system":"","params":{"json":true}}`,
		`{}`, `[]`, `null`, `{"type":1}`, "\xff", `{"type":"ping"} {}`,
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		fr, err := DecodeFrame(data)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || e.Code == "" {
				t.Fatalf("have error %v; want a typed *Error", err)
			}
			return
		}
		// A frame that decodes re-encodes to one that decodes the same.
		b, err := json.Marshal(fr)
		if err != nil {
			t.Fatal(err)
		}
		again, err := DecodeFrame(b)
		if err != nil {
			t.Fatalf("re-decode of %s: %v", b, err)
		}
		b2, _ := json.Marshal(again)
		if string(b) != string(b2) {
			t.Fatalf("have %s then %s; want a fixed point", b, b2)
		}
	})
}

func TestDecodeFrame(t *testing.T) {
	tests := []struct {
		in   string
		code string // "" for ok
	}{
		{`{"type":"ping"}`, ""},
		{`{"type":"chat","session":"s","request":"r","content":"c","extra":1}`, ""},
		{`{"type":"chat","session":"s","request":"r"}`, CodeBadRequest},
		{`{"type":"chat","session":"s","request":"r","content":"c","params":{"priority":"urgent"}}`, CodeBadRequest},
		{`{"type":"chat","session":"s","request":"r","content":"c","params":{"max_tokens":-1}}`, CodeBadRequest},
		{`{"type":"session.resume","session":"s","after":-1}`, CodeBadRequest},
		{`{"type":"session.get","session":"a b"}`, CodeBadRequest},
		{`{"type":"nope"}`, CodeBadRequest},
		{`{"type":"ping","v":2}`, CodeBadRequest},
		{`{"type":"auth"}`, CodeUnauthorized},
		{`not json`, CodeBadRequest},
	}
	for _, tt := range tests {
		_, err := DecodeFrame([]byte(tt.in))
		code := ""
		if err != nil {
			code = clientError(err).Code
		}
		if code != tt.code {
			t.Errorf("%s: have %q (%v); want %q", tt.in, code, err, tt.code)
		}
	}
	frames := DecodeMessage([]byte("{\"type\":\"ping\"}\n\n{\"type\":\"session.list\"}"))
	if len(frames) != 2 || frames[0].Err != nil || frames[1].Err != nil {
		t.Fatalf("batched message: have %+v; want 2 frames", frames)
	}
}

// FuzzTokenHeader: the JWT header reader never panics, and what it reads
// is what a standard base64url + JSON decode of the first part says.
func FuzzTokenHeader(f *testing.F) {
	for _, s := range []string{
		"eyJhbGciOiJIUzI1NiIsImtpZCI6ImEifQ.e30.sig",
		"eyJhbGciOiJub25lIn0.e30.",
		"a.b", "..", "...", "!!!.e30.x", "e30.e30.e30",
		"eyJhbGciOjF9.e30.x", // alg not a string
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, token string) {
		alg, kid, ok := tokenHeader(token)
		if !ok {
			if alg != "" || kid != "" {
				t.Fatalf("%q: not ok but alg %q kid %q", token, alg, kid)
			}
			return
		}
		if strings.Count(token, ".") != 2 {
			t.Fatalf("%q: ok without three parts", token)
		}
		raw, err := base64.RawURLEncoding.DecodeString(strings.SplitN(token, ".", 2)[0])
		if err != nil {
			t.Fatalf("%q: ok with a header that is not base64url", token)
		}
		var h map[string]any
		if err := json.Unmarshal(raw, &h); err != nil {
			t.Fatalf("%q: ok with a header that is not JSON", token)
		}
		if a, _ := h["alg"].(string); a != alg {
			t.Fatalf("%q: have alg %q; want %q", token, alg, a)
		}
		if k, _ := h["kid"].(string); k != kid {
			t.Fatalf("%q: have kid %q; want %q", token, kid, k)
		}
	})
}

// FuzzEncodeDelta: a delta frame encoded by hand is byte for byte what
// encoding/json writes, whatever its text and request id.
func FuzzEncodeDelta(f *testing.F) {
	for _, s := range []string{"hello ", "", "\"quoted\" \\ back", "<b>&amp;</b>", "tab\tnew\nline", "héllo 世界", "\xff\xfe bad utf-8", "\u2028\u2029", "\x00\x1f\x7f"} {
		f.Add("r1", 3, s)
	}
	f.Fuzz(func(t *testing.T, request string, seq int, text string) {
		fr := ServerFrame{Type: TypeDelta, Request: request, Seq: seq, Text: text}
		have := queued(t, fr)
		want, err := json.Marshal(fr)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(have, want) {
			t.Fatalf("have %s; want %s", have, want)
		}
	})
}

// TestEncodeFrame: a delta with any other field of ServerFrame set leaves
// the hand-written path (the encoding still equals encoding/json's), so a
// field added later cannot go missing from deltas.
func TestEncodeFrame(t *testing.T) {
	base := ServerFrame{Type: TypeDelta, Request: "r1", Seq: 2, Text: "hi "}
	rt := reflect.TypeFor[ServerFrame]()
	for i := range rt.NumField() {
		fr := base
		v := reflect.ValueOf(&fr).Elem().Field(i)
		switch v.Kind() {
		case reflect.String:
			v.SetString(v.String() + "x")
		case reflect.Int:
			v.SetInt(v.Int() + 7)
		case reflect.Bool:
			v.SetBool(true)
		case reflect.Pointer:
			v.Set(reflect.New(v.Type().Elem()))
		case reflect.Slice:
			v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		default:
			t.Fatalf("field %s: kind %v not covered", rt.Field(i).Name, v.Kind())
		}
		have := queued(t, fr)
		want, _ := json.Marshal(fr)
		if !bytes.Equal(have, want) {
			t.Errorf("with %s set: have %s; want %s", rt.Field(i).Name, have, want)
		}
	}
}

// TestAppendDeltaAllocates: a delta's text is escaped in place whatever
// it holds (non-ASCII, quotes, newlines, HTML characters, bad UTF-8): the
// connection's queue takes it without an allocation of its own.
func TestAppendDeltaAllocates(t *testing.T) {
	buf := make([]byte, 0, 1024)
	for _, text := range []string{"hello ", "héllo 世界", "line\n", `say "hi"`, "a<b&c>", "\xff bad", "\u2028"} {
		f := ServerFrame{Type: TypeDelta, Request: "r1", Seq: 7, Text: text}
		if n := testing.AllocsPerRun(100, func() { buf = appendDelta(buf[:0], &f) }); n != 0 {
			t.Errorf("%q: %.0f allocations per delta; want 0", text, n)
		}
	}
}

// queued returns the bytes a connection's queue holds for f once Send has
// taken it: the path every frame to a client takes.
func queued(t *testing.T, f ServerFrame) []byte {
	t.Helper()
	c := &Connection{cfg: connConfig{queueFrames: 4, queueBytes: 1 << 30, maxBatch: 4}, wake: make(chan struct{}, 1)}
	if !c.Send(f) {
		t.Fatalf("Send(%+v) refused", f)
	}
	msg, _, _ := c.take(nil, nil, 4)
	return msg
}
