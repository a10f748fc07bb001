package guided

import (
	"fmt"
	"slices"
)

// dfa is a complete, minimal byte DFA. State 0 is the dead state (every
// transition loops to it, never accepting); every other state can reach an
// accepting state. Bytes are grouped into classes that no transition tells
// apart, so the table is states × classes.
type dfa struct {
	nclass  int
	classOf [256]uint8
	trans   []int32 // state*nclass + class → state
	accept  []bool
	start   int32
	// dist is the fewest bytes from each state to an accepting state
	// (-1 for the dead state).
	dist []int32
}

func (d *dfa) numStates() int { return len(d.accept) }

func (d *dfa) step(q int32, c byte) int32 {
	return d.trans[int(q)*d.nclass+int(d.classOf[c])]
}

func (d *dfa) run(q int32, s []byte) int32 {
	for _, c := range s {
		if q == 0 {
			return 0
		}
		q = d.step(q, c)
	}
	return q
}

// determinize runs the subset construction from start, then drops states
// that cannot reach acceptance and minimizes with Hopcroft's algorithm.
// maxStates bounds the DFA before minimization; work bounds the total
// size of the NFA-state sets it builds, so a pathological pattern fails
// fast with ErrTooLarge instead of running for minutes.
//
// The unminimized DFA stays sparse: per state, only its edges into
// non-empty sets, in class order. Most of a states × classes table would
// point at the dead state, and with sparse edges neither pruning nor
// minimization ever looks at those; only the minimal DFA gets a table.
func determinize(b *builder, start int32, maxStates, work int) (*dfa, error) {
	ns, edges := b.states, b.edges
	d := &dfa{}

	// Byte classes: maximal intervals that no range boundary splits.
	var cut [257]bool
	cut[0] = true
	for i := range ns {
		if ns[i].kind == nRange {
			cut[ns[i].lo] = true
			cut[int(ns[i].hi)+1] = true
		}
	}
	c := -1
	for i := 0; i < 256; i++ {
		if cut[i] {
			c++
		}
		d.classOf[i] = uint8(c)
	}
	d.nclass = c + 1
	k := d.nclass

	// Epsilon closure keeps only the states that do something: ranges and
	// matches, sorted so that equal sets are equal slices. A generation
	// stamp avoids clearing the visited array.
	seen := make([]uint32, len(ns))
	var stamp uint32
	var stack []int32
	closure := func(seeds []int32, out []int32) []int32 {
		stamp++
		out = out[:0]
		stack = append(stack[:0], seeds...)
		for len(stack) > 0 {
			s := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			if seen[s] == stamp {
				continue
			}
			seen[s] = stamp
			switch ns[s].kind {
			case nEps:
				for e := ns[s].eps; e != 0; e = edges[e].next {
					stack = append(stack, edges[e].to)
				}
			default:
				out = append(out, s)
			}
		}
		slices.Sort(out)
		return out
	}

	// DFA state q is the NFA-state set sets.get(q); state 0, the empty set,
	// is dead. Its edges are ecls/eto[eoff[q]:eoff[q+1]].
	sets := newSetTable()
	accept := []bool{false}
	eoff := []int32{0, 0}
	var ecls []uint8
	var eto []int32
	intern := func(set []int32) (int32, error) {
		if len(set) == 0 {
			return 0, nil
		}
		h := hashSet(set)
		if id, ok := sets.find(set, h); ok {
			return id, nil
		}
		if sets.len() >= maxStates {
			return 0, fmt.Errorf("%w: DFA exceeds %d states", ErrTooLarge, maxStates)
		}
		work -= len(set)
		if work < 0 {
			return 0, fmt.Errorf("%w: DFA construction exceeds its work budget", ErrTooLarge)
		}
		acc := false
		for _, s := range set {
			if ns[s].kind == nMatch {
				acc = true
			}
		}
		accept = append(accept, acc)
		return sets.add(set, h), nil
	}

	tmp := closure([]int32{start}, nil)
	st, err := intern(tmp)
	if err != nil {
		return nil, err
	}
	buckets := make([][]int32, k)
	// Almost every target set grows from a single NFA state (one range
	// matched the byte class), so the DFA state reached from each single
	// seed is remembered: one lookup instead of a closure and a hash.
	// -1: not known yet.
	fromSeed := make([]int32, len(ns))
	for i := range fromSeed {
		fromSeed[i] = -1
	}
	for q := 1; q < sets.len(); q++ {
		cLo, cHi := k, -1 // the classes any range of q covers
		for _, s := range sets.get(q) {
			n := &ns[s]
			if n.kind != nRange {
				continue
			}
			lo, hi := int(d.classOf[n.lo]), int(d.classOf[n.hi])
			// Buckets outside [cLo, cHi] still hold an earlier state's
			// seeds: clear them as the span grows over them.
			if cLo > cHi {
				cLo, cHi = lo, lo-1
			}
			for c := lo; c < cLo; c++ {
				buckets[c] = buckets[c][:0]
			}
			for c := cHi + 1; c <= hi; c++ {
				buckets[c] = buckets[c][:0]
			}
			cLo, cHi = min(cLo, lo), max(cHi, hi)
			for c := lo; c <= hi; c++ {
				buckets[c] = append(buckets[c], n.next)
			}
		}
		var t int32
		for c := cLo; c <= cHi; c++ {
			if len(buckets[c]) == 0 {
				continue
			}
			switch {
			case c > cLo && slices.Equal(buckets[c], buckets[c-1]):
				// Neighbouring classes usually see the same ranges (a
				// string body's [^"\\] spans most of them): same
				// seeds, same target.
			case len(buckets[c]) == 1 && fromSeed[buckets[c][0]] >= 0:
				t = fromSeed[buckets[c][0]]
			default:
				tmp = closure(buckets[c], tmp)
				if t, err = intern(tmp); err != nil {
					return nil, err
				}
				if len(buckets[c]) == 1 {
					fromSeed[buckets[c][0]] = t
				}
			}
			if t != 0 {
				ecls = append(ecls, uint8(c))
				eto = append(eto, t)
			}
		}
		eoff = append(eoff, int32(len(eto)))
	}
	sets = nil // the sets are done with; let them go before minimizing
	g := &sparseDFA{k: k, start: st, accept: accept, eoff: eoff, ecls: ecls, eto: eto}
	g.prune()
	g.minimize(d)
	d.distances()
	return d, nil
}

// setTable interns sorted NFA-state sets: one arena, an open-addressing
// index keyed by each set's hash, no allocation per lookup.
type setTable struct {
	arena []int32
	off   []int32 // set i is arena[off[i]:off[i+1]]
	hash  []uint64
	slots []int32 // set id + 1; 0 is an empty slot
}

// newSetTable returns a table holding the empty set as id 0 (not indexed:
// callers map the empty set to 0 themselves).
func newSetTable() *setTable {
	return &setTable{off: []int32{0, 0}, hash: []uint64{0}, slots: make([]int32, 1024)}
}

func (t *setTable) len() int { return len(t.off) - 1 }

func (t *setTable) get(id int) []int32 { return t.arena[t.off[id]:t.off[id+1]] }

func hashSet(set []int32) uint64 {
	h := uint64(len(set))
	for _, s := range set {
		h = (h ^ uint64(uint32(s))) * 0x9E3779B97F4A7C15
		h ^= h >> 29
	}
	return h
}

func (t *setTable) find(set []int32, h uint64) (int32, bool) {
	mask := uint64(len(t.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		id := t.slots[i] - 1
		if id < 0 {
			return 0, false
		}
		if t.hash[id] == h && slices.Equal(t.get(int(id)), set) {
			return id, true
		}
	}
}

func (t *setTable) add(set []int32, h uint64) int32 {
	id := int32(t.len())
	t.arena = append(t.arena, set...)
	t.off = append(t.off, int32(len(t.arena)))
	t.hash = append(t.hash, h)
	if 2*t.len() > len(t.slots) {
		t.slots = make([]int32, 2*len(t.slots))
		for j := 1; j < t.len(); j++ {
			t.place(int32(j))
		}
	} else {
		t.place(id)
	}
	return id
}

func (t *setTable) place(id int32) {
	mask := uint64(len(t.slots) - 1)
	i := t.hash[id] & mask
	for t.slots[i] != 0 {
		i = (i + 1) & mask
	}
	t.slots[i] = id + 1
}

// sparseDFA is the subset construction's output: state 0 dead, edges into
// it left out, each state's edges in class order.
type sparseDFA struct {
	k      int
	start  int32
	accept []bool
	eoff   []int32 // state q's edges are ecls/eto[eoff[q]:eoff[q+1]]
	ecls   []uint8
	eto    []int32

	live []bool
	// Reverse edges, CSR: the edges into t come from rsrc[roff[t]:roff[t+1]]
	// on classes rcls[...].
	roff []int32
	rsrc []int32
	rcls []uint8
}

func (g *sparseDFA) numStates() int { return len(g.accept) }

// prune marks the states that can reach acceptance. The others are
// equivalent to the dead state: their edges, and edges into them, are
// ignored from here on, so "not dead" means "can still complete".
func (g *sparseDFA) prune() {
	n := g.numStates()
	g.roff = make([]int32, n+1)
	for _, t := range g.eto {
		g.roff[t+1]++
	}
	for i := 1; i <= n; i++ {
		g.roff[i] += g.roff[i-1]
	}
	g.rsrc = make([]int32, len(g.eto))
	g.rcls = make([]uint8, len(g.eto))
	fill := slices.Clone(g.roff[:n])
	for q := 1; q < n; q++ {
		for e := g.eoff[q]; e < g.eoff[q+1]; e++ {
			t := g.eto[e]
			g.rsrc[fill[t]] = int32(q)
			g.rcls[fill[t]] = g.ecls[e]
			fill[t]++
		}
	}
	g.live = make([]bool, n)
	queue := fill[:0] // reuse: fill is no longer needed
	for q := 1; q < n; q++ {
		if g.accept[q] {
			g.live[q] = true
			queue = append(queue, int32(q))
		}
	}
	for i := 0; i < len(queue); i++ {
		t := queue[i]
		for _, s := range g.rsrc[g.roff[t]:g.roff[t+1]] {
			if !g.live[s] {
				g.live[s] = true
				queue = append(queue, s)
			}
		}
	}
}

// minimize merges equivalent live states with Hopcroft's partition
// refinement and writes the minimal DFA's table into d, renumbered: dead
// state 0, the rest in breadth-first order from the start (classes in
// order), so equal languages give equal tables.
//
// The dead state is left out of the partition. It is its own class (it
// alone cannot reach acceptance), and Hopcroft needs every initial block
// but one as a splitter, so it is never one: edges into it, most of a
// DFA's edges, are never scanned. Every source of an edge into a live
// state is live, so the reverse edges of live states are all that
// refinement reads.
func (g *sparseDFA) minimize(d *dfa) {
	n, k := g.numStates(), g.k
	if !g.live[g.start] {
		d.trans = make([]int32, k)
		d.accept = []bool{false}
		d.start = 0
		return
	}
	elems := make([]int32, 0, n)
	for q := 1; q < n; q++ {
		if g.live[q] && g.accept[q] {
			elems = append(elems, int32(q))
		}
	}
	nacc := len(elems)
	for q := 1; q < n; q++ {
		if g.live[q] && !g.accept[q] {
			elems = append(elems, int32(q))
		}
	}
	nlive := len(elems)
	pos := make([]int32, n)
	for i, q := range elems {
		pos[q] = int32(i)
	}
	blockOf := make([]int32, n)
	var bStart, bEnd, marked []int32
	var inW []bool
	var work []int32
	newBlock := func(s, e int32) int32 {
		id := int32(len(bStart))
		bStart = append(bStart, s)
		bEnd = append(bEnd, e)
		marked = append(marked, 0)
		inW = append(inW, false)
		for _, q := range elems[s:e] {
			blockOf[q] = id
		}
		return id
	}
	push := func(b int32) {
		if !inW[b] {
			inW[b] = true
			work = append(work, b)
		}
	}
	if nacc > 0 {
		push(newBlock(0, int32(nacc)))
	}
	if nacc < nlive {
		push(newBlock(int32(nacc), int32(nlive)))
	}
	cnt := make([]int32, k)
	var classes []uint8
	var srcs, bySrc []int32
	var cls []uint8
	var touched []int32
	for len(work) > 0 {
		a := work[len(work)-1]
		work = work[:len(work)-1]
		inW[a] = false
		// The splitter's reverse edges, read before any split moves
		// elements, then bucketed by class with a counting sort.
		srcs, cls, classes = srcs[:0], cls[:0], classes[:0]
		for _, t := range elems[bStart[a]:bEnd[a]] {
			lo, hi := g.roff[t], g.roff[t+1]
			srcs = append(srcs, g.rsrc[lo:hi]...)
			cls = append(cls, g.rcls[lo:hi]...)
		}
		for _, c := range cls {
			if cnt[c] == 0 {
				classes = append(classes, c)
			}
			cnt[c]++
		}
		var o int32
		for _, c := range classes {
			o, cnt[c] = o+cnt[c], o
		}
		if cap(bySrc) < len(srcs) {
			bySrc = make([]int32, len(srcs), 2*len(srcs))
		}
		bySrc = bySrc[:len(srcs)]
		for i, c := range cls {
			bySrc[cnt[c]] = srcs[i]
			cnt[c]++
		}
		lo := int32(0)
		for _, c := range classes {
			hi := cnt[c]
			cnt[c] = 0
			touched = touched[:0]
			// One edge per (state, class): each source appears once.
			for _, s := range bySrc[lo:hi] {
				b := blockOf[s]
				i, j := pos[s], bStart[b]+marked[b]
				o := elems[j]
				elems[i], elems[j] = o, s
				pos[o], pos[s] = i, j
				if marked[b] == 0 {
					touched = append(touched, b)
				}
				marked[b]++
			}
			lo = hi
			for _, b := range touched {
				m := marked[b]
				marked[b] = 0
				if m == bEnd[b]-bStart[b] {
					continue
				}
				// The smaller part becomes the new block: relabelling
				// it is what keeps refinement O(m log n). It is also
				// the one to split by when b is not queued, and must
				// be queued too when b is.
				s, e := bStart[b], bEnd[b]
				var nb int32
				if m <= e-s-m {
					bStart[b] = s + m
					nb = newBlock(s, s+m)
				} else {
					bEnd[b] = s + m
					nb = newBlock(s+m, e)
				}
				push(nb)
			}
		}
	}

	// Renumber blocks: dead first, then BFS from start.
	newID := make([]int32, len(bStart))
	for i := range newID {
		newID[i] = -1
	}
	rep := []int32{0, g.start}
	newID[blockOf[g.start]] = 1
	for i := 1; i < len(rep); i++ {
		q := rep[i]
		for e := g.eoff[q]; e < g.eoff[q+1]; e++ {
			if t := g.eto[e]; g.live[t] && newID[blockOf[t]] < 0 {
				newID[blockOf[t]] = int32(len(rep))
				rep = append(rep, t)
			}
		}
	}
	m := len(rep)
	d.trans = make([]int32, m*k)
	d.accept = make([]bool, m)
	for i := 1; i < m; i++ {
		q := rep[i]
		d.accept[i] = g.accept[q]
		row := d.trans[i*k : i*k+k]
		for e := g.eoff[q]; e < g.eoff[q+1]; e++ {
			if t := g.eto[e]; g.live[t] {
				row[g.ecls[e]] = newID[blockOf[t]]
			}
		}
	}
	d.start = 1
}

// distances fills dist by a backwards breadth-first search from the
// accepting states.
func (d *dfa) distances() {
	n, k := d.numStates(), d.nclass
	d.dist = make([]int32, n)
	// Reverse edges of the live part, CSR.
	off := make([]int32, n+1)
	for _, t := range d.trans[k:] {
		if t != 0 {
			off[t+1]++
		}
	}
	for i := 1; i <= n; i++ {
		off[i] += off[i-1]
	}
	src := make([]int32, off[n])
	fill := slices.Clone(off[:n])
	for q := 1; q < n; q++ {
		for _, t := range d.trans[q*k : q*k+k] {
			if t != 0 {
				src[fill[t]] = int32(q)
				fill[t]++
			}
		}
	}
	queue := fill[:0]
	for q := range d.dist {
		d.dist[q] = -1
		if d.accept[q] {
			d.dist[q] = 0
			queue = append(queue, int32(q))
		}
	}
	for i := 0; i < len(queue); i++ {
		t := queue[i]
		for _, s := range src[off[t]:off[t+1]] {
			if d.dist[s] < 0 {
				d.dist[s] = d.dist[t] + 1
				queue = append(queue, s)
			}
		}
	}
}
