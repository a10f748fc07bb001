package guided

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/specgate/specgate/kernels"
	"github.com/specgate/specgate/kernels/sample"
)

// benchSchema is a realistic nested schema: an order with a customer,
// an address, line items and enums, patterns, formats and bounds.
const benchSchema = `{
  "type": "object",
  "properties": {
    "id": {"type": "string", "format": "uuid"},
    "status": {"enum": ["pending", "paid", "shipped", "cancelled"]},
    "created": {"type": "string", "format": "date-time"},
    "customer": {
      "type": "object",
      "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 40},
        "email": {"type": "string", "pattern": "^[a-z0-9._]+@[a-z0-9]+\\.[a-z]{2,4}$"},
        "phone": {"type": ["string", "null"], "pattern": "^\\+?[0-9 ]{7,15}$"},
        "address": {
          "type": "object",
          "properties": {
            "street": {"type": "string", "maxLength": 60},
            "city": {"type": "string", "maxLength": 30},
            "zip": {"type": "string", "pattern": "^[0-9]{5}$"},
            "country": {"enum": ["US", "DE", "FR", "JP", "CN"]}
          },
          "required": ["street", "city", "country"],
          "additionalProperties": false
        }
      },
      "required": ["name", "email"],
      "additionalProperties": false
    },
    "items": {
      "type": "array",
      "minItems": 1,
      "maxItems": 20,
      "items": {
        "type": "object",
        "properties": {
          "sku": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{4}$"},
          "qty": {"type": "integer", "minimum": 1, "maximum": 100},
          "price": {"type": "number"},
          "tags": {"type": "array", "items": {"type": "string", "maxLength": 12}, "maxItems": 5}
        },
        "required": ["sku", "qty", "price"],
        "additionalProperties": false
      }
    },
    "gift": {"type": "boolean"},
    "note": {"type": "string", "maxLength": 200}
  },
  "required": ["id", "status", "customer", "items"],
  "additionalProperties": false
}`

var benchVocabs sync.Map // size → *Vocab

func benchVocab(size int) *Vocab {
	if v, ok := benchVocabs.Load(size); ok {
		return v.(*Vocab)
	}
	v := synthVocab(size)
	benchVocabs.Store(size, v)
	return v
}

var benchSizes = []int{32000, 128000}

func BenchmarkNewVocab(b *testing.B) {
	for _, n := range benchSizes {
		pieces := synthPieces(n)
		b.Run(fmt.Sprintf("vocab=%dk", n/1000), func(b *testing.B) {
			for b.Loop() {
				NewVocab(pieces, []int32{testEOS})
			}
		})
	}
}

// BenchmarkCompile measures Compile (front end, DFA, minimization; masks
// stay lazy) and, as "all-masks", Compile plus every state's mask — the
// most a grammar can ever cost.
func BenchmarkCompile(b *testing.B) {
	for _, n := range benchSizes {
		v := benchVocab(n)
		b.Run(fmt.Sprintf("vocab=%dk", n/1000), func(b *testing.B) {
			var states int
			for b.Loop() {
				g, err := Compile(Spec{Schema: json.RawMessage(benchSchema)}, v)
				if err != nil {
					b.Fatal(err)
				}
				states = g.NumStates()
			}
			b.ReportMetric(float64(states), "states")
		})
		b.Run(fmt.Sprintf("vocab=%dk/all-masks", n/1000), func(b *testing.B) {
			for b.Loop() {
				g, err := Compile(Spec{Schema: json.RawMessage(benchSchema)}, v)
				if err != nil {
					b.Fatal(err)
				}
				g.PrecomputeMasks()
			}
		})
	}
}

// decodeTokens produces token sequences a model might emit under g:
// argmax of random logits under the mask, steered to finish after budget.
func decodeTokens(g *Grammar, rng *rand.Rand, budget int) []int32 {
	v := g.Vocab()
	logits := make([]float32, v.Size())
	var out []int32
	s := g.Start()
	for step := 0; step < budget+2000 && s != Final && !g.Terminal(s); step++ {
		mask := g.Mask(s)
		best, bestScore := int32(-1), math.Inf(-1)
		for i := range logits {
			if !mask.Has(int32(i)) {
				continue
			}
			score := rng.NormFloat64()
			if step >= budget {
				n := g.Next(s, int32(i))
				if n != Final {
					score -= 100 * float64(g.d.dist[n])
				} else {
					score += 100
				}
			}
			if score > bestScore {
				best, bestScore = int32(i), score
			}
		}
		if best < 0 {
			break
		}
		out = append(out, best)
		s = g.Next(s, best)
	}
	return out
}

// BenchmarkMaskPerToken measures the per-token cost in the hot path:
// advance the matcher by the sampled token, get the next mask, and use it
// on fresh logits. One op is one generated sequence; the per-token figures
// (p50, p99, max, mean) are over all its tokens.
// "cold" is the first pass over a fresh grammar (masks computed on first
// use); "warm" is the steady state once the states are cached.
// The ways of using the mask:
//   - apply: kernels.MaskLogitsRef on the row (the sampler not included);
//   - ref-sample: MaskLogitsRef, then a greedy sample.Sampler.Sample of
//     the row: what an engine without the masked path pays;
//   - masked-sample: sample.Sampler.SampleMasked, which never writes the
//     row: the same token as ref-sample;
//   - unguided-sample: Sample ignoring the mask, the floor a dense row
//     costs without any grammar.
func BenchmarkMaskPerToken(b *testing.B) {
	type use struct {
		name string
		fn   func(s *sample.Sampler, logits []float32, mask Bitset)
	}
	uses := []use{
		{"apply", func(_ *sample.Sampler, l []float32, m Bitset) { kernels.MaskLogitsRef(l, m) }},
		{"ref-sample", func(s *sample.Sampler, l []float32, m Bitset) {
			kernels.MaskLogitsRef(l, m)
			s.Sample(l, nil)
		}},
		{"masked-sample", func(s *sample.Sampler, l []float32, m Bitset) { s.SampleMasked(l, m, nil) }},
		{"unguided-sample", func(s *sample.Sampler, l []float32, _ Bitset) { s.Sample(l, nil) }},
	}
	for _, n := range benchSizes {
		v := benchVocab(n)
		g0, err := Compile(Spec{Schema: json.RawMessage(benchSchema)}, v)
		if err != nil {
			b.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(1, 1))
		var seqs [][]int32
		total := 0
		for total < 3000 {
			s := decodeTokens(g0, rng, 150)
			seqs = append(seqs, s)
			total += len(s)
		}
		fresh := make([]float32, n)
		for i := range fresh {
			fresh[i] = float32(rng.NormFloat64())
		}
		logits := make([]float32, n)
		smp := sample.New(sample.Params{})
		run := func(b *testing.B, u use, g *Grammar, seq []int32, times []time.Duration) []time.Duration {
			m := g.NewMatcher()
			copy(logits, fresh)
			start := time.Now()
			u.fn(smp, logits, m.Mask())
			times = append(times, time.Since(start))
			for _, tok := range seq {
				copy(logits, fresh)
				start := time.Now()
				if err := m.Advance(tok); err != nil {
					b.Fatal(err)
				}
				u.fn(smp, logits, m.Mask())
				times = append(times, time.Since(start))
			}
			return times
		}
		report := func(b *testing.B, times []time.Duration) {
			slices.Sort(times)
			b.ReportMetric(float64(times[len(times)/2].Nanoseconds()), "p50-ns/token")
			b.ReportMetric(float64(times[len(times)*99/100].Nanoseconds()), "p99-ns/token")
			b.ReportMetric(float64(times[len(times)-1].Nanoseconds()), "max-ns/token")
			var sum time.Duration
			for _, d := range times {
				sum += d
			}
			b.ReportMetric(float64(sum.Nanoseconds())/float64(len(times)), "mean-ns/token")
		}
		for _, u := range uses {
			b.Run(fmt.Sprintf("vocab=%dk/warm/%s", n/1000, u.name), func(b *testing.B) {
				for _, s := range seqs {
					run(b, u, g0, s, nil)
				}
				var times []time.Duration
				i := 0
				for b.Loop() {
					times = run(b, u, g0, seqs[i%len(seqs)], times)
					i++
				}
				report(b, times)
			})
		}
		for _, u := range []use{uses[0], uses[2]} {
			b.Run(fmt.Sprintf("vocab=%dk/cold/%s", n/1000, u.name), func(b *testing.B) {
				var times []time.Duration
				for b.Loop() {
					b.StopTimer()
					g, _ := Compile(Spec{Schema: json.RawMessage(benchSchema)}, v)
					b.StartTimer()
					for _, s := range seqs {
						times = run(b, u, g, s, times)
					}
				}
				report(b, times)
			})
		}
	}
}
