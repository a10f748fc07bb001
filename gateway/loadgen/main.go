package loadgen

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/specgate/specgate/internal/redisurl"
	"github.com/specgate/specgate/tenants"
)

// DefaultRedis is the Redis `specgate serve` uses when none is given.
const DefaultRedis = "redis://127.0.0.1:6380/"

// Usage documents Main's command line.
const Usage = `usage: specgate loadgen [flags]

Drives a running gateway with many tenants' users holding multi-turn
conversations over WebSocket, then prints, per tenant and per priority
class: requests, errors by code, TTFT and inter-token latency p50/p99 and
tokens/s, all measured at the client.

Tenants come from one of:
  -token JWT (repeatable)         use these tokens as they are; every user
                                  of a token is the token's sub
  -hs256 KID:BASE64 (repeatable)  mint tokens with an existing HS256 key
  (neither)                       create -tenants tenants named
                                  <tenant-prefix>-<i> in Redis (or reuse
                                  them) and mint tokens with their keys

The run stops by itself after every user's turns, after -requests chat
requests, or after -duration, whichever comes first.

-mix gives the priority mix of requests, e.g. "interactive:1,batch:3";
separate per-tenant mixes with '/', tenant i takes mix i mod n:
  -mix "interactive:1/standard:3,batch:1"

flags:`

// Main is `specgate loadgen`: it parses args, prepares tenants and
// tokens, runs the load and writes the report to stdout (a table, or JSON
// with -json). It returns flag.ErrHelp for -h, and an error when the
// command line is wrong, tenants cannot be prepared, or not one request
// completed.
func Main(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("specgate loadgen", flag.ContinueOnError)
	fs.SetOutput(stdout)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), Usage)
		fs.PrintDefaults()
	}
	var cfg Config
	fs.StringVar(&cfg.URL, "url", "ws://127.0.0.1:8080/v1/ws", "the gateway's WebSocket endpoint")
	redisURL := fs.String("redis", "", "Redis URL for creating tenants (default $REDIS_URL or "+DefaultRedis+")")
	prefix := fs.String("redis-prefix", "", "key prefix of the gateway's Redis data (as the gateway was started with)")
	nTenants := fs.Int("tenants", 4, "tenants to create or reuse in Redis")
	tenantPrefix := fs.String("tenant-prefix", "loadgen", "id prefix of created tenants: <prefix>-<i>")
	class := fs.String("tenant-class", Interactive, "priority class of created tenants (requests may lower it)")
	maxConc := fs.Int("max-concurrent", 0, "created tenants' concurrent request cap (0: none)")
	tpm := fs.Int("tokens-per-minute", 0, "created tenants' tokens-per-minute cap (0: none)")
	var tokens, keys []string
	fs.Func("token", "a JWT to use as is (repeatable; one tenant entry each)", func(v string) error {
		tokens = append(tokens, v)
		return nil
	})
	fs.Func("hs256", "KID:BASE64SECRET of an existing HS256 key to mint tokens with (repeatable)", func(v string) error {
		keys = append(keys, v)
		return nil
	})
	audience := fs.String("audience", "specgate", "aud of minted tokens")
	fs.IntVar(&cfg.Users, "users", 4, "users per tenant, each with its own connection and session")
	fs.IntVar(&cfg.Turns, "turns", 4, "turns per user")
	fs.IntVar(&cfg.MaxRequests, "requests", 0, "cap on chat requests in all (0: tenants × users × turns)")
	fs.DurationVar(&cfg.Duration, "duration", 2*time.Minute, "cap on the run's duration")
	fs.DurationVar(&cfg.Ramp, "ramp", 2*time.Second, "spread the users' first connections over this long")
	fs.DurationVar(&cfg.Think, "think", 0, "pause between a user's turns")
	fs.DurationVar(&cfg.TurnTimeout, "turn-timeout", 2*time.Minute, "cap on one turn, chat to done")
	fs.IntVar(&cfg.MaxTokens, "max-tokens", 64, "params.max_tokens of each request")
	temp := fs.Float64("temperature", 0, "params.temperature of each request (0: greedy)")
	fs.IntVar(&cfg.PromptWords, "prompt-words", 16, "words per user message")
	mix := fs.String("mix", "interactive:1,standard:1,batch:1", "priority mix; '/' separates per-tenant mixes")
	seed := fs.Uint64("seed", 1, "seed of the users' choices")
	fs.BoolVar(&cfg.KeepSessions, "keep-sessions", false, "leave the users' sessions in the gateway")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("loadgen: unexpected arguments %q", fs.Args())
	}
	cfg.Temperature = float32(*temp)
	cfg.Seed = *seed
	mixes, err := ParseMix(*mix)
	if err != nil {
		return err
	}

	// Tokens live for the whole run and a margin: a reconnect late in the
	// run mints a fresh one anyway.
	ttl := cfg.Duration + 10*time.Minute
	switch {
	case len(tokens) > 0 || len(keys) > 0:
		for i, tok := range tokens {
			cfg.Tenants = append(cfg.Tenants, Tenant{
				Name:  fmt.Sprintf("token-%d", i),
				Token: func(string) (string, error) { return tok, nil },
			})
		}
		for _, kv := range keys {
			kid, b64, ok := strings.Cut(kv, ":")
			secret, err := base64.StdEncoding.DecodeString(b64)
			if !ok || kid == "" || err != nil {
				return fmt.Errorf("loadgen: -hs256 %q: want KID:BASE64SECRET", kv)
			}
			cfg.Tenants = append(cfg.Tenants, Tenant{Name: kid, Token: HS256Minter(kid, secret, *audience, ttl)})
		}
	default:
		if *nTenants <= 0 {
			return errors.New("loadgen: -tenants must be > 0")
		}
		url := *redisURL
		if url == "" {
			url = os.Getenv("REDIS_URL")
		}
		if url == "" {
			url = DefaultRedis
		}
		rdb, err := redisurl.Open(ctx, url)
		if err != nil {
			return fmt.Errorf("loadgen: %w", err)
		}
		defer rdb.Close()
		store := tenants.NewStore(rdb, *prefix, nil)
		for i := range *nTenants {
			spec := tenants.CreateSpec{
				ID:       fmt.Sprintf("%s-%d", *tenantPrefix, i),
				Priority: *class,
				Limits:   tenants.Limits{MaxConcurrent: *maxConc, TokensPerMinute: *tpm},
				Audience: *audience,
				Key:      tenants.KeySpec{Alg: tenants.HS256},
			}
			kid, secret, err := EnsureTenant(ctx, store, spec)
			if err != nil {
				return err
			}
			cfg.Tenants = append(cfg.Tenants, Tenant{Name: spec.ID, Token: HS256Minter(kid, secret, *audience, ttl)})
		}
	}
	for i := range cfg.Tenants {
		cfg.Tenants[i].Mix = mixes[i%len(mixes)]
	}

	rep, err := Run(ctx, cfg)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(rep)
	} else {
		err = rep.WriteTable(stdout)
	}
	if err != nil {
		return err
	}
	if rep.Total.Completed == 0 && rep.Total.Requests+rep.Total.ErrorCount() > 0 {
		return errors.New("loadgen: no request completed")
	}
	return nil
}

// ParseMix reads priority mixes: "class:weight,..." (a bare class weighs
// 1), several separated by '/'.
func ParseMix(s string) ([][]Weighted, error) {
	var out [][]Weighted
	for part := range strings.SplitSeq(s, "/") {
		var mix []Weighted
		for item := range strings.SplitSeq(part, ",") {
			item = strings.TrimSpace(item)
			if item == "" {
				continue
			}
			name, ws, hasW := strings.Cut(item, ":")
			w := 1.0
			if hasW {
				v, err := strconv.ParseFloat(ws, 64)
				if err != nil || v < 0 {
					return nil, fmt.Errorf("loadgen: mix %q: bad weight %q", s, ws)
				}
				w = v
			}
			if !validPriority(name) {
				return nil, fmt.Errorf("loadgen: mix %q: unknown class %q (want interactive, standard or batch)", s, name)
			}
			mix = append(mix, Weighted{Priority: name, Weight: w})
		}
		if len(mix) == 0 {
			return nil, fmt.Errorf("loadgen: mix %q has an empty part", s)
		}
		out = append(out, mix)
	}
	return out, nil
}

// EnsureTenant creates the tenant spec describes, or, when it exists,
// brings its class, limits and audience to spec's and enables it, so
// repeated runs reuse their tenants instead of piling up new ones. It
// returns the kid and secret of the tenant's newest HS256 key.
func EnsureTenant(ctx context.Context, store *tenants.Store, spec tenants.CreateSpec) (kid string, secret []byte, err error) {
	t, err := store.Get(ctx, spec.ID)
	switch {
	case errors.Is(err, tenants.ErrNotFound):
		if _, err = store.CreateFromSpec(ctx, spec); err != nil && !errors.Is(err, tenants.ErrExists) {
			return "", nil, fmt.Errorf("loadgen: create tenant %s: %w", spec.ID, err)
		}
		t, err = store.Get(ctx, spec.ID)
	case err == nil:
		t, err = store.Update(ctx, spec.ID, func(t *tenants.Tenant) error {
			t.Priority, t.Limits, t.Audience, t.Disabled = spec.Priority, spec.Limits, spec.Audience, false
			return nil
		})
	}
	if err != nil {
		return "", nil, fmt.Errorf("loadgen: tenant %s: %w", spec.ID, err)
	}
	for i := len(t.Keys) - 1; i >= 0; i-- {
		if k := t.Keys[i]; k.Alg == tenants.HS256 && len(k.Secret) > 0 {
			return k.ID, k.Secret, nil
		}
	}
	return "", nil, fmt.Errorf("loadgen: tenant %s has no HS256 key to sign with (add one: specgate tenant add-key %s --alg HS256)", spec.ID, spec.ID)
}

// HS256Minter returns a token source that signs a fresh token per call for
// the user, with key kid, audience aud, valid for ttl.
func HS256Minter(kid string, secret []byte, aud string, ttl time.Duration) func(user string) (string, error) {
	return func(user string) (string, error) {
		now := time.Now()
		tok := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.RegisteredClaims{
			Subject:   user,
			Audience:  jwt.ClaimStrings{aud},
			IssuedAt:  jwt.NewNumericDate(now),
			ExpiresAt: jwt.NewNumericDate(now.Add(ttl)),
		})
		tok.Header["kid"] = kid
		return tok.SignedString(secret)
	}
}
