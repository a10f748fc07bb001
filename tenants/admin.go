package tenants

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// KeySpec asks for a signing key: an HS256 key without a secret gets a
// fresh random one, an empty kid a random one.
type KeySpec struct {
	Kid       string `json:"kid,omitempty"`
	Alg       string `json:"alg"`
	PublicKey string `json:"public_key,omitempty"` // PEM, RS256 and EdDSA
	Secret    []byte `json:"secret,omitempty"`     // HS256; base64 in JSON
}

// Key builds the key. generated says the secret was made here and must be
// shown to the operator once (it is never shown again).
func (s KeySpec) Key(tenantID string) (k Key, generated bool, err error) {
	if s.Alg == "" {
		s.Alg = HS256
	}
	if s.Kid == "" {
		s.Kid = NewKid(tenantID)
	}
	if s.Alg == HS256 && len(s.Secret) == 0 {
		k, err = NewHS256Key(s.Kid)
		return k, true, err
	}
	k = Key{ID: s.Kid, Alg: s.Alg, PublicKey: s.PublicKey, Secret: s.Secret}
	return k, false, k.Validate()
}

// CreateSpec is the body of a create request.
type CreateSpec struct {
	ID       string   `json:"id"`
	Name     string   `json:"name,omitempty"`
	Priority string   `json:"priority,omitempty"`
	Weight   float64  `json:"weight,omitempty"`
	Limits   Limits   `json:"limits"`
	Audience string   `json:"audience,omitempty"`
	Origins  []string `json:"origins,omitempty"`
	Key      KeySpec  `json:"key"`
}

// KeyResult is what creating a tenant or adding a key answers: the record
// without secrets, and the new key's secret when it was generated.
type KeyResult struct {
	Tenant  Tenant   `json:"tenant"`
	Kid     string   `json:"kid,omitempty"`
	Secret  []byte   `json:"secret,omitempty"`
	Retired []string `json:"retired,omitempty"`
}

// CreateFromSpec creates a tenant with its first key.
func (s *Store) CreateFromSpec(ctx context.Context, spec CreateSpec) (*KeyResult, error) {
	k, gen, err := spec.Key.Key(spec.ID)
	if err != nil {
		return nil, err
	}
	t, err := s.Create(ctx, Tenant{
		ID: spec.ID, Name: spec.Name, Priority: spec.Priority, Weight: spec.Weight,
		Limits: spec.Limits, Audience: spec.Audience, Origins: spec.Origins, Keys: []Key{k},
	})
	if err != nil {
		return nil, err
	}
	return keyResult(t, k, gen, nil), nil
}

func keyResult(t *Tenant, k Key, generated bool, retired []string) *KeyResult {
	res := &KeyResult{Tenant: t.Redacted(), Kid: k.ID, Retired: retired}
	if generated {
		res.Secret = k.Secret
	}
	return res
}

// AdminHandler serves the admin API, every route guarded by
// "Authorization: Bearer <token>" (compared in constant time). An empty
// token refuses every request, so an unconfigured API is closed.
//
//	GET    /admin/v1/tenants                 list (no secrets)
//	POST   /admin/v1/tenants                 create (CreateSpec) → KeyResult
//	GET    /admin/v1/tenants/{id}            show
//	PATCH  /admin/v1/tenants/{id}            update name, priority, weight, limits, audience, origins
//	POST   /admin/v1/tenants/{id}/keys       add a key (KeySpec) → KeyResult
//	POST   /admin/v1/tenants/{id}/rotate     rotate to a new key (KeySpec) → KeyResult
//	DELETE /admin/v1/tenants/{id}/keys/{kid} remove a key
//	POST   /admin/v1/tenants/{id}/disable    disable
//	POST   /admin/v1/tenants/{id}/enable     enable
//
// PATCH's "limits" replaces the whole object, speculation policy
// ("speculate": auto, off, ngram, draft; absent is auto) included.
//
// Errors are {"error":{"code":…,"message":…}} with codes bad_request,
// unauthorized, not_found, conflict, internal.
func AdminHandler(s *Store, token string) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /admin/v1/tenants", func(w http.ResponseWriter, r *http.Request) {
		ts, err := s.List(r.Context())
		if err != nil {
			adminError(w, err)
			return
		}
		for i := range ts {
			ts[i] = ts[i].Redacted()
		}
		writeJSON(w, http.StatusOK, map[string]any{"tenants": ts})
	})
	mux.HandleFunc("POST /admin/v1/tenants", func(w http.ResponseWriter, r *http.Request) {
		var spec CreateSpec
		if !readJSON(w, r, &spec) {
			return
		}
		res, err := s.CreateFromSpec(r.Context(), spec)
		if err != nil {
			adminError(w, err)
			return
		}
		writeJSON(w, http.StatusCreated, res)
	})
	mux.HandleFunc("GET /admin/v1/tenants/{id}", func(w http.ResponseWriter, r *http.Request) {
		t, err := s.Get(r.Context(), r.PathValue("id"))
		if err != nil {
			adminError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, t.Redacted())
	})
	mux.HandleFunc("PATCH /admin/v1/tenants/{id}", func(w http.ResponseWriter, r *http.Request) {
		var p struct {
			Name     *string   `json:"name"`
			Priority *string   `json:"priority"`
			Weight   *float64  `json:"weight"`
			Limits   *Limits   `json:"limits"`
			Audience *string   `json:"audience"`
			Origins  *[]string `json:"origins"`
		}
		if !readJSON(w, r, &p) {
			return
		}
		t, err := s.Update(r.Context(), r.PathValue("id"), func(t *Tenant) error {
			setIf(&t.Name, p.Name)
			setIf(&t.Priority, p.Priority)
			setIf(&t.Weight, p.Weight)
			setIf(&t.Limits, p.Limits)
			setIf(&t.Audience, p.Audience)
			setIf(&t.Origins, p.Origins)
			return nil
		})
		if err != nil {
			adminError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, t.Redacted())
	})
	keyRoute := func(rotate bool) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			var spec KeySpec
			if !readJSON(w, r, &spec) {
				return
			}
			id := r.PathValue("id")
			k, gen, err := spec.Key(id)
			if err != nil {
				adminError(w, err)
				return
			}
			var t *Tenant
			var retired []string
			if rotate {
				t, retired, err = s.Rotate(r.Context(), id, k)
			} else {
				t, err = s.AddKey(r.Context(), id, k)
			}
			if err != nil {
				adminError(w, err)
				return
			}
			writeJSON(w, http.StatusOK, keyResult(t, k, gen, retired))
		}
	}
	mux.HandleFunc("POST /admin/v1/tenants/{id}/keys", keyRoute(false))
	mux.HandleFunc("POST /admin/v1/tenants/{id}/rotate", keyRoute(true))
	mux.HandleFunc("DELETE /admin/v1/tenants/{id}/keys/{kid}", func(w http.ResponseWriter, r *http.Request) {
		t, err := s.RemoveKey(r.Context(), r.PathValue("id"), r.PathValue("kid"))
		if err != nil {
			adminError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, t.Redacted())
	})
	for _, action := range []string{"disable", "enable"} {
		mux.HandleFunc("POST /admin/v1/tenants/{id}/"+action, func(w http.ResponseWriter, r *http.Request) {
			t, err := s.SetDisabled(r.Context(), r.PathValue("id"), action == "disable")
			if err != nil {
				adminError(w, err)
				return
			}
			writeJSON(w, http.StatusOK, t.Redacted())
		})
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if token == "" || !ok || subtle.ConstantTimeCompare([]byte(got), []byte(token)) != 1 {
			writeJSON(w, http.StatusUnauthorized, errBody("unauthorized", "admin token required"))
			return
		}
		mux.ServeHTTP(w, r)
	})
}

func setIf[T any](dst *T, src *T) {
	if src != nil {
		*dst = *src
	}
}

func errBody(code, msg string) map[string]any {
	return map[string]any{"error": map[string]string{"code": code, "message": msg}}
}

func adminError(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, ErrNotFound):
		writeJSON(w, http.StatusNotFound, errBody("not_found", err.Error()))
	case errors.Is(err, ErrExists), errors.Is(err, ErrKidTaken), errors.Is(err, ErrConflict),
		errors.Is(err, ErrTooManyKeys), errors.Is(err, ErrLastKey):
		writeJSON(w, http.StatusConflict, errBody("conflict", err.Error()))
	case errors.Is(err, ErrInvalid), errors.Is(err, ErrUnknownClass):
		writeJSON(w, http.StatusBadRequest, errBody("bad_request", err.Error()))
	default:
		writeJSON(w, http.StatusInternalServerError, errBody("internal", err.Error()))
	}
}

func readJSON(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(io.LimitReader(r.Body, 1<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		writeJSON(w, http.StatusBadRequest, errBody("bad_request", fmt.Sprintf("body: %v", err)))
		return false
	}
	return true
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
