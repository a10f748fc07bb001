package guided

import (
	"encoding/binary"
	"fmt"
)

// Regular languages are closed under intersection and difference; the
// schema compiler uses that where a keyword combines constraints that
// fragments alone cannot express: a pattern together with a length, a
// number between two bounds, oneOf's "exactly one branch". Each operand is
// compiled to its own minimal DFA, the operands run in lockstep (the
// product construction), and a predicate over the operands' acceptance
// decides which product states accept. The result goes back into the NFA
// as a fragment, so the outer determinization treats it like any other.

// automaton is a product DFA with only live states (each can reach an
// accepting state). trans holds -1 for a move to no live state.
type automaton struct {
	nclass  int
	classOf [256]uint8
	trans   []int32
	accept  []bool
	start   int32 // -1: the language is empty
}

func (a *automaton) empty() bool { return a.start < 0 }

// product runs ds in lockstep from their start states. A tuple of states
// accepts when accept(states) says so. More than maxStates reachable tuples
// fail with ErrTooLarge.
func product(ds []*dfa, accept func(qs []int32) bool, maxStates int) (*automaton, error) {
	a := &automaton{}
	// Joint byte classes: a boundary of any operand is a boundary here.
	c := -1
	var rep []byte
	for i := 0; i < 256; i++ {
		cut := i == 0
		for _, d := range ds {
			if i > 0 && d.classOf[i] != d.classOf[i-1] {
				cut = true
			}
		}
		if cut {
			c++
			rep = append(rep, byte(i))
		}
		a.classOf[i] = uint8(c)
	}
	a.nclass = c + 1
	k := a.nclass

	ids := map[string]int32{}
	var tuples [][]int32
	key := make([]byte, 4*len(ds))
	intern := func(qs []int32) (int32, error) {
		for i, q := range qs {
			binary.LittleEndian.PutUint32(key[4*i:], uint32(q))
		}
		if id, ok := ids[string(key)]; ok {
			return id, nil
		}
		if len(tuples) >= maxStates {
			return 0, fmt.Errorf("%w: product automaton exceeds %d states", ErrTooLarge, maxStates)
		}
		id := int32(len(tuples))
		ids[string(key)] = id
		tuples = append(tuples, append([]int32(nil), qs...))
		return id, nil
	}
	start := make([]int32, len(ds))
	for i, d := range ds {
		start[i] = d.start
	}
	if _, err := intern(start); err != nil {
		return nil, err
	}
	var trans []int32
	next := make([]int32, len(ds))
	for q := 0; q < len(tuples); q++ {
		for cl := range k {
			for i, d := range ds {
				next[i] = d.step(tuples[q][i], rep[cl])
			}
			id, err := intern(next)
			if err != nil {
				return nil, err
			}
			trans = append(trans, id)
		}
	}
	n := len(tuples)
	acc := make([]bool, n)
	for q := range n {
		acc[q] = accept(tuples[q])
	}
	// Keep the states that can reach acceptance: a backward search.
	rev := make([][]int32, n)
	for q := range n {
		for cl := range k {
			t := trans[q*k+cl]
			rev[t] = append(rev[t], int32(q))
		}
	}
	live := make([]bool, n)
	var stack []int32
	for q := range n {
		if acc[q] {
			live[q] = true
			stack = append(stack, int32(q))
		}
	}
	for len(stack) > 0 {
		q := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for _, p := range rev[q] {
			if !live[p] {
				live[p] = true
				stack = append(stack, p)
			}
		}
	}
	renum := make([]int32, n)
	m := int32(0)
	for q := range n {
		renum[q] = -1
		if live[q] {
			renum[q] = m
			m++
		}
	}
	a.start = renum[0]
	a.accept = make([]bool, m)
	a.trans = make([]int32, int(m)*k)
	for q := range n {
		if !live[q] {
			continue
		}
		r := renum[q]
		a.accept[r] = acc[q]
		for cl := range k {
			a.trans[int(r)*k+cl] = renum[trans[q*k+cl]]
		}
	}
	return a, nil
}

// embed adds a's language to the NFA as a fragment.
func (b *builder) embed(a *automaton) frag {
	if a.empty() {
		return b.none()
	}
	n := len(a.accept)
	in := make([]int32, n)
	for q := range n {
		in[q] = b.add(nstate{kind: nEps})
	}
	out := b.add(nstate{kind: nEps})
	k := a.nclass
	for q := range n {
		if b.failed() {
			break
		}
		if a.accept[q] {
			b.link(in[q], out)
		}
		// One range per run of bytes that go to the same state.
		lo := 0
		for i := 1; i <= 256; i++ {
			t := a.trans[q*k+int(a.classOf[lo])]
			if i < 256 && a.trans[q*k+int(a.classOf[i])] == t {
				continue
			}
			if t >= 0 {
				s := b.add(nstate{kind: nRange, lo: byte(lo), hi: byte(i - 1), next: in[t]})
				b.link(in[q], s)
			}
			lo = i
		}
	}
	return frag{in[a.start], out}
}

// automatonOf compiles the fragment that build makes, in a builder of its
// own, to a minimal DFA. build must make its fragment with sc.b, which
// points at the new builder while it runs.
func (sc *schemaCompiler) automatonOf(path string, build func() frag) *dfa {
	outer := sc.b
	sub := newBuilder(outer.limit)
	sc.b = sub
	f := build()
	sc.b = outer
	if sub.err != nil {
		if outer.err == nil {
			outer.err = sub.err
		}
		return nil
	}
	m := sub.add(nstate{kind: nMatch})
	sub.link(f.out, m)
	d, err := determinize(sub, f.in, sc.lim.MaxDFAStates, sc.lim.MaxDFAStates*workPerState)
	if err != nil {
		if sc.err == nil {
			sc.err = fmt.Errorf("schema at %s: %w", path, err)
		}
		return nil
	}
	return d
}

// combine builds each operand as its own DFA and returns the fragment of
// their product under accept; on failure it records the error and returns
// none.
func (sc *schemaCompiler) combine(path string, accept func(ds []*dfa, qs []int32) bool, operands ...func() frag) frag {
	a := sc.productOf(path, accept, operands...)
	if a == nil {
		return sc.b.none()
	}
	return sc.b.embed(a)
}

// productOf is combine's automaton, nil after an error (recorded).
func (sc *schemaCompiler) productOf(path string, accept func(ds []*dfa, qs []int32) bool, operands ...func() frag) *automaton {
	ds := make([]*dfa, len(operands))
	for i, op := range operands {
		if ds[i] = sc.automatonOf(path, op); ds[i] == nil {
			return nil
		}
	}
	a, err := product(ds, func(qs []int32) bool { return accept(ds, qs) }, sc.lim.MaxDFAStates)
	if err != nil {
		if sc.err == nil {
			sc.err = fmt.Errorf("schema at %s: %w", path, err)
		}
		return nil
	}
	return a
}

// all accepts where every operand accepts (intersection).
func all(ds []*dfa, qs []int32) bool {
	for i, q := range qs {
		if !ds[i].accept[q] {
			return false
		}
	}
	return true
}

// firstButNotRest accepts where the first operand accepts and no other
// does (difference).
func firstButNotRest(ds []*dfa, qs []int32) bool {
	if !ds[0].accept[qs[0]] {
		return false
	}
	for i, q := range qs[1:] {
		if ds[i+1].accept[q] {
			return false
		}
	}
	return true
}

// compileCalls builds spec.Calls over spec.Schema: the schema's language
// is compiled once to a DFA and embedded in each call.
func compileCalls(b *builder, spec Spec, lim Limits) (frag, []string, error) {
	c := spec.Calls
	if c.Max < 0 || c.Max > 64 {
		return frag{}, nil, fmt.Errorf("%w: calls need at most 64 calls", ErrInvalid)
	}
	root, err := parseJSON(spec.Schema)
	if err != nil {
		return frag{}, nil, fmt.Errorf("%w: schema is not valid JSON: %w", ErrInvalid, err)
	}
	sc := &schemaCompiler{b: b, lim: lim, root: root, refDepth: map[string]int{}}
	value := sc.automatonOf("#", func() frag { return sc.value(root, "#", 0) })
	if err := sc.failure(); err != nil {
		return frag{}, nil, err
	}
	if value == nil {
		return frag{}, nil, b.err
	}
	va, err := product([]*dfa{value}, func(qs []int32) bool { return value.accept[qs[0]] }, lim.MaxDFAStates)
	if err != nil {
		return frag{}, nil, err
	}
	call := func() frag { return b.seq(b.lit(c.Open), b.embed(va), b.lit(c.Close)) }
	calls := b.cat(call(), b.repeat(func() frag { return b.cat(b.lit("\n"), call()) }, 0, max(c.Max, 1)-1))
	if !c.Optional {
		return calls, sc.empties, nil
	}
	// Bare calls (no Open) are JSON objects: text then must not start
	// like one.
	lead := c.Open
	if lead == "" {
		lead = "{"
	}
	text := sc.combine("#", firstButNotRest, func() frag { return sc.b.star(sc.b.byteRange(0, 255)) },
		func() frag { return sc.b.cat(sc.b.lit(lead), sc.b.star(sc.b.byteRange(0, 255))) })
	if err := sc.failure(); err != nil {
		return frag{}, nil, err
	}
	return b.alt(calls, text), sc.empties, nil
}
