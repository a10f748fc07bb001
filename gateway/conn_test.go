package gateway

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// TestSlowConsumerSendDoesNotBlock: the Send that finds a client's queue
// full returns at once, even though that client's writer is stuck on a
// full socket and its close frame waits for it. The log writer releases
// every turn's deltas with such Sends, so one stuck client must not hold
// up the others' deltas (it held the caller for the close frame's second).
func TestSlowConsumerSendDoesNotBlock(t *testing.T) {
	conns := make(chan *Connection, 1)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := (&websocket.Upgrader{}).Upgrade(w, r, nil)
		if err != nil {
			return
		}
		conns <- newConnection(ws, connConfig{queueFrames: 4, queueBytes: 8 << 20, maxBatch: 1,
			writeTimeout: 10 * time.Second, pingInterval: time.Hour}, nil)
	}))
	defer hs.Close()
	// The client never reads.
	cl, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(hs.URL, "http"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	c := <-conns
	defer func() { c.abort(websocket.CloseGoingAway, ""); <-c.Done() }()

	text := strings.Repeat("x", 256<<10)
	queued := func() int {
		c.mu.Lock()
		defer c.mu.Unlock()
		return len(c.ends) - c.first
	}
	// Frames one at a time, each written before the next, until the
	// socket is full and the writer stuck on it.
	seq := 0
	for stuck := false; !stuck; {
		if seq++; seq > 1000 {
			t.Fatal("1000 frames of 256 KiB written to a client that reads nothing")
		}
		if !c.Send(ServerFrame{Type: TypeDelta, Request: "r", Seq: seq, Text: text}) {
			t.Fatalf("frame %d refused before the writer was stuck", seq)
		}
		stuck = true
		for end := time.Now().Add(200 * time.Millisecond); time.Now().Before(end); time.Sleep(time.Millisecond) {
			if queued() == 0 {
				stuck = false
				break
			}
		}
	}
	for {
		seq++
		start := time.Now()
		ok := c.Send(ServerFrame{Type: TypeDelta, Request: "r", Seq: seq, Text: text})
		took := time.Since(start)
		if ok {
			continue
		}
		if took > 300*time.Millisecond {
			t.Fatalf("the Send that found the queue full took %v", took)
		}
		if code, reason := c.CloseReason(); code != CloseTryAgainLater || reason != ReasonSlowConsumer {
			t.Fatalf("closing with %d %q; want %d %q", code, reason, CloseTryAgainLater, ReasonSlowConsumer)
		}
		return
	}
}

// TestQueueTakesBatchesInOrder: frames queued while the writer is busy go
// out in batches of at most maxBatch, each the frames' encodings joined by
// newlines, in order, with their types, also when frames are queued
// between two takes and when a batch leaves frames behind.
func TestQueueTakesBatchesInOrder(t *testing.T) {
	c := &Connection{cfg: connConfig{queueFrames: 100, queueBytes: 1 << 20, maxBatch: 3}, wake: make(chan struct{}, 1)}
	frames := []ServerFrame{
		{Type: TypeDelta, Request: "r1", Seq: 1, Text: "plain"},
		{Type: TypeDelta, Request: "r1", Seq: 2, Text: "é \"quoted\"\n"},
		{Type: TypeError, Request: "r1", Code: CodeBadRequest, Message: "no"},
		{Type: TypeDelta, Request: "r2", Seq: 1, Text: "x"},
		{Type: TypeDone, Request: "r1", FinishReason: "stop"},
		{Type: TypeDelta, Request: "r2", Seq: 2, Text: "<&>"},
		{Type: TypeDelta, Request: "r2", Seq: 3, Text: "y"},
	}
	want := func(fs []ServerFrame) (string, []string) {
		var parts, types []string
		for _, f := range fs {
			b, err := json.Marshal(f)
			if err != nil {
				t.Fatal(err)
			}
			parts = append(parts, string(b))
			types = append(types, f.Type)
		}
		return strings.Join(parts, "\n"), types
	}
	var msg []byte
	var types []string
	check := func(fs []ServerFrame) {
		t.Helper()
		msg, types, _ = c.take(msg, types, c.cfg.maxBatch)
		w, wt := want(fs)
		if string(msg) != w || !slices.Equal(types, wt) {
			t.Fatalf("took %q %v; want %q %v", msg, types, w, wt)
		}
	}
	for _, f := range frames[:5] {
		if !c.Send(f) {
			t.Fatalf("Send(%v) refused", f)
		}
	}
	check(frames[0:3]) // leaves two behind
	for _, f := range frames[5:] {
		c.Send(f)
	}
	check(frames[3:6])
	check(frames[6:7]) // takes the rest: the buffers trade places
	check(nil)
	c.Send(frames[0])
	check(frames[0:1])
}

// TestQueueBacklogInOrder: frames sent and taken in any interleaving, in
// batches of any size (a backlog drained a batch at a time, with frames
// arriving between takes), come out whole, once each, in order.
func TestQueueBacklogInOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for trial := range 50 {
		c := &Connection{cfg: connConfig{queueFrames: 1000, queueBytes: 1 << 20, maxBatch: 64}, wake: make(chan struct{}, 1)}
		var sent, got []string
		var msg []byte
		var types []string
		for step := range 400 {
			if r.IntN(3) > 0 {
				f := ServerFrame{Type: TypeDelta, Request: "r", Seq: step, Text: strings.Repeat("é", r.IntN(40))}
				if r.IntN(5) == 0 {
					f = ServerFrame{Type: TypeError, Request: "r", Code: CodeBadRequest, Message: fmt.Sprint(step)}
				}
				b, err := json.Marshal(f)
				if err != nil {
					t.Fatal(err)
				}
				if !c.Send(f) {
					t.Fatalf("trial %d: Send refused", trial)
				}
				sent = append(sent, string(b))
				continue
			}
			msg, types, _ = c.take(msg, types, 1+r.IntN(8))
			if len(types) > 0 {
				got = append(got, strings.Split(string(msg), "\n")...)
			}
			if n := len(strings.Split(string(msg), "\n")); len(types) > 0 && n != len(types) {
				t.Fatalf("trial %d: %d frames for %d types", trial, n, len(types))
			}
		}
		for {
			msg, types, _ = c.take(msg, types, 8)
			if len(types) == 0 {
				break
			}
			got = append(got, strings.Split(string(msg), "\n")...)
		}
		if !slices.Equal(got, sent) {
			t.Fatalf("trial %d: took %d frames, sent %d, or out of order", trial, len(got), len(sent))
		}
	}
}
