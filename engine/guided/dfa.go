package guided

import (
	"encoding/binary"
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
func determinize(b *builder, start int32, maxStates, work int) (*dfa, error) {
	ns := b.states
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
	// matches. A generation stamp avoids clearing the visited array.
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
				for i := len(ns[s].eps) - 1; i >= 0; i-- {
					stack = append(stack, ns[s].eps[i])
				}
			default:
				out = append(out, s)
			}
		}
		slices.Sort(out)
		return out
	}

	index := map[string]int32{}
	var sets [][]int32
	var keyBuf []byte
	key := func(set []int32) []byte {
		keyBuf = keyBuf[:0]
		for _, s := range set {
			keyBuf = binary.LittleEndian.AppendUint32(keyBuf, uint32(s))
		}
		return keyBuf
	}
	var trans []int32
	var accept []bool
	intern := func(set []int32) (int32, error) {
		if len(set) == 0 {
			return 0, nil
		}
		kk := key(set)
		if id, ok := index[string(kk)]; ok { // no allocation for the lookup
			return id, nil
		}
		if len(sets) >= maxStates {
			return 0, fmt.Errorf("%w: DFA exceeds %d states", ErrTooLarge, maxStates)
		}
		work -= len(set)
		if work < 0 {
			return 0, fmt.Errorf("%w: DFA construction exceeds its work budget", ErrTooLarge)
		}
		id := int32(len(sets))
		index[string(kk)] = id
		sets = append(sets, slices.Clone(set))
		acc := false
		for _, s := range set {
			if ns[s].kind == nMatch {
				acc = true
			}
		}
		accept = append(accept, acc)
		trans = append(trans, make([]int32, k)...)
		return id, nil
	}
	// State 0 is dead: the empty set.
	sets = append(sets, nil)
	accept = append(accept, false)
	trans = append(trans, make([]int32, k)...)
	index[""] = 0

	tmp := closure([]int32{start}, nil)
	st, err := intern(tmp)
	if err != nil {
		return nil, err
	}
	buckets := make([][]int32, k)
	for q := 1; q < len(sets); q++ {
		for c := range buckets {
			buckets[c] = buckets[c][:0]
		}
		for _, s := range sets[q] {
			n := &ns[s]
			if n.kind != nRange {
				continue
			}
			for c := int(d.classOf[n.lo]); c <= int(d.classOf[n.hi]); c++ {
				buckets[c] = append(buckets[c], n.next)
			}
		}
		for c := 0; c < k; c++ {
			if len(buckets[c]) == 0 {
				continue
			}
			tmp = closure(buckets[c], tmp)
			t, err := intern(tmp)
			if err != nil {
				return nil, err
			}
			trans[q*k+c] = t
		}
	}
	d.trans, d.accept, d.start = trans, accept, st
	d.prune()
	d.minimize()
	d.distances()
	return d, nil
}

// preds returns the reverse edges as CSR: the states with an edge into t
// are src[off[t]:off[t+1]] (with repeats, one per class).
func (d *dfa) preds() (off, src []int32) {
	n, k := d.numStates(), d.nclass
	off = make([]int32, n+1)
	for _, t := range d.trans {
		off[t+1]++
	}
	for i := 1; i <= n; i++ {
		off[i] += off[i-1]
	}
	src = make([]int32, n*k)
	fill := slices.Clone(off[:n])
	for q := 0; q < n; q++ {
		for c := 0; c < k; c++ {
			t := d.trans[q*k+c]
			src[fill[t]] = int32(q)
			fill[t]++
		}
	}
	return off, src
}

// prune sends every state that cannot reach acceptance to the dead state,
// so "not dead" means "can still complete".
func (d *dfa) prune() {
	n := d.numStates()
	live := make([]bool, n)
	off, src := d.preds()
	var queue []int32
	for q := 1; q < n; q++ {
		if d.accept[q] {
			live[q] = true
			queue = append(queue, int32(q))
		}
	}
	for len(queue) > 0 {
		t := queue[0]
		queue = queue[1:]
		for _, s := range src[off[t]:off[t+1]] {
			if s != 0 && !live[s] {
				live[s] = true
				queue = append(queue, s)
			}
		}
	}
	for i, t := range d.trans {
		if !live[t] {
			d.trans[i] = 0
		}
	}
	if !live[d.start] {
		d.start = 0
	}
}

// minimize merges equivalent states with Hopcroft's partition refinement,
// then renumbers: dead state 0, the rest in breadth-first order from the
// start, so equal languages give equal tables.
func (d *dfa) minimize() {
	n, k := d.numStates(), d.nclass
	// Inverse transitions, CSR keyed by target*k + class.
	off := make([]int32, n*k+1)
	for q := 0; q < n; q++ {
		for c := 0; c < k; c++ {
			off[int(d.trans[q*k+c])*k+c+1]++
		}
	}
	for i := 1; i < len(off); i++ {
		off[i] += off[i-1]
	}
	inv := make([]int32, n*k)
	fill := slices.Clone(off[:n*k])
	for q := 0; q < n; q++ {
		for c := 0; c < k; c++ {
			key := int(d.trans[q*k+c])*k + c
			inv[fill[key]] = int32(q)
			fill[key]++
		}
	}

	elems := make([]int32, 0, n)
	for q := 0; q < n; q++ {
		if d.accept[q] {
			elems = append(elems, int32(q))
		}
	}
	nacc := len(elems)
	for q := 0; q < n; q++ {
		if !d.accept[q] {
			elems = append(elems, int32(q))
		}
	}
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
	if nacc < n {
		push(newBlock(int32(nacc), int32(n)))
	}
	var splitter, touched []int32
	for len(work) > 0 {
		a := work[len(work)-1]
		work = work[:len(work)-1]
		inW[a] = false
		splitter = append(splitter[:0], elems[bStart[a]:bEnd[a]]...)
		for c := 0; c < k; c++ {
			touched = touched[:0]
			for _, t := range splitter {
				key := int(t)*k + c
				for _, s := range inv[off[key]:off[key+1]] {
					b := blockOf[s]
					i, j := pos[s], bStart[b]+marked[b]
					if i < j {
						continue // already marked
					}
					o := elems[j]
					elems[i], elems[j] = o, s
					pos[o], pos[s] = i, j
					if marked[b] == 0 {
						touched = append(touched, b)
					}
					marked[b]++
				}
			}
			for _, b := range touched {
				m := marked[b]
				marked[b] = 0
				if m == bEnd[b]-bStart[b] {
					continue
				}
				s := bStart[b]
				bStart[b] = s + m
				nb := newBlock(s, s+m)
				if inW[b] || m <= bEnd[b]-bStart[b] {
					push(nb)
				} else {
					push(b)
				}
			}
		}
	}

	// Renumber blocks: dead first, then BFS from start.
	nb := len(bStart)
	newID := make([]int32, nb)
	for i := range newID {
		newID[i] = -1
	}
	newID[blockOf[0]] = 0
	order := []int32{0}
	rep := []int32{0}
	next := int32(1)
	queue := []int32{d.start}
	if newID[blockOf[d.start]] < 0 {
		newID[blockOf[d.start]] = next
		next++
		order = append(order, blockOf[d.start])
		rep = append(rep, d.start)
	}
	for len(queue) > 0 {
		q := queue[0]
		queue = queue[1:]
		for c := 0; c < k; c++ {
			t := d.trans[int(q)*k+c]
			if newID[blockOf[t]] < 0 {
				newID[blockOf[t]] = next
				next++
				order = append(order, blockOf[t])
				rep = append(rep, t)
				queue = append(queue, t)
			}
		}
	}
	m := int(next)
	trans := make([]int32, m*k)
	accept := make([]bool, m)
	for i := 1; i < m; i++ {
		q := rep[i]
		accept[i] = d.accept[q]
		for c := 0; c < k; c++ {
			trans[i*k+c] = newID[blockOf[d.trans[int(q)*k+c]]]
		}
	}
	d.start = newID[blockOf[d.start]]
	d.trans, d.accept = trans, accept
}

// distances fills dist by a backwards breadth-first search from the
// accepting states.
func (d *dfa) distances() {
	n := d.numStates()
	d.dist = make([]int32, n)
	var queue []int32
	for q := range d.dist {
		d.dist[q] = -1
		if d.accept[q] {
			d.dist[q] = 0
			queue = append(queue, int32(q))
		}
	}
	off, src := d.preds()
	for len(queue) > 0 {
		t := queue[0]
		queue = queue[1:]
		for _, s := range src[off[t]:off[t+1]] {
			if s != 0 && d.dist[s] < 0 {
				d.dist[s] = d.dist[t] + 1
				queue = append(queue, s)
			}
		}
	}
}
