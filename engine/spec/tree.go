// Package spec is speculative decoding: drafters propose a tree of likely
// next tokens per sequence, the target model verifies the whole tree in one
// forward pass with tree attention, and an acceptance rule keeps the longest
// path the target agrees with, losslessly.
//
// The pieces, each usable alone:
//
//   - Shape: a static tree topology (chains, bushy trees), precomputed.
//   - Drafter: fills a Shape with tokens for one step (NGram: prompt lookup
//     over the sequence and its session history; DraftModel: a smaller or
//     quantized model of the same vocabulary with its own paged KV).
//   - Dispatcher: picks a Shape per step by batch size, measured throughput
//     and per-tenant Policy (bushy at batch 1, short chains or off when the
//     batch is large).
//   - VerifyWalk: walks the tree along the tokens plain decoding picks
//     (sampled requests draw keyed by seed and position), so the output is
//     the plain output token for token.
//   - Step: one speculative step (tree batch, verification, K/V
//     compaction, drafter rewind, dispatcher observation), driven by the
//     engine and by Runner, a harness over a model.Model and a paged KV
//     cache for benchmarks and tests.
package spec

import (
	"errors"
	"fmt"
	"math"
	"slices"
)

// ErrShape is wrapped by errors about malformed shapes and trees.
var ErrShape = errors.New("spec: bad tree")

// Tree is one sequence's draft for one step. Node i is token Tokens[i],
// child of node Parent[i], or of the root (the sequence's last committed
// token, not yet in the KV cache) when Parent[i] is -1. Parents come before
// their children. Siblings are tried in index order by the verifier.
type Tree struct {
	Tokens []int32
	Parent []int32
	// Q[i] is the draft distribution node i's token was drawn from (over
	// the vocabulary), or nil when the drafter chose it deterministically
	// (a point mass: n-gram lookup, greedy drafting). Siblings drawn from
	// the same distribution may share the slice.
	Q [][]float32
}

// Len is the number of draft nodes (the root not counted).
func (t *Tree) Len() int { return len(t.Tokens) }

// Reset empties the tree, keeping its capacity.
func (t *Tree) Reset() { t.Tokens, t.Parent, t.Q = t.Tokens[:0], t.Parent[:0], t.Q[:0] }

// Add appends a node and returns its index.
func (t *Tree) Add(tok, parent int32, q []float32) int32 {
	t.Tokens = append(t.Tokens, tok)
	t.Parent = append(t.Parent, parent)
	t.Q = append(t.Q, q)
	return int32(len(t.Tokens) - 1)
}

// Validate checks the tree's structure: equal lengths, parents before
// children.
func (t *Tree) Validate() error {
	if len(t.Parent) != len(t.Tokens) || len(t.Q) != len(t.Tokens) {
		return fmt.Errorf("%w: %d tokens, %d parents, %d distributions", ErrShape, len(t.Tokens), len(t.Parent), len(t.Q))
	}
	for i, p := range t.Parent {
		if p < -1 || int(p) >= i {
			return fmt.Errorf("%w: node %d has parent %d", ErrShape, i, p)
		}
	}
	return nil
}

// Depths returns each node's depth (1 for a child of the root) in dst.
func (t *Tree) Depths(dst []int32) []int32 {
	dst = dst[:0]
	for _, p := range t.Parent {
		d := int32(1)
		if p >= 0 {
			d = dst[p] + 1
		}
		dst = append(dst, d)
	}
	return dst
}

// Shape is a static tree topology that a drafter fills with tokens. Node i
// is the Rank[i]-th candidate (0 = the drafter's best) after its parent
// Parent[i] (-1 = the root); parents come before children, and the nodes of
// the rank-0 chain come first, so a fully accepted main path needs no KV
// compaction. A Shape is immutable once built.
type Shape struct {
	Name   string
	Parent []int32
	Rank   []int32
	Depth  []int32 // 1 for children of the root
	// MaxDepth is the deepest node's depth: the most tokens a step can
	// accept (plus one from the target).
	MaxDepth int
	// Dynamic makes the shape a budget rather than a topology, as EAGLE-2
	// drafts: a drafter that knows its own confidence grows the tree
	// best-first by cumulative path probability, at most Len() nodes and
	// MaxDepth deep, expanding up to Width nodes per depth into up to
	// Width children each, and keeps the Len() likeliest nodes. Parent,
	// Rank and Depth then describe a static tree of the same budget (the
	// envelope, see DynamicShape) that drafters without a confidence fill
	// instead; its main chain is MaxDepth long, so a verifier without tree
	// attention still gets a full chain. Whatever the drafter does, the
	// result is an ordinary Tree of at most Len() nodes.
	Dynamic bool
	// Width bounds a dynamic tree's branching (see Dynamic); 0 for static
	// shapes.
	Width int
	// MinScore, for a dynamic shape, leaves out nodes whose estimated
	// chance of being accepted (the product of their path's calibrated
	// acceptance rates) is below it: a node costs a row of the target's
	// pass whether it is accepted or not, so where the drafter is unsure
	// the tree stays small, and where it is sure it may use the whole
	// budget. Zero keeps the budget's likeliest nodes whatever they are.
	MinScore float64
}

// Len is the number of nodes.
func (s Shape) Len() int { return len(s.Parent) }

// Off reports whether the shape drafts nothing (plain decoding).
func (s Shape) Off() bool { return len(s.Parent) == 0 }

// within returns s without its nodes deeper than depth, under the same
// name (a dynamic shape keeps its width and grows no deeper).
func (s Shape) within(depth int) Shape {
	if s.MaxDepth <= depth {
		return s
	}
	out := Shape{Name: s.Name, Dynamic: s.Dynamic, Width: s.Width, MinScore: s.MinScore}
	idx := make([]int32, s.Len())
	for i, p := range s.Parent {
		idx[i] = -1
		if int(s.Depth[i]) > depth {
			continue // parents come first: so are its descendants
		}
		if p >= 0 {
			p = idx[p]
		}
		idx[i] = int32(out.Len())
		out.Parent = append(out.Parent, p)
		out.Rank = append(out.Rank, s.Rank[i])
		out.Depth = append(out.Depth, s.Depth[i])
		out.MaxDepth = max(out.MaxDepth, int(s.Depth[i]))
	}
	return out
}

// chain reports whether s is a static chain: node i the best candidate
// after node i-1.
func (s Shape) chain() bool {
	if s.Dynamic || s.Off() {
		return false
	}
	for i, p := range s.Parent {
		if p != int32(i-1) || s.Rank[i] != 0 {
			return false
		}
	}
	return true
}

// Chain returns the chain of k nodes (k ≤ 0 gives the empty shape: off).
func Chain(k int) Shape {
	paths := make([][]int, max(k, 0))
	for i := range paths {
		paths[i] = make([]int, i+1)
	}
	s, _ := ShapeFromPaths(fmt.Sprintf("chain%d", max(k, 0)), paths)
	return s
}

// ShapeFromPaths builds a shape from root-to-node paths of sibling ranks,
// the way Medusa and EAGLE describe their sparse trees: [0] is the best
// first token, [0 1] the second-best token after it, and so on. Every
// path's proper prefixes must be present too. The nodes are laid out in
// depth-first order with lower ranks first.
func ShapeFromPaths(name string, paths [][]int) (Shape, error) {
	type node struct {
		kids map[int]*node
		rank int
	}
	root := &node{kids: map[int]*node{}}
	have := map[string]bool{}
	for _, p := range paths {
		have[fmt.Sprint(p)] = true
	}
	for _, p := range paths {
		if len(p) == 0 {
			return Shape{}, fmt.Errorf("%w: %s: empty path", ErrShape, name)
		}
		for i := 1; i < len(p); i++ {
			if !have[fmt.Sprint(p[:i])] {
				return Shape{}, fmt.Errorf("%w: %s: path %v without its prefix %v", ErrShape, name, p, p[:i])
			}
		}
		n := root
		for _, r := range p {
			if r < 0 {
				return Shape{}, fmt.Errorf("%w: %s: negative rank in %v", ErrShape, name, p)
			}
			c := n.kids[r]
			if c == nil {
				c = &node{kids: map[int]*node{}, rank: r}
				n.kids[r] = c
			}
			n = c
		}
	}
	s := Shape{Name: name}
	var walk func(n *node, parent int32, depth int32)
	walk = func(n *node, parent int32, depth int32) {
		// Ranks in ascending order: the main (rank-0) chain first.
		for r := 0; len(n.kids) > 0; r++ {
			c := n.kids[r]
			if c == nil {
				if r > 64 {
					break
				}
				continue
			}
			delete(n.kids, r)
			idx := int32(len(s.Parent))
			s.Parent = append(s.Parent, parent)
			s.Rank = append(s.Rank, int32(r))
			s.Depth = append(s.Depth, depth)
			s.MaxDepth = max(s.MaxDepth, int(depth))
			walk(c, idx, depth+1)
		}
	}
	walk(root, -1, 1)
	if len(s.Parent) != len(have) {
		return Shape{}, fmt.Errorf("%w: %s: ranks above 64", ErrShape, name)
	}
	return s, nil
}

func mustShape(name string, paths [][]int) Shape {
	s, err := ShapeFromPaths(name, paths)
	if err != nil {
		panic(err) // only for the package's literal presets
	}
	return s
}

// Preset shapes.
var (
	// Bushy is a 16-node tree in the style of Medusa's and EAGLE's default
	// sparse trees: wide near the root where the drafter is least sure,
	// a long main chain where it is on a roll.
	Bushy = mustShape("bushy16", [][]int{
		{0}, {1}, {2}, {3},
		{0, 0}, {0, 1}, {0, 2}, {1, 0}, {1, 1}, {2, 0},
		{0, 0, 0}, {0, 0, 1}, {0, 1, 0}, {1, 0, 0},
		{0, 0, 0, 0}, {0, 0, 0, 0, 0},
	})
	// Wide is a small 8-node tree: a chain of four with alternatives at the
	// first two levels.
	Wide = mustShape("wide8", [][]int{
		{0}, {1}, {2}, {0, 0}, {0, 1}, {1, 0}, {0, 0, 0}, {0, 0, 0, 0},
	})
)

// DynamicShape returns the dynamic shape of budget nodes (at most
// MaxTreeNodes), depth levels and width (see Shape.Dynamic); it is named
// "dyn<budget>", or "dyn<budget>d<depth>w<width>" off the defaults of
// Dynamic. Its envelope is the rank-0 chain of depth nodes, then the nodes
// a best-first expansion would add if rank r of every node had prior
// probability 2^-(r+1), so drafters that fill it statically put the spare
// nodes where a typical drafter's confidence would.
func DynamicShape(budget, depth, width int) Shape {
	budget = min(max(budget, 0), MaxTreeNodes)
	depth, width = max(depth, 1), max(width, 1)
	if budget == 0 {
		return Off
	}
	name := fmt.Sprintf("dyn%d", budget)
	if dd, dw := dynDefaults(budget); dd != depth || dw != width {
		name = fmt.Sprintf("dyn%dd%dw%d", budget, depth, width)
	}
	type cand struct {
		path  []int
		score float64
	}
	var paths [][]int
	var front []cand
	for d := 1; d <= min(depth, budget); d++ {
		p := make([]int, d)
		paths = append(paths, p)
		for r := 1; r < width; r++ {
			front = append(front, cand{append(slices.Clone(p[:d-1]), r), math.Pow(0.5, float64(d+r))})
		}
	}
	if depth < budget {
		// The chain's own rank-0 children are in it already; a chain
		// node's rank ≥ 1 children (added above) and their descendants
		// compete by score, ties to the earlier candidate.
		for len(paths) < budget && len(front) > 0 {
			best := 0
			for i, c := range front {
				if c.score > front[best].score {
					best = i
				}
			}
			c := front[best]
			front = slices.Delete(front, best, best+1)
			paths = append(paths, c.path)
			if len(c.path) < depth {
				for r := range width {
					front = append(front, cand{append(slices.Clone(c.path), r), c.score * math.Pow(0.5, float64(r+1))})
				}
			}
		}
	}
	s := mustShape(name, paths)
	s.Dynamic, s.Width = true, width
	s.MaxDepth = min(depth, budget)
	return s
}

// Confident returns DynamicShape(budget, depth, width) with MinScore
// minScore, named "dyn<budget>d<depth>w<width>s<minScore in hundredths>".
func Confident(budget, depth, width int, minScore float64) Shape {
	s := DynamicShape(budget, depth, width)
	if s.Off() || minScore <= 0 {
		return s
	}
	s.Name = fmt.Sprintf("dyn%dd%dw%ds%d", s.Len(), s.MaxDepth, s.Width, int(math.Round(minScore*100)))
	s.MinScore = minScore
	return s
}

// Dynamic returns the dynamic shape of budget nodes with the default depth
// and width for that budget.
func Dynamic(budget int) Shape {
	d, w := dynDefaults(budget)
	return DynamicShape(budget, d, w)
}

// dynDefaults are the depth and width of Dynamic(budget): deep enough for
// the main chain to use about half of the budget, wide enough that the rest
// can branch where the drafter hesitates.
func dynDefaults(budget int) (depth, width int) {
	switch {
	case budget <= 4:
		return budget, 2
	case budget <= 8:
		return 5, 3
	case budget <= 16:
		return 6, 4
	default:
		return 8, 4
	}
}

// grower builds one dynamic tree, layer by layer: the root is expanded
// first, then at each depth the Width likeliest nodes of the newest layer
// (by cumulative path probability under the drafter, ties to the earlier
// node), skipping any that could no longer be among the Len() likeliest;
// at the end the Len() likeliest nodes are kept. A path's probability never
// exceeds its parent's, so what is kept is a tree. The caller expands the
// nodes that frontier returns (with add) and then calls next, so a model
// drafter can run one layer of all its sequences in one batch.
type grower struct {
	sh     Shape
	expand int // nodes expanded per layer: sh.Width, or 1 for a chain
	// cal, when set, turns the drafter's probabilities into acceptance
	// rates before they multiply along a path.
	cal   *calibration
	nodes []gnode
	layer int // first node of the newest layer
	depth int // layers added so far
	pick  []int32
	kids  [][]int32
	// grow's frontier and path, reused from tree to tree.
	front, path []int32
}

type gnode struct {
	tok    int32
	parent int32
	depth  int32
	p      float32 // the drafter's probability given the parent
	score  float64
	q      []float32
}

func (g *grower) reset(sh Shape) {
	g.sh, g.expand, g.nodes, g.layer, g.depth, g.cal = sh, sh.Width, g.nodes[:0], 0, 0, nil
}

// better orders nodes a and b: higher score first, then lower index.
func (g *grower) better(a, b int32) bool {
	sa, sb := g.nodes[a].score, g.nodes[b].score
	return sa > sb || sa == sb && a < b
}

// frontier returns the nodes to expand next, best first; -1 stands for the
// root. Empty when the tree is done.
func (g *grower) frontier(dst []int32) []int32 {
	dst = dst[:0]
	if g.depth == 0 {
		return append(dst, -1)
	}
	if g.depth >= g.sh.MaxDepth {
		return dst
	}
	budget := g.sh.Len()
	for i := g.layer; i < len(g.nodes); i++ {
		n := int32(i)
		// A node with budget nodes ahead of it cannot be kept, nor can
		// its descendants (they score no higher).
		ahead := 0
		for j := range g.nodes {
			if g.better(int32(j), n) {
				ahead++
			}
		}
		if ahead >= budget {
			continue
		}
		at, _ := slices.BinarySearchFunc(dst, n, func(a, b int32) int {
			if g.better(a, b) {
				return -1
			}
			return 1
		})
		dst = slices.Insert(dst, at, n)
		if len(dst) > g.expand {
			dst = dst[:g.expand]
		}
	}
	return dst
}

// add gives parent (-1: the root) its children toks, best first, with their
// probabilities p under the drafter and their draft distributions qs (nil:
// point masses). Probabilities are clamped to [0, 1]; children with none
// are dropped.
func (g *grower) add(parent int32, toks []int32, p []float32, qs [][]float32) {
	base, depth := 1.0, int32(1)
	if parent >= 0 {
		base, depth = g.nodes[parent].score, g.nodes[parent].depth+1
	}
	for i, t := range toks[:min(len(toks), g.sh.Width)] {
		pr := float64(min(max(p[i], 0), 1))
		if pr <= 0 || math.IsNaN(pr) {
			continue
		}
		var q []float32
		if qs != nil {
			q = qs[i]
		}
		acc := pr
		if g.cal != nil {
			acc = g.cal.rate(float32(pr))
		}
		if base*acc < g.sh.MinScore {
			continue // nor are its descendants kept: they score lower
		}
		g.nodes = append(g.nodes, gnode{tok: t, parent: parent, depth: depth, p: float32(pr), score: base * acc, q: q})
	}
}

// next closes the layer being added.
func (g *grower) next() {
	if g.depth > 0 {
		// The layer expanded was nodes [g.layer, the end before this
		// layer's adds); the new layer starts after them.
		for g.layer < len(g.nodes) && g.nodes[g.layer].depth <= int32(g.depth) {
			g.layer++
		}
	}
	g.depth++
}

// grow builds the whole tree into t with cands, which returns up to k
// children of a path (the tokens below the root) with their probabilities
// and draft distributions: for drafters that compute one node at a time.
// fb, when not nil, gets the nodes' probabilities (see emit).
func (g *grower) grow(t *Tree, fb *feedback, cands candFunc) {
	for {
		g.front = g.frontier(g.front)
		if len(g.front) == 0 {
			break
		}
		for _, node := range g.front {
			g.path = g.pathOf(node, g.path)
			toks, ps, qs := cands(g.path, g.sh.Width)
			g.add(node, toks, ps, qs)
		}
		g.next()
	}
	g.emit(t, fb)
}

// pathOf writes node's tokens from the first below the root to node
// itself.
func (g *grower) pathOf(node int32, dst []int32) []int32 {
	dst = dst[:0]
	for j := node; j >= 0; j = g.nodes[j].parent {
		dst = append(dst, g.nodes[j].tok)
	}
	slices.Reverse(dst)
	return dst
}

// emit writes the Len() likeliest nodes to t (reset first), depth first
// with the likeliest child first, so the likeliest path leads and needs no
// KV compaction when it is accepted whole. When fb is not nil it records
// the tree for calibration (see feedback).
func (g *grower) emit(t *Tree, fb *feedback) {
	t.Reset()
	n := int32(len(g.nodes))
	g.pick = g.pick[:0]
	for i := range n {
		g.pick = append(g.pick, i)
	}
	slices.SortFunc(g.pick, func(a, b int32) int {
		if g.better(a, b) {
			return -1
		}
		return 1
	})
	keep := g.pick[:min(int(n), g.sh.Len())]
	// kids[p+1] lists the kept children of p, best first (keep is in that
	// order already).
	g.kids = slices.Grow(g.kids[:0], int(n)+1)[:n+1]
	for i := range g.kids {
		g.kids[i] = g.kids[i][:0]
	}
	for _, i := range keep {
		p := g.nodes[i].parent
		g.kids[p+1] = append(g.kids[p+1], i)
	}
	if fb != nil {
		fb.p = fb.p[:0]
	}
	g.walk(t, fb, -1, -1)
}

// walk adds node's kept children (node -1: the root's) under tree node
// parent, each followed by its own, depth first.
func (g *grower) walk(t *Tree, fb *feedback, node, parent int32) {
	for _, c := range g.kids[node+1] {
		idx := t.Add(g.nodes[c].tok, parent, g.nodes[c].q)
		if fb != nil {
			fb.p = append(fb.p, g.nodes[c].p)
		}
		g.walk(t, fb, c, idx)
	}
}

// calBuckets is how finely a calibration splits the probability range.
const calBuckets = 16

// calibration learns how often a drafter's candidate is accepted (given
// that its parent was) as a function of the probability the drafter gave
// it. A draft's probability is its confidence, not the chance that the
// target agrees: a draft model close to its target has its top token
// accepted far more often than its flat distribution says, a loose one
// less, and n-gram counts are no probability at all. Growing trees by the
// calibrated rate puts the budget where drafts are accepted. Counts decay,
// so the rates follow the traffic; with no observations a bucket's rate is
// the probability itself. Speculation stays lossless whatever the rates
// are: they only shape the tree.
type calibration struct {
	hit, try [calBuckets]float64
}

// calPrior is the weight, in observations, of the uncalibrated rate.
const calPrior = 4

// calDecay is how much an observation's weight shrinks per later
// observation in its bucket.
const calDecay = 0.995

func calBucket(p float32) int {
	return min(max(int(p*calBuckets), 0), calBuckets-1)
}

// rate is the calibrated acceptance rate of a candidate of probability p.
func (c *calibration) rate(p float32) float64 {
	b := calBucket(p)
	return (c.hit[b] + calPrior*float64(p)) / (c.try[b] + calPrior)
}

func (c *calibration) observe(p float32, accepted bool) {
	b := calBucket(p)
	c.hit[b] *= calDecay
	c.try[b] = c.try[b]*calDecay + 1
	if accepted {
		c.hit[b]++
	}
}

// feedback is one slot's last dynamic tree, kept until the slot's next
// Propose shows which of its nodes were accepted.
type feedback struct {
	tree Tree
	p    []float32 // node i's probability under the drafter
	base int       // the committed tokens when the tree was drafted
	root int32     // the last of them
}

// learn compares the slot's last tree with the tokens committed since
// (tokens extends what the tree was drafted after): along the accepted
// path, every child of an accepted node (the root first) was verified, and
// the one equal to the next committed token accepted. It then forgets the
// tree, and reports whether it had been verified. Nothing is learnt when no
// token was committed since (the tree was not verified) or tokens is
// another sequence.
func (c *calibration) learn(fb *feedback, tokens []int32) (verified bool) {
	t := &fb.tree
	defer func() { t.Reset(); fb.p = fb.p[:0]; fb.base = 0 }()
	if fb.base == 0 || len(tokens) <= fb.base || tokens[fb.base-1] != fb.root || len(fb.p) != t.Len() {
		return false
	}
	committed := tokens[fb.base:]
	parent := int32(-1)
	for depth := 0; ; depth++ {
		next := int32(-1)
		for i, p := range t.Parent {
			if p != parent {
				continue
			}
			ok := depth < len(committed) && t.Tokens[i] == committed[depth]
			if ok && next < 0 {
				next = int32(i)
			}
			c.observe(fb.p[i], ok)
		}
		if next < 0 {
			return true
		}
		parent = next
	}
}

// record keeps t, drafted after tokens, for learn.
func (fb *feedback) record(t *Tree, tokens []int32) {
	fb.tree.Reset()
	if len(tokens) == 0 {
		// No root to learn after (a drafter handed an empty context).
		fb.base = 0
		return
	}
	for i := range t.Tokens {
		fb.tree.Add(t.Tokens[i], t.Parent[i], nil)
	}
	fb.base, fb.root = len(tokens), tokens[len(tokens)-1]
}
