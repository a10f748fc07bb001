package engine_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/specgate/specgate/engine/spec"
	"sync"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/engine/model"
	"github.com/specgate/specgate/engine/model/synth"
	"github.com/specgate/specgate/kernels"
	"github.com/specgate/specgate/kernels/sample"
)

// personSchema bounds every string, number and array, so the language is
// finite and any output must close within maxTokens.
const personSchema = `{
  "type": "object",
  "properties": {
    "name": {"type": "string", "maxLength": 8},
    "age": {"type": "integer", "minimum": 0, "maximum": 120},
    "pet": {"enum": ["cat", "dog", null]},
    "tags": {"type": "array", "items": {"type": "string", "maxLength": 4}, "maxItems": 3},
    "ok": {"type": "boolean"}
  },
  "required": ["name", "age", "ok"]
}`

func loadSynth(tb testing.TB) model.Loaded {
	tb.Helper()
	be, err := kernels.Open("cpu", kernels.Options{Threads: 2})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { be.Close() })
	m, err := model.Load(synth.Setup(tb, synth.Options{Layers: 2, Dim: 64, Vocab: 512, Seed: 7}), be)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { m.Close() })
	return m
}

func compileSchema(t *testing.T, schema string) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader([]byte(schema)))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("mem://schema.json", doc); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile("mem://schema.json")
	if err != nil {
		t.Fatal(err)
	}
	return sch
}

func TestGuidedJSONSchemaModels(t *testing.T) {
	sch := compileSchema(t, personSchema)
	for _, mt := range []struct {
		name string
		load func(testing.TB) model.Loaded
	}{{"stories260K", loadStories}, {"synth", loadSynth}} {
		t.Run(mt.name, func(t *testing.T) {
			m := mt.load(t)
			// Speculation on for greedy and sampled requests alike, with a
			// fixed shape so every step drafts: masks must hold for drafts
			// and verification too.
			e, err := engine.New(m, engine.Options{Speculation: engine.Speculation{Dispatcher: spec.Fixed(spec.Chain(4))}})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			var wg sync.WaitGroup
			for i := range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					p := sample.Params{}
					if i%2 == 1 {
						p = sample.Params{Temperature: 1, Seed: uint64(i)}
					}
					r := engine.Request{Prompt: m.Tokenizer().Encode(fmt.Sprintf("Person %d as JSON:", i)), MaxTokens: 400, Sample: p,
						Guided: &engine.Guided{Schema: json.RawMessage(personSchema)}}
					_, text, f, err := generate(ctx, e, r)
					if err != nil {
						t.Error(err)
						return
					}
					if f.FinishReason != engine.FinishStop {
						t.Errorf("%d: have finish %s (%v) after %q; want stop", i, f.FinishReason, f.Err, text)
						return
					}
					inst, err := jsonschema.UnmarshalJSON(bytes.NewReader([]byte(text)))
					if err != nil {
						t.Errorf("%d: have %q: %v; want JSON", i, text, err)
						return
					}
					if err := sch.Validate(inst); err != nil {
						t.Errorf("%d: have %q: %v; want it valid", i, text, err)
					}
					t.Logf("%d: %s", i, text)
				}()
			}
			wg.Wait()
		})
	}
}

// oracleSchemas are what issue reports and real APIs ask for: unbounded
// numbers, bounds on numbers, dates, formats, pattern with lengths,
// overlapping oneOf, discriminated unions, additionalProperties schemas.
// Every string is bounded so every output must end.
var oracleSchemas = []string{
	`{"type":"object","properties":{"age":{"type":"integer","minimum":0},"score":{"type":"number"}},"required":["age","score"],"additionalProperties":false}`,
	`{"type":"object","properties":{"t":{"type":"number","minimum":-40.5,"exclusiveMaximum":60},"p":{"type":"number","exclusiveMinimum":0,"maximum":1}},"required":["t","p"]}`,
	`{"type":"array","items":{"type":"string","format":"date"},"minItems":3,"maxItems":3}`,
	`{"type":"object","properties":{"email":{"type":"string","format":"email","maxLength":24},"host":{"type":"string","format":"hostname","maxLength":20},"ip":{"type":"string","format":"ipv4"}},"required":["email","host","ip"]}`,
	`{"type":"string","pattern":"^[a-z]+(-[a-z]+)*$","minLength":4,"maxLength":10}`,
	`{"oneOf":[{"type":"integer","minimum":0,"maximum":10},{"type":"integer","minimum":5,"maximum":20}]}`,
	`{"oneOf":[{"type":"object","properties":{"kind":{"const":"circle"},"r":{"type":"number","minimum":0,"maximum":10}},"required":["kind","r"]},
	  {"type":"object","properties":{"kind":{"const":"square"},"side":{"type":"integer","minimum":1,"maximum":9}},"required":["kind","side"]}]}`,
	`{"type":"object","properties":{"id":{"type":"integer","maximum":99}},"additionalProperties":{"type":"string","maxLength":3},"required":["id","label"]}`,
	`{"type":"object","properties":{"country":{"enum":["US","CA"]},"zip":{"type":"string","maxLength":6}},"required":["country","zip"],
	  "if":{"properties":{"country":{"const":"US"}}},"then":{"properties":{"zip":{"pattern":"^[0-9]{5}$"}}},"else":{"properties":{"zip":{"pattern":"^[A-Z][0-9][A-Z]$"}}}}`,
	`{"allOf":[{"type":"object","properties":{"n":{"type":"integer","multipleOf":5,"minimum":0,"maximum":100}},"required":["n"]},
	  {"properties":{"t":{"type":"array","prefixItems":[{"type":"boolean"},{"enum":["x","y"]}],"items":false,"minItems":2}},"required":["t"]}]}`,
}

// TestGuidedOracle decodes many outputs per schema on the real model,
// greedy and sampled, with speculation drafting every step, and checks
// each with an independent JSON Schema validator that asserts formats.
func TestGuidedOracle(t *testing.T) {
	m := loadStories(t)
	e, err := engine.New(m, engine.Options{Speculation: engine.Speculation{Dispatcher: spec.Fixed(spec.Chain(4))}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	runs := 8
	if testing.Short() {
		runs = 4
	}
	for si, schema := range oracleSchemas {
		t.Run(fmt.Sprint(si), func(t *testing.T) {
			doc, err := jsonschema.UnmarshalJSON(bytes.NewReader([]byte(schema)))
			if err != nil {
				t.Fatal(err)
			}
			c := jsonschema.NewCompiler()
			c.AssertFormat()
			if err := c.AddResource("mem://s.json", doc); err != nil {
				t.Fatal(err)
			}
			sch, err := c.Compile("mem://s.json")
			if err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			for i := range runs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					p := sample.Params{}
					if i%2 == 1 {
						p = sample.Params{Temperature: 1, Seed: uint64(100*si + i)}
					}
					r := engine.Request{Prompt: m.Tokenizer().Encode(storyPrompts[i%len(storyPrompts)]), MaxTokens: 300, Sample: p,
						Guided: &engine.Guided{Schema: json.RawMessage(schema)}}
					_, text, f, err := generate(ctx, e, r)
					if err != nil {
						t.Error(err)
						return
					}
					if f.FinishReason != engine.FinishStop {
						t.Errorf("%d: have finish %s (%v) after %q; want stop", i, f.FinishReason, f.Err, text)
						return
					}
					inst, err := jsonschema.UnmarshalJSON(bytes.NewReader([]byte(text)))
					if err != nil {
						t.Errorf("%d: have %q: %v; want JSON", i, text, err)
						return
					}
					if err := sch.Validate(inst); err != nil {
						t.Errorf("%d: have %q: %v; want it valid", i, text, err)
					}
				}()
			}
			wg.Wait()
		})
	}
}

func TestGuidedUnsupportedSchemaRefused(t *testing.T) {
	m := loadSynth(t)
	e, err := engine.New(m, engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	_, err = e.Submit(context.Background(), engine.Request{Prompt: []int32{1}, Guided: &engine.Guided{Schema: json.RawMessage(`{"type":"array","uniqueItems":true}`)}})
	var ee *engine.Error
	if !errors.As(err, &ee) || ee.Code != engine.CodeBadRequest {
		t.Fatalf("have %v; want bad_request", err)
	}
}
