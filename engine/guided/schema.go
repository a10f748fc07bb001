package guided

import (
	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// JSON schemas compile to a regular language of compact JSON text:
//
//   - Supported: type (one or a list; inferred from the keywords when
//     absent), enum, const, $ref within the document (#, #/$defs/…,
//     #/definitions/…, any JSON pointer), anyOf, oneOf (generated like
//     anyOf: branches should not overlap), allOf with one branch;
//     objects: properties, required, additionalProperties; arrays: items
//     (one schema), minItems, maxItems; strings: pattern (RE2 syntax,
//     unanchored as JSON Schema says), minLength, maxLength, format
//     (date, time, date-time, uuid); integers: minimum, maximum,
//     exclusiveMinimum, exclusiveMaximum; numbers; booleans; null. Boolean
//     schemas: true is any JSON value, false matches nothing.
//   - Annotations (title, description, default, examples, $comment, …)
//     and unknown keywords are ignored, as validators ignore them. Known
//     validation keywords this package does not implement (multipleOf,
//     patternProperties, uniqueItems, not, if/then/else, …) fail Compile
//     with ErrUnsupported, listing each with its location.
//
// Output format, chosen to keep the DFA small while matching how models
// write JSON: no whitespace except one optional space after ':' and ','.
// Properties appear in the schema's order; required ones always, optional
// ones may be left out; no additional properties are generated when the
// schema lists properties (an object with only declared members is valid
// whatever additionalProperties says). Strings escape only what JSON
// requires ('"', '\\', control characters as \b \f \n \r \t or \u00XX),
// plus \/ in free strings. Integers and numbers are canonical (no leading
// zeros, no "-0"). "Any JSON value" nests at most Limits.JSONDepth deep;
// a $ref that refers to itself expands at most Limits.RefDepth times, and
// past that its branch is dropped (so "children": [] ends a tree).

// annotation keywords carry no constraint.
var annotationKeywords = map[string]bool{
	"$schema": true, "$id": true, "$comment": true, "$defs": true, "definitions": true,
	"$anchor": true, "title": true, "description": true, "default": true, "examples": true,
	"deprecated": true, "readOnly": true, "writeOnly": true, "contentMediaType": true,
	"contentEncoding": true, "$vocabulary": true,
}

// unsupportedKeywords are validation keywords with no translation here.
var unsupportedKeywords = map[string]bool{
	"multipleOf": true, "minProperties": true, "maxProperties": true,
	"patternProperties": true, "propertyNames": true, "dependentRequired": true,
	"dependentSchemas": true, "dependencies": true, "unevaluatedProperties": true,
	"unevaluatedItems": true, "prefixItems": true, "contains": true, "minContains": true,
	"maxContains": true, "not": true, "if": true, "then": true, "else": true,
	"additionalItems": true, "$dynamicRef": true, "$recursiveRef": true,
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
}

func compileSchema(b *builder, raw json.RawMessage, lim Limits) (frag, error) {
	root, err := parseJSON(raw)
	if err != nil {
		return frag{}, fmt.Errorf("%w: schema is not valid JSON: %w", ErrInvalid, err)
	}
	sc := &schemaCompiler{b: b, lim: lim, root: root, refDepth: map[string]int{}}
	f := sc.value(root, "#", 0)
	if len(sc.unsup) > 0 {
		slices.SortFunc(sc.unsup, func(a, b [2]string) int {
			return cmp.Or(strings.Compare(a[0], b[0]), strings.Compare(a[1], b[1]))
		})
		msgs := make([]string, len(sc.unsup))
		for i, u := range sc.unsup {
			msgs[i] = u[1] + " at " + u[0]
		}
		return frag{}, fmt.Errorf("%w: JSON schema features: %s", ErrUnsupported, strings.Join(msgs, "; "))
	}
	if sc.err != nil {
		return frag{}, sc.err
	}
	return f, nil
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
	"minLength": true, "maxLength": true, "format": true, "minimum": true, "maximum": true,
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
		if kw == "allOf" && len(br.arr) > 1 {
			sc.unsupported(path, "allOf with more than one schema")
			return b.none()
		}
		if hasConstraints(s, kw) {
			sc.unsupported(path, kw+" with sibling validation keywords")
			return b.none()
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
			fs = append(fs, sc.integer(s, path))
		case "number":
			for _, k := range []string{"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"} {
				if s.get(k) != nil {
					sc.unsupported(path, k+" on a number (supported on integers)")
				}
			}
			fs = append(fs, sc.number())
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
// it: any rune but '"', '\\' and controls, or an escape.
func (sc *schemaCompiler) strChar() frag {
	b := sc.b
	esc := b.cat(b.lit(`\`), b.alt(
		b.byteRange('"', '"'), b.byteRange('\\', '\\'), b.byteRange('/', '/'),
		b.byteRange('b', 'b'), b.byteRange('f', 'f'), b.byteRange('n', 'n'),
		b.byteRange('r', 'r'), b.byteRange('t', 't'),
		b.seq(b.lit("u00"), b.byteRange('0', '1'), b.alt(b.byteRange('0', '9'), b.byteRange('a', 'f'), b.byteRange('A', 'F'))),
	))
	return b.alt(b.runeRange(0x20, 0x21), b.runeRange(0x23, 0x5B), b.runeRange(0x5D, utf8.MaxRune), esc)
}

func (sc *schemaCompiler) jsonString(min, max int) frag {
	b := sc.b
	return b.seq(b.lit(`"`), b.repeat(sc.strChar, min, max), b.lit(`"`))
}

var formats = map[string]string{
	"date":      `[0-9]{4}-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12][0-9]|3[01])`,
	"time":      `(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\.[0-9]{1,6})?(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])`,
	"date-time": `[0-9]{4}-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12][0-9]|3[01])T(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\.[0-9]{1,6})?(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])`,
	"uuid":      `[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`,
}

func (sc *schemaCompiler) str(s *jval, path string) frag {
	b := sc.b
	minL := sc.count(s, "minLength", path, 0)
	maxL := sc.count(s, "maxLength", path, -1)
	pat, fmtv := s.get("pattern"), s.get("format")
	lengths := s.get("minLength") != nil || s.get("maxLength") != nil
	switch {
	case pat != nil && (lengths || fmtv != nil):
		sc.unsupported(path, "pattern together with minLength, maxLength or format")
		return b.none()
	case fmtv != nil && lengths:
		sc.unsupported(path, "format together with minLength or maxLength")
		return b.none()
	case pat != nil:
		if pat.kind != jStr {
			sc.invalid(path, "pattern must be a string")
			return b.none()
		}
		re, begin, end, err := parseRegex(pat.s)
		if err != nil {
			sc.err = fmt.Errorf("schema at %s: %w", path, err)
			return b.none()
		}
		rc := &reCompiler{b: b, jsonStr: true}
		f := rc.compile(re)
		if rc.err != nil {
			sc.unsupported(path, fmt.Sprintf("pattern %q: %v", pat.s, rc.err))
			return b.none()
		}
		// JSON Schema patterns match anywhere unless anchored.
		if !begin {
			f = b.cat(b.star(sc.strChar()), f)
		}
		if !end {
			f = b.cat(f, b.star(sc.strChar()))
		}
		return b.seq(b.lit(`"`), f, b.lit(`"`))
	case fmtv != nil:
		expr, ok := formats[fmtv.s]
		if !ok || fmtv.kind != jStr {
			sc.unsupported(path, fmt.Sprintf("format %s (supported: date, time, date-time, uuid)", fmtv.appendJSON(nil)))
			return b.none()
		}
		re, _, _, _ := parseRegex(expr)
		rc := &reCompiler{b: b, jsonStr: true}
		return b.seq(b.lit(`"`), rc.compile(re), b.lit(`"`))
	}
	return sc.jsonString(minL, maxL)
}

func (sc *schemaCompiler) number() frag {
	b := sc.b
	digit := func() frag { return b.byteRange('0', '9') }
	intPart := b.alt(b.lit("0"), b.cat(b.byteRange('1', '9'), b.star(digit())))
	frac := b.quest(b.cat(b.lit("."), b.plus(digit())))
	exp := b.quest(b.seq(b.alt(b.lit("e"), b.lit("E")), b.quest(b.alt(b.lit("+"), b.lit("-"))), b.plus(digit())))
	return b.seq(b.quest(b.lit("-")), intPart, frac, exp)
}

// maxIntBound bounds integer limits so digit arithmetic stays in uint64.
const maxIntBound = 1e15

func (sc *schemaCompiler) integer(s *jval, path string) frag {
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
		if math.Abs(f) > maxIntBound {
			sc.unsupported(path, fmt.Sprintf("%s beyond ±1e15", key))
			return 0, false
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
	if hasLo && hasHi && lo > hi {
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
	fs := []frag{sc.jsonString(0, -1), sc.number(), b.lit("true"), b.lit("false"), b.lit("null")}
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
	if item != nil && item.kind == jArr {
		sc.unsupported(path, "items as an array (tuple validation)")
		return b.none()
	}
	if item == nil {
		item = &jval{kind: jBool, b: true}
	}
	minI := sc.count(s, "minItems", path, 0)
	maxI := sc.count(s, "maxItems", path, -1)
	if maxI >= 0 && maxI < minI {
		return b.none()
	}
	ipath := path + "/items"
	gen := func() frag { return sc.value(item, ipath, depth+1) }
	if maxI == 0 {
		return b.lit("[]")
	}
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
			if !slices.Contains(names, x.s) { // required but undeclared: any value
				names = append(names, x.s)
				schemas = append(schemas, &jval{kind: jBool, b: true})
			}
		}
	}
	addl := s.get("additionalProperties")
	if len(names) == 0 {
		switch {
		case addl != nil && addl.kind == jBool && !addl.b:
			return b.lit("{}")
		case addl != nil && addl.kind == jObj:
			apath := path + "/additionalProperties"
			return sc.list("{", "}", b.seq(sc.jsonString(0, -1), b.lit(":"), sc.ws(), sc.value(addl, apath, depth+1)))
		}
		d := sc.anyDepth(depth)
		if d == 0 {
			return b.lit("{}")
		}
		return sc.list("{", "}", b.seq(sc.jsonString(0, -1), b.lit(":"), sc.ws(), sc.anyValue(d-1)))
	}
	if addl != nil && addl.kind == jObj && hasConstraints(addl) {
		sc.unsupported(path, "additionalProperties schema alongside properties")
	}

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
