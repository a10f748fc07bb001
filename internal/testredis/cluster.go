package testredis

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/specgate/specgate/internal/redisurl"
)

// Cluster is a private Redis Cluster of three primaries, each with one
// replica: six redis-server processes with AOF (fsync every second) on
// loopback ports, joined with `redis-cli --cluster create`, as
// deploy/redis-cluster.sh builds the project's own. A node that fails is
// replaced by its replica within about two seconds (node timeout 1s).
type Cluster struct {
	tb    testing.TB
	Nodes []*Server
}

// StartCluster starts a cluster for tb and stops it at cleanup. It skips
// tb (fails it under CI=true) when redis-server or redis-cli is missing.
func StartCluster(tb testing.TB) *Cluster {
	tb.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		unavailable(tb, "redis-server is not installed; run deploy/redis.sh to install it")
	}
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		unavailable(tb, "redis-cli is not installed (it comes with redis-server)")
	}
	c := &Cluster{tb: tb}
	tb.Cleanup(c.stop)
	used := map[int]bool{}
	for i := range 6 {
		s := &Server{tb: tb, bin: bin, dir: filepath.Join(tb.TempDir(), "node"+strconv.Itoa(i)), args: []string{
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "1000",
			// A replica that lost its primary for a moment may still be
			// promoted: the test kills primaries on purpose.
			"--cluster-replica-validity-factor", "0",
			"--appendonly", "yes",
			"--appendfsync", "everysec",
			"--save", "",
		}}
		if err := os.MkdirAll(s.dir, 0o755); err != nil {
			tb.Fatal(err)
		}
		// A free port can be taken between the probe and the start (by
		// another test binary's server); retry with another, as Start does.
		var err error
		for range 5 {
			s.port = clusterPort(tb, used)
			used[s.port] = true
			if err = s.start(); err == nil {
				break
			}
		}
		if err != nil {
			tb.Fatalf("testredis: start cluster node %d: %v", i, err)
		}
		c.Nodes = append(c.Nodes, s)
	}
	args := []string{"--cluster", "create"}
	for _, s := range c.Nodes {
		args = append(args, s.Addr())
	}
	args = append(args, "--cluster-replicas", "1", "--cluster-yes")
	if out, err := exec.Command(cli, args...).CombinedOutput(); err != nil {
		tb.Fatalf("testredis: redis-cli --cluster create: %v\n%s", err, tail(out, 1500))
	}
	c.WaitHealthy()
	return c
}

// clusterPort picks a free port, not in used, whose cluster bus port
// (port+10000) is free too. Both lie below 32768, where Linux starts
// handing out ports to outgoing connections, so a client of another test
// cannot take one between the probe and the start.
func clusterPort(tb testing.TB, used map[int]bool) int {
	for range 1000 {
		p := 12000 + rand.IntN(10000)
		if !used[p] && portFree(p) && portFree(p+10000) {
			return p
		}
	}
	tb.Fatalf("testredis: no free port pair for a cluster node")
	return 0
}

func portFree(p int) bool {
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

func (c *Cluster) stop() {
	for _, s := range c.Nodes {
		s.Kill()
	}
}

// URL is the cluster's redis+cluster:// URL, naming every node.
func (c *Cluster) URL() string {
	addrs := make([]string, len(c.Nodes))
	for i, s := range c.Nodes {
		addrs[i] = s.Addr()
	}
	return "redis+cluster://" + strings.Join(addrs, ",")
}

// Client returns a cluster client, closed at cleanup, built as the
// service builds its own (internal/redisurl), with short timeouts so that
// a failover shows as a few retried commands.
func (c *Cluster) Client() redis.UniversalClient {
	cfg, err := redisurl.Parse(c.URL() + "?dial_timeout=300ms&read_timeout=1s&write_timeout=1s")
	if err != nil {
		c.tb.Fatal(err)
	}
	rdb := cfg.NewClient()
	c.tb.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// nodeClient talks to one node alone.
func nodeClient(s *Server) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: s.Addr(), DialTimeout: 200 * time.Millisecond, MaxRetries: -1})
}

// WaitHealthy waits until every live node reports cluster_state:ok, every
// slot is served, and every live replica is in sync with its primary.
func (c *Cluster) WaitHealthy() {
	c.tb.Helper()
	deadline := time.Now().Add(20 * time.Second)
	var why string
	for time.Now().Before(deadline) {
		why = c.unhealthy()
		if why == "" {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.tb.Fatalf("testredis: cluster not healthy after 20s: %s", why)
}

func (c *Cluster) unhealthy() string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, s := range c.Nodes {
		if !s.Running() {
			continue
		}
		rdb := nodeClient(s)
		info, err := rdb.ClusterInfo(ctx).Result()
		if err == nil && !strings.Contains(info, "cluster_state:ok") {
			err = fmt.Errorf("state not ok")
		}
		if err == nil && !strings.Contains(info, "cluster_slots_ok:16384") {
			err = fmt.Errorf("not every slot ok")
		}
		var repl string
		if err == nil {
			repl, err = rdb.Info(ctx, "replication").Result()
		}
		rdb.Close()
		if err != nil {
			return s.Addr() + ": " + err.Error()
		}
		if strings.Contains(repl, "role:slave") && !strings.Contains(repl, "master_link_status:up") {
			return s.Addr() + ": replica not in sync"
		}
	}
	return ""
}

// WaitReplicated waits until every live replica has all its primary's
// writes so far.
func (c *Cluster) WaitReplicated() {
	c.tb.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if c.replicated() {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.tb.Fatalf("testredis: replicas not caught up after 10s")
}

func (c *Cluster) replicated() bool {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, s := range c.Nodes {
		if !s.Running() {
			continue
		}
		rdb := nodeClient(s)
		info, err := rdb.Info(ctx, "replication").Result()
		rdb.Close()
		if err != nil {
			return false
		}
		if !strings.Contains(info, "role:master") {
			continue
		}
		var master string
		for _, line := range strings.Split(info, "\r\n") {
			if v, ok := strings.CutPrefix(line, "master_repl_offset:"); ok {
				master = v
			}
		}
		for _, line := range strings.Split(info, "\r\n") {
			if strings.HasPrefix(line, "slave") && strings.Contains(line, "offset=") {
				_, off, _ := strings.Cut(line, "offset=")
				off, _, _ = strings.Cut(off, ",")
				if off != master {
					return false
				}
			}
		}
	}
	return true
}

// PrimaryOf returns the node that serves key now.
func (c *Cluster) PrimaryOf(key string) *Server {
	c.tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, s := range c.Nodes {
		if !s.Running() {
			continue
		}
		rdb := nodeClient(s)
		slot, err := rdb.ClusterKeySlot(ctx, key).Result()
		var slots []redis.ClusterSlot
		if err == nil {
			slots, err = rdb.ClusterSlots(ctx).Result()
		}
		rdb.Close()
		if err != nil {
			continue
		}
		for _, r := range slots {
			if int64(r.Start) <= slot && slot <= int64(r.End) && len(r.Nodes) > 0 {
				for _, n := range c.Nodes {
					if n.Addr() == r.Nodes[0].Addr {
						return n
					}
				}
			}
		}
	}
	c.tb.Fatalf("testredis: no live node serves %q", key)
	return nil
}

// KillPrimaryOf kills the primary serving key, as a crash would, and waits
// until its replica has taken over and the cluster is whole again (the
// killed node stays down). It returns the killed node.
func (c *Cluster) KillPrimaryOf(key string) *Server {
	c.tb.Helper()
	p := c.PrimaryOf(key)
	p.Kill()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if c.unhealthy() == "" && c.PrimaryOf(key) != p {
			return p
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.tb.Fatalf("testredis: no replica took over %q within 20s", key)
	return nil
}
