package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/engine/model"
	"github.com/specgate/specgate/engine/spec"
	"github.com/specgate/specgate/internal/testmodels"
	"github.com/specgate/specgate/kernels"
	"github.com/specgate/specgate/tenants"
)

// The speculation controls as PROTOCOL.md and the OpenAI notes promise
// them, seen from outside: a hand-rolled socket client and hand-signed
// JWTs, OpenAI bodies read through wire types declared here, a real engine
// whose drafter is a real draft model (stories260K quantized to Q8_0, a
// self-draft) drafting fixed chains.

// specEnv serves stories260K with its Q8_0 self-draft as the draft model.
func specEnv(t *testing.T) *env {
	t.Helper()
	be, err := kernels.Open("cpu", kernels.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = be.Close() })
	draft, err := model.Load(testmodels.Path(t, testmodels.Stories260KQ8_0), be)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = draft.Close() })
	// A fixed shape: the dispatcher would turn drafting off wherever it
	// measures a loss, as it may on a model this small.
	_, eng := storiesEngineWith(t, engine.Options{Speculation: engine.Speculation{Drafter: engine.DraftModel, Model: draft, Dispatcher: spec.Fixed(spec.Chain(4))}})
	return newEnv(t, nil, "", func(o *Options) {
		o.Generator = eng
		o.ModelName = "stories260K"
	})
}

func (e *env) setTenantSpeculate(mode string) {
	e.t.Helper()
	if _, err := e.store.Update(context.Background(), "acme", func(t *tenants.Tenant) error {
		t.Limits.Speculate = mode
		return nil
	}); err != nil {
		e.t.Fatal(err)
	}
}

// TestSpeculateOverSocket: params.speculate narrows the tenant's mode and
// never widens it, a session's params.speculate is the default of its
// chats, done.stats counts the drafts, and greedy text is the same
// whatever speculated.
func TestSpeculateOverSocket(t *testing.T) {
	e := specEnv(t)
	c := e.rawLogin("alice")
	want := ""
	for i, tc := range []struct {
		name, tenant string
		sessionOff   bool // the session's params say speculate: off
		params       map[string]any
		drafts       bool
	}{
		{"plain", "", false, map[string]any{"speculate": "off"}, false},
		{"tenant default, no param", "", false, nil, true},
		{"auto", "", false, map[string]any{"speculate": "auto"}, true},
		{"the server's drafter", "", false, map[string]any{"speculate": "draft"}, true},
		{"a drafter the server does not run", "", false, map[string]any{"speculate": "ngram"}, false},
		{"the session's off", "", true, nil, false},
		{"a chat's param overrides the session's", "", true, map[string]any{"speculate": "auto"}, true},
		{"tenant auto", "auto", false, nil, true},
		{"tenant draft", "draft", false, nil, true},
		{"tenant ngram on a draft-model server", "ngram", false, nil, false},
		{"tenant off", "off", false, nil, false},
		{"tenant off, a chat cannot widen it", "off", false, map[string]any{"speculate": "draft"}, false},
		{"tenant off, nor with auto", "off", false, map[string]any{"speculate": "auto"}, false},
		{"tenant draft, a chat may narrow it", "draft", false, map[string]any{"speculate": "off"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e.setTenantSpeculate(tc.tenant)
			// Each chat asks in a session of its own, so every prompt is
			// the same.
			create := map[string]any{"type": "session.create", "title": tc.name}
			if tc.sessionOff {
				create["params"] = map[string]any{"speculate": "off"}
			}
			c.SendJSON(create)
			f := c.Read()
			if f.Type != "session" || f.Session == nil {
				t.Fatalf("have %+v; want a session", f)
			}
			params := map[string]any{"max_tokens": 24, "temperature": 0}
			for k, v := range tc.params {
				params[k] = v
			}
			rid := fmt.Sprint("r", i)
			c.SendJSON(map[string]any{"type": "chat", "session": f.Session.ID, "request": rid, "content": "Once upon a time", "params": params})
			text, done, errs := c.Collect(rid, 0)
			if len(errs) > 0 || done.Stats == nil || done.Usage == nil {
				t.Fatalf("have %+v, errors %+v; want a done with usage and stats", done, errs)
			}
			if want == "" {
				want = text
			} else if text != want {
				t.Errorf("have %q; want the plain greedy text %q", text, want)
			}
			st := done.Stats
			if st.AcceptedTokens > st.DraftedTokens || st.AcceptedTokens > done.Usage.CompletionTokens {
				t.Errorf("have %d drafted, %d accepted, %d completion tokens; want accepted <= drafted, completion", st.DraftedTokens, st.AcceptedTokens, done.Usage.CompletionTokens)
			}
			if tc.drafts != (st.DraftedTokens > 0 && st.AcceptedTokens > 0) || !tc.drafts && st.DraftedTokens != 0 {
				t.Errorf("have %d drafted, %d accepted; want drafts %v", st.DraftedTokens, st.AcceptedTokens, tc.drafts)
			}
		})
	}
}

// TestSpeculateSampledOverSocket: a seeded sampled reply is the same text
// with speculation on or off.
func TestSpeculateSampledOverSocket(t *testing.T) {
	e := specEnv(t)
	c := e.rawLogin("alice")
	var texts []string
	drafted := 0
	for i, mode := range []string{"off", "auto", "off", "draft"} {
		sid := rawSession(t, c)
		rid := fmt.Sprint("s", i)
		c.SendJSON(map[string]any{"type": "chat", "session": sid, "request": rid, "content": "Once upon a time",
			"params": map[string]any{"max_tokens": 32, "temperature": 0.8, "top_p": 0.95, "seed": 11 + i/2, "speculate": mode}})
		text, done, errs := c.Collect(rid, 0)
		if len(errs) > 0 || done.Stats == nil {
			t.Fatalf("have %+v %+v", done, errs)
		}
		texts = append(texts, text)
		drafted += done.Stats.AcceptedTokens
	}
	if texts[0] != texts[1] || texts[2] != texts[3] {
		t.Errorf("have %q and %q (seed 11), %q and %q (seed 12); want each seed's text with speculation on as off", texts[0], texts[1], texts[2], texts[3])
	}
	if drafted == 0 {
		t.Error("no sampled reply took a draft; want the speculative path exercised")
	}
}

// TestSpeculateRefusedOverSocket: an unknown mode is a bad_request for the
// chat or the session, naming the field, and the socket stays open.
func TestSpeculateRefusedOverSocket(t *testing.T) {
	e := newEnv(t, nil, "", nil)
	c := e.rawLogin("alice")
	sid := rawSession(t, c)
	for _, bad := range []any{"eagle", "OFF", 1, true} {
		c.SendJSON(map[string]any{"type": "chat", "session": sid, "request": "r1", "content": "hi", "params": map[string]any{"speculate": bad}})
		f := c.Read()
		if f.Type != "error" || f.Code != "bad_request" || f.Request != "r1" || !strings.Contains(f.Message, "speculate") {
			t.Errorf("speculate %v: have %+v; want bad_request for r1 naming speculate", bad, f)
		}
	}
	c.SendJSON(map[string]any{"type": "session.create", "title": "t", "params": map[string]any{"speculate": "sometimes"}})
	if f := c.Read(); f.Type != "error" || f.Code != "bad_request" || !strings.Contains(f.Message, "speculate") {
		t.Errorf("have %+v; want bad_request naming speculate", f)
	}
	c.SendJSON(map[string]any{"type": "chat", "session": sid, "request": "r2", "content": "hi", "params": map[string]any{"speculate": "off"}})
	if _, done, errs := c.Collect("r2", 0); len(errs) > 0 || done.FinishReason != "stop" {
		t.Fatalf("have %+v %+v; want the chat served after the refusals", done, errs)
	}
}

// oaiSpecUsage is OpenAI's usage object as a client SDK reads it.
type oaiSpecUsage struct {
	PromptTokens            int `json:"prompt_tokens"`
	CompletionTokens        int `json:"completion_tokens"`
	TotalTokens             int `json:"total_tokens"`
	CompletionTokensDetails *struct {
		Accepted *int `json:"accepted_prediction_tokens"`
		Rejected *int `json:"rejected_prediction_tokens"`
	} `json:"completion_tokens_details"`
}

type oaiSpecResponse struct {
	Choices []struct {
		Text    string `json:"text"`
		Message *struct {
			Content string `json:"content"`
		} `json:"message"`
		Delta *struct {
			Content string `json:"content"`
		} `json:"delta"`
	} `json:"choices"`
	Usage *oaiSpecUsage `json:"usage"`
	Error *struct {
		Type  string  `json:"type"`
		Param *string `json:"param"`
	} `json:"error"`
}

// TestSpeculateOverOpenAI: "speculate" narrows the tenant's mode like the
// socket's param; usage.completion_tokens_details carries the accepted and
// rejected draft tokens, streamed (with include_usage) or not, for every
// choice; rejected drafts are not completion tokens.
func TestSpeculateOverOpenAI(t *testing.T) {
	e := specEnv(t)
	tok := e.hsToken("alice", nil)
	call := func(path string, body map[string]any) (text string, u oaiSpecUsage) {
		t.Helper()
		resp, raw := e.post(path, tok, body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s %v: have %d %s; want 200", path, body, resp.StatusCode, raw)
		}
		var events []string
		if body["stream"] == true {
			events = sse(t, raw)
		} else {
			events = []string{string(raw)}
		}
		var usage *oaiSpecUsage
		var b strings.Builder
		for _, ev := range events {
			if ev == "[DONE]" {
				continue
			}
			var r oaiSpecResponse
			if err := json.Unmarshal([]byte(ev), &r); err != nil {
				t.Fatalf("%s: %v in %s", path, err, ev)
			}
			for _, c := range r.Choices {
				b.WriteString(c.Text)
				if c.Message != nil {
					b.WriteString(c.Message.Content)
				}
				if c.Delta != nil {
					b.WriteString(c.Delta.Content)
				}
			}
			if r.Usage != nil {
				usage = r.Usage
			}
		}
		if usage == nil {
			t.Fatalf("%s %v: no usage in %s", path, body, raw)
		}
		d := usage.CompletionTokensDetails
		if d == nil || d.Accepted == nil || d.Rejected == nil {
			t.Fatalf("%s %v: have usage %s; want completion_tokens_details with accepted_ and rejected_prediction_tokens", path, body, raw)
		}
		if *d.Accepted < 0 || *d.Rejected < 0 || *d.Accepted > usage.CompletionTokens || usage.TotalTokens != usage.PromptTokens+usage.CompletionTokens {
			t.Errorf("%s %v: have usage %+v, details %d/%d; want 0 <= accepted <= completion, rejected >= 0, total = prompt + completion", path, body, usage, *d.Accepted, *d.Rejected)
		}
		return b.String(), *usage
	}
	chat := map[string]any{"messages": []map[string]any{{"role": "user", "content": "Once upon a time"}}, "max_tokens": 24, "temperature": 0}
	with := func(base map[string]any, kv ...any) map[string]any {
		out := map[string]any{}
		for k, v := range base {
			out[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			out[kv[i].(string)] = kv[i+1]
		}
		return out
	}
	completion := map[string]any{"prompt": "Once upon a time", "max_tokens": 24, "temperature": 0}
	streamUsage := map[string]any{"include_usage": true}
	for _, path := range []string{"/v1/chat/completions", "/v1/completions"} {
		base := chat
		if path == "/v1/completions" {
			base = completion
		}
		e.setTenantSpeculate("")
		want, u := call(path, with(base, "speculate", "off"))
		if d := u.CompletionTokensDetails; *d.Accepted != 0 || *d.Rejected != 0 {
			t.Errorf("%s off: have %d accepted, %d rejected; want 0 and 0", path, *d.Accepted, *d.Rejected)
		}
		for _, tc := range []struct {
			name, tenant string
			body         map[string]any
			drafts       bool
		}{
			{"default", "", base, true},
			{"streamed", "", with(base, "stream", true, "stream_options", streamUsage), true},
			{"draft", "", with(base, "speculate", "draft"), true},
			{"ngram on a draft-model server", "", with(base, "speculate", "ngram"), false},
			{"two choices", "", with(base, "n", 2), true},
			{"tenant off", "off", base, false},
			{"tenant off, the body cannot widen it", "off", with(base, "speculate", "auto"), false},
			{"tenant off, streamed", "off", with(base, "stream", true, "stream_options", streamUsage, "speculate", "draft"), false},
			{"tenant draft, the body may narrow it", "draft", with(base, "speculate", "off"), false},
		} {
			e.setTenantSpeculate(tc.tenant)
			text, u := call(path, tc.body)
			choices := 1
			if tc.body["n"] == 2 {
				choices = 2
			}
			if text != strings.Repeat(want, choices) {
				t.Errorf("%s %s: have %q; want the plain greedy text %q", path, tc.name, text, want)
			}
			d := u.CompletionTokensDetails
			if drafted := *d.Accepted > 0; drafted != tc.drafts || !tc.drafts && *d.Rejected != 0 {
				t.Errorf("%s %s: have %d accepted, %d rejected; want drafts %v", path, tc.name, *d.Accepted, *d.Rejected, tc.drafts)
			}
		}
	}
}

// TestSpeculateRefusedOverOpenAI: an unknown or mistyped "speculate" is a
// 400 invalid_request_error with param "speculate".
func TestSpeculateRefusedOverOpenAI(t *testing.T) {
	e := newEnv(t, nil, "", nil)
	tok := e.hsToken("alice", nil)
	for _, path := range []string{"/v1/chat/completions", "/v1/completions"} {
		for _, bad := range []any{"eagle", "Draft", 2} {
			body := map[string]any{"speculate": bad, "max_tokens": 4}
			if path == "/v1/completions" {
				body["prompt"] = "hi"
			} else {
				body["messages"] = []map[string]any{{"role": "user", "content": "hi"}}
			}
			resp, raw := e.post(path, tok, body)
			var r oaiSpecResponse
			_ = json.Unmarshal(raw, &r)
			if resp.StatusCode != http.StatusBadRequest || r.Error == nil || r.Error.Type != "invalid_request_error" || r.Error.Param == nil || *r.Error.Param != "speculate" {
				t.Errorf("%s speculate %v: have %d %s; want 400 invalid_request_error, param speculate", path, bad, resp.StatusCode, raw)
			}
		}
	}
}
