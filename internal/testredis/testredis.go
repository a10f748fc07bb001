// Package testredis gives tests a Redis: the shared one that `make test`
// starts (deploy/redis.sh), with a private key prefix per test, or a private
// throwaway redis-server process for tests that kill and restart it.
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
func Client(tb testing.TB) *redis.Client {
	tb.Helper()
	opt, err := redis.ParseURL(URL())
	if err != nil {
		tb.Fatalf("testredis: %s=%q: %v", Env, URL(), err)
	}
	rdb := redis.NewClient(opt)
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

// DeletePrefix deletes every key that starts with prefix.
func DeletePrefix(ctx context.Context, rdb *redis.Client, prefix string) error {
	iter := rdb.Scan(ctx, 0, escapeGlob(prefix)+"*", 500).Iterator()
	var batch []string
	for iter.Next(ctx) {
		batch = append(batch, iter.Val())
		if len(batch) == 500 {
			if err := rdb.Unlink(ctx, batch...).Err(); err != nil {
				return err
			}
			batch = batch[:0]
		}
	}
	if err := iter.Err(); err != nil {
		return err
	}
	if len(batch) > 0 {
		return rdb.Unlink(ctx, batch...).Err()
	}
	return nil
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
