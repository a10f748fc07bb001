package spec

// NGram is prompt-lookup drafting: the continuations of the longest recent
// n-gram matches of the context's suffix, found anywhere in the
// conversation: the session's earlier turns (Context.History) and the
// sequence's own tokens, generated ones included. It needs no model and
// pays off when the output repeats its input (summaries, code edits,
// quoting earlier turns).
//
// At each tree node the candidates are the distinct tokens that followed
// earlier occurrences of the node's context suffix, longest n first, most
// recent first; rank r of a static shape takes the r-th candidate. A
// candidate's confidence is the share of the suffix's occurrences it
// followed at the longest n where it did, times n/(n+1) (a long match
// predicts better than a short one). What the target accepted of earlier
// trees calibrates it into an acceptance rate, and a node's score is the
// product of the rates along its path: its chance of being accepted. Dynamic
// shapes grow by that score; in every shape, static ones included, a node
// scoring below MinScore is left out with its descendants, so that a big
// budget costs rows only where lookup is sure. Its drafts are point masses
// (Q nil).
//
// Each slot keeps an index of its conversation (token → positions), kept in
// step with the committed tokens, so a lookup costs the occurrences of one
// token, not the length of the conversation. The zero value is ready to
// use.
type NGram struct {
	// MinN and MaxN bound the suffix lengths tried; zero means 2 and 4.
	// A single token's continuation is a poor guess (in chats that quote
	// an earlier turn, about one in six is what the target says next,
	// against one in two after two tokens and three in four after
	// three), and every drafted token costs a row of the target's pass.
	MinN, MaxN int
	// Window, when above zero, bounds how many most recent tokens of the
	// conversation are searched; zero searches all of it.
	Window int
	// MaxScan bounds how many of the most recent occurrences of a suffix's
	// last token a lookup examines; zero means 512.
	MaxScan int
	// MinScore is the least chance of being accepted (the product of the
	// calibrated rates along a node's path) a node needs to be drafted;
	// zero means DefaultNGramMinScore, below zero drafts whatever the
	// shape has room for. A drafted node costs a row of the target's pass
	// whether it is accepted or not, and lookup's candidates are often
	// wrong (after a two-token match about half are): without a floor, a
	// 32-node budget spends most of its rows on branches the target
	// rejects and loses to plain decoding; with it a big budget spends
	// rows only where lookup is fairly sure.
	MinScore float64

	slots map[int]*ngramIndex
	g     grower
	cal   calibration
	st    placer
	ctx   []int32 // a node's context for Mask, reused
}

// DefaultNGramMinScore is NGram's default floor on a node's chance of
// being accepted. Replayed offline over chats that retell an earlier turn,
// with step costs measured on a memory-bound target (the first drafted row
// about a quarter of a plain step, the second nearly free, the third and
// fourth about a seventh each), a floor of 0.2 took budgets of 16 and 32
// nodes from 0.7–1.0 times the plain speed to 1.3–1.4, and the best chain
// and the 4-node budget kept their 1.57. A floor of 0.3 kept big budgets
// closer still to the best, but cut short chains that begin with a token
// at even odds and then copy a quote, which the target often accepts.
const DefaultNGramMinScore = 0.2

var _ Drafter = (*NGram)(nil)

// Name returns "ngram".
func (g *NGram) Name() string { return "ngram" }

// Tiers offers lookup's dispatcher no large budgets (see NGramTiers).
func (g *NGram) Tiers() []Tier { return NGramTiers() }

// Rewind drops slot's index when the slot is freed (n = 0); otherwise the
// index follows the committed tokens by itself at the next Propose.
func (g *NGram) Rewind(slot, n int) {
	if n <= 0 {
		delete(g.slots, slot)
	}
}

func (g *NGram) params() (minN, maxN, scan int, floor float64) {
	minN, maxN, scan, floor = g.MinN, g.MaxN, g.MaxScan, g.MinScore
	if minN <= 0 {
		minN = 2
	}
	if maxN < minN {
		maxN = max(minN, 4)
	}
	if scan <= 0 {
		scan = 512
	}
	if floor == 0 {
		floor = DefaultNGramMinScore
	}
	return minN, maxN, scan, max(floor, 0)
}

// Propose fills each tree by lookup. It never fails.
func (g *NGram) Propose(ctxs []Context, trees []*Tree) error {
	minN, maxN, scan, floor := g.params()
	if g.slots == nil {
		g.slots = map[int]*ngramIndex{}
	}
	for i, c := range ctxs {
		ix := g.slots[c.Slot]
		if ix == nil {
			ix = &ngramIndex{at: map[int32][]int32{}}
			g.slots[c.Slot] = ix
		}
		ix.sync(c.History, c.Tokens)
		if g.cal.learn(&ix.fb, c.Tokens) {
			g.cal.age()
		}
		q := ngramQuery{ix: ix, minN: minN, maxN: maxN, scan: scan, window: g.Window}
		cands := func(path []int32, k int) ([]int32, []float32, [][]float32) {
			var mask []uint64
			if c.Mask != nil {
				g.ctx = append(append(g.ctx[:0], c.Tokens...), path...)
				mask = c.Mask(g.ctx)
			}
			toks, ps := q.lookup(path, k, mask)
			return toks, ps, nil
		}
		if c.Shape.Off() {
			trees[i].Reset()
			continue
		}
		if c.Shape.Dynamic {
			sh := c.Shape
			sh.MinScore = max(sh.MinScore, floor)
			g.g.reset(sh)
			g.g.cal = &g.cal
			g.g.grow(trees[i], &ix.fb, cands)
		} else {
			g.st.fill(trees[i], c.Shape, &scoring{floor: floor, cal: &g.cal, fb: &ix.fb}, cands)
		}
		ix.fb.record(trees[i], c.Tokens)
	}
	return nil
}

// ngramIndex is one slot's conversation (history, then tokens) and where
// each token occurs in it.
type ngramIndex struct {
	hay []int32
	at  map[int32][]int32 // ascending positions of each token in hay
	fb  feedback          // the last dynamic tree, for calibration
	// hits is lookup's room for the occurrences it finds and cands for
	// the candidates it returns, reused from node to node.
	hits  []ngramHit
	cands candBuf
}

// sync makes the index hold history followed by tokens, keeping what it
// already holds of them.
func (ix *ngramIndex) sync(history, tokens []int32) {
	n := len(history) + len(tokens)
	at := func(p int) int32 {
		if p < len(history) {
			return history[p]
		}
		return tokens[p-len(history)]
	}
	common := 0
	// While a slot is held its conversation only grows, so the index is
	// a prefix of it: checking the last indexed token keeps a step's cost
	// to the new tokens, not the conversation. A mismatch (a slot reused
	// without a rewind) falls back to the full comparison; a wrong index
	// could only cost acceptance, never change a token.
	if k := len(ix.hay); k > 0 && k <= n && ix.hay[k-1] == at(k-1) {
		common = k
	}
	for common < len(ix.hay) && common < n && ix.hay[common] == at(common) {
		common++
	}
	for p := len(ix.hay) - 1; p >= common; p-- {
		t := ix.hay[p]
		l := ix.at[t]
		ix.at[t] = l[:len(l)-1] // p is its last occurrence
	}
	ix.hay = ix.hay[:common]
	for p := common; p < n; p++ {
		t := int32(0)
		if p < len(history) {
			t = history[p]
		} else {
			t = tokens[p-len(history)]
		}
		ix.hay = append(ix.hay, t)
		ix.at[t] = append(ix.at[t], int32(p))
	}
}

// ngramQuery is one lookup configuration over an index.
type ngramQuery struct {
	ix                       *ngramIndex
	minN, maxN, scan, window int
}

// ngramHit is an earlier occurrence of the suffix ending at end, matching
// n tokens, followed by next.
type ngramHit struct {
	end, n int
	next   int32
}

// lookup returns up to k distinct tokens that followed earlier occurrences
// of the suffix of the conversation followed by path, for n from maxN down
// to minN, most recent occurrence first, skipping tokens mask forbids, and
// their confidences, in the index's storage: valid until its next lookup.
func (q ngramQuery) lookup(path []int32, k int, mask []uint64) ([]int32, []float32) {
	hay := q.ix.hay
	h := len(hay)
	L := h + len(path)
	if L < 2 || k <= 0 {
		return nil, nil
	}
	at := func(i int) int32 {
		if i < h {
			return hay[i]
		}
		return path[i-h]
	}
	lo := 0
	if q.window > 0 {
		lo = max(L-q.window, 0)
	}
	last := at(L - 1)
	hits := q.ix.hits[:0]
	defer func() { q.ix.hits = hits[:0] }()
	try := func(e int) {
		n := 0
		for n < q.maxN && e-n >= lo && at(e-n) == at(L-1-n) {
			n++
		}
		if n >= q.minN {
			hits = append(hits, ngramHit{end: e, n: n, next: at(e + 1)})
		}
	}
	// Occurrences ending in the path (most recent), then in the indexed
	// conversation; an occurrence needs a following token, so it ends
	// before L-1.
	for e := L - 2; e >= h && e >= lo; e-- {
		if at(e) == last {
			try(e)
		}
	}
	occ := q.ix.at[last]
	scanned := 0
	for j := len(occ) - 1; j >= 0 && scanned < q.scan; j-- {
		e := int(occ[j])
		if e >= L-1 {
			continue
		}
		if e < lo {
			break
		}
		scanned++
		try(e)
	}
	toks, ps := q.ix.cands.toks[:0], q.ix.cands.ps[:0]
	defer func() { q.ix.cands.toks, q.ix.cands.ps = toks, ps }()
	for n := min(q.maxN, L-1); n >= q.minN && len(toks) < k; n-- {
		total := 0
		for _, x := range hits {
			if x.n >= n && allowed(mask, x.next) {
				total++
			}
		}
		if total == 0 {
			continue
		}
		conf := float32(n) / float32(n+1)
		for _, x := range hits {
			if len(toks) == k {
				break
			}
			if x.n < n || !allowed(mask, x.next) || contains(toks, x.next) {
				continue
			}
			count := 0
			for _, y := range hits {
				if y.n >= n && y.next == x.next {
					count++
				}
			}
			toks = append(toks, x.next)
			ps = append(ps, conf*float32(count)/float32(total))
		}
	}
	return toks, ps
}

func contains(s []int32, v int32) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// age moves every bucket's rate a step back towards its prior, as one
// observation in the bucket would. Without it a bucket whose rate fell
// below the floor would never be drafted, so never observed again, and
// would stay shut however the traffic changed.
func (c *calibration) age() {
	for b := range c.hit {
		c.hit[b] *= calDecay
		c.try[b] *= calDecay
	}
}
