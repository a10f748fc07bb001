// Package migrations holds specgate's Redis data migrations: numbered
// steps compiled into the binary (NNNN_name.go), applied in order by
// `specgate migrate` and at start. The applied version is the integer at
// schema:version (keyspace.Space.SchemaVersion).
//
// A step may touch keys on many hash slots (a layout change does), so on a
// Redis Cluster it cannot run in one script with the version bump. Instead
// every step is idempotent, one process at a time applies them (it holds
// schema:lock, a lease it renews while it works), and the version moves
// only after its step has finished, with a compare-and-set on the one
// version key: a step interrupted part-way runs again from the start and
// finishes the job.
package migrations

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/specgate/specgate/internal/keyspace"
)

// ErrNewerSchema is returned when Redis holds a schema newer than this
// binary knows: an older binary must not write data it does not understand.
var ErrNewerSchema = errors.New("migrations: redis schema is newer than this binary")

// ErrBehind is returned by Check when migrations are pending.
var ErrBehind = errors.New("migrations: redis schema is behind; run `specgate migrate`")

// Migration is one numbered step.
type Migration struct {
	Version int
	Name    string
	// Up applies the step. It must be idempotent: after a crash it runs
	// again over whatever part it had done.
	Up func(ctx context.Context, e *Env) error
}

// all lists the steps; their files are named NNNN_name.go.
var all = []Migration{
	{1, "init", initKeyspace},
	{2, "tenant_index", tenantIndex},
	{3, "slot_layout", slotLayout},
}

// All returns the migrations in order.
func All() []Migration { return append([]Migration(nil), all...) }

// Latest is the version this binary migrates to.
func Latest() int { return len(all) }

// VersionKey is the key holding the applied version, under prefix.
func VersionKey(prefix string) string { return keyspace.New(prefix).SchemaVersion() }

// Version reads the applied version (0 for an empty keyspace).
func Version(ctx context.Context, rdb redis.UniversalClient, prefix string) (int, error) {
	s, err := rdb.Get(ctx, VersionKey(prefix)).Result()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("migrations: read %s: %w", VersionKey(prefix), err)
	}
	v, err := strconv.Atoi(s)
	if err != nil {
		return 0, fmt.Errorf("migrations: %s holds %q, not a number", VersionKey(prefix), s)
	}
	return v, nil
}

// Check returns nil when Redis is exactly at Latest, ErrNewerSchema when it
// is ahead, ErrBehind when migrations are pending.
func Check(ctx context.Context, rdb redis.UniversalClient, prefix string) error {
	v, err := Version(ctx, rdb, prefix)
	if err != nil {
		return err
	}
	return compare(v)
}

func compare(v int) error {
	switch {
	case v > Latest():
		return fmt.Errorf("%w: redis is at schema %d, this binary knows up to %d; upgrade specgate (or point it at another Redis)", ErrNewerSchema, v, Latest())
	case v < Latest():
		return fmt.Errorf("%w: at %d, want %d", ErrBehind, v, Latest())
	}
	return nil
}

// LockTTL is how long schema:lock outlives a migrator that stopped renewing
// it (crashed); another process then takes over.
const LockTTL = 10 * time.Second

// Apply runs the pending migrations in order and returns the versions
// before and after. Running it again does nothing. It refuses, changing
// nothing, when Redis is ahead of this binary. When another process is
// migrating it waits for it (until ctx ends). logf may be nil.
func Apply(ctx context.Context, rdb redis.UniversalClient, prefix string, logf func(format string, args ...any)) (from, to int, err error) {
	from, err = Version(ctx, rdb, prefix)
	if err != nil || from >= Latest() {
		if err == nil && from > Latest() {
			err = compare(from)
		}
		return from, from, err
	}
	ks := keyspace.New(prefix)
	release, err := lock(ctx, rdb, ks.SchemaLock())
	if err != nil {
		return from, from, err
	}
	defer release()
	// Another process may have migrated while this one waited.
	from, err = Version(ctx, rdb, prefix)
	if err != nil || from > Latest() {
		if err == nil {
			err = compare(from)
		}
		return from, from, err
	}
	to = from
	e := &Env{rdb: rdb, ks: ks}
	for _, m := range all[from:] {
		if err := m.Up(ctx, e); err != nil {
			return from, to, fmt.Errorf("migrations: %04d %s: %w", m.Version, m.Name, err)
		}
		if err := bumpScript.Run(ctx, rdb, []string{ks.SchemaVersion()}, m.Version).Err(); err != nil {
			return from, to, fmt.Errorf("migrations: %04d %s: set version: %w", m.Version, m.Name, err)
		}
		to = m.Version
		if logf != nil {
			logf("migrations: applied %04d %s", m.Version, m.Name)
		}
	}
	return from, to, nil
}

// bumpScript moves the version from ARGV[1]-1 to ARGV[1]; any other stored
// version means two migrators raced (a lock lost to a long pause), and
// nothing is written.
var bumpScript = redis.NewScript(`
local cur = tonumber(redis.call('GET', KEYS[1]) or '0')
local want = tonumber(ARGV[1])
if cur ~= want - 1 then return redis.error_reply('schema at ' .. cur .. ', migration ' .. want .. ' needs ' .. (want - 1)) end
redis.call('SET', KEYS[1], ARGV[1])
return 1
`)

var unlockScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
`)

var renewScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
`)

// lock takes the migration lease, waiting while another process holds it,
// and renews it until release is called.
func lock(ctx context.Context, rdb redis.UniversalClient, key string) (release func(), err error) {
	var b [8]byte
	_, _ = rand.Read(b[:])
	token := hex.EncodeToString(b[:])
	for {
		ok, err := rdb.SetNX(ctx, key, token, LockTTL).Result()
		if err != nil {
			return nil, fmt.Errorf("migrations: take %s: %w", key, err)
		}
		if ok {
			break
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("migrations: waiting for another migrator (%s): %w", key, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	rctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(LockTTL / 3)
		defer t.Stop()
		for {
			select {
			case <-rctx.Done():
				return
			case <-t.C:
				_ = renewScript.Run(rctx, rdb, []string{key}, token, LockTTL.Milliseconds()).Err()
			}
		}
	}()
	return func() {
		stop()
		wg.Wait()
		cctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = unlockScript.Run(cctx, rdb, []string{key}, token).Err()
	}, nil
}

// Env is what a step works with: the client and the keyspace.
type Env struct {
	rdb redis.UniversalClient
	ks  keyspace.Space
}

// Scan calls fn with every key matching pattern (a SCAN glob), on every
// primary of a cluster. fn may run on several goroutines at once.
func (e *Env) Scan(ctx context.Context, pattern string, fn func(ctx context.Context, key string) error) error {
	scan := func(ctx context.Context, c redis.Cmdable) error {
		iter := c.Scan(ctx, 0, pattern, 1000).Iterator()
		for iter.Next(ctx) {
			if err := fn(ctx, iter.Val()); err != nil {
				return err
			}
		}
		return iter.Err()
	}
	if cc, ok := e.rdb.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return scan(ctx, c) })
	}
	return scan(ctx, e.rdb)
}

// Move renames key from to to, keeping its value and TTL, replacing to.
// Moving a key that is gone does nothing, so a rerun is harmless. On a
// cluster the two names may live on different primaries, so it copies
// (DUMP, RESTORE) and then deletes; a crash in between leaves both, and
// the rerun copies again.
func (e *Env) Move(ctx context.Context, from, to string) error {
	if from == to {
		return nil
	}
	if _, ok := e.rdb.(*redis.ClusterClient); !ok {
		err := e.rdb.Rename(ctx, from, to).Err()
		if err != nil && err.Error() == "ERR no such key" {
			return nil
		}
		if err != nil {
			return fmt.Errorf("rename %s to %s: %w", from, to, err)
		}
		return nil
	}
	var dump *redis.StringCmd
	var pttl *redis.DurationCmd
	_, err := e.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		dump = p.Dump(ctx, from)
		pttl = p.PTTL(ctx, from)
		return nil
	})
	if errors.Is(err, redis.Nil) || errors.Is(dump.Err(), redis.Nil) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("dump %s: %w", from, err)
	}
	ttl := pttl.Val()
	switch {
	case ttl == -2*time.Nanosecond || ttl == -2*time.Millisecond:
		return nil // expired between the two reads
	case ttl < 0:
		ttl = 0 // no TTL
	case ttl < time.Millisecond:
		ttl = time.Millisecond
	}
	if err := e.rdb.RestoreReplace(ctx, to, ttl, dump.Val()).Err(); err != nil {
		return fmt.Errorf("restore %s as %s: %w", from, to, err)
	}
	if err := e.rdb.Del(ctx, from).Err(); err != nil {
		return fmt.Errorf("delete %s after copying it: %w", from, err)
	}
	return nil
}
