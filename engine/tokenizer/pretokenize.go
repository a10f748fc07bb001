package tokenizer

import (
	"sort"
	"unicode"
	"unicode/utf8"
)

// preKind names a byte-level BPE pre-tokenizer: the regex that splits text
// into words before merging. Go's regexp has no lookahead, so each is a
// hand-written scanner that reproduces the regex's leftmost-alternative
// matches exactly.
type preKind uint8

const (
	// preGPT2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
	preGPT2 preKind = iota + 1
	// preLlama3: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
	// ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
	preLlama3
	// preQwen2: preLlama3 with \p{N} (single digits).
	preQwen2
	// preSmolLM: every \p{N} is its own word, then preGPT2 on the rest.
	preSmolLM
	// The regex cascades of cascade.go.
	preDefault
	preFalcon
	preDeepSeekLLM
	preDeepSeekCoder
	preDeepSeekV3
	preBloom
	preViking
	preTekken
	preChameleon
)

// preKinds maps tokenizer.ggml.pre values to scanners, grouped as llama.cpp
// groups them; a vocab that names none gets llama.cpp's default cascade.
var preKinds = map[string]preKind{
	"": preDefault, "default": preDefault,
	"gpt2": preGPT2, "gpt-2": preGPT2, "mpt": preGPT2, "olmo": preGPT2, "jais": preGPT2, "phi-2": preGPT2, "roberta-bpe": preGPT2,
	"gigachat": preGPT2, "jina-es": preGPT2, "jina-de": preGPT2, "jina-v1-en": preGPT2, "jina-v2-es": preGPT2, "jina-v2-de": preGPT2, "jina-v2-code": preGPT2,
	"llama3": preLlama3, "llama-v3": preLlama3, "llama-bpe": preLlama3, "falcon3": preLlama3, "dbrx": preLlama3, "smaug-bpe": preLlama3, "chatglm-bpe": preLlama3,
	"qwen2": preQwen2, "deepseek-r1-qwen": preQwen2, "megrez": preQwen2, "stablelm2": preQwen2,
	"smollm": preSmolLM, "starcoder": preSmolLM, "refact": preSmolLM, "command-r": preSmolLM, "codeshell": preSmolLM, "exaone": preSmolLM, "minerva-7b": preSmolLM,
	"falcon": preFalcon, "deepseek-llm": preDeepSeekLLM, "deepseek-coder": preDeepSeekCoder, "deepseek-v3": preDeepSeekV3,
	"poro-chat": preBloom, "bloom": preBloom, "gpt3-finnish": preBloom, "viking": preViking,
	"tekken": preTekken, "chameleon": preChameleon,
}

// ignoresMerges are the pre-tokenizers whose words that are whole tokens
// skip the merges (llama.cpp's ignore_merges): not every vocab that shares
// Llama 3's regex (dbrx, smaug-bpe, chatglm-bpe do not).
var ignoresMerges = map[string]bool{"llama3": true, "llama-v3": true, "llama-bpe": true, "falcon3": true, "tekken": true}

func preNames() []string {
	var names []string
	for n := range preKinds {
		if n != "" {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	return names
}

// split appends the words of s to dst. The words are substrings of s and
// cover it exactly.
func (p preKind) split(s string, dst []string) []string {
	switch p {
	case preLlama3:
		return splitLlama3(s, 3, dst)
	case preQwen2:
		return splitLlama3(s, 1, dst)
	case preSmolLM:
		start := 0
		for i := 0; i < len(s); {
			r, n := utf8.DecodeRuneInString(s[i:])
			if isN(r) {
				dst = splitGPT2(s[start:i], dst)
				dst = append(dst, s[i:i+n])
				start = i + n
			}
			i += n
		}
		return splitGPT2(s[start:], dst)
	}
	if c, ok := cascades[p]; ok {
		return splitCascade(c, s, dst)
	}
	return splitGPT2(s, dst)
}

// Character classes as the regexes use them. An invalid byte decodes to
// U+FFFD, which is "other" (neither letter, number nor space).
func isL(r rune) bool     { return r >= 0 && unicode.IsLetter(r) }
func isN(r rune) bool     { return r >= 0 && unicode.IsNumber(r) }
func isSpace(r rune) bool { return r >= 0 && unicode.IsSpace(r) }
func isOther(r rune) bool { return r >= 0 && !isSpace(r) && !isL(r) && !isN(r) }
func isNL(r rune) bool    { return r == '\r' || r == '\n' }

// at returns the rune at byte offset i and its size; -1 past the end.
func at(s string, i int) (rune, int) {
	if i >= len(s) {
		return -1, 0
	}
	if c := s[i]; c < utf8.RuneSelf {
		return rune(c), 1
	}
	return utf8.DecodeRuneInString(s[i:])
}

// span returns the end of the run of runes from i that satisfy f, stopping
// after max runes (max < 0: unbounded).
func span(s string, i int, f func(rune) bool, max int) int {
	for max != 0 {
		r, n := at(s, i)
		if !f(r) {
			break
		}
		i += n
		max--
	}
	return i
}

// contraction returns the length of 's 't 're 've 'm 'll 'd at i (which holds
// the apostrophe), 0 if none. fold accepts ASCII upper case too.
func contraction(s string, i int, fold bool) int {
	lower := func(j int) byte {
		if j >= len(s) {
			return 0
		}
		c := s[j]
		if fold && 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		return c
	}
	switch c1 := lower(i + 1); c1 {
	case 's', 't', 'm', 'd':
		return 2
	case 'r', 'v':
		if lower(i+2) == 'e' {
			return 3
		}
	case 'l':
		if lower(i+2) == 'l' {
			return 3
		}
	}
	return 0
}

// whitespace matches \s+(?!\S)|\s+ at i (which holds a space): the whole
// run if it ends the text, else all but its last rune, else one rune.
func whitespace(s string, i int) int {
	j := i
	last := i
	for {
		r, n := at(s, j)
		if !isSpace(r) {
			break
		}
		last = j
		j += n
	}
	if j == len(s) || last == i {
		return j
	}
	return last
}

func splitGPT2(s string, dst []string) []string {
	for i := 0; i < len(s); {
		end := gpt2Word(s, i)
		dst = append(dst, s[i:end])
		i = end
	}
	return dst
}

func gpt2Word(s string, i int) int {
	r0, n0 := at(s, i)
	if r0 == '\'' {
		if n := contraction(s, i, false); n > 0 {
			return i + n
		}
	}
	j := i
	if r0 == ' ' {
		r1, _ := at(s, i+1)
		if isL(r1) || isN(r1) || isOther(r1) {
			j = i + 1
			r0 = r1
		}
	}
	switch {
	case isL(r0):
		return span(s, j, isL, -1)
	case isN(r0):
		return span(s, j, isN, -1)
	case isOther(r0):
		return span(s, j, isOther, -1)
	case isSpace(r0):
		return whitespace(s, i)
	}
	return i + n0 // unreachable: every rune is in one class
}

func splitLlama3(s string, maxDigits int, dst []string) []string {
	for i := 0; i < len(s); {
		end := llama3Word(s, i, maxDigits)
		dst = append(dst, s[i:end])
		i = end
	}
	return dst
}

func llama3Word(s string, i, maxDigits int) int {
	r0, n0 := at(s, i)
	r1, _ := at(s, i+n0)
	// (?i:'s|'t|'re|'ve|'m|'ll|'d)
	if r0 == '\'' {
		if n := contraction(s, i, true); n > 0 {
			return i + n
		}
	}
	// [^\r\n\p{L}\p{N}]?\p{L}+
	if isL(r0) {
		return span(s, i, isL, -1)
	}
	if !isNL(r0) && !isN(r0) && isL(r1) {
		return span(s, i+n0, isL, -1)
	}
	// \p{N}{1,3}
	if isN(r0) {
		return span(s, i, isN, maxDigits)
	}
	// ' '?[^\s\p{L}\p{N}]+[\r\n]*
	if r0 == ' ' && isOther(r1) {
		return span(s, span(s, i+1, isOther, -1), isNL, -1)
	}
	if isOther(r0) {
		return span(s, span(s, i, isOther, -1), isNL, -1)
	}
	// \s*[\r\n]+ : through the last newline of the whitespace run
	end := -1
	for j := i; ; {
		r, n := at(s, j)
		if !isSpace(r) {
			break
		}
		j += n
		if isNL(r) {
			end = j
		}
	}
	if end >= 0 {
		return end
	}
	// \s+(?!\S)|\s+
	return whitespace(s, i)
}
