package cluster

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/internal/keyspace"
	"github.com/specgate/specgate/internal/testredis"
)

// TestLogClaimedByNewestSubmission: two submissions name the same stream
// log (a request id used again after its first submission was given up
// on, whose cancel did not reach Redis or came after its engine had
// acquired it). The fence is per submission, the log per (session,
// request): the log belongs to the newest submission, which reads only
// its own deltas, numbered from 1, and the stale generation stops.
func TestLogClaimedByNewestSubmission(t *testing.T) {
	rdb := testredis.Client(t)
	prefix := testredis.Prefix(t)
	startEngine(t, fastEngine(rdb, prefix, "e1", newFakeEngine(20*time.Millisecond)))
	c := fastClient(t, rdb, prefix)
	waitEngines(t, c, 1)
	ctx := context.Background()
	lt := logTarget(prefix, "s", "r1")
	stale, err := c.SubmitToLog(ctx, engine.Request{ID: "acme/s/r1", Tenant: "acme", Session: "s", MaxTokens: 40}, lt)
	if err != nil {
		t.Fatal(err)
	}
	// The gateway gave up on it and its cancel was lost: the stale
	// generation runs on. Forget it on the client side only.
	c.forget(stale)
	time.Sleep(200 * time.Millisecond)
	again, err := c.SubmitToLog(ctx, engine.Request{ID: "acme/s/r1", Tenant: "acme", Session: "s", MaxTokens: 5}, lt)
	if err != nil {
		t.Fatal(err)
	}
	text, final := readSeqs(t, again, 1)
	if text != fakeText(1, 5) || final.FinishReason != engine.FinishLength {
		t.Fatalf("the retried request (max_tokens 5) read %q, %+v; want %q, length", text, final, fakeText(1, 5))
	}
	time.Sleep(200 * time.Millisecond) // the stale generation would have appended by now
	if n := checkLog(t, rdb, c, lt, again, text); n != 5 {
		t.Fatalf("the log holds %d deltas; want the retried request's 5", n)
	}
	// The stale request ended: its engine was refused the log. Its final
	// is waited for, not looked for once: a busy machine may write it
	// late, and one that was not refused appended to the log above.
	for end := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		out, err := rdb.XRange(ctx, stale.out, "-", "+").Result()
		if err != nil {
			t.Fatal(err)
		}
		if len(out) > 0 && str(out[len(out)-1].Values, "k") == kindFinal {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("the stale request's output ends with %v; want its final", out)
		}
	}
}

// TestSealEndsTheLog: a reader that stops before the generation ends
// (a gateway that gave up, or shuts down) seals the log: it gets the
// deltas written since its last read, the engine appends nothing more
// and ends the request, and the done record can follow the last delta.
func TestSealEndsTheLog(t *testing.T) {
	rdb := testredis.Client(t)
	prefix := testredis.Prefix(t)
	startEngine(t, fastEngine(rdb, prefix, "e1", newFakeEngine(10*time.Millisecond)))
	c := fastClient(t, rdb, prefix)
	waitEngines(t, c, 1)
	ctx := context.Background()
	lt := logTarget(prefix, "s", "r1")
	s, err := c.SubmitToLog(ctx, engine.Request{ID: "acme/s/r1", Tenant: "acme", Session: "s", MaxTokens: 500}, lt)
	if err != nil {
		t.Fatal(err)
	}
	var text string
	for i := 1; i <= 3; i++ {
		ev, err := s.Recv(ctx)
		if err != nil || ev.Seq != i {
			t.Fatalf("delta %d: have %+v, %v", i, ev, err)
		}
		text += ev.Text
	}
	// The engine appends on meanwhile: the seal comes once the log holds
	// a delta past those read (waited for, not slept on: a busy machine
	// may append nothing in a fixed while).
	for end := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		n, err := rdb.XLen(ctx, lt.Key).Result()
		if err != nil {
			t.Fatal(err)
		}
		if n > 3 {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("the log holds %d deltas 5 s after the third was read", n)
		}
	}
	evs, err := s.Seal(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) == 0 {
		t.Fatal("the seal returned no delta; the log held one past those read")
	}
	for i, ev := range evs {
		if ev.Seq != 4+i {
			t.Fatalf("sealed delta %d has seq %d; want %d", i, ev.Seq, 4+i)
		}
		text += ev.Text
	}
	n := 3 + len(evs)
	if text != fakeText(1, n) {
		t.Fatalf("read and sealed %q; want %q", text, fakeText(1, n))
	}
	rest, final := readAll(t, s)
	if rest != "" || final.FinishReason != engine.FinishCancelled {
		t.Fatalf("after the seal: have %q, %+v; want nothing more, cancelled", rest, final)
	}
	time.Sleep(100 * time.Millisecond)
	if got := checkLog(t, rdb, c, lt, s, text); got != n {
		t.Fatalf("the log holds %d deltas after the seal; want the %d sealed", got, n)
	}
	if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: lt.Key, ID: strconv.Itoa(n+1) + "-0", Values: []any{logDone, "{}"}}).Err(); err != nil {
		t.Fatalf("the done record after the last delta: %v", err)
	}
}

// TestSealStopsAtWhatItCannotRead: the seal returns the deltas up to the
// first entry that does not decode or does not follow, without an error
// (nothing to retry), and releases only its own request's claim.
func TestSealStopsAtWhatItCannotRead(t *testing.T) {
	rdb := testredis.Client(t)
	prefix := testredis.Prefix(t)
	c := fastClient(t, rdb, prefix)
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		second map[string]any // entry 2-0
		owner  string         // the claim before the seal ("" none)
		want   []int          // seqs returned
		kept   bool           // the claim is still there after
	}{
		{"bad tokens", map[string]any{logText: "b", logTokens: "x"}, "self", []int{1}, false},
		{"done record", map[string]any{logDone: "{}"}, "self", []int{1}, false},
		{"all good", map[string]any{logText: "b", logTokens: "2"}, "", []int{1, 2, 3}, false},
		{"another's claim", map[string]any{logText: "b", logTokens: "2"}, "other#1", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lt := logTarget(prefix, "s", tc.name)
			s := c.newStream("acme/s/"+tc.name, "acme/s/"+tc.name+"#1", lt.Key)
			s.engineFinal = true // no cancel to send
			owner := keyspace.New(prefix).LogOwner(lt.Key)
			switch tc.owner {
			case "self":
				rdb.Set(ctx, owner, s.rk, time.Minute)
			case "":
			default:
				rdb.Set(ctx, owner, tc.owner, time.Minute)
			}
			for i, v := range []map[string]any{{logText: "a", logTokens: "1"}, tc.second, {logText: "c", logTokens: "3"}} {
				if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: lt.Key, ID: strconv.Itoa(i+1) + "-0", Values: v}).Err(); err != nil {
					t.Fatal(err)
				}
			}
			evs, err := s.Seal(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var seqs []int
			for _, ev := range evs {
				seqs = append(seqs, ev.Seq)
			}
			if fmt.Sprint(seqs) != fmt.Sprint(tc.want) {
				t.Fatalf("sealed %v; want %v", seqs, tc.want)
			}
			if n := rdb.Exists(ctx, owner).Val(); (n == 1) != tc.kept {
				t.Fatalf("claim exists=%d after the seal; want kept=%v", n, tc.kept)
			}
		})
	}
}

// TestSealReturnsWhatRecvHasNot: a read takes several deltas from the log
// at once, and Recv returns them one by one; the seal must return those
// read but not yet returned before the log's newer ones, or the stored
// reply loses them while the log keeps them.
func TestSealReturnsWhatRecvHasNot(t *testing.T) {
	rdb := testredis.Client(t)
	prefix := testredis.Prefix(t)
	c := fastClient(t, rdb, prefix)
	ctx := context.Background()
	lt := logTarget(prefix, "s", "r1")
	s := c.newStream("acme/s/r1", "acme/s/r1#1", lt.Key)
	s.engineFinal = true // no cancel to send
	rdb.Set(ctx, keyspace.New(prefix).LogOwner(lt.Key), s.rk, time.Minute)
	add := func(seq int) {
		t.Helper()
		v := map[string]any{logText: fmt.Sprint("t", seq), logTokens: strconv.Itoa(seq)}
		if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: lt.Key, ID: strconv.Itoa(seq) + "-0", Values: v}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for seq := 1; seq <= 3; seq++ {
		add(seq)
	}
	if ev, err := s.Recv(ctx); err != nil || ev.Seq != 1 {
		t.Fatalf("first delta: %+v, %v", ev, err)
	}
	add(4)
	evs, err := s.Seal(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var seqs []int
	for _, ev := range evs {
		seqs = append(seqs, ev.Seq)
	}
	if fmt.Sprint(seqs) != "[2 3 4]" {
		t.Fatalf("sealed %v after Recv returned delta 1; want [2 3 4]", seqs)
	}
}
