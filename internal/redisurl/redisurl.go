// Package redisurl turns the one Redis URL every specgate role and
// subcommand takes (--redis, $REDIS_URL) into a go-redis client: a single
// server, a Redis Cluster or a Sentinel-managed primary.
//
//	redis://[user:password@]host:port[/db][?options]         one server
//	rediss://…                                                the same over TLS
//	unix://[user:password@]/path/to/socket[?db=N]            one server, local socket
//	redis+cluster://[user:password@]h1:p1,h2:p2,…[?options]  a cluster (any of its nodes)
//	rediss+cluster://…                                        the same over TLS
//	redis+sentinel://[user:password@]s1:p1,s2:p2,…/master[/db][?options]
//	rediss+sentinel://…                                       the same over TLS
//
// More seed addresses may also be given as repeated addr=host:port options
// (redis+cluster://h1:p1?addr=h2:p2&addr=h3:p3). For Sentinel, user and
// password authenticate to the Redis servers; the Sentinels' own
// credentials, when they have them, are the sentinel_username and
// sentinel_password options. Other options are go-redis's URL options
// (dial_timeout=3s, pool_size=20, skip_verify=true for Sentinel over TLS, …);
// an unknown one is an error.
package redisurl

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Kind is the deployment a URL names.
type Kind string

// Kinds of deployment.
const (
	Single   Kind = "single"
	Cluster  Kind = "cluster"
	Sentinel Kind = "sentinel"
)

// Config is a parsed URL: Kind says which of the options is set.
type Config struct {
	Kind     Kind
	Single   *redis.Options
	Cluster  *redis.ClusterOptions
	Failover *redis.FailoverOptions
}

// Addrs are the addresses the URL names (seeds for a cluster, Sentinels for
// Sentinel), for messages.
func (c *Config) Addrs() []string {
	switch c.Kind {
	case Cluster:
		return c.Cluster.Addrs
	case Sentinel:
		return c.Failover.SentinelAddrs
	}
	return []string{c.Single.Addr}
}

// NewClient builds the client; it does not connect.
func (c *Config) NewClient() redis.UniversalClient {
	switch c.Kind {
	case Cluster:
		o := *c.Cluster
		h := &reloadOnNetError{}
		if o.Dialer == nil {
			d := &net.Dialer{Timeout: o.DialTimeout, KeepAlive: 5 * time.Minute}
			if d.Timeout == 0 {
				d.Timeout = 5 * time.Second
			}
			o.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
				conn, err := d.DialContext(ctx, network, addr)
				if err != nil {
					h.check(ctx, err)
				}
				return conn, err
			}
		}
		if o.DialerRetries == 0 {
			// A node that refuses a connection is gone, not slow: try
			// the slot map again rather than the same address five times.
			o.DialerRetries = 1
		}
		h.cc = redis.NewClusterClient(&o)
		h.cc.AddHook(h)
		return h.cc
	case Sentinel:
		return redis.NewFailoverClient(c.Failover)
	}
	return redis.NewClient(c.Single)
}

// reloadOnNetError re-reads a cluster's slot map as soon as a command fails
// with anything but a Redis reply. go-redis re-reads it on MOVED, but a
// primary that died answers nothing, and the map would name it for up to
// a minute; after a failover, the promoted replica is found at the next
// command instead.
type reloadOnNetError struct{ cc *redis.ClusterClient }

func (h *reloadOnNetError) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *reloadOnNetError) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.check(ctx, err)
		return err
	}
}

func (h *reloadOnNetError) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		h.check(ctx, err)
		return err
	}
}

func (h *reloadOnNetError) check(ctx context.Context, err error) {
	var rerr redis.Error
	if err == nil || errors.Is(err, redis.Nil) || errors.Is(err, context.Canceled) {
		return
	}
	if errors.As(err, &rerr) && !strings.HasPrefix(err.Error(), "CLUSTERDOWN") {
		return // a reply: the node is there
	}
	if h.cc != nil {
		h.cc.ReloadState(ctx)
	}
}

// Parse reads a URL of any of the package's forms. Errors never repeat the
// password.
func Parse(raw string) (*Config, error) {
	c, err := parse(raw)
	if err != nil {
		return nil, fmt.Errorf("redis URL %q: %w", Redact(raw), scrub(err, raw))
	}
	return c, nil
}

func parse(raw string) (*Config, error) {
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return nil, errors.New("want scheme://…: redis, rediss, unix, redis+cluster, rediss+cluster, redis+sentinel or rediss+sentinel")
	}
	base, kind, _ := strings.Cut(strings.ToLower(scheme), "+")
	if base != "redis" && base != "rediss" && !(base == "unix" && kind == "") {
		return nil, fmt.Errorf("unknown scheme %q", scheme)
	}
	switch kind {
	case "":
		if base != "unix" && strings.Contains(authority(rest), ",") {
			return nil, errors.New("several addresses: use redis+cluster:// for a cluster or redis+sentinel:// for Sentinel")
		}
		o, err := redis.ParseURL(raw)
		if err != nil {
			return nil, err
		}
		return &Config{Kind: Single, Single: o}, nil
	case "cluster":
		return parseCluster(base, rest)
	case "sentinel":
		return parseSentinel(base, rest)
	}
	return nil, fmt.Errorf("unknown scheme %q", scheme)
}

// authority is the userinfo@hosts part of what follows "scheme://".
func authority(rest string) string {
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		return rest[:i]
	}
	return rest
}

// split breaks what follows "scheme://" into userinfo, the host list, the
// path and the query.
func split(rest string) (user *url.Userinfo, hosts []string, path string, q url.Values, err error) {
	auth := authority(rest)
	tail := rest[len(auth):]
	if i := strings.IndexByte(tail, '#'); i >= 0 {
		tail = tail[:i]
	}
	path, query, _ := strings.Cut(tail, "?")
	if q, err = url.ParseQuery(query); err != nil {
		return nil, nil, "", nil, fmt.Errorf("options: %w", err)
	}
	if i := strings.LastIndexByte(auth, '@'); i >= 0 {
		u, err := url.Parse("redis://" + auth[:i+1] + "h")
		if err != nil {
			return nil, nil, "", nil, errors.New("bad user:password (escape special characters with %XX)")
		}
		user, auth = u.User, auth[i+1:]
	}
	for _, h := range strings.Split(auth, ",") {
		if h == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(h); err != nil {
			h = net.JoinHostPort(h, "6379")
		}
		hosts = append(hosts, h)
	}
	for _, h := range q["addr"] {
		if _, _, err := net.SplitHostPort(h); err != nil {
			return nil, nil, "", nil, fmt.Errorf("addr=%s: want host:port", h)
		}
		hosts = append(hosts, h)
	}
	q.Del("addr")
	if len(hosts) == 0 {
		return nil, nil, "", nil, errors.New("no address")
	}
	return user, hosts, path, q, nil
}

// goRedisURL is the URL form go-redis parses: one host, the rest as addr=.
func goRedisURL(base string, user *url.Userinfo, hosts []string, path string, q url.Values) string {
	for _, h := range hosts[1:] {
		q.Add("addr", h)
	}
	u := url.URL{Scheme: base, User: user, Host: hosts[0], Path: path, RawQuery: q.Encode()}
	return u.String()
}

func parseCluster(base, rest string) (*Config, error) {
	user, hosts, path, q, err := split(rest)
	if err != nil {
		return nil, err
	}
	if p := strings.Trim(path, "/"); p != "" && p != "0" {
		return nil, fmt.Errorf("a cluster has only database 0; have path %q", path)
	}
	o, err := redis.ParseClusterURL(goRedisURL(base, user, hosts, "", q))
	if err != nil {
		return nil, err
	}
	return &Config{Kind: Cluster, Cluster: o}, nil
}

func parseSentinel(base, rest string) (*Config, error) {
	user, hosts, path, q, err := split(rest)
	if err != nil {
		return nil, err
	}
	parts := strings.FieldsFunc(path, func(r rune) bool { return r == '/' })
	if len(parts) == 0 || len(parts) > 2 {
		return nil, errors.New("want redis+sentinel://host:port,…/mastername[/db]")
	}
	master := parts[0]
	if m, err := url.PathUnescape(master); err == nil {
		master = m
	}
	q.Set("master_name", master)
	if len(parts) == 2 {
		q.Set("db", parts[1])
	}
	// go-redis reads the Sentinels' credentials from the userinfo and the
	// servers' from options; this URL form has them the other way round,
	// as the servers' are the ones every deployment has.
	if user != nil {
		q.Set("username", user.Username())
		if pw, ok := user.Password(); ok {
			q.Set("password", pw)
		}
	}
	var suser *url.Userinfo
	if su, sp := q.Get("sentinel_username"), q.Get("sentinel_password"); su != "" || sp != "" {
		suser = url.UserPassword(su, sp)
	}
	q.Del("sentinel_username")
	q.Del("sentinel_password")
	o, err := redis.ParseFailoverURL(goRedisURL(base, suser, hosts, "", q))
	if err != nil {
		return nil, err
	}
	return &Config{Kind: Sentinel, Failover: o}, nil
}

// Redact returns raw with its passwords replaced by "xxxxx", for logs and
// errors.
func Redact(raw string) string {
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return raw
	}
	auth := authority(rest)
	if i := strings.LastIndexByte(auth, '@'); i >= 0 {
		if u, _, ok := strings.Cut(auth[:i], ":"); ok {
			rest = u + ":xxxxx" + rest[i:]
		}
	}
	out := scheme + "://" + rest
	if i := strings.IndexByte(out, '?'); i >= 0 {
		if q, err := url.ParseQuery(out[i+1:]); err == nil {
			for _, k := range []string{"password", "sentinel_password"} {
				if q.Has(k) {
					q.Set(k, "xxxxx")
				}
			}
			out = out[:i+1] + q.Encode()
		}
	}
	return out
}

// scrub keeps a password out of an error that quotes the URL.
func scrub(err error, raw string) error {
	msg := err.Error()
	red := msg
	for _, pw := range passwords(raw) {
		if pw != "" {
			red = strings.ReplaceAll(red, pw, "xxxxx")
		}
	}
	if red == msg {
		return err
	}
	return errors.New(red)
}

func passwords(raw string) []string {
	var out []string
	_, rest, _ := strings.Cut(raw, "://")
	auth := authority(rest)
	if i := strings.LastIndexByte(auth, '@'); i >= 0 {
		if _, pw, ok := strings.Cut(auth[:i], ":"); ok {
			out = append(out, pw)
			if u, err := url.PathUnescape(pw); err == nil {
				out = append(out, u)
			}
		}
	}
	if i := strings.IndexByte(rest, '?'); i >= 0 {
		if q, err := url.ParseQuery(rest[i+1:]); err == nil {
			out = append(out, q.Get("password"), q.Get("sentinel_password"))
		}
	}
	return out
}

// ErrUnreachable is Open's error when the URL parses but the server does
// not answer: a caller may add where the URL came from and what to do.
var ErrUnreachable = errors.New("cannot reach Redis")

// Open parses raw, connects and checks that the server answers, so a wrong
// address is one clear error at start rather than a failure at the first
// request.
func Open(ctx context.Context, raw string) (redis.UniversalClient, error) {
	c, err := Parse(raw)
	if err != nil {
		return nil, err
	}
	rdb := c.NewClient()
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := rdb.Ping(pctx).Err(); err != nil {
		_ = rdb.Close()
		return nil, fmt.Errorf("%w (%s) at %s: %w", ErrUnreachable, c.Kind, strings.Join(c.Addrs(), ","), err)
	}
	return rdb, nil
}
