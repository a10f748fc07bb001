package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/specgate/specgate/internal/testmodels"
	"github.com/specgate/specgate/internal/testredis"
)

// serve's --spec and --draft-model as the README gives them: bad
// combinations are refused before anything is dialled or loaded, and a
// draft model that cannot be loaded is named in the error.
func TestServeSpecFlags(t *testing.T) {
	env := []string{"REDIS_URL=redis://127.0.0.1:1/"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--spec", "draft"}, "--spec draft needs --draft-model FILE"},
		{[]string{"--spec", "eagle"}, `--spec "eagle": want off, ngram, draft or auto`},
		{[]string{"--spec", "ngram", "--draft-model", "d.gguf"}, "--draft-model drafts only with --spec draft or auto, not --spec ngram"},
		{[]string{"--spec", "off", "--draft-model", "d.gguf"}, "not --spec off"},
		{[]string{"--role", "gateway", "--spec", "off"}, "--spec belongs to the engines: with --role=gateway, give it to the --role=engine processes"},
		{[]string{"--role", "gateway", "--draft-model", "d.gguf"}, "--draft-model belongs to the engines"},
		{[]string{"--role", "gateway", "--spec", "ngram", "--model", "m.gguf"}, "--model, --spec belong to the engines: with --role=gateway, give them to the --role=engine processes"},
	} {
		r := specgate(t, env, append([]string{"serve", "--addr", "127.0.0.1:0"}, tc.args...)...)
		if r.code != 1 || !strings.Contains(r.stderr, tc.want) || strings.Contains(r.stderr, "redis") {
			t.Errorf("serve %s: have exit %d, stderr %q; want 1 and %q before Redis is dialled", strings.Join(tc.args, " "), r.code, r.stderr, tc.want)
		}
	}
	rs := testredis.Start(t)
	model := testmodels.Path(t, testmodels.Stories260K)
	missing := filepath.Join(t.TempDir(), "missing.gguf")
	r := specgate(t, nil, "serve", "--addr", "127.0.0.1:0", "--redis", rs.URL(), "--model", model, "--draft-model", missing)
	if r.code != 1 || !strings.Contains(r.stderr, "draft model "+missing+": ") {
		t.Errorf("have exit %d, stderr %q; want 1 and the draft model's path in the error", r.code, r.stderr)
	}
	other := filepath.Join(t.TempDir(), "vocab300.gguf")
	if r := specgate(t, nil, "mkmodel", "--out", other, "--dim", "64", "--heads", "2", "--layers", "1", "--ffn", "128", "--vocab", "300", "--seed", "4"); r.code != 0 {
		t.Fatalf("mkmodel: %d %s", r.code, r.stderr)
	}
	r = specgate(t, nil, "serve", "--addr", "127.0.0.1:0", "--redis", rs.URL(), "--model", model, "--spec", "draft", "--draft-model", other)
	if want := "draft model " + other + ": a vocabulary of 300 tokens, the model's has 512"; r.code != 1 || !strings.Contains(r.stderr, want) {
		t.Errorf("have exit %d, stderr %q; want 1 and %q", r.code, r.stderr, want)
	}
}

// TestServeGatewayRefusesEngineFlags: a gateway has no engine, so each
// flag that configures one is refused by name before Redis is dialled,
// where an engine process takes the same flag and goes on to dial Redis.
// $MODEL in the environment is no flag given and does not trip a gateway.
func TestServeGatewayRefusesEngineFlags(t *testing.T) {
	env := []string{"REDIS_URL=redis://127.0.0.1:1/"}
	for _, tc := range []struct{ flag, value string }{
		{"model", "m.gguf"},
		{"backend", "cpu"},
		{"threads", "2"},
		{"kv-mb", "64"},
		{"host-kv-mb", "64"},
		{"max-batch-tokens", "64"},
		{"max-running", "4"},
		{"quantum", "16"},
		{"aging", "1s"},
		{"kv-type", "f16"},
		{"spec", "ngram"},
		{"draft-model", "d.gguf"},
	} {
		arg := "--" + tc.flag
		r := specgate(t, env, "serve", "--addr", "127.0.0.1:0", "--role", "gateway", arg, tc.value)
		want := arg + " belongs to the engines: with --role=gateway, give it to the --role=engine processes"
		if r.code != 1 || !strings.Contains(r.stderr, want) || strings.Contains(r.stderr, "redis") {
			t.Errorf("serve --role gateway %s %s: have exit %d, stderr %q; want 1 and %q before Redis is dialled", arg, tc.value, r.code, r.stderr, want)
		}
		r = specgate(t, env, "serve", "--addr", "127.0.0.1:0", "--role", "engine", arg, tc.value)
		if r.code != 1 || strings.Contains(r.stderr, "belongs to the engines") || !strings.Contains(r.stderr, "redis") {
			t.Errorf("serve --role engine %s %s: have exit %d, stderr %q; want the flag taken and Redis dialled", arg, tc.value, r.code, r.stderr)
		}
	}
	r := specgate(t, append(env, "MODEL=m.gguf"), "serve", "--addr", "127.0.0.1:0", "--role", "gateway")
	if r.code != 1 || strings.Contains(r.stderr, "belongs to the engines") || !strings.Contains(r.stderr, "redis") {
		t.Errorf("serve --role gateway with $MODEL: have exit %d, stderr %q; want $MODEL ignored and Redis dialled", r.code, r.stderr)
	}
}

// TestServeSpeculates: serve with --spec draft and a self-draft drafts
// with the draft model (its log says so), a reply's done counts no more
// accepted than drafted tokens, and greedy text is the text of --spec off.
func TestServeSpeculates(t *testing.T) {
	rs := testredis.Start(t)
	model := testmodels.Path(t, testmodels.Stories260K)
	draft := testmodels.Path(t, testmodels.Stories260KQ8_0)
	tok := ""
	reply := func(extra ...string) (string, int, int) {
		p := startServe(t, rs.URL(), append([]string{"--model", model}, extra...)...)
		defer func() { _ = p.cmd.Process.Kill() }()
		if tok == "" {
			tok = tenantToken(t, rs, "alice") // once: the tenant keeps its first key
		}
		c := login(t, p, tok)
		c.Timeout = 30 * time.Second
		sid := newSession(t, c)
		c.SendJSON(map[string]any{"type": "chat", "session": sid, "request": "r1", "content": "Once upon a time", "params": map[string]any{"max_tokens": 32, "temperature": 0}})
		text, done, errs := c.Collect("r1", 0)
		if len(errs) > 0 || done.Stats == nil || done.Usage == nil {
			t.Fatalf("have %+v %+v; want a done with stats", done, errs)
		}
		want := "drafter=" + extra[1]
		if extra[1] == "auto" {
			want = "drafter=draft"
		}
		if !strings.Contains(p.logText(), want) {
			t.Errorf("serve %v: log lacks %q:\n%s", extra, want, p.logText())
		}
		return text, done.Stats.DraftedTokens, done.Stats.AcceptedTokens
	}
	plain, d, a := reply("--spec", "off")
	if d != 0 || a != 0 {
		t.Errorf("--spec off: have %d drafted, %d accepted; want 0 and 0", d, a)
	}
	for _, mode := range []string{"draft", "auto"} {
		text, d, a := reply("--spec", mode, "--draft-model", draft)
		if text != plain || a > d || a < 0 {
			t.Errorf("--spec %s: have %q, %d drafted, %d accepted; want %q and accepted <= drafted", mode, text, d, a, plain)
		}
		t.Logf("--spec %s: %d drafted, %d accepted", mode, d, a)
	}
}

// TestTenantSpec: the tenant's speculation policy is set at create, changed
// by update and shown by show; a bad mode is refused and changes nothing.
func TestTenantSpec(t *testing.T) {
	rs := testredis.Start(t)
	env := []string{"REDIS_URL=" + rs.URL()}
	speculate := func(r result) string {
		t.Helper()
		if r.code != 0 {
			t.Fatalf("exit %d: %s", r.code, r.stderr)
		}
		var v struct {
			Tenant *struct {
				Limits struct {
					Speculate string `json:"speculate"`
				} `json:"limits"`
			} `json:"tenant"`
			Limits struct {
				Speculate string `json:"speculate"`
			} `json:"limits"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &v); err != nil {
			t.Fatalf("have %q: %v", r.stdout, err)
		}
		if v.Tenant != nil {
			return v.Tenant.Limits.Speculate
		}
		return v.Limits.Speculate
	}
	if s := speculate(specgate(t, env, "tenant", "create", "plain")); s != "auto" {
		t.Errorf("create without --spec: have speculate %q; want auto", s)
	}
	if s := speculate(specgate(t, env, "tenant", "create", "acme", "--spec", "off")); s != "off" {
		t.Errorf("create --spec off: have %q", s)
	}
	if s := speculate(specgate(t, env, "tenant", "update", "acme", "--spec", "ngram", "--max-concurrent", "3")); s != "ngram" {
		t.Errorf("update --spec ngram: have %q", s)
	}
	if s := speculate(specgate(t, env, "tenant", "show", "acme")); s != "ngram" {
		t.Errorf("show after update: have %q; want ngram", s)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"tenant", "update", "acme", "--spec", "eagle"}, `"eagle" (want auto, off, ngram or draft)`},
		{[]string{"tenant", "create", "bad", "--spec", "on"}, `speculate: unknown speculation mode "on"`},
		{[]string{"tenant", "update", "acme"}, "update needs at least one flag"},
		{[]string{"tenant", "update", "acme", "--alg", "RS256"}, "flag provided but not defined: -alg"},
		{[]string{"tenant", "update", "nosuch", "--spec", "off"}, "not found"},
	} {
		r := specgate(t, env, tc.args...)
		if r.code != 1 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("specgate %s: have exit %d, stderr %q; want 1 and %q", strings.Join(tc.args, " "), r.code, r.stderr, tc.want)
		}
	}
	if s := speculate(specgate(t, env, "tenant", "show", "acme")); s != "ngram" {
		t.Errorf("show after refused updates: have %q; want ngram still", s)
	}
}
