package cluster

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/specgate/specgate/internal/testredis"
)

// warmEngine is the fake engine with session warmth: it records what it
// is told.
type warmEngine struct {
	*fakeEngine
	calls chan warmCall
}

type warmCall struct {
	session string
	live    bool
}

func (e warmEngine) SetSessionLive(s string, live bool) { e.calls <- warmCall{s, live} }

// warmTTL is the engine's heartbeat TTL in the warmth tests: a session
// whose word the engine has not heard for this long goes idle. 15 of the
// gateways' 100 ms announcements, not fastEngine's 4: an announcer a busy
// machine delays a few hundred ms must not let a live session lapse,
// and a test that checks a session stays live past the TTL waits longer.
const warmTTL = 1500 * time.Millisecond

func warmEngineOptions(rdb redis.UniversalClient, prefix string, eng warmEngine) EngineOptions {
	o := fastEngine(rdb, prefix, "e1", eng)
	o.HeartbeatTTL = warmTTL
	return o
}

// TestSessionWarmth: a gateway's word on live sessions reaches the engine
// over Redis, once per change; nested live calls need as many idle ones;
// and a session whose gateway stops announcing it (lost message, dead
// gateway) goes idle on the engine after the heartbeat TTL.
func TestSessionWarmth(t *testing.T) {
	rdb := testredis.Client(t)
	prefix := testredis.Prefix(t)
	eng := warmEngine{newFakeEngine(0), make(chan warmCall, 64)}
	startEngine(t, warmEngineOptions(rdb, prefix, eng))
	c := fastClient(t, rdb, prefix)
	waitEngines(t, c, 1)
	next := func(d time.Duration) (warmCall, bool) {
		select {
		case got := <-eng.calls:
			return got, true
		case <-time.After(d):
			return warmCall{}, false
		}
	}
	// The engine may subscribe after the first announcement: the next
	// heartbeat's repeats it.
	c.SetSessionLive("s1", true)
	if got, ok := next(3 * time.Second); !ok || got != (warmCall{"s1", true}) {
		t.Fatalf("have %+v (%v); want s1 live", got, ok)
	}
	c.SetSessionLive("s1", true) // a second socket on the same session
	c.SetSessionLive("s1", false)
	// Re-announced every heartbeat, it stays live past the TTL, with no
	// repeated call.
	if got, ok := next(warmTTL + 500*time.Millisecond); ok {
		t.Fatalf("have %+v; want nothing while a socket still uses s1", got)
	}
	c.SetSessionLive("s1", false)
	if got, ok := next(3 * time.Second); !ok || got != (warmCall{"s1", false}) {
		t.Fatalf("have %+v (%v); want s1 idle", got, ok)
	}

	c.SetSessionLive("s2", true)
	if got, ok := next(3 * time.Second); !ok || got != (warmCall{"s2", true}) {
		t.Fatalf("have %+v (%v); want s2 live", got, ok)
	}
	_ = c.Close() // the gateway goes without a word
	start := time.Now()
	if got, ok := next(warmTTL + 3*time.Second); !ok || got != (warmCall{"s2", false}) {
		t.Fatalf("have %+v (%v); want s2 idle once no gateway announces it", got, ok)
	}
	if d := time.Since(start); d < warmTTL/2 {
		t.Fatalf("s2 went idle %v after the gateway stopped; want after the heartbeat TTL", d)
	}
}

// TestSessionWarmthPerGateway: a session live on two gateways (a user who
// reconnected through another one while the old socket lingers) stays
// live when the first gateway's socket closes; it goes idle only when the
// second's does too.
func TestSessionWarmthPerGateway(t *testing.T) {
	rdb := testredis.Client(t)
	prefix := testredis.Prefix(t)
	eng := warmEngine{newFakeEngine(0), make(chan warmCall, 64)}
	startEngine(t, warmEngineOptions(rdb, prefix, eng))
	a, b := fastClient(t, rdb, prefix), fastClient(t, rdb, prefix)
	waitEngines(t, a, 1)
	next := func(d time.Duration) (warmCall, bool) {
		select {
		case got := <-eng.calls:
			return got, true
		case <-time.After(d):
			return warmCall{}, false
		}
	}
	a.SetSessionLive("s1", true)
	if got, ok := next(3 * time.Second); !ok || got != (warmCall{"s1", true}) {
		t.Fatalf("have %+v (%v); want s1 live", got, ok)
	}
	// b's word must reach the engine before a's idle: once it is
	// published, the engine, subscribed to the same channel, reads it
	// before anything published later.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ps := rdb.Subscribe(ctx, newKeys(prefix).warmth())
	defer ps.Close()
	if _, err := ps.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	b.SetSessionLive("s1", true)
	for {
		msg, err := ps.ReceiveMessage(ctx)
		if err != nil {
			t.Fatalf("b's word on s1 was not published: %v", err)
		}
		var m warmthMsg
		if err := json.Unmarshal([]byte(msg.Payload), &m); err != nil {
			t.Fatal(err)
		}
		if m.Gateway == b.ID() && slices.Contains(m.Live, "s1") {
			break
		}
	}
	a.SetSessionLive("s1", false)
	// Past the heartbeat TTL too: b keeps announcing it.
	if got, ok := next(warmTTL + 500*time.Millisecond); ok {
		t.Fatalf("have %+v; want s1 to stay live while gateway b holds it", got)
	}
	b.SetSessionLive("s1", false)
	if got, ok := next(3 * time.Second); !ok || got != (warmCall{"s1", false}) {
		t.Fatalf("have %+v (%v); want s1 idle once neither gateway holds it", got, ok)
	}
}
