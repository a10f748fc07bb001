package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"reflect"
	"testing"
	"time"

	"github.com/specgate/specgate/engine"
)

// chatOK sends a chat frame and reads its reply to the end.
func (c *wsClient) chatOK(frame map[string]any) string {
	c.t.Helper()
	frame["type"] = "chat"
	c.send(frame)
	text, _, done, errs := c.collect(frame["request"].(string))
	if len(errs) > 0 || (done.FinishReason != engine.FinishStop && done.FinishReason != engine.FinishLength) {
		c.t.Fatalf("chat %v: have %v, done %+v; want a finished reply", frame, errs, done)
	}
	return text
}

// getSession reads a session over the socket.
func (c *wsClient) getSession(sid string) *SessionView {
	c.t.Helper()
	c.send(map[string]any{"type": "session.get", "session": sid})
	f := c.read()
	if f.Type != TypeSession || f.Session == nil {
		c.t.Fatalf("have %+v; want the session", f)
	}
	return f.Session
}

type turnView struct{ role, content, request string }

func turns(v *SessionView) []turnView {
	out := make([]turnView, len(v.Messages))
	for i, m := range v.Messages {
		out[i] = turnView{m.Role, m.Content, m.Request}
	}
	return out
}

func promptOf(r engine.Request) []string {
	var out []string
	for _, m := range r.Messages {
		out = append(out, m.Role+":"+m.Content)
	}
	return out
}

// Regenerate and edit replace a turn on the server; what they replace
// stays as a sibling branch that session.branch brings back, nested
// branches included; the engine sees the live path only, after the
// session's system prompt.
func TestRegenerateEditAndBranches(t *testing.T) {
	e := newEnv(t, nil, "", nil)
	c := e.login("alice")
	c.send(map[string]any{"type": "session.create", "title": "t", "system": "Be terse.", "params": map[string]any{"max_tokens": 7, "temperature": 0.5}})
	f := c.read()
	if f.Session == nil || f.Session.System != "Be terse." || f.Session.Params == nil || f.Session.Params.MaxTokens != 7 {
		t.Fatalf("have %+v; want the session with its settings", f.Session)
	}
	sid := f.Session.ID

	c.chatOK(map[string]any{"session": sid, "request": "r1", "content": "hello"})
	c.chatOK(map[string]any{"session": sid, "request": "r2", "content": "world", "params": map[string]any{"temperature": 0.9}})
	r := e.gen.lastRequest()
	if want := []string{"system:Be terse.", "user:hello", "assistant:" + fakeReply("hello"), "user:world"}; !reflect.DeepEqual(promptOf(r), want) {
		t.Fatalf("have prompt %q; want %q", promptOf(r), want)
	}
	if r.MaxTokens != 7 || r.Sample.Temperature != 0.9 {
		t.Errorf("have max_tokens %d temperature %v; want the session's 7 and the chat's 0.9", r.MaxTokens, r.Sample.Temperature)
	}

	// Regenerate r2: the question is not repeated, the old answer leaves
	// the prompt and the live history.
	c.chatOK(map[string]any{"session": sid, "request": "r3", "replace": "r2"})
	if want := []string{"system:Be terse.", "user:hello", "assistant:" + fakeReply("hello"), "user:world"}; !reflect.DeepEqual(promptOf(e.gen.lastRequest()), want) {
		t.Fatalf("regenerate: have prompt %q; want %q", promptOf(e.gen.lastRequest()), want)
	}
	v := c.getSession(sid)
	wantLive := []turnView{{"user", "hello", "r1"}, {"assistant", fakeReply("hello"), "r1"}, {"user", "world", "r3"}, {"assistant", fakeReply("world"), "r3"}}
	if !reflect.DeepEqual(turns(v), wantLive) || !reflect.DeepEqual(v.Branches, []BranchInfo{{At: 2, Request: "r3", Count: 2, Current: 1}}) {
		t.Fatalf("after regenerate: have %+v %+v", turns(v), v.Branches)
	}

	// Edit r1: a new first question; the old conversation (with its own
	// branch point at 2) is version 0.
	c.chatOK(map[string]any{"session": sid, "request": "r4", "replace": "r1", "content": "hi"})
	v = c.getSession(sid)
	if want := []turnView{{"user", "hi", "r4"}, {"assistant", fakeReply("hi"), "r4"}}; !reflect.DeepEqual(turns(v), want) ||
		!reflect.DeepEqual(v.Branches, []BranchInfo{{At: 0, Request: "r4", Count: 2, Current: 1}}) {
		t.Fatalf("after edit: have %+v %+v", turns(v), v.Branches)
	}

	// Page back to version 0: the old conversation returns with its
	// nested branch point.
	c.send(map[string]any{"type": "session.branch", "session": sid, "request": "r4", "branch": 0})
	f = c.read()
	if f.Session == nil || !reflect.DeepEqual(turns(f.Session), wantLive) ||
		!reflect.DeepEqual(f.Session.Branches, []BranchInfo{{At: 0, Request: "r1", Count: 2, Current: 0}, {At: 2, Request: "r3", Count: 2, Current: 1}}) {
		t.Fatalf("branch 0: have %+v", f.Session)
	}
	// And to the first answer of the second question.
	c.send(map[string]any{"type": "session.branch", "session": sid, "request": "r3", "branch": 0})
	f = c.read()
	if want := []turnView{{"user", "hello", "r1"}, {"assistant", fakeReply("hello"), "r1"}, {"user", "world", "r2"}, {"assistant", fakeReply("world"), "r2"}}; f.Session == nil || !reflect.DeepEqual(turns(f.Session), want) {
		t.Fatalf("nested branch 0: have %+v", f.Session)
	}
	// A new turn continues the live version.
	c.chatOK(map[string]any{"session": sid, "request": "r5", "content": "more"})
	if p := promptOf(e.gen.lastRequest()); len(p) != 6 || p[3] != "user:world" || p[5] != "user:more" {
		t.Fatalf("have prompt %q; want the live path then the new question", p)
	}

	for _, tc := range []struct {
		frame map[string]any
		code  string
	}{
		{map[string]any{"type": "chat", "session": sid, "request": "r6", "replace": "nope"}, CodeNotFound},
		{map[string]any{"type": "session.branch", "session": sid, "request": "r1", "branch": 7}, CodeNotFound},
		{map[string]any{"type": "session.branch", "session": sid, "request": "r5", "branch": 1}, CodeNotFound},
		{map[string]any{"type": "session.branch", "session": sid, "request": "r1"}, CodeBadRequest},
		{map[string]any{"type": "chat", "session": sid, "request": "r7"}, CodeBadRequest},
		{map[string]any{"type": "session.update", "session": "s_other", "system": "x"}, CodeNotFound},
	} {
		c.send(tc.frame)
		if f := c.read(); f.Type != TypeError || f.Code != tc.code {
			t.Errorf("%v: have %+v; want error %s", tc.frame, f, tc.code)
		}
	}

	// Another user cannot branch or update alice's session.
	bob := e.login("bob")
	bob.send(map[string]any{"type": "session.branch", "session": sid, "request": "r1", "branch": 1})
	if f := bob.read(); f.Code != CodeNotFound {
		t.Errorf("bob: have %+v; want not_found", f)
	}

	// While a reply streams, the session's branches cannot move.
	e.gen.gate = make(chan struct{})
	c.send(map[string]any{"type": "chat", "session": sid, "request": "r8", "content": "slow"})
	waitRunning(t, e, sid, "r8")
	c.send(map[string]any{"type": "session.branch", "session": sid, "request": "r1", "branch": 1})
	if f := c.read(); f.Type != TypeError || f.Reason != "busy" {
		t.Fatalf("have %+v; want busy", f)
	}
	close(e.gen.gate)
	if _, _, done, _ := c.collect("r8"); done.FinishReason != engine.FinishStop {
		t.Fatalf("have %+v", done)
	}

	// The system prompt can change; the next turn uses it.
	c.send(map[string]any{"type": "session.update", "session": sid, "system": "Be kind."})
	if f := c.read(); f.Session == nil || f.Session.System != "Be kind." || f.Session.Title != "t" {
		t.Fatalf("have %+v; want the updated session", f.Session)
	}
	c.chatOK(map[string]any{"session": sid, "request": "r9", "content": "again"})
	if p := promptOf(e.gen.lastRequest()); p[0] != "system:Be kind." {
		t.Errorf("have prompt %q; want the new system prompt first", p)
	}
}

func waitRunning(t *testing.T, e *env, sid, request string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		st, err := e.srv.Sessions().requestState(context.Background(), sid, request)
		if err == nil && st == "running" {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("request %s never started", request)
}

// A request the engine refuses is not a turn: nothing is stored, the id
// can be used again, and a refused regenerate leaves the old answer live.
func TestRefusalIsNotStored(t *testing.T) {
	e := newEnv(t, nil, "", nil)
	c := e.login("alice")
	sid := c.createSession("")
	c.chatOK(map[string]any{"session": sid, "request": "r1", "content": "hello"})
	before := turns(c.getSession(sid))

	e.gen.refuse = &engine.Error{Code: engine.CodeQueueFull, Message: "queue full", Temporary: true}
	for _, frame := range []map[string]any{
		{"type": "chat", "session": sid, "request": "r2", "content": "refused"},
		{"type": "chat", "session": sid, "request": "r3", "replace": "r1"},
		{"type": "chat", "session": sid, "request": "r4", "replace": "r1", "content": "edited"},
	} {
		c.send(frame)
		if f := c.read(); f.Type != TypeError || f.Code != engine.CodeQueueFull || !f.Temporary {
			t.Fatalf("%v: have %+v; want a temporary queue_full", frame, f)
		}
		v := c.getSession(sid)
		if !reflect.DeepEqual(turns(v), before) || len(v.Branches) != 0 {
			t.Fatalf("after refused %v: have %+v %+v; want the history as before", frame, turns(v), v.Branches)
		}
	}
	e.gen.refuse = nil
	c.chatOK(map[string]any{"session": sid, "request": "r2", "content": "accepted"})
	if v := c.getSession(sid); len(v.Messages) != 4 {
		t.Fatalf("have %+v; want the retried turn stored once", turns(v))
	}
}

// The ready frame describes the model.
func TestReadyDescribesModel(t *testing.T) {
	info := &ModelInfo{Name: "tiny", Arch: "llama", Context: 512, Quantization: "Q8_0"}
	e := newEnv(t, nil, "", func(o *Options) { o.Model = info })
	c := e.dial(e.token("alice"), nil)
	f := c.read()
	if f.Type != TypeReady || f.Model == nil || *f.Model != *info {
		t.Fatalf("have %+v; want ready with model %+v", f.Model, info)
	}
	// /v1/models says the same, next to the OpenAI fields.
	req, _ := http.NewRequest("GET", e.http.URL+"/v1/models", nil)
	req.Header.Set("Authorization", "Bearer "+e.token("alice"))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var list struct {
		Data []map[string]any `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil || len(list.Data) != 1 {
		t.Fatalf("have %+v, %v; want one model", list, err)
	}
	m := list.Data[0]
	if m["arch"] != "llama" || m["context_length"] != float64(512) || m["quantization"] != "Q8_0" || m["object"] != "model" {
		t.Errorf("have %v; want arch, context_length and quantization", m)
	}
}

// A regenerated turn reuses the engine's cached prefix: the conversation
// before the replaced answer is not computed again, and greedy decoding
// gives the same answer as before.
func TestRegenerateKeepsCachedPrefix(t *testing.T) {
	_, eng := storiesEngine(t)
	e := newEnv(t, nil, "", func(o *Options) { o.Generator = eng })
	c := e.login("alice")
	sid := c.createSession("real")
	params := map[string]any{"max_tokens": 12, "temperature": 0}
	c.chatOK(map[string]any{"session": sid, "request": "r1", "content": "Once upon a time there was a little girl", "params": params})
	c.send(map[string]any{"type": "chat", "session": sid, "request": "r2", "content": "She liked to play", "params": params})
	first, _, done1, _ := c.collect("r2")
	c.send(map[string]any{"type": "chat", "session": sid, "request": "r3", "replace": "r2", "params": params})
	again, _, done2, errs := c.collect("r3")
	if len(errs) > 0 || again != first {
		t.Fatalf("have %q (%v); want the greedy answer %q again", again, errs, first)
	}
	if done2.Usage == nil || done1.Usage == nil || done2.Usage.PromptTokens != done1.Usage.PromptTokens {
		t.Fatalf("have usage %+v then %+v; want the same prompt", done1.Usage, done2.Usage)
	}
	if done2.Usage.CachedTokens < done2.Usage.PromptTokens/2 {
		t.Errorf("have %d of %d prompt tokens cached; want the shared prefix reused", done2.Usage.CachedTokens, done2.Usage.PromptTokens)
	}
	if v := c.getSession(sid); v.Messages[3].Usage == nil || *v.Messages[3].Usage != *done2.Usage || v.Messages[3].Stats == nil {
		t.Errorf("have stored %+v; want the reply's usage and stats kept", v.Messages[3])
	}
	t.Logf("regenerate: %d of %d prompt tokens cached", done2.Usage.CachedTokens, done2.Usage.PromptTokens)
}

// Two tabs regenerate or edit at once: the script that moves the
// branches also checks that the session is idle, so whichever comes
// second, while the first reply runs, gets a busy error frame and stores
// nothing, and the session holds the one new turn, not a running reply
// moved onto a stored version.
func TestConcurrentReplacesOneTurn(t *testing.T) {
	e := newEnv(t, nil, "", nil)
	tab1, tab2 := e.login("alice"), e.login("alice")
	for round := range 3 {
		e.gen.gate = nil
		sid := tab1.createSession("t")
		tab1.chatOK(map[string]any{"session": sid, "request": "r1", "content": "hello"})
		tab1.chatOK(map[string]any{"session": sid, "request": "r2", "content": "world"})

		// Tab 1 regenerates the second turn, tab 2 edits the first, at
		// once; replies wait at the gate so the first is still running.
		e.gen.gate = make(chan struct{})
		tab1.send(map[string]any{"type": "chat", "session": sid, "request": "a", "replace": "r2"})
		tab2.send(map[string]any{"type": "chat", "session": sid, "request": "b", "replace": "r1", "content": "hi"})
		var winner, loser *wsClient
		var won string
		deadline := time.Now().Add(5 * time.Second)
		for winner == nil && time.Now().Before(deadline) {
			for _, c := range []struct {
				tab, other *wsClient
				request    string
			}{{tab1, tab2, "a"}, {tab2, tab1, "b"}} {
				if st, _ := e.srv.Sessions().requestState(context.Background(), sid, c.request); st == "running" && winner == nil {
					winner, loser, won = c.tab, c.other, c.request
				}
			}
			time.Sleep(5 * time.Millisecond)
		}
		if winner == nil {
			t.Fatalf("round %d: neither replace started", round)
		}
		lost := map[string]string{"a": "b", "b": "a"}[won]
		f, err := loser.tryRead(3 * time.Second)
		if err != nil || f.Type != TypeError || f.Request != lost || f.Reason != "busy" || !f.Temporary {
			t.Fatalf("round %d: %s won; have %+v, %v for %s; want a temporary busy error frame", round, won, f, err, lost)
		}
		close(e.gen.gate)
		if _, _, done, errs := winner.collect(won); len(errs) > 0 || done.FinishReason != engine.FinishStop {
			t.Fatalf("round %d: %s: have %v, done %+v; want its reply", round, won, errs, done)
		}
		if st, _ := e.srv.Sessions().requestState(context.Background(), sid, lost); st != "" {
			t.Errorf("round %d: the refused %s has a request record %q", round, lost, st)
		}
		v := tab1.getSession(sid)
		want := []turnView{{"user", "hello", "r1"}, {"assistant", fakeReply("hello"), "r1"}, {"user", "world", "a"}, {"assistant", fakeReply("world"), "a"}}
		branch := []BranchInfo{{At: 2, Request: "a", Count: 2, Current: 1}}
		if won == "b" {
			want = []turnView{{"user", "hi", "b"}, {"assistant", fakeReply("hi"), "b"}}
			branch = []BranchInfo{{At: 0, Request: "b", Count: 2, Current: 1}}
		}
		if !reflect.DeepEqual(turns(v), want) || !reflect.DeepEqual(v.Branches, branch) {
			t.Fatalf("round %d: %s won; have %+v %+v; want %+v %+v", round, won, turns(v), v.Branches, want, branch)
		}
	}
}

// The branch scripts themselves refuse while the live path's last turn
// runs, whatever the caller checked before: run as the second of two
// racing tabs would run them, after the first started its turn.
func TestBranchScriptsRefuseWhileRunning(t *testing.T) {
	e := newEnv(t, nil, "", nil)
	c := e.login("alice")
	sid := c.createSession("t")
	c.chatOK(map[string]any{"session": sid, "request": "r1", "content": "hello"})
	s := e.srv.Sessions()
	ctx := context.Background()
	if _, err := s.StartTurn(ctx, "acme", "alice", sid, "r2", "world"); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UnixMilli()
	n, err := s.w.Run(ctx, replaceScript, []string{s.sessKey(sid), s.msgsKey(sid), s.reqKey(sid, "r3"), s.altsKey(sid)},
		"acme", "alice", "r1", "", now, sid, s.logTTL.Milliseconds(), "r3", s.reqKey(sid, "")).Int()
	if err != nil || n != -4 {
		t.Errorf("replace: have %d, %v; want -4 (busy)", n, err)
	}
	n, err = s.w.Run(ctx, switchScript, []string{s.sessKey(sid), s.msgsKey(sid), s.altsKey(sid)},
		"acme", "alice", "r1", 0, now, s.reqKey(sid, "")).Int()
	if err != nil || n != -4 {
		t.Errorf("switch: have %d, %v; want -4 (busy)", n, err)
	}
	if _, err := s.StartReplaceTurn(ctx, "acme", "alice", sid, "r4", "r1", "hi"); !errors.Is(err, ErrBusy) {
		t.Errorf("StartReplaceTurn: have %v; want ErrBusy", err)
	}
	v := c.getSession(sid)
	if want := []turnView{{"user", "hello", "r1"}, {"assistant", fakeReply("hello"), "r1"}, {"user", "world", "r2"}}; !reflect.DeepEqual(turns(v), want) || len(v.Branches) != 0 {
		t.Errorf("have %+v %+v; want the session untouched", turns(v), v.Branches)
	}
}
