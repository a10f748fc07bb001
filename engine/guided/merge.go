package guided

import (
	"fmt"
	"math/big"
	"slices"
)

// Real schemas combine subschemas: allOf (pydantic and OpenAPI
// inheritance), $ref with sibling keywords, anyOf or oneOf beside shared
// keywords. fold rewrites those into plain schemas by merging keywords,
// as validators' semantics allow: allOf [A, B] is A and B; siblings of
// anyOf distribute into each branch. Two subschemas merge keyword by
// keyword: types intersect, required lists unite, properties merge (a
// property in both becomes allOf of the two), bounds take the tighter,
// enums intersect, additionalProperties of one side constrains the
// properties only the other side declares; equal keywords are kept, and
// any other pair of different values is reported as unsupported.

// mergedPatterns is the internal keyword that carries the patterns a
// merge adds to a schema's own "pattern" (a name no schema can use:
// JSON Schema keywords have no NUL).
const mergedPatterns = "\x00patterns"

// maxFoldRefs bounds the $ref chain fold follows to find a schema.
const maxFoldRefs = 8

// fold returns s with its applicators merged away, the $refs it inlined
// (to count against Limits.RefDepth while the result compiles), and
// whether it changed anything. A merge that cannot be made is recorded
// as unsupported; one that can match nothing returns the false schema
// and records why.
func (sc *schemaCompiler) fold(s *jval, path string) (*jval, []string, bool) {
	var refs []string
	// target resolves a schema that is only a $ref (to merge its target).
	target := func(x *jval) *jval {
		for range maxFoldRefs {
			r := x.get("$ref")
			if r == nil || r.kind != jStr || hasConstraints(x, "$ref") {
				return x
			}
			t, ok := sc.resolve(r.s)
			if !ok {
				return x // compiled as a $ref later, which reports it
			}
			if sc.refDepth[r.s] >= sc.lim.RefDepth {
				return &jval{kind: jBool, b: false}
			}
			refs = append(refs, r.s)
			x = t
		}
		return x
	}
	fail := func(why string) (*jval, []string, bool) {
		sc.unsupported(path, why)
		return &jval{kind: jBool, b: false}, refs, true
	}
	if r := s.get("$ref"); r != nil && hasConstraints(s, "$ref") {
		base := target(&jval{kind: jObj, keys: []string{"$ref"}, vals: []*jval{r}})
		m, conflict := sc.merge(base, without(s, "$ref"), path)
		if conflict != "" {
			return fail("$ref with sibling " + conflict + " unlike its target's")
		}
		return m, refs, true
	}
	if br := s.get("allOf"); br != nil && br.kind == jArr && len(br.arr) > 0 && (len(br.arr) > 1 || hasConstraints(s, "allOf")) {
		m := without(s, "allOf")
		for i, b := range br.arr {
			var conflict string
			if m, conflict = sc.merge(m, target(b), fmt.Sprintf("%s/allOf/%d", path, i)); conflict != "" {
				return fail(fmt.Sprintf("allOf whose schemas disagree on %s", conflict))
			}
		}
		return m, refs, true
	}
	for _, kw := range []string{"anyOf", "oneOf"} {
		br := s.get(kw)
		if br == nil || br.kind != jArr || len(br.arr) == 0 || !hasConstraints(s, kw) {
			continue
		}
		shared := without(s, kw)
		out := &jval{kind: jArr}
		for i, b := range br.arr {
			m, conflict := sc.merge(shared, target(b), fmt.Sprintf("%s/%s/%d", path, kw, i))
			if conflict != "" {
				return fail(fmt.Sprintf("%s branch %d whose %s differs from its siblings'", kw, i, conflict))
			}
			out.arr = append(out.arr, m)
		}
		return &jval{kind: jObj, keys: []string{kw}, vals: []*jval{out}}, refs, true
	}
	return s, nil, false
}

// without returns s less the named keyword.
func without(s *jval, key string) *jval {
	out := &jval{kind: jObj}
	for i, k := range s.keys {
		if k != key {
			out.keys = append(out.keys, k)
			out.vals = append(out.vals, s.vals[i])
		}
	}
	return out
}

func (v *jval) set(key string, val *jval) {
	for i, k := range v.keys {
		if k == key {
			v.vals[i] = val
			return
		}
	}
	v.keys = append(v.keys, key)
	v.vals = append(v.vals, val)
}

func allOf(x, y *jval) *jval {
	return &jval{kind: jObj, keys: []string{"allOf"}, vals: []*jval{{kind: jArr, arr: []*jval{x, y}}}}
}

// typeSet reads "type" as a list (nil: absent).
func typeSet(v *jval) []string {
	if v == nil {
		return nil
	}
	if v.kind == jStr {
		return []string{v.s}
	}
	var out []string
	for _, x := range v.arr {
		out = append(out, x.s)
	}
	return out
}

// merge returns a schema that accepts what both a and b accept, or the
// first keyword it cannot merge. at is b's path, for the reasons of an
// empty result.
func (sc *schemaCompiler) merge(a, b *jval, at string) (*jval, string) {
	switch {
	case a.kind == jBool && a.b:
		return b, ""
	case b.kind == jBool && b.b:
		return a, ""
	case a.kind == jBool || b.kind == jBool:
		return &jval{kind: jBool, b: false}, ""
	case a.kind != jObj || b.kind != jObj:
		return a, "a schema that is not an object"
	}
	empty := func(why string) (*jval, string) {
		sc.emptyAt(at, why)
		return &jval{kind: jBool, b: false}, ""
	}
	m := &jval{kind: jObj, keys: slices.Clone(a.keys), vals: slices.Clone(a.vals)}
	for i, k := range b.keys {
		y := b.vals[i]
		x := a.get(k)
		if x == nil {
			m.set(k, y)
			continue
		}
		if string(x.appendJSON(nil)) == string(y.appendJSON(nil)) || annotationKeywords[k] {
			continue
		}
		switch k {
		case "type":
			var both []string
			tb := typeSet(y)
			for _, t := range typeSet(x) {
				switch {
				case slices.Contains(tb, t):
					both = append(both, t)
				case t == "integer" && slices.Contains(tb, "number"), t == "number" && slices.Contains(tb, "integer"):
					both = append(both, "integer")
				}
			}
			if len(both) == 0 {
				return empty("allOf with no type in common")
			}
			list := &jval{kind: jArr}
			for _, t := range both {
				list.arr = append(list.arr, &jval{kind: jStr, s: t})
			}
			m.set(k, list)
		case "required":
			u := &jval{kind: jArr, arr: slices.Clone(x.arr)}
			for _, r := range y.arr {
				if !slices.ContainsFunc(u.arr, func(e *jval) bool { return e.s == r.s }) {
					u.arr = append(u.arr, r)
				}
			}
			m.set(k, u)
		case "properties":
			if x.kind != jObj || y.kind != jObj {
				return a, k
			}
			p := &jval{kind: jObj, keys: slices.Clone(x.keys), vals: slices.Clone(x.vals)}
			for j, name := range y.keys {
				if old := x.get(name); old != nil {
					p.set(name, allOf(old, y.vals[j]))
				} else {
					p.set(name, y.vals[j])
				}
			}
			m.set(k, p)
		case "items", "additionalProperties", "propertyNames", "$defs", "definitions":
			if k == "$defs" || k == "definitions" {
				continue // refs resolve against the document, not here
			}
			m.set(k, allOf(x, y))
		case "minimum", "exclusiveMinimum", "minLength", "minItems", "minProperties",
			"maximum", "exclusiveMaximum", "maxLength", "maxItems", "maxProperties":
			rx, okx := new(big.Rat).SetString(x.s)
			ry, oky := new(big.Rat).SetString(y.s)
			if x.kind != jNum || y.kind != jNum || !okx || !oky {
				return a, k
			}
			lower := k[:3] == "min" || k == "exclusiveMinimum"
			if c := rx.Cmp(ry); c < 0 == lower {
				m.set(k, y)
			}
		case "enum":
			if x.kind != jArr || y.kind != jArr {
				return a, k
			}
			out := &jval{kind: jArr}
			for _, e := range x.arr {
				if slices.ContainsFunc(y.arr, func(f *jval) bool { return string(e.appendJSON(nil)) == string(f.appendJSON(nil)) }) {
					out.arr = append(out.arr, e)
				}
			}
			if len(out.arr) == 0 {
				return empty("allOf whose enums share no value")
			}
			m.set(k, out)
		case "const":
			return empty("allOf with two different constants")
		case "pattern":
			// Both hold: the string compiler intersects them.
			more := &jval{kind: jArr}
			if old := m.get(mergedPatterns); old != nil {
				more.arr = slices.Clone(old.arr)
			}
			more.arr = append(more.arr, y)
			m.set(mergedPatterns, more)
		default:
			return a, k
		}
	}
	// additionalProperties on one side governs what only the other side
	// declares.
	props := m.get("properties")
	if props != nil {
		// Copied: the sides' own property lists must not change.
		props = &jval{kind: jObj, keys: slices.Clone(props.keys), vals: slices.Clone(props.vals)}
		m.set("properties", props)
	}
	for _, side := range []*jval{a, b} {
		addl := side.get("additionalProperties")
		if addl == nil || props == nil || side.get("patternProperties") != nil {
			continue
		}
		own := side.get("properties")
		for j, name := range slices.Clone(props.keys) {
			if own != nil && own.get(name) != nil {
				continue
			}
			if addl.kind == jBool && !addl.b {
				if req := m.get("required"); req != nil && slices.ContainsFunc(req.arr, func(e *jval) bool { return e.s == name }) {
					return empty(fmt.Sprintf("required property %q is forbidden by additionalProperties: false of another allOf schema", name))
				}
				props = without(props, name)
				m.set("properties", props)
				continue
			}
			if addl.kind == jObj {
				props.vals[j] = allOf(props.vals[j], addl)
			}
		}
	}
	return m, ""
}

// maxMultipleOf bounds multipleOf's numerator: the automaton tracks the
// remainder by it.
const maxMultipleOf = 1 << 12

// withMultipleOf intersects base (canonical numbers) with multipleOf when
// the schema has one. A multiple of m/10ⁿ is a number whose digits, read
// as an integer with n fraction digits, are a multiple of m: the
// automaton follows the remainder mod m digit by digit.
func (sc *schemaCompiler) withMultipleOf(s *jval, path string, base func() frag) frag {
	v := s.get("multipleOf")
	if v == nil {
		return base()
	}
	r, ok := new(big.Rat).SetString(v.s)
	if v.kind != jNum || !ok || r.Sign() <= 0 {
		sc.invalid(path, "multipleOf must be a number above 0")
		return sc.b.none()
	}
	ip, fp, ok := decimalString(r)
	digits := ip + fp
	m, err := new(big.Int).SetString(digits, 10)
	if !ok || !err || !m.IsInt64() || m.Int64() > maxMultipleOf {
		sc.unsupported(path, fmt.Sprintf("multipleOf %s (supported: m·10⁻ⁿ with m up to %d and n up to %d)", v.s, maxMultipleOf, maxFracDigits))
		return sc.b.none()
	}
	return sc.combine(path, all, base, func() frag { return sc.multiples(int(m.Int64()), len(fp)) })
}

// multiples matches decimal texts (an optional "-", digits, optionally
// "." and at most n digits) whose value is a multiple of mod·10⁻ⁿ.
func (sc *schemaCompiler) multiples(mod, n int) frag {
	b := sc.b
	pow := make([]int, n+1) // 10^k mod mod
	pow[0] = 1 % mod
	for k := 1; k <= n; k++ {
		pow[k] = pow[k-1] * 10 % mod
	}
	out := b.add(nstate{kind: nEps})
	// intPart[r]: integer digits read, remainder r; frac[k][r]: k
	// fraction digits read.
	intPart := make([]int32, mod)
	for r := range intPart {
		intPart[r] = b.add(nstate{kind: nEps})
	}
	frac := make([][]int32, n+1)
	for k := range frac {
		frac[k] = make([]int32, mod)
		for r := range frac[k] {
			frac[k][r] = b.add(nstate{kind: nEps})
		}
	}
	edge := func(from int32, c byte, to int32) {
		b.link(from, b.add(nstate{kind: nRange, lo: c, hi: c, next: to}))
	}
	for r := range mod {
		for d := range 10 {
			edge(intPart[r], byte('0'+d), intPart[(r*10+d)%mod])
		}
		// The value is remainder·10^(n-k) short of a whole count.
		if r*pow[n]%mod == 0 {
			b.link(intPart[r], out)
		}
		if n > 0 {
			edge(intPart[r], '.', frac[0][r])
		}
		for k := 0; k <= n; k++ {
			if k > 0 && r*pow[n-k]%mod == 0 {
				b.link(frac[k][r], out)
			}
			if k < n {
				for d := range 10 {
					edge(frac[k][r], byte('0'+d), frac[k+1][(r*10+d)%mod])
				}
			}
		}
	}
	start := b.add(nstate{kind: nEps})
	b.link(start, intPart[0])
	edge(start, '-', intPart[0])
	return frag{start, out}
}
