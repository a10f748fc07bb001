package gateway

import (
	"encoding/json"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/gorilla/websocket"
)

// connConfig are a connection's write-side limits (from Options).
type connConfig struct {
	queueFrames  int
	queueBytes   int
	maxBatch     int
	writeTimeout time.Duration
	pingInterval time.Duration
}

// Connection is one WebSocket with a bounded write queue drained by a
// writer goroutine that the connection owns. Send never blocks: a client
// that does not read fast enough fills its queue and is disconnected with
// reason slow_consumer, so it cannot hold up generation or other clients.
//
// The writer batches: frames queued together go out in one WebSocket
// message, separated by newlines (at most maxBatch per message).
type Connection struct {
	ws  *websocket.Conn
	cfg connConfig
	// onFrame, when set, counts each frame written (metrics).
	onFrame func(typ string)

	mu sync.Mutex // protects the fields below
	// The queue: the frames' encodings back to back in pend, a newline
	// between two (the batch separator, so a batch is a slice of pend),
	// the end of each in ends and its type in types. Frames are encoded
	// straight into pend and pend trades places with the writer's buffer,
	// so a delta costs no allocation of its own on its way out (its text
	// escaped in place: appendJSONString).
	pend  []byte
	ends  []int
	types []string
	// head and first are where the frames not yet taken start, in pend
	// and in ends and types: a partial take (a backlog longer than a
	// batch) moves them on, and the taken frames' room is reclaimed only
	// once it is half the queue, so draining a backlog stays linear and
	// Send never waits on a long copy.
	head, first int
	closing     bool // no more Sends; the writer flushes, then closes
	closeCode   int
	closeText   string

	wake    chan struct{} // cap 1: the writer has work
	closeCh chan struct{} // closed when the connection starts closing
	done    chan struct{} // closed when the writer has exited and the socket is closed
	// readerGone is closed when nothing reads the socket any more. The
	// writer keeps the socket open after its close frame until then (or
	// writeTimeout), so the client's close frame, and whatever the client
	// was still sending, is read rather than answered by a TCP reset,
	// which would make the client lose the frames before the close.
	readerGone chan struct{}
	readerOnce sync.Once
}

func newConnection(ws *websocket.Conn, cfg connConfig, onFrame func(string)) *Connection {
	c := &Connection{
		ws:      ws,
		cfg:     cfg,
		onFrame: onFrame,
		wake:    make(chan struct{}, 1),
		closeCh: make(chan struct{}),
		done:    make(chan struct{}),

		readerGone: make(chan struct{}),
	}
	go c.writer()
	return c
}

// Send queues f for the client and reports whether it was queued. It never
// blocks. A full queue closes the connection (slow_consumer); Send on a
// closing connection returns false.
func (c *Connection) Send(f ServerFrame) bool {
	var b []byte
	plain := plainDelta(&f)
	if !plain {
		var err error
		if b, err = json.Marshal(f); err != nil {
			return false
		}
	}
	c.mu.Lock()
	if c.closing {
		c.mu.Unlock()
		return false
	}
	start := len(c.pend)
	if start > c.head {
		c.pend = append(c.pend, '\n')
	}
	if plain {
		c.pend = appendDelta(c.pend, &f)
	} else {
		c.pend = append(c.pend, b...)
	}
	if len(c.ends)-c.first >= c.cfg.queueFrames || len(c.pend)-c.head > c.cfg.queueBytes {
		c.pend = c.pend[:start]
		c.mu.Unlock()
		// The close frame waits for the writer, which is likely stuck
		// on the full socket, up to a second: not on the caller, which
		// may be the log writer releasing every turn's deltas.
		if c.startAbort(CloseTryAgainLater, ReasonSlowConsumer) {
			go c.finishAbort(CloseTryAgainLater, ReasonSlowConsumer)
		}
		return false
	}
	c.ends = append(c.ends, len(c.pend))
	c.types = append(c.types, f.Type)
	c.mu.Unlock()
	c.signal()
	return true
}

func (c *Connection) signal() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// Close flushes what is queued, then closes with code and reason text.
// Later calls do nothing.
func (c *Connection) Close(code int, text string) {
	c.mu.Lock()
	if c.closing {
		c.mu.Unlock()
		return
	}
	c.closing, c.closeCode, c.closeText = true, code, text
	close(c.closeCh)
	c.mu.Unlock()
	c.signal()
}

// abort closes at once, dropping what is queued: for a slow or broken
// client, whose writes may be stuck.
func (c *Connection) abort(code int, text string) {
	first := c.startAbort(code, text)
	if first {
		c.finishAbort(code, text)
		return
	}
	_ = c.ws.Close()
	c.signal()
}

// startAbort is abort's part that never blocks: no more Sends, the queue
// dropped. It reports whether this call started the closing.
func (c *Connection) startAbort(code int, text string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	already := c.closing
	if !already {
		c.closing, c.closeCode, c.closeText = true, code, text
		close(c.closeCh)
	}
	c.pend, c.ends, c.types, c.head, c.first = nil, nil, nil, 0, 0
	return !already
}

// finishAbort sends the close frame, within a second, and closes the
// socket.
func (c *Connection) finishAbort(code int, text string) {
	// WriteControl may run concurrently with the writer's write, and
	// closing the socket unblocks a write stuck on a full TCP window.
	_ = c.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, text), time.Now().Add(time.Second))
	_ = c.ws.Close()
	c.signal()
}

// ReaderDone tells the writer that nothing reads the socket any more; after
// its close frame it may close the socket at once. Later calls do nothing.
func (c *Connection) ReaderDone() { c.readerOnce.Do(func() { close(c.readerGone) }) }

// Closing is closed when the connection starts closing.
func (c *Connection) Closing() <-chan struct{} { return c.closeCh }

// Done is closed when the socket is closed and the writer has exited.
func (c *Connection) Done() <-chan struct{} { return c.done }

// CloseReason returns the close code and text, once closing.
func (c *Connection) CloseReason() (int, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closeCode, c.closeText
}

// take moves up to n queued frames, newline-separated, to msg and their
// types to types (both emptied first). When it takes every frame, msg's
// array becomes the queue's: the two buffers trade places, and neither
// is allocated again once grown.
func (c *Connection) take(msg []byte, types []string, n int) (_ []byte, _ []string, closing bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := min(n, len(c.ends)-c.first)
	types = append(types[:0], c.types[c.first:c.first+k]...)
	switch {
	case k == 0:
		msg = msg[:0]
	case c.first+k == len(c.ends):
		if c.head == 0 {
			msg, c.pend = c.pend, msg[:0]
		} else { // the tail of a backlog: a swap would give away the head's room
			msg = append(msg[:0], c.pend[c.head:]...)
			c.pend = c.pend[:0]
		}
		c.ends = c.ends[:0]
		clear(c.types)
		c.types = c.types[:0]
		c.head, c.first = 0, 0
	default:
		end := c.ends[c.first+k-1]
		msg = append(msg[:0], c.pend[c.head:end]...)
		c.head, c.first = end+1, c.first+k // past the newline after the last taken
		if 2*c.first >= len(c.ends) {
			rest := copy(c.pend, c.pend[c.head:])
			c.pend = c.pend[:rest]
			m := copy(c.ends, c.ends[c.first:])
			c.ends = c.ends[:m]
			for i := range c.ends {
				c.ends[i] -= c.head
			}
			m = copy(c.types, c.types[c.first:])
			clear(c.types[m:])
			c.types = c.types[:m]
			c.head, c.first = 0, 0
		}
	}
	return msg, types, c.closing
}

func (c *Connection) writer() {
	defer close(c.done)
	defer c.ws.Close()
	ping := time.NewTicker(c.cfg.pingInterval)
	defer ping.Stop()
	var msg []byte
	var types []string
	// The write deadline handed to the connection moves only when an
	// eighth of it has gone by: every write still gets most of
	// writeTimeout. (gorilla sets the socket's deadline on every write
	// all the same.)
	var deadline time.Time
	for {
		select {
		case <-c.wake:
		case <-ping.C:
			if err := c.ws.WriteControl(websocket.PingMessage, nil, time.Now().Add(c.cfg.writeTimeout)); err != nil {
				c.abort(websocket.CloseAbnormalClosure, "ping failed")
				return
			}
			continue
		}
		for {
			var closing bool
			msg, types, closing = c.take(msg, types, c.cfg.maxBatch)
			if len(types) == 0 {
				if closing {
					code, text := c.CloseReason()
					_ = c.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, text), time.Now().Add(c.cfg.writeTimeout))
					// The closing handshake: wait for the reader to see
					// the client's close (or give up) before the socket
					// closes.
					t := time.NewTimer(c.cfg.writeTimeout)
					select {
					case <-c.readerGone:
					case <-t.C:
					}
					t.Stop()
					return
				}
				break
			}
			if now := time.Now(); deadline.Sub(now) < c.cfg.writeTimeout-c.cfg.writeTimeout/8 {
				deadline = now.Add(c.cfg.writeTimeout)
				_ = c.ws.SetWriteDeadline(deadline)
			}
			if err := c.ws.WriteMessage(websocket.TextMessage, msg); err != nil {
				c.abort(CloseTryAgainLater, ReasonSlowConsumer)
				return
			}
			if c.onFrame != nil {
				for _, typ := range types {
					c.onFrame(typ)
				}
			}
			if cap(msg) > idleBufMax {
				msg = nil // a burst's buffer goes; the usual size stays
			}
		}
	}
}

// idleBufMax is the largest write buffer a connection keeps between
// messages: enough for the frames of a reply's deltas, not for a session
// list or a long resume's batch.
const idleBufMax = 16 << 10

// appendDelta appends the encoding of f, a plainDelta, to b: what
// json.Marshal(f) gives, written by hand for the frame a reply is made of,
// without reflection over the whole ServerFrame.
func appendDelta(b []byte, f *ServerFrame) []byte {
	b = append(b, `{"type":"delta","request":`...)
	b = appendJSONString(b, f.Request)
	b = append(b, `,"seq":`...)
	b = strconv.AppendInt(b, int64(f.Seq), 10)
	b = append(b, `,"text":`...)
	b = appendJSONString(b, f.Text)
	return append(b, '}')
}

// plainDelta: f is a delta with no field but those appendDelta writes by
// hand (TestEncodeFrame sets every field in turn to keep this in step).
func plainDelta(f *ServerFrame) bool {
	return f.Type == TypeDelta && f.Request != "" && f.Seq > 0 && f.Text != "" &&
		f.Tenant == "" && f.User == "" && f.Protocol == 0 && f.Notice == "" && f.Model == nil &&
		f.Session == nil && f.Sessions == nil && f.SessionID == "" && f.FinishReason == "" &&
		f.Usage == nil && f.Stats == nil && f.DroppedMessages == 0 && f.Code == "" &&
		f.Reason == "" && f.Message == "" && !f.Temporary
}

// appendJSONString appends s as a JSON string, byte for byte as
// encoding/json writes it (FuzzEncodeDelta holds it to that), without
// allocating: a delta's text is model output in any language, and this
// runs under the connection's lock. encoding/json's choices: the two-letter
// escapes for quote, backslash, \b, \f, \n, \r and \t; \u00XX for the
// other control bytes and for <, > and & (safe inside HTML); \ufffd for
// each byte of invalid UTF-8; \u2028 and \u2029 (line and paragraph
// separators, which end lines in JavaScript); any other rune as is.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	done := 0 // s[:done] is in b
	for i := 0; i < len(s); {
		c := s[i]
		if c >= utf8.RuneSelf {
			r, n := utf8.DecodeRuneInString(s[i:])
			switch {
			case r == utf8.RuneError && n == 1:
				b = append(append(b, s[done:i]...), `\ufffd`...)
				done = i + n
			case r == '\u2028' || r == '\u2029':
				b = append(append(b, s[done:i]...), '\\', 'u', '2', '0', '2', hex[r&0xf])
				done = i + n
			}
			i += n
			continue
		}
		var esc byte
		switch c {
		case '"', '\\':
			esc = c
		case '\b':
			esc = 'b'
		case '\f':
			esc = 'f'
		case '\n':
			esc = 'n'
		case '\r':
			esc = 'r'
		case '\t':
			esc = 't'
		}
		switch {
		case esc != 0:
			b = append(append(b, s[done:i]...), '\\', esc)
			done = i + 1
		case c < 0x20 || c == '<' || c == '>' || c == '&':
			b = append(append(b, s[done:i]...), '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			done = i + 1
		}
		i++
	}
	b = append(b, s[done:]...)
	return append(b, '"')
}
