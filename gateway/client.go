package gateway

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/tenants"
)

// client is one authenticated socket: it reads frames in the HTTP handler's
// goroutine and answers through its Connection. Goroutines it starts
// (resumes) stop with ctx and are waited for in wg.
type client struct {
	s     *Server
	conn  *Connection
	id    string // lease holder id, unique per connection
	ident Identity
	ctx   context.Context
	wg    sync.WaitGroup
	// live lists the sessions this socket has opened or chatted in, which
	// the engine keeps warm (engine.SessionWarmer) until the socket goes.
	// Only the connection's own goroutine (readLoop, then serveWS's
	// deferred cleanup) touches it.
	live map[string]bool
}

// markLive tells the engine a session's prefix is in use by this socket.
func (c *client) markLive(session string) {
	w, ok := c.s.o.Generator.(engine.SessionWarmer)
	if !ok || session == "" || c.live[session] {
		return
	}
	if c.live == nil {
		c.live = map[string]bool{}
	}
	c.live[session] = true
	w.SetSessionLive(session, true)
}

// releaseLive lets the engine demote this socket's sessions first.
func (c *client) releaseLive() {
	w, ok := c.s.o.Generator.(engine.SessionWarmer)
	for session := range c.live {
		if ok {
			w.SetSessionLive(session, false)
		}
	}
	c.live = nil
}

// countFrameOut counts a frame written to a client.
func (s *Server) countFrameOut(typ string) {
	if typ == TypeDelta {
		s.metrics.deltasOut.Inc()
		return
	}
	s.metrics.frames.WithLabelValues("out", typ).Inc()
}

func randomID(prefix string) string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

func (s *Server) serveWS(w http.ResponseWriter, r *http.Request) {
	bearer, hasBearer := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	ws, err := s.upgrader.Upgrade(w, r, nil)
	if err != nil {
		return // the upgrader has answered with an HTTP error
	}
	// The read limit is enforced by readMessage, not by the library, which
	// would close with an empty reason before the client could be told.
	conn := newConnection(ws, connConfig{
		queueFrames:  s.o.WriteQueueFrames,
		queueBytes:   s.o.WriteQueueBytes,
		maxBatch:     s.o.MaxBatch,
		writeTimeout: s.o.WriteTimeout,
		pingInterval: s.o.PingInterval,
	}, s.countFrameOut)
	s.metrics.connections.Inc()
	defer s.metrics.connections.Dec()

	ctx, cancel := context.WithCancel(r.Context())
	c := &client{s: s, conn: conn, id: randomID("c_"), ctx: ctx}
	defer func() {
		cancel()
		c.wg.Wait()
		c.linger(ws)
		conn.ReaderDone()
		<-conn.Done()
		if _, reason := conn.CloseReason(); reason != "" {
			s.metrics.disconnects.WithLabelValues(reason).Inc()
		}
	}()
	// When the connection starts closing (slow consumer, shutdown), stop
	// the client's goroutines, and give the reader until the end of the
	// closing handshake: it now only waits for the client's close frame.
	go func() {
		select {
		case <-conn.Closing():
			cancel()
			_ = ws.SetReadDeadline(time.Now().Add(s.o.WriteTimeout))
		case <-ctx.Done():
		}
	}()

	s.mu.Lock()
	if s.draining {
		s.mu.Unlock()
		c.refuse(&Error{Code: CodeUnavailable, Reason: ReasonShutdown, Message: "gateway shutting down", Temporary: true}, CloseGoingAway)
		return
	}
	s.conns[conn] = c
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.conns, conn)
		s.mu.Unlock()
	}()

	// Apps authenticate at the upgrade; browsers, which cannot set headers
	// on a WebSocket, send an auth frame first, within AuthTimeout.
	token := bearer
	if !hasBearer {
		_ = ws.SetReadDeadline(time.Now().Add(s.o.AuthTimeout))
		msg, err := c.readMessage(ws)
		if errors.Is(err, errTooBig) {
			c.refuseTooBig()
			return
		}
		if err != nil {
			var ne interface{ Timeout() bool }
			if errors.As(err, &ne) && ne.Timeout() {
				c.refuseAuth(&Error{Code: CodeUnauthorized, Reason: ReasonAuthTimeout, Message: "no auth frame within the timeout"})
			} else {
				conn.abort(websocket.CloseNormalClosure, "")
			}
			return
		}
		s.metrics.frames.WithLabelValues("in", TypeAuth).Inc()
		f, err := DecodeFrame(msg)
		if err != nil {
			e := clientError(err)
			if e.Code == CodeBadRequest {
				e = &Error{Code: CodeUnauthorized, Reason: ReasonNotAuthenticated, Message: "the first frame must be auth"}
			}
			c.refuseAuth(e)
			return
		}
		if f.Type != TypeAuth {
			c.refuseAuth(&Error{Code: CodeUnauthorized, Reason: ReasonNotAuthenticated, Message: "the first frame must be auth"})
			return
		}
		token = f.Token
	}
	ident, aerr := s.auth.verify(ctx, token)
	if aerr != nil {
		c.refuseAuth(aerr)
		return
	}
	if origin := r.Header.Get("Origin"); origin != "" && !sameOrigin(origin, r.Host) && !ident.Tenant.AllowsOrigin(origin) {
		c.refuseAuth(&Error{Code: CodeForbidden, Reason: ReasonOriginNotAllowed, Message: "origin not allowed for this tenant"})
		return
	}
	c.ident = ident
	lim := ident.Tenant.Limits.MaxConnections
	ok, err := s.limiter.Acquire(ctx, ident.Tenant.ID, tenants.LeaseConnections, c.id, lim, s.o.LeaseTTL)
	if err != nil {
		c.refuse(s.down("cannot reach the rate limiter", err), CloseTryAgainLater)
		return
	}
	if !ok {
		c.refuse(&Error{Code: CodeOverQuota, Reason: ReasonTooManyConns, Message: "tenant connection limit reached", Temporary: true}, CloseTryAgainLater)
		return
	}
	if lim > 0 {
		defer func() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_ = s.limiter.Release(ctx, ident.Tenant.ID, tenants.LeaseConnections, c.id)
		}()
	}

	conn.Send(ServerFrame{Type: TypeReady, Tenant: ident.Tenant.ID, User: ident.User, Protocol: ProtocolVersion, Notice: s.o.Notice, Model: s.modelInfo()})
	defer c.releaseLive()
	c.readLoop(ws)
}

// sameOrigin allows the gateway's own web UI: an Origin whose host is the
// request's Host.
func sameOrigin(origin, host string) bool {
	u, err := url.Parse(origin)
	return err == nil && u.Host != "" && strings.EqualFold(u.Host, host)
}

// refuseAuth refuses a sign-in. A refusal that may pass if retried (Redis
// unreachable) closes with 1013, not 1008, so clients keep the token and
// try again instead of signing the user out.
func (c *client) refuseAuth(e *Error) {
	c.s.metrics.authFailures.WithLabelValues(e.Reason).Inc()
	code := ClosePolicyViolation
	if e.Temporary {
		code = CloseTryAgainLater
	}
	c.refuse(e, code)
}

// errTooBig is readMessage's error for a message over the read limit.
var errTooBig = errors.New("gateway: message over the read limit")

// readMessage reads one message of at most MaxFrameBytes. Over that it
// returns errTooBig with the rest of the message unread.
func (c *client) readMessage(ws *websocket.Conn) ([]byte, error) {
	_, r, err := ws.NextReader()
	if err != nil {
		return nil, err
	}
	msg, err := io.ReadAll(io.LimitReader(r, c.s.o.MaxFrameBytes+1))
	if err != nil {
		return nil, err
	}
	if int64(len(msg)) > c.s.o.MaxFrameBytes {
		return nil, errTooBig
	}
	return msg, nil
}

// refuseTooBig answers a message over the read limit: an error frame, then
// close 1009. The rest of the message is read and dropped (until the
// handshake deadline) so the client, still sending, gets both instead of a
// reset.
func (c *client) refuseTooBig() {
	c.s.metrics.frames.WithLabelValues("in", "too_big").Inc()
	c.conn.Send(errorFrame(&Error{Code: CodeBadRequest, Reason: ReasonFrameTooBig,
		Message: fmt.Sprintf("message over the read limit of %d bytes", c.s.o.MaxFrameBytes)}, ""))
	c.conn.Close(CloseMessageTooBig, ReasonFrameTooBig)
}

// linger reads and drops what the client still sends after the gateway
// started closing, until the client's close frame arrives or the handshake
// deadline (set when closing began) passes.
func (c *client) linger(ws *websocket.Conn) {
	select {
	case <-c.conn.Closing():
	default:
		return
	}
	for {
		_, r, err := ws.NextReader()
		if err != nil {
			return
		}
		if _, err := io.Copy(io.Discard, r); err != nil {
			return
		}
	}
}

// refuse sends e and closes the socket with code, reason e.Reason.
func (c *client) refuse(e *Error, code int) {
	c.conn.Send(errorFrame(e, ""))
	reason := e.Reason
	if reason == "" {
		reason = e.Code
	}
	c.conn.Close(code, reason)
}

func (c *client) readLoop(ws *websocket.Conn) {
	pongWait := c.s.o.PongWait
	_ = ws.SetReadDeadline(time.Now().Add(pongWait))
	ws.SetPongHandler(func(string) error {
		return ws.SetReadDeadline(time.Now().Add(pongWait))
	})
	for {
		msg, err := c.readMessage(ws)
		if errors.Is(err, errTooBig) {
			c.refuseTooBig()
			return
		}
		if err != nil {
			select {
			case <-c.conn.Closing():
				// The gateway is closing (shutdown, refusal): leave the
				// socket to the writer, which flushes and closes it.
			default:
				// Gone: generations continue without this socket.
				c.conn.abort(websocket.CloseNormalClosure, "")
			}
			return
		}
		select {
		case <-c.conn.Closing():
			continue // closing: what the client still sends is dropped
		default:
		}
		_ = ws.SetReadDeadline(time.Now().Add(pongWait))
		for _, d := range DecodeMessage(msg) {
			if d.Err != nil {
				c.s.metrics.frames.WithLabelValues("in", "invalid").Inc()
				c.conn.Send(errorFrame(clientError(d.Err), d.Frame.Request))
				continue
			}
			c.s.metrics.frames.WithLabelValues("in", d.Frame.Type).Inc()
			c.handle(d.Frame)
		}
	}
}

// handle answers one frame. Session operations run inline (they are one
// Redis round trip); chat starts a turn that outlives the socket; resume
// starts a goroutine owned by the client.
func (c *client) handle(f ClientFrame) {
	ctx := c.ctx
	t, u := c.ident.Tenant.ID, c.ident.User
	fail := func(err error, request string) {
		c.conn.Send(errorFrame(clientError(err), request))
	}
	switch f.Type {
	case TypePing:
		c.conn.Send(ServerFrame{Type: TypePong})
	case TypeAuth:
		fail(badRequest("already authenticated"), "")
	case TypeSessionCreate:
		v, err := c.s.sessions.Create(ctx, t, u, f.Title)
		if err != nil {
			fail(c.s.down("cannot store the session", err), "")
			return
		}
		if f.System != nil || f.Params != nil {
			if err := c.s.sessions.Update(ctx, t, u, v.ID, SessionUpdate{System: f.System, Params: f.Params}); err != nil {
				fail(c.s.storeError(err), "")
				return
			}
			if f.System != nil {
				v.System = *f.System
			}
			v.Params = f.Params
		}
		c.conn.Send(ServerFrame{Type: TypeSession, Session: v})
	case TypeSessionUpdate, TypeSessionBranch:
		c.handleSessionChange(f)
	case TypeSessionGet:
		v, err := c.s.sessions.Get(ctx, t, u, f.Session)
		if err != nil {
			fail(c.s.storeError(err), "")
			return
		}
		c.markLive(f.Session)
		c.conn.Send(ServerFrame{Type: TypeSession, Session: v})
	case TypeSessionList:
		list, err := c.s.sessions.List(ctx, t, u, f.Limit)
		if err != nil {
			fail(c.s.storeError(err), "")
			return
		}
		c.conn.Send(ServerFrame{Type: TypeSessions, Sessions: list})
	case TypeSessionRename:
		if err := c.s.sessions.Update(ctx, t, u, f.Session, SessionUpdate{Title: &f.Title}); err != nil {
			fail(c.s.storeError(err), "")
			return
		}
		v, err := c.s.sessions.Get(ctx, t, u, f.Session)
		if err != nil {
			fail(c.s.storeError(err), "")
			return
		}
		c.conn.Send(ServerFrame{Type: TypeSession, Session: v})
	case TypeSessionDelete:
		if err := c.s.sessions.Delete(ctx, t, u, f.Session); err != nil {
			fail(c.s.storeError(err), "")
			return
		}
		c.conn.Send(ServerFrame{Type: TypeDeleted, SessionID: f.Session})
	case TypeSessionResume:
		c.markLive(f.Session)
		c.s.metrics.resumes.WithLabelValues("started").Inc()
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			c.resume(f)
		}()
	case TypeChat:
		if err := c.s.startTurn(c, f); err != nil {
			fail(err, f.Request)
			return
		}
		c.markLive(f.Session)
	case TypeCancel:
		if c.s.cancelLocal(t, u, f.Request) {
			return
		}
		// Maybe another gateway runs it: ask, without holding up this
		// socket's other frames while the answer comes.
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			if !c.s.cancelRemote(c.ident, f.Request) {
				fail(notFound("request"), f.Request)
			}
		}()
	}
}

// storeError maps a session-store error for the client; one the client
// cannot act on (Redis unreachable, a script refused) is logged with its
// cause, which the client is not told.
func (s *Server) storeError(err error) *Error {
	if e := branchError(err); e != nil {
		return e
	}
	switch {
	case errors.Is(err, ErrNotFound):
		return notFound("session")
	case errors.Is(err, ErrDuplicateRequest):
		return badRequest("request id already used in this session")
	}
	return s.down("session storage unavailable", err)
}
