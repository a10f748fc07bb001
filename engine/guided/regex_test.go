package guided

import (
	"errors"
	"math/rand/v2"
	"regexp"
	"regexp/syntax"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// accepts feeds s to a fresh matcher token by token (greedy longest-match
// tokenization) and reports whether it ends accepting. Along the way it
// checks that Allowed agrees with the mask and with the byte-level DFA.
func accepts(t *testing.T, g *Grammar, s string) bool {
	t.Helper()
	v := g.Vocab()
	toks := tokenize(v, []byte(s))
	if toks == nil && s != "" {
		t.Fatalf("cannot tokenize %q", s)
	}
	m := g.NewMatcher()
	for _, tok := range toks {
		allowed := m.Allowed(tok)
		if has := m.Mask().Has(tok); has != allowed {
			t.Fatalf("token %q in state %d: have mask bit %v; want %v (Allowed)", v.Piece(tok), m.State(), has, allowed)
		}
		if !allowed {
			if m.Advance(tok) == nil {
				t.Fatalf("Advance accepted token %q that Allowed forbids", v.Piece(tok))
			}
			return false
		}
		if err := m.Advance(tok); err != nil {
			t.Fatal(err)
		}
	}
	byteLevel := g.d.accept[g.d.run(g.d.start, []byte(s))]
	if byteLevel != m.Accepting() {
		t.Fatalf("%q: have token-level %v; want byte-level %v", s, m.Accepting(), byteLevel)
	}
	if m.Accepting() != m.Mask().Has(testEOS) {
		t.Fatalf("%q: EOS in mask %v; accepting %v", s, m.Mask().Has(testEOS), m.Accepting())
	}
	return m.Accepting()
}

func TestRegexTable(t *testing.T) {
	v := synthVocab(3000)
	tests := []struct {
		pattern string
		yes, no []string
	}{
		{`abc`, []string{"abc"}, []string{"", "ab", "abcd", "xabc"}},
		{`^abc$`, []string{"abc"}, []string{"abcabc"}},
		{`a|bc|`, []string{"a", "bc", ""}, []string{"b", "abc"}},
		{`[0-9]{2,4}`, []string{"12", "1234"}, []string{"1", "12345", "1a"}},
		{`(?:ab){2,}`, []string{"abab", "ababab"}, []string{"ab", "aba"}},
		{`x{0,2}y?`, []string{"", "xx", "xxy", "y"}, []string{"xxx", "yy"}},
		{`\d+\.\d+`, []string{"3.14", "0.0"}, []string{"3.", ".5", "3,14"}},
		{`[^a]`, []string{"b", "é", "\n", "😀"}, []string{"a", "", "bb", "\xff"}},
		{`.`, []string{"b", "é", "😀"}, []string{"\n", "\xe9"}},
		{`(?s).`, []string{"\n"}, nil},
		{`(?i)héllo`, []string{"HÉLLO", "hÉlLo"}, []string{"hello"}},
		{`\w+@\w+\.com`, []string{"a_1@b.com"}, []string{"a@b.org", "@b.com"}},
		{`[α-ω]+`, []string{"αβγ"}, []string{"abc", "Α"}},
		{`(yes|no|maybe)`, []string{"yes", "maybe"}, []string{"y", "yesno"}},
		{`\p{Greek}\s[[:digit:]]`, []string{"λ 1"}, []string{"l 1"}},
	}
	for _, tt := range tests {
		t.Run(tt.pattern, func(t *testing.T) {
			g, err := Compile(Spec{Regex: tt.pattern}, v)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range tt.yes {
				if !accepts(t, g, s) {
					t.Errorf("%q: have rejected; want accepted", s)
				}
			}
			for _, s := range tt.no {
				if accepts(t, g, s) {
					t.Errorf("%q: have accepted; want rejected", s)
				}
			}
		})
	}
}

func TestRegexErrors(t *testing.T) {
	v := synthVocab(500)
	tests := []struct {
		spec Spec
		want error
		text string
	}{
		{Spec{Regex: `a(`}, ErrInvalid, "missing closing )"},
		{Spec{Regex: `a\bc`}, ErrUnsupported, `\b`},
		{Spec{Regex: `a^b`}, ErrUnsupported, "^"},
		{Spec{Regex: `a|b$|c`}, ErrUnsupported, "$"},
		{Spec{Regex: `[^\x00-\x{10FFFF}]`}, ErrEmpty, "matches nothing"},
		{Spec{}, ErrInvalid, "exactly one"},
		{Spec{Regex: "a", JSON: true}, ErrInvalid, "have 2"},
		{Spec{Regex: `[ab]{500}[ab]{500}c`, Limits: Limits{MaxDFAStates: 300}}, ErrTooLarge, "DFA exceeds 300 states"},
		{Spec{Regex: `(a|b)*a(a|b){14}`, Limits: Limits{MaxDFAStates: 1 << 12}}, ErrTooLarge, "DFA exceeds 4096"},
		{Spec{Regex: `a{1000}`, Limits: Limits{MaxNFAStates: 1000}}, ErrTooLarge, "NFA exceeds 1000 states"},
	}
	for _, tt := range tests {
		t.Run(tt.spec.Regex, func(t *testing.T) {
			_, err := Compile(tt.spec, v)
			if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.text) {
				t.Fatalf("have error %v; want %v containing %q", err, tt.want, tt.text)
			}
		})
	}
}

// randRegex builds a random pattern over a small alphabet so that random
// strings hit both sides of the language.
func randRegex(rng *rand.Rand, depth int) string {
	atoms := []string{"a", "b", "c", "é", "1", " ", `\d`, ".", "[ab]", "[^a]", "[a-c]", "[é-ü]", `\.`,
		"(?i:a)", `[^\n]`, `\w`, `\s`, "ab", "b?", "[a-c&&]"}
	if depth == 0 || rng.IntN(4) == 0 {
		a := atoms[rng.IntN(len(atoms))]
		if a == "[a-c&&]" {
			a = "[a&]"
		}
		return a
	}
	x := randRegex(rng, depth-1)
	switch rng.IntN(8) {
	case 0, 1:
		return x + randRegex(rng, depth-1)
	case 2:
		return "(?:" + x + "|" + randRegex(rng, depth-1) + ")"
	case 3:
		return "(?:" + x + ")*"
	case 4:
		return "(" + x + ")+"
	case 5:
		return "(?:" + x + ")?"
	case 6:
		n := rng.IntN(3)
		switch rng.IntN(3) {
		case 0:
			return "(?:" + x + "){" + string(rune('0'+n)) + "}"
		case 1:
			return "(?:" + x + "){" + string(rune('0'+n)) + ",}"
		}
		return "(?:" + x + "){" + string(rune('0'+n)) + "," + string(rune('0'+n+rng.IntN(3))) + "}"
	}
	return x + "|" + randRegex(rng, depth-1)
}

// sampleRegex appends a random string of re's language (small repeats).
func sampleRegex(rng *rand.Rand, re *syntax.Regexp, sb *strings.Builder) {
	randRune := func(pairs []rune) {
		i := 2 * rng.IntN(len(pairs)/2)
		lo, hi := pairs[i], pairs[i+1]
		r := lo + rune(rng.IntN(int(min(hi-lo, 300))+1))
		if r >= 0xD800 && r <= 0xDFFF {
			r = lo
		}
		if r >= 0xD800 && r <= 0xDFFF {
			r = 0xE000
		}
		sb.WriteRune(r)
	}
	reps := func(min, max int) int {
		if max < 0 {
			max = min + 2
		}
		return min + rng.IntN(max-min+1)
	}
	switch re.Op {
	case syntax.OpLiteral:
		for _, r := range re.Rune {
			if re.Flags&syntax.FoldCase != 0 && rng.IntN(2) == 0 {
				r = unicode.SimpleFold(r)
			}
			sb.WriteRune(r)
		}
	case syntax.OpCharClass:
		randRune(re.Rune)
	case syntax.OpAnyCharNotNL:
		randRune([]rune{'a', 'z', 'é', 'é', '😀', '😀', ' ', ' '})
	case syntax.OpAnyChar:
		randRune([]rune{'a', 'z', '\n', '\n'})
	case syntax.OpCapture:
		sampleRegex(rng, re.Sub[0], sb)
	case syntax.OpStar, syntax.OpPlus, syntax.OpQuest, syntax.OpRepeat:
		lo, hi := map[syntax.Op][2]int{syntax.OpStar: {0, -1}, syntax.OpPlus: {1, -1}, syntax.OpQuest: {0, 1}, syntax.OpRepeat: {re.Min, re.Max}}[re.Op][0],
			map[syntax.Op][2]int{syntax.OpStar: {0, -1}, syntax.OpPlus: {1, -1}, syntax.OpQuest: {0, 1}, syntax.OpRepeat: {re.Min, re.Max}}[re.Op][1]
		for n := reps(lo, hi); n > 0; n-- {
			sampleRegex(rng, re.Sub[0], sb)
		}
	case syntax.OpConcat:
		for _, s := range re.Sub {
			sampleRegex(rng, s, sb)
		}
	case syntax.OpAlternate:
		sampleRegex(rng, re.Sub[rng.IntN(len(re.Sub))], sb)
	}
}

// TestRegexMatchesGoRegexp is the property test: over random patterns and
// random strings, the token FSM accepts exactly what Go's regexp accepts
// anchored at both ends (on valid UTF-8; invalid UTF-8 is always
// rejected), and every token walk the FSM allows ends in a string the
// regexp accepts.
func TestRegexMatchesGoRegexp(t *testing.T) {
	v := synthVocab(3000)
	rng := rand.New(rand.NewPCG(7, 11))
	alphabet := []string{"a", "b", "c", "A", "é", "ü", "1", " ", "\n", ".", "_", "ab", "\xff", "\xc3"}
	n := 300
	if testing.Short() {
		n = 60
	}
	for i := 0; i < n; i++ {
		p := randRegex(rng, 4)
		g, err := Compile(Spec{Regex: p}, v)
		if err != nil {
			t.Fatalf("%q: %v", p, err)
		}
		goRe := regexp.MustCompile(`^(?:` + p + `)$`)
		parsed, _ := syntax.Parse(p, regexFlags)
		var inputs []string
		for range 40 {
			var sb strings.Builder
			for k := rng.IntN(7); k > 0; k-- {
				sb.WriteString(alphabet[rng.IntN(len(alphabet))])
			}
			inputs = append(inputs, sb.String())
		}
		for range 20 {
			var sb strings.Builder
			sampleRegex(rng, parsed, &sb)
			inputs = append(inputs, sb.String())
		}
		for _, s := range inputs {
			want := goRe.MatchString(s) && utf8.ValidString(s)
			if have := accepts(t, g, s); have != want {
				t.Fatalf("pattern %q, input %q: have %v; want %v", p, s, have, want)
			}
		}
		// Random walks through the token FSM.
		for range 10 {
			m := g.NewMatcher()
			var out []byte
			for step := 0; step < 12; step++ {
				var allowed []int32
				mask := m.Mask()
				for id := int32(0); id < int32(v.Size()); id++ {
					if mask.Has(id) {
						allowed = append(allowed, id)
					}
				}
				if len(allowed) == 0 {
					break
				}
				tok := allowed[rng.IntN(len(allowed))]
				if err := m.Advance(tok); err != nil {
					t.Fatal(err)
				}
				if m.State() == Final {
					break
				}
				out = append(out, v.Piece(tok)...)
			}
			if m.Accepting() && !goRe.Match(out) {
				t.Fatalf("pattern %q: FSM accepted %q; regexp rejects it", p, out)
			}
			if !m.Accepting() && goRe.Match(out) && utf8.Valid(out) {
				t.Fatalf("pattern %q: FSM not accepting %q; regexp accepts it", p, out)
			}
		}
	}
}
