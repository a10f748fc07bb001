package tokenizer

import (
	"bufio"
	"encoding/json"
	"os"
	"slices"
	"testing"

	"github.com/specgate/specgate/internal/testmodels"
)

// TestStories260KReference checks Encode token for token against llama.cpp's
// tokenizations in tokenize.jsonl, and Decode back to the text.
func TestStories260KReference(t *testing.T) {
	tok := stories260K(t)
	f, err := os.Open(testmodels.Ref(t, "tokenize.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	n := 0
	for sc.Scan() {
		var c struct {
			Text string  `json:"text"`
			IDs  []int32 `json:"ids"`
		}
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			t.Fatalf("line %d: %v", n+1, err)
		}
		n++
		t.Run(c.Text, func(t *testing.T) {
			if have := tok.Encode(c.Text); !slices.Equal(have, c.IDs) {
				t.Errorf("Encode(%q)\nhave %v\nwant %v", c.Text, have, c.IDs)
			}
			if have := tok.Decode(c.IDs); have != c.Text {
				t.Errorf("Decode(%v) have %q; want %q", c.IDs, have, c.Text)
			}
		})
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatal("tokenize.jsonl has no cases")
	}
}
