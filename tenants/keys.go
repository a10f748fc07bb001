package tenants

import (
	"crypto"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"regexp"
	"time"
)

// Signing algorithms a key may have (JWT alg names).
const (
	HS256 = "HS256"
	RS256 = "RS256"
	EdDSA = "EdDSA"
)

// MinSecretBytes is the shortest HS256 secret accepted: RFC 7518 asks for a
// key at least as long as the hash output.
const MinSecretBytes = 32

// Key is one signing key of a tenant. Exactly one of Secret (HS256) and
// PublicKey (RS256, EdDSA; PEM "PUBLIC KEY") is set.
type Key struct {
	ID        string    `json:"kid"`
	Alg       string    `json:"alg"`
	Secret    []byte    `json:"secret,omitempty"`
	PublicKey string    `json:"public_key,omitempty"`
	Created   time.Time `json:"created"`
	// Redacted marks a copy whose secret was removed for display.
	Redacted bool `json:"redacted,omitempty"`
}

var kidPattern = regexp.MustCompile(`^[A-Za-z0-9._-]{1,128}$`)

// Validate checks that the key's material matches its algorithm.
func (k *Key) Validate() error {
	if !kidPattern.MatchString(k.ID) {
		return fmt.Errorf("%w: kid %q (want 1-128 of A-Z a-z 0-9 . _ -)", ErrInvalid, k.ID)
	}
	_, err := k.VerifyKey()
	return err
}

// VerifyKey returns the key material that verifies this key's signatures:
// []byte for HS256, *rsa.PublicKey for RS256, ed25519.PublicKey for EdDSA.
func (k *Key) VerifyKey() (any, error) {
	switch k.Alg {
	case HS256:
		if k.PublicKey != "" {
			return nil, fmt.Errorf("%w: HS256 key %q has a public key", ErrInvalid, k.ID)
		}
		if len(k.Secret) < MinSecretBytes {
			return nil, fmt.Errorf("%w: HS256 secret of key %q is %d bytes (want >= %d)", ErrInvalid, k.ID, len(k.Secret), MinSecretBytes)
		}
		return k.Secret, nil
	case RS256, EdDSA:
		if len(k.Secret) > 0 {
			return nil, fmt.Errorf("%w: %s key %q has a secret", ErrInvalid, k.Alg, k.ID)
		}
		pub, err := ParsePublicKey([]byte(k.PublicKey))
		if err != nil {
			return nil, fmt.Errorf("%w: key %q: %w", ErrInvalid, k.ID, err)
		}
		switch p := pub.(type) {
		case *rsa.PublicKey:
			if k.Alg != RS256 {
				break
			}
			if p.N.BitLen() < 2048 {
				return nil, fmt.Errorf("%w: RSA key %q has %d bits (want >= 2048)", ErrInvalid, k.ID, p.N.BitLen())
			}
			return p, nil
		case ed25519.PublicKey:
			if k.Alg == EdDSA {
				return p, nil
			}
		}
		return nil, fmt.Errorf("%w: key %q is %T, not a %s public key", ErrInvalid, k.ID, pub, k.Alg)
	}
	return nil, fmt.Errorf("%w: key %q has alg %q (want HS256, RS256 or EdDSA)", ErrInvalid, k.ID, k.Alg)
}

// ParsePublicKey reads a PEM "PUBLIC KEY" (PKIX) block.
func ParsePublicKey(pemBytes []byte) (crypto.PublicKey, error) {
	block, _ := pem.Decode(pemBytes)
	if block == nil {
		return nil, fmt.Errorf("no PEM block")
	}
	if block.Type != "PUBLIC KEY" {
		return nil, fmt.Errorf("PEM block is %q, want \"PUBLIC KEY\"", block.Type)
	}
	return x509.ParsePKIXPublicKey(block.Bytes)
}

// EncodePublicKey writes pub as a PEM "PUBLIC KEY" block.
func EncodePublicKey(pub crypto.PublicKey) (string, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return "", fmt.Errorf("tenants: encode public key: %w", err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})), nil
}

// NewHS256Key returns a key with a fresh random 32-byte secret.
func NewHS256Key(kid string) (Key, error) {
	secret := make([]byte, MinSecretBytes)
	if _, err := rand.Read(secret); err != nil {
		return Key{}, fmt.Errorf("tenants: random secret: %w", err)
	}
	return Key{ID: kid, Alg: HS256, Secret: secret}, nil
}

// NewKid returns a random kid with the given prefix ("<prefix>-<16 hex>").
func NewKid(prefix string) string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return prefix + "-" + hex.EncodeToString(b[:])
}
