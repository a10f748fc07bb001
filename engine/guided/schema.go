package guided

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"math/big"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// JSON schemas compile to a regular language of compact JSON text:
//
//   - Supported: type (one or a list; inferred from the keywords when
//     absent), enum, const, $ref within the document (#, #/$defs/…,
//     #/definitions/…, any JSON pointer), anyOf, oneOf (exact: see
//     oneof.go), allOf, and $ref, anyOf or oneOf beside other keywords
//     (merged: see merge.go); objects: properties, required,
//     additionalProperties (a boolean or a schema), patternProperties
//     (on declared properties), minProperties, maxProperties,
//     dependentRequired, propertyNames (declared names are checked, free
//     keys generated from it); arrays: contains with minContains,
//     items, prefixItems and draft 7 tuples (items as an array,
//     additionalItems), minItems, maxItems; strings: pattern (RE2 syntax,
//     unanchored as JSON Schema says), minLength, maxLength, format (date,
//     time, date-time, uuid, ipv4, hostname, email, uri), any of them
//     together (their languages are intersected); integers and numbers:
//     minimum, maximum, exclusiveMinimum, exclusiveMaximum, multipleOf
//     (m·10⁻ⁿ, m up to 4096); not and if/then/else (by subtracting
//     acceptors, see oneof.go); booleans;
//     null. Boolean schemas: true is any JSON value, false matches
//     nothing.
//   - Annotations (title, description, default, examples, $comment, …)
//     and unknown keywords are ignored, as validators ignore them. Known
//     validation keywords this package does not implement (uniqueItems,
//     dependentSchemas, maxContains, …) fail Compile
//     with ErrUnsupported, listing each with its location (a JSON
//     pointer). A schema that matches nothing fails with ErrEmpty, naming
//     where and why (a required property that additionalProperties: false
//     forbids, bounds that cross, …).
//
// Output format, chosen to keep the DFA small while matching how models
// write JSON: no whitespace except one optional space after ':' and ','.
// Properties appear in the schema's order; required ones always, optional
// ones may be left out; no additional properties are generated when the
// schema lists properties (an object with only declared members is valid
// whatever additionalProperties says). Every scalar has one text: strings
// escape only what JSON requires ('"', '\\', control characters as \b
// \f \n \r \t, else \u00xx), numbers are plain decimals (no exponent,
// no leading zeros, no trailing fraction zeros, no "-0") of at most 15
// integer and 15 fraction digits, so they always end. "Any JSON value"
// nests at most Limits.JSONDepth deep; a $ref that refers to itself
// expands at most Limits.RefDepth times, and past that its branch is
// dropped (so "children": [] ends a tree).

// annotation keywords carry no constraint.
var annotationKeywords = map[string]bool{
	"$schema": true, "$id": true, "$comment": true, "$defs": true, "definitions": true,
	"$anchor": true, "title": true, "description": true, "default": true, "examples": true,
	"deprecated": true, "readOnly": true, "writeOnly": true, "contentMediaType": true,
	"contentEncoding": true, "$vocabulary": true,
}

// unsupportedKeywords are validation keywords with no translation here.
var unsupportedKeywords = map[string]bool{
	"dependentSchemas": true, "unevaluatedProperties": true,
	"unevaluatedItems": true,
	"$dynamicRef":      true, "$recursiveRef": true,
}

type schemaCompiler struct {
	b    *builder
	lim  Limits
	root *jval
	err  error
	// unsup lists unsupported features once each, as [path, feature].
	unsup [][2]string
	// refDepth counts the active expansions of each $ref target.
	refDepth map[string]int
	// empties says where and why parts of the schema match nothing.
	empties []string
	// curPath is the path of the schema being compiled, for helpers
	// that do not take one.
	curPath string
}

func compileSchema(b *builder, raw json.RawMessage, lim Limits) (frag, []string, error) {
	root, err := parseJSON(raw)
	if err != nil {
		return frag{}, nil, fmt.Errorf("%w: schema is not valid JSON: %w", ErrInvalid, err)
	}
	sc := &schemaCompiler{b: b, lim: lim, root: root, refDepth: map[string]int{}}
	f := sc.value(root, "#", 0)
	if err := sc.failure(); err != nil {
		return frag{}, nil, err
	}
	return f, sc.empties, nil
}

// failure is the compile error so far: unsupported features (all of
// them, sorted) first, then the first other error.
func (sc *schemaCompiler) failure() error {
	if len(sc.unsup) > 0 {
		slices.SortFunc(sc.unsup, func(a, b [2]string) int {
			return cmp.Or(strings.Compare(a[0], b[0]), strings.Compare(a[1], b[1]))
		})
		msgs := make([]string, len(sc.unsup))
		for i, u := range sc.unsup {
			msgs[i] = u[1] + " at " + u[0]
		}
		return fmt.Errorf("%w: JSON schema features: %s", ErrUnsupported, strings.Join(msgs, "; "))
	}
	return sc.err
}

func (sc *schemaCompiler) unsupported(path, feature string) {
	u := [2]string{path, feature}
	if !slices.Contains(sc.unsup, u) {
		sc.unsup = append(sc.unsup, u)
	}
}

func (sc *schemaCompiler) invalid(path, format string, args ...any) {
	if sc.err == nil {
		sc.err = fmt.Errorf("%w: schema at %s: %s", ErrInvalid, path, fmt.Sprintf(format, args...))
	}
}

// emptyAt notes that the schema at path matches nothing, and why; the
// notes make the error when the whole schema turns out to match nothing.
func (sc *schemaCompiler) emptyAt(path, why string) {
	if len(sc.empties) < 8 {
		sc.empties = append(sc.empties, why+" at "+path)
	}
}

func (sc *schemaCompiler) stop() bool {
	return sc.err != nil || sc.b.failed()
}

// hasConstraints reports whether s has validation keywords other than the
// listed ones (annotations and unknown keywords do not count).
func hasConstraints(s *jval, except ...string) bool {
	for _, k := range s.keys {
		if annotationKeywords[k] || slices.Contains(except, k) {
			continue
		}
		if unsupportedKeywords[k] || schemaKeywords[k] {
			return true
		}
	}
	return false
}

var schemaKeywords = map[string]bool{
	"type": true, "enum": true, "const": true, "$ref": true, "anyOf": true, "oneOf": true,
	"allOf": true, "properties": true, "required": true, "additionalProperties": true,
	"items": true, "minItems": true, "maxItems": true, "uniqueItems": true, "pattern": true,
	"prefixItems": true, "additionalItems": true, "minProperties": true, "maxProperties": true,
	"patternProperties": true, "multipleOf": true, "not": true, "dependentRequired": true, "dependencies": true, "if": true, "then": true, "else": true,
	"propertyNames": true,
	"minLength":     true, "maxLength": true, "format": true, "minimum": true, "maximum": true,
	"exclusiveMinimum": true, "exclusiveMaximum": true,
}

// value compiles schema s (at JSON pointer path, nested depth objects or
// arrays deep) to a fragment matching the JSON texts it generates.
func (sc *schemaCompiler) value(s *jval, path string, depth int) frag {
	b := sc.b
	if sc.stop() {
		return b.none()
	}
	switch s.kind {
	case jBool:
		if s.b {
			return sc.anyValue(sc.anyDepth(depth))
		}
		sc.emptyAt(path, "the schema false")
		return b.none()
	case jObj:
	default:
		sc.invalid(path, "a schema must be an object or a boolean")
		return b.none()
	}
	if depth > sc.lim.MaxDepth {
		sc.err = fmt.Errorf("%w: schema at %s nests deeper than %d", ErrTooLarge, path, sc.lim.MaxDepth)
		return b.none()
	}
	if s.get("not") != nil || s.get("if") != nil {
		return sc.negation(s, path, depth)
	}
	if folded, refs, changed := sc.fold(s, path); changed {
		for _, r := range refs {
			sc.refDepth[r]++
		}
		f := sc.value(folded, path, depth)
		for _, r := range refs {
			sc.refDepth[r]--
		}
		return f
	}
	for _, k := range s.keys {
		if unsupportedKeywords[k] {
			sc.unsupported(path, k)
		}
	}
	if u := s.get("uniqueItems"); u != nil && !(u.kind == jBool && !u.b) {
		sc.unsupported(path, "uniqueItems")
	}

	if ref := s.get("$ref"); ref != nil {
		if hasConstraints(s, "$ref") {
			sc.unsupported(path, "$ref with sibling validation keywords")
		}
		return sc.ref(ref, path, depth)
	}
	for _, kw := range []string{"anyOf", "oneOf", "allOf"} {
		br := s.get(kw)
		if br == nil {
			continue
		}
		if br.kind != jArr || len(br.arr) == 0 {
			sc.invalid(path, "%s must be a non-empty array", kw)
			return b.none()
		}
		if hasConstraints(s, kw) {
			sc.unsupported(path, kw+" with sibling validation keywords")
			return b.none()
		}
		if kw == "oneOf" {
			return sc.oneOf(br.arr, path, depth)
		}
		fs := make([]frag, 0, len(br.arr))
		for i, sub := range br.arr {
			fs = append(fs, sc.value(sub, fmt.Sprintf("%s/%s/%d", path, kw, i), depth))
		}
		return b.alt(fs...)
	}

	types, ok := sc.types(s, path)
	if !ok {
		return b.none()
	}
	if c := s.get("const"); c != nil {
		return b.lit(string(c.appendJSON(nil)))
	}
	if e := s.get("enum"); e != nil {
		if e.kind != jArr {
			sc.invalid(path, "enum must be an array")
			return b.none()
		}
		var fs []frag
		for _, v := range e.arr {
			if types == nil || slices.Contains(types, kindOf(v)) || (kindOf(v) == "integer" && slices.Contains(types, "number")) {
				fs = append(fs, b.lit(string(v.appendJSON(nil))))
			}
		}
		if len(fs) == 0 {
			sc.emptyAt(path, "an enum with no value of the schema's type")
		}
		return b.alt(fs...)
	}
	if types == nil {
		types = inferTypes(s)
		if types == nil {
			return sc.anyValue(sc.anyDepth(depth))
		}
	}
	fs := make([]frag, 0, len(types))
	for _, t := range types {
		switch t {
		case "null":
			fs = append(fs, b.lit("null"))
		case "boolean":
			fs = append(fs, b.alt(b.lit("true"), b.lit("false")))
		case "integer":
			fs = append(fs, sc.withMultipleOf(s, path, func() frag { return sc.integer(s, path) }))
		case "number":
			fs = append(fs, sc.withMultipleOf(s, path, func() frag { return sc.number(s, path) }))
		case "string":
			fs = append(fs, sc.str(s, path))
		case "array":
			fs = append(fs, sc.array(s, path, depth))
		case "object":
			fs = append(fs, sc.object(s, path, depth))
		}
	}
	return b.alt(fs...)
}

// types reads "type": nil when absent.
func (sc *schemaCompiler) types(s *jval, path string) ([]string, bool) {
	t := s.get("type")
	if t == nil {
		return nil, true
	}
	var list []*jval
	switch t.kind {
	case jStr:
		list = []*jval{t}
	case jArr:
		list = t.arr
	default:
		sc.invalid(path, "type must be a string or an array of strings")
		return nil, false
	}
	var out []string
	for _, x := range list {
		switch x.s {
		case "null", "boolean", "integer", "number", "string", "array", "object":
			if x.kind == jStr && !slices.Contains(out, x.s) {
				out = append(out, x.s)
				continue
			}
		}
		sc.invalid(path, "unknown type %s", x.appendJSON(nil))
		return nil, false
	}
	return out, true
}

// inferTypes guesses the types from type-specific keywords, nil if none.
func inferTypes(s *jval) []string {
	has := func(ks ...string) bool {
		for _, k := range ks {
			if s.get(k) != nil {
				return true
			}
		}
		return false
	}
	var out []string
	if has("properties", "required", "additionalProperties") {
		out = append(out, "object")
	}
	if has("items", "minItems", "maxItems") {
		out = append(out, "array")
	}
	if has("pattern", "minLength", "maxLength", "format") {
		out = append(out, "string")
	}
	if has("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum") {
		out = append(out, "number")
	}
	return out
}

// kindOf is the JSON-schema type of an instance value.
func kindOf(v *jval) string {
	switch v.kind {
	case jNull:
		return "null"
	case jBool:
		return "boolean"
	case jNum:
		if f, err := strconv.ParseFloat(v.s, 64); err == nil && f == math.Trunc(f) {
			return "integer"
		}
		return "number"
	case jStr:
		return "string"
	case jArr:
		return "array"
	}
	return "object"
}

// anyDepth is how deep an unconstrained value at depth may nest.
func (sc *schemaCompiler) anyDepth(depth int) int {
	return max(0, min(sc.lim.JSONDepth, sc.lim.MaxDepth-depth))
}

func (sc *schemaCompiler) ref(ref *jval, path string, depth int) frag {
	b := sc.b
	if ref.kind != jStr {
		sc.invalid(path, "$ref must be a string")
		return b.none()
	}
	target, ok := sc.resolve(ref.s)
	if !ok {
		if ref.s == "#" || strings.HasPrefix(ref.s, "#/") {
			sc.invalid(path, "$ref %q does not resolve", ref.s)
		} else {
			sc.unsupported(path, fmt.Sprintf("$ref %q (only refs within the document, #/...)", ref.s))
		}
		return b.none()
	}
	if sc.refDepth[ref.s] >= sc.lim.RefDepth {
		return b.none() // recursion cut: this branch is not generated
	}
	sc.refDepth[ref.s]++
	f := sc.value(target, ref.s, depth)
	sc.refDepth[ref.s]--
	return f
}

// resolve follows a same-document JSON pointer reference.
func (sc *schemaCompiler) resolve(ref string) (*jval, bool) {
	if ref == "#" {
		return sc.root, true
	}
	if !strings.HasPrefix(ref, "#/") {
		return nil, false
	}
	v := sc.root
	for _, tok := range strings.Split(ref[2:], "/") {
		if t, err := url.PathUnescape(tok); err == nil {
			tok = t
		}
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch v.kind {
		case jObj:
			v = v.get(tok)
		case jArr:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(v.arr) {
				return nil, false
			}
			v = v.arr[i]
		default:
			return nil, false
		}
		if v == nil {
			return nil, false
		}
	}
	return v, true
}

// count reads a non-negative integer keyword; def when absent.
func (sc *schemaCompiler) count(s *jval, key, path string, def int) int {
	v := s.get(key)
	if v == nil {
		return def
	}
	f, err := strconv.ParseFloat(v.s, 64)
	if v.kind != jNum || err != nil || f < 0 || f != math.Trunc(f) {
		sc.invalid(path, "%s must be a non-negative integer", key)
		return def
	}
	if f > 1e6 {
		f = 1e6 // far past any automaton limit; the size check reports it
	}
	return int(f)
}

// ws is the optional whitespace allowed after ':' and ','.
func (sc *schemaCompiler) ws() frag { return sc.b.quest(sc.b.lit(" ")) }

// strChar matches one character of a JSON string as this package writes
// it: any rune but '"', '\\' and controls, or the one escape jsonEscape
// gives each of those. One encoding per character makes generated strings
// canonical, so languages of strings can be intersected and subtracted
// (oneOf) by their text.
func (sc *schemaCompiler) strChar() frag {
	b := sc.b
	short := b.cat(b.lit(`\`), b.alt(
		b.byteRange('"', '"'), b.byteRange('\\', '\\'),
		b.byteRange('b', 'b'), b.byteRange('f', 'f'), b.byteRange('n', 'n'),
		b.byteRange('r', 'r'), b.byteRange('t', 't'),
	))
	// \u00XX for the controls without a short escape: 00-07, 0b, 0e-1f.
	long := b.cat(b.lit(`\u00`), b.alt(
		b.cat(b.lit("0"), b.alt(b.byteRange('0', '7'), b.lit("b"), b.byteRange('e', 'f'))),
		b.cat(b.lit("1"), b.alt(b.byteRange('0', '9'), b.byteRange('a', 'f'))),
	))
	return b.alt(b.runeRange(0x20, 0x21), b.runeRange(0x23, 0x5B), b.runeRange(0x5D, utf8.MaxRune), short, long)
}

func (sc *schemaCompiler) jsonString(min, max int) frag {
	b := sc.b
	return b.seq(b.lit(`"`), b.repeat(sc.strChar, min, max), b.lit(`"`))
}

// Date parts. A day exists in its month; February 29 only in leap years:
// divisible by 4 and not by 100, or by 400, which the last two digits (and
// for centuries the first two) decide, so the rule is regular.
const (
	reYear     = `[0-9]{4}`
	reLeapYear = `(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:0[048]|[2468][048]|[13579][26])00)`
	reMonthDay = `(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)|02-(?:0[1-9]|1[0-9]|2[0-8]))`
	reDate     = `(?:` + reYear + `-` + reMonthDay + `|` + reLeapYear + `-02-29)`
	reTime     = `(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\.[0-9]{1,6})?(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])`
	// A hostname: dot-separated labels of letters, digits and inner
	// hyphens, at most 63 bytes each; at most 4 labels of at most 62 keep
	// the whole under RFC 1123's 253 bytes without counting.
	reLabel    = `[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,60}[a-zA-Z0-9])?`
	reHostname = reLabel + `(?:\.` + reLabel + `){0,3}`
	reOctet    = `(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])`
)

// formats are the regular subsets generated for the "format" values this
// package knows. Each is a subset of what the format allows, so every
// generated string is valid; email, hostname and uri leave out rare
// forms (quoted local parts, IP-literal hosts, percent-encoding).
var formats = map[string]string{
	"date":      reDate,
	"time":      reTime,
	"date-time": reDate + `T` + reTime,
	"uuid":      `[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`,
	"ipv4":      reOctet + `(?:\.` + reOctet + `){3}`,
	"hostname":  reHostname,
	// A dot-atom local part (at most 3 atoms of at most 16, under the
	// 64-byte limit; no leading, trailing or doubled dots), then a
	// hostname with at least two labels.
	"email": `[a-zA-Z0-9_+-]{1,16}(?:\.[a-zA-Z0-9_+-]{1,16}){0,2}@` + reLabel + `(?:\.` + reLabel + `){1,3}`,
	// scheme://host[:port][/path][?query][#fragment] with unreserved and
	// a few sub-delimiter characters.
	"uri": `(?:https?|ftp|wss?)://` + reHostname + `(?::[1-9][0-9]{0,3})?(?:/[a-zA-Z0-9._~!$&'()*+,;=:@-]*)*(?:\?[a-zA-Z0-9._~!$&'()*+,;=:@/?-]*)?(?:#[a-zA-Z0-9._~!$&'()*+,;=:@/?-]*)?`,
}

// formatNames lists the known formats for error messages.
const formatNames = "date, time, date-time, uuid, ipv4, hostname, email, uri"

func (sc *schemaCompiler) str(s *jval, path string) frag {
	b := sc.b
	minL := sc.count(s, "minLength", path, 0)
	maxL := sc.count(s, "maxLength", path, -1)
	if maxL >= 0 && maxL < minL {
		sc.emptyAt(path, fmt.Sprintf("minLength %d is above maxLength %d", minL, maxL))
		return b.none()
	}
	fmtv := s.get("format")
	lengths := s.get("minLength") != nil || s.get("maxLength") != nil
	// Each constraint is a language of string bodies (the bytes between
	// the quotes); several are intersected. Merged allOf schemas bring
	// more than one pattern.
	var pats []*jval
	if pat := s.get("pattern"); pat != nil {
		pats = append(pats, pat)
	}
	if more := s.get(mergedPatterns); more != nil {
		pats = append(pats, more.arr...)
	}
	var parts []func() frag
	for _, pat := range pats {
		if pat.kind != jStr {
			sc.invalid(path, "pattern must be a string")
			return b.none()
		}
		re, begin, end, err := parseRegex(pat.s)
		if err != nil {
			sc.err = fmt.Errorf("schema at %s: %w", path, err)
			return b.none()
		}
		parts = append(parts, func() frag {
			b := sc.b
			rc := &reCompiler{b: b, jsonStr: true}
			f := rc.compile(re)
			// JSON Schema patterns match anywhere unless anchored.
			if !begin {
				f = b.cat(b.star(sc.strChar()), f)
			}
			if !end {
				f = b.cat(f, b.star(sc.strChar()))
			}
			return f
		})
		// Compile once up front to report unsupported features.
		probe := &reCompiler{b: newBuilder(sc.lim.MaxNFAStates), jsonStr: true}
		probe.compile(re)
		if probe.err != nil {
			sc.unsupported(path, fmt.Sprintf("pattern %q: %v", pat.s, probe.err))
			return b.none()
		}
	}
	if fmtv != nil {
		expr, ok := formats[fmtv.s]
		if !ok || fmtv.kind != jStr {
			sc.unsupported(path, fmt.Sprintf("format %s (supported: %s)", fmtv.appendJSON(nil), formatNames))
			return b.none()
		}
		re, _, _, _ := parseRegex(expr)
		parts = append(parts, func() frag {
			rc := &reCompiler{b: sc.b, jsonStr: true}
			return rc.compile(re)
		})
	}
	if lengths || len(parts) == 0 {
		parts = append(parts, func() frag { return sc.b.repeat(sc.strChar, minL, maxL) })
	}
	var body frag
	if len(parts) == 1 {
		body = parts[0]()
	} else {
		body = sc.combine(path, all, parts...)
	}
	return b.seq(b.lit(`"`), body, b.lit(`"`))
}

// Numbers are generated in one canonical decimal form: no exponent, no
// leading zeros, no trailing zeros in the fraction, no "-0". Digit counts
// are bounded, as llama.cpp's and XGrammar's JSON grammars bound them, so
// a number always ends: a model that keeps choosing digits would
// otherwise run to max_tokens.
const (
	maxIntDigits  = 15
	maxFracDigits = 15
)

// canonNonneg matches the canonical forms of numbers ≥ 0 (integers only
// when intOnly).
func (sc *schemaCompiler) canonNonneg(intOnly bool) frag {
	b := sc.b
	digit := func() frag { return b.byteRange('0', '9') }
	ip := b.alt(b.lit("0"), b.cat(b.byteRange('1', '9'), b.repeat(digit, 0, maxIntDigits-1)))
	if intOnly {
		return ip
	}
	frac := b.quest(b.seq(b.lit("."), b.repeat(digit, 0, maxFracDigits-1), b.byteRange('1', '9')))
	return b.cat(ip, frac)
}

// number matches canonical numbers within the schema's bounds.
func (sc *schemaCompiler) number(s *jval, path string) frag {
	b := sc.b
	lo, hi, ok := sc.bounds(s, path)
	if !ok {
		return b.none()
	}
	if lo == nil && hi == nil {
		pos := sc.canonNonneg(false)
		neg := b.cat(b.lit("-"), sc.combine(path, firstButNotRest, func() frag { return sc.canonNonneg(false) }, func() frag { return sc.b.lit("0") }))
		return b.alt(pos, neg)
	}
	if lo != nil && hi != nil {
		if c := lo.v.Cmp(hi.v); c > 0 || c == 0 && (lo.excl || hi.excl) {
			sc.emptyAt(path, "the lower bound is above the upper bound")
			return b.none()
		}
	}
	var fs []frag
	// x ≥ 0 within the bounds.
	if hi == nil || hi.v.Sign() >= 0 {
		lower := lo
		if lo == nil || lo.v.Sign() < 0 {
			lower = &numBound{v: new(big.Rat)}
		}
		fs = append(fs, sc.decimalRange(path, lower, hi, false))
	}
	// x < 0: "-" then |x| within the mirrored bounds, |x| > 0.
	if lo == nil || lo.v.Sign() < 0 {
		upper := (*numBound)(nil)
		if lo != nil {
			upper = &numBound{v: new(big.Rat).Neg(lo.v), excl: lo.excl}
		}
		lower := &numBound{v: new(big.Rat), excl: true}
		if hi != nil && hi.v.Sign() < 0 {
			lower = &numBound{v: new(big.Rat).Neg(hi.v), excl: hi.excl}
		}
		fs = append(fs, b.cat(b.lit("-"), sc.decimalRange(path, lower, upper, false)))
	}
	return b.alt(fs...)
}

// numBound is one bound of a number: its value, and whether it excludes
// that value.
type numBound struct {
	v    *big.Rat
	excl bool
}

// bounds reads minimum, maximum and the exclusive forms (numbers in draft
// 6 and later, booleans next to minimum/maximum in draft 4); nil means
// unbounded.
func (sc *schemaCompiler) bounds(s *jval, path string) (lo, hi *numBound, ok bool) {
	read := func(key string) *big.Rat {
		v := s.get(key)
		if v == nil || v.kind == jBool {
			return nil
		}
		r, good := new(big.Rat).SetString(v.s)
		if v.kind != jNum || !good {
			sc.invalid(path, "%s must be a number", key)
			ok = false
			return nil
		}
		return r
	}
	exclBool := func(key string) bool {
		v := s.get(key)
		return v != nil && v.kind == jBool && v.b
	}
	ok = true
	if r := read("minimum"); r != nil {
		lo = &numBound{v: r, excl: exclBool("exclusiveMinimum")}
	}
	if r := read("exclusiveMinimum"); r != nil && (lo == nil || r.Cmp(lo.v) >= 0) {
		lo = &numBound{v: r, excl: true}
	}
	if r := read("maximum"); r != nil {
		hi = &numBound{v: r, excl: exclBool("exclusiveMaximum")}
	}
	if r := read("exclusiveMaximum"); r != nil && (hi == nil || r.Cmp(hi.v) <= 0) {
		hi = &numBound{v: r, excl: true}
	}
	// Past the generated digits a bound narrows nothing (or leaves
	// nothing, which is reported as such).
	for _, bd := range []*numBound{lo, hi} {
		if bd != nil && new(big.Rat).Abs(bd.v).Cmp(big.NewRat(maxIntBound, 1)) > 0 {
			bd.v = big.NewRat(int64(bd.v.Sign())*maxIntBound, 1)
		}
	}
	return lo, hi, ok
}

// decimalString writes r ≥ 0 as a plain decimal (no exponent, no trailing
// fraction zeros); ok is false when r has no finite decimal expansion
// within maxFracDigits+1 digits.
func decimalString(r *big.Rat) (intPart, frac string, ok bool) {
	for n := 0; n <= maxFracDigits+1; n++ {
		scaled := new(big.Rat).Mul(r, new(big.Rat).SetInt(new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(n)), nil)))
		if scaled.IsInt() {
			s := r.FloatString(n)
			intPart, frac, _ = strings.Cut(s, ".")
			return intPart, strings.TrimRight(frac, "0"), true
		}
	}
	return "", "", false
}

// decimalRange matches canonical numbers x ≥ 0 (integers when intOnly)
// with lo ≤ x ≤ hi (strict where a bound says so; nil: unbounded above).
// Bounds are compared digit by digit: x ≥ L when its integer part is
// greater, or equal with a fraction that is not smaller digit-wise.
func (sc *schemaCompiler) decimalRange(path string, lo, hi *numBound, intOnly bool) frag {
	parts := []func() frag{func() frag { return sc.canonNonneg(intOnly) }}
	var not []func() frag
	limit := func(bd *numBound, above bool) {
		ip, fp, ok := decimalString(bd.v)
		if !ok {
			// Finer than the generated digits: round outward to a
			// multiple of 10^-maxFracDigits. No generated number lies
			// strictly between, so the rounded bound, inclusive, is
			// exact.
			scale := new(big.Int).Exp(big.NewInt(10), big.NewInt(maxFracDigits), nil)
			x := new(big.Rat).Mul(bd.v, new(big.Rat).SetInt(scale))
			q, m := new(big.Int).DivMod(x.Num(), x.Denom(), new(big.Int))
			if above && m.Sign() != 0 {
				q.Add(q, big.NewInt(1))
			}
			bd = &numBound{v: new(big.Rat).SetFrac(q, scale)}
			ip, fp, _ = decimalString(bd.v)
		}
		parts = append(parts, func() frag { return sc.decimalCompare(ip, fp, above) })
		if bd.excl {
			lit := ip
			if fp != "" {
				lit += "." + fp
			}
			not = append(not, func() frag { return sc.b.lit(lit) })
		}
	}
	if lo != nil && lo.v.Sign() > 0 || lo != nil && lo.excl {
		limit(lo, true)
	}
	if hi != nil {
		limit(hi, false)
	}
	if len(parts) == 1 && len(not) == 0 {
		return parts[0]()
	}
	// Intersect the comparisons, then subtract the excluded bounds.
	n := len(parts)
	return sc.combine(path, func(ds []*dfa, qs []int32) bool {
		for i := range n {
			if !ds[i].accept[qs[i]] {
				return false
			}
		}
		for i := n; i < len(qs); i++ {
			if ds[i].accept[qs[i]] {
				return false
			}
		}
		return true
	}, append(parts, not...)...)
}

// decimalCompare matches decimal texts ("I" or "I.F", I without leading
// zeros) whose value is ≥ ip.fp (above) or ≤ ip.fp (not above).
func (sc *schemaCompiler) decimalCompare(ip, fp string, above bool) frag {
	b := sc.b
	digits := func() frag { return b.star(b.byteRange('0', '9')) }
	anyFrac := func() frag { return b.quest(b.cat(b.lit("."), b.plus(b.byteRange('0', '9')))) }
	n, _ := strconv.ParseUint(ip, 10, 64)
	var fs []frag
	if above {
		// Integer part above ip, any fraction.
		fs = append(fs, b.cat(sc.natRange(n+1, 0, true), anyFrac()))
		// Integer part ip, fraction ≥ fp.
		if fp == "" {
			fs = append(fs, b.cat(b.lit(ip), anyFrac()))
		} else {
			var alts []frag
			for k := 0; k < len(fp); k++ {
				if fp[k] < '9' {
					alts = append(alts, b.seq(b.lit(fp[:k]), b.byteRange(fp[k]+1, '9'), digits()))
				}
			}
			alts = append(alts, b.cat(b.lit(fp), digits()))
			fs = append(fs, b.seq(b.lit(ip), b.lit("."), b.alt(alts...)))
		}
		return b.alt(fs...)
	}
	if n > 0 {
		fs = append(fs, b.cat(sc.natRange(0, n-1, false), anyFrac()))
	}
	if fp == "" {
		fs = append(fs, b.cat(b.lit(ip), b.quest(b.cat(b.lit("."), b.plus(b.lit("0"))))))
	} else {
		alts := []frag{}
		for k := 0; k < len(fp); k++ {
			if fp[k] > '0' {
				alts = append(alts, b.seq(b.lit(fp[:k]), b.byteRange('0', fp[k]-1), digits()))
			}
			alts = append(alts, b.cat(b.lit(fp[:k+1]), b.star(b.lit("0"))))
		}
		fs = append(fs, b.cat(b.lit(ip), b.quest(b.cat(b.lit("."), b.alt(alts...)))))
	}
	return b.alt(fs...)
}

// maxIntBound bounds integer limits so digit arithmetic stays in uint64.
const maxIntBound = 1e15

func (sc *schemaCompiler) integer(s *jval, path string) frag {
	sc.curPath = path
	var lo, hi int64
	hasLo, hasHi := false, false
	bound := func(key string) (float64, bool) {
		v := s.get(key)
		if v == nil || v.kind == jBool {
			return 0, false
		}
		f, err := strconv.ParseFloat(v.s, 64)
		if v.kind != jNum || err != nil {
			sc.invalid(path, "%s must be a number", key)
			return 0, false
		}
		// Past the generated digits a bound only narrows nothing (or
		// leaves nothing, which is reported as such).
		if math.Abs(f) > maxIntBound {
			f = math.Copysign(maxIntBound, f)
		}
		return f, true
	}
	// Draft 4 spells exclusive bounds as booleans next to minimum/maximum.
	exclBool := func(key string) bool {
		v := s.get(key)
		return v != nil && v.kind == jBool && v.b
	}
	if f, ok := bound("minimum"); ok {
		if exclBool("exclusiveMinimum") {
			lo, hasLo = int64(math.Floor(f))+1, true
		} else {
			lo, hasLo = int64(math.Ceil(f)), true
		}
	}
	if f, ok := bound("exclusiveMinimum"); ok {
		if l := int64(math.Floor(f)) + 1; !hasLo || l > lo {
			lo, hasLo = l, true
		}
	}
	if f, ok := bound("maximum"); ok {
		if exclBool("exclusiveMaximum") {
			hi, hasHi = int64(math.Ceil(f))-1, true
		} else {
			hi, hasHi = int64(math.Floor(f)), true
		}
	}
	if f, ok := bound("exclusiveMaximum"); ok {
		if h := int64(math.Ceil(f)) - 1; !hasHi || h < hi {
			hi, hasHi = h, true
		}
	}
	return sc.intRange(lo, hi, hasLo, hasHi)
}

// intRange matches canonical decimal integers in [lo, hi]; an absent
// bound is unbounded.
func (sc *schemaCompiler) intRange(lo, hi int64, hasLo, hasHi bool) frag {
	b := sc.b
	// An unbounded side stops at maxIntDigits digits (see canonNonneg).
	limit := int64(pow10(maxIntDigits) - 1)
	if !hasLo || lo < -limit {
		lo, hasLo = -limit, true
	}
	if !hasHi || hi > limit {
		hi, hasHi = limit, true
	}
	if lo > hi {
		sc.emptyAt(sc.curPath, fmt.Sprintf("no integer of at most %d digits lies between the bounds", maxIntDigits))
		return b.none()
	}
	var fs []frag
	if !hasLo || lo < 0 { // negative part: "-" then |x| in [-negHi, -lo]
		negHi := int64(-1)
		if hasHi {
			negHi = min(hi, -1)
		}
		if !hasLo || lo <= negHi {
			var loAbs uint64
			if hasLo {
				loAbs = uint64(-lo)
			}
			fs = append(fs, b.cat(b.lit("-"), sc.natRange(uint64(-negHi), loAbs, !hasLo)))
		}
	}
	if !hasHi || hi >= 0 {
		a := uint64(0)
		if hasLo && lo > 0 {
			a = uint64(lo)
		}
		var h uint64
		if hasHi {
			h = uint64(hi)
		}
		fs = append(fs, sc.natRange(a, h, !hasHi))
	}
	return b.alt(fs...)
}

// natRange matches the decimal forms of [a, z] (z = ∞ when inf).
func (sc *schemaCompiler) natRange(a, z uint64, inf bool) frag {
	b := sc.b
	as := strconv.FormatUint(a, 10)
	if inf {
		n := len(as)
		longer := b.cat(b.byteRange('1', '9'), b.repeat(func() frag { return b.byteRange('0', '9') }, n, -1))
		return b.alt(sc.natRange(a, pow10(n)-1, false), longer)
	}
	var fs []frag
	for n := len(as); n <= len(strconv.FormatUint(z, 10)); n++ {
		lo, hi := a, z
		if n > 1 {
			lo = max(a, pow10(n-1))
		}
		hi = min(z, pow10(n)-1)
		if lo <= hi {
			fs = append(fs, sc.sameLen(strconv.FormatUint(lo, 10), strconv.FormatUint(hi, 10)))
		}
	}
	return b.alt(fs...)
}

func pow10(n int) uint64 {
	p := uint64(1)
	for range n {
		p *= 10
	}
	return p
}

// sameLen matches the digit strings between lo and hi, of equal length.
func (sc *schemaCompiler) sameLen(lo, hi string) frag {
	b := sc.b
	if lo == "" {
		return b.empty()
	}
	if lo[0] == hi[0] {
		return b.cat(b.byteRange(lo[0], lo[0]), sc.sameLen(lo[1:], hi[1:]))
	}
	n := len(lo) - 1
	digits := func() frag { return b.repeat(func() frag { return b.byteRange('0', '9') }, n, n) }
	if strings.Trim(lo[1:], "0") == "" && strings.Trim(hi[1:], "9") == "" {
		return b.cat(b.byteRange(lo[0], hi[0]), digits())
	}
	fs := []frag{b.cat(b.byteRange(lo[0], lo[0]), sc.sameLen(lo[1:], strings.Repeat("9", n)))}
	if lo[0]+1 <= hi[0]-1 {
		fs = append(fs, b.cat(b.byteRange(lo[0]+1, hi[0]-1), digits()))
	}
	fs = append(fs, b.cat(b.byteRange(hi[0], hi[0]), sc.sameLen(strings.Repeat("0", n), hi[1:])))
	return b.alt(fs...)
}

// list matches open (item (sep item)*)? close with one copy of item.
func (sc *schemaCompiler) list(open, close string, item frag) frag {
	b := sc.b
	o, c := b.lit(open), b.lit(close)
	sep := b.cat(b.lit(","), sc.ws())
	b.link(o.out, c.in)
	b.link(o.out, item.in)
	b.link(item.out, sep.in)
	b.link(sep.out, item.in)
	b.link(item.out, c.in)
	return frag{o.in, c.out}
}

// anyValue matches any JSON value nesting at most d objects or arrays.
func (sc *schemaCompiler) anyValue(d int) frag {
	b := sc.b
	fs := []frag{sc.jsonString(0, -1), sc.number(&jval{kind: jObj}, "#"), b.lit("true"), b.lit("false"), b.lit("null")}
	if d > 0 && !sc.stop() {
		fs = append(fs,
			sc.list("{", "}", b.seq(sc.jsonString(0, -1), b.lit(":"), sc.ws(), sc.anyValue(d-1))),
			sc.list("[", "]", sc.anyValue(d-1)))
	}
	return b.alt(fs...)
}

func (sc *schemaCompiler) array(s *jval, path string, depth int) frag {
	b := sc.b
	item := s.get("items")
	ipath := path + "/items"
	// Tuples: prefixItems (2020-12, the rest per items) or items as an
	// array (draft 7, the rest per additionalItems).
	var prefix []*jval
	ppath := path + "/prefixItems"
	if p := s.get("prefixItems"); p != nil && p.kind == jArr {
		prefix = p.arr
	} else if item != nil && item.kind == jArr {
		prefix, ppath = item.arr, ipath
		item, ipath = s.get("additionalItems"), path+"/additionalItems"
	}
	if item == nil {
		item = &jval{kind: jBool, b: true}
	}
	minI := sc.count(s, "minItems", path, 0)
	maxI := sc.count(s, "maxItems", path, -1)
	if maxI >= 0 && maxI < minI {
		sc.emptyAt(path, fmt.Sprintf("minItems %d is above maxItems %d", minI, maxI))
		return b.none()
	}
	contains, minC := s.get("contains"), 0
	if contains != nil {
		minC = sc.count(s, "minContains", path, 1)
		if s.get("maxContains") != nil {
			// At most n items satisfying a schema needs the exact
			// complement of what it accepts, which acceptors only
			// over-approximate.
			sc.unsupported(path, "maxContains")
			return b.none()
		}
		if len(prefix) > 0 && minC > 0 {
			sc.unsupported(path, "contains on a tuple (prefixItems)")
			return b.none()
		}
		if maxI >= 0 && minC > maxI {
			sc.emptyAt(path, fmt.Sprintf("minContains %d is above maxItems %d", minC, maxI))
			return b.none()
		}
	}
	if len(prefix) > 0 {
		return sc.tuple(prefix, ppath, item, ipath, minI, maxI, depth)
	}
	gen := func() frag { return sc.value(item, ipath, depth+1) }
	if maxI == 0 {
		return b.lit("[]")
	}
	plain := func() frag {
		b := sc.b
		if minI == 0 && maxI < 0 {
			return sc.list("[", "]", gen())
		}
		more := func() frag { return b.seq(b.lit(","), sc.ws(), gen()) }
		rest := -1
		if maxI > 0 {
			rest = maxI - 1
		}
		body := b.cat(gen(), b.repeat(more, max(minI-1, 0), rest))
		if minI == 0 {
			body = b.quest(body)
		}
		return b.seq(b.lit("["), body, b.lit("]"))
	}
	if minC == 0 {
		return plain()
	}
	// contains with minContains k: the arrays above intersected with
	// those holding at least k items of items ∩ contains. JSON text
	// splits into items one way only, so the intersection's items are
	// the real ones.
	cpath := path + "/contains"
	hit := sc.productOf(cpath, all, gen, func() frag { return sc.value(contains, cpath, depth+1) })
	if hit == nil || sc.stop() {
		return b.none()
	}
	if hit.empty() {
		sc.emptyAt(cpath, "no item allowed by items satisfies contains")
		return b.none()
	}
	atLeast := func() frag {
		b := sc.b
		sep := func() frag { return b.cat(b.lit(","), sc.ws()) }
		f := b.cat(b.lit("["), b.star(b.cat(gen(), sep())))
		f = b.cat(f, b.embed(hit))
		for range minC - 1 {
			f = b.seq(f, b.star(b.cat(sep(), gen())), sep(), b.embed(hit))
		}
		return b.seq(f, b.star(b.cat(sep(), gen())), b.lit("]"))
	}
	return sc.combine(path, all, plain, atLeast)
}

// tuple matches arrays whose first items follow prefix and the rest item,
// minI to maxI (-1: any) items in all.
func (sc *schemaCompiler) tuple(prefix []*jval, ppath string, item *jval, ipath string, minI, maxI, depth int) frag {
	b := sc.b
	if maxI >= 0 && len(prefix) > maxI {
		prefix = prefix[:maxI]
	}
	open, closing := b.lit("["), b.lit("]")
	at := open.out // after the items so far
	for i, p := range prefix {
		if i >= minI {
			b.link(at, closing.in)
		}
		f := sc.value(p, fmt.Sprintf("%s/%d", ppath, i), depth+1)
		if i > 0 {
			f = b.seq(b.lit(","), sc.ws(), f)
		}
		b.link(at, f.in)
		at = f.out
	}
	n := len(prefix)
	restMax := -1
	if maxI >= 0 {
		restMax = maxI - n
	}
	if restMax != 0 && !(item.kind == jBool && !item.b) {
		more := func() frag { return b.seq(b.lit(","), sc.ws(), sc.value(item, ipath, depth+1)) }
		rest := b.repeat(more, max(minI-n, 0), restMax)
		b.link(at, rest.in)
		at = rest.out
	} else if minI > n {
		sc.emptyAt(ipath, fmt.Sprintf("minItems %d is above the %d items the tuple allows", minI, n))
		return b.none()
	}
	b.link(at, closing.in)
	return frag{open.in, closing.out}
}

func (sc *schemaCompiler) object(s *jval, path string, depth int) frag {
	b := sc.b
	props := s.get("properties")
	if props != nil && props.kind != jObj {
		sc.invalid(path, "properties must be an object")
		return b.none()
	}
	var names []string
	var schemas []*jval
	if props != nil {
		names = slices.Clone(props.keys)
		schemas = slices.Clone(props.vals)
	}
	required := map[string]bool{}
	if r := s.get("required"); r != nil {
		if r.kind != jArr {
			sc.invalid(path, "required must be an array")
			return b.none()
		}
		for _, x := range r.arr {
			if x.kind != jStr {
				sc.invalid(path, "required must list strings")
				return b.none()
			}
			required[x.s] = true
		}
	}
	addl := s.get("additionalProperties")
	// patternProperties constrain the declared names they match; no
	// other name is generated.
	type patProp struct {
		re     *regexp.Regexp
		schema *jval
	}
	var pats []patProp
	if pp := s.get("patternProperties"); pp != nil {
		if pp.kind != jObj {
			sc.invalid(path, "patternProperties must be an object")
			return b.none()
		}
		for i, src := range pp.keys {
			re, err := regexp.Compile(src)
			if err != nil {
				sc.unsupported(path+"/patternProperties", fmt.Sprintf("pattern %q (RE2 syntax): %v", src, err))
				return b.none()
			}
			pats = append(pats, patProp{re, pp.vals[i]})
		}
	}
	matched := func(name string) bool {
		return slices.ContainsFunc(pats, func(p patProp) bool { return p.re.MatchString(name) })
	}
	if r := s.get("required"); r != nil {
		for i, x := range r.arr {
			if slices.Contains(names, x.s) {
				continue
			}
			if matched(x.s) {
				names = append(names, x.s)
				schemas = append(schemas, &jval{kind: jBool, b: true})
				continue
			}
			// Required but undeclared: an additional property.
			if addl != nil && addl.kind == jBool && !addl.b {
				sc.emptyAt(fmt.Sprintf("%s/required/%d", path, i), fmt.Sprintf("required property %q is forbidden by additionalProperties: false", x.s))
				return b.none()
			}
			names = append(names, x.s)
			if addl != nil && addl.kind == jObj {
				schemas = append(schemas, addl)
			} else {
				schemas = append(schemas, &jval{kind: jBool, b: true})
			}
		}
	}
	for j, name := range names {
		for _, p := range pats {
			if p.re.MatchString(name) {
				schemas[j] = allOf(schemas[j], p.schema)
			}
		}
	}
	// propertyNames: a schema every key's string satisfies. Declared
	// names are checked against it (the optional ones that fail are left
	// out); free keys are generated from its language.
	var nameKey *automaton
	if pn := s.get("propertyNames"); pn != nil {
		ppath := path + "/propertyNames"
		nameKey = sc.productOf(ppath, all,
			func() frag { return sc.jsonString(0, -1) },
			func() frag { return sc.value(pn, ppath, depth+1) })
		if nameKey == nil || sc.stop() {
			return b.none()
		}
		keyOK := sc.automatonOf(ppath, func() frag { return sc.b.embed(nameKey) })
		if keyOK == nil {
			return b.none()
		}
		for j := 0; j < len(names); j++ {
			if keyOK.accept[keyOK.run(keyOK.start, appendJSONString(nil, names[j]))] {
				continue
			}
			if required[names[j]] {
				sc.emptyAt(ppath, fmt.Sprintf("required property %q does not satisfy propertyNames", names[j]))
				return b.none()
			}
			names = slices.Delete(names, j, j+1)
			schemas = slices.Delete(schemas, j, j+1)
			j--
		}
	}
	freeKey := func() frag {
		if nameKey != nil {
			return b.embed(nameKey)
		}
		return sc.jsonString(0, -1)
	}
	// dependentRequired (draft 7: dependencies with arrays): a required
	// trigger makes its dependencies required; an optional trigger whose
	// dependencies are not all required is left out.
	required = maps.Clone(required)
	for _, kw := range []string{"dependentRequired", "dependencies"} {
		dr := s.get(kw)
		if dr == nil {
			continue
		}
		if dr.kind != jObj {
			sc.invalid(path, "%s must be an object", kw)
			return b.none()
		}
		for i, trig := range dr.keys {
			deps := dr.vals[i]
			if deps.kind != jArr {
				sc.unsupported(path+"/"+kw, "a dependency that is a schema (dependentSchemas)")
				return b.none()
			}
			all := true
			for _, d := range deps.arr {
				if !required[d.s] {
					all = false
				}
			}
			j := slices.Index(names, trig)
			switch {
			case all || j < 0:
			case required[trig]:
				for _, d := range deps.arr {
					if !slices.Contains(names, d.s) {
						sc.unsupported(path+"/"+kw, fmt.Sprintf("required %q depends on %q, which the schema does not declare", trig, d.s))
						return b.none()
					}
					required[d.s] = true
				}
			default:
				names = slices.Delete(names, j, j+1)
				schemas = slices.Delete(schemas, j, j+1)
			}
		}
	}
	minP := sc.count(s, "minProperties", path, 0)
	maxP := sc.count(s, "maxProperties", path, -1)
	if len(names) == 0 {
		if addl != nil && addl.kind == jBool && !addl.b {
			if minP > 0 {
				sc.emptyAt(path, "minProperties with additionalProperties: false and no properties")
				return b.none()
			}
			return b.lit("{}")
		}
		if len(pats) > 0 {
			sc.unsupported(path, "patternProperties on an object that declares no properties")
			return b.none()
		}
		if s.get("dependentRequired") != nil || s.get("dependencies") != nil {
			sc.unsupported(path, "dependentRequired on an object whose generated properties are free")
			return b.none()
		}
		if minP > 1 {
			// Free keys may repeat, and a repeated key counts once.
			sc.unsupported(path, "minProperties above 1 on an object that declares no properties")
			return b.none()
		}
		var member func() frag
		if addl != nil && addl.kind == jObj {
			apath := path + "/additionalProperties"
			member = func() frag {
				return b.seq(freeKey(), b.lit(":"), sc.ws(), sc.value(addl, apath, depth+1))
			}
		} else {
			d := sc.anyDepth(depth)
			if d == 0 {
				if minP > 0 {
					sc.unsupported(path, "minProperties on an object nested past the depth limit")
					return b.none()
				}
				return b.lit("{}")
			}
			member = func() frag { return b.seq(freeKey(), b.lit(":"), sc.ws(), sc.anyValue(d-1)) }
		}
		if minP == 0 && maxP < 0 {
			return sc.list("{", "}", member())
		}
		if maxP == 0 {
			return b.lit("{}")
		}
		more := func() frag { return b.seq(b.lit(","), sc.ws(), member()) }
		body := b.cat(member(), b.repeat(more, 0, max(maxP, 0)-1))
		if maxP < 0 {
			body = b.cat(member(), b.star(more()))
		}
		if minP == 0 {
			body = b.quest(body)
		}
		return b.seq(b.lit("{"), body, b.lit("}"))
	}
	// Property counts over declared names: enough optional ones become
	// required, and those past the maximum are left out.
	nreq := 0
	for _, name := range names {
		if required[name] {
			nreq++
		}
	}
	if maxP >= 0 && nreq > maxP {
		sc.emptyAt(path, fmt.Sprintf("%d required properties are more than maxProperties %d", nreq, maxP))
		return b.none()
	}
	if minP > len(names) {
		sc.unsupported(path, fmt.Sprintf("minProperties %d above the %d declared properties", minP, len(names)))
		return b.none()
	}
	required = maps.Clone(required)
	for j := 0; j < len(names) && nreq < minP; j++ {
		if !required[names[j]] {
			required[names[j]] = true
			nreq++
		}
	}
	if maxP >= 0 {
		room := maxP - nreq
		var keepN []string
		var keepS []*jval
		for j, name := range names {
			if required[name] || room > 0 {
				if !required[name] {
					room--
				}
				keepN, keepS = append(keepN, name), append(keepS, schemas[j])
			}
		}
		names, schemas = keepN, keepS
		if len(names) == 0 {
			return b.lit("{}")
		}
	}
	// additionalProperties (a schema or a boolean) beside properties:
	// no additional property is generated, which every such schema
	// accepts.

	n := len(names)
	member := func(j int) frag {
		key := appendJSONString(nil, names[j])
		return b.seq(b.lit(string(key)), b.lit(":"), sc.ws(), sc.value(schemas[j], path+"/properties/"+escapePointer(names[j]), depth+1))
	}
	firstReq := n
	for j, name := range names {
		if required[name] {
			firstReq = j
			break
		}
	}
	// segIn[j] enters the tail of members j.. after at least one member:
	// each is ", member" (optional unless required). Members before the
	// first required one may each be the first written, entering the tail
	// right after themselves; so each member is built at most twice.
	open, end, closing := b.lit("{"), b.empty(), b.lit("}")
	segIn := make([]int32, n+1)
	segIn[n] = end.in
	for j := n - 1; j >= 1 && !sc.stop(); j-- {
		f := b.seq(b.lit(","), sc.ws(), member(j))
		if !required[names[j]] {
			f = b.quest(f)
		}
		b.link(f.out, segIn[j+1])
		segIn[j] = f.in
	}
	entry := b.add(nstate{kind: nEps})
	b.link(open.out, entry)
	for j := 0; j <= min(firstReq, n-1) && !sc.stop(); j++ {
		f := member(j)
		b.link(entry, f.in)
		b.link(f.out, segIn[j+1])
	}
	if firstReq == n {
		b.link(entry, end.in)
	}
	b.link(end.out, closing.in)
	return frag{open.in, closing.out}
}

func escapePointer(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}
