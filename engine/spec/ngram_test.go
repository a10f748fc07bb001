package spec

import (
	"fmt"
	"slices"
	"testing"
)

// shapePaths returns the sibling-rank paths of sh's nodes (see
// ShapeFromPaths), for checking that a tree fits a static shape.
func shapePaths(sh Shape) map[string]bool {
	paths := map[string]bool{}
	ranks := make([][]int, sh.Len())
	for i, p := range sh.Parent {
		if p >= 0 {
			ranks[i] = slices.Clone(ranks[p])
		}
		ranks[i] = append(ranks[i], int(sh.Rank[i]))
		paths[fmt.Sprint(ranks[i])] = true
	}
	return paths
}

// treePaths returns each node's path of sibling ranks (its place among
// its parent's children, in order).
func treePaths(t *Tree) []string {
	out := make([]string, t.Len())
	ranks := make([][]int, t.Len())
	kids := map[int32]int{}
	for i, p := range t.Parent {
		if p >= 0 {
			ranks[i] = slices.Clone(ranks[p])
		}
		ranks[i] = append(ranks[i], kids[p])
		kids[p]++
		out[i] = fmt.Sprint(ranks[i])
	}
	return out
}

// TestNGramFloor: lookup drafts only nodes likely enough to be accepted,
// whatever the shape's budget: a quoted paragraph is drafted down its
// continuation, a suffix that earlier turns continued four ways is not
// drafted at all (each way followed a quarter of its occurrences), unless
// the floor is turned off. A static shape's tree stays inside the shape.
func TestNGramFloor(t *testing.T) {
	para := []int32{50, 51, 52, 53, 54, 55, 56, 57, 58, 59}
	copyHist := slices.Concat([]int32{1, 7, 8, 9}, para, []int32{2, 10, 11})
	copyTok := []int32{1, 20, 21, 22, 50, 51, 52}
	ambTok := []int32{1, 2, 3, 7, 1, 2, 4, 8, 1, 2, 5, 9, 1, 2, 6, 10, 1, 2}
	tests := []struct {
		name     string
		history  []int32
		tokens   []int32
		minScore float64
		want     []int32 // the tree's leading tokens; nil: no nodes
		least    int     // nodes wanted at least (0: exactly none when want is nil)
	}{
		{name: "quote", history: copyHist, tokens: copyTok, want: []int32{53, 54}, least: 2},
		{name: "four_ways", tokens: ambTok},
		{name: "four_ways_no_floor", tokens: ambTok, minScore: -1, want: []int32{6}, least: 1},
		// No context at all: nothing to draft, and no panic.
		{name: "empty", tokens: nil},
	}
	for _, tt := range tests {
		for _, sh := range []Shape{Chain(2), Chain(4), Wide, Bushy, Dynamic(8), Dynamic(32)} {
			t.Run(tt.name+"/"+sh.Name, func(t *testing.T) {
				g := &NGram{MinScore: tt.minScore}
				var tr Tree
				if err := g.Propose([]Context{{Slot: 1, Tokens: tt.tokens, History: tt.history, Shape: sh}}, []*Tree{&tr}); err != nil {
					t.Fatal(err)
				}
				if err := tr.Validate(); err != nil || tr.Len() > sh.Len() {
					t.Fatalf("have %d nodes (%v); want at most %d", tr.Len(), err, sh.Len())
				}
				depths := tr.Depths(nil)
				if slices.Max(append(depths, 0)) > int32(sh.MaxDepth) {
					t.Errorf("depths %v; want at most %d", depths, sh.MaxDepth)
				}
				if tt.want == nil {
					if tr.Len() != 0 {
						t.Errorf("have %v; want no nodes", tr.Tokens)
					}
					return
				}
				if tr.Len() < tt.least || !slices.Equal(tr.Tokens[:len(tt.want)], tt.want) {
					t.Errorf("have %v; want at least %d nodes, starting with %v", tr.Tokens, tt.least, tt.want)
				}
				if !sh.Dynamic {
					in := shapePaths(sh)
					for i, p := range treePaths(&tr) {
						if !in[p] {
							t.Errorf("node %d (token %d) at ranks %s: not in %s", i, tr.Tokens[i], p, sh.Name)
						}
					}
				}
			})
		}
	}
}

// TestNGramLearnsAcceptance: what the target accepts of every tree, static
// shapes' included, calibrates lookup's confidence. A continuation that the
// target keeps rejecting stops being drafted after a few steps; one it keeps
// accepting goes on being drafted in full.
func TestNGramLearnsAcceptance(t *testing.T) {
	// Earlier turns continued 7 8 with 9 10 11 12 twice; the prompt ends
	// with 7 8.
	history := []int32{1, 7, 8, 9, 10, 11, 12, 2, 7, 8, 9, 10, 11, 12, 3}
	prompt := []int32{4, 5, 7, 8}
	tests := []struct {
		name   string
		target []int32 // what the target says after the prompt
		nodes  int     // nodes wanted after 30 verified steps
	}{
		{"rejected", []int32{99}, 0},
		{"accepted", []int32{9, 10, 11, 12}, 4},
	}
	for _, tt := range tests {
		for _, sh := range []Shape{Chain(4), Bushy, Dynamic(8)} {
			t.Run(tt.name+"/"+sh.Name, func(t *testing.T) {
				g := &NGram{}
				var tr Tree
				propose := func(slot int, tokens []int32) {
					t.Helper()
					if err := g.Propose([]Context{{Slot: slot, Tokens: tokens, History: history, Shape: sh}}, []*Tree{&tr}); err != nil {
						t.Fatal(err)
					}
				}
				propose(0, prompt)
				if tr.Len() < 4 || !slices.Equal(tr.Tokens[:4], []int32{9, 10, 11, 12}) {
					t.Fatalf("first tree %v; want it to start with 9 10 11 12", tr.Tokens)
				}
				for step := range 30 {
					// Each step is a new request in its own slot: the
					// conversation never holds what the target said, so
					// only the calibration can learn from it.
					propose(step+1, prompt)
					propose(step+1, slices.Concat(prompt, tt.target))
					g.Rewind(step+1, 0)
				}
				propose(99, prompt)
				if tr.Len() != tt.nodes {
					t.Errorf("after 30 steps: have %v; want %d nodes", tr.Tokens, tt.nodes)
				}
			})
		}
	}
}
