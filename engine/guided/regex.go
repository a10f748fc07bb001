package guided

import (
	"fmt"
	"regexp/syntax"
	"unicode"
	"unicode/utf8"
)

// Regular expressions use Go's RE2 syntax (regexp/syntax with the Perl
// flags, as regexp.Compile does): literals, classes (including \d \w \s,
// [[:alpha:]] and \pL), ., alternation, grouping, * + ? and {n,m} (n, m ≤
// 1000), (?i). The whole output must match: anchors are implied, and a
// leading ^ or trailing $ is accepted and ignored. Other empty-width
// assertions (\b, \B, ^ or $ inside) cannot be decided byte by byte and are
// rejected with ErrUnsupported.
//
// The DFA works on bytes but accepts only valid UTF-8: "." and negated
// classes match whole encoded runes. (Go's regexp also lets them match a
// single invalid byte; generated text never contains one.)

const regexFlags = syntax.Perl

// reCompiler translates a parsed regexp into NFA fragments.
type reCompiler struct {
	b *builder
	// jsonStr compiles for the inside of a JSON string: the pattern
	// applies to the decoded text, so '"', '\\' and control characters
	// are emitted as their JSON escapes.
	jsonStr bool
	err     error
}

// parseRegex parses pattern and strips the anchors that full-match
// semantics make redundant, reporting which ends were anchored.
func parseRegex(pattern string) (re *syntax.Regexp, begin, end bool, err error) {
	re, err = syntax.Parse(pattern, regexFlags)
	if err != nil {
		return nil, false, false, fmt.Errorf("%w: regex %q: %w", ErrInvalid, pattern, err)
	}
	isBegin := func(r *syntax.Regexp) bool { return r.Op == syntax.OpBeginText || r.Op == syntax.OpBeginLine }
	isEnd := func(r *syntax.Regexp) bool { return r.Op == syntax.OpEndText || r.Op == syntax.OpEndLine }
	switch {
	case isBegin(re):
		return &syntax.Regexp{Op: syntax.OpEmptyMatch}, true, false, nil
	case isEnd(re):
		return &syntax.Regexp{Op: syntax.OpEmptyMatch}, false, true, nil
	case re.Op == syntax.OpConcat:
		subs := re.Sub
		for len(subs) > 0 && isBegin(subs[0]) {
			subs, begin = subs[1:], true
		}
		for len(subs) > 0 && isEnd(subs[len(subs)-1]) {
			subs, end = subs[:len(subs)-1], true
		}
		cp := *re
		cp.Sub = subs
		return &cp, begin, end, nil
	}
	return re, false, false, nil
}

func (rc *reCompiler) fail(op string) frag {
	if rc.err == nil {
		rc.err = fmt.Errorf("%w: regex feature %s (anchors are implied at both ends; word boundaries cannot be matched byte by byte)", ErrUnsupported, op)
	}
	return rc.b.none()
}

func (rc *reCompiler) compile(re *syntax.Regexp) frag {
	b := rc.b
	if b.failed() || rc.err != nil {
		return b.none()
	}
	switch re.Op {
	case syntax.OpNoMatch:
		return b.none()
	case syntax.OpEmptyMatch:
		return b.empty()
	case syntax.OpLiteral:
		f := b.empty()
		for _, r := range re.Rune {
			if re.Flags&syntax.FoldCase != 0 {
				f = b.cat(f, rc.class(foldClass(r)))
			} else {
				f = b.cat(f, rc.class([]rune{r, r}))
			}
		}
		return f
	case syntax.OpCharClass:
		return rc.class(re.Rune)
	case syntax.OpAnyCharNotNL:
		return rc.class([]rune{0, '\n' - 1, '\n' + 1, utf8.MaxRune})
	case syntax.OpAnyChar:
		return rc.class([]rune{0, utf8.MaxRune})
	case syntax.OpBeginLine:
		return rc.fail("^ (not at the start)")
	case syntax.OpEndLine:
		return rc.fail("$ (not at the end)")
	case syntax.OpBeginText:
		return rc.fail(`^ or \A (not at the start)`)
	case syntax.OpEndText:
		return rc.fail(`$ or \z (not at the end)`)
	case syntax.OpWordBoundary:
		return rc.fail(`\b`)
	case syntax.OpNoWordBoundary:
		return rc.fail(`\B`)
	case syntax.OpCapture:
		return rc.compile(re.Sub[0])
	case syntax.OpStar:
		return b.star(rc.compile(re.Sub[0]))
	case syntax.OpPlus:
		return b.plus(rc.compile(re.Sub[0]))
	case syntax.OpQuest:
		return b.quest(rc.compile(re.Sub[0]))
	case syntax.OpRepeat:
		sub := re.Sub[0]
		return b.repeat(func() frag { return rc.compile(sub) }, re.Min, re.Max)
	case syntax.OpConcat:
		f := b.empty()
		for _, s := range re.Sub {
			f = b.cat(f, rc.compile(s))
		}
		return f
	case syntax.OpAlternate:
		fs := make([]frag, 0, len(re.Sub))
		for _, s := range re.Sub {
			fs = append(fs, rc.compile(s))
		}
		return b.alt(fs...)
	}
	return rc.fail(re.Op.String())
}

// foldClass returns the case-folding orbit of r as a class.
func foldClass(r rune) []rune {
	out := []rune{r, r}
	for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
		out = append(out, f, f)
	}
	return out
}

// class matches one rune from pairs of inclusive bounds [lo0, hi0, lo1,
// hi1, ...].
func (rc *reCompiler) class(pairs []rune) frag {
	b := rc.b
	var alts []frag
	for i := 0; i+1 < len(pairs); i += 2 {
		lo, hi := pairs[i], pairs[i+1]
		if !rc.jsonStr {
			alts = append(alts, b.runeRange(lo, hi))
			continue
		}
		// Split off the characters JSON must escape.
		for lo <= hi {
			if needsEscape(lo) {
				alts = append(alts, b.lit(jsonEscape(lo)))
				lo++
				continue
			}
			end := hi
			for _, sp := range []rune{'"', '\\'} {
				if lo < sp && sp <= end {
					end = sp - 1
				}
			}
			alts = append(alts, b.runeRange(lo, end))
			lo = end + 1
		}
	}
	return b.alt(alts...)
}

func needsEscape(r rune) bool { return r < 0x20 || r == '"' || r == '\\' }

// jsonEscape is the escape this package emits for a character JSON strings
// may not hold raw.
func jsonEscape(r rune) string {
	switch r {
	case '"':
		return `\"`
	case '\\':
		return `\\`
	case '\b':
		return `\b`
	case '\f':
		return `\f`
	case '\n':
		return `\n`
	case '\r':
		return `\r`
	case '\t':
		return `\t`
	}
	const hex = "0123456789abcdef"
	return `\u00` + string(hex[r>>4]) + string(hex[r&15])
}
