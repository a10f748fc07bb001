package tokenizer

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/specgate/specgate/engine/model/gguf"
	"github.com/specgate/specgate/internal/testmodels"
)

// suiteSep ends every string of a suite's .inp file.
const suiteSep = "\n__ggml_vocab_test__\n"

// TestVocabSuites runs llama.cpp's tokenizer test suites (tokenizers/ in
// the reference data: a vocab-only GGUF, its .inp strings and .out ids) and
// wants every string tokenized id for id, with no special token added, as
// the suites were written.
func TestVocabSuites(t *testing.T) {
	dir := filepath.Dir(testmodels.Ref(t, filepath.Join("tokenizers", "README.md")))
	vocabs, err := filepath.Glob(filepath.Join(dir, "*.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	if len(vocabs) == 0 {
		t.Fatalf("no vocab files in %s", dir)
	}
	for _, path := range vocabs {
		t.Run(filepath.Base(path), func(t *testing.T) {
			inp, err := os.ReadFile(path + ".inp")
			if err != nil {
				t.Fatal(err)
			}
			out, err := os.ReadFile(path + ".out")
			if err != nil {
				t.Fatal(err)
			}
			texts, want, err := parseSuite(string(inp), string(out))
			if err != nil {
				t.Fatal(err)
			}
			f, err := gguf.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			tok, err := New(specFromGGUF(f))
			if err != nil {
				t.Fatal(err)
			}
			for i, text := range texts {
				if have := tok.EncodePlain(text); !equalIDs(have, want[i]) {
					t.Errorf("string %d %q:\nhave %v\nwant %v", i, text, have, want[i])
				}
			}
		})
	}
}

// parseSuite splits a suite's .inp text into its strings and reads the
// matching lines of ids from .out.
func parseSuite(inp, out string) ([]string, [][]int32, error) {
	if !strings.HasSuffix(inp, suiteSep) {
		return nil, nil, strconv.ErrSyntax
	}
	texts := strings.Split(strings.TrimSuffix(inp, suiteSep), suiteSep)
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != len(texts) {
		return nil, nil, &suiteError{len(texts), len(lines)}
	}
	ids := make([][]int32, len(lines))
	for i, l := range lines {
		for _, f := range strings.Fields(l) {
			v, err := strconv.ParseInt(f, 10, 32)
			if err != nil {
				return nil, nil, err
			}
			ids[i] = append(ids[i], int32(v))
		}
	}
	return texts, ids, nil
}

type suiteError struct{ texts, lines int }

func (e *suiteError) Error() string {
	return "tokenizer suite: " + strconv.Itoa(e.texts) + " strings but " + strconv.Itoa(e.lines) + " lines of ids"
}

func equalIDs(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
