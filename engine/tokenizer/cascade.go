package tokenizer

import (
	"regexp"
	"unicode"
	"unicode/utf8"
)

// Most byte-level BPE pre-tokenizers are a cascade of regexes, the way
// llama.cpp runs them: each regex splits every fragment the previous one
// left into its matches and the text between them (both stay fragments),
// and the last cascade's fragments are the words. Two of llama.cpp's
// regexes (GPT-2's and Llama 3's) have hand-written scanners here
// (pretokenize.go); the others run on Go's regexp, whose leftmost-first
// matches are those of the ECMAScript engine llama.cpp uses, once three
// differences are bridged:
//
//   - ECMAScript's \s is [\t\n\v\f\r ] (Go's lacks \v), and llama.cpp maps
//     every non-ASCII space to \v first, so wsClass stands in for \s.
//   - A regex with a Unicode category (\p{L}, \p{N}, \p{P}, \p{M}, \p{S})
//     runs on a "collapsed" text in which every non-ASCII code point is
//     replaced by one stand-in per category (U+00D0..U+00D5), and each
//     \p{X} by its stand-in plus the ASCII characters of that category
//     (catL, catN, ... below). So, as in llama.cpp, '~' is neither
//     punctuation nor symbol there.
//   - Go has no lookahead: the one form in use, \s+(?!\S)|\s+ at the end
//     of an alternation, is a capture group that stage.split shortens by
//     its last space when a non-space follows it.

const (
	wsClass    = `[\t\n\v\f\r ]`
	catN       = `\x{D1}0-9`
	catL       = `\x{D2}A-Za-z`
	catP       = `\x{D3}!-#%-*,-/:;?@\[-\]_{}`
	catM       = `\x{D4}`
	catS       = `\x{D5}$+<-=>^` + "`" + `|`
	cjk        = `[\x{4E00}-\x{9FA5}\x{800}-\x{4E00}\x{AC00}-\x{D7FF}]+`
	threeDigit = `[0-9][0-9][0-9]`
)

// deepSeekLetters are the letters of DeepSeek LLM's tokenizer.json, as
// code point ranges.
const deepSeekLetters = `A-Za-z\x{B5}\x{C0}-\x{D6}\x{D8}-\x{F6}\x{F8}-\x{1BA}\x{1BC}-\x{1BF}\x{1C4}-\x{293}\x{295}-\x{2AF}\x{370}-\x{373}\x{376}\x{377}\x{37B}-\x{37D}\x{37F}\x{386}\x{388}-\x{38A}\x{38C}\x{38E}-\x{3A1}\x{3A3}-\x{3F5}\x{3F7}-\x{481}\x{48A}-\x{52F}\x{531}-\x{556}\x{10A0}-\x{10C5}\x{13A0}-\x{13F5}\x{13F8}-\x{13FD}\x{1C90}-\x{1CBA}\x{1CBD}-\x{1CBF}\x{1D00}-\x{1D2B}\x{1D6B}-\x{1D77}\x{1D79}-\x{1D9A}\x{1E00}-\x{1F15}\x{1F18}-\x{1F1D}\x{1F20}-\x{1F45}\x{1F48}-\x{1F4D}\x{1F50}-\x{1F57}\x{1F59}\x{1F5B}\x{1F5D}\x{1F5F}-\x{1F7D}\x{1F80}-\x{1FB4}\x{1FB6}-\x{1FBC}\x{1FBE}\x{1FC2}-\x{1FC4}\x{1FC6}-\x{1FCC}\x{1FD0}-\x{1FD3}\x{1FD6}-\x{1FDB}\x{1FE0}-\x{1FEC}\x{1FF2}-\x{1FF4}\x{1FF6}-\x{1FFC}\x{2102}\x{2107}\x{210A}-\x{2113}\x{2115}\x{2119}-\x{211D}\x{2124}\x{2126}\x{2128}\x{212A}-\x{212D}\x{212F}-\x{2134}\x{2139}\x{213C}-\x{213F}\x{2145}-\x{2149}\x{214E}\x{2183}\x{2184}\x{2C00}-\x{2C7B}\x{2C7E}-\x{2CE4}\x{2CEB}-\x{2CEE}\x{2CF2}\x{2CF3}\x{A640}-\x{A66D}\x{A680}-\x{A69B}\x{A722}-\x{A76F}\x{A771}-\x{A787}\x{A78B}-\x{A78E}\x{AB70}-\x{ABBF}\x{FB00}-\x{FB06}\x{FB13}-\x{FB17}\x{FF21}-\x{FF3A}\x{FF41}-\x{FF5A}\x{10400}-\x{1044F}\x{104B0}-\x{104D3}\x{104D8}-\x{104FB}\x{10C80}-\x{10CB2}\x{10CC0}-\x{10CF2}\x{118A0}-\x{118DF}\x{1E900}-\x{1E943}`

// bloomWord is a word of BLOOM's pre-tokenizer: up to a space or one of a
// few punctuation marks (the parentheses and bar are in its class too).
const bloomWord = ` ?[^(\t\n\v\f\r |.,!?\x{2026}\x{3002}\x{FF0C}\x{3001}\x{964}\x{6D4}\x{60C})]+`

// stage is one step of a cascade.
type stage struct {
	re        *regexp.Regexp
	collapsed bool // match the collapsed text (the regex uses categories)
	// tailSpace is the capture group of a trailing \s+(?!\S)|\s+, or 0.
	tailSpace int
	// scan, when set, replaces re: a hand-written scanner.
	scan func(s string, dst []string) []string
}

func rx(pattern string, collapsed bool) stage {
	return stage{re: regexp.MustCompile(pattern), collapsed: collapsed}
}

// cascades are the regex pre-tokenizers, by preKind.
var cascades = map[preKind][]stage{
	// llama.cpp's default, for a BPE vocab that names no pre-tokenizer.
	preDefault: {
		rx(`[`+catP+`\$\+<=>\^~\|]+`, true),
		{scan: splitGPT2},
		rx(`[`+catN+`]+`, true),
		rx(threeDigit, false),
	},
	preFalcon: {
		rx(`[`+catP+`\$\+<=>\^~\|`+"`"+`]+`, true),
		{scan: splitGPT2},
		rx(threeDigit, false),
	},
	// DeepSeek LLM's tokenizer.json: its letters are listed as ranges.
	preDeepSeekLLM: {
		rx(`[\r\n]`, false),
		rx(wsClass+`?[`+deepSeekLetters+`]+`, false),
		rx(wsClass+`?[!-/:-~\x{FF01}-\x{FF0F}\x{FF1A}-\x{FF5E}\x{2018}-\x{201F}\x{3000}-\x{3002}]+`, false),
		rx(wsClass+`+$`, false),
		rx(cjk, false),
		rx(`[`+catN+`]+`, true),
	},
	preDeepSeekCoder: {
		rx(`[\r\n]`, false),
		rx(wsClass+`?[`+catL+`]+`, true),
		rx(wsClass+`?[`+catP+`]+`, true),
		rx(cjk, false),
		rx(`[`+catN+`]`, true),
	},
	preDeepSeekV3: {
		rx(`[`+catN+`]{1,3}`, true),
		rx(`[\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+`, false),
		{
			re: regexp.MustCompile(`[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_` + "`" + `{|}~][A-Za-z]+` +
				`|[^\r\n` + catL + catP + catS + `]?[` + catL + catM + `]+` +
				`| ?[` + catP + catS + `]+[\r\n]*` +
				`|` + wsClass + `*[\r\n]+` +
				`|(` + wsClass + `+)`),
			collapsed: true,
			tailSpace: 1,
		},
	},
	// Mistral's Tekken: a word is a run of capitals then lower case (or
	// the reverse), "letter but not a-z" being a lookahead in the
	// original and, collapsed, simply [\x{D2}A-Z].
	preTekken: {{
		re: regexp.MustCompile(`[^\r\n` + catL + catN + `]?[\x{D2}A-Z]*[\x{D2}a-z]+` +
			`|[^\r\n` + catL + catN + `]?[\x{D2}A-Z]+[\x{D2}a-z]*` +
			`|[` + catN + `]` +
			`| ?[^\t\n\v\f\r ` + catL + catN + `]+[\r\n/]*` +
			`|` + wsClass + `*[\r\n]+` +
			`|(` + wsClass + `+)`),
		collapsed: true,
		tailSpace: 1,
	}},
	// Chameleon: its sentinel and image tokens, tabs, newlines and runs
	// of two or four spaces, single digits and single punctuation marks
	// before GPT-2's regex.
	preChameleon: {
		rx(`<sentinel:[0-9]+>`, false),
		rx(`(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z`, false),
		rx(`([\t\n]|    |  )`, false),
		rx(`[`+catN+`]`, true),
		rx(`[`+catP+`!-/:-@\[-`+"`"+`{-~]`, true),
		{scan: splitGPT2},
	},
	// BLOOM, Poro and GPT-3 Finnish: words run up to spaces and a few
	// punctuation marks.
	preBloom: {
		rx(bloomWord, false),
	},
	preViking: {
		rx(bloomWord, false),
		rx(`[`+catN+`]`, true),
	},
}

// splitCascade runs the stages over s and appends the words to dst.
func splitCascade(stages []stage, s string, dst []string) []string {
	frags := []string{s}
	var next []string
	for _, st := range stages {
		next = next[:0]
		for _, f := range frags {
			next = st.split(f, next)
		}
		frags, next = next, frags
	}
	return append(dst, frags...)
}

// split appends f's matches of the stage and the text between them.
func (st *stage) split(f string, dst []string) []string {
	if st.scan != nil {
		return st.scan(f, dst)
	}
	// view is f as the regex sees it, a code point for a code point;
	// at[i] is the offset in f of the code point at view offset i.
	view := make([]byte, 0, len(f))
	at := make([]int, 0, len(f)+1)
	for i, r := range f {
		m := viewRune(r, st.collapsed)
		for range utf8.RuneLen(m) {
			at = append(at, i)
		}
		view = utf8.AppendRune(view, m)
	}
	at = append(at, len(f))
	v := string(view)
	prev, pos := 0, 0
	for pos < len(v) {
		loc := st.re.FindStringSubmatchIndex(v[pos:])
		if loc == nil {
			break
		}
		a, b := pos+loc[0], pos+loc[1]
		if g := st.tailSpace; g > 0 && loc[2*g] >= 0 && b < len(v) {
			// \s+(?!\S): before a non-space, the run gives up its last
			// space, if it has another.
			_, last := utf8.DecodeLastRuneInString(v[a:b])
			if next, _ := utf8.DecodeRuneInString(v[b:]); !isStdSpace(next) && b-last > a {
				b -= last
			}
		}
		if a > prev {
			dst = append(dst, f[at[prev]:at[a]])
		}
		if b > a {
			dst = append(dst, f[at[a]:at[b]])
		}
		prev = b
		if b > pos {
			pos = b
		} else {
			_, n := utf8.DecodeRuneInString(v[pos:])
			pos += n
		}
	}
	if prev < len(v) {
		dst = append(dst, f[at[prev]:])
	}
	return dst
}

// isStdSpace is ECMAScript's \s on the view (non-ASCII spaces are \v by
// then).
func isStdSpace(r rune) bool {
	switch r {
	case '\t', '\n', '\v', '\f', '\r', ' ':
		return true
	}
	return false
}

// viewRune is the code point a stage's regex sees for r: r itself when it
// is ASCII; \v for any other space; in a collapsed view, the stand-in of
// r's category.
func viewRune(r rune, collapsed bool) rune {
	if r < utf8.RuneSelf {
		return r
	}
	if unicode.IsSpace(r) {
		return '\v'
	}
	if !collapsed {
		return r
	}
	switch {
	case unicode.IsNumber(r):
		return 0xD1
	case unicode.IsLetter(r):
		return 0xD2
	case unicode.IsPunct(r):
		return 0xD3
	case unicode.IsMark(r):
		return 0xD4
	case unicode.IsSymbol(r):
		return 0xD5
	}
	return 0xD0
}
