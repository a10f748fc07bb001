package gateway

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/tenants"
)

// Crash recovery. A turn outlives its socket but not its process: when the
// gateway running a turn dies (kill -9, a lost machine), nobody would store
// its reply or end its stream log, and resumes would wait for entries that
// never come. So every running turn is entered in the running-turn index
// with a lease that its gateway renews; every gateway scans the index, and
// a turn whose lease ran out is finalized from its stream log by whichever
// gateway claims it first: the deltas that reached Redis become the stored
// reply (partial, interrupted "crash") and a done record ends the log, so
// every resume ends.
//
// The request record's state fences the two writers. Recovery stores the
// reply only while the state is "running", and marks the record reaped; an
// owner that was not dead after all (stalled past its lease) and finishes
// later replaces the recovered reply with its own (finishScript), so a
// reply that was generated in full is never left stored as partial. Its
// late deltas cannot enter a log that already ends with a done record:
// stream ids only grow.
//
// A lease expiry alone is not taken as death: a gateway cut off from Redis
// cannot renew either. Recovery acts only on an entry it has seen expired,
// with the same deadline, for two renew intervals, so an owner that comes
// back with Redis renews before anyone else claims its turns.

// interruptCrash marks a reply finalized by recovery after its gateway died.
const interruptCrash = "crash"

// turnMember names a turn in the running-turn index (ids hold no space).
func turnMember(sid, rid string) string { return sid + " " + rid }

// registerTurn enters a turn in the index before its user message is
// stored, so a crash at any later point leaves an entry to recover from.
// An entry already there (the same ids running elsewhere) is left as it is.
func (s *Server) registerTurn(ctx context.Context, sid, rid string) error {
	err := s.o.Redis.ZAddNX(ctx, s.ks.RunningTurns(), redis.Z{
		Score: float64(s.o.Clock.Now().Add(s.o.TurnLease).UnixMilli()), Member: turnMember(sid, rid),
	}).Err()
	if err != nil {
		return fmt.Errorf("gateway: register turn %s: %w", rid, err)
	}
	return nil
}

// unregisterTurn removes a turn that ended (or never started) from the
// index; a failure only costs a later recovery pass that finds it done.
func (s *Server) unregisterTurn(sid, rid string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := s.o.Redis.ZRem(ctx, s.ks.RunningTurns(), turnMember(sid, rid)).Err(); err != nil {
		s.o.Logger.Warn("gateway: unregister turn", "session", sid, "request", rid, "err", err)
	}
}

// expiredSince is when recovery first saw an index entry past its deadline,
// and with which deadline.
type expiredSince struct {
	deadline float64
	seen     time.Time
}

// watchTurns renews the leases of this gateway's turns and recovers the
// turns of dead gateways, every TurnLease/5, until the server stops.
func (s *Server) watchTurns() {
	defer s.bg.Done()
	every := s.o.TurnLease / 5
	tick := time.NewTicker(every)
	defer tick.Stop()
	seen := map[string]expiredSince{}
	for {
		select {
		case <-s.runCtx.Done():
			return
		case <-tick.C:
		}
		s.renewTurns()
		s.recoverExpired(seen, 2*every)
	}
}

// renewTurns pushes the deadline of every turn this gateway runs. A plain
// ZADD, not XX: an owner that is alive puts back an entry that recovery
// took (it finalized too early; finishScript mends the reply), and one that
// recovery dropped as empty while the turn was starting.
func (s *Server) renewTurns() {
	s.mu.Lock()
	members := make([]redis.Z, 0, len(s.turns))
	deadline := float64(s.o.Clock.Now().Add(s.o.TurnLease).UnixMilli())
	for _, t := range s.turns {
		if t.registered {
			members = append(members, redis.Z{Score: deadline, Member: turnMember(t.session, t.request)})
		}
	}
	s.mu.Unlock()
	if len(members) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(s.runCtx, 2*time.Second)
	defer cancel()
	if err := s.o.Redis.ZAdd(ctx, s.ks.RunningTurns(), members...).Err(); err != nil {
		s.o.Logger.Warn("gateway: renew running turns", "err", err)
	}
}

// claimScript takes over an expired entry: only if its deadline is still
// the one recovery saw (its owner did not renew, nobody else claimed it),
// it gets a new deadline, so other gateways leave it alone while this one
// finalizes it. KEYS: the index. ARGV: member, seen deadline, new deadline.
var claimScript = redis.NewScript(`
local cur = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not cur or tonumber(cur) ~= tonumber(ARGV[2]) then return 0 end
redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1])
return 1
`)

// recoverExpired finalizes turns whose deadline passed at least observe
// ago (by this gateway's own observation) and that this gateway claims.
func (s *Server) recoverExpired(seen map[string]expiredSince, observe time.Duration) {
	s.mu.Lock()
	draining := s.draining
	s.mu.Unlock()
	if draining {
		// A turn taken over now could not run to its end here; the
		// gateways that stay take it.
		return
	}
	ctx, cancel := context.WithTimeout(s.runCtx, 10*time.Second)
	defer cancel()
	now := s.o.Clock.Now()
	due, err := s.o.Redis.ZRangeByScoreWithScores(ctx, s.ks.RunningTurns(), &redis.ZRangeBy{
		Min: "-inf", Max: strconv.FormatInt(now.UnixMilli(), 10), Count: 64,
	}).Result()
	if err != nil {
		return // Redis is away; the next tick tries again
	}
	s.mu.Lock()
	mine := make(map[string]bool, len(s.turns))
	for _, t := range s.turns {
		mine[turnMember(t.session, t.request)] = true
	}
	s.mu.Unlock()
	still := make(map[string]bool, len(due))
	for _, z := range due {
		member, _ := z.Member.(string)
		still[member] = true
		if mine[member] {
			continue // this gateway's own turn: it renews it itself
		}
		prev, ok := seen[member]
		if !ok || prev.deadline != z.Score {
			seen[member] = expiredSince{deadline: z.Score, seen: now}
			continue
		}
		if now.Sub(prev.seen) < observe {
			continue
		}
		delete(seen, member)
		claimed, err := claimScript.Run(ctx, s.o.Redis, []string{s.ks.RunningTurns()},
			member, z.Score, now.Add(s.o.TurnLease).UnixMilli()).Int()
		if err != nil || claimed == 0 {
			continue
		}
		sid, rid, _ := strings.Cut(member, " ")
		attached, err := s.recoverTurn(ctx, sid, rid)
		if err != nil {
			// Left in the index: its new deadline passes and some
			// gateway tries again.
			s.o.Logger.Warn("gateway: recover turn", "session", sid, "request", rid, "err", err)
			continue
		}
		s.metrics.recovered.Inc()
		if !attached { // an attached turn is this gateway's now: it renews it
			s.unregisterTurn(sid, rid)
		}
	}
	for m := range seen {
		if !still[m] {
			delete(seen, m)
		}
	}
}

// attacher is a Generator whose generations outlive the gateway that
// started them, because they run in another process (cluster.Client):
// Handle names one, and another gateway Attaches to it by that name and
// reads it from its first event.
type attacher interface {
	Handle(ev engine.Events) string
	Attach(ctx context.Context, handle string) (engine.Events, error)
}

// recoverTurn takes over a turn whose gateway died. When its generation
// runs on elsewhere (an attacher's, with its handle recorded) this
// gateway attaches to it and runs the turn to its end: the deltas the log
// lacks are appended, the reply is stored whole, and resumes read on
// without a gap (attached). An attach that fails while the generation
// may run on stores nothing and returns the error: the turn stays in the
// index for a later try. Otherwise (no handle, or the generation is gone)
// the deltas in its log become the stored reply and a done record ends
// the log, in one step that holds only while no delta came after the
// read (in split mode an engine may still be appending: the dead gateway
// had not recorded the handle yet), else the log is read again. A turn
// that had in fact finished only gets the done record it may lack.
func (s *Server) recoverTurn(ctx context.Context, sid, rid string) (attached bool, err error) {
	state, finish, handle, err := s.sessions.requestFinish(ctx, sid, rid)
	if err != nil {
		return false, err
	}
	if state == "" {
		return false, nil // no record: the turn never started, or long expired
	}
	entries, err := s.log.readAfter(ctx, sid, rid, 0, 0)
	if err != nil {
		return false, err
	}
	text, lastSeq, ended := logText(entries)
	if ended {
		return false, nil // the owner ended it; only its unregister was lost
	}
	if a, ok := s.o.Generator.(attacher); ok && state == "running" && handle != "" {
		err := s.attachTurn(ctx, a, sid, rid, handle, lastSeq)
		if err == nil {
			return true, nil
		}
		if !errors.Is(err, engine.ErrGone) && !errors.Is(err, errSessionGone) {
			// The generation may still run (this gateway is draining,
			// Redis or the engines hiccuped): ending the reply now
			// would store a partial one that no gateway could mend.
			// Left in the index, the turn is tried again.
			return false, fmt.Errorf("gateway: attach to a dead gateway's generation: %w", err)
		}
		s.o.Logger.Warn("gateway: the dead gateway's generation is gone; ending its reply", "session", sid, "request", rid, "err", err)
	}
	if state != "running" {
		reason := finish
		if reason == "" {
			reason = engine.FinishError
		}
		done := ServerFrame{Type: TypeDone, Request: rid, FinishReason: reason, Usage: &Usage{}, Stats: &Stats{}}
		return false, s.log.appendDone(ctx, sid, rid, lastSeq, done)
	}
	tenant, user, err := s.sessions.ownerOf(ctx, sid)
	if err != nil {
		return false, err
	}
	done := ServerFrame{Type: TypeDone, Request: rid, FinishReason: engine.FinishError, Usage: &Usage{}, Stats: &Stats{}}
	for range 20 {
		stored, err := s.sessions.RecoverEnd(ctx, tenant, user, sid, Message{
			Request: rid, Content: text, FinishReason: engine.FinishError,
			Partial: true, Interrupted: interruptCrash,
			Error: "the gateway generating this reply stopped",
		}, s.log.key(sid, rid), s.log.maxLen, lastSeq, done)
		if !errors.Is(err, errLogMoved) {
			if stored {
				s.o.Logger.Warn("gateway: recovered the reply of a dead gateway's turn", "session", sid, "request", rid, "deltas", lastSeq)
			}
			// Not stored: the owner finished meanwhile and writes its
			// own done, or the log was ended already.
			return false, err
		}
		if entries, err = s.log.readAfter(ctx, sid, rid, 0, 0); err != nil {
			return false, err
		}
		if text, lastSeq, ended = logText(entries); ended {
			return false, nil
		}
	}
	return false, errors.New("gateway: the dead gateway's turn's log keeps growing; trying again later")
}

// logText is the text of a log's deltas, the seq of the last one, and
// whether a done record follows them.
func logText(entries []logEntry) (text string, lastSeq int, ended bool) {
	var b strings.Builder
	for _, e := range entries {
		if e.Done != nil {
			return b.String(), lastSeq, true
		}
		b.WriteString(e.Text)
		lastSeq = e.Seq
	}
	return b.String(), lastSeq, false
}

// errSessionGone: the turn's session was deleted; nothing can store its
// reply.
var errSessionGone = errors.New("gateway: the session is gone")

// attachTurn runs, on this gateway, the turn of a dead gateway whose
// generation goes on elsewhere: it reads the generation from its first
// event, passes over the logged deltas, and handles the rest as a
// turn does (no socket of its own: clients follow it by resuming).
func (s *Server) attachTurn(ctx context.Context, a attacher, sid, rid, handle string, logged int) error {
	tenantID, user, err := s.sessions.ownerOf(ctx, sid)
	if err != nil {
		return err
	}
	if tenantID == "" {
		return errSessionGone
	}
	ten, err := s.tenants.Get(ctx, tenantID)
	if err != nil {
		return fmt.Errorf("gateway: read tenant %s: %w", tenantID, err)
	}
	id := engineRequestID(tenantID, sid, rid)
	t := &turn{s: s, engineID: id, tenant: ten, user: user, session: sid, request: rid, skip: logged, registered: true}
	s.mu.Lock()
	if s.draining {
		s.mu.Unlock()
		return errors.New("gateway: shutting down")
	}
	if _, busy := s.turns[id]; busy {
		s.mu.Unlock()
		return errors.New("gateway: the turn runs here already")
	}
	release := s.holdTurn(id, t)
	s.mu.Unlock()
	// The generation runs on, so it keeps a slot of the tenant's
	// concurrency cap, whatever the cap says now: the dead gateway's lease
	// (the same holder) lapses with it, and without this one the tenant
	// could start one more generation per turn taken over.
	if ten.Limits.MaxConcurrent > 0 {
		if err := s.limiter.Hold(ctx, ten.ID, tenants.LeaseRequests, id, s.o.LeaseTTL); err != nil {
			release()
			return err
		}
		s.mu.Lock() // the lease refresher reads it
		t.leased = true
		s.mu.Unlock()
	}
	releaseLease := func() {
		if t.leased {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_ = s.limiter.Release(ctx, ten.ID, tenants.LeaseRequests, id)
			cancel()
		}
	}
	stream, err := a.Attach(ctx, handle)
	if err != nil {
		if errors.Is(err, engine.ErrGone) {
			releaseLease()
		}
		// Otherwise the generation may still run (and a later try
		// attaches): the lease, which is also the dead gateway's, is
		// left to lapse, not taken away from it.
		release()
		return err
	}
	s.mu.Lock() // cancelLocal reads it, from another socket's goroutine
	t.stream = stream
	s.mu.Unlock()
	t.logged = s.appendsToLog(stream, sid, rid)
	s.o.Logger.Warn("gateway: took over a dead gateway's turn; its generation goes on", "session", sid, "request", rid, "logged", logged)
	go func() {
		defer release()
		defer releaseLease()
		defer s.unregisterTurn(sid, rid)
		t.run()
	}()
	return nil
}
