package gateway

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// sessionRoutes serves the session HTTP API; every route needs
// "Authorization: Bearer <JWT>", verified like the socket's.
//
//	GET    /v1/sessions?limit=N  {"sessions":[SessionInfo…]}, most recent first
//	POST   /v1/sessions          {"title":…} → 201 SessionView
//	GET    /v1/sessions/{id}     SessionView with messages
//	PATCH  /v1/sessions/{id}     {"title","system","params"} (each optional) → SessionView
//	DELETE /v1/sessions/{id}     204
//
// Errors are {"error":{"code":…,"reason":…,"message":…}} with the
// protocol's codes; a session of another tenant or user is 404 not_found.
func (s *Server) sessionRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/sessions", s.authed(func(w http.ResponseWriter, r *http.Request, id Identity) {
		limit, _ := strconv.Atoi(r.URL.Query().Get("limit"))
		list, err := s.sessions.List(r.Context(), id.Tenant.ID, id.User, limit)
		if err != nil {
			httpError(w, s.storeError(err))
			return
		}
		if list == nil {
			list = []SessionInfo{}
		}
		httpJSON(w, http.StatusOK, map[string]any{"sessions": list})
	}))
	mux.HandleFunc("POST /v1/sessions", s.authed(func(w http.ResponseWriter, r *http.Request, id Identity) {
		var body struct {
			Title string `json:"title"`
		}
		if !httpBody(w, r, &body) {
			return
		}
		v, err := s.sessions.Create(r.Context(), id.Tenant.ID, id.User, body.Title)
		if err != nil {
			httpError(w, s.storeError(err))
			return
		}
		httpJSON(w, http.StatusCreated, v)
	}))
	mux.HandleFunc("GET /v1/sessions/{id}", s.authed(func(w http.ResponseWriter, r *http.Request, id Identity) {
		v, err := s.sessions.Get(r.Context(), id.Tenant.ID, id.User, r.PathValue("id"))
		if err != nil {
			httpError(w, s.storeError(err))
			return
		}
		httpJSON(w, http.StatusOK, v)
	}))
	mux.HandleFunc("PATCH /v1/sessions/{id}", s.authed(func(w http.ResponseWriter, r *http.Request, id Identity) {
		// Fields left out stay as they are (session.update's rules).
		var body struct {
			Title  *string     `json:"title"`
			System *string     `json:"system"`
			Params *ChatParams `json:"params"`
		}
		if !httpBody(w, r, &body) {
			return
		}
		sid := r.PathValue("id")
		f := ClientFrame{Type: TypeSessionUpdate, Session: sid, System: body.System, Params: body.Params}
		if body.Title != nil {
			f.Title = *body.Title
		}
		if err := f.validate(); err != nil {
			httpError(w, clientError(err))
			return
		}
		upd := SessionUpdate{Title: body.Title, System: body.System, Params: body.Params}
		if err := s.sessions.Update(r.Context(), id.Tenant.ID, id.User, sid, upd); err != nil {
			httpError(w, s.storeError(err))
			return
		}
		v, err := s.sessions.Get(r.Context(), id.Tenant.ID, id.User, sid)
		if err != nil {
			httpError(w, s.storeError(err))
			return
		}
		httpJSON(w, http.StatusOK, v)
	}))
	mux.HandleFunc("DELETE /v1/sessions/{id}", s.authed(func(w http.ResponseWriter, r *http.Request, id Identity) {
		if err := s.sessions.Delete(r.Context(), id.Tenant.ID, id.User, r.PathValue("id")); err != nil {
			httpError(w, s.storeError(err))
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
}

func (s *Server) authed(h func(http.ResponseWriter, *http.Request, Identity)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		token, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		id, err := s.auth.verify(r.Context(), token)
		if err != nil {
			s.metrics.authFailures.WithLabelValues(err.Reason).Inc()
			httpError(w, err)
			return
		}
		h(w, r, id)
	}
}

func httpBody(w http.ResponseWriter, r *http.Request, v any) bool {
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(v); err != nil {
		httpError(w, badRequest("body: "+err.Error()))
		return false
	}
	if t, ok := v.(*struct {
		Title string `json:"title"`
	}); ok && len(t.Title) > MaxTitleLen {
		httpError(w, badRequest("title too long"))
		return false
	}
	return true
}

func httpStatus(code string) int {
	switch code {
	case CodeUnauthorized:
		return http.StatusUnauthorized
	case CodeForbidden:
		return http.StatusForbidden
	case CodeNotFound, CodeExpired:
		return http.StatusNotFound
	case CodeBadRequest, CodeContextTooLong:
		return http.StatusBadRequest
	case CodeOverQuota, CodeQueueFull:
		return http.StatusTooManyRequests
	case CodeUnavailable:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

func httpError(w http.ResponseWriter, e *Error) {
	body := map[string]string{"code": e.Code, "message": e.Message}
	if e.Reason != "" {
		body["reason"] = e.Reason
	}
	httpJSON(w, httpStatus(e.Code), map[string]any{"error": body})
}

func httpJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
