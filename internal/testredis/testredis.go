// Package testredis gives tests a Redis: the shared one that `make test`
// starts (deploy/redis.sh, or deploy/redis-cluster.sh for the cluster run),
// with a private key prefix per test; a private throwaway redis-server
// process for tests that kill and restart it; or a private Redis Cluster or
// Sentinel group for failover tests.
//
// $REDIS_URL takes any form internal/redisurl reads, so the same tests run
// against one server or a cluster: `make test` runs the Redis-backed
// suites both ways.
//
// Where no Redis answers, a test skips with a message; under CI=true it
// fails, because CI must run every test.
package testredis

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/specgate/specgate/internal/redisurl"
)

// Env names the variable that points at the shared test Redis.
const Env = "REDIS_URL"

// DefaultURL is the Redis that deploy/redis.sh starts (deploy/redis.conf).
const DefaultURL = "redis://127.0.0.1:6380/"

// URL returns the shared Redis URL: $REDIS_URL, else DefaultURL.
func URL() string {
	if u := os.Getenv(Env); u != "" {
		return u
	}
	return DefaultURL
}

// prefixes remembers each test's prefix so Client and Prefix agree.
var prefixes sync.Map // testing.TB → string

// Prefix returns the key prefix that belongs to tb alone, for the lifetime
// of the test: "test:<name>:<random>:". Code under test must put every key
// under it (the stores take a Prefix option).
func Prefix(tb testing.TB) string {
	tb.Helper()
	if p, ok := prefixes.Load(tb); ok {
		return p.(string)
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := strings.NewReplacer(" ", "_", "*", "_", "?", "_", "[", "_", "]", "_", "{", "_", "}", "_").Replace(tb.Name())
	p := "test:" + name + ":" + hex.EncodeToString(b[:]) + ":"
	actual, loaded := prefixes.LoadOrStore(tb, p)
	if !loaded {
		tb.Cleanup(func() { prefixes.Delete(tb) })
	}
	return actual.(string)
}

// Client connects to the shared Redis and returns a client for tb. At
// cleanup it deletes every key under Prefix(tb) and closes the client. When
// Redis is unreachable it skips tb, or fails it under CI=true.
func Client(tb testing.TB) redis.UniversalClient {
	tb.Helper()
	c, err := redisurl.Parse(URL())
	if err != nil {
		tb.Fatalf("testredis: %s: %v", Env, err)
	}
	rdb := c.NewClient()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		_ = rdb.Close()
		unavailable(tb, "no Redis at "+URL()+" ("+err.Error()+"); start one with deploy/redis.sh or set "+Env)
	}
	prefix := Prefix(tb)
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := DeletePrefix(ctx, rdb, prefix); err != nil {
			tb.Logf("testredis: cleanup of %s*: %v", prefix, err)
		}
		_ = rdb.Close()
	})
	return rdb
}

// IsClusterURL reports whether the shared Redis is a cluster.
func IsClusterURL() bool {
	c, err := redisurl.Parse(URL())
	return err == nil && c.Kind == redisurl.Cluster
}

// IsCluster reports whether rdb talks to a Redis Cluster.
func IsCluster(rdb redis.UniversalClient) bool {
	_, ok := rdb.(*redis.ClusterClient)
	return ok
}

// Keys returns every key matching the glob pattern, from every primary of
// a cluster (KEYS and SCAN see one node only).
func Keys(ctx context.Context, rdb redis.UniversalClient, pattern string) ([]string, error) {
	var mu sync.Mutex
	var out []string
	err := eachPrimary(ctx, rdb, func(ctx context.Context, c redis.Cmdable) error {
		iter := c.Scan(ctx, 0, pattern, 500).Iterator()
		for iter.Next(ctx) {
			mu.Lock()
			out = append(out, iter.Val())
			mu.Unlock()
		}
		return iter.Err()
	})
	return out, err
}

func eachPrimary(ctx context.Context, rdb redis.UniversalClient, fn func(context.Context, redis.Cmdable) error) error {
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return fn(ctx, c) })
	}
	return fn(ctx, rdb)
}

// DeletePrefix deletes every key that starts with prefix.
func DeletePrefix(ctx context.Context, rdb redis.UniversalClient, prefix string) error {
	// Deleting through each node's own client: on a cluster the keys of one
	// batch live on many slots, which one UNLINK may not span.
	return eachPrimary(ctx, rdb, func(ctx context.Context, c redis.Cmdable) error {
		iter := c.Scan(ctx, 0, escapeGlob(prefix)+"*", 500).Iterator()
		for iter.Next(ctx) {
			if err := c.Unlink(ctx, iter.Val()).Err(); err != nil {
				return err
			}
		}
		return iter.Err()
	})
}

func escapeGlob(s string) string {
	return strings.NewReplacer(`\`, `\\`, "*", `\*`, "?", `\?`, "[", `\[`, "]", `\]`).Replace(s)
}

// unavailable skips tb, or fails it under CI=true.
func unavailable(tb testing.TB, msg string) {
	tb.Helper()
	if os.Getenv("CI") == "true" {
		tb.Fatalf("testredis: %s (CI=true: a missing service is a failure)", msg)
	}
	tb.Skipf("testredis: %s", msg)
}
