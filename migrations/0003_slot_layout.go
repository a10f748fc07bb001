package migrations

import (
	"context"
	"strings"
)

// slotLayout moves every long-lived key of the first layout to its hash
// tagged name (internal/keyspace), so that what one script touches shares
// a slot and the data can live on a Redis Cluster:
//
//	sess:<sid><rest>          → sess:{s:<sid>}<rest>   (record, msgs, req records and logs)
//	idx:<tenant>:<user>       → idx:{u:<tenant>:<user>}
//	tenant:<id>               → {tenants}:tenant:<id>
//	tenants                   → {tenants}:ids
//	kid:<kid>                 → {tenants}:kid:<kid>
//	rl:<tenant>:<kind>        → rl:{t:<tenant>}:<kind>
//
// Values and TTLs are kept. The scale-out keys (cl:*) are not moved: they
// live minutes and belong to running processes, so gateways and engines
// are stopped (drained) before this migration and start on the new names.
// Idempotent: keys already in the new layout do not match the old
// patterns, and a key moved is gone from its old name.
func slotLayout(ctx context.Context, e *Env) error {
	p := e.ks.Prefix()
	g := globEscape(p)
	moves := []struct {
		glob string
		to   func(rest string) (string, bool) // rest: the key after P and the glob's fixed part
	}{
		{"sess:", func(rest string) (string, bool) {
			sid, tail, _ := strings.Cut(rest, ":")
			if tail != "" {
				tail = ":" + tail
			}
			return e.ks.Session(sid) + tail, sid != ""
		}},
		{"idx:", func(rest string) (string, bool) {
			tenant, user, ok := strings.Cut(rest, ":")
			return e.ks.UserIndex(tenant, user), ok
		}},
		{"tenant:", func(rest string) (string, bool) { return e.ks.Tenant(rest), rest != "" }},
		{"kid:", func(rest string) (string, bool) { return e.ks.Kid(rest), rest != "" }},
		{"rl:", func(rest string) (string, bool) {
			tenant, kind, ok := strings.Cut(rest, ":")
			return e.ks.Lease(tenant, kind), ok
		}},
	}
	for _, m := range moves {
		err := e.Scan(ctx, g+m.glob+"*", func(ctx context.Context, key string) error {
			rest := strings.TrimPrefix(key, p+m.glob)
			if strings.HasPrefix(rest, "{") {
				return nil // already in the new layout
			}
			to, ok := m.to(rest)
			if !ok {
				return nil // not a key of ours
			}
			return e.Move(ctx, key, to)
		})
		if err != nil {
			return err
		}
	}
	return e.Move(ctx, p+"tenants", e.ks.TenantIDs())
}
