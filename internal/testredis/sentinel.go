package testredis

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/specgate/specgate/internal/redisurl"
)

// SentinelMaster is the name the Sentinel group monitors.
const SentinelMaster = "specgate"

// SentinelGroup is a private primary with one replica (AOF, fsync every
// second) watched by one Sentinel that declares the primary down after
// one second without an answer and promotes the replica.
type SentinelGroup struct {
	tb       testing.TB
	Primary  *Server
	Replica  *Server
	Sentinel *Server
}

// StartSentinel starts a Sentinel group for tb and stops it at cleanup.
func StartSentinel(tb testing.TB) *SentinelGroup {
	tb.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		unavailable(tb, "redis-server is not installed; run deploy/redis.sh to install it")
	}
	g := &SentinelGroup{tb: tb}
	tb.Cleanup(func() {
		for _, s := range []*Server{g.Sentinel, g.Replica, g.Primary} {
			if s != nil {
				s.Kill()
			}
		}
	})
	data := []string{"--appendonly", "yes", "--appendfsync", "everysec", "--save", ""}
	start := func(args []string, conf string) *Server {
		tb.Helper()
		var lastErr error
		for range 5 {
			port, err := freePort()
			if err != nil {
				tb.Fatal(err)
			}
			s := &Server{tb: tb, bin: bin, dir: tb.TempDir(), port: port, args: args, conf: conf}
			if conf != "" {
				// Sentinel rewrites its config file: each try its own copy.
				b, err := os.ReadFile(conf)
				if err != nil {
					tb.Fatal(err)
				}
				s.conf = filepath.Join(s.dir, "sentinel.conf")
				if err := os.WriteFile(s.conf, b, 0o644); err != nil {
					tb.Fatal(err)
				}
			}
			if lastErr = s.start(); lastErr == nil {
				return s
			}
		}
		tb.Fatalf("testredis: start Sentinel group member: %v", lastErr)
		return nil
	}
	g.Primary = start(data, "")
	g.Replica = start(append([]string{"--replicaof", "127.0.0.1", fmt.Sprint(g.Primary.port)}, data...), "")
	conf := filepath.Join(tb.TempDir(), "sentinel.conf")
	body := fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d 1\nsentinel down-after-milliseconds %s 1000\nsentinel failover-timeout %s 5000\n",
		SentinelMaster, g.Primary.port, SentinelMaster, SentinelMaster)
	if err := os.WriteFile(conf, []byte(body), 0o644); err != nil {
		tb.Fatal(err)
	}
	g.Sentinel = start([]string{"--sentinel"}, conf)
	g.waitSynced(g.Primary)
	return g
}

// URL is the group's redis+sentinel:// URL.
func (g *SentinelGroup) URL() string {
	return "redis+sentinel://" + g.Sentinel.Addr() + "/" + SentinelMaster
}

// Client returns a Sentinel-aware client, closed at cleanup, built as the
// service builds its own.
func (g *SentinelGroup) Client() redis.UniversalClient {
	cfg, err := redisurl.Parse(g.URL() + "?dial_timeout=300ms&read_timeout=1s&write_timeout=1s")
	if err != nil {
		g.tb.Fatal(err)
	}
	rdb := cfg.NewClient()
	g.tb.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// master asks the Sentinel for the primary's address.
func (g *SentinelGroup) master(ctx context.Context) (string, error) {
	sc := redis.NewSentinelClient(&redis.Options{Addr: g.Sentinel.Addr(), DialTimeout: 200 * time.Millisecond})
	defer sc.Close()
	addr, err := sc.GetMasterAddrByName(ctx, SentinelMaster).Result()
	if err != nil {
		return "", err
	}
	return addr[0] + ":" + addr[1], nil
}

// waitSynced waits until the Sentinel names primary and the replica is in
// sync with it.
func (g *SentinelGroup) waitSynced(primary *Server) {
	g.tb.Helper()
	deadline := time.Now().Add(20 * time.Second)
	var why error
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		addr, err := g.master(ctx)
		var info string
		if err == nil && addr == primary.Addr() {
			rdb := nodeClient(g.Replica)
			info, err = rdb.Info(ctx, "replication").Result()
			rdb.Close()
		} else if err == nil {
			err = fmt.Errorf("sentinel names %s", addr)
		}
		cancel()
		if err == nil && strings.Contains(info, "master_link_status:up") {
			return
		}
		why = err
		time.Sleep(50 * time.Millisecond)
	}
	g.tb.Fatalf("testredis: Sentinel group not ready after 20s: %v", why)
}

// KillPrimary kills the primary, as a crash would, and waits until the
// Sentinel has promoted the replica and it serves writes.
func (g *SentinelGroup) KillPrimary() {
	g.tb.Helper()
	g.Primary.Kill()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		addr, err := g.master(ctx)
		var role string
		if err == nil && addr == g.Replica.Addr() {
			rdb := nodeClient(g.Replica)
			role, err = rdb.Info(ctx, "replication").Result()
			rdb.Close()
		}
		cancel()
		if err == nil && strings.Contains(role, "role:master") {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	g.tb.Fatalf("testredis: the Sentinel did not promote the replica within 30s")
}
