// Package loadgen drives a running gateway the way many tenants' apps
// would: each simulated user holds one authenticated WebSocket, creates a
// session and has a multi-turn conversation in it (chat, read the deltas
// to done, next turn), with a per-tenant mix of priorities. It measures,
// at the client, time to first token, inter-token latency, tokens/s and
// errors by code, per tenant and per priority class.
//
// Run does the work against Tenants whose tokens the caller provides; Main
// is the `specgate loadgen` command, which also creates tenants in Redis
// and mints their tokens. A run always ends by itself: after every user's
// turns, after a total request budget, or after a duration, whichever
// comes first.
package loadgen

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/gorilla/websocket"

	"github.com/specgate/specgate/gateway"
)

// Priority classes a request may ask for (PROTOCOL.md, params.priority).
const (
	Interactive = "interactive"
	Standard    = "standard"
	Batch       = "batch"
)

var priorities = []string{Interactive, Standard, Batch}

// Client-side error codes, next to the protocol's own codes in a report.
const (
	// ErrTimeout: a turn had no done within Config.TurnTimeout.
	ErrTimeout = "timeout"
	// ErrDisconnected: the socket closed or failed during a turn.
	ErrDisconnected = "disconnected"
	// ErrDial: the connection could not be made (network, HTTP status).
	ErrDial = "dial"
	// ErrFinishError: a done with finish_reason error and no error frame.
	ErrFinishError = "finish_error"
)

// Weighted is one class of a priority mix with its relative weight.
type Weighted struct {
	Priority string
	Weight   float64
}

// Tenant is one tenant as the load generator sees it: a name for the
// report (the gateway's ready frame, when it names one, wins) and how to
// get a token for a user.
type Tenant struct {
	Name string
	// Token returns a bearer token for user; it is called at every
	// (re)connect. Required.
	Token func(user string) (string, error)
	// Mix is the priority mix of the tenant's requests (nil: all
	// standard). A request may lower the tenant's class, never raise it,
	// so the gateway serves a higher class than the tenant's as its own.
	Mix []Weighted
}

// Delta is one delta as a user received it, for Config.OnDelta.
type Delta struct {
	Tenant  string
	Request string
	Seq     int
	Text    string
	// At is when the WebSocket message that carried the delta was read,
	// before it was decoded.
	At time.Time
}

// Config is one run. Zero fields take the default noted on them.
type Config struct {
	// URL is the gateway's WebSocket endpoint, ws://host:port/v1/ws.
	// Required.
	URL     string
	Tenants []Tenant // required, at least one
	// Users per tenant (1), each with its own connection and session, and
	// Turns per user (1).
	Users int
	Turns int
	// MaxRequests caps the chat requests of the whole run (0: Users ×
	// Turns × tenants).
	MaxRequests int
	// Duration bounds the run (1m); requests in flight at its end are
	// cancelled and reported as unfinished.
	Duration time.Duration
	// Ramp spreads the users' first connections evenly over this long (0:
	// all at once).
	Ramp time.Duration
	// Think is the pause between a user's turns (0).
	Think time.Duration
	// TurnTimeout bounds one turn, chat to done (1m). A timed-out turn is
	// cancelled and the user reconnects for its next turn.
	TurnTimeout time.Duration
	// MaxTokens, Temperature: the chat params of every request (64, 0).
	MaxTokens   int
	Temperature float32
	// PromptWords is the length of each user message in words (16).
	PromptWords int
	// Seed makes the users' choices (priority, words, sampling seeds)
	// repeatable (0 is a seed like any other).
	Seed uint64
	// KeepSessions leaves the users' sessions in the gateway; by default
	// each user deletes its session when it is done.
	KeepSessions bool
	// DialTimeout bounds one connect, handshake and ready included (10s).
	DialTimeout time.Duration
	// OnDelta, when set, is called for every delta received, from the
	// users' goroutines at once: it must be safe for concurrent use and
	// quick. In-process benchmarks use it to read stamps in the text.
	OnDelta func(Delta)
}

func (c *Config) validate() error {
	if c.URL == "" {
		return errors.New("loadgen: no URL")
	}
	if len(c.Tenants) == 0 {
		return errors.New("loadgen: no tenants")
	}
	for i, t := range c.Tenants {
		if t.Token == nil {
			return fmt.Errorf("loadgen: tenant %d (%s) has no token source", i, t.Name)
		}
		for _, w := range t.Mix {
			if !validPriority(w.Priority) || w.Weight < 0 {
				return fmt.Errorf("loadgen: tenant %s: bad priority mix entry %+v", t.Name, w)
			}
		}
	}
	defInt := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	defDur := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	defInt(&c.Users, 1)
	defInt(&c.Turns, 1)
	defInt(&c.MaxRequests, c.Users*c.Turns*len(c.Tenants))
	defDur(&c.Duration, time.Minute)
	defDur(&c.TurnTimeout, time.Minute)
	defDur(&c.DialTimeout, 10*time.Second)
	defInt(&c.MaxTokens, 64)
	defInt(&c.PromptWords, 16)
	return nil
}

func validPriority(p string) bool {
	return p == Interactive || p == Standard || p == Batch
}

func prioIndex(p string) int {
	for i, q := range priorities {
		if p == q {
			return i
		}
	}
	return 1
}

// Run runs the load described by cfg and returns what it measured. It
// returns an error only for a config it cannot run; failures of requests
// and connections are counted in the report. Every goroutine it starts has
// ended when it returns.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Duration)
	defer cancel()

	var budget atomic.Int64
	budget.Store(int64(cfg.MaxRequests))
	var budgetOut atomic.Bool

	total := len(cfg.Tenants) * cfg.Users
	users := make([]*user, 0, total)
	for ti := range cfg.Tenants {
		for ui := range cfg.Users {
			seed := cfg.Seed ^ uint64(ti)<<32 ^ uint64(ui)
			users = append(users, &user{
				cfg:    &cfg,
				tenant: &cfg.Tenants[ti],
				name:   cfg.Tenants[ti].Name,
				id:     fmt.Sprintf("loadgen-u%d", ui),
				rng:    rand.New(rand.NewPCG(seed, 0x10ad9e4)),
				take: func() bool {
					if budget.Add(-1) < 0 {
						budgetOut.Store(true)
						return false
					}
					return true
				},
			})
		}
	}

	start := time.Now()
	var wg sync.WaitGroup
	for i, u := range users {
		delay := time.Duration(0)
		if total > 1 {
			delay = cfg.Ramp * time.Duration(i) / time.Duration(total)
		}
		wg.Go(func() {
			if delay > 0 {
				t := time.NewTimer(delay)
				defer t.Stop()
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
			}
			u.run(ctx)
		})
	}
	wg.Wait()
	elapsed := time.Since(start)

	rep := &Report{URL: cfg.URL, Elapsed: elapsed.Seconds(), Users: total, StopReason: "done"}
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		rep.StopReason = "duration"
	case ctx.Err() != nil:
		rep.StopReason = "cancelled"
	case budgetOut.Load():
		rep.StopReason = "requests"
	}
	var order []string
	byTenant := map[string]*stats{}
	var byPrio [3]stats
	var all stats
	for _, u := range users {
		rep.Connects += u.connects
		st := byTenant[u.name]
		if st == nil {
			st = &stats{}
			byTenant[u.name] = st
			order = append(order, u.name)
		}
		st.merge(&u.conn)
		all.merge(&u.conn)
		for p := range u.prio {
			st.merge(&u.prio[p])
			byPrio[p].merge(&u.prio[p])
			all.merge(&u.prio[p])
		}
	}
	for _, name := range order {
		rep.Tenants = append(rep.Tenants, byTenant[name].row(name, elapsed))
	}
	for p, name := range priorities {
		if byPrio[p].requests > 0 {
			rep.Priorities = append(rep.Priorities, byPrio[p].row(name, elapsed))
		}
	}
	rep.Total = all.row("total", elapsed)
	return rep, nil
}

// user is one simulated end user: one connection at a time, one session,
// turns one after another. Only its own goroutine touches it until Run
// reads its figures after it has ended.
type user struct {
	cfg    *Config
	tenant *Tenant
	name   string // the tenant's name as the gateway reported it
	id     string // the JWT sub
	rng    *rand.Rand
	take   func() bool // reserves one request of the run's budget

	ws       *websocket.Conn
	unwatch  func() bool           // stops the ws's watch on the run's context
	deadline time.Time             // the ws's read deadline
	rbuf     bytes.Buffer          // the last message read
	pending  []gateway.ServerFrame // frames of the last message not yet handled
	// pendBuf is pending's backing array, reused for every message: the
	// client shares the process, and its heap, with the gateway under
	// test in the benchmarks, so a frame-sized allocation per delta
	// would be charged to the gateway as garbage collection.
	pendBuf  []gateway.ServerFrame
	readAt   time.Time // when the last message was read
	session  string
	connects int

	conn stats    // failures outside requests (connects)
	prio [3]stats // by priority class
}

func (u *user) run(ctx context.Context) {
	defer u.close()
	for turn := 1; turn <= u.cfg.Turns; turn++ {
		if ctx.Err() != nil {
			return
		}
		if u.ws == nil {
			if err := u.connect(ctx); err != nil {
				return // counted; a user that cannot connect stops
			}
		}
		if u.session == "" {
			if err := u.createSession(ctx); err != nil {
				return
			}
		}
		if !u.take() {
			return
		}
		u.chat(ctx, turn)
		if u.cfg.Think > 0 && turn < u.cfg.Turns {
			t := time.NewTimer(u.cfg.Think)
			select {
			case <-ctx.Done():
			case <-t.C:
			}
			t.Stop()
		}
	}
	if !u.cfg.KeepSessions && u.session != "" && u.ws != nil && ctx.Err() == nil {
		u.deleteSession(ctx)
	}
}

// connect dials with a bearer token and waits for ready. Failures are
// counted under the gateway's error code, or a client-side code.
func (u *user) connect(ctx context.Context) error {
	tok, err := u.tenant.Token(u.id)
	if err != nil {
		u.conn.fail("token")
		return err
	}
	dctx, cancel := context.WithTimeout(ctx, u.cfg.DialTimeout)
	defer cancel()
	d := websocket.Dialer{HandshakeTimeout: u.cfg.DialTimeout}
	h := http.Header{"Authorization": {"Bearer " + tok}}
	ws, resp, err := d.DialContext(dctx, u.cfg.URL, h)
	if err != nil {
		if ctx.Err() == nil {
			code := ErrDial
			if resp != nil {
				code = fmt.Sprintf("http_%d", resp.StatusCode)
			}
			u.conn.fail(code)
		}
		return err
	}
	u.ws, u.pending, u.deadline = ws, nil, time.Time{}
	// When the run ends, a blocked read ends too. The watch holds its own
	// copy of the conn: it may still be running after close cleared u.ws.
	u.unwatch = context.AfterFunc(ctx, func() { _ = ws.SetReadDeadline(time.Now()) })
	deadline, _ := dctx.Deadline()
	f, err := u.next(ctx, deadline)
	if err != nil {
		if ctx.Err() == nil {
			u.conn.fail(readErrorCode(err))
		}
		u.close()
		return err
	}
	switch f.Type {
	case gateway.TypeReady:
		if f.Tenant != "" {
			u.name = f.Tenant
		}
		u.connects++
		return nil
	case gateway.TypeError:
		u.conn.fail(f.Code)
		u.close()
		return fmt.Errorf("loadgen: refused: %s (%s)", f.Code, f.Reason)
	}
	u.conn.fail("unexpected_" + f.Type)
	u.close()
	return fmt.Errorf("loadgen: first frame %q, want ready", f.Type)
}

func (u *user) createSession(ctx context.Context) error {
	if err := u.send(gateway.ClientFrame{Type: gateway.TypeSessionCreate, Title: "loadgen " + u.id}); err != nil {
		u.conn.fail(ErrDisconnected)
		u.close()
		return err
	}
	deadline := time.Now().Add(u.cfg.TurnTimeout)
	for {
		f, err := u.next(ctx, deadline)
		if err != nil {
			if ctx.Err() == nil {
				u.conn.fail(readErrorCode(err))
			}
			u.close()
			return err
		}
		switch {
		case f.Type == gateway.TypeSession && f.Session != nil:
			u.session = f.Session.ID
			return nil
		case f.Type == gateway.TypeError:
			u.conn.fail(f.Code)
			return fmt.Errorf("loadgen: session.create: %s", f.Code)
		}
	}
}

func (u *user) deleteSession(ctx context.Context) {
	if u.send(gateway.ClientFrame{Type: gateway.TypeSessionDelete, Session: u.session}) != nil {
		return
	}
	deadline := time.Now().Add(u.cfg.DialTimeout)
	for {
		f, err := u.next(ctx, deadline)
		if err != nil || f.Type == gateway.TypeDeleted || (f.Type == gateway.TypeError && f.Request == "") {
			return
		}
	}
}

func (u *user) pickPriority() string {
	mix := u.tenant.Mix
	sum := 0.0
	for _, w := range mix {
		sum += w.Weight
	}
	if sum <= 0 {
		return Standard
	}
	x := u.rng.Float64() * sum
	for _, w := range mix {
		if x < w.Weight {
			return w.Priority
		}
		x -= w.Weight
	}
	return mix[len(mix)-1].Priority
}

var words = strings.Fields(`the a river city engine token cache prefix tenant queue stream model
light stone garden window market winter signal orbit harbor paper forest
story question answer number letter music bridge planet summer voice`)

func (u *user) content(turn int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Turn %d:", turn)
	for range u.cfg.PromptWords {
		b.WriteByte(' ')
		b.WriteString(words[u.rng.IntN(len(words))])
	}
	b.WriteByte('.')
	return b.String()
}

// chat runs one turn and records it under its priority.
func (u *user) chat(ctx context.Context, turn int) {
	prio := u.pickPriority()
	st := &u.prio[prioIndex(prio)]
	st.requests++
	req := fmt.Sprintf("t%d", turn)
	f := gateway.ClientFrame{
		Type: gateway.TypeChat, Session: u.session, Request: req, Content: u.content(turn),
		Params: &gateway.ChatParams{
			MaxTokens: u.cfg.MaxTokens, Temperature: u.cfg.Temperature,
			Seed: u.rng.Uint64() | 1, Priority: prio,
		},
	}
	sent := time.Now()
	if err := u.send(f); err != nil {
		if ctx.Err() != nil {
			st.unfinished++
		} else {
			st.fail(ErrDisconnected)
		}
		u.close()
		return
	}
	deadline := sent.Add(u.cfg.TurnTimeout)
	var last time.Time
	deltas := 0
	errs := 0
	for {
		fr, err := u.next(ctx, deadline)
		if err != nil {
			switch {
			case ctx.Err() != nil:
				st.unfinished++
				u.cancel(req)
			case isTimeout(err):
				st.fail(ErrTimeout)
				u.cancel(req)
			default:
				st.fail(readErrorCode(err))
			}
			// After a read error (a timeout included) the socket cannot be
			// read again; the next turn reconnects.
			u.close()
			return
		}
		if fr.Request != req {
			if fr.Type == gateway.TypeError && fr.Request == "" {
				st.fail(fr.Code) // a refusal of our frame as a whole
			}
			continue // late frames of an abandoned request
		}
		switch fr.Type {
		case gateway.TypeDelta:
			if deltas == 0 {
				st.ttft.Add(u.readAt.Sub(sent))
			} else {
				st.itl.Add(u.readAt.Sub(last))
			}
			last = u.readAt
			deltas++
			if u.cfg.OnDelta != nil {
				u.cfg.OnDelta(Delta{Tenant: u.name, Request: req, Seq: fr.Seq, Text: fr.Text, At: u.readAt})
			}
		case gateway.TypeError:
			errs++
			st.fail(fr.Code)
			if deltas == 0 {
				// A refusal (quota, queue, context, validation) ends the
				// request without a done. A failure after deltas is
				// followed by one, which we wait for; a done that still
				// follows a refusal carries this request id and is
				// skipped by later turns.
				return
			}
		case gateway.TypeDone:
			n := deltas
			if fr.Usage != nil && fr.Usage.CompletionTokens > 0 {
				n = fr.Usage.CompletionTokens
			}
			st.tokens += n
			switch fr.FinishReason {
			case "stop", "length":
				st.completed++
			case "error":
				if errs == 0 {
					st.fail(ErrFinishError)
				}
			default:
				st.fail("finish_" + fr.FinishReason)
			}
			return
		}
	}
}

// cancel asks the gateway to stop req (generation outlives the socket, so
// a load generator that stops must say so), without waiting for it.
func (u *user) cancel(req string) {
	if u.ws == nil {
		return
	}
	_ = u.ws.SetWriteDeadline(time.Now().Add(time.Second))
	_ = u.ws.WriteJSON(gateway.ClientFrame{Type: gateway.TypeCancel, Request: req})
}

func (u *user) send(f gateway.ClientFrame) error {
	if u.ws == nil {
		return net.ErrClosed
	}
	_ = u.ws.SetWriteDeadline(time.Now().Add(u.cfg.DialTimeout))
	return u.ws.WriteJSON(f)
}

// next returns the next frame, reading a message when none is pending. It
// gives up at deadline or when ctx ends (which also ends a blocked read).
//
// It is lean, because at hundreds of streams the load generator shares
// the gateway's CPU and its own cost shows up as the gateway's latency:
// the read deadline moves only when it changes (once per turn), the
// message is read into a buffer the user keeps, and a delta in the exact
// form the gateway writes (no escapes in its strings) is picked apart
// without encoding/json, which reads everything else.
func (u *user) next(ctx context.Context, deadline time.Time) (gateway.ServerFrame, error) {
	for len(u.pending) == 0 {
		if u.ws == nil {
			return gateway.ServerFrame{}, net.ErrClosed
		}
		if !deadline.Equal(u.deadline) {
			_ = u.ws.SetReadDeadline(deadline)
			u.deadline = deadline
		}
		// The watch (connect) moves the deadline to now when ctx ends,
		// after ctx.Err is visible: checked after our deadline is set,
		// an end of ctx is either seen here or ends the read.
		if ctx.Err() != nil {
			return gateway.ServerFrame{}, ctx.Err()
		}
		_, r, err := u.ws.NextReader()
		if err == nil {
			u.rbuf.Reset()
			_, err = u.rbuf.ReadFrom(r)
		}
		if err != nil {
			return gateway.ServerFrame{}, err
		}
		u.readAt = time.Now()
		u.pending = u.pendBuf[:0]
		for line := range bytes.SplitSeq(u.rbuf.Bytes(), []byte("\n")) {
			if len(bytes.TrimSpace(line)) == 0 {
				continue
			}
			f, ok := parseDelta(line)
			if !ok {
				// Decoded into a variable of its own: one whose address
				// reaches encoding/json lives on the heap, and f would
				// then be allocated for every delta too.
				var full gateway.ServerFrame
				if err := json.Unmarshal(line, &full); err != nil {
					return gateway.ServerFrame{}, fmt.Errorf("loadgen: bad frame %.80q: %w", line, err)
				}
				f = full
			}
			u.pending = append(u.pending, f)
		}
		u.pendBuf = u.pending[:0]
	}
	f := u.pending[0]
	u.pending = u.pending[1:]
	return f, nil
}

// parseDelta reads line when it is exactly
// {"type":"delta","request":"R","seq":N,"text":"T"} with no escape in R or
// T; ok is false for anything else, which the caller decodes in full.
func parseDelta(line []byte) (f gateway.ServerFrame, ok bool) {
	rest, ok := bytes.CutPrefix(line, []byte(`{"type":"delta","request":"`))
	if !ok {
		return f, false
	}
	req, rest, ok := plainString(rest)
	if !ok {
		return f, false
	}
	if rest, ok = bytes.CutPrefix(rest, []byte(`,"seq":`)); !ok {
		return f, false
	}
	n := 0
	for n < len(rest) && rest[n] >= '0' && rest[n] <= '9' {
		n++
	}
	if n == 0 || n > 9 || rest[0] == '0' {
		return f, false
	}
	seq := 0
	for _, c := range rest[:n] {
		seq = seq*10 + int(c-'0')
	}
	if rest, ok = bytes.CutPrefix(rest[n:], []byte(`,"text":"`)); !ok {
		return f, false
	}
	text, rest, ok := plainString(rest)
	if !ok || string(rest) != "}" {
		return f, false
	}
	return gateway.ServerFrame{Type: gateway.TypeDelta, Request: string(req), Seq: seq, Text: string(text)}, true
}

// plainString splits b after a JSON string's closing quote (its opening
// one already read); ok is false when the string has an escape or a
// control character, or does not end.
func plainString(b []byte) (s, rest []byte, ok bool) {
	for i, c := range b {
		switch {
		case c == '"':
			// encoding/json would replace invalid UTF-8
			return b[:i], b[i+1:], utf8.Valid(b[:i])
		case c == '\\' || c < 0x20:
			return nil, nil, false
		}
	}
	return nil, nil, false
}

func (u *user) close() {
	if u.ws == nil {
		return
	}
	u.unwatch()
	_ = u.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
	_ = u.ws.Close()
	u.ws, u.pending, u.unwatch = nil, nil, nil
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// readErrorCode names a failed read for the report: the close frame's
// reason when the gateway closed (slow_consumer, shutdown, ...).
func readErrorCode(err error) string {
	var ce *websocket.CloseError
	switch {
	case errors.As(err, &ce) && ce.Text != "":
		return ErrDisconnected + ":" + ce.Text
	case errors.As(err, &ce):
		return fmt.Sprintf("%s:%d", ErrDisconnected, ce.Code)
	case isTimeout(err):
		return ErrTimeout
	}
	return ErrDisconnected
}
