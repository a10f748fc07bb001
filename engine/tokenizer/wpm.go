package tokenizer

import (
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// WordPiece (tokenizer.ggml.model "bert"), as llama.cpp's BERT vocabs
// carry it: the converter marks a word's first piece with a leading ▁
// rather than its continuations with ##.

// encodeWPM appends the tokens of one plain fragment: the text is split
// into words (splitWPM), and each word, with ▁ before it, is covered
// greedily by the longest tokens from its start; a word that cannot be
// covered becomes one UNK.
func (t *Tokenizer) encodeWPM(out []int32, frag string, sc *scratch) []int32 {
	sc.words = splitWPM(frag, sc.words[:0])
	for _, w := range sc.words {
		word := spmSpace + w
		start := len(out)
		for i := 0; i < len(word); {
			// Byte positions, as llama.cpp compares them: a piece that
			// would split a character is simply not in the vocab.
			j := min(len(word), i+t.maxTokenLen)
			for ; j > i; j-- {
				if id, ok := t.all[word[i:j]]; ok {
					out = append(out, id)
					break
				}
			}
			if j == i {
				out = out[:start]
				break
			}
			i = j
		}
		if len(out) == start {
			out = append(out, t.unk)
		}
	}
	return out
}

// splitWPM is BERT's basic tokenizer as llama.cpp runs it: every
// character is reduced to the first code point of its canonical
// decomposition (which drops accents) and lower-cased; whitespace ends a
// word; NUL, U+FFFD and control characters are dropped; punctuation, ASCII
// symbols and CJK ideographs are words of their own.
func splitWPM(s string, dst []string) []string {
	var word []byte
	flush := func() {
		if len(word) > 0 {
			dst = append(dst, string(word))
			word = word[:0]
		}
	}
	for _, r := range s {
		r = wpmBase(r)
		switch {
		case unicode.IsSpace(r):
			flush()
			continue
		case r == 0 || r == utf8.RuneError || unicode.Is(unicode.C, r):
			continue
		}
		lower := unicode.ToLower(r)
		if unicode.IsPunct(r) || r < 0x7F && unicode.IsSymbol(r) || isCJK(r) {
			flush()
			dst = append(dst, string(lower))
			continue
		}
		word = utf8.AppendRune(word, lower)
	}
	flush()
	return dst
}

// wpmBase is the first code point of r's canonical decomposition.
func wpmBase(r rune) rune {
	if r < 0xC0 {
		return r
	}
	var buf [utf8.UTFMax]byte
	n := utf8.EncodeRune(buf[:], r)
	if norm.NFD.IsNormal(buf[:n]) {
		return r
	}
	d, _ := utf8.DecodeRune(norm.NFD.Bytes(buf[:n]))
	return d
}

// isCJK reports the CJK ideograph blocks BERT splits one by one (the
// ranges of its reference implementation, a typo in one included).
func isCJK(r rune) bool {
	return r >= 0x4E00 && r <= 0x9FFF ||
		r >= 0x3400 && r <= 0x4DBF ||
		r >= 0x20000 && r <= 0x2A6DF ||
		r >= 0x2A700 && r <= 0x2B73F ||
		r >= 0x2B740 && r <= 0x2B81F ||
		r >= 0x2B920 && r <= 0x2CEAF ||
		r >= 0xF900 && r <= 0xFAFF ||
		r >= 0x2F800 && r <= 0x2FA1F
}
