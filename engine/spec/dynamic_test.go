package spec

import (
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/specgate/specgate/internal/testmodels"
	"github.com/specgate/specgate/kernels"
	"github.com/specgate/specgate/kernels/sample"
)

// fakeCands is a drafter's view in which the children of every path are
// tokens 1..w with probabilities that depend on the path, so different
// branches have different confidence.
func fakeCands(path []int32, k int) ([]int32, []float32, [][]float32) {
	h := uint32(7)
	for _, t := range path {
		h = h*31 + uint32(t)
	}
	var toks []int32
	var ps []float32
	rest := float32(1)
	for r := range k {
		// A skewed split of what is left: 0.35–0.9 of it goes to rank r.
		f := 0.35 + 0.55*float32((h>>(3*r))%8)/7
		p := rest * f
		rest -= p
		toks, ps = append(toks, int32(10*len(path)+r+1)), append(ps, p)
	}
	// Best first, as drafters return them.
	idx := []int{}
	for i := range toks {
		idx = append(idx, i)
	}
	slices.SortStableFunc(idx, func(a, b int) int {
		if ps[a] > ps[b] {
			return -1
		}
		if ps[a] < ps[b] {
			return 1
		}
		return 0
	})
	var st []int32
	var sp []float32
	for _, i := range idx {
		st, sp = append(st, toks[i]), append(sp, ps[i])
	}
	return st, sp, nil
}

// pathProb is the product of fakeCands probabilities along node's path.
func pathProb(t *Tree, node int32) float64 {
	var path []int32
	for j := node; j >= 0; j = t.Parent[j] {
		path = append(path, t.Tokens[j])
	}
	slices.Reverse(path)
	p := 1.0
	for d, tok := range path {
		toks, ps, _ := fakeCands(path[:d], 8)
		i := slices.Index(toks, tok)
		p *= float64(ps[i])
	}
	return p
}

func TestDynamicShape(t *testing.T) {
	for _, budget := range []int{1, 2, 4, 8, 16, 24, 32, 64, 100} {
		s := Dynamic(budget)
		want := min(budget, MaxTreeNodes)
		if !s.Dynamic || s.Len() != want {
			t.Errorf("Dynamic(%d): have dynamic %v, %d nodes; want %d", budget, s.Dynamic, s.Len(), want)
		}
		// The envelope is a valid static shape whose main chain is as
		// deep as the tree may grow.
		if have := mainChain(s).Len(); have != s.MaxDepth {
			t.Errorf("%s: main chain of %d nodes; want %d", s.Name, have, s.MaxDepth)
		}
		for i, p := range s.Parent {
			if p >= int32(i) || (p >= 0 && s.Depth[i] != s.Depth[p]+1) || int(s.Depth[i]) > s.MaxDepth || int(s.Rank[i]) >= s.Width {
				t.Errorf("%s: node %d: parent %d depth %d rank %d", s.Name, i, p, s.Depth[i], s.Rank[i])
			}
		}
	}
	if !Dynamic(0).Off() {
		t.Errorf("Dynamic(0) should be off")
	}
}

// TestGrowerBudgetOrder: a dynamic tree keeps at most its budget, is a
// valid tree no deeper than MaxDepth, puts the likeliest path first,
// orders siblings by confidence, keeps nothing less likely than a node it
// dropped among those it expanded, and is the same every time.
func TestGrowerBudgetOrder(t *testing.T) {
	for _, sh := range []Shape{Dynamic(1), Dynamic(4), Dynamic(8), Dynamic(16), Dynamic(24), DynamicShape(12, 3, 2), DynamicShape(64, 10, 4)} {
		t.Run(sh.Name, func(t *testing.T) {
			var g grower
			g.reset(sh)
			var tr Tree
			g.grow(&tr, nil, fakeCands)
			if err := tr.Validate(); err != nil {
				t.Fatal(err)
			}
			if tr.Len() == 0 || tr.Len() > sh.Len() {
				t.Fatalf("have %d nodes; want 1 to %d", tr.Len(), sh.Len())
			}
			depths := tr.Depths(nil)
			if slices.Max(depths) > int32(sh.MaxDepth) {
				t.Errorf("have depth %d; want ≤ %d", slices.Max(depths), sh.MaxDepth)
			}
			// All generated nodes (kept or not): the kept ones are the
			// likeliest, ties to the earlier.
			minKept := math.Inf(1)
			for i := range tr.Len() {
				minKept = min(minKept, pathProb(&tr, int32(i)))
			}
			dropped := 0
			for _, n := range g.nodes {
				if contains(tr.Tokens, n.tok) && n.score >= minKept {
					continue
				}
				dropped++
				if n.score > minKept*(1+1e-6) {
					t.Errorf("dropped node %d (p=%.4g) is likelier than a kept one (p=%.4g)", n.tok, n.score, minKept)
				}
			}
			if len(g.nodes) > sh.Len() && dropped == 0 {
				t.Errorf("generated %d nodes, dropped none; budget %d", len(g.nodes), sh.Len())
			}
			// Siblings best first; node 0.. is the greedy path.
			for i := range tr.Len() {
				for j := i + 1; j < tr.Len(); j++ {
					if tr.Parent[j] == tr.Parent[i] && pathProb(&tr, int32(j)) > pathProb(&tr, int32(i)) {
						t.Errorf("sibling %d (p=%.4g) after less likely %d (p=%.4g)", j, pathProb(&tr, int32(j)), i, pathProb(&tr, int32(i)))
					}
				}
			}
			for i := 1; i < tr.Len() && depths[i] == int32(i+1); i++ {
				if tr.Parent[i] != int32(i-1) {
					t.Errorf("leading chain broken at %d", i)
				}
			}
			var again Tree
			g.reset(sh)
			g.grow(&again, nil, fakeCands)
			if !slices.Equal(tr.Tokens, again.Tokens) || !slices.Equal(tr.Parent, again.Parent) {
				t.Errorf("not deterministic: %v/%v then %v/%v", tr.Tokens, tr.Parent, again.Tokens, again.Parent)
			}
			t.Logf("%d nodes, depth %d, of %d generated", tr.Len(), slices.Max(depths), len(g.nodes))
		})
	}
}

// TestGrowerFollowsConfidence: a drafter sure of one continuation gets a
// chain as deep as allowed; one torn between two gets both branches.
func TestGrowerFollowsConfidence(t *testing.T) {
	sure := func(path []int32, k int) ([]int32, []float32, [][]float32) {
		return []int32{1, 2}, []float32{0.99, 0.01}, nil
	}
	torn := func(path []int32, k int) ([]int32, []float32, [][]float32) {
		if len(path) == 0 {
			return []int32{1, 2}, []float32{0.5, 0.5}, nil
		}
		return []int32{3, 4}, []float32{0.99, 0.01}, nil
	}
	sh := DynamicShape(8, 8, 2)
	var g grower
	var tr Tree
	g.reset(sh)
	g.grow(&tr, nil, sure)
	if d := tr.Depths(nil); tr.Len() != 8 || d[7] != 8 {
		t.Errorf("sure drafter: have %v / %v; want a chain of 8", tr.Tokens, tr.Parent)
	}
	g.reset(sh)
	g.grow(&tr, nil, torn)
	roots := 0
	for _, p := range tr.Parent {
		if p == -1 {
			roots++
		}
	}
	if roots != 2 || tr.Len() != 8 {
		t.Errorf("torn drafter: have %v / %v; want both first tokens, 8 nodes", tr.Tokens, tr.Parent)
	}
}

// TestGrowerMinScore: a confident shape keeps only the nodes whose path
// score reaches its minimum: a drafter sure for three tokens and then
// unsure gets a chain of three, however large the budget; one unsure from
// the start gets nothing.
func TestGrowerMinScore(t *testing.T) {
	for _, tc := range []struct {
		name  string
		p     []float32 // the drafter's confidence at each depth
		nodes int
	}{
		{"sure then unsure", []float32{0.95, 0.95, 0.95, 0.2, 0.2, 0.2, 0.2, 0.2}, 3},
		{"sure throughout", []float32{0.99, 0.99, 0.99, 0.99, 0.99, 0.99, 0.99, 0.99}, 8},
		{"unsure", []float32{0.2, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9}, 0},
	} {
		cands := func(path []int32, k int) ([]int32, []float32, [][]float32) {
			p := tc.p[len(path)]
			return []int32{int32(len(path) + 1), 100}, []float32{p, p / 4}, nil
		}
		sh := Confident(8, 8, 2, 0.3)
		var g grower
		var tr Tree
		g.reset(sh)
		g.grow(&tr, nil, cands)
		if tr.Len() != tc.nodes {
			t.Errorf("%s: have %v / %v; want %d nodes", tc.name, tr.Tokens, tr.Parent, tc.nodes)
		}
		for _, n := range g.nodes {
			if n.score < sh.MinScore {
				t.Errorf("%s: node %d grown at score %.3f < %.2f", tc.name, n.tok, n.score, sh.MinScore)
			}
		}
	}
	if sh := Confident(8, 8, 2, 0.3); sh.Name != "dyn8d8w2s30" || !sh.Dynamic || sh.MinScore != 0.3 {
		t.Errorf("Confident(8, 8, 2, 0.3) = %s (dynamic %v, min %.2f); want dyn8d8w2s30, dynamic, 0.30", sh.Name, sh.Dynamic, sh.MinScore)
	}
}

// TestDraftModelDynamic: the draft model grows dynamic trees within the
// budget, the same tree twice, with or without tree attention in its
// backend (then the growth is a chain).
func TestDraftModelDynamic(t *testing.T) {
	p := storiesPair(t)
	prompt := p.prompts[0]
	for _, tc := range []struct {
		name  string
		draft func(t *testing.T) *DraftModel
	}{
		{"tree", func(t *testing.T) *DraftModel {
			d, err := NewDraftModel(p.draft, 2, 128)
			if err != nil {
				t.Fatal(err)
			}
			return d
		}},
		{"chain", func(t *testing.T) *DraftModel {
			// Embedding only the interface hides the backend's tree ops.
			m := loadOn(t, testmodels.Path(t, testmodels.Stories260KQ4_0), struct{ kernels.Backend }{openBackend(t)})
			d, err := NewDraftModel(m, 2, 128)
			if err != nil {
				t.Fatal(err)
			}
			return d
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := tc.draft(t)
			for _, sh := range []Shape{Dynamic(4), Dynamic(16), Dynamic(48)} {
				var a, b Tree
				ctx := []Context{{Slot: 0, Tokens: prompt, Shape: sh}}
				if err := d.Propose(ctx, []*Tree{&a}); err != nil {
					t.Fatal(err)
				}
				// Slot 1 starts cold: same tree from a fresh KV.
				ctx[0].Slot = 1
				if err := d.Propose(ctx, []*Tree{&b}); err != nil {
					t.Fatal(err)
				}
				if err := a.Validate(); err != nil || a.Len() == 0 || a.Len() > sh.Len() {
					t.Fatalf("%s: have %d nodes (%v); want 1 to %d", sh.Name, a.Len(), err, sh.Len())
				}
				if !slices.Equal(a.Tokens, b.Tokens) || !slices.Equal(a.Parent, b.Parent) {
					t.Errorf("%s: slots differ: %v/%v vs %v/%v", sh.Name, a.Tokens, a.Parent, b.Tokens, b.Parent)
				}
				// Every node's first child is the draft's argmax after its
				// path, as plain decoding with the draft computes it: the
				// tree pass sees exactly each node's ancestors.
				checked := map[int32]bool{}
				for i, par := range a.Parent {
					if checked[par] {
						continue
					}
					checked[par] = true
					ctx := slices.Clone(prompt)
					var path []int32
					for j := par; j >= 0; j = a.Parent[j] {
						path = append(path, a.Tokens[j])
					}
					slices.Reverse(path)
					ctx = append(ctx, path...)
					if want := plainGreedy(t, p.draft, [][]int32{ctx}, 1)[0][0]; a.Tokens[i] != want {
						t.Errorf("%s: after path %v: have first child %d; want the draft's argmax %d", sh.Name, path, a.Tokens[i], want)
					}
				}
				t.Logf("%s: %s", sh.Name, fmt.Sprint(a.Tokens, a.Parent))
			}
		})
	}
}

// TestDispatcherBudgets: the default dispatcher keeps speculation off for
// large batches, whatever it measured elsewhere; for small ones it picks
// the dynamic budget that measures fastest, and a pick the caller cut to
// its main chain still counts for the budget it came from.
func TestDispatcherBudgets(t *testing.T) {
	d := NewDispatcher(nil)
	// Step cost grows with the tree's nodes, acceptance with the budget
	// but with diminishing returns, and a static shape accepts less than
	// a dynamic one of its size: the best is 16 nodes at batch 1, 4 at
	// batch 8 (where each node costs 8 times as much) and none at 16
	// (each by ≥ 8%).
	acc := func(s Shape) float64 {
		if s.Off() {
			return 0
		}
		a := 3 * (1 - math.Exp(-float64(s.Len())/10))
		if !s.Dynamic {
			a *= 0.75
		}
		return a
	}
	cost := func(batch int, s Shape) time.Duration {
		return time.Duration(float64(time.Millisecond) * (1 + 0.025*float64(batch*s.Len())))
	}
	for _, tc := range []struct {
		batch int
		want  string
	}{{1, "dyn16"}, {8, "dyn4"}, {16, "off"}, {17, "off"}, {32, "off"}, {200, "off"}} {
		picks := map[string]int{}
		carry := map[string]float64{}
		for range 400 {
			s := d.Pick(tc.batch)
			picks[s.Name]++
			played := s
			if tc.batch == 8 && s.Dynamic {
				// A caller that cut the pick (say to its main chain)
				// reports what it ran; the budget gets the credit.
				played = mainChain(s)
			}
			// Whole tokens per step, the fractions carried over to the
			// shape's next step: the mean rate without draws.
			carry[s.Name] += float64(tc.batch) * acc(s)
			tok := math.Floor(carry[s.Name])
			carry[s.Name] -= tok
			d.Observe(tc.batch, tc.batch, played, tc.batch+int(tok), cost(tc.batch, s))
		}
		best, n := "", 0
		for k, v := range picks {
			if v > n {
				best, n = k, v
			}
		}
		if best != tc.want || n < 300 {
			t.Errorf("batch %d: have picks %v; want mostly %s (stats %+v)", tc.batch, picks, tc.want, d.Stats(tc.batch))
		}
	}
}

// TestNGramConversation: lookup drafts from earlier turns (History) as well
// as the sequence's own tokens, follows the conversation as it grows, and
// forgets a slot's conversation when the slot is freed.
func TestNGramConversation(t *testing.T) {
	// An earlier turn held the paragraph 50..59; the current prompt asks
	// to repeat it and has begun quoting it.
	para := []int32{50, 51, 52, 53, 54, 55, 56, 57, 58, 59}
	history := slices.Concat([]int32{1, 7, 8, 9}, para, []int32{2, 10, 11})
	prompt := []int32{1, 20, 21, 22, 50, 51, 52}
	for _, sh := range []Shape{Chain(4), Bushy, Dynamic(8), Dynamic(16)} {
		t.Run(sh.Name, func(t *testing.T) {
			g := &NGram{}
			var tr Tree
			if err := g.Propose([]Context{{Slot: 3, Tokens: prompt, History: history, Shape: sh}}, []*Tree{&tr}); err != nil {
				t.Fatal(err)
			}
			if err := tr.Validate(); err != nil || tr.Len() > sh.Len() {
				t.Fatalf("have %d nodes (%v); want at most %d", tr.Len(), err, sh.Len())
			}
			// The leading chain is the rest of the paragraph.
			want := para[3 : 3+min(4, sh.MaxDepth)]
			if tr.Len() < len(want) || !slices.Equal(tr.Tokens[:len(want)], want) {
				t.Errorf("have %v; want it to start with %v", tr.Tokens, want)
			}
			// Without the history there is nothing to copy.
			if err := g.Propose([]Context{{Slot: 4, Tokens: prompt, Shape: sh}}, []*Tree{&tr}); err != nil {
				t.Fatal(err)
			}
			if slices.Contains(tr.Tokens, 53) {
				t.Errorf("without history: have %v; want no 53", tr.Tokens)
			}
			// The conversation grows (generated tokens): the index follows.
			grown := slices.Concat(prompt, para[3:6])
			if err := g.Propose([]Context{{Slot: 3, Tokens: grown, History: history, Shape: sh}}, []*Tree{&tr}); err != nil {
				t.Fatal(err)
			}
			if tr.Len() == 0 || tr.Tokens[0] != 56 {
				t.Errorf("after growing: have %v; want 56 first", tr.Tokens)
			}
			// A new request in the freed slot does not see the old one.
			g.Rewind(3, 0)
			if err := g.Propose([]Context{{Slot: 3, Tokens: []int32{1, 50, 51}, Shape: sh}}, []*Tree{&tr}); err != nil {
				t.Fatal(err)
			}
			if tr.Len() != 0 {
				t.Errorf("new request in freed slot: have %v; want nothing", tr.Tokens)
			}
		})
	}
}

// TestNGramIndexMatchesScan: the indexed lookup returns what a plain scan
// of the conversation does, on random conversations with shared n-grams,
// rewound and regrown.
func TestNGramIndexMatchesScan(t *testing.T) {
	scan := func(hay []int32, k int) []int32 {
		var out []int32
		end := len(hay)
		for n := min(4, end-1); n >= 1 && len(out) < k; n-- {
			suf := hay[end-n:]
			for s := end - n - 1; s >= 0 && len(out) < k; s-- {
				if slices.Equal(hay[s:s+n], suf) && !slices.Contains(out, hay[s+n]) {
					out = append(out, hay[s+n])
				}
			}
		}
		return out
	}
	r := uint64(1)
	next := func(n int) int32 {
		r = r*6364136223846793005 + 1442695040888963407
		return int32(r>>33) % int32(n)
	}
	ix := &ngramIndex{at: map[int32][]int32{}}
	var hay []int32
	for i := range 400 {
		if i%50 == 49 && len(hay) > 10 {
			hay = hay[:len(hay)-int(next(10))] // a rewind
		} else {
			hay = append(hay, next(6))
		}
		split := int(next(len(hay) + 1))
		ix.sync(hay[:split], hay[split:])
		for tok, at := range ix.at {
			var want []int32
			for p, x := range hay {
				if x == tok {
					want = append(want, int32(p))
				}
			}
			if !slices.Equal(at, want) {
				t.Fatalf("step %d: token %d indexed at %v; occurs at %v", i, tok, at, want)
			}
		}
		have, ps := ngramQuery{ix: ix, minN: 1, maxN: 4, scan: 1 << 20}.lookup(nil, 4, nil)
		if want := scan(hay, 4); !slices.Equal(have, want) {
			t.Fatalf("step %d, hay %v: have %v; want %v", i, hay, have, want)
		}
		for _, p := range ps {
			if !(p > 0 && p < 1) {
				t.Fatalf("confidence %v outside (0, 1)", p)
			}
		}
	}
}

// TestCalibration: after a tree is verified, each child of an accepted
// node counts as accepted or not at the drafter's probability for it, and
// the calibrated rate moves from that probability to what was observed; a
// tree never verified (nothing committed since) or drafted for another
// sequence teaches nothing.
func TestCalibration(t *testing.T) {
	// Root children 10 (p .45) and 11 (p .30); under 10, 12 (p .45) and
	// 13 (p .05); under 11, 14 (p .45).
	var tr Tree
	tr.Add(10, -1, nil)
	tr.Add(12, 0, nil)
	tr.Add(13, 0, nil)
	tr.Add(11, -1, nil)
	tr.Add(14, 3, nil)
	ps := []float32{0.45, 0.45, 0.05, 0.30, 0.45}
	tokens := []int32{1, 2, 3}
	record := func() *feedback {
		fb := &feedback{p: slices.Clone(ps)}
		fb.record(&tr, tokens)
		return fb
	}
	tests := []struct {
		name      string
		committed []int32
		// want: observations (tries, hits) in the buckets of .45, .30, .05
		want [3][2]int
	}{
		// 10 accepted, then 12, then the target's own 99: children of
		// root (10 ✓, 11 ✗), of 10 (12 ✓, 13 ✗), of 12 (none).
		{"path", []int32{10, 12, 99}, [3][2]int{{2, 2}, {1, 0}, {1, 0}}},
		// The target picked 11: 10 ✗, 11 ✓, then 14 ✗.
		{"branch", []int32{11, 7}, [3][2]int{{2, 0}, {1, 1}, {0, 0}}},
		{"nothing_committed", nil, [3][2]int{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c calibration
			fb := record()
			c.learn(fb, slices.Concat(tokens, tt.committed))
			for i, p := range []float32{0.45, 0.30, 0.05} {
				b := calBucket(p)
				if have := [2]int{int(math.Round(c.try[b])), int(math.Round(c.hit[b]))}; have != tt.want[i] {
					t.Errorf("p=%.2f: have %d tries, %d hits; want %v", p, have[0], have[1], tt.want[i])
				}
			}
			if fb.base != 0 || fb.tree.Len() != 0 {
				t.Errorf("feedback kept after learning")
			}
		})
	}
	// Another sequence (its root differs): nothing learnt.
	var c calibration
	c.learn(record(), []int32{1, 2, 4, 10})
	if c.try != ([calBuckets]float64{}) {
		t.Errorf("learnt from another sequence: %v", c.try)
	}
	// A draft whose .30 candidates are always accepted: the rate climbs
	// from .30 towards 1; one whose .45 candidates never are: towards 0.
	for range 200 {
		c.observe(0.30, true)
		c.observe(0.45, false)
	}
	if r := c.rate(0.30); r < 0.9 {
		t.Errorf("rate(.30) after 200 acceptances: have %.3f; want ≥ 0.9", r)
	}
	if r := c.rate(0.45); r > 0.1 {
		t.Errorf("rate(.45) after 200 rejections: have %.3f; want ≤ 0.1", r)
	}
	if r := c.rate(0.75); r != 0.75 {
		t.Errorf("rate(.75) unobserved: have %.3f; want .75", r)
	}
}

// TestDispatcherSlowRetries: an option far slower than the leader is
// re-tried more rarely than one a little slower, so exploring a budget
// that costs many plain steps stays cheap.
func TestDispatcherSlowRetries(t *testing.T) {
	retries := func(slow time.Duration) int {
		d := NewDispatcher([]Tier{{MaxBatch: 0, Shapes: []Shape{Chain(4)}}})
		n := 0
		for range 3000 {
			s := d.Pick(1)
			el := time.Millisecond
			if !s.Off() {
				n++
				el = slow
			}
			d.Observe(1, 1, s, 1, el)
		}
		return n
	}
	a, b := retries(2*time.Millisecond), retries(16*time.Millisecond)
	if b >= a || b > 6 {
		t.Errorf("have %d re-tries of a 2x slower option, %d of a 16x slower one; want fewer of the slower, ≤ 6", a, b)
	}
	t.Logf("re-tries in 3000 steps: 2x slower %d, 16x slower %d", a, b)
}

// TestSampledDynamicSameAsPlain: a sampled request's draws are keyed by
// (seed, position), so with speculation on its output must be its output
// with speculation off, token for token, whatever tree was drafted: here
// dynamic trees from both drafters, whose sampled drafts carry the
// draft's distributions, over many seeds at once.
func TestSampledDynamicSameAsPlain(t *testing.T) {
	p := storiesPair(t)
	const n, maxTok = 16, 24
	reqs := make([]Request, n)
	for i := range reqs {
		reqs[i] = Request{Prompt: p.repeats[i%len(p.repeats)], MaxTokens: maxTok,
			Params: sample.Params{Temperature: 0.8, TopP: 0.95, Seed: uint64(100 + i)}}
	}
	want, err := newRunner(t, p.target, nil, n, 128, &Off).Run(reqs)
	if err != nil {
		t.Fatal(err)
	}
	run := func(t *testing.T, d Drafter, shape Shape) (same int, r *Runner) {
		r = newRunner(t, p.target, d, n, 128, &shape)
		res, err := r.Run(reqs)
		if err != nil {
			t.Fatal(err)
		}
		for i := range res {
			if slices.Equal(res[i].Tokens, want[i].Tokens) {
				same++
			}
		}
		return same, r
	}
	// The test can fail: taking drafts unverified changes outputs.
	t.Run("bad_rule", func(t *testing.T) {
		BadAcceptance(t)
		d, err := NewDraftModel(p.draft, n, 128)
		if err != nil {
			t.Fatal(err)
		}
		if same, _ := run(t, d, Dynamic(8)); same == n {
			t.Errorf("unverified drafts: all %d outputs as without speculation; want the test to notice", n)
		}
	})
	for dname, d := range drafters(t, p, n, 128) {
		for _, shape := range []Shape{Dynamic(8), Dynamic(24)} {
			t.Run(dname+"/"+shape.Name, func(t *testing.T) {
				same, r := run(t, d, shape)
				if same != n {
					t.Errorf("have %d of %d outputs as without speculation; want all", same, n)
				}
				st := r.Stats()
				if st.Accepted == 0 {
					t.Errorf("no draft accepted: the test exercises nothing")
				}
				t.Logf("%.2f tokens per step", float64(st.Tokens)/float64(max(st.SeqSteps, 1)))
			})
		}
	}
}
