package tenants

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/specgate/specgate/internal/keyspace"
)

// Lease kinds counted by Limiter.Acquire.
const (
	LeaseConnections = "conns"
	LeaseRequests    = "reqs"
)

// Limiter counts a tenant's connections, concurrent requests and tokens in
// Redis, so the caps hold across gateway processes. Each operation is one
// Lua script, so concurrent gateways never both take the last slot. Time is
// Redis's own (TIME), so clocks of different gateways do not matter.
//
// Connections and requests are leases: a holder that dies without Release
// stops counting when its lease expires, so a crashed gateway does not leak
// a tenant's slots forever. Holders must Refresh within the lease TTL.
type Limiter struct {
	rdb redis.UniversalClient
	ks  keyspace.Space
}

// NewLimiter returns a limiter whose keys are under prefix.
func NewLimiter(rdb redis.UniversalClient, prefix string) *Limiter {
	return &Limiter{rdb: rdb, ks: keyspace.New(prefix)}
}

func (l *Limiter) leaseKey(tenant, kind string) string { return l.ks.Lease(tenant, kind) }

// acquireScript: KEYS[1] the lease set (member → expiry ms). ARGV: holder,
// ttl ms, max. Returns 1 when the holder has a lease, 0 when the cap is met.
var acquireScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) and redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[3]) then
  return 0
end
redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
redis.call('PEXPIRE', KEYS[1], ttl)
return 1
`)

// refreshScript extends leases that still exist. KEYS[1] the set; ARGV: ttl
// ms, holders... Returns how many were extended.
var refreshScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[1])
local n = 0
for i = 2, #ARGV do
  if redis.call('ZSCORE', KEYS[1], ARGV[i]) then
    redis.call('ZADD', KEYS[1], now + ttl, ARGV[i])
    n = n + 1
  end
end
if n > 0 then redis.call('PEXPIRE', KEYS[1], ttl) end
return n
`)

// Acquire takes a lease of kind for holder when fewer than max are held
// (max <= 0: no cap, and nothing is written). It reports whether the holder
// now has one; taking a lease the holder already has just extends it.
func (l *Limiter) Acquire(ctx context.Context, tenant, kind, holder string, max int, ttl time.Duration) (bool, error) {
	if max <= 0 {
		return true, nil
	}
	n, err := acquireScript.Run(ctx, l.rdb, []string{l.leaseKey(tenant, kind)}, holder, ttl.Milliseconds(), max).Int()
	if err != nil {
		return false, fmt.Errorf("tenants: acquire %s lease for %s: %w", kind, tenant, err)
	}
	return n == 1, nil
}

// Hold takes or extends a lease of kind for holder whatever the cap: for
// work that already runs and is not to be refused (a generation another
// gateway started and this one took over), which must still count
// against the cap of the work that comes after it.
func (l *Limiter) Hold(ctx context.Context, tenant, kind, holder string, ttl time.Duration) error {
	if err := acquireScript.Run(ctx, l.rdb, []string{l.leaseKey(tenant, kind)}, holder, ttl.Milliseconds(), math.MaxInt32).Err(); err != nil {
		return fmt.Errorf("tenants: hold %s lease for %s: %w", kind, tenant, err)
	}
	return nil
}

// Refresh extends holders' leases of kind by ttl from now. A lease that
// already expired is not revived (its slot may have been taken).
func (l *Limiter) Refresh(ctx context.Context, tenant, kind string, ttl time.Duration, holders ...string) error {
	if len(holders) == 0 {
		return nil
	}
	args := make([]any, 0, len(holders)+1)
	args = append(args, ttl.Milliseconds())
	for _, h := range holders {
		args = append(args, h)
	}
	if err := refreshScript.Run(ctx, l.rdb, []string{l.leaseKey(tenant, kind)}, args...).Err(); err != nil {
		return fmt.Errorf("tenants: refresh %s leases of %s: %w", kind, tenant, err)
	}
	return nil
}

// Release gives a lease back. Releasing one not held does nothing.
func (l *Limiter) Release(ctx context.Context, tenant, kind, holder string) error {
	if err := l.rdb.ZRem(ctx, l.leaseKey(tenant, kind), holder).Err(); err != nil {
		return fmt.Errorf("tenants: release %s lease of %s: %w", kind, tenant, err)
	}
	return nil
}

// Held counts the live leases of kind.
func (l *Limiter) Held(ctx context.Context, tenant, kind string) (int, error) {
	n, err := l.rdb.ZCount(ctx, l.leaseKey(tenant, kind), "("+strconv.FormatInt(time.Now().UnixMilli(), 10), "+inf").Result()
	if err != nil {
		return 0, fmt.Errorf("tenants: count %s leases of %s: %w", kind, tenant, err)
	}
	return int(n), nil
}

// tokensScript estimates the tokens used in the sliding minute from this
// minute's and the previous minute's counters (the previous weighted by the
// part of it still inside the window), and adds ARGV[2] when the result
// stays within the cap. KEYS: the counter prefix (the minute keys it
// builds share its hash tag, hence its slot). ARGV: cap, tokens to
// add, force (1: add even over the cap; usage is charged after the fact).
// Returns {allowed 0|1, used after}.
var tokensScript = redis.NewScript(`
local t = redis.call('TIME')
local sec = tonumber(t[1])
local minute = math.floor(sec / 60)
local into = (sec % 60 + tonumber(t[2]) / 1e6) / 60
local curKey = KEYS[1] .. minute
local cur = tonumber(redis.call('GET', curKey) or '0')
local prev = tonumber(redis.call('GET', KEYS[1] .. (minute - 1)) or '0')
local used = cur + prev * (1 - into)
local cap = tonumber(ARGV[1])
local n = tonumber(ARGV[2])
if ARGV[3] ~= '1' and (used >= cap or (n > 0 and used + n > cap)) then
  return {0, math.floor(used)}
end
if n > 0 then
  redis.call('INCRBY', curKey, n)
  redis.call('EXPIRE', curKey, 120)
end
return {1, math.floor(used + n)}
`)

// AllowTokens reports whether n more tokens fit in the tenant's sliding
// minute under perMinute (n == 0 asks whether any room is left), and
// counts them when they do. perMinute <= 0 means no cap.
func (l *Limiter) AllowTokens(ctx context.Context, tenant string, n, perMinute int) (bool, error) {
	if perMinute <= 0 {
		return true, nil
	}
	return l.tokens(ctx, tenant, n, perMinute, false)
}

// ChargeTokens counts n tokens already spent, even over the cap: the next
// AllowTokens sees them. perMinute <= 0 means no cap, and nothing is kept.
func (l *Limiter) ChargeTokens(ctx context.Context, tenant string, n, perMinute int) error {
	if perMinute <= 0 || n <= 0 {
		return nil
	}
	_, err := l.tokens(ctx, tenant, n, perMinute, true)
	return err
}

func (l *Limiter) tokens(ctx context.Context, tenant string, n, perMinute int, force bool) (bool, error) {
	f := "0"
	if force {
		f = "1"
	}
	res, err := tokensScript.Run(ctx, l.rdb, []string{l.ks.TokensPrefix(tenant)}, perMinute, n, f).Int64Slice()
	if err != nil {
		return false, fmt.Errorf("tenants: tokens of %s: %w", tenant, err)
	}
	return len(res) == 2 && res[0] == 1, nil
}
