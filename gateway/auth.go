package gateway

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/specgate/specgate/tenants"
)

// Identity is who a connection or HTTP request acts for.
type Identity struct {
	Tenant *tenants.Tenant
	User   string // the JWT sub
	Kid    string
}

// authenticator verifies JWTs against tenants' signing keys.
type authenticator struct {
	tenants  *tenants.Store
	audience string
	leeway   time.Duration
	now      func() time.Time
	log      *slog.Logger
}

// verify checks a token and returns the identity it names, or an *Error
// whose Reason says why it was refused. Only the algorithm of the key the
// kid names is accepted, so neither "none" nor an HS256 token signed with an
// RSA public key (HS/RS confusion) can pass.
func (a *authenticator) verify(ctx context.Context, token string) (Identity, *Error) {
	unauth := func(reason, msg string) (Identity, *Error) {
		return Identity{}, &Error{Code: CodeUnauthorized, Reason: reason, Message: msg}
	}
	if token == "" {
		return unauth(ReasonMissingToken, "missing token")
	}
	// The cap holds on every path (Bearer header, HTTP, auth frame), so no
	// path parses and verifies more than the protocol promises to.
	if len(token) > MaxTokenLen {
		return unauth(ReasonMalformedToken, "token longer than 8 KiB")
	}
	// The header names the key, and the key decides the algorithm; nothing
	// in the unverified token is trusted beyond choosing which key to try.
	alg, kid, ok := tokenHeader(token)
	if !ok {
		return unauth(ReasonMalformedToken, "malformed token")
	}
	if !registeredAlg(alg) {
		return unauth(ReasonAlgNotAllowed, "algorithm not allowed")
	}
	if kid == "" {
		return unauth(ReasonUnknownKid, "token has no kid")
	}
	tenant, key, err := a.tenants.ByKid(ctx, kid)
	if errors.Is(err, tenants.ErrNotFound) {
		return unauth(ReasonUnknownKid, "unknown kid")
	}
	if err != nil {
		a.log.Warn("gateway: cannot read tenant keys", "kid", kid, "err", err)
		return Identity{}, unavailable("cannot read tenant keys")
	}
	if alg != key.Alg {
		return unauth(ReasonAlgNotAllowed, "algorithm not allowed for this key")
	}
	verifyKey, err := key.VerifyKey()
	if err != nil {
		return Identity{}, &Error{Code: CodeInternal, Message: "tenant key is unusable"}
	}
	aud := a.audience
	if tenant.Audience != "" {
		aud = tenant.Audience
	}
	p := jwt.NewParser(
		jwt.WithValidMethods([]string{key.Alg}),
		jwt.WithExpirationRequired(),
		// A token issued in the future (beyond the leeway) is refused
		// like one not yet valid: a clock that far off, or a forged iat,
		// should not buy a longer life.
		jwt.WithIssuedAt(),
		jwt.WithAudience(aud),
		jwt.WithLeeway(a.leeway),
		jwt.WithTimeFunc(a.now),
	)
	var claims jwt.RegisteredClaims
	_, err = p.ParseWithClaims(token, &claims, func(*jwt.Token) (any, error) { return verifyKey, nil })
	switch {
	case err == nil:
	case errors.Is(err, jwt.ErrTokenMalformed):
		return unauth(ReasonMalformedToken, "malformed token")
	case errors.Is(err, jwt.ErrTokenSignatureInvalid):
		return unauth(ReasonBadSignature, "bad signature")
	case errors.Is(err, jwt.ErrTokenExpired):
		return unauth(ReasonTokenExpired, "token expired")
	case errors.Is(err, jwt.ErrTokenNotValidYet), errors.Is(err, jwt.ErrTokenUsedBeforeIssued):
		return unauth(ReasonNotYetValid, "token not valid yet")
	case errors.Is(err, jwt.ErrTokenInvalidAudience):
		return unauth(ReasonWrongAudience, "wrong audience")
	case errors.Is(err, jwt.ErrTokenRequiredClaimMissing):
		if claims.ExpiresAt == nil {
			return unauth(ReasonMissingExp, "token has no exp")
		}
		return unauth(ReasonWrongAudience, "token has no aud")
	default:
		return unauth(ReasonInvalidToken, "invalid token")
	}
	if claims.Subject == "" || len(claims.Subject) > MaxIDLen || !subPattern.MatchString(claims.Subject) {
		return unauth(ReasonMissingSubject, "token needs a sub of 1-128 of A-Z a-z 0-9 . _ : -")
	}
	if tenant.Disabled {
		return Identity{}, &Error{Code: CodeForbidden, Reason: ReasonTenantDisabled, Message: "tenant disabled"}
	}
	return Identity{Tenant: tenant, User: claims.Subject, Kid: kid}, nil
}

// tokenHeader reads alg and kid from a compact JWS header without
// trusting anything else in the token: three dot-separated parts, the
// first base64url JSON. A header alg that is not a string reads as "".
func tokenHeader(token string) (alg, kid string, ok bool) {
	head, rest, found := strings.Cut(token, ".")
	if !found || strings.Count(rest, ".") != 1 {
		return "", "", false
	}
	raw, err := base64.RawURLEncoding.DecodeString(head)
	if err != nil {
		return "", "", false
	}
	var h map[string]any
	if err := json.Unmarshal(raw, &h); err != nil || h == nil {
		return "", "", false
	}
	alg, _ = h["alg"].(string)
	kid, _ = h["kid"].(string)
	return alg, kid, true
}

// registeredAlg says whether alg is one a tenant key may have; any other
// value (none, a different case, trailing space) is refused as
// alg_not_allowed before a key is even looked up.
func registeredAlg(alg string) bool {
	switch alg {
	case tenants.HS256, tenants.RS256, tenants.EdDSA:
		return true
	}
	return false
}
