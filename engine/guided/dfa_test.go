package guided

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"testing"
)

// dfaDigest hashes everything a DFA is: classes, table, acceptance, start
// and distances. Minimization renumbers states canonically (breadth-first
// from the start), so equal languages over equal classes give equal
// digests.
func dfaDigest(d *dfa) string {
	h := sha256.New()
	var b [4]byte
	put := func(x int32) {
		binary.LittleEndian.PutUint32(b[:], uint32(x))
		h.Write(b[:])
	}
	put(int32(d.nclass))
	h.Write(d.classOf[:])
	put(d.start)
	for _, t := range d.trans {
		put(t)
	}
	for _, a := range d.accept {
		if a {
			h.Write([]byte{1})
		} else {
			h.Write([]byte{0})
		}
	}
	for _, x := range d.dist {
		put(x)
	}
	return hex.EncodeToString(h.Sum(nil)[:12])
}

type digestSpec struct {
	name string
	spec Spec
}

// digestSpecs are the grammars whose minimized DFAs are pinned: the
// benchmark schema, the fixed test schemas, any JSON and some regexes.
func digestSpecs() []digestSpec {
	out := []digestSpec{
		{"bench", Spec{Schema: json.RawMessage(benchSchema)}},
		{"json", Spec{JSON: true}},
		{"regex-email", Spec{Regex: `\w+@\w+\.com`}},
		{"regex-greek", Spec{Regex: `[α-ω]+|\p{Greek}\s[[:digit:]]`}},
		{"regex-suffix", Spec{Regex: `(a|b)*a(a|b){8}`}},
		{"regex-any", Spec{Regex: `(?s).{0,12}x`}},
		{"choices", Spec{Choices: []string{"yes", "no", "maybe", "yesterday"}}},
	}
	for i, s := range fixedSchemas {
		out = append(out, digestSpec{fmt.Sprintf("schema%d", i), Spec{Schema: json.RawMessage(s)}})
	}
	return out
}

// goldenDFAs are the live state counts and digests of digestSpecs as the
// original subset construction and minimization built them; a faster
// construction must build the very same automata.
var goldenDFAs = []struct {
	name   string
	states int
	digest string
}{
	{"bench", 21878, "b3bb29c932e9ef2a69db58c5"},
	{"json", 1292, "8d9ca1a0665115276bfaf059"},
	{"regex-email", 8, "16f2af8a9ee5f3935b60e3ce"},
	{"regex-greek", 29, "0536995bad7f07c651bfe563"},
	{"regex-suffix", 512, "f088612983e48de9ea643bf2"},
	{"regex-any", 110, "36279ecbc2d741bc1ca735f9"},
	{"choices", 15, "ab17092c69bceea09094459d"},
	{"schema0", 392, "0f4fc8c9b5c04bcb50d1be04"},
	{"schema1", 41, "4fe2e19dd8caba6a4c97774f"},
	{"schema2", 14, "8ee77e676d1ff15e905a1d2a"},
	{"schema3", 55, "c78560fd68a28184843f9c37"},
	{"schema4", 71, "2d366f419bd9c2b9aef894c9"},
	{"schema5", 24, "48beb09a073c72e951d93fe5"},
	{"schema6", 29, "f9903b5f35dff7c058bc4a0d"},
	{"schema7", 68, "06a86ee29a8ab8e9b82e701e"},
	{"schema8", 43, "fa8b88ec675b82eb96a41e30"},
	{"schema9", 7, "e51a4e71d41b13fc5c7ae024"},
	{"schema10", 69, "e6da7b0c8aed2c916eab261e"},
	{"schema11", 26, "d55e7d5b7cf27ae433ce41ae"},
	{"schema12", 1292, "8d9ca1a0665115276bfaf059"},
	{"schema13", 1292, "8d9ca1a0665115276bfaf059"},
	{"schema14", 1299, "82bed29c6ba14382daafafdd"},
	{"schema15", 9, "d074a35b42b8385f1ef24374"},
}

func TestDFAUnchanged(t *testing.T) {
	specs := digestSpecs()
	if len(specs) != len(goldenDFAs) {
		t.Fatalf("have %d specs; want %d goldens", len(specs), len(goldenDFAs))
	}
	for i, sp := range specs {
		t.Run(sp.name, func(t *testing.T) {
			d, err := compileDFA(sp.spec)
			if err != nil {
				t.Fatal(err)
			}
			want := goldenDFAs[i]
			if have := d.numStates() - 1; have != want.states {
				t.Errorf("have %d states; want %d", have, want.states)
			}
			if have := dfaDigest(d); have != want.digest {
				t.Errorf("have digest %s; want %s", have, want.digest)
			}
		})
	}
}
