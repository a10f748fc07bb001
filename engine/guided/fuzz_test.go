package guided

import (
	"encoding/json"
	"errors"
	"regexp"
	"sync"
	"testing"
	"time"
	"unicode/utf8"
)

var fuzzVocab = sync.OnceValue(func() *Vocab { return synthVocab(1000) })

// fuzzLimits keep each input's compilation small and fast.
var fuzzLimits = Limits{MaxNFAStates: 1 << 16, MaxDFAStates: 4096}

func FuzzRegex(f *testing.F) {
	for _, s := range []string{`a+b`, `[0-9]{2,4}`, `(?i)x|y*`, `\bword`, `.{3}é`, `[^\x00-\x{10FFFF}]`, `(a|b)*a(a|b){12}`, `^$`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, pattern string) {
		start := time.Now()
		g, err := Compile(Spec{Regex: pattern, Limits: fuzzLimits}, fuzzVocab())
		if d := time.Since(start); d > 2*time.Second {
			t.Fatalf("%q: compile took %v", pattern, d)
		}
		if err != nil {
			if !errors.Is(err, ErrInvalid) && !errors.Is(err, ErrUnsupported) && !errors.Is(err, ErrTooLarge) && !errors.Is(err, ErrEmpty) {
				t.Fatalf("%q: error %v wraps no sentinel", pattern, err)
			}
			return
		}
		if g.NumStates() > fuzzLimits.MaxDFAStates {
			t.Fatalf("%q: %d states past the limit", pattern, g.NumStates())
		}
		// Strings the DFA reaches acceptance with must match Go's regexp.
		re, err := regexp.Compile(`^(?:` + pattern + `)$`)
		if err != nil {
			return
		}
		for _, s := range []string{"", "a", "ab", "aab", "12", "x", "é"} {
			if have, want := g.d.accept[g.d.run(g.d.start, []byte(s))], re.MatchString(s) && utf8.ValidString(s); have != want {
				t.Fatalf("%q on %q: have %v; want %v", pattern, s, have, want)
			}
		}
		g.Mask(g.Start())
	})
}

func FuzzSchema(f *testing.F) {
	for _, s := range fixedSchemas {
		f.Add(s)
	}
	f.Add(`{"type":"integer","multipleOf":2}`)
	f.Add(`{"$ref":"#"}`)
	f.Add(`{"items":{"$ref":"#"},"maxItems":9}`)
	f.Fuzz(func(t *testing.T, schema string) {
		start := time.Now()
		g, err := Compile(Spec{Schema: json.RawMessage(schema), Limits: fuzzLimits}, fuzzVocab())
		if d := time.Since(start); d > 2*time.Second {
			t.Fatalf("%q: compile took %v", schema, d)
		}
		if err != nil {
			if !errors.Is(err, ErrInvalid) && !errors.Is(err, ErrUnsupported) && !errors.Is(err, ErrTooLarge) && !errors.Is(err, ErrEmpty) {
				t.Fatalf("%q: error %v wraps no sentinel", schema, err)
			}
			return
		}
		g.Mask(g.Start())
	})
}
