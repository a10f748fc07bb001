package migrations

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/specgate/specgate/internal/keyspace"
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
	ks := keyspace.New(p)
	if ok, _ := rdb.SIsMember(ctx, ks.TenantIDs(), "old").Result(); !ok {
		t.Fatalf("have tenant index without old; want it backfilled")
	}
	from, to, err = Apply(ctx, rdb, p, nil)
	if err != nil || from != Latest() || to != Latest() {
		t.Fatalf("second apply: have %d→%d, %v; want no-op", from, to, err)
	}
	if err := Check(ctx, rdb, p); err != nil {
		t.Fatalf("have %v; want nil", err)
	}
	if n := rdb.Exists(ctx, ks.SchemaLock()).Val(); n != 0 {
		t.Fatalf("have the migration lock held after Apply; want it released")
	}

	rdb.Set(ctx, VersionKey(p), strconv.Itoa(Latest()+1), 0)
	if _, _, err := Apply(ctx, rdb, p, nil); !errors.Is(err, ErrNewerSchema) {
		t.Fatalf("newer: have %v; want ErrNewerSchema", err)
	}
	if v, _ := Version(ctx, rdb, p); v != Latest()+1 {
		t.Fatalf("have version %d after refused apply; want it untouched", v)
	}
}

// oldLayout writes a keyspace as the first layout had it (schema 2): one
// tenant with a key, one user with a session, its history, a finished
// request's record and delta log, a lease and a token counter.
func oldLayout(t *testing.T, rdb redis.UniversalClient, p string) {
	t.Helper()
	ctx := context.Background()
	sid := "s_0123456789abcdef01234567"
	for _, err := range []error{
		rdb.Set(ctx, p+"schema:version", 2, 0).Err(),
		rdb.Set(ctx, p+"tenant:acme", `{"id":"acme","keys":[{"kid":"k1"}],"rev":1}`, 0).Err(),
		rdb.SAdd(ctx, p+"tenants", "acme").Err(),
		rdb.Set(ctx, p+"kid:k1", "acme", 0).Err(),
		rdb.HSet(ctx, p+"sess:"+sid, "tenant", "acme", "user", "u:1", "title", "t").Err(),
		rdb.RPush(ctx, p+"sess:"+sid+":msgs", `{"role":"user","content":"hi"}`, `{"role":"assistant","content":"hello"}`).Err(),
		rdb.HSet(ctx, p+"sess:"+sid+":req:r:1", "state", "done").Err(),
		rdb.PExpire(ctx, p+"sess:"+sid+":req:r:1", time.Hour).Err(),
		rdb.XAdd(ctx, &redis.XAddArgs{Stream: p + "sess:" + sid + ":req:r:1:log", ID: "1-0", Values: []any{"d", "hel"}}).Err(),
		rdb.XAdd(ctx, &redis.XAddArgs{Stream: p + "sess:" + sid + ":req:r:1:log", ID: "2-0", Values: []any{"d", "lo"}}).Err(),
		rdb.PExpire(ctx, p+"sess:"+sid+":req:r:1:log", time.Hour).Err(),
		rdb.ZAdd(ctx, p+"idx:acme:u:1", redis.Z{Score: 5, Member: sid}).Err(),
		rdb.ZAdd(ctx, p+"rl:acme:conns", redis.Z{Score: 9e12, Member: "gw-1"}).Err(),
		rdb.Set(ctx, p+"rl:acme:tpm:29000000", 42, time.Minute).Err(),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// checkNewLayout checks every key of oldLayout is under its tagged name with
// its value and TTL, and no old name is left.
func checkNewLayout(t *testing.T, rdb redis.UniversalClient, p string) {
	t.Helper()
	ctx := context.Background()
	ks := keyspace.New(p)
	sid := "s_0123456789abcdef01234567"
	if v := rdb.Get(ctx, ks.Tenant("acme")).Val(); v == "" {
		t.Errorf("tenant record not moved")
	}
	if v := rdb.Get(ctx, ks.Kid("k1")).Val(); v != "acme" {
		t.Errorf("kid index: have %q; want acme", v)
	}
	if ok := rdb.SIsMember(ctx, ks.TenantIDs(), "acme").Val(); !ok {
		t.Errorf("tenant id set not moved")
	}
	if v := rdb.HGet(ctx, ks.Session(sid), "user").Val(); v != "u:1" {
		t.Errorf("session record: user %q; want u:1", v)
	}
	if msgs := rdb.LRange(ctx, ks.Messages(sid), 0, -1).Val(); len(msgs) != 2 {
		t.Errorf("history: have %d messages; want 2", len(msgs))
	}
	if v := rdb.HGet(ctx, ks.Request(sid, "r:1"), "state").Val(); v != "done" {
		t.Errorf("request record: state %q; want done", v)
	}
	if ttl := rdb.PTTL(ctx, ks.Request(sid, "r:1")).Val(); ttl <= 0 || ttl > time.Hour {
		t.Errorf("request record TTL %v; want kept (≤ 1h)", ttl)
	}
	if log := rdb.XRange(ctx, ks.RequestLog(sid, "r:1"), "-", "+").Val(); len(log) != 2 || log[1].ID != "2-0" {
		t.Errorf("delta log: have %v; want entries 1-0, 2-0", log)
	}
	if ttl := rdb.PTTL(ctx, ks.RequestLog(sid, "r:1")).Val(); ttl <= 0 || ttl > time.Hour {
		t.Errorf("delta log TTL %v; want kept (≤ 1h)", ttl)
	}
	if ids := rdb.ZRange(ctx, ks.UserIndex("acme", "u:1"), 0, -1).Val(); len(ids) != 1 || ids[0] != sid {
		t.Errorf("user index: have %v; want [%s]", ids, sid)
	}
	if n := rdb.ZCard(ctx, ks.Lease("acme", "conns")).Val(); n != 1 {
		t.Errorf("leases: have %d; want 1", n)
	}
	if v := rdb.Get(ctx, ks.TokensPrefix("acme")+"29000000").Val(); v != "42" {
		t.Errorf("token counter: have %q; want 42", v)
	}
	for _, old := range []string{"tenant:acme", "tenants", "kid:k1", "sess:" + sid, "sess:" + sid + ":msgs",
		"sess:" + sid + ":req:r:1", "sess:" + sid + ":req:r:1:log", "idx:acme:u:1", "rl:acme:conns", "rl:acme:tpm:29000000"} {
		if rdb.Exists(ctx, p+old).Val() != 0 {
			t.Errorf("old key %s still there", old)
		}
	}
}

func TestSlotLayoutMovesSingleNodeData(t *testing.T) {
	rdb := testredis.Client(t)
	p := testredis.Prefix(t)
	ctx := context.Background()
	oldLayout(t, rdb, p)
	from, to, err := Apply(ctx, rdb, p, t.Logf)
	if err != nil || from != 2 || to != Latest() {
		t.Fatalf("have %d→%d, %v; want 2→%d", from, to, err, Latest())
	}
	checkNewLayout(t, rdb, p)

	// Idempotent: running the step again (a crash before the version
	// moved) changes nothing.
	if err := slotLayout(ctx, &Env{rdb: rdb, ks: keyspace.New(p)}); err != nil {
		t.Fatal(err)
	}
	checkNewLayout(t, rdb, p)
}

// A migrator that died after copying a key but before deleting its old
// name leaves both; the rerun finishes the move.
func TestSlotLayoutFinishesAnInterruptedMove(t *testing.T) {
	rdb := testredis.Client(t)
	p := testredis.Prefix(t)
	ctx := context.Background()
	oldLayout(t, rdb, p)
	ks := keyspace.New(p)
	sid := "s_0123456789abcdef01234567"
	// Half done: the history copied, the old name still there.
	if err := rdb.RPush(ctx, ks.Messages(sid), `{"role":"user","content":"hi"}`, `{"role":"assistant","content":"hello"}`).Err(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Apply(ctx, rdb, p, t.Logf); err != nil {
		t.Fatal(err)
	}
	checkNewLayout(t, rdb, p)
}

// Processes starting at once apply each migration once: the others wait
// for the lock and find the work done.
func TestConcurrentApply(t *testing.T) {
	rdb := testredis.Client(t)
	p := testredis.Prefix(t)
	ctx := context.Background()
	oldLayout(t, rdb, p)
	var wg sync.WaitGroup
	applied := make(chan int, 4)
	errs := make(chan error, 4)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			from, to, err := Apply(ctx, rdb, p, nil)
			errs <- err
			applied <- to - from
		}()
	}
	wg.Wait()
	close(applied)
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	total := 0
	for n := range applied {
		total += n
	}
	if total != Latest()-2 {
		t.Fatalf("have %d steps applied in all; want %d (each once)", total, Latest()-2)
	}
	checkNewLayout(t, rdb, p)
}

func TestEmbedded(t *testing.T) {
	for i, m := range All() {
		if m.Version != i+1 || m.Up == nil || m.Name == "" {
			t.Fatalf("migration %d: have %+v; want version %d with a name and a step", i, m, i+1)
		}
	}
}
