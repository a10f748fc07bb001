// Package tenants keeps tenant records in Redis: identity, scheduling class
// and weight, caps, signing keys by kid, and the rate-limit counters that
// hold across gateway processes. It knows nothing of WebSocket.
//
// Its keys are internal/keyspace's: the tenant directory (records, the id
// set and the kid index) shares one hash slot, so one script keeps a kid
// unique across tenants; each tenant's rate-limit keys share another.
package tenants

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/specgate/specgate/engine/specmode"
	"github.com/specgate/specgate/internal/keyspace"
)

// Errors, checked with errors.Is.
var (
	ErrNotFound     = errors.New("tenants: not found")
	ErrExists       = errors.New("tenants: already exists")
	ErrKidTaken     = errors.New("tenants: kid belongs to another tenant")
	ErrTooManyKeys  = errors.New("tenants: too many active keys (rotate instead, or remove one)")
	ErrConflict     = errors.New("tenants: concurrent update, try again")
	ErrInvalid      = errors.New("tenants: invalid")
	ErrLastKey      = errors.New("tenants: cannot remove the last key")
	ErrUnknownClass = errors.New("tenants: unknown priority class (want interactive, standard or batch)")
)

// MaxActiveKeys is how many signing keys a tenant may hold at once: the
// current one and the one being rotated out, so tokens signed with either
// verify during a rotation.
const MaxActiveKeys = 2

// Priority classes, as the engine names them.
const (
	Interactive = "interactive"
	Standard    = "standard"
	Batch       = "batch"
)

// Limits are a tenant's caps. Zero means no cap of the tenant's own (the
// engine's defaults still apply where it has them).
type Limits struct {
	// MaxConnections caps open WebSocket connections, across gateways.
	MaxConnections int `json:"max_connections"`
	// MaxConcurrent caps requests generating at once, across gateways.
	MaxConcurrent int `json:"max_concurrent"`
	// TokensPerMinute caps prompt + completion tokens in a sliding minute.
	TokensPerMinute int `json:"tokens_per_minute"`
	// MaxContext caps prompt + max_tokens of one request, in tokens.
	MaxContext int `json:"max_context"`
	// Speculate is which speculative decoding the tenant's requests may
	// use, a mode of package specmode: Auto (whatever the server runs; ""
	// reads as auto), Off (plain decoding), NGram or Draft (only that
	// drafter; plain decoding on a server that runs the other). A request
	// may narrow it, never widen it.
	Speculate string `json:"speculate,omitempty"`
}

// Tenant is one customer's record.
type Tenant struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	// Priority is the scheduling class (interactive, standard, batch); a
	// request may lower it, never raise it. "" reads as standard.
	Priority string `json:"priority"`
	// Weight is the fair-share weight inside the class; 0 reads as 1.
	Weight float64 `json:"weight"`
	Limits Limits  `json:"limits"`
	// Audience, when set, is the JWT aud this tenant's tokens must carry
	// instead of the gateway's default.
	Audience string `json:"audience,omitempty"`
	// Origins lists the browser origins (scheme://host[:port]) allowed to
	// connect for this tenant.
	Origins []string `json:"origins,omitempty"`
	// Keys are the active signing keys, oldest first, at most MaxActiveKeys.
	Keys     []Key     `json:"keys"`
	Disabled bool      `json:"disabled"`
	Created  time.Time `json:"created"`
	Updated  time.Time `json:"updated"`
	// Rev counts updates; a write with a stale Rev fails with ErrConflict.
	Rev int64 `json:"rev"`
}

// Key returns the active key named kid.
func (t *Tenant) Key(kid string) (*Key, bool) {
	for i := range t.Keys {
		if t.Keys[i].ID == kid {
			return &t.Keys[i], true
		}
	}
	return nil, false
}

// Redacted returns a copy without HS256 secrets, for listing and display.
func (t Tenant) Redacted() Tenant {
	t.Keys = slices.Clone(t.Keys)
	for i := range t.Keys {
		if len(t.Keys[i].Secret) > 0 {
			t.Keys[i].Secret = nil
			t.Keys[i].Redacted = true
		}
	}
	return t
}

// AllowsOrigin says whether a browser at origin may connect for t.
func (t *Tenant) AllowsOrigin(origin string) bool {
	return slices.Contains(t.Origins, origin) || slices.Contains(t.Origins, "*")
}

var idPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

// Validate fills defaults (priority standard, weight 1, speculate auto) and
// checks fields.
func (t *Tenant) Validate() error {
	if !idPattern.MatchString(t.ID) {
		return fmt.Errorf("%w: tenant id %q (want 1-63 of a-z 0-9 _ -, starting with a letter or digit)", ErrInvalid, t.ID)
	}
	if t.Name == "" {
		t.Name = t.ID
	}
	switch t.Priority {
	case "":
		t.Priority = Standard
	case Interactive, Standard, Batch:
	default:
		return fmt.Errorf("%w: %q", ErrUnknownClass, t.Priority)
	}
	if t.Weight == 0 {
		t.Weight = 1
	}
	if t.Weight < 0 || t.Weight > 1000 {
		return fmt.Errorf("%w: weight %v (want 0 < weight <= 1000)", ErrInvalid, t.Weight)
	}
	l := t.Limits
	if l.MaxConnections < 0 || l.MaxConcurrent < 0 || l.TokensPerMinute < 0 || l.MaxContext < 0 {
		return fmt.Errorf("%w: negative limit in %+v", ErrInvalid, l)
	}
	if err := specmode.Check(l.Speculate); err != nil {
		return fmt.Errorf("%w: speculate: %w", ErrInvalid, err)
	}
	if l.Speculate == "" {
		t.Limits.Speculate = specmode.Auto
	}
	if len(t.Keys) > MaxActiveKeys {
		return ErrTooManyKeys
	}
	for i := range t.Keys {
		if err := t.Keys[i].Validate(); err != nil {
			return err
		}
	}
	return nil
}

// Store reads and writes tenant records. Safe for concurrent use.
type Store struct {
	rdb redis.UniversalClient
	ks  keyspace.Space
	now func() time.Time
}

// NewStore returns a store over rdb with every key under prefix ("" for
// production; tests pass a private prefix). now may be nil (time.Now).
func NewStore(rdb redis.UniversalClient, prefix string, now func() time.Time) *Store {
	if now == nil {
		now = time.Now
	}
	return &Store{rdb: rdb, ks: keyspace.New(prefix), now: now}
}

// Prefix is the key prefix the store was made with.
func (s *Store) Prefix() string { return s.ks.Prefix() }

func (s *Store) tenantKey(id string) string { return s.ks.Tenant(id) }
func (s *Store) kidKey(kid string) string   { return s.ks.Kid(kid) }
func (s *Store) indexKey() string           { return s.ks.TenantIDs() }

// putScript writes a record if the stored rev is the expected one, keeping
// the kid index in step: it refuses a kid that another tenant owns. The
// kid keys it builds from ARGV[4] share the slot of KEYS (the directory's
// tag is in the kid prefix), so the script stays on one slot.
//
// KEYS: tenant key, index key. ARGV: id, expected rev (-1: must not exist),
// json, kid prefix, n added kids, added kids..., removed kids...
var putScript = redis.NewScript(`
local cur = redis.call('GET', KEYS[1])
local want = tonumber(ARGV[2])
if want < 0 then
  if cur then return redis.error_reply('EXISTS') end
else
  if not cur then return redis.error_reply('NOTFOUND') end
  if cjson.decode(cur).rev ~= want then return redis.error_reply('CONFLICT') end
end
local n = tonumber(ARGV[5])
for i = 6, 5 + n do
  local owner = redis.call('GET', ARGV[4] .. ARGV[i])
  if owner and owner ~= ARGV[1] then return redis.error_reply('KIDTAKEN ' .. ARGV[i]) end
end
for i = 6, 5 + n do redis.call('SET', ARGV[4] .. ARGV[i], ARGV[1]) end
for i = 6 + n, #ARGV do
  if redis.call('GET', ARGV[4] .. ARGV[i]) == ARGV[1] then redis.call('DEL', ARGV[4] .. ARGV[i]) end
end
redis.call('SET', KEYS[1], ARGV[3])
redis.call('SADD', KEYS[2], ARGV[1])
return 1
`)

// Create stores a new tenant. It fills defaults and fails with ErrExists
// when the id is taken, ErrKidTaken when a key's kid is.
func (s *Store) Create(ctx context.Context, t Tenant) (*Tenant, error) {
	if err := t.Validate(); err != nil {
		return nil, err
	}
	now := s.now().UTC()
	t.Created, t.Updated, t.Rev = now, now, 1
	for i := range t.Keys {
		if t.Keys[i].Created.IsZero() {
			t.Keys[i].Created = now
		}
	}
	if err := s.put(ctx, &t, -1, nil); err != nil {
		return nil, err
	}
	return &t, nil
}

func (s *Store) put(ctx context.Context, t *Tenant, wantRev int64, removed []string) error {
	b, err := json.Marshal(t)
	if err != nil {
		return fmt.Errorf("tenants: encode %s: %w", t.ID, err)
	}
	args := []any{t.ID, wantRev, string(b), s.ks.KidPrefix(), len(t.Keys)}
	for _, k := range t.Keys {
		args = append(args, k.ID)
	}
	for _, kid := range removed {
		args = append(args, kid)
	}
	err = putScript.Run(ctx, s.rdb, []string{s.tenantKey(t.ID), s.indexKey()}, args...).Err()
	if err == nil {
		return nil
	}
	// Redis 7 prefixes a script's error reply with "ERR "; older ones do not.
	msg := strings.TrimPrefix(err.Error(), "ERR ")
	switch {
	case msg == "EXISTS":
		return fmt.Errorf("%w: tenant %s", ErrExists, t.ID)
	case msg == "NOTFOUND":
		return fmt.Errorf("%w: tenant %s", ErrNotFound, t.ID)
	case msg == "CONFLICT":
		return fmt.Errorf("%w: tenant %s", ErrConflict, t.ID)
	case strings.HasPrefix(msg, "KIDTAKEN "):
		return fmt.Errorf("%w: %s", ErrKidTaken, strings.TrimPrefix(msg, "KIDTAKEN "))
	}
	return fmt.Errorf("tenants: write %s: %w", t.ID, err)
}

// Get reads a tenant by id; ErrNotFound when there is none.
func (s *Store) Get(ctx context.Context, id string) (*Tenant, error) {
	b, err := s.rdb.Get(ctx, s.tenantKey(id)).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("%w: tenant %s", ErrNotFound, id)
	}
	if err != nil {
		return nil, fmt.Errorf("tenants: read %s: %w", id, err)
	}
	var t Tenant
	if err := json.Unmarshal(b, &t); err != nil {
		return nil, fmt.Errorf("tenants: decode %s: %w", id, err)
	}
	return &t, nil
}

// ByKid finds the tenant that owns signing key kid and that key; ErrNotFound
// when no tenant has it.
func (s *Store) ByKid(ctx context.Context, kid string) (*Tenant, *Key, error) {
	id, err := s.rdb.Get(ctx, s.kidKey(kid)).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil, fmt.Errorf("%w: kid %q", ErrNotFound, kid)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("tenants: read kid %q: %w", kid, err)
	}
	t, err := s.Get(ctx, id)
	if err != nil {
		return nil, nil, err
	}
	k, ok := t.Key(kid)
	if !ok {
		// The index is written with the record; a miss means a removal
		// raced this read. Either way the kid is not active.
		return nil, nil, fmt.Errorf("%w: kid %q", ErrNotFound, kid)
	}
	return t, k, nil
}

// List returns every tenant, sorted by id.
func (s *Store) List(ctx context.Context) ([]Tenant, error) {
	ids, err := s.rdb.SMembers(ctx, s.indexKey()).Result()
	if err != nil {
		return nil, fmt.Errorf("tenants: list: %w", err)
	}
	sort.Strings(ids)
	out := make([]Tenant, 0, len(ids))
	for _, id := range ids {
		t, err := s.Get(ctx, id)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, *t)
	}
	return out, nil
}

// Update reads tenant id, applies fn and writes the result, retrying a few
// times when another writer got there first. fn may be called more than
// once and must not keep t.
func (s *Store) Update(ctx context.Context, id string, fn func(t *Tenant) error) (*Tenant, error) {
	for range 5 {
		t, err := s.Get(ctx, id)
		if err != nil {
			return nil, err
		}
		old := map[string]bool{}
		for _, k := range t.Keys {
			old[k.ID] = true
		}
		rev := t.Rev
		if err := fn(t); err != nil {
			return nil, err
		}
		if err := t.Validate(); err != nil {
			return nil, err
		}
		t.ID, t.Rev, t.Updated = id, rev+1, s.now().UTC()
		for i := range t.Keys {
			delete(old, t.Keys[i].ID)
			if t.Keys[i].Created.IsZero() {
				t.Keys[i].Created = t.Updated
			}
		}
		removed := make([]string, 0, len(old))
		for kid := range old {
			removed = append(removed, kid)
		}
		err = s.put(ctx, t, rev, removed)
		if errors.Is(err, ErrConflict) {
			continue
		}
		if err != nil {
			return nil, err
		}
		return t, nil
	}
	return nil, fmt.Errorf("%w: tenant %s", ErrConflict, id)
}

// AddKey adds a signing key; ErrTooManyKeys when the tenant already holds
// MaxActiveKeys (use Rotate).
func (s *Store) AddKey(ctx context.Context, id string, k Key) (*Tenant, error) {
	if err := k.Validate(); err != nil {
		return nil, err
	}
	return s.Update(ctx, id, func(t *Tenant) error {
		if _, ok := t.Key(k.ID); ok {
			return fmt.Errorf("%w: kid %q", ErrKidTaken, k.ID)
		}
		if len(t.Keys) >= MaxActiveKeys {
			return ErrTooManyKeys
		}
		t.Keys = append(t.Keys, k)
		return nil
	})
}

// Rotate adds k as the newest key and retires every older key but the most
// recent one, so tokens signed with the previous key keep verifying until
// the next rotation. It returns the retired kids.
func (s *Store) Rotate(ctx context.Context, id string, k Key) (*Tenant, []string, error) {
	if err := k.Validate(); err != nil {
		return nil, nil, err
	}
	var retired []string
	t, err := s.Update(ctx, id, func(t *Tenant) error {
		retired = retired[:0]
		if _, ok := t.Key(k.ID); ok {
			return fmt.Errorf("%w: kid %q", ErrKidTaken, k.ID)
		}
		keep := t.Keys
		if n := len(keep); n > MaxActiveKeys-1 {
			for _, old := range keep[:n-(MaxActiveKeys-1)] {
				retired = append(retired, old.ID)
			}
			keep = keep[n-(MaxActiveKeys-1):]
		}
		t.Keys = append(slices.Clone(keep), k)
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	return t, retired, nil
}

// RemoveKey retires key kid; the last key cannot be removed (disable the
// tenant instead).
func (s *Store) RemoveKey(ctx context.Context, id, kid string) (*Tenant, error) {
	return s.Update(ctx, id, func(t *Tenant) error {
		i := slices.IndexFunc(t.Keys, func(k Key) bool { return k.ID == kid })
		if i < 0 {
			return fmt.Errorf("%w: kid %q", ErrNotFound, kid)
		}
		if len(t.Keys) == 1 {
			return ErrLastKey
		}
		t.Keys = slices.Delete(t.Keys, i, i+1)
		return nil
	})
}

// SetDisabled disables (or re-enables) a tenant. A disabled tenant's tokens
// are refused at connect; its open connections are refused at their next
// request.
func (s *Store) SetDisabled(ctx context.Context, id string, disabled bool) (*Tenant, error) {
	return s.Update(ctx, id, func(t *Tenant) error {
		t.Disabled = disabled
		return nil
	})
}
