package tokenizer

import (
	"strings"
	"unicode/utf8"
)

// spmSpace is SentencePiece's visible space, U+2581 "▁".
const spmSpace = "\u2581"

// scratch holds one Encode call's reusable buffers.
type scratch struct {
	text    []byte
	syms    []symbol
	spmHeap []spmBigram
	bpeHeap []bpeBigram
	words   []string
}

// symbol is a run of text in the merge chain: text[start:start+n] (SPM) or a
// token id (BPE); n == 0 marks a symbol merged into its left neighbour.
type symbol struct {
	start, n   int32
	prev, next int32
	id         int32 // the token this symbol is once merged (BPE: always), -1 if none yet
}

// spmBigram is a candidate merge of two adjacent symbols; size (the merged
// byte length) detects that a side has grown since it was queued.
type spmBigram struct {
	left, right int32
	score       float32
	size        int32
	id          int32 // the merged token
}

// utf8Len is llama.cpp's unicode_len_utf8: the length a lead byte announces,
// 1 for continuation bytes, so invalid input still splits deterministically.
func utf8Len(c byte) int {
	switch {
	case c < 0xC0:
		return 1
	case c < 0xE0:
		return 2
	case c < 0xF0:
		return 3
	}
	return 4
}

// encodeSPM is llama.cpp's llm_tokenizer_spm: spaces become ▁ (with a dummy
// prefix when asked), the text splits into UTF-8 characters, and the adjacent
// pair whose concatenation is the highest-scoring token merges first (ties to
// the leftmost) until no pair is a token. Characters left that are not tokens
// fall back to <0xNN> byte tokens, or UNK.
func (t *Tokenizer) encodeSPM(out []int32, frag string, prefix bool, sc *scratch) []int32 {
	if need := len(frag)*3 + 3; cap(sc.text) < need {
		sc.text = make([]byte, 0, need)
	}
	text := sc.text[:0]
	if prefix {
		text = append(text, spmSpace...)
	}
	for i := 0; i < len(frag); i++ {
		if frag[i] == ' ' {
			text = append(text, spmSpace...)
		} else {
			text = append(text, frag[i])
		}
	}
	sc.text = text
	if len(text) == 0 {
		return out
	}

	if !t.spmSplit || !utf8.Valid(text) {
		return t.mergeSPM(out, text, sc)
	}
	// No token has ▁ after another character, so no merge crosses the
	// start of a ▁ run: each word merges alone, in a small queue, with the
	// same result as one queue over the whole text.
	start := 0
	for i := 1; i+len(spmSpace) <= len(text); i++ {
		if text[i] == spmSpace[0] && string(text[i:i+len(spmSpace)]) == spmSpace && !endsWithSpace(text[:i]) {
			out = t.mergeSPM(out, text[start:i], sc)
			start = i
			i += len(spmSpace) - 1
		}
	}
	return t.mergeSPM(out, text[start:], sc)
}

func endsWithSpace(b []byte) bool {
	return len(b) >= len(spmSpace) && string(b[len(b)-len(spmSpace):]) == spmSpace
}

// mergeSPM runs the merge queue over text and appends the resulting ids.
func (t *Tokenizer) mergeSPM(out []int32, text []byte, sc *scratch) []int32 {
	if cap(sc.syms) < len(text) {
		sc.syms = make([]symbol, 0, len(text))
		sc.spmHeap = make([]spmBigram, 0, len(text))
	}
	syms := sc.syms[:0]
	for off := 0; off < len(text); {
		n := min(utf8Len(text[off]), len(text)-off)
		idx := int32(len(syms))
		next := idx + 1
		if off+n == len(text) {
			next = -1
		}
		syms = append(syms, symbol{start: int32(off), n: int32(n), prev: idx - 1, next: next, id: -1})
		off += n
	}
	sc.syms = syms

	h := sc.spmHeap[:0]
	try := func(left, right int32) {
		if left < 0 || right < 0 {
			return
		}
		l, r := &syms[left], &syms[right]
		id, ok := t.mergeable[string(text[l.start:r.start+r.n])]
		if !ok {
			return
		}
		h = heapPush(h, spmBigram{left: left, right: right, score: t.scores[id], size: l.n + r.n, id: id}, spmBefore)
	}
	for i := int32(1); i < int32(len(syms)); i++ {
		try(i-1, i)
	}
	for len(h) > 0 {
		var bg spmBigram
		bg, h = heapPop(h, spmBefore)
		l, r := &syms[bg.left], &syms[bg.right]
		if l.n == 0 || r.n == 0 || l.n+r.n != bg.size {
			continue // stale: a side merged elsewhere since this was queued
		}
		l.n += r.n
		l.id = bg.id
		r.n = 0
		l.next = r.next
		if r.next >= 0 {
			syms[r.next].prev = bg.left
		}
		try(l.prev, bg.left)
		try(bg.left, l.next)
	}
	sc.spmHeap = h

	for i := int32(0); i != -1; i = syms[i].next {
		s := syms[i]
		if s.id >= 0 { // merged: its token is known
			out = append(out, s.id)
			continue
		}
		piece := text[s.start : s.start+s.n]
		if id, ok := t.mergeable[string(piece)]; ok {
			out = append(out, id)
			continue
		}
		for _, c := range piece {
			if id := t.byteTok[c]; id >= 0 {
				out = append(out, id)
			} else if t.unk >= 0 {
				out = append(out, t.unk)
			}
		}
	}
	return out
}

// spmBefore orders the queue: highest score first, then leftmost.
func spmBefore(a, b *spmBigram) bool {
	return a.score > b.score || (a.score == b.score && a.left < b.left)
}

// spmWordsIndependent reports whether no mergeable token has ▁ after a
// character other than ▁, which lets encodeSPM merge word by word.
func spmWordsIndependent(mergeable map[string]int32) bool {
	for tok := range mergeable {
		for j := 1; j < len(tok); j++ {
			i := strings.Index(tok[j:], spmSpace)
			if i < 0 {
				break
			}
			j += i
			if !strings.HasSuffix(tok[:j], spmSpace) {
				return false
			}
		}
	}
	return true
}
