package spec

import (
	"fmt"
	"strings"
	"testing"
)

// synthCands is a made-up drafter's candidates: after a path, between none
// and four tokens (by the path's sum), confidences falling with rank and
// depth, and with qs a distribution for the best candidate only (as a
// sampled draft model hands out).
func synthCands(qs bool) func(path []int32, k int) ([]int32, []float32, [][]float32) {
	return func(path []int32, k int) ([]int32, []float32, [][]float32) {
		s := 0
		for _, t := range path {
			s += int(t)
		}
		s += 3 * len(path)
		m := min((s*7+3)%5, k)
		var toks []int32
		var ps []float32
		var q [][]float32
		for r := range m {
			tok := int32(10 + 10*len(path) + r + s%5)
			toks = append(toks, tok)
			ps = append(ps, 0.9/float32(r+1)*(1-0.15*float32(len(path))))
			if qs {
				var d []float32
				if r == 0 {
					d = []float32{float32(tok)}
				}
				q = append(q, d)
			}
		}
		return toks, ps, q
	}
}

// treeString writes t as "token^parent" per node, a node carrying a
// distribution marked "q" followed by its first value, and then the
// confidences fb was given.
func treeString(t *Tree, fb *feedback) string {
	var b strings.Builder
	for i, tok := range t.Tokens {
		fmt.Fprintf(&b, "%d^%d", tok, t.Parent[i])
		if t.Q[i] != nil {
			fmt.Fprintf(&b, "q%g", t.Q[i][0])
		}
		b.WriteByte(' ')
	}
	if fb != nil {
		fmt.Fprintf(&b, "| %.3f", fb.p)
	}
	return strings.TrimSpace(b.String())
}

// trainedCal is a calibration that has seen candidates of confidence
// about 0.45 accepted one time in five and those of 0.3 three times in
// four, so that lookup's floor drops a rank and takes the next one.
func trainedCal() *calibration {
	c := &calibration{}
	for i := range 40 {
		c.observe(0.45, i%5 == 0)
		c.observe(0.3, i%4 != 0)
		c.observe(0.765, i%2 == 0)
	}
	return c
}

// TestPlaceGolden pins where the static placement puts candidates, for
// the draft model (no scoring, distributions carried) and for lookup (a
// floor on the calibrated score, ranks counted among the candidates that
// pass it, confidences fed back), shape by shape. The trees are the ones
// the two drafters built before their placements became one. One placer
// serves every case, in order and then in reverse, so that state left over
// from a call would show.
func TestPlaceGolden(t *testing.T) {
	gap := mustShape("gap", [][]int{{0}, {2}, {0, 1}, {2, 0}, {2, 0, 3}})
	shapes := map[string]Shape{}
	for _, sh := range []Shape{Chain(4), Wide, Bushy, Dynamic(8), gap} {
		shapes[sh.Name] = sh
	}
	tests := []struct {
		shape string
		// mode is "model" (no scoring, distributions carried), or
		// lookup's scoring: "floor<f>" with a fresh calibration, "cal<f>"
		// with trainedCal's.
		mode string
		want string
	}{
		{"chain4", "model", "10^-1q10 23^0q23 34^1q34"},
		{"chain4", "floor0", "10^-1 23^0 34^1 | [0.900 0.765 0.630]"},
		{"chain4", "floor0.3", "10^-1 23^0 34^1 | [0.900 0.765 0.630]"},
		{"chain4", "cal0", "10^-1 23^0 34^1 | [0.900 0.765 0.630]"},
		{"chain4", "cal0.3", "10^-1 23^0 | [0.900 0.765]"},
		{"wide8", "model", "10^-1q10 23^0q23 34^1q34 24^0 11^-1 24^4q24 12^-1"},
		{"wide8", "floor0", "10^-1 23^0 34^1 24^0 11^-1 24^4 12^-1 | [0.900 0.765 0.630 0.382 0.450 0.765 0.300]"},
		{"wide8", "floor0.3", "10^-1 23^0 34^1 24^0 11^-1 24^4 | [0.900 0.765 0.630 0.382 0.450 0.765]"},
		{"wide8", "cal0", "10^-1 23^0 34^1 24^0 11^-1 24^4 12^-1 | [0.900 0.765 0.630 0.382 0.450 0.765 0.300]"},
		{"wide8", "cal0.3", "10^-1 23^0 24^0 12^-1 20^3 | [0.900 0.765 0.382 0.300 0.765]"},
		{"bushy16", "model", "10^-1q10 23^0q23 34^1q34 24^0 30^3q30 25^0 11^-1 24^6q24 12^-1 20^8q20"},
		{"bushy16", "floor0", "10^-1 23^0 34^1 24^0 30^3 25^0 11^-1 24^6 12^-1 20^8 | [0.900 0.765 0.630 0.382 0.630 0.255 0.450 0.765 0.300 0.765]"},
		{"bushy16", "floor0.3", "10^-1 23^0 34^1 24^0 11^-1 24^4 | [0.900 0.765 0.630 0.382 0.450 0.765]"},
		{"bushy16", "cal0", "10^-1 23^0 34^1 24^0 30^3 25^0 11^-1 24^6 12^-1 20^8 | [0.900 0.765 0.630 0.382 0.630 0.255 0.450 0.765 0.300 0.765]"},
		{"bushy16", "cal0.3", "10^-1 23^0 24^0 25^0 12^-1 20^4 | [0.900 0.765 0.382 0.255 0.300 0.765]"},
		{"dyn8", "model", "10^-1q10 23^0q23 34^1q34 24^0 11^-1 12^-1"},
		{"dyn8", "floor0", "10^-1 23^0 34^1 24^0 11^-1 12^-1 | [0.900 0.765 0.630 0.382 0.450 0.300]"},
		{"dyn8", "floor0.3", "10^-1 23^0 34^1 24^0 11^-1 | [0.900 0.765 0.630 0.382 0.450]"},
		{"dyn8", "cal0", "10^-1 23^0 34^1 24^0 11^-1 12^-1 | [0.900 0.765 0.630 0.382 0.450 0.300]"},
		{"dyn8", "cal0.3", "10^-1 23^0 24^0 12^-1 | [0.900 0.765 0.382 0.300]"},
		{"gap", "model", "10^-1q10 24^0 12^-1 20^2q20 36^3"},
		{"gap", "floor0", "10^-1 24^0 12^-1 20^2 36^3 | [0.900 0.382 0.300 0.765 0.157]"},
		{"gap", "floor0.3", "10^-1 24^0 | [0.900 0.382]"},
		{"gap", "cal0", "10^-1 24^0 12^-1 20^2 36^3 | [0.900 0.382 0.300 0.765 0.157]"},
		{"gap", "cal0.3", "10^-1 24^0 | [0.900 0.382]"},
	}
	var f placer
	run := func(shape Shape, mode string) string {
		var tr Tree
		defer func() {
			if err := tr.Validate(); err != nil {
				t.Errorf("%s/%s: %v", shape.Name, mode, err)
			}
		}()
		if mode == "model" {
			f.fill(&tr, shape, nil, synthCands(true))
			return treeString(&tr, nil)
		}
		var floor float64
		cal := &calibration{}
		if _, err := fmt.Sscanf(mode, "floor%g", &floor); err != nil {
			if _, err := fmt.Sscanf(mode, "cal%g", &floor); err != nil {
				t.Fatalf("mode %q", mode)
			}
			cal = trainedCal()
		}
		fb := &feedback{}
		f.fill(&tr, shape, &scoring{floor: floor, cal: cal, fb: fb}, synthCands(false))
		return treeString(&tr, fb)
	}
	for pass := range 2 {
		for i := range tests {
			tt := tests[i]
			if pass == 1 {
				tt = tests[len(tests)-1-i]
			}
			sh, ok := shapes[tt.shape]
			if !ok {
				t.Fatalf("no shape %q", tt.shape)
			}
			if have := run(sh, tt.mode); have != tt.want {
				t.Errorf("%s/%s (pass %d):\nhave %s\nwant %s", tt.shape, tt.mode, pass, have, tt.want)
			}
		}
	}
}

// TestPlaceNoGarbage: once its buffers have grown, a placement allocates
// nothing, with scoring or without (a drafter fills a tree per sequence
// per step).
func TestPlaceNoGarbage(t *testing.T) {
	toks, ps := []int32{5, 6, 7, 8}, []float32{0.9, 0.5, 0.3, 0.2}
	qs := [][]float32{{1}, nil, nil, nil}
	cands := func(path []int32, k int) ([]int32, []float32, [][]float32) {
		k = min(k, len(toks))
		return toks[:k], ps[:k], qs[:k]
	}
	var f placer
	var tr Tree
	cal, fb := &calibration{}, &feedback{}
	for _, sh := range []Shape{Chain(4), Wide, Bushy} {
		for _, sc := range []*scoring{nil, {floor: 0.1, cal: cal, fb: fb}} {
			f.fill(&tr, sh, sc, cands)
			if tr.Len() == 0 {
				t.Fatalf("%s: empty tree", sh.Name)
			}
			if a := testing.AllocsPerRun(20, func() { f.fill(&tr, sh, sc, cands) }); a != 0 {
				t.Errorf("%s (scoring %v): %.1f allocations per fill; want none", sh.Name, sc != nil, a)
			}
		}
	}
}
