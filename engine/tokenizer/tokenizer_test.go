package tokenizer

import (
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// roundTripTexts are strings every tokenizer must decode back exactly.
var roundTripTexts = []string{
	"",
	"a",
	" ",
	"  ",
	"\n",
	"\t\t\n \r\n",
	"Once upon a time, there was a little girl named Lily.",
	"  two leading spaces and trailing  ",
	"multiple    inner     spaces",
	"Tom's café — naïve 😀!",
	"emoji 👩‍👩‍👧‍👦 family, flags 🇫🇷🇯🇵, skin 👋🏽",
	"日本語のテキストと中文混合 text 한국어",
	"Привет, мир! Ελληνικά. עברית ومرحبا",
	"e\u0301 combining, \u200b zero width, \u00a0nbsp",
	"1234567890 + 42 = ? 3.14159 1e-9 0x1F",
	"{\"json\": [1, 2, 3], \"k\": null}",
	"code:\n\tif x != nil {\n\t\treturn err\n\t}\n",
	"I'm, you're, we've, he'll, she'd, it's, don't, I'M, YOU'RE",
	"<s> and </s> and <unk> and <0x41> are plain text here",
	"\x00\x01\x7f control bytes",
	"𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝕄𝕒𝕥𝕙 ∑∫∂ √2",
}

// randomText returns a string of n runes drawn from a mix of scripts,
// whitespace and symbols, deterministic for r's seed.
func randomText(r *rand.Rand, n int) string {
	ranges := [][2]rune{
		{'a', 'z'}, {'A', 'Z'}, {'0', '9'}, {' ', '/'}, {0xA0, 0x17F}, {0x370, 0x3FF},
		{0x400, 0x4FF}, {0x590, 0x6FF}, {0x3040, 0x30FF}, {0x4E00, 0x4FFF},
		{0xAC00, 0xAD00}, {0x1F300, 0x1F6FF}, {0x2000, 0x206F}, {0x10000, 0x1007F},
	}
	var b strings.Builder
	for range n {
		switch r.IntN(10) {
		case 0:
			b.WriteByte(" \n\t\r"[r.IntN(4)])
		case 1:
			b.WriteByte(' ')
		default:
			rg := ranges[r.IntN(len(ranges))]
			c := rg[0] + rune(r.IntN(int(rg[1]-rg[0]+1)))
			if !utf8.ValidRune(c) || c == 0x2581 {
				c = 'x' // ▁ cannot round-trip through SentencePiece
			}
			b.WriteRune(c)
		}
	}
	return b.String()
}

func allRoundTripTexts() []string {
	texts := slices.Clone(roundTripTexts)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 200 {
		texts = append(texts, randomText(r, 1+i%40))
	}
	return texts
}

func checkRoundTrip(t *testing.T, tok *Tokenizer) {
	t.Helper()
	for _, s := range allRoundTripTexts() {
		ids := tok.Encode(s)
		if have := tok.Decode(ids); have != s {
			t.Errorf("Decode(Encode(%q)) have %q; want %q (ids %v)", s, have, s, ids)
		}
		if strings.Contains(s, "<s>") && len(ids) > 1 && slices.Contains(ids[1:], tok.BOS()) {
			t.Errorf("Encode(%q) has BOS inside: %v", s, ids)
		}
	}
}

// detokClone copies d so a test can Flush a prefix without disturbing d.
func detokClone(d *Detokenizer) *Detokenizer {
	c := *d
	c.pending = slices.Clone(d.pending)
	return &c
}

// checkDetokenizer feeds ids one at a time and checks, after every id, that
// the text so far plus a flush equals Decode of that prefix, and that Add
// never emits part of a rune.
func checkDetokenizer(t *testing.T, tok *Tokenizer, ids []int32) {
	t.Helper()
	d := tok.NewDetokenizer()
	var acc strings.Builder
	for k, id := range ids {
		out := d.Add(id)
		if !utf8.ValidString(out) {
			t.Fatalf("Add(%d) at %d emitted invalid UTF-8 %q", id, k, out)
		}
		acc.WriteString(out)
		have := acc.String() + detokClone(d).Flush()
		if want := tok.Decode(ids[:k+1]); have != want {
			t.Fatalf("prefix %d of %v: have %q; want %q", k+1, ids, have, want)
		}
	}
	acc.WriteString(d.Flush())
	if have, want := acc.String(), tok.Decode(ids); have != want {
		t.Fatalf("detokenized %v: have %q; want %q", ids, have, want)
	}
}

func TestSPMRoundTrip(t *testing.T) {
	checkRoundTrip(t, stories260K(t))
}

func TestSPMDetokenizer(t *testing.T) {
	tok := stories260K(t)
	for _, s := range allRoundTripTexts() {
		checkDetokenizer(t, tok, tok.Encode(s))
	}
	// Byte tokens that never complete a rune, and a rune cut short.
	bt := func(b byte) int32 { return 3 + int32(b) }
	for _, ids := range [][]int32{
		{1, bt(0xF0), bt(0x9F), bt(0x98)},       // 😀 without its last byte
		{1, bt(0xFF), 403, bt(0xE2), 407},       // invalid byte, then a cut rune
		{403, bt(0xC3), bt(0xA9), 2, 1, 403, 2}, // no leading BOS; é; later BOS
	} {
		checkDetokenizer(t, tok, ids)
	}
}

func TestDetokenizerHoldsPartialRunes(t *testing.T) {
	tok := stories260K(t)
	d := tok.NewDetokenizer()
	steps := []struct {
		id      int32
		want    string
		pending int
	}{
		{1, "", 0},
		{403, "Once", 0}, // leading space of the first piece stripped
		{3 + 0xF0, "", 1},
		{3 + 0x9F, "", 2},
		{3 + 0x98, "", 3},
		{3 + 0x80, "😀", 0},
		{407, " upon", 0},
		{3 + 0xE2, "", 1},
	}
	for i, s := range steps {
		if have := d.Add(s.id); have != s.want {
			t.Fatalf("step %d Add(%d) have %q; want %q", i, s.id, have, s.want)
		}
		if have := d.Pending(); have != s.pending {
			t.Fatalf("step %d Pending() have %d; want %d", i, have, s.pending)
		}
	}
	if have, want := d.Flush(), "\uFFFD"; have != want {
		t.Fatalf("Flush() have %q; want %q", have, want)
	}
}

func TestContinuationDetokenizer(t *testing.T) {
	tok := stories260K(t)
	d := tok.NewContinuationDetokenizer()
	var b strings.Builder
	for _, id := range tok.Encode("Once upon a time")[1:] {
		b.WriteString(d.Add(id))
	}
	b.WriteString(d.Flush())
	if have, want := b.String(), " Once upon a time"; have != want {
		t.Fatalf("have %q; want %q", have, want)
	}
}

func TestSPMSpecialTokens(t *testing.T) {
	tok := stories260K(t)
	hi := tok.Encode("Hi")[1:] // " Hi" with the space prefix, no BOS
	tests := []struct {
		name string
		have []int32
		want []int32
	}{
		{"empty Encode is just BOS", tok.Encode(""), []int32{1}},
		{"empty EncodeSpecial", tok.EncodeSpecial(""), []int32{}},
		{"EncodeSpecial parses control text", tok.EncodeSpecial("<s>Hi</s>"), slices.Concat([]int32{1}, hi, []int32{2})},
		{"EncodeSpecial without specials", tok.EncodeSpecial("Hi"), hi},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if !slices.Equal(tc.have, tc.want) {
				t.Errorf("have %v; want %v", tc.have, tc.want)
			}
		})
	}
	for _, s := range []string{"<s>", "</s>", "<unk>", "a<s>b</s>c"} {
		ids := tok.Encode(s)
		for _, id := range ids[1:] {
			if tok.IsControl(id) || id == 0 {
				t.Errorf("Encode(%q) = %v has control/unknown id %d", s, ids, id)
			}
		}
		if have := tok.Decode(ids); have != s {
			t.Errorf("Decode(Encode(%q)) have %q", s, have)
		}
	}
}

func TestSPMAccessors(t *testing.T) {
	tok := stories260K(t)
	if have := tok.VocabSize(); have != 512 {
		t.Errorf("VocabSize() have %d; want 512", have)
	}
	if tok.BOS() != 1 || tok.EOS() != 2 {
		t.Errorf("BOS, EOS have %d, %d; want 1, 2", tok.BOS(), tok.EOS())
	}
	checks := []struct {
		name       string
		have, want any
	}{
		{"IsEOG(2)", tok.IsEOG(2), true},
		{"IsEOG(1)", tok.IsEOG(1), false},
		{"IsEOG(-1)", tok.IsEOG(-1), false},
		{"IsEOG(512)", tok.IsEOG(512), false},
		{"IsControl(1)", tok.IsControl(1), true},
		{"IsControl(403)", tok.IsControl(403), false},
		{"Token(1)", tok.Token(1), "<s>"},
		{"Token(13)", tok.Token(13), "<0x0A>"},
		{"Token(403)", tok.Token(403), "▁Once"},
		{"Piece(1)", string(tok.Piece(1)), ""},
		{"Piece(0)", string(tok.Piece(0)), ""},
		{"Piece(13)", string(tok.Piece(13)), "\n"},
		{"Piece(3+0xE2)", string(tok.Piece(3 + 0xE2)), "\xe2"},
		{"Piece(403)", string(tok.Piece(403)), " Once"},
		{"Piece(-1)", tok.Piece(-1) == nil, true},
		{"Decode(403) strips", tok.Decode([]int32{403}), "Once"},
		{"Decode(1,403) strips", tok.Decode([]int32{1, 403}), "Once"},
		{"Decode(403,403) keeps 2nd", tok.Decode([]int32{403, 403}), "Once Once"},
		{"Decode(2,403) strips nothing", tok.Decode([]int32{2, 403}), " Once"},
	}
	for _, c := range checks {
		if c.have != c.want {
			t.Errorf("%s have %v; want %v", c.name, c.have, c.want)
		}
	}
}

// TestSPMSynthetic covers what stories260K cannot: the highest score wins
// over the leftmost pair, ties go left, UNK without byte tokens, and
// user-defined tokens.
func TestSPMSynthetic(t *testing.T) {
	// ids: 0 <unk> 1 <s> 2 </s> 3 ▁ 4 a 5 b 6 c 7 ab 8 bc 9 ▁a 10 abc 11 <tool> 12 d
	spec := Spec{
		Model:  "llama",
		Tokens: []string{"<unk>", "<s>", "</s>", "▁", "a", "b", "c", "ab", "bc", "▁a", "abc", "<tool>", "d"},
		Scores: []float32{0, 0, 0, -1, -1, -1, -1, -5, -2, -9, -3, 0, -1},
		Types:  []int32{2, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 4, 1},
		BOS:    1, EOS: 2, UNK: 0, PAD: -1, EOT: -1,
		AddBOS: true, AddSpacePrefix: true,
	}
	tok, err := New(spec)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		in   string
		want []int32
	}{
		{"abc", []int32{1, 3, 10}},            // bc (-2) beats ▁a (-9) and ab (-5); a+bc → abc
		{"ab", []int32{1, 3, 7}},              // ab (-5) beats ▁a (-9)
		{"xa", []int32{1, 3, 0, 4}},           // x is no token and there are no byte tokens
		{"a<tool>b", []int32{1, 9, 11, 3, 5}}, // user-defined matched; space prefix after it
		{"dd", []int32{1, 3, 12, 12}},
	}
	for _, tc := range tests {
		if have := tok.Encode(tc.in); !slices.Equal(have, tc.want) {
			t.Errorf("Encode(%q) have %v; want %v", tc.in, have, tc.want)
		}
	}
	// Equal scores: the leftmost pair merges first.
	spec.Tokens = []string{"<unk>", "<s>", "</s>", "x", "xx"}
	spec.Scores = []float32{0, 0, 0, -1, -1}
	spec.Types = []int32{2, 3, 3, 1, 1}
	spec.AddSpacePrefix = false
	tok, err = New(spec)
	if err != nil {
		t.Fatal(err)
	}
	if have, want := tok.Encode("xxx"), []int32{1, 4, 3}; !slices.Equal(have, want) {
		t.Errorf("Encode(xxx) have %v; want %v", have, want)
	}
}

func TestNewErrors(t *testing.T) {
	ok := Spec{Model: "llama", Tokens: []string{"<unk>", "<s>", "</s>", "a"}, BOS: 1, EOS: 2, UNK: 0, PAD: -1, EOT: -1, AddBOS: true}
	tests := []struct {
		name string
		edit func(*Spec)
	}{
		{"unknown model", func(s *Spec) { s.Model = "rwkv" }},
		{"wordpiece without unk", func(s *Spec) { s.Model, s.UNK = "bert", -1 }},
		{"no tokens", func(s *Spec) { s.Tokens = nil }},
		{"short scores", func(s *Spec) { s.Scores = []float32{1} }},
		{"short types", func(s *Spec) { s.Types = []int32{1, 1} }},
		{"bad type", func(s *Spec) { s.Types = []int32{2, 3, 3, 9} }},
		{"BOS out of range", func(s *Spec) { s.BOS = 4 }},
		{"EOT below -1", func(s *Spec) { s.EOT = -2 }},
		{"AddBOS without BOS", func(s *Spec) { s.BOS = -1 }},
		{"bad byte token", func(s *Spec) { s.Types = []int32{2, 3, 3, 6} }},
		{"unknown pre", func(s *Spec) { s.Model = "gpt2"; s.Pre = "nope" }},
		{"merge without space", func(s *Spec) { s.Model = "gpt2"; s.Merges = []string{"ab"} }},
		{"merge of unknown token", func(s *Spec) { s.Model = "gpt2"; s.Merges = []string{"a z"} }},
		{"merge to unknown token", func(s *Spec) { s.Model = "gpt2"; s.Merges = []string{"a a"} }},
	}
	if _, err := New(ok); err != nil {
		t.Fatalf("valid spec: %v", err)
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := ok
			tc.edit(&s)
			_, err := New(s)
			if !errors.Is(err, ErrSpec) {
				t.Fatalf("have %v; want an ErrSpec", err)
			}
		})
	}
}

// chatHistory is about 1,500 stories260K tokens of plain prose.
func chatHistory() string {
	para := "Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her dog, Max. " +
		"One day, they found a big red ball under a tree! \"Can we keep it?\" Lily asked her mom.\n"
	return strings.Repeat(para, 19)
}

func BenchmarkEncodeSPM(b *testing.B) {
	tok := stories260K(b)
	text := chatHistory()
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	for b.Loop() {
		tok.Encode(text)
	}
}

func BenchmarkDecodeSPM(b *testing.B) {
	tok := stories260K(b)
	ids := tok.Encode(chatHistory())
	b.ReportAllocs()
	for b.Loop() {
		tok.Decode(ids)
	}
}

// TestSPMWordSplitMatchesWhole checks the word-by-word fast path against one
// merge queue over the whole text.
func TestSPMWordSplitMatchesWhole(t *testing.T) {
	tok := stories260K(t)
	if !tok.spmSplit {
		t.Fatal("stories260K should allow word-by-word merging")
	}
	whole := *tok
	whole.spmSplit = false
	for _, s := range append(allRoundTripTexts(), chatHistory()) {
		if have, want := tok.Encode(s), whole.Encode(s); !slices.Equal(have, want) {
			t.Errorf("Encode(%q)\nhave %v\nwant %v", s, have, want)
		}
	}
}

// TestConcurrentEncode exercises the documented concurrency safety; run it
// with -race.
func TestConcurrentEncode(t *testing.T) {
	spm, bpe := stories260K(t), byteLevel(t, "qwen2")
	want := [][]int32{spm.Encode(chatHistory()), bpe.Encode(chatHistory())}
	done := make(chan [2][]int32)
	for range 4 {
		go func() { done <- [2][]int32{spm.Encode(chatHistory()), bpe.Encode(chatHistory())} }()
	}
	for range 4 {
		have := <-done
		if !slices.Equal(have[0], want[0]) || !slices.Equal(have[1], want[1]) {
			t.Fatal("concurrent Encode disagreed with a serial one")
		}
	}
}
