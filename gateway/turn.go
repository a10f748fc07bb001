package gateway

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/tenants"
)

// Why a reply was cut short (Message.Interrupted).
const (
	interruptCancel   = "cancel"
	interruptShutdown = "shutdown"
	interruptError    = "error"
)

// turn is one chat request's generation. The Server owns it (not the
// socket that started it): it runs to its end even when the socket drops,
// appending deltas to the stream log for resumes, and stores the reply.
type turn struct {
	s        *Server
	engineID string
	tenant   *tenants.Tenant
	user     string
	session  string
	request  string
	stream   EventStream
	leased   bool // holds a request slot in the tenant's counters

	mu          sync.Mutex // protects the fields below
	conn        *Connection
	interrupted string
}

// engineRequestID names a turn for the engine: client request ids are
// unique only within a session, engine ids must be unique overall.
func engineRequestID(tenant, session, request string) string {
	return tenant + "/" + session + "/" + request
}

func (t *turn) interrupt(why string) {
	t.mu.Lock()
	if t.interrupted == "" {
		t.interrupted = why
	}
	t.mu.Unlock()
}

// send forwards f to the socket that started the turn, while it is open.
// A dropped socket is forgotten; the turn goes on.
func (t *turn) send(f ServerFrame) {
	t.mu.Lock()
	c := t.conn
	t.mu.Unlock()
	if c == nil {
		return
	}
	if !c.Send(f) {
		t.mu.Lock()
		t.conn = nil
		t.mu.Unlock()
	}
}

// startTurn checks quotas, stores the user message, submits the request
// and starts the turn. Errors are for the client.
func (s *Server) startTurn(c *client, f ClientFrame) error {
	ten := c.ident.Tenant
	ctx := c.ctx
	// A disabled tenant's open sockets stop at their next chat.
	if cur, err := s.tenants.Get(ctx, ten.ID); err == nil {
		if cur.Disabled {
			return &Error{Code: CodeForbidden, Reason: ReasonTenantDisabled, Message: "tenant disabled"}
		}
		ten = cur
	}
	id := engineRequestID(ten.ID, f.Session, f.Request)

	s.mu.Lock()
	if s.draining {
		s.mu.Unlock()
		return &Error{Code: CodeUnavailable, Reason: ReasonShutdown, Message: "gateway shutting down", Temporary: true}
	}
	if running, busy := s.turns[id]; busy {
		s.mu.Unlock()
		// Only the session's owner may learn that the id is in use:
		// anyone else is told what a missing session tells them.
		if running.user != c.ident.User {
			return notFound("session")
		}
		return badRequest("request id already used in this session")
	}
	t := &turn{s: s, engineID: id, tenant: ten, user: c.ident.User, session: f.Session, request: f.Request, conn: c.conn}
	s.turns[id] = t // reserved; removed on any failure below
	s.turnsWG.Add(1)
	s.mu.Unlock()
	release := func() {
		s.mu.Lock()
		delete(s.turns, id)
		s.mu.Unlock()
		s.turnsWG.Done()
	}

	ok, err := s.limiter.AllowTokens(ctx, ten.ID, 0, ten.Limits.TokensPerMinute)
	if err != nil {
		release()
		return unavailable("cannot reach the rate limiter")
	}
	if !ok {
		release()
		s.metrics.chats.WithLabelValues(ten.ID, CodeOverQuota).Inc()
		return &Error{Code: CodeOverQuota, Reason: ReasonTokensPerMinute, Message: "tokens per minute exceeded", Temporary: true}
	}
	ok, err = s.limiter.Acquire(ctx, ten.ID, tenants.LeaseRequests, id, ten.Limits.MaxConcurrent, s.o.LeaseTTL)
	if err != nil {
		release()
		return unavailable("cannot reach the rate limiter")
	}
	if !ok {
		release()
		s.metrics.chats.WithLabelValues(ten.ID, CodeOverQuota).Inc()
		return &Error{Code: CodeOverQuota, Reason: ReasonConcurrency, Message: "too many concurrent requests", Temporary: true}
	}
	t.leased = ten.Limits.MaxConcurrent > 0
	releaseLease := func() {
		if t.leased {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_ = s.limiter.Release(ctx, ten.ID, tenants.LeaseRequests, id)
			cancel()
		}
	}

	var history []Message
	if f.Replace != "" {
		history, err = s.sessions.StartReplaceTurn(ctx, ten.ID, c.ident.User, f.Session, f.Request, f.Replace, f.Content)
	} else {
		history, err = s.sessions.StartTurn(ctx, ten.ID, c.ident.User, f.Session, f.Request, f.Content)
	}
	if err != nil {
		releaseLease()
		release()
		return storeError(err)
	}
	system, defaults, err := s.sessions.settings(ctx, f.Session)
	if err != nil {
		s.abortTurn(f.Session, f.Request)
		releaseLease()
		release()
		return storeError(err)
	}
	f.Params = mergeParams(defaults, f.Params)

	req := engine.Request{
		ID:       id,
		Tenant:   ten.ID,
		User:     c.ident.User,
		Session:  f.Session,
		Priority: requestPriority(ten.Priority, paramPriority(f.Params)),
		Limits: engine.TenantLimits{
			Weight:          ten.Weight,
			MaxConcurrent:   ten.Limits.MaxConcurrent,
			TokensPerMinute: ten.Limits.TokensPerMinute,
			MaxContext:      ten.Limits.MaxContext,
		},
		Messages: engineMessages(system, history),
		Sample:   samplingParams(f.Params),
		Guided:   guidedParams(f.Params),
	}
	if f.Params != nil {
		req.MaxTokens = f.Params.MaxTokens
		req.Stop = f.Params.Stop
	}
	stream, err := s.o.Generator.Submit(s.runCtx, req)
	if err != nil {
		// A refusal is not a turn: the user message leaves the history
		// (the client keeps it to retry) and the request id is free again.
		ce := clientError(err)
		s.metrics.chats.WithLabelValues(ten.ID, ce.Code).Inc()
		s.abortTurn(f.Session, f.Request)
		releaseLease()
		release()
		return ce
	}
	t.stream = stream
	go func() {
		defer release()
		defer releaseLease()
		t.run()
	}()
	return nil
}

func paramPriority(p *ChatParams) string {
	if p == nil {
		return ""
	}
	return p.Priority
}

// cancelTurn cancels a running request of ident's; false when there is
// none here. (A request running on another gateway is not reachable.)
func (s *Server) cancelTurn(ident Identity, request string) bool {
	s.mu.Lock()
	var found *turn
	for _, t := range s.turns {
		if t.tenant.ID == ident.Tenant.ID && t.user == ident.User && t.request == request && t.stream != nil {
			found = t
			break
		}
	}
	s.mu.Unlock()
	if found == nil {
		return false
	}
	found.interrupt(interruptCancel)
	s.o.Generator.Cancel(found.engineID)
	return true
}

// run reads the engine's events to the end: each delta is logged, then sent
// live; the end stores the reply and sends done.
func (t *turn) run() {
	s := t.s
	var text strings.Builder
	seq := 0
	logOK := true
	var final *engine.Final
	for {
		ev, err := t.stream.Recv(s.runCtx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			// The server gave up on the turn (hard shutdown).
			t.interrupt(interruptShutdown)
			final = &engine.Final{FinishReason: engine.FinishCancelled}
			break
		}
		if ev.Final != nil {
			final = ev.Final
			continue // the stream ends with io.EOF next
		}
		if ev.Text == "" {
			continue // tokens that do not yet make whole characters
		}
		seq++
		text.WriteString(ev.Text)
		if logOK {
			ctx, cancel := context.WithTimeout(s.runCtx, s.o.WriteTimeout)
			err := s.log.appendDelta(ctx, t.session, t.request, seq, ev.Text)
			cancel()
			if err != nil {
				// Without the log the turn cannot be resumed and its reply
				// may not be storable: end it now, clearly, and keep what
				// was generated.
				logOK = false
				s.o.Logger.Warn("gateway: stream log unavailable; cancelling turn", "request", t.engineID, "err", err)
				t.interrupt(interruptError)
				t.send(errorFrame(unavailable("storage unavailable; the reply was cut short"), t.request))
				s.o.Generator.Cancel(t.engineID)
			}
		}
		t.send(ServerFrame{Type: TypeDelta, Request: t.request, Seq: seq, Text: ev.Text})
	}
	if final == nil {
		final = &engine.Final{FinishReason: engine.FinishError, Err: errors.New("stream ended without a final event")}
	}
	t.mu.Lock()
	why := t.interrupted
	t.mu.Unlock()
	reason := final.FinishReason
	if why != "" && reason == engine.FinishStop {
		why = "" // finished before the interruption took effect
	}
	if why == "" && (reason == engine.FinishCancelled || reason == engine.FinishError) {
		why = interruptError
		if reason == engine.FinishCancelled {
			why = interruptCancel
		}
	}
	if why == interruptError && reason == engine.FinishCancelled {
		reason = engine.FinishError // cancelled by the gateway because storage failed
	}
	msg := Message{
		Request: t.request, Content: text.String(), FinishReason: reason,
		Partial: why != "", Interrupted: why,
	}
	done := ServerFrame{
		Type: TypeDone, Request: t.request, FinishReason: reason,
		Usage: &Usage{
			PromptTokens:     final.Usage.PromptTokens,
			CompletionTokens: final.Usage.CompletionTokens,
			CachedTokens:     final.Usage.CachedTokens,
		},
		Stats: &Stats{
			QueueMS:         ms(final.Stats.Queue),
			TTFTMS:          ms(final.Stats.TTFT),
			TokensPerSecond: final.Stats.TokensPerSecond,
			AcceptedPerStep: final.Stats.AcceptedPerStep,
			Seed:            final.Stats.Seed,
		},
		DroppedMessages: final.DroppedMessages,
	}
	msg.Usage, msg.Stats = done.Usage, done.Stats
	if final.Err != nil && reason == engine.FinishError {
		ce := clientError(final.Err)
		msg.Error = ce.Message
		if logOK {
			t.send(errorFrame(ce, t.request))
		}
	}
	if !logOK {
		msg.Error = "storage unavailable; the reply was cut short"
	}
	stored := t.persist(msg, done, seq)
	if !stored {
		t.send(errorFrame(unavailable("the reply could not be stored"), t.request))
	}
	t.send(done)
	s.metrics.chats.WithLabelValues(t.tenant.ID, reason).Inc()
	used := final.Usage.PromptTokens + final.Usage.CompletionTokens
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	_ = s.limiter.ChargeTokens(ctx, t.tenant.ID, used, t.tenant.Limits.TokensPerMinute)
	cancel()
}

// persist stores the reply and the log's done record, retrying while
// Redis is unreachable, up to PersistTimeout. It reports whether the
// reply was stored.
func (t *turn) persist(msg Message, done ServerFrame, lastSeq int) bool {
	s := t.s
	ctx, cancel := context.WithTimeout(context.Background(), s.o.PersistTimeout)
	defer cancel()
	backoff := 20 * time.Millisecond
	for {
		err := s.sessions.FinishTurn(ctx, t.tenant.ID, t.user, t.session, msg)
		if err == nil {
			// The done record lets resumers finish; without it they time
			// out on ResumeIdle, which is also what a lost log looks like.
			if err := s.log.appendDone(ctx, t.session, t.request, lastSeq, done); err != nil {
				s.o.Logger.Warn("gateway: stream log done record", "request", t.engineID, "err", err)
			}
			return true
		}
		s.o.Logger.Warn("gateway: store reply; retrying", "request", t.engineID, "err", err)
		select {
		case <-ctx.Done():
			s.o.Logger.Error("gateway: reply lost", "request", t.engineID, "err", err)
			return false
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
