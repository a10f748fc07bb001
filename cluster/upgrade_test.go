package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/internal/testredis"
)

// TestOldEngineRefusalIsHeard: an engine of an earlier version cannot run
// a request whose deltas go to a stream log (queue entry version 2); it
// refuses it in the output stream of an unlogged request, the only one
// it knows. The gateway hears that refusal at once instead of waiting
// for PlaceTimeout, and reports the chat unavailable (temporary).
func TestOldEngineRefusalIsHeard(t *testing.T) {
	rdb := testredis.Client(t)
	prefix := testredis.Prefix(t)
	c := fastClient(t, rdb, prefix) // PlaceTimeout 3 s, no engine live
	k := newKeys(prefix)
	ctx := context.Background()
	// The old engine, in raw commands: it reads the shared queue and
	// writes what its refusal of an unknown wire version writes.
	go func() {
		for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
			msgs, err := rdb.XRange(ctx, k.shared(), "-", "+").Result()
			if err != nil || len(msgs) == 0 {
				continue
			}
			rk := str(msgs[0].Values, fieldKey)
			b, _ := json.Marshal(toWireError(&engine.Error{Code: engine.CodeBadRequest, Message: `cluster: request wire version "2" is newer than this engine's`}))
			rdb.XAdd(ctx, &redis.XAddArgs{Stream: k.out(rk), Values: []any{"k", kindRefused, "j", string(b)}})
			return
		}
	}()
	start := time.Now()
	_, err := c.SubmitToLog(ctx, engine.Request{ID: "acme/s/r1", Tenant: "acme", Session: "s", MaxTokens: 5}, logTarget(prefix, "s", "r1"))
	took := time.Since(start)
	var ee *engine.Error
	if !errors.As(err, new(*UnavailableError)) || !errors.As(err, &ee) || ee.Code != engine.CodeBadRequest {
		t.Fatalf("have %v; want unavailable, caused by the old engine's refusal", err)
	}
	if took > 2*time.Second {
		t.Fatalf("the refusal took %v to be heard; PlaceTimeout is 3 s", took)
	}
}
