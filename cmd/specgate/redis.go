package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"

	"github.com/redis/go-redis/v9"

	"github.com/specgate/specgate/internal/redisurl"
)

// defaultRedis is where deploy/redis.sh starts the project's own server.
const defaultRedis = "redis://127.0.0.1:6380/"

// redisFlag adds --redis to fs; the returned func connects to it (or to
// $REDIS_URL, or to the project's default). Every role and subcommand
// opens Redis through it, so each accepts one server, a cluster or a
// Sentinel group alike (internal/redisurl has the URL forms).
func redisFlag(fs *flag.FlagSet) func(context.Context) (redis.UniversalClient, error) {
	url := fs.String("redis", "", "Redis URL: redis://, rediss://, redis+cluster://h1:p1,h2:p2, redis+sentinel://s1:p1,s2:p2/master (default $REDIS_URL or "+defaultRedis+")")
	return func(ctx context.Context) (redis.UniversalClient, error) {
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

// openRedis connects and checks the server answers (redisurl.Open); an
// unreachable server's error says what to do about it, which depends on
// where the URL came from.
func openRedis(ctx context.Context, url, from string) (redis.UniversalClient, error) {
	rdb, err := redisurl.Open(ctx, url)
	if errors.Is(err, redisurl.ErrUnreachable) {
		return nil, fmt.Errorf("%w (%s)", err, redisHint(from))
	}
	return rdb, err
}
