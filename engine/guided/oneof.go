package guided

import "fmt"

// oneOf asks that a value match exactly one branch. Generating each branch
// (as anyOf does) can produce a value that two branches accept, which is
// invalid. The exact language is
//
//	⋃ᵢ ( Genᵢ ∖ ⋃_{j≠i} Semⱼ )
//
// where Genᵢ is what branch i generates and Semⱼ all the texts branch j
// accepts. Semⱼ is not regular in general (properties in any order), so
// an acceptor Accⱼ ⊇ Semⱼ stands for it, over the texts this package can
// generate (compact JSON, one text per scalar); subtracting a larger set
// keeps the result exact (every output matches exactly one branch) at the
// price of outputs left out. Acceptors follow types, constants, numeric
// ranges and string constraints exactly, and objects member by member
// (a declared property's value must be acceptable to its schema; a
// required property must be present), so discriminated unions, the common
// use of oneOf, keep all their outputs. The whole is one product of the
// branches' generators and acceptors; a oneOf left with nothing is
// refused, saying where.

// accRefDepth bounds how often an acceptor expands one $ref inside
// itself; past it the acceptor takes every text.
const accRefDepth = 2

// accJSONDepth bounds the nesting an acceptor follows for values any
// JSON may fill; deeper, it takes every text.
const accJSONDepth = 3

func (sc *schemaCompiler) oneOf(branches []*jval, path string, depth int) frag {
	b := sc.b
	n := len(branches)
	if n == 1 {
		return sc.value(branches[0], path+"/oneOf/0", depth)
	}
	ops := make([]func() frag, 0, 2*n)
	for i, br := range branches {
		p := fmt.Sprintf("%s/oneOf/%d", path, i)
		ops = append(ops, func() frag { return sc.value(br, p, depth) })
	}
	for i, br := range branches {
		p := fmt.Sprintf("%s/oneOf/%d", path, i)
		ops = append(ops, func() frag { return sc.acceptor(br, p, map[string]int{}) })
	}
	a := sc.productOf(path, func(ds []*dfa, qs []int32) bool {
		for i := range n {
			if !ds[i].accept[qs[i]] {
				continue
			}
			only := true
			for j := range n {
				if j != i && ds[n+j].accept[qs[n+j]] {
					only = false
					break
				}
			}
			if only {
				return true
			}
		}
		return false
	}, ops...)
	if a == nil {
		return b.none()
	}
	if a.empty() {
		sc.emptyAt(path, "oneOf: every value its branches can generate matches more than one branch")
	}
	return b.embed(a)
}

// anyText accepts whatever follows: one accepting state per builder that
// loops on every byte. Sharing it keeps the DFA small: however many
// places give up on following the text, they give up into one state. Its
// fragment's exit is never reached. Only acceptors use it: they are built
// alone (automatonOf), where accepting means accepted as a whole.
func (sc *schemaCompiler) anyText() frag {
	b := sc.b
	if b.sink == 0 {
		s := b.add(nstate{kind: nEps})
		loop := b.add(nstate{kind: nRange, lo: 0, hi: 255, next: s})
		b.link(s, loop)
		b.link(s, b.add(nstate{kind: nMatch}))
		b.sink = s
	}
	return frag{b.sink, b.add(nstate{kind: nEps})}
}

// accAny accepts every JSON value in this package's format, following
// nesting d levels deep and taking every text below that.
func (sc *schemaCompiler) accAny(d int) frag {
	b := sc.b
	fs := []frag{sc.jsonString(0, -1), sc.number(&jval{kind: jObj}, "#"), b.lit("true"), b.lit("false"), b.lit("null")}
	if d > 0 {
		fs = append(fs,
			sc.list("{", "}", b.seq(sc.jsonString(0, -1), b.lit(":"), sc.ws(), sc.accAny(d-1))),
			sc.list("[", "]", sc.accAny(d-1)))
	} else {
		fs = append(fs, b.cat(b.lit("{"), sc.anyText()), b.cat(b.lit("["), sc.anyText()))
	}
	return b.alt(fs...)
}

// acceptor builds Acc(s): a superset of the texts in this package's
// format that s (at path) accepts. refs counts active $ref expansions.
func (sc *schemaCompiler) acceptor(s *jval, path string, refs map[string]int) frag {
	b := sc.b
	if sc.stop() {
		return b.none()
	}
	switch {
	case s.kind == jBool && !s.b:
		return b.none()
	case s.kind != jObj:
		return sc.accAny(accJSONDepth)
	}
	if ref := s.get("$ref"); ref != nil && ref.kind == jStr {
		target, ok := sc.resolve(ref.s)
		if !ok || refs[ref.s] >= accRefDepth {
			return sc.anyText()
		}
		refs[ref.s]++
		f := sc.acceptor(target, ref.s, refs)
		refs[ref.s]--
		return f
	}
	// Each branch keyword alone admits at least what s admits.
	for _, kw := range []string{"anyOf", "oneOf"} {
		if br := s.get(kw); br != nil && br.kind == jArr && len(br.arr) > 0 {
			fs := make([]frag, len(br.arr))
			for i, sub := range br.arr {
				fs[i] = sc.acceptor(sub, fmt.Sprintf("%s/%s/%d", path, kw, i), refs)
			}
			return b.alt(fs...)
		}
	}
	if br := s.get("allOf"); br != nil && br.kind == jArr && len(br.arr) > 0 {
		return sc.acceptor(br.arr[0], path+"/allOf/0", refs)
	}
	if c := s.get("const"); c != nil {
		return sc.accConst(c)
	}
	if e := s.get("enum"); e != nil && e.kind == jArr {
		fs := make([]frag, len(e.arr))
		for i, v := range e.arr {
			fs[i] = sc.accConst(v)
		}
		return b.alt(fs...)
	}
	types, ok := sc.types(s, path)
	if !ok {
		return b.none()
	}
	if types == nil {
		if types = inferTypes(s); types == nil {
			return sc.accAny(accJSONDepth)
		}
	}
	fs := make([]frag, 0, len(types))
	for _, t := range types {
		switch t {
		case "null":
			fs = append(fs, b.lit("null"))
		case "boolean":
			fs = append(fs, b.alt(b.lit("true"), b.lit("false")))
		case "integer", "number", "string":
			// Generated and accepted scalars are the same texts: one
			// text per value, and the same digit bounds.
			fs = append(fs, sc.value(&jval{kind: jObj, keys: append([]string{"type"}, scalarKeys(s)...), vals: append([]*jval{{kind: jStr, s: t}}, scalarVals(s)...)}, path, 0))
		case "array":
			item := s.get("items")
			if item == nil || item.kind != jObj && item.kind != jBool {
				fs = append(fs, b.cat(b.lit("["), sc.anyText()))
				continue
			}
			fs = append(fs, sc.list("[", "]", sc.acceptor(item, path+"/items", refs)))
		case "object":
			fs = append(fs, sc.accObject(s, path, refs))
		}
	}
	return b.alt(fs...)
}

// scalarKeywords are the keywords a scalar's language depends on.
var scalarKeywords = []string{"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "pattern", "minLength", "maxLength", "format"}

func scalarKeys(s *jval) []string {
	var out []string
	for _, k := range scalarKeywords {
		if s.get(k) != nil {
			out = append(out, k)
		}
	}
	return out
}

func scalarVals(s *jval) []*jval {
	var out []*jval
	for _, k := range scalarKeywords {
		if v := s.get(k); v != nil {
			out = append(out, v)
		}
	}
	return out
}

// accConst accepts the texts of one constant: scalars have one text;
// arrays and objects may be spaced and ordered differently, so any text
// that opens like them.
func (sc *schemaCompiler) accConst(v *jval) frag {
	b := sc.b
	switch v.kind {
	case jArr:
		return b.cat(b.lit("["), sc.anyText())
	case jObj:
		return b.cat(b.lit("{"), sc.anyText())
	}
	return b.lit(string(v.appendJSON(nil)))
}

// accObject accepts objects whose members, in any order, are a declared
// property with a value its schema accepts, or another key with a value
// additionalProperties accepts; and which hold every required property.
func (sc *schemaCompiler) accObject(s *jval, path string, refs map[string]int) frag {
	b := sc.b
	props := s.get("properties")
	if props != nil && props.kind != jObj {
		props = nil
	}
	addl := s.get("additionalProperties")
	var required []string
	if r := s.get("required"); r != nil && r.kind == jArr {
		for _, x := range r.arr {
			if x.kind == jStr {
				required = append(required, x.s)
			}
		}
	}
	if props == nil && len(required) == 0 && addl == nil {
		return b.cat(b.lit("{"), sc.anyText())
	}
	var keys []string
	var schemas []*jval
	if props != nil {
		keys, schemas = props.keys, props.vals
	}
	objects := func() frag {
		b := sc.b
		var members []frag
		for i, k := range keys {
			members = append(members, b.seq(b.lit(string(appendJSONString(nil, k))), b.lit(":"), sc.ws(), sc.acceptor(schemas[i], path+"/properties/"+escapePointer(k), refs)))
		}
		if !(addl != nil && addl.kind == jBool && !addl.b) {
			other := func() frag { return sc.jsonString(0, -1) }
			if len(keys) > 0 {
				other = func() frag {
					return sc.combine(path, firstButNotRest, func() frag { return sc.jsonString(0, -1) }, func() frag {
						fs := make([]frag, len(keys))
						for i, k := range keys {
							fs[i] = sc.b.lit(string(appendJSONString(nil, k)))
						}
						return sc.b.alt(fs...)
					})
				}
			}
			val := sc.accAny(accJSONDepth)
			if addl != nil {
				val = sc.acceptor(addl, path+"/additionalProperties", refs)
			}
			members = append(members, b.seq(other(), b.lit(":"), sc.ws(), val))
		}
		return sc.list("{", "}", b.alt(members...))
	}
	if len(required) == 0 {
		return objects()
	}
	ops := []func() frag{objects}
	for _, k := range required {
		ops = append(ops, func() frag {
			b := sc.b
			// Somewhere a member named k.
			return b.seq(b.star(b.byteRange(0, 255)), b.lit(string(appendJSONString(nil, k))+":"), sc.anyText())
		})
	}
	return sc.combine(path, all, ops...)
}

// negation compiles "not" and "if"/"then"/"else", which speak of values
// that fail a schema. An acceptor over-approximates what a schema
// accepts, so subtracting it leaves values that surely fail it:
//
//	not N:               Gen(rest) ∖ Acc(N)
//	if I then T else E:  Gen(rest ∧ I ∧ T) ∪ (Gen(rest ∧ E) ∖ Acc(I))
//
// (∧: the merge of merge.go). What is left out is valid too, only not
// generated; a schema left with nothing is refused, saying where.
func (sc *schemaCompiler) negation(s *jval, path string, depth int) frag {
	b := sc.b
	if n := s.get("not"); n != nil {
		rest := without(s, "not")
		f := sc.subtract(path, func() frag { return sc.value(rest, path, depth) },
			func() frag { return sc.acceptor(n, path+"/not", map[string]int{}) })
		return f
	}
	cond := s.get("if")
	rest := without(without(without(s, "if"), "then"), "else")
	var fs []frag
	then := s.get("then")
	if then == nil {
		then = &jval{kind: jBool, b: true}
	}
	if m, conflict := sc.merge(rest, cond, path+"/if"); conflict == "" {
		if m, conflict = sc.merge(m, then, path+"/then"); conflict == "" {
			fs = append(fs, sc.value(m, path, depth))
		} else {
			sc.unsupported(path, "then whose "+conflict+" differs from its siblings'")
		}
	} else {
		sc.unsupported(path, "if whose "+conflict+" differs from its siblings'")
	}
	els := s.get("else")
	if els == nil {
		els = &jval{kind: jBool, b: true}
	}
	if m, conflict := sc.merge(rest, els, path+"/else"); conflict == "" {
		fs = append(fs, sc.subtract(path, func() frag { return sc.value(m, path, depth) },
			func() frag { return sc.acceptor(cond, path+"/if", map[string]int{}) }))
	} else {
		sc.unsupported(path, "else whose "+conflict+" differs from its siblings'")
	}
	return b.alt(fs...)
}

// subtract is gen's language less acc's, noting where it leaves nothing.
func (sc *schemaCompiler) subtract(path string, gen, acc func() frag) frag {
	a := sc.productOf(path, firstButNotRest, gen, acc)
	if a == nil {
		return sc.b.none()
	}
	if a.empty() {
		sc.emptyAt(path, "every value the schema generates is one its not (or if) schema may accept")
	}
	return sc.b.embed(a)
}
