package engine

import (
	"fmt"
	"strings"
	"testing"
)

// TestDraftsSeeDroppedTurns: when a long chat's oldest turns are left out
// of the prompt to fit the context, the sequence still carries the whole
// conversation for its drafter (n-gram lookup copies from earlier turns);
// a chat that fits carries none beside its prompt.
func TestDraftsSeeDroppedTurns(t *testing.T) {
	m := newFakeModel(t)
	e, clk := testEngine(t, m, Options{MaxContext: 400})
	msgs := []Message{{Role: "system", Content: "be brief"}}
	for i := range 30 {
		msgs = append(msgs,
			Message{Role: "user", Content: fmt.Sprintf("u%d %s", i, strings.Repeat("abc ", 8))},
			Message{Role: "assistant", Content: fmt.Sprintf("a%d %s", i, strings.Repeat("abc ", 8))})
	}
	msgs = append(msgs, Message{Role: "user", Content: "repeat u0"})
	for _, tc := range []struct {
		name    string
		msgs    []Message
		dropped bool
	}{
		{"long", msgs, true},
		{"fits", append(msgs[:3:3], msgs[len(msgs)-1]), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := "r-" + tc.name
			if _, err := submitNow(e, Request{ID: id, Messages: tc.msgs, MaxTokens: 8}); err != nil {
				t.Fatal(err)
			}
			e.step(clk.Now())
			s := e.seqs[id]
			if s == nil {
				t.Fatal("sequence not running after a step")
			}
			prompt := m.tok.Decode(s.tokens[:s.prompt])
			if !tc.dropped {
				if s.dropped != 0 || s.history != nil {
					t.Errorf("have %d dropped, history of %d tokens; want none", s.dropped, len(s.history))
				}
				return
			}
			if s.dropped == 0 || strings.Contains(prompt, "u0abc") {
				t.Fatalf("have %d dropped, prompt %q; want the oldest turns dropped", s.dropped, prompt)
			}
			hist := m.tok.Decode(s.history)
			for _, want := range []string{"bebrief", "u0abc", "a0abc", "u29abc", "repeatu0"} {
				if !strings.Contains(hist, want) {
					t.Errorf("have history %q; want it to hold %q", hist, want)
				}
			}
		})
	}
}
