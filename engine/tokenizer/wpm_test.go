package tokenizer

import (
	"slices"
	"testing"
)

// TestWordPiece checks BERT's word split and the greedy longest-piece
// cover on a small vocab.
func TestWordPiece(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{"Hello, World!", []string{"hello", ",", "world", "!"}},
		{"café Ångström", []string{"cafe", "angstrom"}}, // accents go with the decomposition
		{"a$b~c", []string{"a", "$", "b", "~", "c"}},    // ASCII symbols split
		{"x\u00a0\ty", []string{"x", "y"}},
		{"nul\x00ctl\u200b", []string{"nulctl"}}, // NUL and format characters dropped
		{"中文ab", []string{"中", "文", "ab"}},
		{"", nil},
	} {
		if have := splitWPM(tc.in, nil); !slices.Equal(have, tc.want) {
			t.Errorf("splitWPM(%q): have %q; want %q", tc.in, have, tc.want)
		}
	}
	tok, err := New(Spec{Model: "bert", Tokens: []string{"[PAD]", "[UNK]", "[CLS]", "[SEP]", "▁un", "▁unaff", "able", "▁x", "y"},
		BOS: 2, EOS: -1, UNK: 1, PAD: 0, EOT: -1, SEP: 3, AddBOS: true})
	if err != nil {
		t.Fatal(err)
	}
	for in, want := range map[string][]int32{
		"unaffable":  {5, 6},       // the longest first piece, then the rest
		"xy unknown": {7, 8, 1},    // a word with no cover is one UNK
		"UNAFF xyy":  {5, 7, 8, 8}, // lower-cased
	} {
		if have := tok.EncodePlain(in); !slices.Equal(have, want) {
			t.Errorf("EncodePlain(%q): have %v; want %v", in, have, want)
		}
	}
	if have := tok.Encode("xy"); !slices.Equal(have, []int32{2, 7, 8}) || tok.End() != 3 {
		t.Errorf("Encode(xy) = %v, End %d; want CLS first and SEP as the end", have, tok.End())
	}
}
