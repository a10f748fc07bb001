package migrations

import (
	"context"
	"strconv"
)

// initKeyspace marks the keyspace as specgate's, with the time it was first
// migrated. Idempotent: SETNX keeps the first time.
func initKeyspace(ctx context.Context, e *Env) error {
	now, err := e.rdb.Time(ctx).Result()
	if err != nil {
		return err
	}
	return e.rdb.SetNX(ctx, e.ks.SchemaCreated(), strconv.FormatInt(now.Unix(), 10), 0).Err()
}
