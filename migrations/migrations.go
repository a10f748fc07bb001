// Package migrations holds specgate's Redis data migrations: numbered Lua
// files embedded in the binary (NNNN_name.lua), applied in order by
// `specgate migrate` and at start. The applied version is the integer at
// schema:version.
//
// Each file is the body of a function with one variable in scope, prefix
// (the key prefix), and must be idempotent. It runs in one script together
// with the version bump, so a migration and its version land together or
// not at all, and gateways starting at once cannot apply one twice.
package migrations

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

//go:embed *.lua
var files embed.FS

// ErrNewerSchema is returned when Redis holds a schema newer than this
// binary knows: an older binary must not write data it does not understand.
var ErrNewerSchema = errors.New("migrations: redis schema is newer than this binary")

// ErrBehind is returned by Check when migrations are pending.
var ErrBehind = errors.New("migrations: redis schema is behind; run `specgate migrate`")

// Migration is one numbered step.
type Migration struct {
	Version int
	Name    string
	Script  string
}

var all, loadErr = load()

func load() ([]Migration, error) {
	names, err := fs.Glob(files, "*.lua")
	if err != nil {
		return nil, err
	}
	var ms []Migration
	for _, name := range names {
		num, rest, ok := strings.Cut(name, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("migrations: file %q is not NNNN_name.lua", name)
		}
		b, err := files.ReadFile(name)
		if err != nil {
			return nil, err
		}
		ms = append(ms, Migration{Version: v, Name: strings.TrimSuffix(rest, ".lua"), Script: string(b)})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].Version < ms[j].Version })
	for i, m := range ms {
		if m.Version != i+1 {
			return nil, fmt.Errorf("migrations: versions must run 1, 2, 3…; have %d at position %d", m.Version, i+1)
		}
	}
	return ms, nil
}

// All returns the embedded migrations in order.
func All() []Migration { return append([]Migration(nil), all...) }

// Latest is the version this binary migrates to.
func Latest() int { return len(all) }

// VersionKey is the key holding the applied version, under prefix.
func VersionKey(prefix string) string { return prefix + "schema:version" }

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

// Apply runs the pending migrations in order and returns the versions
// before and after. Running it again does nothing. It refuses, changing
// nothing, when Redis is ahead of this binary. logf may be nil.
func Apply(ctx context.Context, rdb redis.UniversalClient, prefix string, logf func(format string, args ...any)) (from, to int, err error) {
	if loadErr != nil {
		return 0, 0, loadErr
	}
	from, err = Version(ctx, rdb, prefix)
	if err != nil {
		return 0, 0, err
	}
	if from > Latest() {
		return from, from, compare(from)
	}
	to = from
	for _, m := range all[from:] {
		ran, err := run(ctx, rdb, prefix, m)
		if err != nil {
			return from, to, err
		}
		to = m.Version
		if ran && logf != nil {
			logf("migrations: applied %04d %s", m.Version, m.Name)
		}
	}
	return from, to, nil
}

func run(ctx context.Context, rdb redis.UniversalClient, prefix string, m Migration) (bool, error) {
	// The body runs only when the stored version is exactly the one
	// before: a concurrent migrator that got there first makes this a no-op.
	src := `local cur = tonumber(redis.call('GET', KEYS[1]) or '0')
local want = tonumber(ARGV[2])
if cur >= want then return 0 end
if cur ~= want - 1 then return redis.error_reply('schema at ' .. cur .. ', migration ' .. want .. ' needs ' .. (want - 1)) end
local function migrate(prefix)
` + m.Script + `
end
migrate(ARGV[1])
redis.call('SET', KEYS[1], ARGV[2])
return 1
`
	n, err := redis.NewScript(src).Run(ctx, rdb, []string{VersionKey(prefix)}, prefix, m.Version).Int()
	if err != nil {
		return false, fmt.Errorf("migrations: %04d %s: %w", m.Version, m.Name, err)
	}
	return n == 1, nil
}
