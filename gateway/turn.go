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
	// stream is set under Server.mu once the generation runs: cancelLocal
	// reads it there.
	stream engine.Events
	// skip: the first skip deltas are in the log already (sent by the
	// gateway that started the turn, now dead): a turn attached to the
	// generation by crash recovery passes them over. Their text still
	// comes from the generation, read again from its first event: the
	// log may have lost its beginning to MAXLEN.
	skip int
	// logged: the generation appends its deltas to the stream log
	// itself (logGenerator), numbered in the protocol's seq; the turn
	// only reads them and passes them on.
	logged bool
	leased bool // holds a request slot in the tenant's counters
	// registered: the turn is in the running-turn index (recovery.go)
	// and this gateway renews it. Set under Server.mu.
	registered bool

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

// sendDelta sends a delta the log writer released (deltaSink).
func (t *turn) sendDelta(seq int, text string) {
	t.send(ServerFrame{Type: TypeDelta, Request: t.request, Seq: seq, Text: text})
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

// logGenerator is a Generator whose generations can append their deltas
// to a turn's stream log themselves, in the protocol's numbering (1, 2,
// ... for the deltas with text): cluster.Client, whose engines then write
// each delta to Redis once, where the turn and every resume read it. The
// deltas a generation yields are then those of the log, Seq its seq.
type logGenerator interface {
	GenerateToLog(ctx context.Context, r engine.Request, log string, maxLen int64, ttl time.Duration) (engine.Events, error)
}

// loggedEvents is a generation that appends to a stream log (LogKey).
type loggedEvents interface {
	LogKey() string
}

// logSealer is a logged generation whose log can be closed to further
// deltas (cluster.Stream): Seal stops the engine's appends and returns
// the deltas after the last one read. A turn seals before it stores its
// reply, so that the stored reply is exactly the log's deltas and the
// done record follows the last of them, even when the reading ended
// before the generation did (the reader gave up, a gap, a shutdown).
type logSealer interface {
	Seal(ctx context.Context) ([]engine.Event, error)
}

// appendsToLog reports whether generation ev appends its deltas to the
// stream log of the turn (sid, rid).
func (s *Server) appendsToLog(ev engine.Events, sid, rid string) bool {
	l, ok := ev.(loggedEvents)
	return ok && l.LogKey() != "" && l.LogKey() == s.log.key(sid, rid)
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
	// Only the session's owner may reserve one of its request ids: a
	// stranger's attempt must neither learn that an id is in use nor hold
	// it, even for a moment, against the owner's own chat.
	owned, err := s.sessions.owns(ctx, ten.ID, c.ident.User, f.Session)
	if err != nil {
		return s.down("session storage unavailable", err)
	}
	if !owned {
		return notFound("session")
	}

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
	release := s.holdTurn(id, t) // reserved; released on any failure below
	s.mu.Unlock()

	ok, err := s.limiter.AllowTokens(ctx, ten.ID, 0, ten.Limits.TokensPerMinute)
	if err != nil {
		release()
		return s.down("cannot reach the rate limiter", err)
	}
	if !ok {
		release()
		s.metrics.chats.WithLabelValues(ten.ID, CodeOverQuota).Inc()
		return &Error{Code: CodeOverQuota, Reason: ReasonTokensPerMinute, Message: "tokens per minute exceeded", Temporary: true}
	}
	ok, err = s.limiter.Acquire(ctx, ten.ID, tenants.LeaseRequests, id, ten.Limits.MaxConcurrent, s.o.LeaseTTL)
	if err != nil {
		release()
		return s.down("cannot reach the rate limiter", err)
	}
	if !ok {
		release()
		s.metrics.chats.WithLabelValues(ten.ID, CodeOverQuota).Inc()
		return &Error{Code: CodeOverQuota, Reason: ReasonConcurrency, Message: "too many concurrent requests", Temporary: true}
	}
	s.mu.Lock() // the lease refresher reads it: t is in s.turns already
	t.leased = ten.Limits.MaxConcurrent > 0
	s.mu.Unlock()
	releaseLease := func() {
		if t.leased {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_ = s.limiter.Release(ctx, ten.ID, tenants.LeaseRequests, id)
			cancel()
		}
	}

	// Entered in the running-turn index before anything is stored, so a
	// crash from here on leaves an entry to recover the turn from. An
	// attempt that fails below leaves the entry: it may be another
	// gateway's running turn with the same ids, and recovery drops entries
	// with nothing to recover.
	if err := s.registerTurn(ctx, f.Session, f.Request); err != nil {
		releaseLease()
		release()
		return s.down("session storage unavailable", err)
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
		return s.storeError(err)
	}
	// The turn is this gateway's now: it renews the index entry.
	s.mu.Lock()
	t.registered = true
	s.mu.Unlock()
	system, defaults, err := s.sessions.settings(ctx, f.Session)
	if err != nil {
		s.abortTurn(f.Session, f.Request)
		releaseLease()
		release()
		return s.storeError(err)
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
			Speculate:       ten.Limits.Speculate,
		},
		Messages: engineMessages(system, history),
		Sample:   samplingParams(f.Params),
		Guided:   guidedParams(f.Params),
	}
	if f.Params != nil {
		req.MaxTokens = f.Params.MaxTokens
		req.Stop = f.Params.Stop
		req.Speculate = f.Params.Speculate
	}
	var stream engine.Events
	if lg, ok := s.o.Generator.(logGenerator); ok {
		stream, err = lg.GenerateToLog(s.runCtx, req, s.log.key(f.Session, f.Request), s.log.maxLen, s.log.ttl)
	} else {
		stream, err = s.o.Generator.Generate(s.runCtx, req)
	}
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
	// t is in s.turns already: a cancel from another socket reads
	// stream there, under s.mu.
	s.mu.Lock()
	t.stream = stream
	s.mu.Unlock()
	t.logged = s.appendsToLog(stream, f.Session, f.Request)
	if a, ok := s.o.Generator.(attacher); ok {
		// Should this gateway die, crash recovery attaches another
		// to the generation instead of ending the reply partial. A
		// failure only costs that.
		// Not the socket's context: a client gone during placement
		// leaves a turn that runs on, whose takeover needs the handle
		// all the same.
		if h := a.Handle(stream); h != "" {
			actx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			if err := s.sessions.setAttach(actx, f.Session, f.Request, h); err != nil {
				s.o.Logger.Warn("gateway: a takeover will not be possible", "request", id, "err", err)
			}
			cancel()
		}
	}
	go func() {
		defer release()
		defer releaseLease()
		defer s.unregisterTurn(f.Session, f.Request)
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

// cancelLocal cancels the user's running requests of that id on this
// gateway (one per session at most); false when there is none.
func (s *Server) cancelLocal(tenant, user, request string) bool {
	s.mu.Lock()
	var found []*turn
	for _, t := range s.turns {
		if t.tenant.ID == tenant && t.user == user && t.request == request && t.stream != nil {
			found = append(found, t)
		}
	}
	s.mu.Unlock()
	for _, t := range found {
		t.interrupt(interruptCancel)
		s.o.Generator.Cancel(t.engineID)
	}
	return len(found) > 0
}

// logRetry is how long the log writer waits before trying again to append
// a turn's deltas after Redis refused.
const logRetry = 250 * time.Millisecond

// run reads the engine's events to the end: each delta is queued for the
// stream log, which the server's log writer appends in batches and sends
// live without waiting for Redis's answer (logwriter.go); the end stores
// the reply and sends done. A logged generation's deltas are in the log
// already when they come (the engine wrote them): they go to the client
// at once, under the log's seq.
//
// Redis going away does not end the turn: deltas the log could not take
// wait in the queue, retried as generation goes on and before the reply is
// stored, so an outage shorter than the rest of the generation plus
// PersistTimeout loses nothing, and a reply generated in full is stored in
// full.
func (t *turn) run() {
	s := t.s
	var text strings.Builder
	seq := 0
	var q *logQueue // nil: the generation writes the log
	if !t.logged {
		q = s.logw.queue(t.session, t.request, t)
		defer s.logw.end(q)
	}
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
		if t.logged {
			seq = ev.Seq
			text.WriteString(ev.Text)
			t.sendDelta(seq, ev.Text)
			continue
		}
		seq++
		text.WriteString(ev.Text)
		if seq <= t.skip {
			continue
		}
		// The log writer sends the delta to the client once its append
		// is on the wire to Redis, not once Redis answered
		// (logwriter.go): a kill right after the send still leaves it in
		// the log.
		s.logw.push(q, logEntry{Seq: seq, Text: ev.Text})
	}
	if sl, ok := t.stream.(logSealer); ok && t.logged {
		// The generation may have run on past what was read: what it
		// wrote is part of the reply, and nothing more may follow.
		// Retried while Redis is away, as storing the reply is: an
		// unsealed log may take a delta where the done record goes.
		evs := t.seal(sl)
		for _, ev := range evs {
			seq = ev.Seq
			text.WriteString(ev.Text)
			t.sendDelta(seq, ev.Text)
		}
	}
	// Every delta reaches the client before what ends the reply.
	if q != nil {
		s.logw.settle(q)
	}
	if final == nil {
		final = &engine.Final{FinishReason: engine.FinishError, Err: errors.New("stream ended without a final event")}
	}
	t.mu.Lock()
	why := t.interrupted
	t.mu.Unlock()
	reason := final.FinishReason
	if why != "" && (reason == engine.FinishStop || reason == engine.FinishLength) {
		why = "" // finished before the interruption took effect
	}
	if why == "" && (reason == engine.FinishCancelled || reason == engine.FinishError) {
		why = interruptError
		if reason == engine.FinishCancelled {
			why = interruptCancel
		}
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
			DraftedTokens:   final.Stats.Drafted,
			AcceptedTokens:  final.Stats.Accepted,
			Seed:            final.Stats.Seed,
		},
		DroppedMessages: final.DroppedMessages,
	}
	msg.Usage, msg.Stats = done.Usage, done.Stats
	if final.Err != nil && reason == engine.FinishError {
		ce := clientError(final.Err)
		msg.Error = ce.Message
		t.send(errorFrame(ce, t.request))
	}
	stored, ended := t.persist(msg, done, seq, func(ctx context.Context) bool { return q == nil || s.logw.flush(ctx, q) })
	if !stored {
		if q != nil {
			s.logw.abandon(q)
		}
		t.send(errorFrame(unavailable("the reply could not be stored"), t.request))
	}
	t.send(done)
	if stored && !ended {
		// Another gateway read the same generation to its end (it
		// took this one for dead) and stored it: it charged the
		// tenant and counted the chat.
		return
	}
	s.metrics.chats.WithLabelValues(t.tenant.ID, reason).Inc()
	used := final.Usage.PromptTokens + final.Usage.CompletionTokens
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	_ = s.limiter.ChargeTokens(ctx, t.tenant.ID, used, t.tenant.Limits.TokensPerMinute)
	cancel()
}

// seal closes the turn's log to the generation (logSealer) and returns the
// deltas it holds past those read, retrying for up to PersistTimeout.
func (t *turn) seal(sl logSealer) []engine.Event {
	s := t.s
	ctx, cancel := context.WithTimeout(context.Background(), s.o.PersistTimeout)
	defer cancel()
	var evs []engine.Event
	backoff := 20 * time.Millisecond
	for {
		more, err := sl.Seal(ctx)
		evs = append(evs, more...)
		if err == nil {
			return evs
		}
		s.o.Logger.Warn("gateway: seal the stream log; retrying", "request", t.engineID, "err", err)
		select {
		case <-ctx.Done():
			return evs
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
}

// persist stores the end of a turn, retrying while Redis is unreachable,
// up to PersistTimeout: first the log's backlog (flushed writes it and
// reports whether it is empty now), then the reply, then the log's done
// record. It reports whether the reply was stored, and whether this
// gateway ended the turn: not so when another one, reading the same
// generation, finished it first and wrote its done record.
func (t *turn) persist(msg Message, done ServerFrame, lastSeq int, flushed func(context.Context) bool) (stored, ended bool) {
	s := t.s
	ctx, cancel := context.WithTimeout(context.Background(), s.o.PersistTimeout)
	defer cancel()
	backoff := 20 * time.Millisecond
	for {
		var err error
		if !flushed(ctx) {
			err = errors.New("stream log backlog not written")
		} else if ended, err = s.sessions.FinishTurn(ctx, s.gwID, t.tenant.ID, t.user, t.session, msg); err == nil {
			if !ended {
				return true, false
			}
			// The done record lets resumers finish; without it they time
			// out on ResumeIdle, which is also what a lost log looks like.
			if err := s.log.appendDone(ctx, t.session, t.request, lastSeq, done); err != nil {
				s.o.Logger.Warn("gateway: stream log done record", "request", t.engineID, "err", err)
			}
			return true, true
		}
		s.o.Logger.Warn("gateway: store reply; retrying", "request", t.engineID, "err", err)
		select {
		case <-ctx.Done():
			s.o.Logger.Error("gateway: reply lost", "request", t.engineID, "err", err)
			return false, false
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// holdTurn records t as the turn running under id and returns what ends
// that: Shutdown waits until every held turn is released. The caller holds
// s.mu and has checked that no turn runs under id.
func (s *Server) holdTurn(id string, t *turn) (release func()) {
	s.turns[id] = t
	s.turnsWG.Add(1)
	return func() {
		s.mu.Lock()
		delete(s.turns, id)
		s.mu.Unlock()
		s.turnsWG.Done()
	}
}
