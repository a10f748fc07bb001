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
//   - VerifyGreedy and VerifySampled: walk the tree against the target's
//     distributions; sampled requests use multi-round speculative sampling,
//     so the output has exactly the target's distribution.
//   - Runner: the whole loop over a model.Model and a paged KV cache, the
//     reference for the engine's integration.
package spec

import (
	"errors"
	"fmt"
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
}

// Len is the number of nodes.
func (s Shape) Len() int { return len(s.Parent) }

// Off reports whether the shape drafts nothing (plain decoding).
func (s Shape) Off() bool { return len(s.Parent) == 0 }

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
