package synth

import (
	"fmt"
	"strings"
)

// Token types as llama.cpp numbers them (tokenizer.ggml.token_type).
const (
	typeNormal  = 1
	typeUnknown = 2
	typeControl = 3
	typeByte    = 6
)

// words are frequent English words (and a few story names), most common
// first, so that small vocabularies get the words that matter most.
var words = strings.Fields(`
the a and to was he she it of in they her his said you that with on for
is had day but one there so big all Lily up were be not like very at Tim
time him what do Once upon then happy them saw are from play went little
wanted we can have my out see an your friend when did help mom go this
could into get found friends They He She The It One Tom Ben Sue Mia Max
back too made who named loved would make looked about fun no just or
dog cat ball tree house park toy girl boy bird sun sky red blue green
car book cake water box fish bear bunny run jump smile laugh sad good
new old now came felt many came their some away home around each other
how where because know thought asked over down way more after again
want need will look love give take find tell think come say use work
yes sorry thank please hello I In Then But And Mom Dad When
people year first last long great little own right high different small
large next early young important few public bad same able
`)

// suffixes are common word endings, kept without a space marker so they
// join words as sub-words.
var suffixes = strings.Fields(`s ed ing er ly es est ful ness tion ment able y en ish ous ive al`)

// chars are the single characters a "llama" vocabulary spells text with
// before its multi-character pieces; others fall back to byte tokens.
const chars = "etaoinshrdlucmfwypvbgkjqxzTSAMILHBWOCNDEFGPRJKUVYQXZ0123456789.,!?'\"-:;()"

// letters drive the generated filler pieces, most frequent first.
const letters = "etaoinshrdlucmfwypvbgkjqxz"

// pieceSet collects pieces up to a size, each made by joining a piece
// already in the set with one more character, so that every piece is
// reachable by merges (SentencePiece) and every merge names two tokens (BPE).
type pieceSet struct {
	max    int
	list   []string
	seen   map[string]bool
	merges []string // "left right" for each piece made by a join
}

func (p *pieceSet) full() bool { return len(p.list) >= p.max }

func (p *pieceSet) add(s string) {
	if p.full() || p.seen[s] {
		return
	}
	p.seen[s] = true
	p.list = append(p.list, s)
}

// addWord adds s and, first, the prefixes it is built from (its first
// character must already be in the set).
func (p *pieceSet) addWord(s string) {
	r := []rune(s)
	for k := 2; k <= len(r) && !p.full(); k++ {
		piece := string(r[:k])
		if p.seen[piece] {
			continue
		}
		p.add(piece)
		p.merges = append(p.merges, string(r[:k-1])+" "+string(r[k-1]))
	}
}

// fill adds words, suffixes, then every letter string of length 1, 2, 3 …
// (with and without the space marker) until the set is full.
func (p *pieceSet) fill(space string) {
	for _, w := range words {
		p.addWord(space + w)
	}
	for _, s := range suffixes {
		p.addWord(s)
	}
	for _, w := range words {
		p.addWord(w)
	}
	for n := 1; !p.full(); n++ {
		p.strings(n, "", space)
	}
}

func (p *pieceSet) strings(n int, prefix, space string) {
	if p.full() {
		return
	}
	if n == 0 {
		p.addWord(space + prefix)
		if len(prefix) > 1 {
			p.addWord(prefix)
		}
		return
	}
	for _, c := range letters {
		p.strings(n-1, prefix+string(c), space)
		if p.full() {
			return
		}
	}
}

// llamaVocab builds a SentencePiece-style vocabulary of n tokens: <unk>,
// <s>, </s>, the 256 byte tokens, single characters, then pieces with ▁
// (U+2581) standing for a space. Scores fall with the id, so earlier (more
// frequent) pieces merge first.
func llamaVocab(n int) (tokens []string, scores []float32, types []int32) {
	p := &pieceSet{max: n, seen: map[string]bool{}}
	for _, s := range []string{"<unk>", "<s>", "</s>"} {
		p.add(s)
	}
	for b := range 256 {
		p.add(fmt.Sprintf("<0x%02X>", b))
	}
	specials := len(p.list)
	p.add("▁")
	for _, c := range chars {
		p.add(string(c))
	}
	p.fill("▁")
	tokens = p.list
	scores = make([]float32, len(tokens))
	types = make([]int32, len(tokens))
	types[0] = typeUnknown
	types[1], types[2] = typeControl, typeControl
	for i := 3; i < specials; i++ {
		types[i] = typeByte
	}
	for i := specials; i < len(tokens); i++ {
		types[i] = typeNormal
		scores[i] = -float32(i - specials)
	}
	return tokens, scores, types
}

// gpt2Specials are the control tokens at the end of a "gpt2" vocabulary,
// named as Llama 3 names them.
var gpt2Specials = []string{"<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"}

// byteRunes returns GPT-2's byte-to-unicode table: printable bytes stand
// for themselves, the others for code points from U+0100 up. order lists
// the bytes in the order GPT-2 vocabularies give them ids.
func byteRunes() (table [256]rune, order []byte) {
	for b := range 256 {
		if b >= '!' && b <= '~' || b >= 0xA1 && b <= 0xAC || b >= 0xAE {
			table[b] = rune(b)
			order = append(order, byte(b))
		}
	}
	n := 0
	for b := range 256 {
		if !(b >= '!' && b <= '~' || b >= 0xA1 && b <= 0xAC || b >= 0xAE) {
			table[b] = rune(256 + n)
			n++
			order = append(order, byte(b))
		}
	}
	return table, order
}

// gpt2Vocab builds a byte-level BPE vocabulary of n tokens: the 256 byte
// tokens in GPT-2's encoding, one merged token per merge (in merge rank
// order), then the special tokens. A space is Ġ (U+0120).
func gpt2Vocab(n int) (tokens []string, types []int32, merges []string) {
	table, order := byteRunes()
	p := &pieceSet{max: n - len(gpt2Specials), seen: map[string]bool{}}
	for _, b := range order {
		p.add(string(table[b]))
	}
	p.fill(string(table[' ']))
	tokens = append(p.list, gpt2Specials...)
	types = make([]int32, len(tokens))
	for i := range types {
		types[i] = typeNormal
	}
	for i := len(p.list); i < len(tokens); i++ {
		types[i] = typeControl
	}
	return tokens, types, p.merges
}
