package gateway

import (
	"errors"

	"github.com/specgate/specgate/engine"
)

// Error codes of the protocol (PROTOCOL.md). Stable: add, never rename.
const (
	CodeUnauthorized   = "unauthorized"
	CodeForbidden      = "forbidden"
	CodeNotFound       = "not_found"
	CodeBadRequest     = "bad_request"
	CodeOverQuota      = "over_quota"
	CodeQueueFull      = "queue_full"
	CodeContextTooLong = "context_too_long"
	CodeInternal       = "internal"
	// CodeUnavailable: storage or engine is down or the gateway is shutting
	// down; retrying later may succeed.
	CodeUnavailable = "unavailable"
	// CodeExpired: a resume asked for deltas the stream log no longer has.
	CodeExpired = "expired"
)

// Reasons refine unauthorized, forbidden and over_quota errors (and close
// frames).
// Stable: add, never rename.
const (
	ReasonMissingToken     = "missing_token"
	ReasonMalformedToken   = "malformed_token"
	ReasonAlgNotAllowed    = "alg_not_allowed"
	ReasonUnknownKid       = "unknown_kid"
	ReasonBadSignature     = "bad_signature"
	ReasonTokenExpired     = "token_expired"
	ReasonMissingExp       = "missing_exp"
	ReasonNotYetValid      = "not_yet_valid"
	ReasonWrongAudience    = "wrong_audience"
	ReasonMissingSubject   = "missing_subject"
	ReasonInvalidToken     = "invalid_token"
	ReasonTenantDisabled   = "tenant_disabled"
	ReasonOriginNotAllowed = "origin_not_allowed"
	ReasonAuthTimeout      = "auth_timeout"
	ReasonNotAuthenticated = "not_authenticated"
	ReasonTooManyConns     = "too_many_connections"
	// Reasons of over_quota refusals of a chat: which cap.
	ReasonConcurrency     = engine.ReasonConcurrency     // concurrent requests
	ReasonTokensPerMinute = engine.ReasonTokensPerMinute // tokens per minute
	ReasonQueue           = engine.ReasonQueue           // requests waiting in the engine
	// Close reasons that are not errors of a request.
	ReasonSlowConsumer = "slow_consumer"
	ReasonShutdown     = "shutdown"
	// ReasonFrameTooBig refines bad_request for a message over the read
	// limit, and is the text of the 1009 close that follows.
	ReasonFrameTooBig = "frame_too_big"
)

// WebSocket close codes the gateway uses.
const (
	ClosePolicyViolation = 1008 // refused authentication or origin
	CloseGoingAway       = 1001 // gateway shutting down
	CloseTryAgainLater   = 1013 // slow consumer, over the connection cap
	CloseMessageTooBig   = 1009 // a frame over the read limit
)

// Error is a typed error for the client, with a stable code.
type Error struct {
	Code    string
	Reason  string // refines Code; may be empty
	Message string
	// Temporary says retrying later may succeed.
	Temporary bool
}

func (e *Error) Error() string {
	s := "gateway: " + e.Code
	if e.Reason != "" {
		s += " (" + e.Reason + ")"
	}
	return s + ": " + e.Message
}

func badRequest(msg string) *Error { return &Error{Code: CodeBadRequest, Message: msg} }

func notFound(what string) *Error { return &Error{Code: CodeNotFound, Message: what + " not found"} }

func unavailable(msg string) *Error {
	return &Error{Code: CodeUnavailable, Message: msg, Temporary: true}
}

// down is unavailable for a failure of a store the gateway depends on
// (Redis): the client is told only msg, and the cause, which an operator
// needs and a client must not see, is logged.
func (s *Server) down(msg string, cause error) *Error {
	s.o.Logger.Warn("gateway: "+msg, "err", cause)
	return unavailable(msg)
}

// clientError turns any error into the *Error a client sees: gateway and
// engine errors keep their codes; anything else is internal, with a message
// that names no internals.
func clientError(err error) *Error {
	var ge *Error
	if errors.As(err, &ge) {
		return ge
	}
	var ee *engine.Error
	if errors.As(err, &ee) {
		code := ee.Code
		switch code {
		case CodeBadRequest, CodeOverQuota, CodeQueueFull, CodeContextTooLong:
		default:
			code = CodeInternal
		}
		return &Error{Code: code, Reason: ee.Reason, Message: ee.Message, Temporary: ee.Temporary}
	}
	if errors.Is(err, engine.ErrClosed) {
		return unavailable("engine stopped")
	}
	if errors.Is(err, ErrNotFound) {
		return notFound("session")
	}
	return &Error{Code: CodeInternal, Message: "internal error"}
}
