package gateway

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/specgate/specgate/internal/keyspace"
	"github.com/specgate/specgate/internal/testredis"
)

// TestClusterFailoverMidChat kills the Redis Cluster primary that holds a
// session while its reply streams. Its replica takes over; the chat goes
// on without an error, and nothing the client was shown or told was
// stored is lost: the history holds both messages and a resume from the
// start replays the whole reply from the log.
func TestClusterFailoverMidChat(t *testing.T) {
	if testredis.IsClusterURL() {
		t.Skip("starts a cluster of its own: runs once, in the single-server pass")
	}
	c := testredis.StartCluster(t)
	const prefix = "fo:"
	chatThroughFailover(t, c.Client(), prefix, func(sid string) {
		killed := c.KillPrimaryOf(keyspace.New(prefix).Session(sid))
		t.Logf("killed primary %s mid-chat", killed.Addr())
	})
}

// TestSentinelFailoverMidChat is the same with a Sentinel-managed primary.
func TestSentinelFailoverMidChat(t *testing.T) {
	if testredis.IsClusterURL() {
		t.Skip("starts a Sentinel group of its own: runs once, in the single-server pass")
	}
	g := testredis.StartSentinel(t)
	chatThroughFailover(t, g.Client(), "fo:", func(string) { g.KillPrimary() })
}

// chatThroughFailover streams a reply over rdb and calls kill (with the
// session id) half way through.
func chatThroughFailover(t *testing.T, rdb redis.UniversalClient, prefix string, kill func(sid string)) {
	e := newEnv(t, rdb, prefix, func(o *Options) {
		o.WriteTimeout = 20 * time.Second
		o.PersistTimeout = 20 * time.Second
	})
	e.gen.gate = make(chan struct{}, 100)
	alice := e.rawLogin("alice")
	sid := rawSession(t, alice)
	content := "one two three four five six seven eight nine ten"
	want := fakeReply(content)
	words := strings.SplitAfter(want, " ")
	alice.SendJSON(map[string]any{"type": "chat", "session": sid, "request": "r1", "content": content})

	// The first half streams before the failover.
	half := len(words) / 2
	var shown strings.Builder
	for i := range half {
		e.gen.gate <- struct{}{}
		f := alice.Read()
		if f.Type != "delta" || f.Seq != i+1 {
			t.Fatalf("have %+v; want delta %d", f, i+1)
		}
		shown.WriteString(f.Text)
	}
	// The rest is generated while the primary dies and its replica is
	// promoted: those appends wait and retry.
	go func() {
		for range len(words) - half {
			e.gen.gate <- struct{}{}
			time.Sleep(150 * time.Millisecond)
		}
	}()
	kill(sid)

	rest, done, errs := alice.Collect("r1", half)
	if len(errs) > 0 || done.FinishReason != "stop" {
		t.Fatalf("have errors %+v, done %+v; want the chat to finish", errs, done)
	}
	if got := shown.String() + rest; got != want {
		t.Fatalf("client saw %q; want %q", got, want)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	v, err := e.srv.sessions.Get(ctx, "acme", "alice", sid)
	if err != nil {
		t.Fatal(err)
	}
	if len(v.Messages) != 2 || v.Messages[0].Content != content || v.Messages[1].Content != want {
		t.Fatalf("have history %+v; want the user message and the whole reply", v.Messages)
	}
	again := e.rawLogin("alice")
	again.SendJSON(map[string]any{"type": "session.resume", "session": sid, "request": "r1", "after": 0})
	if f := again.Read(); f.Type != "session" {
		t.Fatalf("have %+v; want the session first", f)
	}
	text, done, errs := again.Collect("r1", 0)
	if text != want || len(errs) > 0 || done.FinishReason != "stop" {
		t.Fatalf("resume from 0: have %q, %+v, %+v; want the whole reply", text, done, errs)
	}
}
