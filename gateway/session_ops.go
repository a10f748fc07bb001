package gateway

import (
	"context"
	"errors"

	"github.com/specgate/specgate/engine"
)

// handleSessionChange answers session.update and session.branch with the
// session as it now is.
func (c *client) handleSessionChange(f ClientFrame) {
	ctx := c.ctx
	t, u := c.ident.Tenant.ID, c.ident.User
	var err error
	switch f.Type {
	case TypeSessionUpdate:
		upd := SessionUpdate{System: f.System, Params: f.Params}
		if f.Title != "" {
			upd.Title = &f.Title
		}
		err = c.s.sessions.Update(ctx, t, u, f.Session, upd)
	case TypeSessionBranch:
		err = c.s.sessions.SwitchBranch(ctx, t, u, f.Session, f.Request, *f.Branch)
	}
	if err != nil {
		c.conn.Send(errorFrame(c.s.storeError(err), ""))
		return
	}
	v, err := c.s.sessions.Get(ctx, t, u, f.Session)
	if err != nil {
		c.conn.Send(errorFrame(c.s.storeError(err), ""))
		return
	}
	c.markLive(f.Session)
	c.conn.Send(ServerFrame{Type: TypeSession, Session: v})
}

// branchError maps the branch operations' errors for the client; nil when
// err is not one of them.
func branchError(err error) *Error {
	switch {
	case errors.Is(err, ErrNoTurn):
		return notFound("turn")
	case errors.Is(err, ErrNoBranch):
		return notFound("branch")
	case errors.Is(err, ErrBusy):
		return &Error{Code: CodeBadRequest, Reason: "busy", Message: "a reply is still being generated in this session; stop it or wait", Temporary: true}
	}
	return nil
}

// abortTurn undoes a turn refused before generation (AbortTurn), bounded
// by PersistTimeout: the client has the error either way.
func (s *Server) abortTurn(session, request string) {
	ctx, cancel := context.WithTimeout(context.Background(), s.o.PersistTimeout)
	defer cancel()
	if err := s.sessions.AbortTurn(ctx, session, request); err != nil {
		s.o.Logger.Warn("gateway: undo refused turn", "session", session, "request", request, "err", err)
	}
	// The entry is this gateway's own (the turn was registered): left in
	// the index it would expire and be "recovered" by another gateway,
	// and a retry with the same request id would inherit its deadline.
	s.unregisterTurn(session, request)
}

// defaultModelName names the model when nothing else does.
const defaultModelName = "specgate"

// modelInfo is the served model's description for ready frames and the
// OpenAI API: Options.Model, else Options.ModelName, else what the
// engines say (engine.ModelReporter: a gateway without a model), else
// defaultModelName.
func (s *Server) modelInfo() *ModelInfo {
	m, _ := s.servedModel()
	return m
}

// servedModel is modelInfo, and whether the name is known rather than the
// default a gateway shows before any engine has named its model (only a
// generator that reports its model, engine.ModelReporter, leaves it
// unknown; any other serves defaultModelName and refuses other names).
func (s *Server) servedModel() (*ModelInfo, bool) {
	if s.o.Model != nil && (s.o.Model.Name != "" || s.o.ModelName != "") {
		m := *s.o.Model
		if m.Name == "" {
			m.Name = s.o.ModelName
		}
		return &m, true
	}
	if s.o.ModelName != "" {
		return &ModelInfo{Name: s.o.ModelName}, true
	}
	r, ok := s.o.Generator.(engine.ModelReporter)
	if !ok {
		// Nothing will ever name another model: the default is the
		// name, and another is refused as the API documents.
		return &ModelInfo{Name: defaultModelName}, true
	}
	if c, ok := r.ServedModel(); ok && c.Name != "" {
		return &ModelInfo{Name: c.Name, Arch: c.Arch, Context: c.Context, Quantization: c.Quantization}, true
	}
	return &ModelInfo{Name: defaultModelName}, false
}
