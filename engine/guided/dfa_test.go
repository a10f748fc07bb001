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
	{"bench", 24203, "9db24c2183ffe860230e9ade"},
	{"json", 2516, "22e024cb5aa981c8e3e03b6e"},
	{"regex-email", 8, "16f2af8a9ee5f3935b60e3ce"},
	{"regex-greek", 29, "0536995bad7f07c651bfe563"},
	{"regex-suffix", 512, "f088612983e48de9ea643bf2"},
	{"regex-any", 110, "36279ecbc2d741bc1ca735f9"},
	{"choices", 15, "ab17092c69bceea09094459d"},
	{"schema0", 413, "90596f58ca18074037defade"},
	{"schema1", 197, "d2988285d4fc74313a4a11b1"},
	{"schema2", 14, "8ee77e676d1ff15e905a1d2a"},
	{"schema3", 70, "2b67092d0e55123b3b5fed79"},
	{"schema4", 110, "f68889d10bc7293c30a26b11"},
	{"schema5", 39, "9fc0f030d037195a2665cf15"},
	{"schema6", 31, "47aad2edb9f45fa163fde30b"},
	{"schema7", 73, "6671675a90d19c33fb4377da"},
	{"schema8", 43, "fa8b88ec675b82eb96a41e30"},
	{"schema9", 7, "e51a4e71d41b13fc5c7ae024"},
	{"schema10", 84, "db1550501b7fa01e2360c16f"},
	{"schema11", 26, "d55e7d5b7cf27ae433ce41ae"},
	{"schema12", 2516, "22e024cb5aa981c8e3e03b6e"},
	{"schema13", 2516, "22e024cb5aa981c8e3e03b6e"},
	{"schema14", 2523, "974110116b71d16525934daa"},
	{"schema15", 9, "d074a35b42b8385f1ef24374"},
	{"schema16", 16, "7cc61c32d4b6ed596e86f5ee"},
	{"schema17", 48, "0ef021359e4fc587a94eb089"},
	{"schema18", 84, "c0975c05106ada4314f7e39f"},
	{"schema19", 39, "f5149323c70bfeb580788d41"},
	{"schema20", 29, "8af24b180357278c336760de"},
	{"schema21", 47, "95329b6b37828d44132b91d5"},
	{"schema22", 17, "ee17bab0cef2ed67b4b8675d"},
	{"schema23", 9, "3a7c19119a41e77b0fe6c434"},
	{"schema24", 88, "97c48b53fae2a839e35d4f37"},
	{"schema25", 14, "e2b52cea5f61cad576e5a959"},
	{"schema26", 576, "6beb601eb44c9d4849b136fe"},
	{"schema27", 1486, "eb72136d91724bcd2a5536e6"},
	{"schema28", 82, "14b163a551768723f7f53812"},
	{"schema29", 1540, "16773954f3e0d85b1897edf8"},
	{"schema30", 161, "a722445c7dc014ce4a7dbffe"},
	{"schema31", 75, "cfef4e0d6d170e7cc50df6e4"},
	{"schema32", 1233, "82a7eecae140e4c24a7edddf"},
	{"schema33", 4, "2603447e49485bea423fd8b1"},
	{"schema34", 117, "e95d8b686f5882505234dee3"},
	{"schema35", 34, "7b5766382517860cd52b6e7d"},
	{"schema36", 56, "edfc35f0efc06f2359ac45f7"},
	{"schema37", 88, "96fbd752b6c1bcd748613748"},
	{"schema38", 64, "cd0591bef500505bd9cf78d0"},
	{"schema39", 257, "33bd7747524f26ff7bae5529"},
	{"schema40", 75, "7542f0a48827353b51e7d9de"},
	{"schema41", 10, "34289e606cb14b531f1333f1"},
	{"schema42", 15, "da6cbb588661b108e34a9106"},
	{"schema43", 38, "3db97395ae3436aeb0af154a"},
	{"schema44", 34, "b003a63f2e43080cf732e6cd"},
	{"schema45", 22, "cb6513edf8ad082adcc96d66"},
	{"schema46", 49, "d92694adf890a160c53050ab"},
	{"schema47", 190, "0eaeba6a4efafef6799b9edf"},
	{"schema48", 105, "1e4169195bab15cfbe25b2ad"},
	{"schema49", 83, "71d218e45aae5eb4680a1353"},
	{"schema50", 39, "df1920b8593bb9f568812057"},
	{"schema51", 70, "0ef08b666348aed9b664b0fb"},
	{"schema52", 71, "03a32264143e9a0d8a2ac5be"},
	{"schema53", 82, "47420f3ce46970681fb33d91"},
	{"schema54", 27, "fcb72b2fb42dca7b2d1a99de"},
	{"schema55", 93, "4baea5379b887ca3fce7f27b"},
	{"schema56", 154, "80088ea2a9ee38b1a087a6de"},
	{"schema57", 1221, "507bbc77045fe9cb1e9e22af"},
	{"schema58", 57, "99a7b32d3c259563a1bde001"},
	{"schema59", 41, "ea430226895071039fa5f4d7"},
	{"schema60", 5038, "beff482f29af32a1d34a91b0"},
	{"schema61", 126, "334393cea8936c23132c3d63"},
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
