package tenants

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

// ErrUsage marks a command line that could not be understood; the message
// says why, and the caller prints CommandUsage.
var ErrUsage = errors.New("tenants: usage")

// CommandUsage documents Command.
const CommandUsage = `usage: specgate tenant <command> [args]

  create ID [flags]        create a tenant with its first signing key
  update ID [flags]        change the create flags given (not keys)
  list                     list tenants (no secrets)
  show ID                  show one tenant (no secrets)
  add-key ID [key flags]   add a signing key (at most 2 active)
  rotate ID [key flags]    add a new key, retire all but the previous one
  remove-key ID KID        retire one key
  disable ID               refuse the tenant's tokens
  enable ID                accept them again

create flags:
  -name NAME  -priority interactive|standard|batch  -weight W
  -max-connections N  -max-concurrent N  -tokens-per-minute N  -max-context N
  -spec auto|off|ngram|draft (speculative decoding the tenant's requests may
        use: auto, the server's choice (default); off; or only that drafter)
  -audience AUD  -origin ORIGIN (repeatable; with update, replaces the list)
key flags (also for create):
  -alg HS256|RS256|EdDSA (default HS256)  -kid KID (default random)
  -public-key FILE (PEM, RS256/EdDSA)  -secret BASE64 (HS256; default random)

A generated HS256 secret is printed once, base64-encoded; it is not shown again.
Output is JSON.`

// Command runs `specgate tenant ARGS...` against s, writing JSON to out.
// Errors that come from the command line wrap ErrUsage.
func Command(ctx context.Context, s *Store, args []string, out io.Writer) error {
	if len(args) == 0 {
		return fmt.Errorf("%w: missing command", ErrUsage)
	}
	cmd, rest := args[0], args[1:]
	id := ""
	if cmd != "list" {
		if len(rest) == 0 || strings.HasPrefix(rest[0], "-") {
			return fmt.Errorf("%w: %s needs a tenant id", ErrUsage, cmd)
		}
		id, rest = rest[0], rest[1:]
	}
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")

	switch cmd {
	case "list":
		ts, err := s.List(ctx)
		if err != nil {
			return err
		}
		for i := range ts {
			ts[i] = ts[i].Redacted()
		}
		return enc.Encode(ts)
	case "show":
		t, err := s.Get(ctx, id)
		if err != nil {
			return err
		}
		return enc.Encode(t.Redacted())
	case "disable", "enable":
		t, err := s.SetDisabled(ctx, id, cmd == "disable")
		if err != nil {
			return err
		}
		return enc.Encode(t.Redacted())
	case "remove-key":
		if len(rest) != 1 {
			return fmt.Errorf("%w: remove-key needs ID KID", ErrUsage)
		}
		t, err := s.RemoveKey(ctx, id, rest[0])
		if err != nil {
			return err
		}
		return enc.Encode(t.Redacted())
	case "create", "update", "add-key", "rotate":
	default:
		return fmt.Errorf("%w: unknown command %q", ErrUsage, cmd)
	}

	fs := flag.NewFlagSet("tenant "+cmd, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var spec CreateSpec
	var pubFile, secret string
	if cmd != "update" {
		fs.StringVar(&spec.Key.Alg, "alg", HS256, "")
		fs.StringVar(&spec.Key.Kid, "kid", "", "")
		fs.StringVar(&pubFile, "public-key", "", "")
		fs.StringVar(&secret, "secret", "", "")
	}
	if cmd == "create" || cmd == "update" {
		fs.StringVar(&spec.Name, "name", "", "")
		fs.StringVar(&spec.Priority, "priority", "", "")
		fs.Float64Var(&spec.Weight, "weight", 0, "")
		fs.IntVar(&spec.Limits.MaxConnections, "max-connections", 0, "")
		fs.IntVar(&spec.Limits.MaxConcurrent, "max-concurrent", 0, "")
		fs.IntVar(&spec.Limits.TokensPerMinute, "tokens-per-minute", 0, "")
		fs.IntVar(&spec.Limits.MaxContext, "max-context", 0, "")
		fs.StringVar(&spec.Limits.Speculate, "spec", "", "")
		fs.StringVar(&spec.Audience, "audience", "", "")
		fs.Func("origin", "", func(v string) error { spec.Origins = append(spec.Origins, v); return nil })
	}
	if err := fs.Parse(rest); err != nil {
		return fmt.Errorf("%w: %w", ErrUsage, err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected arguments %q", ErrUsage, fs.Args())
	}
	if cmd == "update" {
		t, err := update(ctx, s, id, fs, spec)
		if err != nil {
			return err
		}
		return enc.Encode(t.Redacted())
	}
	if pubFile != "" {
		b, err := os.ReadFile(pubFile)
		if err != nil {
			return fmt.Errorf("tenants: public key: %w", err)
		}
		spec.Key.PublicKey = string(b)
	}
	if secret != "" {
		b, err := base64.StdEncoding.DecodeString(secret)
		if err != nil {
			return fmt.Errorf("%w: -secret is not base64: %w", ErrUsage, err)
		}
		spec.Key.Secret = b
	}

	var res *KeyResult
	if cmd == "create" {
		spec.ID = id
		r, err := s.CreateFromSpec(ctx, spec)
		if err != nil {
			return err
		}
		res = r
	} else {
		k, gen, err := spec.Key.Key(id)
		if err != nil {
			return err
		}
		var t *Tenant
		var retired []string
		if cmd == "rotate" {
			t, retired, err = s.Rotate(ctx, id, k)
		} else {
			t, err = s.AddKey(ctx, id, k)
		}
		if err != nil {
			return err
		}
		res = keyResult(t, k, gen, retired)
	}
	return enc.Encode(res)
}

// update changes the fields of tenant id whose flags fs was given, to
// their values in spec; the others keep what the record has.
func update(ctx context.Context, s *Store, id string, fs *flag.FlagSet, spec CreateSpec) (*Tenant, error) {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if len(set) == 0 {
		return nil, fmt.Errorf("%w: update needs at least one flag to change", ErrUsage)
	}
	return s.Update(ctx, id, func(t *Tenant) error {
		l := spec.Limits
		for name, apply := range map[string]func(){
			"name":              func() { t.Name = spec.Name },
			"priority":          func() { t.Priority = spec.Priority },
			"weight":            func() { t.Weight = spec.Weight },
			"max-connections":   func() { t.Limits.MaxConnections = l.MaxConnections },
			"max-concurrent":    func() { t.Limits.MaxConcurrent = l.MaxConcurrent },
			"tokens-per-minute": func() { t.Limits.TokensPerMinute = l.TokensPerMinute },
			"max-context":       func() { t.Limits.MaxContext = l.MaxContext },
			"spec":              func() { t.Limits.Speculate = l.Speculate },
			"audience":          func() { t.Audience = spec.Audience },
			"origin":            func() { t.Origins = spec.Origins },
		} {
			if set[name] {
				apply()
			}
		}
		return nil
	})
}
