package testredis

import (
	"context"
	"testing"
	"time"
)

func TestClientPrefixCleanup(t *testing.T) {
	rdb := Client(t)
	ctx := context.Background()
	p := Prefix(t)
	if p != Prefix(t) {
		t.Fatalf("have two prefixes for one test; want one")
	}
	if err := rdb.Set(ctx, p+"k", "v", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if err := DeletePrefix(ctx, rdb, p); err != nil {
		t.Fatal(err)
	}
	if n := rdb.Exists(ctx, p+"k").Val(); n != 0 {
		t.Fatalf("have %d keys after DeletePrefix; want 0", n)
	}
}

func TestServerKillRestartKeepsData(t *testing.T) {
	s := Start(t)
	rdb := s.Client()
	ctx := context.Background()
	if err := rdb.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	s.Kill()
	if err := rdb.Get(ctx, "k").Err(); err == nil {
		t.Fatalf("have a reply from a killed server; want an error")
	}
	s.Restart()
	if v, err := rdb.Get(ctx, "k").Result(); err != nil || v != "v" {
		t.Fatalf("have %q, %v after restart; want \"v\", nil", v, err)
	}
}

func TestClusterFailoverKeepsReplicatedData(t *testing.T) {
	c := StartCluster(t)
	rdb := c.Client()
	ctx := context.Background()
	for i := range 50 {
		if err := rdb.Set(ctx, "k"+string(rune('a'+i%26))+string(rune('a'+i/26)), i, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	// Every primary has keys: the writes spread over the three.
	n := 0
	for _, s := range c.Nodes {
		cl := nodeClient(s)
		if sz, _ := cl.DBSize(ctx).Result(); sz > 0 {
			n++
		}
		cl.Close()
	}
	if n < 3 {
		t.Fatalf("have keys on %d nodes; want at least the 3 primaries", n)
	}
	c.WaitReplicated()
	killed := c.KillPrimaryOf("kaa")
	if killed.Running() {
		t.Fatal("the killed primary is still running")
	}
	if v, err := rdb.Get(ctx, "kaa").Int(); err != nil || v != 0 {
		t.Fatalf("have %d, %v after failover; want 0", v, err)
	}
}
