package main

// The command line as a user meets it: each test runs this test binary as
// the specgate command (TestMain dispatches to main when asked), so exit
// codes and the printed text are the real ones.

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/specgate/specgate/internal/testredis"
)

const runMainEnv = "SPECGATE_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) == "1" {
		os.Args = append([]string{"specgate"}, os.Args[1:]...)
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

type result struct {
	code           int
	stdout, stderr string
}

// specgate runs the command with args and extra environment.
func specgate(t *testing.T, env []string, args ...string) result {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(append(os.Environ(), runMainEnv+"=1"), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run specgate %v: %v", args, err)
	}
	return result{code, out.String(), errb.String()}
}

func TestHelpExitsZero(t *testing.T) {
	// No Redis is needed for help: a dead URL proves it is not dialled.
	env := []string{"REDIS_URL=redis://127.0.0.1:1/"}
	for _, args := range [][]string{
		{"--help"}, {"-h"}, {"help"},
		{"serve", "--help"}, {"tenant", "--help"}, {"tenant", "create", "--help"},
		{"tenant", "token", "--help"}, {"migrate", "-h"}, {"generate", "--help"},
		{"bench", "--help"}, {"mkmodel", "--help"}, {"status", "--help"},
		{"loadgen", "--help"}, {"version", "--help"},
		{"tokenize", "--help"}, {"logits", "-h"},
	} {
		r := specgate(t, env, args...)
		if r.code != 0 || !strings.Contains(r.stdout+r.stderr, "usage") {
			t.Errorf("specgate %s: have exit %d, output %q; want 0 and a usage", strings.Join(args, " "), r.code, r.stdout+r.stderr)
		}
	}
}

func TestCommandErrors(t *testing.T) {
	env := []string{"REDIS_URL=redis://127.0.0.1:1/"}
	for _, tc := range []struct {
		args []string
		code int
		want string // in stderr
	}{
		{[]string{"nosuch"}, 2, `unknown command "nosuch"`},
		{[]string{"generate", "--model", "m.gguf"}, 1, "--prompt is required"},
		{[]string{"generate", "--model", "m.gguf", "--prompt", "x", "--temperature", "-1"}, 1, "--temperature -1: must be >= 0"},
		{[]string{"generate", "--model", "m.gguf", "--prompt", "x", "--temperature", "1x"}, 1, "not a number"},
		{[]string{"generate", "--model", "m.gguf", "--prompt", "x", "--top-p", "2"}, 1, "--top-p 2"},
		{[]string{"migrate"}, 1, "REDIS_URL names it"},
		{[]string{"migrate", "--redis", "redis://127.0.0.1:1/"}, 1, "--redis names it"},
	} {
		r := specgate(t, env, tc.args...)
		if r.code != tc.code || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("specgate %s: have exit %d, stderr %q; want %d and %q", strings.Join(tc.args, " "), r.code, r.stderr, tc.code, tc.want)
		}
		if strings.Contains(r.stderr, "deploy/redis.sh,") || strings.Contains(r.stderr, "tenants: ") {
			t.Errorf("specgate %s: stderr %q", strings.Join(tc.args, " "), r.stderr)
		}
	}
}

func decodeB64(s string) ([]byte, error) { return base64.StdEncoding.DecodeString(s) }

func TestVersion(t *testing.T) {
	r := specgate(t, nil, "version")
	if r.code != 0 || !regexp.MustCompile(`^specgate \S+`).MatchString(r.stdout) {
		t.Fatalf("have exit %d, %q; want specgate VERSION", r.code, r.stdout)
	}
}

// A taken address is reported at once, before the model is looked at.
func TestServeTakenPort(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	start := time.Now()
	r := specgate(t, []string{"REDIS_URL=redis://127.0.0.1:1/"}, "serve", "--addr", ln.Addr().String(), "--model", "/nonexistent.gguf")
	if r.code != 1 || !strings.Contains(r.stderr, "listen on "+ln.Addr().String()) || strings.Contains(r.stderr, "nonexistent") {
		t.Fatalf("have exit %d, stderr %q; want a listen error", r.code, r.stderr)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("took %v to report a taken port", d)
	}
}

// tenant create, then tenant token: the printed URL carries a token that
// the tenant's key verifies, for the user asked for.
func TestTenantToken(t *testing.T) {
	srv := testredis.Start(t)
	env := []string{"REDIS_URL=" + srv.URL()}
	r := specgate(t, env, "tenant", "create", "acme")
	if r.code != 0 {
		t.Fatalf("tenant create: exit %d: %s", r.code, r.stderr)
	}
	var created struct {
		Kid    string `json:"kid"`
		Secret string `json:"secret"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &created); err != nil || created.Secret == "" {
		t.Fatalf("tenant create printed %q (%v); want JSON with kid and secret", r.stdout, err)
	}
	r = specgate(t, env, "tenant", "token", "acme", "--user", "alice", "--ttl", "2h", "--url", "http://chat.example:9000/")
	if r.code != 0 {
		t.Fatalf("tenant token: exit %d: %s", r.code, r.stderr)
	}
	m := regexp.MustCompile(`(?m)^url:\s+http://chat\.example:9000/#token=(\S+)$`).FindStringSubmatch(r.stdout)
	if m == nil {
		t.Fatalf("have %q; want a url line with #token=", r.stdout)
	}
	secret, err := decodeB64(created.Secret)
	if err != nil {
		t.Fatal(err)
	}
	claims := jwt.RegisteredClaims{}
	tok, err := jwt.ParseWithClaims(m[1], &claims, func(tok *jwt.Token) (any, error) {
		if tok.Header["kid"] != created.Kid {
			return nil, errors.New("wrong kid")
		}
		return secret, nil
	}, jwt.WithValidMethods([]string{"HS256"}), jwt.WithAudience("specgate"))
	if err != nil || !tok.Valid || claims.Subject != "alice" {
		t.Fatalf("token %q: %v, sub %q; want a valid token for alice", m[1], err, claims.Subject)
	}
	if ttl := time.Until(claims.ExpiresAt.Time); ttl < 119*time.Minute || ttl > 121*time.Minute {
		t.Errorf("have expiry in %v; want 2h", ttl)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"tenant", "token", "acme"}, "needs --user"},
		{[]string{"tenant", "token", "acme", "--user", "bad user"}, "want 1-128"},
		{[]string{"tenant", "token", "nosuch", "--user", "bob"}, `no tenant "nosuch"`},
		{[]string{"tenant", "token", "--user", "bob", "acme", "extra"}, `unexpected arguments ["extra"]`},
		{[]string{"tenant", "show", "nosuch"}, "specgate tenant: not found"},
		{[]string{"tenant", "frob", "x"}, `specgate tenant: unknown command "frob"`},
	} {
		r := specgate(t, env, tc.args...)
		if r.code != 1 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("specgate %s: have exit %d, stderr %q; want 1 and %q", strings.Join(tc.args, " "), r.code, r.stderr, tc.want)
		}
	}
}

// Every subcommand that talks to Redis opens it through one opener, so each
// takes a cluster or a Sentinel URL (here unreachable: the error names the
// kind it tried) and reports a bad URL without repeating its password.
func TestEverySubcommandTakesEveryRedisURL(t *testing.T) {
	cmds := [][]string{
		{"migrate"},
		{"tenant", "list"},
		{"status"},
		{"serve", "--addr", "127.0.0.1:0", "--role", "gateway"},
		{"loadgen", "--url", "ws://127.0.0.1:1/v1/ws", "--tenants", "1", "--users", "1", "--turns", "1"},
	}
	for _, tc := range []struct{ url, want string }{
		{"redis+cluster://127.0.0.1:1,127.0.0.1:2", "(cluster) at 127.0.0.1:1,127.0.0.1:2"},
		{"redis+sentinel://127.0.0.1:1/mymaster", "(sentinel) at 127.0.0.1:1"},
		{"redis+cluster://:hunter2@127.0.0.1:1/5", "only database 0"},
	} {
		for i, args := range cmds {
			if strings.HasPrefix(tc.url, "redis+sentinel") && i > 1 {
				continue // each waits out a 3s ping timeout; two show it
			}
			t.Run("", func(t *testing.T) {
				// Each waits out its dial timeout: run them side by side.
				t.Parallel()
				r := specgate(t, []string{"REDIS_URL=" + tc.url}, args...)
				if r.code == 0 || !strings.Contains(r.stderr, tc.want) || strings.Contains(r.stderr, "hunter2") {
					t.Errorf("REDIS_URL=%s specgate %s: have exit %d, stderr %q; want an error with %q", tc.url, strings.Join(args, " "), r.code, r.stderr, tc.want)
				}
			})
		}
	}
}
