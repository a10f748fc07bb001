package tokenizer

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// byteToRune is GPT-2's bytes_to_unicode: printable Latin-1 bytes map to
// themselves, the other 68 bytes to U+0100.. in byte order, so every byte is
// a visible character a merge table can name.
var byteToRune, runeToByte = func() ([256]rune, map[rune]byte) {
	var b2r [256]rune
	r2b := make(map[rune]byte, 256)
	n := rune(0)
	for b := 0; b < 256; b++ {
		if ('!' <= b && b <= '~') || (0xA1 <= b && b <= 0xAC) || (0xAE <= b && b <= 0xFF) {
			b2r[b] = rune(b)
		} else {
			b2r[b] = 256 + n
			n++
		}
		r2b[b2r[b]] = byte(b)
	}
	return b2r, r2b
}()

// decodeByteLevel maps a gpt2 token's characters back to bytes. A character
// outside the table (a malformed vocab) is kept as its UTF-8, as llama.cpp
// does.
func decodeByteLevel(tok string) []byte {
	out := make([]byte, 0, len(tok))
	for _, r := range tok {
		if b, ok := runeToByte[r]; ok {
			out = append(out, b)
		} else {
			out = utf8.AppendRune(out, r)
		}
	}
	return out
}

// buildBPE parses the merges into a rank table keyed by the two token ids.
func (t *Tokenizer) buildBPE(merges []string) error {
	t.ranks = make(map[[2]int32]merge, len(merges))
	for i, m := range merges {
		// llama.cpp splits at the first space after the first byte, so a
		// left side may itself start with a space.
		sp := -1
		if len(m) > 1 {
			if j := strings.IndexByte(m[1:], ' '); j >= 0 {
				sp = j + 1
			}
		}
		if sp < 0 {
			return fmt.Errorf("%w: merge %d %q has no space", ErrSpec, i, m)
		}
		left, right := m[:sp], m[sp+1:]
		l, ok := t.all[left]
		if !ok {
			return fmt.Errorf("%w: merge %d %q: left %q is not a token", ErrSpec, i, m, left)
		}
		r, ok := t.all[right]
		if !ok {
			return fmt.Errorf("%w: merge %d %q: right %q is not a token", ErrSpec, i, m, right)
		}
		res, ok := t.all[left+right]
		if !ok {
			return fmt.Errorf("%w: merge %d %q: result %q is not a token", ErrSpec, i, m, left+right)
		}
		k := [2]int32{l, r}
		if _, dup := t.ranks[k]; !dup { // the first (lowest) rank wins
			t.ranks[k] = merge{rank: int32(i), result: res}
		}
	}
	var buf [4]byte
	for b := 0; b < 256; b++ {
		n := utf8.EncodeRune(buf[:], byteToRune[b])
		if id, ok := t.all[string(buf[:n])]; ok {
			t.byteSym[b] = id
		}
	}
	return nil
}

// bpeBigram is a candidate merge; lid and rid detect stale entries.
type bpeBigram struct {
	left, right int32
	lid, rid    int32
	rank        int32
	result      int32
}

// encodeBPE is llama.cpp's llm_tokenizer_bpe: pre-tokenize into words, map
// each word's bytes through bytes_to_unicode, and apply merges lowest rank
// first (ties to the leftmost) within the word.
func (t *Tokenizer) encodeBPE(out []int32, frag string, sc *scratch) []int32 {
	sc.words = t.pre.split(frag, sc.words[:0])
	for _, w := range sc.words {
		out = t.encodeWord(out, w, sc)
	}
	return out
}

func (t *Tokenizer) encodeWord(out []int32, w string, sc *scratch) []int32 {
	if t.ignoreMerges {
		mapped := sc.text[:0]
		for i := 0; i < len(w); i++ {
			mapped = utf8.AppendRune(mapped, byteToRune[w[i]])
		}
		sc.text = mapped
		if id, ok := t.mergeable[string(mapped)]; ok {
			return append(out, id)
		}
	}
	syms := sc.syms[:0]
	for i := 0; i < len(w); i++ {
		next := int32(i + 1)
		if i == len(w)-1 {
			next = -1
		}
		syms = append(syms, symbol{n: 1, prev: int32(i - 1), next: next, id: t.byteSym[w[i]]})
	}
	sc.syms = syms
	h := sc.bpeHeap[:0]
	try := func(left, right int32) {
		if left < 0 || right < 0 {
			return
		}
		l, r := syms[left].id, syms[right].id
		if l < 0 || r < 0 {
			return
		}
		m, ok := t.ranks[[2]int32{l, r}]
		if !ok {
			return
		}
		h = heapPush(h, bpeBigram{left: left, right: right, lid: l, rid: r, rank: m.rank, result: m.result}, bpeBefore)
	}
	for i := int32(1); i < int32(len(syms)); i++ {
		try(i-1, i)
	}
	for len(h) > 0 {
		var bg bpeBigram
		bg, h = heapPop(h, bpeBefore)
		l, r := &syms[bg.left], &syms[bg.right]
		if l.n == 0 || r.n == 0 || l.id != bg.lid || r.id != bg.rid {
			continue // stale
		}
		l.n += r.n
		l.id = bg.result
		r.n = 0
		l.next = r.next
		if r.next >= 0 {
			syms[r.next].prev = bg.left
		}
		try(l.prev, bg.left)
		try(bg.left, l.next)
	}
	sc.bpeHeap = h
	for i := int32(0); i != -1 && len(syms) > 0; i = syms[i].next {
		switch {
		case syms[i].id >= 0:
			out = append(out, syms[i].id)
		case t.unk >= 0:
			// Only unmerged single bytes lack an id: the vocab misses
			// that byte's character.
			out = append(out, t.unk)
		}
	}
	return out
}

// bpeBefore orders the queue: lowest rank first, then leftmost.
func bpeBefore(a, b *bpeBigram) bool {
	return a.rank < b.rank || (a.rank == b.rank && a.left < b.left)
}
