package gateway

import (
	"fmt"
	"time"
)

// resume answers session.resume: the session frame, then, when a request
// is named, its deltas after f.After from the stream log and the live rest
// as the log grows, then done. Reading only from the log makes this the
// same on every gateway, whichever one runs the generation, and gives no
// gap and no duplicate: entry ids are the seqs.
func (c *client) resume(f ClientFrame) {
	s := c.s
	ctx := c.ctx
	t, u := c.ident.Tenant.ID, c.ident.User
	outcome := "ok"
	defer func() { s.metrics.resumes.WithLabelValues(outcome).Inc() }()
	fail := func(e *Error, o string) {
		outcome = o
		c.conn.Send(errorFrame(e, f.Request))
	}

	v, err := s.sessions.Get(ctx, t, u, f.Session)
	if err != nil {
		e := s.storeError(err)
		fail(e, e.Code)
		return
	}
	if f.Request == "" {
		c.conn.Send(ServerFrame{Type: TypeSession, Session: v})
		return
	}
	state, err := s.sessions.requestState(ctx, f.Session, f.Request)
	if err != nil {
		fail(s.down("session storage unavailable", err), "error")
		return
	}
	if state == "" {
		fail(notFound("request"), CodeNotFound)
		return
	}
	c.conn.Send(ServerFrame{Type: TypeSession, Session: v})

	after := f.After
	first, err := s.log.first(ctx, f.Session, f.Request)
	if err != nil {
		fail(s.down("session storage unavailable", err), "error")
		return
	}
	// The log was trimmed past what the client has, or expired.
	if (first > after+1) || (first == 0 && state == "done") {
		fail(&Error{Code: CodeExpired, Message: "the request's stream log no longer has those deltas; reload the session"}, CodeExpired)
		return
	}
	lastProgress := time.Now()
	for {
		if ctx.Err() != nil {
			outcome = "disconnected"
			return
		}
		entries, err := s.log.readAfter(ctx, f.Session, f.Request, after, 256)
		if err == nil && len(entries) == 0 {
			entries, err = s.log.waitAfter(ctx, f.Session, f.Request, after, 256, s.o.ResumePoll)
		}
		if err != nil {
			if ctx.Err() != nil {
				outcome = "disconnected"
				return
			}
			fail(s.down("session storage unavailable", err), "error")
			return
		}
		if len(entries) == 0 {
			// A finished request whose done record is not after the
			// client's seq: the client asked past the end; say so now
			// instead of waiting for entries that will never come.
			tail, err := s.log.last(ctx, f.Session, f.Request)
			if err == nil && tail != nil && tail.Done != nil && tail.Seq <= after {
				fail(badRequest(fmt.Sprintf("after %d is past the request's last delta (%d)", after, tail.Seq-1)), CodeBadRequest)
				return
			}
			if time.Since(lastProgress) > s.o.ResumeIdle {
				fail(unavailable("the generation stopped making progress"), "idle")
				return
			}
			continue
		}
		lastProgress = time.Now()
		for _, e := range entries {
			if e.Done != nil {
				c.conn.Send(*e.Done)
				return
			}
			if !c.conn.Send(ServerFrame{Type: TypeDelta, Request: f.Request, Seq: e.Seq, Text: e.Text}) {
				outcome = "disconnected"
				return
			}
			after = e.Seq
		}
	}
}
