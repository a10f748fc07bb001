package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/redis/go-redis/v9"
)

// defaultRedis is where deploy/redis.sh starts the project's own server.
const defaultRedis = "redis://127.0.0.1:6380/"

// redisFlag adds --redis to fs; the returned func connects to it (or to
// $REDIS_URL, or to the project's default).
func redisFlag(fs *flag.FlagSet) func(context.Context) (*redis.Client, error) {
	url := fs.String("redis", "", "Redis URL (default $REDIS_URL or "+defaultRedis+")")
	return func(ctx context.Context) (*redis.Client, error) { return openRedis(ctx, redisURL(*url)) }
}

func redisURL(flagValue string) string {
	if flagValue != "" {
		return flagValue
	}
	if v := os.Getenv("REDIS_URL"); v != "" {
		return v
	}
	return defaultRedis
}

// openRedis connects and checks the server answers, so a wrong address is
// one clear error at start rather than a failure at the first chat.
func openRedis(ctx context.Context, url string) (*redis.Client, error) {
	opt, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("redis URL %q: %w", url, err)
	}
	rdb := redis.NewClient(opt)
	pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if err := rdb.Ping(pctx).Err(); err != nil {
		rdb.Close()
		return nil, fmt.Errorf("cannot reach Redis at %s (start it with deploy/redis.sh or set REDIS_URL): %w", opt.Addr, err)
	}
	return rdb, nil
}
