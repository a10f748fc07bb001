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
	return func(ctx context.Context) (*redis.Client, error) {
		u, from := redisURL(*url)
		return openRedis(ctx, u, from)
	}
}

// Where the Redis URL came from, for the hint when it does not answer.
const (
	fromFlag    = "--redis"
	fromEnv     = "REDIS_URL"
	fromDefault = ""
)

func redisURL(flagValue string) (url, from string) {
	if flagValue != "" {
		return flagValue, fromFlag
	}
	if v := os.Getenv("REDIS_URL"); v != "" {
		return v, fromEnv
	}
	return defaultRedis, fromDefault
}

// redisHint says what to do about a Redis that does not answer: only the
// project's default address is started by deploy/redis.sh; one named by
// REDIS_URL or --redis is the user's own server.
func redisHint(from string) string {
	switch from {
	case fromEnv:
		return "REDIS_URL names it: start that server, or unset REDIS_URL to use the project's own (deploy/redis.sh)"
	case fromFlag:
		return "--redis names it: start that server or fix the URL"
	}
	return "start it with deploy/redis.sh, or set REDIS_URL to a running server"
}

// openRedis connects and checks the server answers, so a wrong address is
// one clear error at start rather than a failure at the first chat.
func openRedis(ctx context.Context, url, from string) (*redis.Client, error) {
	opt, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("redis URL %q: %w", url, err)
	}
	rdb := redis.NewClient(opt)
	pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if err := rdb.Ping(pctx).Err(); err != nil {
		rdb.Close()
		return nil, fmt.Errorf("cannot reach Redis at %s (%s): %w", opt.Addr, redisHint(from), err)
	}
	return rdb, nil
}
