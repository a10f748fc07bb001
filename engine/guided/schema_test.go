package guided

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/specgate/specgate/kernels"
)

func validator(t *testing.T, schema []byte) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schema))
	if err != nil {
		t.Fatalf("schema %s: %v", schema, err)
	}
	c := jsonschema.NewCompiler()
	c.AssertFormat() // formats are assertions here: generated strings must hold them
	if err := c.AddResource("mem://schema.json", doc); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile("mem://schema.json")
	if err != nil {
		t.Fatalf("schema %s: %v", schema, err)
	}
	return sch
}

func validates(sch *jsonschema.Schema, out []byte) error {
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(out))
	if err != nil {
		return err
	}
	return sch.Validate(inst)
}

// generate greedy-decodes under the grammar with random logits: each step
// masks the logits (kernels.MaskLogitsRef) and takes the argmax. After
// budget tokens it steers to the nearest accepting state (fewest bytes
// left), as a length-aware engine would, so every run ends.
func generate(t testing.TB, g *Grammar, rng *rand.Rand, budget int) []byte {
	t.Helper()
	v := g.Vocab()
	m := g.NewMatcher()
	logits := make([]float32, v.Size()+37) // padded past the vocabulary, as real models are
	var out []byte
	for step := 0; step < budget+4000; step++ {
		if m.Done() {
			return out
		}
		for i := range logits {
			logits[i] = float32(rng.NormFloat64())
		}
		kernels.MaskLogitsRef(logits, m.Mask())
		best, bestScore := int32(-1), math.Inf(-1)
		for i, l := range logits {
			if math.IsInf(float64(l), -1) {
				if i < v.Size() && m.Allowed(int32(i)) {
					t.Fatalf("allowed token %d masked", i)
				}
				continue
			}
			if !m.Allowed(int32(i)) {
				t.Fatalf("forbidden token %d (%q) not masked", i, v.Piece(int32(i)))
			}
			score := float64(l)
			if step >= budget { // steer: fewer bytes to finish first
				n := g.Next(m.State(), int32(i))
				d := -1.0
				if n != Final {
					d = float64(g.d.dist[n])
				}
				score = -d*100 + float64(l)
			}
			if score > bestScore {
				best, bestScore = int32(i), score
			}
		}
		if best < 0 {
			t.Fatalf("stuck after %q: no token allowed", out)
		}
		if err := m.Advance(best); err != nil {
			t.Fatal(err)
		}
		if m.State() == Final {
			return out
		}
		out = append(out, v.Piece(best)...)
	}
	t.Fatalf("no end after %d tokens: %q", budget+4000, out)
	return nil
}

var fixedSchemas = []string{
	`{"type":"object","properties":{"name":{"type":"string","maxLength":20},"age":{"type":"integer","minimum":0,"maximum":150},
	  "email":{"type":"string","pattern":"^[a-z]+@[a-z]+\\.com$"},"tags":{"type":"array","items":{"type":"string","enum":["a","b","c d"]},"maxItems":3},
	  "address":{"type":"object","properties":{"street":{"type":"string"},"zip":{"type":"string","pattern":"^[0-9]{5}$"}},"required":["zip"],"additionalProperties":false}},
	  "required":["name","age"],"additionalProperties":false}`,
	`{"type":"array","items":{"type":"number"},"minItems":2,"maxItems":4}`,
	`{"anyOf":[{"type":"null"},{"type":"boolean"},{"type":"integer","exclusiveMinimum":-7,"exclusiveMaximum":1000}]}`,
	`{"oneOf":[{"const":{"k":[1,"x\"y"]}},{"type":"string","format":"date-time"}]}`,
	`{"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer"},"kids":{"type":"array","items":{"$ref":"#/$defs/node"}}},"required":["v","kids"]}},"$ref":"#/$defs/node"}`,
	`{"type":"object","additionalProperties":{"type":"integer","maximum":-5}}`,
	`{"type":"string","pattern":"é|\"|\\\\|\n"}`,
	`{"type":"string","minLength":2,"maxLength":5}`,
	`{"type":"object","properties":{"a":{"type":"boolean"},"b":{"type":"boolean"},"c":{"type":"boolean"}}}`,
	`{"type":["string","null"],"enum":["x",null,3]}`,
	`{"type":"object","properties":{"id":{"type":"string","format":"uuid"},"d":{"type":"string","format":"date"}},"required":["id","d"]}`,
	`{"type":"integer","minimum":-123456789,"maximum":987654321}`,
	`true`,
	`{}`,
	`{"type":"object","required":["x"]}`,
	`{"description":"x","definitions":{"s":{"type":"string","enum":["on","off"]}},"type":"array","items":{"$ref":"#/definitions/s"},"minItems":1}`,
	// Unbounded numbers end (bounded digit counts).
	`{"type":"integer","minimum":0}`,
	`{"type":"number"}`,
	`{"type":"object","properties":{"age":{"type":"integer"},"score":{"type":"number"}},"required":["age","score"]}`,
	// Bounds on numbers.
	`{"type":"number","minimum":-2.5,"exclusiveMaximum":7.25}`,
	`{"type":"number","exclusiveMinimum":0,"maximum":0.001}`,
	`{"type":"number","minimum":1e-20,"maximum":1e20}`,
	`{"type":"integer","minimum":-9223372036854775808,"maximum":9007199254740991}`,
	// Pattern, format and lengths together.
	`{"type":"string","pattern":"^[a-z]+$","minLength":3,"maxLength":6}`,
	`{"type":"string","pattern":"x","maxLength":4}`,
	`{"type":"string","format":"date","pattern":"^2024-02"}`,
	`{"type":"string","format":"email","maxLength":30}`,
	`{"type":"array","items":{"type":"string","format":"hostname"},"minItems":3,"maxItems":3}`,
	`{"type":"array","items":{"type":"string","format":"ipv4"},"minItems":3,"maxItems":3}`,
	`{"type":"array","items":{"type":"string","format":"uri"},"minItems":3,"maxItems":3}`,
	`{"type":"array","items":{"type":"string","format":"date"},"minItems":5,"maxItems":5}`,
	// additionalProperties as a schema beside properties; a required
	// property only it describes.
	`{"type":"object","properties":{"a":{"type":"integer"}},"additionalProperties":{"type":"string","maxLength":3},"required":["a","b"]}`,
	`{"type":"object"}`,
	// oneOf: exactly one branch, also where branches overlap.
	`{"oneOf":[{"type":"integer","minimum":0,"maximum":10},{"type":"integer","minimum":5,"maximum":20}]}`,
	`{"oneOf":[{"type":"object","properties":{"kind":{"const":"a"},"x":{"type":"integer"}},"required":["kind","x"]},
	  {"type":"object","properties":{"kind":{"const":"b"},"y":{"type":"string","maxLength":5}},"required":["kind","y"]}]}`,
	`{"oneOf":[{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]},{"type":"object","properties":{"b":{"type":"boolean"}},"required":["b"]}]}`,
	`{"oneOf":[{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"}}},{"type":"object","properties":{"b":{"type":"boolean"}},"required":["b"]}]}`,
	`{"oneOf":[{"type":"string","pattern":"^a"},{"type":"string","maxLength":3}]}`,
	`{"oneOf":[{"type":"number","maximum":100},{"type":"integer"}]}`,
	`{"type":"array","items":{"oneOf":[{"type":"string","format":"date"},{"type":"string","pattern":"^2024"}]},"minItems":2,"maxItems":4}`,
	// Applicators that merge: allOf, $ref with siblings, anyOf with siblings.
	`{"allOf":[{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]},{"properties":{"b":{"type":"string","maxLength":3},"a":{"minimum":5}},"required":["b"]}]}`,
	`{"$defs":{"base":{"type":"object","properties":{"id":{"type":"integer","minimum":1}},"required":["id"],"additionalProperties":false}},
	  "allOf":[{"$ref":"#/$defs/base"},{"properties":{"id":{"maximum":9},"name":{"type":"string"}},"required":["id"]}]}`,
	`{"$defs":{"s":{"type":"string","pattern":"^[a-z]+$"}},"type":"object","properties":{"w":{"$ref":"#/$defs/s","maxLength":5,"description":"x"}},"required":["w"]}`,
	`{"type":"object","properties":{"x":{"type":"integer"},"y":{"type":"boolean"}},"anyOf":[{"required":["x"]},{"required":["y"]}]}`,
	`{"type":"number","allOf":[{"minimum":-3},{"maximum":4.5},{"exclusiveMaximum":4}]}`,
	`{"type":"string","allOf":[{"pattern":"^[a-z]+$"},{"pattern":"q"},{"pattern":"x"}],"maxLength":6}`,
	// not, if/then/else.
	`{"type":"object","properties":{"country":{"enum":["US","CA"]},"zip":{"type":"string","maxLength":6}},"required":["country","zip"],
	  "if":{"properties":{"country":{"const":"US"}}},"then":{"properties":{"zip":{"pattern":"^[0-9]{5}$"}}},"else":{"properties":{"zip":{"pattern":"^[A-Z][0-9][A-Z]$"}}}}`,
	`{"type":"array","items":{"type":"string","maxLength":4,"not":{"enum":["a","bb"]}},"minItems":3,"maxItems":3}`,
	`{"type":"object","properties":{"card":{"type":"string","maxLength":4},"cvv":{"type":"integer"},"name":{"type":"string","maxLength":3},"zip":{"type":"integer"}},
	  "required":["name"],"dependentRequired":{"card":["cvv"],"name":["zip"]}}`,
	// Tuples, property counts, patternProperties, multipleOf.
	`{"type":"array","prefixItems":[{"type":"integer"},{"type":"string","maxLength":3}],"items":{"type":"boolean"},"minItems":1,"maxItems":4}`,
	`{"$schema":"http://json-schema.org/draft-07/schema#","type":"array","items":[{"const":"x"},{"type":"number","minimum":0,"maximum":1}],"additionalItems":false}`,
	`{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"},"c":{"type":"integer"},"d":{"type":"integer"}},"required":["d"],"minProperties":2,"maxProperties":3}`,
	`{"type":"object","additionalProperties":{"type":"integer"},"minProperties":1,"maxProperties":2}`,
	`{"type":"object","properties":{"x_id":{"type":"integer"},"name":{"type":"string","maxLength":4}},"patternProperties":{"_id$":{"minimum":10,"maximum":20}},"required":["x_id"],"additionalProperties":false}`,
	`{"type":"object","properties":{"n":{"type":"integer","multipleOf":7,"minimum":-50,"maximum":50},"p":{"type":"number","multipleOf":0.25,"minimum":-2,"maximum":3}},"required":["n","p"]}`,
	// propertyNames: declared names filtered, free keys generated from it.
	`{"type":"object","properties":{"id":{"type":"integer"},"Bad":{"type":"string"},"name":{"type":"string","maxLength":4}},"required":["id"],
	  "propertyNames":{"pattern":"^[a-z]+$"}}`,
	`{"type":"object","additionalProperties":{"type":"integer"},"propertyNames":{"maxLength":3,"pattern":"^x"},"maxProperties":3}`,
	`{"type":"object","propertyNames":{"enum":["a","b"]}}`,
	`{"allOf":[{"type":"object","additionalProperties":{"type":"boolean"},"propertyNames":{"pattern":"^[ab]"}},{"propertyNames":{"maxLength":2}}],"maxProperties":2}`,
	// contains / minContains: at least k items of items ∩ contains.
	`{"type":"array","items":{"type":"integer","minimum":0,"maximum":20},"contains":{"minimum":15},"minContains":2,"maxItems":4}`,
	`{"type":"array","contains":{"type":"string","const":"x"}}`,
	`{"type":"array","items":{"type":"string","maxLength":3},"contains":{"pattern":"^a"},"minItems":2}`,
}

// TestSchemaGenerates decodes under each schema with random logits and
// validates every output with an independent JSON-schema validator.
func TestSchemaGenerates(t *testing.T) {
	v := synthVocab(4000)
	rng := rand.New(rand.NewPCG(3, 5))
	runs := 12
	if testing.Short() {
		runs = 3
	}
	for i, s := range fixedSchemas {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			g, err := Compile(Spec{Schema: json.RawMessage(s)}, v)
			if err != nil {
				t.Fatal(err)
			}
			sch := validator(t, []byte(s))
			for range runs {
				out := generate(t, g, rng, 40)
				if err := validates(sch, out); err != nil {
					t.Fatalf("output %s does not validate: %v", out, err)
				}
			}
		})
	}
}

// randSchema builds a random schema from the supported subset. anyOf
// branches have distinct, non-overlapping types so oneOf would hold too.
func randSchema(rng *rand.Rand, depth int) map[string]any {
	kinds := []string{"string", "integer", "number", "boolean", "null", "enum"}
	if depth > 0 {
		kinds = append(kinds, "object", "object", "array", "anyOf")
	}
	switch kinds[rng.IntN(len(kinds))] {
	case "string":
		s := map[string]any{"type": "string"}
		switch rng.IntN(4) {
		case 0:
			s["minLength"] = rng.IntN(3)
			s["maxLength"] = 3 + rng.IntN(5)
		case 1:
			s["pattern"] = []string{"^[a-z]{1,4}$", "ab", "^x?\"\\\\$", "[0-9]+", "^(é|ü)*$"}[rng.IntN(5)]
		case 2:
			s["format"] = []string{"date", "uuid", "time"}[rng.IntN(3)]
		}
		return s
	case "integer":
		s := map[string]any{"type": "integer"}
		if rng.IntN(2) == 0 {
			s["minimum"] = rng.IntN(2000) - 1000
		}
		if rng.IntN(2) == 0 {
			s["maximum"] = rng.IntN(2000) + 1000
		}
		return s
	case "enum":
		return map[string]any{"enum": []any{"red", 7, nil, "gr\"een", []any{1, 2}}[:1+rng.IntN(5)]}
	case "object":
		props := map[string]any{}
		var req []string
		for i := range 1 + rng.IntN(4) {
			name := fmt.Sprintf("p%d", i)
			props[name] = randSchema(rng, depth-1)
			if rng.IntN(2) == 0 {
				req = append(req, name)
			}
		}
		s := map[string]any{"type": "object", "properties": props}
		if req != nil {
			s["required"] = req
		}
		if rng.IntN(2) == 0 {
			s["additionalProperties"] = false
		}
		return s
	case "array":
		s := map[string]any{"type": "array", "items": randSchema(rng, depth-1)}
		if rng.IntN(2) == 0 {
			s["minItems"] = rng.IntN(3)
		}
		if rng.IntN(2) == 0 {
			s["maxItems"] = 2 + rng.IntN(3)
		}
		return s
	case "anyOf":
		// Branches of distinct JSON types never overlap.
		perm := rng.Perm(5)
		pick := func(i int) map[string]any {
			switch perm[i] {
			case 0:
				return map[string]any{"type": "string", "maxLength": 4}
			case 1:
				return map[string]any{"type": "integer", "minimum": -3}
			case 2:
				return map[string]any{"type": "boolean"}
			case 3:
				return map[string]any{"type": "null"}
			}
			return map[string]any{"type": "array", "items": randSchema(rng, depth-1), "maxItems": 2}
		}
		a, b := pick(0), pick(1)
		return map[string]any{[]string{"anyOf", "oneOf"}[rng.IntN(2)]: []any{a, b}}
	}
	return map[string]any{"type": []string{"number", "boolean", "null"}[rng.IntN(3)]}
}

// TestRandomSchemas: over random schemas, generated outputs validate
// (completeness of the generator is the validator's side), and random
// mutations of them that the grammar still accepts validate too (the
// grammar never accepts an invalid instance).
func TestRandomSchemas(t *testing.T) {
	v := synthVocab(4000)
	rng := rand.New(rand.NewPCG(9, 1))
	n := 60
	if testing.Short() {
		n = 15
	}
	mutants := []string{"", " ", ",", "0", "-", "\"", "}", "]", "{", "[", "a", "null", "1e5", ".5", "\\u0041"}
	for i := range n {
		raw, _ := json.Marshal(randSchema(rng, 3))
		g, err := Compile(Spec{Schema: raw}, v)
		if err != nil {
			t.Fatalf("schema %d %s: %v", i, raw, err)
		}
		sch := validator(t, raw)
		for range 4 {
			out := generate(t, g, rng, 30)
			if err := validates(sch, out); err != nil {
				t.Fatalf("schema %s: output %s does not validate: %v", raw, out, err)
			}
			for range 20 {
				mut := []byte(string(out))
				p, q := rng.IntN(len(mut)+1), rng.IntN(len(mut)+1)
				if p > q {
					p, q = q, p
				}
				if q-p > 3 {
					q = p + 3
				}
				mut = append(mut[:p:p], append([]byte(mutants[rng.IntN(len(mutants))]), mut[q:]...)...)
				if g.d.accept[g.d.run(g.d.start, mut)] {
					if err := validates(sch, mut); err != nil {
						t.Fatalf("schema %s: grammar accepts %s, which does not validate: %v", raw, mut, err)
					}
				}
			}
		}
	}
}

func TestSchemaErrors(t *testing.T) {
	v := synthVocab(500)
	tests := []struct {
		schema string
		want   error
		text   string
	}{
		{`{"type":"integer","dependentSchemas":{}}`, ErrUnsupported, "dependentSchemas at #"},
		{`{"type":"object","dependentRequired":{"a":["b"]}}`, ErrUnsupported, "dependentRequired on an object whose generated properties are free at #"},
		{`{"not":{}}`, ErrEmpty, "its not (or if) schema may accept at #"},
		{`{"type":"object","properties":{"a":{"type":"array","contains":{},"maxContains":2},"b":{"type":"array","uniqueItems":true}}}`, ErrUnsupported,
			"maxContains at #/properties/a; uniqueItems at #/properties/b"},
		{`{"type":"array","items":{"type":"integer","maximum":3},"contains":{"minimum":5}}`, ErrEmpty, "no item allowed by items satisfies contains at #/contains"},
		{`{"type":"object","properties":{"Id":{}},"required":["Id"],"propertyNames":{"pattern":"^[a-z]+$"}}`, ErrEmpty,
			`required property "Id" does not satisfy propertyNames at #/propertyNames`},
		{`{"type":"string","format":"ipv6"}`, ErrUnsupported, `format "ipv6" (supported: date`},
		{`{"type":"object","properties":{"a":{}},"required":["a","b"],"additionalProperties":false}`, ErrEmpty,
			`required property "b" is forbidden by additionalProperties: false at #/required/1`},
		{`{"type":"object","properties":{"a":{"type":"integer","minimum":3,"maximum":2}},"required":["a"]}`, ErrEmpty,
			`between the bounds at #/properties/a`},
		{`{"type":"number","minimum":3,"exclusiveMaximum":3}`, ErrEmpty, `lower bound is above the upper bound at #`},
		{`{"type":"array","items":false,"minItems":1}`, ErrEmpty, `the schema false at #/items`},
		{`{"type":"string","minLength":3,"maxLength":2}`, ErrEmpty, `minLength 3 is above maxLength 2 at #`},
		{`{"type":"string","pattern":"^[0-9]+$","minLength":3,"format":"email"}`, ErrEmpty, ``},
		{`{"allOf":[{"type":"string"},{"type":"integer"}]}`, ErrEmpty, `no type in common at #/allOf/1`},
		{`{"allOf":[{"properties":{"a":{}},"additionalProperties":false},{"properties":{"b":{}},"required":["b"]}]}`, ErrEmpty, `required property "b" is forbidden by additionalProperties: false of another allOf schema`},
		{`{"allOf":[{"type":"string","pattern":"a"},{"format":"date"}, {"format":"uuid"}]}`, ErrUnsupported, `allOf whose schemas disagree on format at #`},
		{`{"allOf":[{"type":"string","pattern":"^a+$"},{"pattern":"^b+$"}]}`, ErrEmpty, ``},
		{`{"type":"array","prefixItems":[{}],"items":false,"minItems":2}`, ErrEmpty, `minItems 2 is above the 1 items the tuple allows at #/items`},
		{`{"type":"object","properties":{"a":{}},"required":["a"],"maxProperties":0}`, ErrEmpty, `more than maxProperties 0 at #`},
		{`{"type":"object","minProperties":2}`, ErrUnsupported, `minProperties above 1 on an object that declares no properties at #`},
		{`{"type":"integer","multipleOf":0.3333333333333333333}`, ErrUnsupported, `multipleOf 0.3333333333333333333 (supported`},
		{`{"type":"integer","multipleOf":0}`, ErrInvalid, `multipleOf must be a number above 0`},
		{`{"oneOf":[{"type":"string"},{"type":"string"}]}`, ErrEmpty, `oneOf: every value its branches can generate matches more than one branch at #`},
		{`{"type":"object","properties":{"p":{"oneOf":[{"type":"boolean"},{"enum":[false,true]}]}},"required":["p"]}`, ErrEmpty, `more than one branch at #/properties/p`},
		{`{"$ref":"http://x/y"}`, ErrUnsupported, `$ref "http://x/y"`},
		{`{"$ref":"#/nope"}`, ErrInvalid, "does not resolve"},
		{`{"type":"string","pattern":"a\\b"}`, ErrUnsupported, `pattern "a\\b"`},
		{`{"type":"strin"}`, ErrInvalid, `unknown type "strin"`},
		{`{"type":`, ErrInvalid, "not valid JSON"},
		{`[1]`, ErrInvalid, "object or a boolean"},
		{`false`, ErrEmpty, "matches nothing"},
		{`{"type":"integer","minimum":5,"maximum":4}`, ErrEmpty, ""},
		{`{"type":"string","maxLength":100000}`, ErrTooLarge, ""},
		{strings.Repeat(`{"type":"array","items":`, 20) + `{}` + strings.Repeat(`}`, 20), ErrTooLarge, "nests deeper than 16"},
	}
	for _, tt := range tests {
		t.Run(tt.schema, func(t *testing.T) {
			_, err := Compile(Spec{Schema: json.RawMessage(tt.schema)}, v)
			if !errors.Is(err, tt.want) || !strings.Contains(fmt.Sprint(err), tt.text) {
				t.Fatalf("have error %v; want %v containing %q", err, tt.want, tt.text)
			}
		})
	}
}

// TestIntegerRanges checks the digit-range construction against
// arithmetic over a window of values.
func TestIntegerRanges(t *testing.T) {
	v := synthVocab(500)
	tests := []struct{ lo, hi string }{
		{"0", "0"}, {"-5", "5"}, {"7", "1234"}, {"-1234", "-7"}, {"99", "101"}, {"", "-3"}, {"15", ""}, {"", ""}, {"-0.5", "9.5"},
	}
	for _, tt := range tests {
		t.Run(tt.lo+".."+tt.hi, func(t *testing.T) {
			s := `{"type":"integer"`
			if tt.lo != "" {
				s += `,"minimum":` + tt.lo
			}
			if tt.hi != "" {
				s += `,"maximum":` + tt.hi
			}
			s += "}"
			g, err := Compile(Spec{Schema: json.RawMessage(s)}, v)
			if err != nil {
				t.Fatal(err)
			}
			sch := validator(t, []byte(s))
			for x := -1500; x <= 1500; x++ {
				str := fmt.Sprint(x)
				want := validates(sch, []byte(str)) == nil
				if have := g.d.accept[g.d.run(g.d.start, []byte(str))]; have != want {
					t.Fatalf("%s: have %v; want %v", str, have, want)
				}
			}
			for _, bad := range []string{"-0", "01", "+1", "1.0", ""} {
				if g.d.accept[g.d.run(g.d.start, []byte(bad))] {
					t.Errorf("%q: have accepted; want rejected (not canonical)", bad)
				}
			}
		})
	}
}

// TestNumberRanges checks bounded numbers against the validator over a
// grid of canonical decimals.
func TestNumberRanges(t *testing.T) {
	v := synthVocab(500)
	tests := []string{
		`{"type":"number","minimum":-2.5,"maximum":3.75}`,
		`{"type":"number","exclusiveMinimum":-2.5,"exclusiveMaximum":3.75}`,
		`{"type":"number","exclusiveMinimum":0}`,
		`{"type":"number","maximum":-0.05}`,
		`{"type":"number","minimum":0.333,"exclusiveMaximum":12}`,
		`{"type":"number","minimum":1.5,"maximum":1.5}`,
		`{"minimum":-7,"exclusiveMaximum":-6.99}`,
		`{"type":"number","multipleOf":0.25}`,
		`{"type":"number","multipleOf":1.5,"minimum":-4}`,
		`{"type":"integer","multipleOf":3,"maximum":20}`,
		`{"type":"number","multipleOf":0.001,"exclusiveMinimum":0.5,"maximum":0.6}`,
	}
	var grid []string
	for x := -800; x <= 1300; x++ {
		for _, scale := range []int{1, 100, 1000} {
			r := new(big.Rat).SetFrac64(int64(x), int64(scale))
			grid = append(grid, canonNumber(r.FloatString(3)))
		}
	}
	for _, s := range tests {
		t.Run(s, func(t *testing.T) {
			g, err := Compile(Spec{Schema: json.RawMessage(s)}, v)
			if err != nil {
				t.Fatal(err)
			}
			sch := validator(t, []byte(s))
			for _, str := range grid {
				want := validates(sch, []byte(str)) == nil
				if have := g.d.accept[g.d.run(g.d.start, []byte(str))]; have != want {
					t.Fatalf("%s: have %v; want %v", str, have, want)
				}
			}
		})
	}
}

// TestOneOfExact checks oneOf languages against the validator: a text is
// generated exactly when it validates (these branches are scalars, whose
// acceptors are exact, so nothing valid is left out either).
func TestOneOfExact(t *testing.T) {
	v := synthVocab(500)
	var ints, strs []string
	for x := -40; x <= 140; x++ {
		ints = append(ints, fmt.Sprint(x), canonNumber(fmt.Sprintf("%d.5", x)))
	}
	for _, a := range []string{"", "a", "b", "ab", "ba", "abc", "bcd", "abcd", "bcde", "aaaaa"} {
		strs = append(strs, `"`+a+`"`)
	}
	tests := []struct {
		schema string
		texts  []string
	}{
		{`{"oneOf":[{"type":"integer","minimum":0,"maximum":10},{"type":"integer","minimum":5,"maximum":20}]}`, ints},
		{`{"oneOf":[{"type":"number","maximum":100},{"type":"integer"}]}`, ints},
		{`{"oneOf":[{"type":"number","minimum":0},{"type":"integer","maximum":50},{"const":120}]}`, ints},
		{`{"oneOf":[{"type":"string","pattern":"^a"},{"type":"string","maxLength":3}]}`, strs},
		{`{"oneOf":[{"enum":["a","b","ab"]},{"type":"string","minLength":2}]}`, strs},
		{`{"type":"integer","minimum":0,"maximum":10,"not":{"enum":[3,4,5]}}`, ints},
		{`{"type":"string","maxLength":3,"not":{"pattern":"^a"}}`, strs},
		{`{"type":"integer","minimum":-20,"maximum":20,"if":{"minimum":0},"then":{"multipleOf":2},"else":{"multipleOf":3}}`, ints},
		{`{"type":"number","maximum":50,"if":{"type":"integer"},"then":{"minimum":10},"else":{"maximum":0}}`, ints},
	}
	for _, tt := range tests {
		t.Run(tt.schema, func(t *testing.T) {
			g, err := Compile(Spec{Schema: json.RawMessage(tt.schema)}, v)
			if err != nil {
				t.Fatal(err)
			}
			sch := validator(t, []byte(tt.schema))
			for _, str := range tt.texts {
				want := validates(sch, []byte(str)) == nil
				if have := g.d.accept[g.d.run(g.d.start, []byte(str))]; have != want {
					t.Fatalf("%s: have %v; want %v", str, have, want)
				}
			}
		})
	}
}

// TestOneOfKeeps checks that oneOf over objects keeps what only one
// branch accepts: a discriminated union keeps both kinds whole.
func TestOneOfKeeps(t *testing.T) {
	v := synthVocab(500)
	tests := []struct {
		schema    string
		keep, not []string
	}{
		{`{"oneOf":[{"type":"object","properties":{"kind":{"const":"a"},"x":{"type":"integer"}},"required":["kind","x"]},
		  {"type":"object","properties":{"kind":{"const":"b"},"y":{"type":"string"}},"required":["kind","y"]}]}`,
			[]string{`{"kind":"a","x":1}`, `{"kind":"b", "y":"hi"}`}, nil},
		{`{"oneOf":[{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"}}},{"type":"object","properties":{"b":{"type":"boolean"}},"required":["b"]}]}`,
			[]string{`{"a":1}`, `{"b":"x"}`, `{"a":1,"b":"x"}`, `{"b":true}`, `{}`}, nil},
		{`{"oneOf":[{"type":"object","properties":{"a":{"type":"integer"}}},{"type":"object","properties":{"b":{"type":"integer"}}}]}`,
			nil, []string{`{}`, `{"a":1}`, `{"b":1}`}},
	}
	for _, tt := range tests {
		t.Run(tt.schema, func(t *testing.T) {
			g, err := Compile(Spec{Schema: json.RawMessage(tt.schema)}, v)
			if len(tt.keep) == 0 {
				if !errors.Is(err, ErrEmpty) {
					t.Fatalf("have %v; want ErrEmpty: every generated object matches both branches", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, str := range tt.keep {
				if !g.d.accept[g.d.run(g.d.start, []byte(str))] {
					t.Errorf("%s: have rejected; want generated", str)
				}
			}
		})
	}
}

// TestFormatsSubset checks that each format's language is a subset of
// what the validator accepts for the format, over hand-picked near misses,
// and that ordinary values are generated.
func TestFormatsSubset(t *testing.T) {
	v := synthVocab(500)
	tests := []struct {
		format string
		texts  []string
		keep   []string
	}{
		{"email", []string{"a..b@c.de", ".a@b.cd", "a.@b.cd", "a@b", "a@-b.cd", "a@b-.cd", "a b@c.de", "@b.cd", "a@b..cd", "a@b.c"},
			[]string{"jane.doe@example.com", "x+y@mail.co"}},
		{"hostname", []string{"-a.com", "a-.com", "a..b", ".a", "a.", strings.Repeat("a", 64) + ".com", "a_b.com", ""},
			[]string{"example.com", "a", "x-1.y-2.z"}},
		{"ipv4", []string{"256.1.1.1", "01.1.1.1", "1.1.1", "1.1.1.1.1", "1.1.1.", "00.0.0.0", "1.1.1.01"},
			[]string{"0.0.0.0", "255.255.255.255", "10.20.30.40"}},
		{"uri", []string{"example.com", "http//x.y", "://x", "http://", "http://a b", "http://x.y/%zz"},
			[]string{"https://example.com/a/b?c=d#e", "ftp://x:21/"}},
		{"date", []string{"2023-02-29", "1900-02-29", "2024-13-01", "2024-00-10", "2024-04-31", "24-01-01"},
			[]string{"2024-02-29", "2000-02-29", "1999-12-31"}},
	}
	for _, tt := range tests {
		t.Run(tt.format, func(t *testing.T) {
			schema := `{"type":"string","format":"` + tt.format + `"}`
			g, err := Compile(Spec{Schema: json.RawMessage(schema)}, v)
			if err != nil {
				t.Fatal(err)
			}
			sch := validator(t, []byte(schema))
			for _, str := range append(tt.texts, tt.keep...) {
				text, _ := json.Marshal(str)
				have := g.d.accept[g.d.run(g.d.start, text)]
				if have && validates(sch, text) != nil {
					t.Errorf("%s: have generated; the validator refuses it", text)
				}
			}
			for _, str := range tt.keep {
				text, _ := json.Marshal(str)
				if !g.d.accept[g.d.run(g.d.start, text)] || validates(sch, text) != nil {
					t.Errorf("%s: have not generated (or invalid); want an ordinary value kept", text)
				}
			}
		})
	}
}

// TestDates checks format date against the calendar, leap years
// included, over whole years.
func TestDates(t *testing.T) {
	g, err := Compile(Spec{Schema: json.RawMessage(`{"type":"string","format":"date"}`)}, synthVocab(500))
	if err != nil {
		t.Fatal(err)
	}
	for _, year := range []int{0, 1, 4, 100, 1900, 1996, 2000, 2023, 2024, 2100, 2400, 9999} {
		for month := 0; month <= 13; month++ {
			for day := 0; day <= 32; day++ {
				str := fmt.Sprintf("%04d-%02d-%02d", year, month, day)
				_, perr := time.Parse(time.DateOnly, str)
				want := perr == nil
				if have := g.d.accept[g.d.run(g.d.start, []byte(`"`+str+`"`))]; have != want {
					t.Fatalf("%s: have %v; want %v", str, have, want)
				}
			}
		}
	}
}

func TestAnyJSON(t *testing.T) {
	v := synthVocab(3000)
	g, err := Compile(Spec{JSON: true}, v)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		in   string
		want bool
	}{
		{`{"a": [1, 0.0025, "x\n", true, null, {}]}`, true},
		{`2.5e-3`, false}, // numbers are plain decimals
		{`1.50`, false},   // without trailing fraction zeros
		{`-0`, false},
		{`123456789012345`, true},
		{`1234567890123456`, false}, // at most 15 integer digits, so numbers end
		{`0.123456789012345`, true},
		{`0.1234567890123456`, false},
		{`"\/"`, false}, // one encoding per character
		{`[[[["deep"]]]]`, true},
		{`[[[[["too deep"]]]]]`, false},
		{`{"a":1,}`, false},
		{`{"a" : 1}`, false}, // no space before ':'
		{`"\ud83d"`, false},  // \u escapes are limited to control characters
		{`"\u001f"`, true},
		{`-0.0`, false},
		{`-0.5`, true},
		{`01`, false},
	}
	for _, tt := range tests {
		if have := accepts(t, g, tt.in); have != tt.want {
			t.Errorf("%s: have %v; want %v", tt.in, have, tt.want)
		}
		if tt.want && !json.Valid([]byte(tt.in)) {
			t.Errorf("%s: test case is not JSON", tt.in)
		}
	}
	rng := rand.New(rand.NewPCG(4, 4))
	for range 20 {
		if out := generate(t, g, rng, 60); !json.Valid(out) {
			t.Fatalf("generated %q: not valid JSON", out)
		}
	}
}

func TestChoices(t *testing.T) {
	v := synthVocab(3000)
	g, err := Compile(Spec{Choices: []string{"yes", "no", "not sure", "\xff raw"}}, v)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		in   string
		want bool
	}{{"yes", true}, {"not sure", true}, {"no", true}, {"not", false}, {"yesno", false}, {"\xff raw", true}} {
		if have := accepts(t, g, tt.in); have != tt.want {
			t.Errorf("%q: have %v; want %v", tt.in, have, tt.want)
		}
	}
	m := g.NewMatcher()
	for _, tok := range tokenize(v, []byte("yes")) {
		if err := m.Advance(tok); err != nil {
			t.Fatal(err)
		}
	}
	if !m.Done() {
		t.Errorf("after \"yes\": have Done false; want true (nothing may follow)")
	}
}

// TestCalls checks tagged calls: one to Max values of the schema between
// the tags, or (optional) any text that does not open a call.
func TestCalls(t *testing.T) {
	v := synthVocab(800)
	schema := `{"anyOf":[{"type":"object","properties":{"name":{"const":"get"},"arguments":{"type":"object","properties":{"city":{"type":"string","maxLength":8}},"required":["city"],"additionalProperties":false}},"required":["name","arguments"],"additionalProperties":false}]}`
	call := "<tool_call>\n" + `{"name":"get","arguments":{"city":"Oslo"}}` + "\n</tool_call>"
	bare := `{"name":"get","arguments":{"city":"Oslo"}}`
	tests := []struct {
		optional    bool
		open, close string
		in          string
		want        bool
	}{
		{false, "", "", bare, true}, // bare calls, as Llama 3.1+ writes them
		{false, "", "", bare + "\n" + bare, true},
		{false, "", "", "hello", false},
		{true, "", "", "hello {", true},
		{true, "", "", bare, true},
		{true, "", "", `{"city":"Oslo"}`, false}, // text must not start like a call
		{false, "[TOOL_CALLS][", "]", "[TOOL_CALLS][" + bare + "]", true},
		{false, "[TOOL_CALLS][", "]", "[TOOL_CALLS]" + bare, false},
		{false, "<tool_call>\n", "\n</tool_call>", call, true},
		{false, "<tool_call>\n", "\n</tool_call>", call + "\n" + call, true},
		{false, "<tool_call>\n", "\n</tool_call>", call + "\n" + call + "\n" + call, false}, // Max 2
		{false, "<tool_call>\n", "\n</tool_call>", "hello", false},
		{false, "<tool_call>\n", "\n</tool_call>", "<tool_call>\n" + `{"name":"put","arguments":{}}` + "\n</tool_call>", false},
		{true, "<tool_call>\n", "\n</tool_call>", "hello", true},
		{true, "<tool_call>\n", "\n</tool_call>", "", true},
		{true, "<tool_call>\n", "\n</tool_call>", "<tool", true}, // text that only begins like the tag
		{true, "<tool_call>\n", "\n</tool_call>", call, true},
		{true, "<tool_call>\n", "\n</tool_call>", "<tool_call>\nhello", false},
		{true, "<tool_call>\n", "\n</tool_call>", "<tool_call>\n" + `{"name":"get","arguments":{"city":"Stockholm"}}` + "\n</tool_call>", false},
	}
	for _, tt := range tests {
		g, err := Compile(Spec{Schema: json.RawMessage(schema), Calls: &Calls{Open: tt.open, Close: tt.close, Max: 2, Optional: tt.optional}}, v)
		if err != nil {
			t.Fatal(err)
		}
		if have := g.d.accept[g.d.run(g.d.start, []byte(tt.in))]; have != tt.want {
			t.Errorf("optional=%v open=%q %q: have %v; want %v", tt.optional, tt.open, tt.in, have, tt.want)
		}
	}
}
