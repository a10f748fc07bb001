package tokenizer

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

var preKindNames = []struct {
	name string
	kind preKind
}{{"llama3", preLlama3}, {"qwen2", preQwen2}, {"gpt2", preGPT2}, {"smollm", preSmolLM}}

func TestPreTokenizers(t *testing.T) {
	for _, row := range preTokenizerSplits {
		for _, pk := range preKindNames {
			want := map[preKind][]string{preLlama3: row.llama3, preQwen2: row.qwen2, preGPT2: row.gpt2, preSmolLM: row.smollm}[pk.kind]
			if have := pk.kind.split(row.in, nil); !slices.Equal(have, want) {
				t.Errorf("%s split %q\nhave %q\nwant %q", pk.name, row.in, have, want)
			}
		}
	}
}

// TestPreTokenizersCover checks that the words of any input, valid UTF-8 or
// not, concatenate back to it and are never empty.
func TestPreTokenizersCover(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	inputs := allRoundTripTexts()
	for range 200 {
		b := make([]byte, r.IntN(30))
		for i := range b {
			b[i] = byte(r.IntN(256))
		}
		inputs = append(inputs, string(b))
	}
	for _, s := range inputs {
		for _, pk := range preKindNames {
			words := pk.kind.split(s, nil)
			if have := strings.Join(words, ""); have != s {
				t.Fatalf("%s: words of %q join to %q", pk.name, s, have)
			}
			if slices.Contains(words, "") {
				t.Fatalf("%s: empty word in %q", pk.name, words)
			}
		}
	}
}

// bpeCorpus trains the test vocabulary: English, code, CJK, emoji and
// whitespace runs, so merges cross UTF-8 byte boundaries.
var bpeCorpus = []string{
	"Once upon a time, there was a little girl named Lily. She loved to play outside in the park.",
	"The quick brown fox jumps over the lazy dog. The dog didn't care; it's a lazy dog.",
	"func main() {\n\tfmt.Println(\"hello, world\")\n\treturn\n}\n",
	"日本語のテキストです。中文文本。한국어 텍스트입니다.",
	"emoji 😀😀😀 👍👍 🇫🇷 family 👩‍👩‍👧 and café naïve résumé",
	"numbers 1234567890 3.14159 2024-01-01 100%",
	"    indented    code    with    spaces\n\n\n",
}

// byteLevelSpec returns a gpt2 Spec whose first 256 tokens are the byte
// characters (id = byte), then three control tokens and one user-defined,
// then n merges trained on bpeCorpus with the pre-tokenizer pre.
func byteLevelSpec(pre string, n int) Spec {
	s := Spec{Model: "gpt2", Pre: pre, BOS: -1, EOS: -1, UNK: -1, PAD: -1, EOT: -1}
	for b := 0; b < 256; b++ {
		s.Tokens = append(s.Tokens, string(byteToRune[b]))
		s.Types = append(s.Types, TypeNormal)
	}
	s.BOS, s.EOS, s.EOT = 256, 257, 258
	s.Tokens = append(s.Tokens, "<|begin_of_text|>", "<|endoftext|>", "<|im_end|>", "<tool>")
	s.Types = append(s.Types, TypeControl, TypeControl, TypeControl, TypeUserDefined)
	known := map[string]bool{}
	for _, tok := range s.Tokens {
		known[tok] = true
	}
	// Words as sequences of mapped characters.
	var words [][]string
	for _, line := range bpeCorpus {
		for _, w := range preKinds[pre].split(line, nil) {
			var sym []string
			for i := 0; i < len(w); i++ {
				sym = append(sym, string(byteToRune[w[i]]))
			}
			words = append(words, sym)
		}
	}
	for range n {
		counts := map[[2]string]int{}
		for _, w := range words {
			for i := 1; i < len(w); i++ {
				counts[[2]string{w[i-1], w[i]}]++
			}
		}
		var best [2]string
		bestN := 0
		for p, c := range counts {
			if c > bestN || c == bestN && (p[0]+" "+p[1]) < (best[0]+" "+best[1]) {
				best, bestN = p, c
			}
		}
		if bestN == 0 {
			break
		}
		s.Merges = append(s.Merges, best[0]+" "+best[1])
		if m := best[0] + best[1]; !known[m] {
			known[m] = true
			s.Tokens = append(s.Tokens, m)
			s.Types = append(s.Types, TypeNormal)
		}
		for wi, w := range words {
			var out []string
			for i := 0; i < len(w); i++ {
				if i+1 < len(w) && w[i] == best[0] && w[i+1] == best[1] {
					out = append(out, w[i]+w[i+1])
					i++
				} else {
					out = append(out, w[i])
				}
			}
			words[wi] = out
		}
	}
	return s
}

func byteLevel(t testing.TB, pre string) *Tokenizer {
	t.Helper()
	tok, err := New(byteLevelSpec(pre, 300))
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// naiveBPE is the textbook loop: merge the lowest-ranked adjacent pair,
// leftmost first, until none is left.
func naiveBPE(t *Tokenizer, word string) []int32 {
	var ids []int32
	for i := 0; i < len(word); i++ {
		ids = append(ids, t.byteSym[word[i]])
	}
	for {
		best, at := int32(-1), -1
		for i := 1; i < len(ids); i++ {
			if m, ok := t.ranks[[2]int32{ids[i-1], ids[i]}]; ok && (best < 0 || m.rank < best) {
				best, at = m.rank, i-1
			}
		}
		if at < 0 {
			return ids
		}
		m := t.ranks[[2]int32{ids[at], ids[at+1]}]
		ids = slices.Replace(ids, at, at+2, m.result)
	}
}

func TestBPEMatchesNaive(t *testing.T) {
	tok := byteLevel(t, "gpt2")
	for _, s := range append(allRoundTripTexts(), bpeCorpus...) {
		var want []int32
		for _, w := range tok.pre.split(s, nil) {
			want = append(want, naiveBPE(tok, w)...)
		}
		if have := tok.Encode(s); !slices.Equal(have, want) {
			t.Errorf("Encode(%q)\nhave %v\nwant %v", s, have, want)
		}
	}
}

func TestBPERoundTrip(t *testing.T) {
	for _, pk := range preKindNames {
		t.Run(pk.name, func(t *testing.T) {
			tok := byteLevel(t, pk.name)
			checkRoundTrip(t, tok)
			for _, s := range []string{"▁ is plain here", "\u2581\u2581"} {
				if have := tok.Decode(tok.Encode(s)); have != s {
					t.Errorf("Decode(Encode(%q)) have %q", s, have)
				}
			}
			if n := len(tok.Encode(bpeCorpus[0])); n >= len(bpeCorpus[0])/2 {
				t.Errorf("merges barely apply: %d tokens for %d bytes", n, len(bpeCorpus[0]))
			}
		})
	}
}

func TestBPEDetokenizer(t *testing.T) {
	tok := byteLevel(t, "llama3")
	for _, s := range append(allRoundTripTexts(), bpeCorpus...) {
		checkDetokenizer(t, tok, tok.Encode(s))
	}
	// An emoji's four bytes as four single-byte tokens.
	checkDetokenizer(t, tok, []int32{0xF0, 0x9F, 0x98, 0x80, 'a', 0xF0, 0x9F})
}

func TestBPESpecialTokens(t *testing.T) {
	tok := byteLevel(t, "llama3")
	hi := tok.Encode("hi")
	tests := []struct {
		name string
		have []int32
		want []int32
	}{
		{"control parsed", tok.EncodeSpecial("<|im_end|>hi<|endoftext|>"), slices.Concat([]int32{258}, hi, []int32{257})},
		{"user-defined in Encode", tok.Encode("hi<tool>hi"), slices.Concat(hi, []int32{259}, hi)},
		{"no BOS by default", tok.Encode(""), nil},
	}
	for _, tc := range tests {
		if !slices.Equal(tc.have, tc.want) {
			t.Errorf("%s: have %v; want %v", tc.name, tc.have, tc.want)
		}
	}
	for _, s := range []string{"<|im_end|>", "a<|endoftext|>b", "<|begin_of_text|>"} {
		for _, id := range tok.Encode(s) {
			if tok.IsControl(id) {
				t.Errorf("Encode(%q) produced control token %d", s, id)
			}
		}
	}
	if !tok.IsEOG(257) || !tok.IsEOG(258) || tok.IsEOG(256) {
		t.Errorf("IsEOG(257, 258, 256) have %v %v %v; want true true false", tok.IsEOG(257), tok.IsEOG(258), tok.IsEOG(256))
	}
	if have, want := string(tok.Piece(' ')), " "; have != want {
		t.Errorf("Piece(' ') have %q; want %q", have, want)
	}
	if have, want := string(tok.Piece(0xE2)), "\xe2"; have != want {
		t.Errorf("Piece(0xE2) have %q; want %q", have, want)
	}
	s := byteLevelSpec("llama3", 0)
	s.AddBOS = true
	tb, err := New(s)
	if err != nil {
		t.Fatal(err)
	}
	if have, want := tb.Encode("a"), []int32{256, 'a'}; !slices.Equal(have, want) {
		t.Errorf("AddBOS: have %v; want %v", have, want)
	}
	if have := tb.Decode([]int32{256, 'a'}); have != "a" {
		t.Errorf("Decode with BOS have %q; want \"a\"", have)
	}
}

// TestBPEHandVocab pins merge order on a vocabulary small enough to reason
// about: rank beats position, ties go left, llama3 takes whole-word tokens.
func TestBPEHandVocab(t *testing.T) {
	build := func(pre string, merges []string, extra ...string) *Tokenizer {
		s := byteLevelSpec(pre, 0)
		s.Merges = merges
		for _, m := range append([]string{"ab", "bc", "aa", "abc"}, extra...) {
			s.Tokens = append(s.Tokens, m)
			s.Types = append(s.Types, TypeNormal)
		}
		tok, err := New(s)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	id := func(tok *Tokenizer, s string) int32 { return tok.all[s] }
	tests := []struct {
		name, pre, in string
		merges        []string
		want          []string
	}{
		{"rank beats position", "gpt2", "abc", []string{"b c", "a b"}, []string{"a", "bc"}},
		{"other order", "gpt2", "abc", []string{"a b", "b c"}, []string{"ab", "c"}},
		{"chain", "gpt2", "abc", []string{"a b", "ab c"}, []string{"abc"}},
		{"ties go left", "gpt2", "aaa", []string{"a a"}, []string{"aa", "a"}},
		{"ties go left twice", "gpt2", "aaaaa", []string{"a a"}, []string{"aa", "aa", "a"}},
		{"gpt2 ignores whole-word tokens", "gpt2", "abc", []string{"b c"}, []string{"a", "bc"}},
		{"llama3 takes whole-word tokens", "llama3", "abc", []string{"b c"}, []string{"abc"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tok := build(tc.pre, tc.merges)
			var want []int32
			for _, w := range tc.want {
				want = append(want, id(tok, w))
			}
			if have := tok.Encode(tc.in); !slices.Equal(have, want) {
				t.Errorf("Encode(%q) have %v; want %v", tc.in, have, want)
			}
		})
	}
}

func BenchmarkEncodeBPE(b *testing.B) {
	tok := byteLevel(b, "llama3")
	text := chatHistory() + strings.Repeat(bpeCorpus[3]+bpeCorpus[4], 5)
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	for b.Loop() {
		tok.Encode(text)
	}
}
