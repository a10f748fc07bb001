package tenants

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/specgate/specgate/engine/specmode"
)

// TestSpeculatePolicy: the policy is stored with the limits, "" reads as
// auto, a bad mode is refused by the store and by the admin API (400),
// and a record written before the field existed reads as auto.
func TestSpeculatePolicy(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	for _, tc := range []struct{ in, want string }{
		{"", specmode.Auto}, {specmode.Auto, specmode.Auto}, {specmode.Off, specmode.Off}, {specmode.NGram, specmode.NGram}, {specmode.Draft, specmode.Draft},
	} {
		tn := Tenant{ID: "t-" + tc.want + tc.in, Keys: []Key{hsKey(t, "k-"+tc.want+tc.in)}, Limits: Limits{Speculate: tc.in}}
		got, err := s.Create(ctx, tn)
		if err != nil || got.Limits.Speculate != tc.want {
			t.Errorf("create with %q: have %+v, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	if _, err := s.Create(ctx, Tenant{ID: "bad", Keys: []Key{hsKey(t, "kb")}, Limits: Limits{Speculate: "eagle"}}); !errors.Is(err, ErrInvalid) {
		t.Errorf("have %v; want ErrInvalid", err)
	}
	// A record from before the field: its JSON has no speculate.
	if err := s.rdb.Set(ctx, s.tenantKey("old"), `{"id":"old","priority":"standard","weight":1,"limits":{"max_concurrent":2},"keys":[],"rev":1}`, 0).Err(); err != nil {
		t.Fatal(err)
	}
	old, err := s.Update(ctx, "old", func(*Tenant) error { return nil })
	if err != nil || old.Limits.Speculate != specmode.Auto || old.Limits.MaxConcurrent != 2 {
		t.Errorf("have %+v, %v; want an old record to read as auto", old, err)
	}

	h := AdminHandler(s, "tok")
	patch := func(body string) (int, Tenant) {
		req := httptest.NewRequest("PATCH", "/admin/v1/tenants/t-off"+specmode.Off, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer tok")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		var out Tenant
		_ = json.Unmarshal(rec.Body.Bytes(), &out)
		return rec.Code, out
	}
	if code, tn := patch(`{"limits":{"speculate":"ngram"}}`); code != http.StatusOK || tn.Limits.Speculate != specmode.NGram {
		t.Errorf("PATCH speculate ngram: have %d %+v", code, tn)
	}
	if code, _ := patch(`{"limits":{"speculate":"sometimes"}}`); code != http.StatusBadRequest {
		t.Errorf("PATCH speculate sometimes: have %d; want 400", code)
	}
}
