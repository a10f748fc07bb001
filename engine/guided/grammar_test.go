package guided

import (
	"errors"
	"math"
	"sync"
	"testing"

	"github.com/specgate/specgate/kernels"
)

func TestMaskLogitsRef(t *testing.T) {
	tests := []struct {
		name string
		n    int
		mask []uint64
		keep []int
	}{
		{"all allowed", 70, []uint64{math.MaxUint64, 0x3f}, nil},
		{"none", 130, []uint64{0, 0, 0}, []int{}},
		{"sparse", 100, []uint64{1<<3 | 1<<63, 1 << 1}, []int{3, 63, 65}},
		{"mask shorter than row", 200, []uint64{math.MaxUint64}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			logits := make([]float32, tt.n)
			for i := range logits {
				logits[i] = float32(i)
			}
			kernels.MaskLogitsRef(logits, tt.mask)
			for i, l := range logits {
				allowed := i < 64*len(tt.mask) && tt.mask[i/64]&(1<<(i%64)) != 0
				want := float32(i)
				if !allowed {
					want = float32(math.Inf(-1))
				}
				if l != want {
					t.Fatalf("logit %d: have %v; want %v", i, l, want)
				}
			}
		})
	}
}

func TestTreeStatesAndWalk(t *testing.T) {
	v := synthVocab(3000)
	g, err := Compile(Spec{Regex: `(ab|cd)+`}, v)
	if err != nil {
		t.Fatal(err)
	}
	tok := func(s string) int32 { return tokenize(v, []byte(s))[0] }
	a, b, c, d := tok("a"), tok("b"), tok("c"), tok("d")
	// Nodes: 0 "a" under root, 1 "b" under 0, 2 "c" under 1, 3 "b" under
	// root (forbidden), 4 "a" under 3 (dead: ancestor forbidden), 5 "d"
	// under 2, 6 "a" under 1.
	tokens := []int32{a, b, c, b, a, d, a}
	parents := []int32{-1, 0, 1, -1, 3, 2, 1}
	states := g.TreeStates(g.Start(), tokens, parents, nil)
	wantDead := []bool{false, false, false, true, true, false, false}
	for i, s := range states {
		if (s == Dead) != wantDead[i] {
			t.Errorf("node %d: have dead %v; want %v", i, s == Dead, wantDead[i])
		}
	}
	if !g.Accepting(states[1]) || !g.Accepting(states[5]) || g.Accepting(states[2]) {
		t.Errorf("have accepting %v %v %v; want true true false", g.Accepting(states[1]), g.Accepting(states[5]), g.Accepting(states[2]))
	}
	if s := g.TreeStates(g.Start(), []int32{a, b}, []int32{1, 0}, nil); s[0] != Dead || s[1] != Dead {
		t.Errorf("out-of-order parents: have %v; want both Dead", s)
	}
	s, n := g.Walk(g.Start(), []int32{a, b, c, c, d})
	if n != 3 || s != states[2] {
		t.Errorf("Walk: have (%d, %d); want (%d, 3)", s, n, states[2])
	}

	m := g.NewMatcher()
	if err := m.Advance(a); err != nil {
		t.Fatal(err)
	}
	cl := m.Clone()
	if err := cl.Advance(b); err != nil {
		t.Fatal(err)
	}
	if m.State() == cl.State() {
		t.Errorf("Clone shares state with the original")
	}
	if err := m.Advance(c); !errors.Is(err, ErrForbidden) {
		t.Errorf("have %v; want ErrForbidden", err)
	}
	if err := cl.Advance(testEOS); err != nil || cl.State() != Final || !cl.Done() {
		t.Errorf("EOS when accepting: have %v, state %d; want Final", err, cl.State())
	}
	if cl.Mask().Count() != 0 || cl.Allowed(a) {
		t.Errorf("after EOS: have tokens allowed; want none")
	}
	for _, bad := range []int32{-1, int32(v.Size()), 0} { // out of range, control token
		if g.Allowed(g.Start(), bad) {
			t.Errorf("token %d: have allowed; want forbidden", bad)
		}
	}
}

// TestConcurrentMasks hammers the lazy mask cache from many goroutines;
// run with -race.
func TestConcurrentMasks(t *testing.T) {
	v := synthVocab(3000)
	g, err := Compile(Spec{JSON: true}, v)
	if err != nil {
		t.Fatal(err)
	}
	want := make([]Bitset, g.NumStates()+1)
	ref, _ := Compile(Spec{JSON: true}, v)
	for q := 1; q <= g.NumStates(); q++ {
		want[q] = ref.computeMask(int32(q))
	}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for q := 1 + w; q <= g.NumStates(); q += 1 + w%2 {
				if !equalWords(g.Mask(State(q)), want[q]) {
					t.Errorf("state %d: mask differs", q)
					return
				}
			}
		}()
	}
	wg.Wait()
}

func TestCache(t *testing.T) {
	v := synthVocab(1000)
	c := NewCache(2)
	s1 := Spec{Schema: []byte(`{"type": "integer"}`)}
	s1b := Spec{Schema: []byte(`{"type":"integer"}`)} // same after compaction
	g1, err := c.Get(s1, v)
	if err != nil {
		t.Fatal(err)
	}
	if g, _ := c.Get(s1b, v); g != g1 {
		t.Errorf("equal schemas: have a second compilation; want the cached grammar")
	}
	other := NewVocab(synthPieces(999), []int32{testEOS})
	if g, _ := c.Get(s1, other); g == g1 || g.Vocab() != other {
		t.Errorf("another vocabulary: have the first vocabulary's grammar")
	}
	if _, err := c.Get(Spec{Regex: "a("}, v); !errors.Is(err, ErrInvalid) {
		t.Errorf("have %v; want ErrInvalid", err)
	}
	// A spec refused for size is refused again from the cache: the very
	// same error value, not a second compilation.
	big := Spec{Regex: "[ab]*a[ab]{15}", Limits: Limits{MaxDFAStates: 1 << 14}}
	_, err1 := c.Get(big, v)
	_, err2 := c.Get(big, v)
	if !errors.Is(err1, ErrTooLarge) || err2 != err1 {
		t.Errorf("have %v then %v; want the same ErrTooLarge twice", err1, err2)
	}
	c.Get(Spec{Regex: "x"}, v)
	if c.Len() != 2 {
		t.Errorf("have %d entries; want 2 (the bound)", c.Len())
	}
	if g, _ := c.Get(s1, v); g == g1 {
		t.Errorf("evicted entry: have the old grammar; want a recompilation")
	}
	var wg sync.WaitGroup
	res := make([]*Grammar, 8)
	for i := range res {
		wg.Add(1)
		go func() { defer wg.Done(); res[i], _ = c.Get(Spec{Regex: "[a-z]{3,9}"}, v) }()
	}
	wg.Wait()
	for _, g := range res {
		if g == nil || g != res[0] {
			t.Fatalf("concurrent Get: have different grammars; want one shared")
		}
	}
}
