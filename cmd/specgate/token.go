package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/specgate/specgate/tenants"
)

// tokenOptions are `specgate tenant token`'s flags.
type tokenOptions struct {
	user string
	ttl  time.Duration
	base string // the UI's URL, which the sign-in link points at
}

// runTenantToken mints a sign-in token for a user of tenant id with one of
// its HS256 keys and prints it with the URL that signs a browser in. It is
// meant for development and admins: production tenants sign their users'
// tokens themselves, with their own key.
func runTenantToken(ctx context.Context, ts *tenants.Store, args []string, out io.Writer) error {
	fs := newFlags("tenant token", "TENANT --user USER [--ttl DURATION] [--url URL]")
	var o tokenOptions
	fs.StringVar(&o.user, "user", "", "the user the token signs in (the JWT sub)")
	fs.DurationVar(&o.ttl, "ttl", 24*time.Hour, "how long the token is valid")
	fs.StringVar(&o.base, "url", "http://"+envOr("SPECGATE_ADDR", "127.0.0.1:8080")+"/", "the web UI's URL ($SPECGATE_ADDR)")
	// The tenant id comes first, as in the other tenant commands; flags may
	// follow it.
	var id string
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		id, args = args[0], args[1:]
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	rest := fs.Args()
	if id == "" && len(rest) > 0 {
		id, rest = rest[0], rest[1:]
	}
	if len(rest) > 0 {
		return fmt.Errorf("unexpected arguments %q", rest)
	}
	if id == "" {
		fs.Usage()
		return errors.New("token needs a tenant id")
	}
	if o.user == "" {
		return errors.New("token needs --user")
	}
	if !validSubject(o.user) {
		return fmt.Errorf("--user %q: want 1-128 of A-Z a-z 0-9 . _ : -", o.user)
	}
	if o.ttl <= 0 {
		return fmt.Errorf("--ttl %v: must be positive", o.ttl)
	}
	u, err := url.Parse(o.base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("--url %q: want an http(s) URL", o.base)
	}
	t, err := ts.Get(ctx, id)
	if errors.Is(err, tenants.ErrNotFound) {
		return fmt.Errorf("no tenant %q (create it with: specgate tenant create %s)", id, id)
	}
	if err != nil {
		return err
	}
	if t.Disabled {
		return fmt.Errorf("tenant %s is disabled (enable it with: specgate tenant enable %s)", id, id)
	}
	tok, err := signToken(t, o.user, o.ttl, time.Now())
	if err != nil {
		return err
	}
	u.Fragment = ""
	fmt.Fprintf(out, "token: %s\nurl:   %s#token=%s\nuser %s of tenant %s, valid until %s\n",
		tok, u.String(), tok, o.user, id, time.Now().Add(o.ttl).UTC().Format(time.RFC3339))
	return nil
}

// validSubject is the gateway's rule for the JWT sub (PROTOCOL.md).
func validSubject(s string) bool {
	if len(s) == 0 || len(s) > 128 {
		return false
	}
	for _, r := range s {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("._:-", r)
		if !ok {
			return false
		}
	}
	return true
}

// signToken signs a token for user with the tenant's newest HS256 key.
// Tenants with only public keys (RS256, EdDSA) hold no secret here: their
// tokens are signed by the tenant.
func signToken(t *tenants.Tenant, user string, ttl time.Duration, now time.Time) (string, error) {
	var key *tenants.Key
	for i := range t.Keys {
		if t.Keys[i].Alg == tenants.HS256 && len(t.Keys[i].Secret) > 0 {
			key = &t.Keys[i]
		}
	}
	if key == nil {
		return "", fmt.Errorf("tenant %s has no HS256 key to sign with (add one: specgate tenant add-key %s --alg HS256)", t.ID, t.ID)
	}
	aud := t.Audience
	if aud == "" {
		aud = "specgate"
	}
	tok := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.RegisteredClaims{
		Subject:   user,
		Audience:  jwt.ClaimStrings{aud},
		IssuedAt:  jwt.NewNumericDate(now),
		ExpiresAt: jwt.NewNumericDate(now.Add(ttl)),
	})
	tok.Header["kid"] = key.ID
	s, err := tok.SignedString(key.Secret)
	if err != nil {
		return "", fmt.Errorf("sign token: %w", err)
	}
	return s, nil
}

// helpRequested reports whether args ask for help (-h, --help).
func helpRequested(args []string) bool {
	for _, a := range args {
		if a == "-h" || a == "-help" || a == "--help" {
			return true
		}
	}
	return false
}
