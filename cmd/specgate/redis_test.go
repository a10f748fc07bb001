package main

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/specgate/specgate/internal/redisurl"
)

// openRedis: a server that does not answer is redisurl's error with the
// hint that fits where the URL came from; a URL that does not parse gets
// no such hint, since no server was tried.
func TestOpenRedisErrors(t *testing.T) {
	for _, tc := range []struct {
		name, url, from string
		unreachable     bool
		want            string
	}{
		{"flag", "redis://127.0.0.1:1/", fromFlag, true, "--redis names it: start that server or fix the URL"},
		{"env", "redis://127.0.0.1:1/", fromEnv, true, "REDIS_URL names it: start that server, or unset REDIS_URL"},
		{"default", "redis://127.0.0.1:1/", fromDefault, true, "start it with deploy/redis.sh"},
		{"bad url", "mysql://127.0.0.1:1/", fromFlag, false, "mysql"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // each dial retries for seconds
			rdb, err := openRedis(context.Background(), tc.url, tc.from)
			if rdb != nil {
				rdb.Close()
				t.Fatal("have a client; want an error")
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) || errors.Is(err, redisurl.ErrUnreachable) != tc.unreachable ||
				(strings.Contains(err.Error(), "names it") && !tc.unreachable) {
				t.Fatalf("have %v; want %q (unreachable: %v)", err, tc.want, tc.unreachable)
			}
			if tc.unreachable && !strings.HasPrefix(err.Error(), "cannot reach Redis (single) at 127.0.0.1:1: ") {
				t.Fatalf("have %v; want redisurl.Open's message first", err)
			}
		})
	}
}
