package tenants

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/specgate/specgate/internal/testredis"
)

func newStore(t *testing.T) *Store {
	t.Helper()
	return NewStore(testredis.Client(t), testredis.Prefix(t), nil)
}

func hsKey(t *testing.T, kid string) Key {
	t.Helper()
	k, err := NewHS256Key(kid)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestKeyValidate(t *testing.T) {
	rsaKey, _ := rsa.GenerateKey(rand.Reader, 2048)
	rsaPEM, _ := EncodePublicKey(&rsaKey.PublicKey)
	edPub, _, _ := ed25519.GenerateKey(rand.Reader)
	edPEM, _ := EncodePublicKey(edPub)
	tests := []struct {
		name string
		key  Key
		ok   bool
	}{
		{"hs256", Key{ID: "a", Alg: HS256, Secret: bytes.Repeat([]byte{1}, 32)}, true},
		{"hs256 short", Key{ID: "a", Alg: HS256, Secret: []byte("short")}, false},
		{"rs256", Key{ID: "a", Alg: RS256, PublicKey: rsaPEM}, true},
		{"eddsa", Key{ID: "a", Alg: EdDSA, PublicKey: edPEM}, true},
		{"rs256 with ed key", Key{ID: "a", Alg: RS256, PublicKey: edPEM}, false},
		{"eddsa with rsa key", Key{ID: "a", Alg: EdDSA, PublicKey: rsaPEM}, false},
		{"none", Key{ID: "a", Alg: "none"}, false},
		{"bad kid", Key{ID: "a b", Alg: HS256, Secret: bytes.Repeat([]byte{1}, 32)}, false},
		{"garbage pem", Key{ID: "a", Alg: RS256, PublicKey: "nope"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.key.Validate()
			if (err == nil) != tt.ok {
				t.Fatalf("have err %v; want ok=%v", err, tt.ok)
			}
		})
	}
}

func TestStoreLifecycle(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	k1 := hsKey(t, "k1")
	tn, err := s.Create(ctx, Tenant{ID: "acme", Priority: Interactive, Keys: []Key{k1}, Limits: Limits{MaxConcurrent: 2}})
	if err != nil {
		t.Fatal(err)
	}
	if tn.Weight != 1 || tn.Name != "acme" || tn.Rev != 1 {
		t.Fatalf("have %+v; want defaults weight 1, name acme, rev 1", tn)
	}
	if _, err := s.Create(ctx, Tenant{ID: "acme"}); !errors.Is(err, ErrExists) {
		t.Fatalf("have %v; want ErrExists", err)
	}
	if _, err := s.Create(ctx, Tenant{ID: "other", Keys: []Key{hsKey(t, "k1")}}); !errors.Is(err, ErrKidTaken) {
		t.Fatalf("have %v; want ErrKidTaken", err)
	}
	got, k, err := s.ByKid(ctx, "k1")
	if err != nil || got.ID != "acme" || !bytes.Equal(k.Secret, k1.Secret) {
		t.Fatalf("have %v, %v, %v; want acme's k1", got, k, err)
	}
	if _, _, err := s.ByKid(ctx, "nope"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("have %v; want ErrNotFound", err)
	}

	if _, err := s.AddKey(ctx, "acme", hsKey(t, "k2")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AddKey(ctx, "acme", hsKey(t, "k3")); !errors.Is(err, ErrTooManyKeys) {
		t.Fatalf("have %v; want ErrTooManyKeys", err)
	}
	tn, retired, err := s.Rotate(ctx, "acme", hsKey(t, "k3"))
	if err != nil {
		t.Fatal(err)
	}
	if len(retired) != 1 || retired[0] != "k1" || len(tn.Keys) != 2 || tn.Keys[0].ID != "k2" || tn.Keys[1].ID != "k3" {
		t.Fatalf("have keys %v retired %v; want [k2 k3] retired [k1]", tn.Keys, retired)
	}
	if _, _, err := s.ByKid(ctx, "k1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("retired kid: have %v; want ErrNotFound", err)
	}
	if _, err := s.RemoveKey(ctx, "acme", "k2"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RemoveKey(ctx, "acme", "k3"); !errors.Is(err, ErrLastKey) {
		t.Fatalf("have %v; want ErrLastKey", err)
	}
	tn, err = s.SetDisabled(ctx, "acme", true)
	if err != nil || !tn.Disabled {
		t.Fatalf("have %v, %v; want disabled", tn, err)
	}
	list, err := s.List(ctx)
	if err != nil || len(list) != 1 || list[0].Redacted().Keys[0].Secret != nil {
		t.Fatalf("have %+v, %v; want one redacted tenant", list, err)
	}
}

func TestUpdateConcurrent(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	if _, err := s.Create(ctx, Tenant{ID: "c", Keys: []Key{hsKey(t, "c1")}}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			_, err := s.Update(ctx, "c", func(t *Tenant) error { t.Limits.MaxContext++; return nil })
			if err != nil && !errors.Is(err, ErrConflict) {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	tn, _ := s.Get(ctx, "c")
	if tn.Rev != int64(1+tn.Limits.MaxContext) {
		t.Fatalf("have rev %d with %d updates; want rev = 1 + updates", tn.Rev, tn.Limits.MaxContext)
	}
}

func TestLeases(t *testing.T) {
	rdb := testredis.Client(t)
	l := NewLimiter(rdb, testredis.Prefix(t))
	ctx := context.Background()
	// Two limiters stand for two gateways over one Redis.
	l2 := NewLimiter(rdb, testredis.Prefix(t))
	ok1, _ := l.Acquire(ctx, "t", LeaseRequests, "a", 2, time.Minute)
	ok2, _ := l2.Acquire(ctx, "t", LeaseRequests, "b", 2, time.Minute)
	ok3, err := l.Acquire(ctx, "t", LeaseRequests, "c", 2, time.Minute)
	if err != nil || !ok1 || !ok2 || ok3 {
		t.Fatalf("have %v %v %v (%v); want true true false", ok1, ok2, ok3, err)
	}
	if ok, _ := l.Acquire(ctx, "t", LeaseRequests, "a", 2, time.Minute); !ok {
		t.Fatalf("re-acquire by holder: have false; want true")
	}
	if err := l2.Release(ctx, "t", LeaseRequests, "b"); err != nil {
		t.Fatal(err)
	}
	if ok, _ := l.Acquire(ctx, "t", LeaseRequests, "c", 2, time.Minute); !ok {
		t.Fatalf("after release: have false; want true")
	}
	// An expired lease frees its slot without a release.
	if ok, _ := l.Acquire(ctx, "t", LeaseConnections, "x", 1, 30*time.Millisecond); !ok {
		t.Fatal("first connection refused")
	}
	time.Sleep(60 * time.Millisecond)
	if ok, _ := l.Acquire(ctx, "t", LeaseConnections, "y", 1, time.Minute); !ok {
		t.Fatalf("after expiry: have false; want true")
	}
	if ok, _ := l.Acquire(ctx, "t", LeaseConnections, "z", 0, time.Minute); !ok {
		t.Fatalf("no cap: have false; want true")
	}
}

func TestTokensPerMinute(t *testing.T) {
	l := NewLimiter(testredis.Client(t), testredis.Prefix(t))
	ctx := context.Background()
	steps := []struct {
		charge int
		ask    int
		want   bool
	}{
		{0, 0, true},
		{60, 40, true}, // 60 + 40 = 100 fits
		{0, 1, false},  // 100 used
		{0, 0, false},  // no room at all
	}
	for i, st := range steps {
		if err := l.ChargeTokens(ctx, "t", st.charge, 100); err != nil {
			t.Fatal(err)
		}
		ok, err := l.AllowTokens(ctx, "t", st.ask, 100)
		if err != nil || ok != st.want {
			t.Fatalf("step %d: have %v (%v); want %v", i, ok, err, st.want)
		}
	}
}

func TestCommand(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	run := func(args ...string) string {
		t.Helper()
		var out bytes.Buffer
		if err := Command(ctx, s, args, &out); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		return out.String()
	}
	var res KeyResult
	if err := json.Unmarshal([]byte(run("create", "acme", "-priority", "batch", "-kid", "a1", "-origin", "https://a.example", "-max-concurrent", "3")), &res); err != nil {
		t.Fatal(err)
	}
	if len(res.Secret) != 32 || res.Tenant.Priority != Batch || res.Tenant.Limits.MaxConcurrent != 3 || res.Tenant.Keys[0].Secret != nil {
		t.Fatalf("have %+v; want a printed 32-byte secret and a redacted record", res)
	}
	run("rotate", "acme", "-kid", "a2")
	out := run("show", "acme")
	if !strings.Contains(out, `"a2"`) || strings.Contains(out, `"secret"`) {
		t.Fatalf("show: have %s; want a2 and no secret", out)
	}
	run("disable", "acme")
	if !strings.Contains(run("list"), `"disabled": true`) {
		t.Fatal("list: want disabled tenant")
	}
	for _, bad := range [][]string{nil, {"frob"}, {"show"}, {"create", "x", "-bogus"}} {
		if err := Command(ctx, s, bad, &bytes.Buffer{}); !errors.Is(err, ErrUsage) {
			t.Errorf("%q: have %v; want ErrUsage", bad, err)
		}
	}
}

func TestAdminHandler(t *testing.T) {
	s := newStore(t)
	h := AdminHandler(s, "admintoken")
	do := func(method, path, token, body string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(method, path, strings.NewReader(body))
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	tests := []struct {
		name, method, path, token, body string
		want                            int
	}{
		{"no token", "GET", "/admin/v1/tenants", "", "", http.StatusUnauthorized},
		{"wrong token", "GET", "/admin/v1/tenants", "nope", "", http.StatusUnauthorized},
		{"create", "POST", "/admin/v1/tenants", "admintoken", `{"id":"acme","key":{"kid":"k1"}}`, http.StatusCreated},
		{"create again", "POST", "/admin/v1/tenants", "admintoken", `{"id":"acme","key":{"kid":"k9"}}`, http.StatusConflict},
		{"bad body", "POST", "/admin/v1/tenants", "admintoken", `{"id":`, http.StatusBadRequest},
		{"show", "GET", "/admin/v1/tenants/acme", "admintoken", "", http.StatusOK},
		{"missing", "GET", "/admin/v1/tenants/nope", "admintoken", "", http.StatusNotFound},
		{"patch", "PATCH", "/admin/v1/tenants/acme", "admintoken", `{"weight":3}`, http.StatusOK},
		{"rotate", "POST", "/admin/v1/tenants/acme/rotate", "admintoken", `{"kid":"k2"}`, http.StatusOK},
		{"disable", "POST", "/admin/v1/tenants/acme/disable", "admintoken", "", http.StatusOK},
		{"list", "GET", "/admin/v1/tenants", "admintoken", "", http.StatusOK},
	}
	for _, tt := range tests {
		rec := do(tt.method, tt.path, tt.token, tt.body)
		if rec.Code != tt.want {
			t.Errorf("%s: have %d %s; want %d", tt.name, rec.Code, rec.Body, tt.want)
		}
	}
	if _, err := NewStore(s.rdb, s.Prefix(), nil).Get(context.Background(), "acme"); err != nil {
		t.Fatal(err)
	}
	empty := AdminHandler(s, "")
	rec := httptest.NewRecorder()
	req := httptest.NewRequest("GET", "/admin/v1/tenants", nil)
	req.Header.Set("Authorization", "Bearer ")
	empty.ServeHTTP(rec, req)
	if rec.Code != http.StatusUnauthorized {
		t.Fatalf("empty admin token: have %d; want 401", rec.Code)
	}
}
