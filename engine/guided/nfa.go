package guided

import (
	"fmt"
	"unicode/utf8"
)

// The NFA is the common target of every front end (regex, JSON schema,
// choices): a Thompson automaton over bytes with epsilon edges. Front ends
// build it from fragments; dfa.go turns it into a minimal DFA.

const (
	nEps   uint8 = iota // epsilon edges only
	nRange              // one byte in [lo, hi], then next
	nMatch              // accepting
)

type nstate struct {
	kind   uint8
	lo, hi byte
	next   int32 // nRange: target
	eps    int32 // nEps: first edge in builder.edges, 0 for none
}

// epsEdge is one epsilon edge in a state's list. The lists live in one
// arena so that states hold no pointers: building and collecting a
// hundred-thousand-state NFA then costs no allocation per state. Edge
// order does not matter (closures are sets).
type epsEdge struct{ to, next int32 }

// frag is a piece of NFA with one entry and one exit. The exit is always an
// nEps state whose edges are not set yet, so joining two fragments is one
// appended edge.
type frag struct{ in, out int32 }

// builder accumulates NFA states under a size limit. Once the limit is hit
// it records errTooLarge and stops growing; callers keep going cheaply and
// the error surfaces when the build finishes, so deep recursion needs no
// error plumbing. Loops that copy fragments check failed() to stop early.
type builder struct {
	// sink is the accept-the-rest state acceptors share (0: none yet).
	sink   int32
	states []nstate
	edges  []epsEdge // edges[0] is unused: 0 ends a list
	limit  int
	err    error
}

func newBuilder(limit int) *builder {
	b := &builder{limit: limit, states: make([]nstate, 0, 1024), edges: make([]epsEdge, 1, 1024)}
	b.states = append(b.states, nstate{kind: nEps}) // 0: scratch sink after an overflow
	return b
}

func (b *builder) failed() bool { return b.err != nil }

func (b *builder) add(s nstate) int32 {
	if b.err != nil {
		return 0
	}
	if len(b.states) >= b.limit {
		b.err = fmt.Errorf("%w: NFA exceeds %d states", ErrTooLarge, b.limit)
		b.states[0] = nstate{kind: nEps}
		return 0
	}
	b.states = append(b.states, s)
	return int32(len(b.states) - 1)
}

func (b *builder) link(from, to int32) {
	if b.err != nil {
		return
	}
	b.edges = append(b.edges, epsEdge{to: to, next: b.states[from].eps})
	b.states[from].eps = int32(len(b.edges) - 1)
}

// empty matches the empty string.
func (b *builder) empty() frag {
	s := b.add(nstate{kind: nEps})
	return frag{s, s}
}

// none matches nothing.
func (b *builder) none() frag {
	return frag{b.add(nstate{kind: nEps}), b.add(nstate{kind: nEps})}
}

// byteRange matches one byte in [lo, hi].
func (b *builder) byteRange(lo, hi byte) frag {
	e := b.add(nstate{kind: nEps})
	s := b.add(nstate{kind: nRange, lo: lo, hi: hi, next: e})
	return frag{s, e}
}

// lit matches the exact bytes of s.
func (b *builder) lit(s string) frag {
	if s == "" {
		return b.empty()
	}
	f := b.byteRange(s[0], s[0])
	for i := 1; i < len(s); i++ {
		f = b.cat(f, b.byteRange(s[i], s[i]))
	}
	return f
}

func (b *builder) cat(x, y frag) frag {
	b.link(x.out, y.in)
	return frag{x.in, y.out}
}

func (b *builder) seq(fs ...frag) frag {
	if len(fs) == 0 {
		return b.empty()
	}
	f := fs[0]
	for _, g := range fs[1:] {
		f = b.cat(f, g)
	}
	return f
}

func (b *builder) alt(fs ...frag) frag {
	if len(fs) == 1 {
		return fs[0]
	}
	if len(fs) == 0 {
		return b.none()
	}
	s := b.add(nstate{kind: nEps})
	e := b.add(nstate{kind: nEps})
	for _, f := range fs {
		b.link(s, f.in)
		b.link(f.out, e)
	}
	return frag{s, e}
}

func (b *builder) star(f frag) frag {
	s := b.add(nstate{kind: nEps})
	b.link(s, f.in)
	b.link(f.out, s)
	return frag{s, s}
}

func (b *builder) plus(f frag) frag {
	e := b.add(nstate{kind: nEps})
	b.link(f.out, f.in)
	b.link(f.out, e)
	return frag{f.in, e}
}

func (b *builder) quest(f frag) frag {
	s := b.add(nstate{kind: nEps})
	e := b.add(nstate{kind: nEps})
	b.link(s, f.in)
	b.link(s, e)
	b.link(f.out, e)
	return frag{s, e}
}

// repeat matches gen's language between min and max times (max < 0: no
// upper bound). gen must build a fresh copy each call.
func (b *builder) repeat(gen func() frag, min, max int) frag {
	if max >= 0 && max < min {
		return b.none()
	}
	f := b.empty()
	for i := 0; i < min && !b.failed(); i++ {
		f = b.cat(f, gen())
	}
	switch {
	case max < 0:
		if min > 0 {
			// x{n,} = x{n} x*.
			return b.cat(f, b.star(gen()))
		}
		return b.star(gen())
	case max > min:
		// x{0,k} as nested options (x(x(x)?)?)? keeps the NFA linear.
		tail := b.empty()
		for i := 0; i < max-min && !b.failed(); i++ {
			tail = b.quest(b.cat(gen(), tail))
		}
		f = b.cat(f, tail)
	}
	return f
}

// runeRange matches the UTF-8 encoding of one rune in [lo, hi] (surrogates
// excluded: they have no UTF-8 encoding).
func (b *builder) runeRange(lo, hi rune) frag {
	var alts []frag
	utf8Seqs(lo, hi, func(seq [][2]byte) {
		f := b.byteRange(seq[0][0], seq[0][1])
		for _, r := range seq[1:] {
			f = b.cat(f, b.byteRange(r[0], r[1]))
		}
		alts = append(alts, f)
	})
	return b.alt(alts...)
}

// utf8Seqs splits the rune range [lo, hi] into byte-range sequences whose
// union is exactly the UTF-8 encodings of its runes (the standard split:
// at encoded-length boundaries, then at continuation-byte boundaries).
func utf8Seqs(lo, hi rune, emit func([][2]byte)) {
	if lo < 0 {
		lo = 0
	}
	if hi > utf8.MaxRune {
		hi = utf8.MaxRune
	}
	type rr struct{ s, e rune }
	stack := []rr{{lo, hi}}
	var sb, eb [utf8.UTFMax]byte
	var seq [][2]byte
next:
	for len(stack) > 0 {
		r := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		s, e := r.s, r.e
		if s > e {
			continue
		}
		if s <= 0xDFFF && e >= 0xD800 { // cut out surrogates
			stack = append(stack, rr{0xE000, e}, rr{s, 0xD7FF})
			continue
		}
		for _, m := range []rune{0x7F, 0x7FF, 0xFFFF} {
			if s <= m && m < e {
				stack = append(stack, rr{m + 1, e}, rr{s, m})
				continue next
			}
		}
		if e <= 0x7F {
			emit([][2]byte{{byte(s), byte(e)}})
			continue
		}
		for i := uint(1); i < 4; i++ {
			m := rune(1)<<(6*i) - 1
			if s&^m != e&^m {
				if s&m != 0 {
					stack = append(stack, rr{(s | m) + 1, e}, rr{s, s | m})
					continue next
				}
				if e&m != m {
					stack = append(stack, rr{e &^ m, e}, rr{s, (e &^ m) - 1})
					continue next
				}
			}
		}
		n := utf8.EncodeRune(sb[:], s)
		utf8.EncodeRune(eb[:], e)
		seq = seq[:0]
		for i := 0; i < n; i++ {
			seq = append(seq, [2]byte{sb[i], eb[i]})
		}
		emit(seq)
	}
}
