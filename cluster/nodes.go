package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"strconv"
	"time"

	"crypto/rand"
	"encoding/hex"

	"github.com/redis/go-redis/v9"

	"github.com/specgate/specgate/engine"
)

// NodeInfo is one live process as its heartbeat describes it.
type NodeInfo struct {
	Role string `json:"role"`
	ID   string `json:"id"`
	// Addr is where the node serves HTTP ("" when it does not).
	Addr string `json:"addr,omitempty"`
	// Load is the requests in flight: an engine's running and queued
	// requests, a gateway's open streams.
	Load int `json:"load"`
	// Capacity is how many requests an engine takes at once (0 for
	// gateways: unbounded).
	Capacity int `json:"capacity,omitempty"`
	// FreeKV is an engine's free device KV blocks, -1 when unknown.
	FreeKV int `json:"free_kv_blocks"`
	// Model is the model an engine serves (nil for gateways, and for
	// engines that do not say), so gateways without one can name it.
	Model   *engine.ModelCard `json:"model,omitempty"`
	Started time.Time         `json:"started"`
	Seen    time.Time         `json:"seen"`
}

// Saturated reports whether an engine has no free slot.
func (n NodeInfo) Saturated() bool { return n.Capacity > 0 && n.Load >= n.Capacity }

// NewID returns a node id that is unique across restarts: host, pid and a
// random suffix.
func NewID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "node"
	}
	var b [3]byte
	_, _ = rand.Read(b[:])
	return host + "-" + strconv.Itoa(os.Getpid()) + "-" + hex.EncodeToString(b[:])
}

// beat writes n's heartbeat, valid for ttl.
func beat(ctx context.Context, rdb redis.UniversalClient, k keys, n NodeInfo, ttl time.Duration) error {
	n.Seen = time.Now()
	b, err := json.Marshal(n)
	if err != nil {
		return fmt.Errorf("cluster: heartbeat: %w", err)
	}
	member := n.Role + "/" + n.ID
	_, err = rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, k.node(member), b, ttl)
		p.ZAdd(ctx, k.nodes(), redis.Z{Score: float64(n.Seen.Add(ttl).UnixMilli()), Member: member})
		// Members of nodes that vanished without saying goodbye.
		p.ZRemRangeByScore(ctx, k.nodes(), "-inf", "("+strconv.FormatInt(n.Seen.Add(-time.Minute).UnixMilli(), 10))
		return nil
	})
	if err != nil {
		return fmt.Errorf("cluster: heartbeat: %w", err)
	}
	return nil
}

// farewell removes n's heartbeat so others stop routing to it at once.
func farewell(rdb redis.UniversalClient, k keys, role, id string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, _ = rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Del(ctx, k.node(role+"/"+id))
		p.ZRem(ctx, k.nodes(), role+"/"+id)
		return nil
	})
}

// heartbeat writes info() every interval until ctx ends, then removes it.
// Failures are logged once per outage: a node keeps working through a
// Redis restart and its next beat makes it live again.
func heartbeat(ctx context.Context, rdb redis.UniversalClient, k keys, interval, ttl time.Duration, info func() NodeInfo, log *slog.Logger) {
	t := time.NewTicker(interval)
	defer t.Stop()
	failing := false
	for {
		n := info()
		cctx, cancel := context.WithTimeout(ctx, interval)
		err := beat(cctx, rdb, k, n, ttl)
		cancel()
		switch {
		case err != nil && ctx.Err() == nil && !failing:
			failing = true
			log.Warn("cluster: heartbeat failing", "role", n.Role, "id", n.ID, "err", err)
		case err == nil && failing:
			failing = false
			log.Info("cluster: heartbeat restored", "role", n.Role, "id", n.ID)
		}
		select {
		case <-ctx.Done():
			farewell(rdb, k, n.Role, n.ID)
			return
		case <-t.C:
		}
	}
}

// Nodes lists the live gateways and engines of the deployment under
// prefix, sorted by role then id.
func Nodes(ctx context.Context, rdb redis.UniversalClient, prefix string) ([]NodeInfo, error) {
	k := newKeys(prefix)
	now := strconv.FormatInt(time.Now().UnixMilli(), 10)
	members, err := rdb.ZRangeByScore(ctx, k.nodes(), &redis.ZRangeBy{Min: now, Max: "+inf"}).Result()
	if err != nil {
		return nil, fmt.Errorf("cluster: list nodes: %w", err)
	}
	if len(members) == 0 {
		return nil, nil
	}
	ks := make([]string, len(members))
	for i, m := range members {
		ks[i] = k.node(m)
	}
	vals, err := rdb.MGet(ctx, ks...).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("cluster: read nodes: %w", err)
	}
	out := make([]NodeInfo, 0, len(vals))
	for _, v := range vals {
		s, ok := v.(string)
		if !ok {
			continue // expired between the two reads
		}
		var n NodeInfo
		if json.Unmarshal([]byte(s), &n) != nil {
			continue // a newer writer's format: not ours to judge
		}
		out = append(out, n)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Role != out[j].Role {
			return out[i].Role < out[j].Role
		}
		return out[i].ID < out[j].ID
	})
	return out, nil
}

// engines keeps the live engines of Nodes' answer.
func engines(ns []NodeInfo) []NodeInfo {
	out := ns[:0:0]
	for _, n := range ns {
		if n.Role == RoleEngine {
			out = append(out, n)
		}
	}
	return out
}
