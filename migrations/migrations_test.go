package migrations

import (
	"context"
	"errors"
	"strconv"
	"testing"

	"github.com/specgate/specgate/internal/testredis"
)

func TestApply(t *testing.T) {
	rdb := testredis.Client(t)
	p := testredis.Prefix(t)
	ctx := context.Background()
	// A record written before the tenant index existed.
	rdb.Set(ctx, p+"tenant:old", `{"id":"old"}`, 0)

	if err := Check(ctx, rdb, p); !errors.Is(err, ErrBehind) {
		t.Fatalf("fresh: have %v; want ErrBehind", err)
	}
	from, to, err := Apply(ctx, rdb, p, t.Logf)
	if err != nil || from != 0 || to != Latest() {
		t.Fatalf("have %d→%d, %v; want 0→%d", from, to, err, Latest())
	}
	if ok, _ := rdb.SIsMember(ctx, p+"tenants", "old").Result(); !ok {
		t.Fatalf("have tenant index without old; want it backfilled")
	}
	from, to, err = Apply(ctx, rdb, p, nil)
	if err != nil || from != Latest() || to != Latest() {
		t.Fatalf("second apply: have %d→%d, %v; want no-op", from, to, err)
	}
	if err := Check(ctx, rdb, p); err != nil {
		t.Fatalf("have %v; want nil", err)
	}

	rdb.Set(ctx, VersionKey(p), strconv.Itoa(Latest()+1), 0)
	if _, _, err := Apply(ctx, rdb, p, nil); !errors.Is(err, ErrNewerSchema) {
		t.Fatalf("newer: have %v; want ErrNewerSchema", err)
	}
	if v, _ := Version(ctx, rdb, p); v != Latest()+1 {
		t.Fatalf("have version %d after refused apply; want it untouched", v)
	}
}

func TestEmbedded(t *testing.T) {
	if loadErr != nil {
		t.Fatal(loadErr)
	}
	if Latest() < 1 {
		t.Fatalf("have %d migrations; want at least 1", Latest())
	}
}
