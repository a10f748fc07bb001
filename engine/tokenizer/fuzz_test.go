package tokenizer

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/specgate/specgate/internal/testmodels"
)

// fuzzEncode checks, for any input, that Encode and EncodeSpecial do not
// panic and give ids in range, that valid UTF-8 round-trips (SentencePiece
// excepted for a literal ▁, which decodes as a space), and that the
// detokenizer agrees with Decode.
func fuzzEncode(t *testing.T, tok *Tokenizer, s string) {
	ids := tok.Encode(s)
	special := tok.EncodeSpecial(s)
	for _, list := range [][]int32{ids, special} {
		for _, id := range list {
			if id < 0 || int(id) >= tok.VocabSize() {
				t.Fatalf("Encode(%q) id %d out of range", s, id)
			}
		}
	}
	if utf8.ValidString(s) && !(tok.model == modelSPM && strings.Contains(s, spmSpace)) {
		if have := tok.Decode(ids); have != s {
			t.Fatalf("Decode(Encode(%q)) have %q (ids %v)", s, have, ids)
		}
	}
	want := tok.Decode(special)
	d := tok.NewDetokenizer()
	var b strings.Builder
	for _, id := range special {
		out := d.Add(id)
		if !utf8.ValidString(out) {
			t.Fatalf("Add emitted invalid UTF-8 %q", out)
		}
		b.WriteString(out)
	}
	b.WriteString(d.Flush())
	if b.String() != want {
		t.Fatalf("detokenizer of %v have %q; want %q", special, b.String(), want)
	}
}

func FuzzEncode(f *testing.F) {
	for _, s := range roundTripTexts {
		f.Add(s, false)
		f.Add(s, true)
	}
	f.Add("\xff\xfe invalid \xe2\x96", false)
	f.Add("<s>x</s><|im_end|><tool>", true)
	// Without the model file the byte-level half still fuzzes (stories260K
	// fails the test under CI=true, as usual).
	var spm *Tokenizer
	if _, err := os.Stat(filepath.Join(testmodels.Dir(), testmodels.Stories260K)); err == nil || os.Getenv("CI") == "true" {
		spm = stories260K(f)
	}
	bpe := byteLevel(f, "llama3")
	f.Fuzz(func(t *testing.T, s string, useBPE bool) {
		switch {
		case useBPE:
			fuzzEncode(t, bpe, s)
		case spm != nil:
			fuzzEncode(t, spm, s)
		}
	})
}

func FuzzPreTokenize(f *testing.F) {
	for _, row := range preTokenizerSplits {
		f.Add(row.in)
	}
	kinds := append([]struct {
		name string
		kind preKind
	}(nil), preKindNames...)
	for name, k := range preKinds {
		if _, ok := cascades[k]; ok {
			kinds = append(kinds, struct {
				name string
				kind preKind
			}{name, k})
		}
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, pk := range kinds {
			words := pk.kind.split(s, nil)
			if strings.Join(words, "") != s {
				t.Fatalf("%s: words %q do not cover %q", pk.name, words, s)
			}
			for _, w := range words {
				if w == "" {
					t.Fatalf("%s: empty word in %q", pk.name, words)
				}
			}
		}
		// WordPiece words are never empty and hold no space.
		for _, w := range splitWPM(s, nil) {
			if w == "" || strings.ContainsAny(w, " \t\n") {
				t.Fatalf("WordPiece word %q of %q", w, s)
			}
		}
	})
}
