package guided

import (
	"fmt"
	"math/rand/v2"
	"strings"
)

// Test vocabularies: synthVocab builds a deterministic vocabulary shaped
// like a byte-level BPE one (Llama 3, Qwen2): control tokens, all 256
// single bytes, JSON punctuation runs, numbers, whitespace runs, English
// words and subwords with and without a leading space, some multi-byte
// UTF-8. Ids 0..2 are control tokens; id 2 is EOS.

const testEOS = 2

var commonWords = strings.Fields(`the of and to in is you that it he was for on are as with his they at be
this have from or one had by word but not what all were we when your can said there use an each which she do
how their if will up other about out many then them these so some her would make like him into time has look
two more write go see number no way could people my than first water been call who oil its now find long down
day did get come made may part name age id user email address city country status type value items count total
price description title created updated enabled true false null data result error message code list key
string integer number boolean array object person street phone zip tags score rating color size weight`)

var syllableOn = []string{"b", "c", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "qu", "r", "s", "t", "v", "w", "z", "st", "tr", "ch", "sh", "th", "pl", "gr", "br", "cl"}
var syllableNu = []string{"a", "e", "i", "o", "u", "ea", "ou", "ai", "io", "y"}
var syllableCo = []string{"", "", "n", "r", "s", "t", "l", "m", "ng", "ck", "nd", "st", "rt", "x"}

func synthPieces(size int) [][]byte {
	seen := map[string]bool{}
	var out [][]byte
	add := func(s string) {
		if len(out) < size && !seen[s] {
			seen[s] = true
			out = append(out, []byte(s))
		}
	}
	out = append(out, nil, nil, nil) // <unk>, <s>, </s>
	for i := 0; i < 256; i++ {
		out = append(out, []byte{byte(i)})
		seen[string([]byte{byte(i)})] = true
	}
	for _, p := range []string{`{"`, `"}`, `":`, `": "`, `":"`, `","`, `", "`, `",`, `"],`, `"]`, `},`, `}]`, `[{`, `{}`,
		`[]`, `":[`, `":{`, `": [`, `": {`, `"},`, `]}`, `}}`, `\"`, `\\`, `\n`, `null`, `true`, `false`, `": null`,
		`": true`, `": false`, `":"`, `"}]`, `"}}`, `},{"`, `}, {"`, `", "`, `"]}`, `.0`, `.5`, `e+`, `-1`, `é`, `ü`,
		`的`, `是`, `😀`, "\xe4\xb8", "\x80\x80", ` über`, ` café`, `—`, `“`, `”`} {
		add(p)
	}
	for i := 0; i < 1000; i++ {
		add(fmt.Sprint(i))
		add(" " + fmt.Sprint(i))
	}
	for i := 0; i < 100; i++ {
		add(fmt.Sprintf("%02d", i))
	}
	for n := 2; n <= 16; n++ {
		add(strings.Repeat(" ", n))
		add("\n" + strings.Repeat(" ", n))
	}
	for _, w := range commonWords {
		add(w)
		add(" " + w)
		add(`"` + w)
		add(`"` + w + `":`)
		add(strings.ToUpper(w[:1]) + w[1:])
		add(" " + strings.ToUpper(w[:1]) + w[1:])
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for len(out) < size {
		var sb strings.Builder
		if rng.IntN(2) == 0 {
			sb.WriteByte(' ')
		}
		for n := 1 + rng.IntN(3); n > 0; n-- {
			sb.WriteString(syllableOn[rng.IntN(len(syllableOn))])
			sb.WriteString(syllableNu[rng.IntN(len(syllableNu))])
			sb.WriteString(syllableCo[rng.IntN(len(syllableCo))])
		}
		s := sb.String()
		if rng.IntN(8) == 0 {
			s = strings.ToUpper(s[:1]) + s[1:]
		}
		add(s)
	}
	return out
}

func synthVocab(size int) *Vocab { return NewVocab(synthPieces(size), []int32{testEOS}) }

// tokenize splits s greedily by the longest token piece, the way a test
// needs: any byte string tokenizes because every single byte is a token.
func tokenize(v *Vocab, s []byte) []int32 {
	var out []int32
	for i := 0; i < len(s); {
		node, best, bestLen := int32(0), int32(-1), 0
		for j := i; j < len(s); j++ {
			next := int32(-1)
			for c := v.kidLo[node]; c < v.kidHi[node]; c++ {
				if v.nodeByte[c] == s[j] {
					next = c
					break
				}
			}
			if next < 0 {
				break
			}
			node = next
			if v.tokLo[node] < v.tokHi[node] {
				best, bestLen = v.toks[v.tokLo[node]], j-i+1
			}
		}
		if best < 0 {
			return nil
		}
		out = append(out, best)
		i += bestLen
	}
	return out
}
