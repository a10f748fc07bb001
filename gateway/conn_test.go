package gateway

import (
	"net/http"
	"net/http/httptest"
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
		return len(c.ends)
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
