package migrations

import (
	"context"
	"strings"
)

// tenantIndex builds the tenant id set from the tenant records, for
// keyspaces written before the set existed. It works in the layout of its
// time (tenant:<id>, tenants); 0003 moves both. Idempotent: SADD of
// present ids.
func tenantIndex(ctx context.Context, e *Env) error {
	p := e.ks.Prefix()
	return e.Scan(ctx, globEscape(p)+"tenant:*", func(ctx context.Context, key string) error {
		typ, err := e.rdb.Type(ctx, key).Result()
		if err != nil || typ != "string" {
			return err
		}
		return e.rdb.SAdd(ctx, p+"tenants", strings.TrimPrefix(key, p+"tenant:")).Err()
	})
}

func globEscape(s string) string {
	return strings.NewReplacer(`\`, `\\`, "*", `\*`, "?", `\?`, "[", `\[`, "]", `\]`).Replace(s)
}
