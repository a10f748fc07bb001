// Package guided constrains generation to a formal language: a regular
// expression, a JSON schema, "any JSON value" or a list of choices.
//
// Every front end compiles to one byte-level NFA, then to a minimal DFA
// (subset construction, pruning of states that cannot finish, Hopcroft
// minimization), then to a token FSM over a model's vocabulary: for each
// DFA state, the bitset of tokens whose bytes keep the DFA alive. Those
// masks are computed lazily, one walk of the DFA over the vocabulary's
// byte trie per state, and cached in the Grammar, so the steady-state cost
// per generated token is a table walk over the token's bytes plus using a
// cached mask: sample.Sampler.SampleMasked, ProbsMasked and
// sample.ArgmaxMasked read only the allowed logits (the cost follows the
// number of allowed tokens, not the vocabulary), with the same result as
// writing -Inf over the others (kernels.MaskLogitsRef) and sampling the
// row.
//
// EOS tokens are allowed exactly in accepting states. A state that is not
// dead can always be completed by some byte string; if the vocabulary
// holds every single byte (byte-level BPE, SentencePiece byte fallback),
// it can be completed by tokens too, so constrained decoding never gets
// stuck.
//
// A Grammar is immutable apart from its mask cache and safe for concurrent
// use; requests share one through Cache. A Matcher is one request's cursor
// and is a small value that copies cheaply, which is how speculative
// verification explores a draft tree.
package guided

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/bits"
	"strings"
	"sync"
	"sync/atomic"
)

// Errors. Compile errors wrap one of the first four.
var (
	// ErrInvalid: the spec is malformed (bad regex syntax, bad JSON, a
	// $ref that does not resolve, no or several constraints).
	ErrInvalid = errors.New("guided: invalid spec")
	// ErrUnsupported: the spec uses a feature this package does not
	// implement; the message lists the features and where.
	ErrUnsupported = errors.New("guided: unsupported")
	// ErrTooLarge: the automaton would exceed a Limits bound.
	ErrTooLarge = errors.New("guided: grammar too large")
	// ErrEmpty: the spec matches no string at all.
	ErrEmpty = errors.New("guided: grammar matches nothing")
	// ErrForbidden: Matcher.Advance got a token the grammar forbids.
	ErrForbidden = errors.New("guided: token not allowed")
)

// Spec names the language to generate. Exactly one of Regex, Schema,
// Choices and JSON is set.
type Spec struct {
	// Regex is an RE2-syntax pattern the whole output must match.
	Regex string
	// Schema is a JSON schema (see schema.go for the supported subset and
	// the output format).
	Schema json.RawMessage
	// Choices are the exact byte strings the output may be.
	Choices []string
	// JSON asks for any JSON value (nesting bounded by Limits.JSONDepth).
	JSON bool
	// Calls, with Schema, asks for tagged values instead of one value:
	// what tool calling generates.
	Calls *Calls
	// Limits bound compilation; zero fields take defaults.
	Limits Limits
}

// Calls asks for one to Max (0: 1) values of the Schema, each between Open
// and Close, separated by newlines. When Optional, the output may instead
// be any text that does not begin with Open: a model that may answer or
// call a tool either writes text or opens a call. An empty Open makes calls
// bare values (as Llama 3.1+ writes them); Optional text then must not
// begin with "{".
type Calls struct {
	Open, Close string
	Max         int
	Optional    bool
}

// Limits bound what a Spec may compile to. Zero means the default.
type Limits struct {
	// MaxNFAStates bounds the intermediate NFA (default 1<<20).
	MaxNFAStates int
	// MaxDFAStates bounds the DFA before minimization (default 1<<17).
	// Bounded repetition multiplies states: an array of at most 20
	// objects, each with a few bounded strings, is ~20k states.
	MaxDFAStates int
	// MaxDepth bounds how deeply a schema's objects and arrays nest
	// (default 16).
	MaxDepth int
	// JSONDepth bounds the nesting of "any JSON value", whether asked
	// for directly or by a schema that leaves a value unconstrained
	// (default 4: e.g. {"a":[{"b":[]}]}).
	JSONDepth int
	// RefDepth bounds how many times one $ref may expand inside itself,
	// which is what makes recursive schemas regular; past it the
	// recursive branch is dropped (default 3).
	RefDepth int
}

func (l Limits) withDefaults() Limits {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&l.MaxNFAStates, 1<<20)
	def(&l.MaxDFAStates, 1<<17)
	def(&l.MaxDepth, 16)
	def(&l.JSONDepth, 4)
	def(&l.RefDepth, 3)
	return l
}

// workPerState scales the subset-construction budget with MaxDFAStates.
const workPerState = 2048

// State is a position in a Grammar's token FSM. The zero value is Dead.
type State int32

const (
	// Dead: the output can no longer match; nothing is allowed.
	Dead State = 0
	// Final: EOS was consumed in an accepting state; nothing is allowed.
	Final State = -1
)

// Bitset is a token mask: token id t is allowed when bit t%64 of word t/64
// is set. Masks returned by a Grammar are shared: read only.
type Bitset []uint64

// Has reports whether id is in the set.
func (b Bitset) Has(id int32) bool {
	w := int(id) >> 6
	return id >= 0 && w < len(b) && b[w]&(1<<(uint(id)&63)) != 0
}

// Count returns the number of ids in the set.
func (b Bitset) Count() int {
	n := 0
	for _, w := range b {
		n += bits.OnesCount64(w)
	}
	return n
}

// Grammar is a compiled token FSM for one Spec and one Vocab. It is safe
// for concurrent use: per-state masks are computed on first use and
// published atomically.
type Grammar struct {
	d     *dfa
	v     *Vocab
	words int
	zero  Bitset
	// terminal[q]: accepting with no way to add bytes.
	terminal []bool
	masks    []atomic.Pointer[Bitset]

	internMu sync.Mutex // protects intern
	// intern shares equal masks between states (many states of a JSON
	// grammar allow the same tokens), keyed by a hash of the words.
	intern map[uint64][]*Bitset
}

// Compile builds the Grammar for spec over vocab. Errors wrap ErrInvalid,
// ErrUnsupported, ErrTooLarge or ErrEmpty and say what is wrong; they
// come before any generation starts. Compilation builds the DFA only; token
// masks are computed lazily (see Grammar.Mask).
func Compile(spec Spec, vocab *Vocab) (*Grammar, error) {
	if vocab == nil {
		return nil, fmt.Errorf("%w: nil vocabulary", ErrInvalid)
	}
	d, err := compileDFA(spec)
	if err != nil {
		return nil, err
	}
	return newGrammar(d, vocab), nil
}

// compileDFA runs the front end for spec and builds the minimal DFA.
func compileDFA(spec Spec) (*dfa, error) {
	lim := spec.Limits.withDefaults()
	set := 0
	if spec.Calls != nil && len(spec.Schema) == 0 {
		return nil, fmt.Errorf("%w: calls need a schema", ErrInvalid)
	}
	for _, on := range []bool{spec.Regex != "", len(spec.Schema) > 0, len(spec.Choices) > 0, spec.JSON} {
		if on {
			set++
		}
	}
	if set != 1 {
		return nil, fmt.Errorf("%w: want exactly one of regex, schema, choices or json; have %d", ErrInvalid, set)
	}
	b := newBuilder(lim.MaxNFAStates)
	var f frag
	var empties []string // where and why a schema matches nothing
	switch {
	case spec.Regex != "":
		re, _, _, err := parseRegex(spec.Regex)
		if err != nil {
			return nil, err
		}
		rc := &reCompiler{b: b}
		f = rc.compile(re)
		if rc.err != nil {
			return nil, rc.err
		}
	case len(spec.Choices) > 0:
		fs := make([]frag, 0, len(spec.Choices))
		for _, c := range spec.Choices {
			fs = append(fs, b.lit(c))
		}
		f = b.alt(fs...)
	case spec.JSON:
		sc := &schemaCompiler{b: b, lim: lim}
		f = sc.anyValue(lim.JSONDepth)
	case spec.Calls != nil:
		var err error
		if f, empties, err = compileCalls(b, spec, lim); err != nil {
			return nil, err
		}
	default:
		var err error
		f, empties, err = compileSchema(b, spec.Schema, lim)
		if err != nil {
			return nil, err
		}
	}
	m := b.add(nstate{kind: nMatch})
	b.link(f.out, m)
	if b.err != nil {
		return nil, b.err
	}
	d, err := determinize(b, f.in, lim.MaxDFAStates, lim.MaxDFAStates*workPerState)
	if err != nil {
		return nil, err
	}
	if d.start == 0 {
		if len(empties) > 0 {
			return nil, fmt.Errorf("%w: %s", ErrEmpty, strings.Join(empties, "; "))
		}
		return nil, ErrEmpty
	}
	return d, nil
}

func newGrammar(d *dfa, v *Vocab) *Grammar {
	g := &Grammar{
		d:        d,
		v:        v,
		words:    (v.Size() + 63) / 64,
		terminal: make([]bool, d.numStates()),
		masks:    make([]atomic.Pointer[Bitset], d.numStates()),
		intern:   map[uint64][]*Bitset{},
	}
	g.zero = make(Bitset, g.words)
	for q := 1; q < d.numStates(); q++ {
		if !d.accept[q] {
			continue
		}
		g.terminal[q] = true
		for _, t := range d.trans[q*d.nclass : (q+1)*d.nclass] {
			if t != 0 {
				g.terminal[q] = false
				break
			}
		}
	}
	return g
}

// Vocab returns the vocabulary the grammar was compiled for.
func (g *Grammar) Vocab() *Vocab { return g.v }

// NumStates is the number of live DFA states (the dead state excluded).
func (g *Grammar) NumStates() int { return g.d.numStates() - 1 }

// Start is the state before any token.
func (g *Grammar) Start() State { return State(g.d.start) }

// Accepting reports whether the output so far is a complete match (EOS
// would be allowed). Final is accepting.
func (g *Grammar) Accepting(s State) bool {
	return s == Final || (s > 0 && int(s) < len(g.d.accept) && g.d.accept[s])
}

// Terminal reports whether s is accepting and no byte may follow: the
// engine should stop here even if the vocabulary has no EOS.
func (g *Grammar) Terminal(s State) bool {
	return s == Final || (s > 0 && int(s) < len(g.terminal) && g.terminal[s])
}

// Next returns the state after token tok from s: Dead if tok is forbidden
// (or s is Dead or Final), Final for an EOS token in an accepting state.
func (g *Grammar) Next(s State, tok int32) State {
	if s <= 0 || int(s) >= len(g.d.accept) || tok < 0 || int(tok) >= g.v.Size() {
		return Dead
	}
	if g.v.isEOS[tok] {
		if g.d.accept[s] {
			return Final
		}
		return Dead
	}
	p := g.v.pieces[tok]
	if len(p) == 0 {
		return Dead
	}
	return State(g.d.run(int32(s), p))
}

// Allowed reports whether tok may follow s; it agrees with Mask(s).
func (g *Grammar) Allowed(s State, tok int32) bool { return g.Next(s, tok) != Dead }

// Walk advances s over toks as far as they are allowed. It returns the
// state after the longest allowed prefix and that prefix's length, so a
// drafter can cut a proposal at the first forbidden token.
func (g *Grammar) Walk(s State, toks []int32) (State, int) {
	for i, t := range toks {
		n := g.Next(s, t)
		if n == Dead {
			return s, i
		}
		s = n
	}
	return s, len(toks)
}

// TreeStates advances the FSM along every path of a token tree, for
// speculative verification. Node i holds tokens[i] and hangs under node
// parents[i] (< i), or under the root (state root) when parents[i] is -1.
// It returns, in dst (grown as needed), the state after each node: Dead
// where the node's token is forbidden, or any ancestor's was, or its
// parent index is out of order. The logits that verify node i's children
// are masked with Mask(states[i]); the root's with Mask(root).
func (g *Grammar) TreeStates(root State, tokens, parents []int32, dst []State) []State {
	dst = dst[:0]
	for i, t := range tokens {
		from := root
		if i < len(parents) {
			if p := parents[i]; p >= int32(i) || p < -1 {
				from = Dead
			} else if p >= 0 {
				from = dst[p]
			}
		}
		dst = append(dst, g.Next(from, t))
	}
	return dst
}

// Mask returns the tokens allowed in state s (all zero for Dead and
// Final). The first call for a state walks the DFA over the vocabulary
// trie; later calls return the cached mask. The result is shared: read
// only. Safe for concurrent use.
func (g *Grammar) Mask(s State) Bitset {
	if s <= 0 || int(s) >= len(g.masks) {
		return g.zero
	}
	if m := g.masks[s].Load(); m != nil {
		return *m
	}
	m := g.internMask(g.computeMask(int32(s)))
	g.masks[s].CompareAndSwap(nil, m)
	return *g.masks[s].Load()
}

// PrecomputeMasks fills the mask cache for every state, for small
// grammars that will be hot or to measure the full cost.
func (g *Grammar) PrecomputeMasks() {
	for q := 1; q < len(g.masks); q++ {
		g.Mask(State(q))
	}
}

// computeMask walks the DFA from q over the vocabulary trie depth-first:
// a subtree is skipped as soon as its prefix kills the DFA, so shared
// prefixes are walked once and dead ones not at all.
func (g *Grammar) computeMask(q int32) Bitset {
	v, d := g.v, g.d
	out := make(Bitset, g.words)
	type item struct{ node, st int32 }
	stack := make([]item, 1, 64)
	stack[0] = item{0, q}
	k := d.nclass
	for len(stack) > 0 {
		it := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		row := d.trans[int(it.st)*k : int(it.st)*k+k]
		for c := v.kidLo[it.node]; c < v.kidHi[it.node]; c++ {
			nq := row[d.classOf[v.nodeByte[c]]]
			if nq == 0 {
				continue
			}
			for _, t := range v.toks[v.tokLo[c]:v.tokHi[c]] {
				out[t>>6] |= 1 << (uint(t) & 63)
			}
			if v.kidLo[c] < v.kidHi[c] {
				stack = append(stack, item{c, nq})
			}
		}
	}
	if d.accept[q] {
		for _, t := range v.eos {
			out[t>>6] |= 1 << (uint(t) & 63)
		}
	}
	return out
}

func (g *Grammar) internMask(m Bitset) *Bitset {
	h := uint64(14695981039346656037)
	for _, w := range m {
		h = (h ^ w) * 1099511628211
		h ^= h >> 29
	}
	g.internMu.Lock()
	defer g.internMu.Unlock()
	for _, p := range g.intern[h] {
		if equalWords(*p, m) {
			return p
		}
	}
	p := &m
	g.intern[h] = append(g.intern[h], p)
	return p
}

func equalWords(a, b Bitset) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Matcher is one request's cursor over a Grammar. It is a small value:
// copy it (or call Clone) to explore alternatives. Not safe for concurrent
// use; the Grammar it points to is.
type Matcher struct {
	g *Grammar
	s State
}

// NewMatcher returns a cursor at the start state.
func (g *Grammar) NewMatcher() *Matcher { return &Matcher{g: g, s: g.Start()} }

// Grammar returns the grammar the matcher walks.
func (m *Matcher) Grammar() *Grammar { return m.g }

// State returns the current state.
func (m *Matcher) State() State { return m.s }

// SetState moves the cursor, e.g. to a state TreeStates returned for the
// accepted path.
func (m *Matcher) SetState(s State) { m.s = s }

// Allowed reports whether tok may come next.
func (m *Matcher) Allowed(tok int32) bool { return m.g.Allowed(m.s, tok) }

// Advance consumes tok. A forbidden token returns an error wrapping
// ErrForbidden and leaves the state unchanged.
func (m *Matcher) Advance(tok int32) error {
	n := m.g.Next(m.s, tok)
	if n == Dead {
		return fmt.Errorf("%w: token %d (%q) in state %d", ErrForbidden, tok, m.g.v.Piece(tok), m.s)
	}
	m.s = n
	return nil
}

// Mask returns the allowed tokens now (shared, read only).
func (m *Matcher) Mask() Bitset { return m.g.Mask(m.s) }

// Accepting reports whether the output so far is a complete match.
func (m *Matcher) Accepting() bool { return m.g.Accepting(m.s) }

// Done reports whether generation must stop: EOS was consumed, or the
// match is complete and nothing may follow.
func (m *Matcher) Done() bool { return m.g.Terminal(m.s) }

// Clone returns an independent copy of the cursor.
func (m *Matcher) Clone() *Matcher { c := *m; return &c }
