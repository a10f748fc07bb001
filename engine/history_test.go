package engine

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestLongChatHistory(t *testing.T) {
	m := newFakeModel(t)
	// Turn i is "u<i>" or "a<i>" padded with letters: ~30 tokens a turn
	// (the fake vocabulary spells; its decoding drops spaces).
	turn := func(role string, i int) Message {
		return Message{Role: role, Content: fmt.Sprintf("%s%d %s", role[:1], i, strings.Repeat("abc ", 8))}
	}
	var history []Message
	history = append(history, Message{Role: "system", Content: "be brief"})
	for i := range 30 {
		history = append(history, turn("user", i), turn("assistant", i))
	}
	history = append(history, turn("user", 30))
	tests := []struct {
		name      string
		o         Options
		msgs      []Message
		maxTokens int
		// wantMax is the completion cap; 0 means a refusal.
		wantMax int
	}{
		{"fits", Options{MaxContext: 4096}, append(history[:5:5], history[len(history)-1]), 0, 1024},
		{"trimmed, default room", Options{MaxContext: 400}, history, 0, -1},
		{"trimmed, asked room", Options{MaxContext: 400}, history, 150, 150},
		{"small default cap", Options{MaxContext: 400, DefaultMaxTokens: 30}, history, 0, 30},
		{"last message alone too long", Options{MaxContext: 400}, []Message{{Role: "user", Content: strings.Repeat("abc ", 200)}}, 0, 0},
		{"asked too much", Options{MaxContext: 400}, history, 399, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, _ := testEngine(t, m, tt.o)
			sub, err := e.prepare(Request{Messages: tt.msgs, MaxTokens: tt.maxTokens})
			if tt.wantMax == 0 {
				var ee *Error
				if !errors.As(err, &ee) || ee.Code != CodeContextTooLong {
					t.Fatalf("have %v; want context_too_long", err)
				}
				if strings.Contains(ee.Message, "-") {
					t.Errorf("have message %q; want no negative numbers", ee.Message)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			limit := e.o.MaxContext
			if sub.prompt+sub.max > limit {
				t.Errorf("have prompt %d + max %d; want at most the context of %d", sub.prompt, sub.max, limit)
			}
			if tt.wantMax > 0 && sub.max != tt.wantMax {
				t.Errorf("have completion cap %d; want %d", sub.max, tt.wantMax)
			}
			if tt.wantMax < 0 && sub.max != limit-sub.prompt {
				t.Errorf("have completion cap %d; want the rest of the context, %d", sub.max, limit-sub.prompt)
			}
			if tt.maxTokens == 0 && sub.max < min(e.o.DefaultMaxTokens, limit/4) {
				t.Errorf("have completion cap %d; want at least %d", sub.max, min(e.o.DefaultMaxTokens, limit/4))
			}
			text := m.tok.Decode(sub.tokens[:sub.prompt])
			for _, want := range []string{"bebrief", "u30abc"} {
				if !strings.Contains(text, want) {
					t.Errorf("have prompt %q; want it to keep %q", text, want)
				}
			}
			if limit < 4096 {
				if strings.Contains(text, "u0abc") {
					t.Errorf("have prompt %q; want the oldest turns dropped", text)
				}
				// What stays is the newest turns: a cut lands where the
				// room the head leaves was filled last, which may be
				// just before the question, so a kept turn has every
				// later turn kept with it.
				for i := range 30 {
					if !strings.Contains(text, fmt.Sprintf("u%dabc", i)) {
						continue
					}
					for j := i; j < 30; j++ {
						for _, r := range "ua" {
							if !strings.Contains(text, fmt.Sprintf("%c%dabc", r, j)) {
								t.Errorf("have prompt %q; want the newest turns kept (u%d without %c%d)", text, i, r, j)
							}
						}
					}
					break
				}
			}
		})
	}
}

func TestTrimmedHistoryKeepsItsPrefix(t *testing.T) {
	// A 40-turn chat at a context that holds a few turns: once the
	// history no longer fits, old turns go in large steps, so most
	// turns' prompts begin with the whole of the previous turn's prompt,
	// every turn's prompt begins with at least a block the prefix cache
	// holds, and Final says how many messages were left out.
	m := newFakeModel(t)
	e, clk := testEngine(t, m, Options{MaxContext: 512})
	msgs := []Message{{Role: "system", Content: "be brief"}}
	var prev []int32
	full, kept, cutMoved := 0, 0, 0
	for i := range 40 {
		msgs = append(msgs, Message{Role: "user", Content: fmt.Sprintf("q%d %s", i, strings.Repeat("xy ", 10))})
		st, err := submitNow(e, Request{Messages: msgs, MaxTokens: 8})
		if err != nil {
			t.Fatalf("turn %d: %v", i, err)
		}
		drive(t, e, clk, time.Millisecond, 100)
		r := collect(t, st)
		sub, _ := e.prepare(Request{Messages: msgs, MaxTokens: 8})
		p := sub.tokens[:sub.prompt]
		if r.final.DroppedMessages != sub.dropped {
			t.Fatalf("turn %d: Final says %d dropped; prepare %d", i, r.final.DroppedMessages, sub.dropped)
		}
		if r.final.Usage.PromptTokens > 512-8 {
			t.Fatalf("turn %d: prompt of %d tokens", i, r.final.Usage.PromptTokens)
		}
		if r.final.DroppedMessages > 0 {
			full++
			// The reply's tokens need not come back the same from its
			// text (the fake vocabulary spells), so the prompt is what
			// must carry over.
			if slices.Equal(p[:min(len(prev), len(p))], prev) {
				kept++
			} else {
				cutMoved++
			}
			if r.final.Usage.CachedTokens == 0 {
				t.Errorf("turn %d: no cached tokens", i)
			}
		}
		msgs = append(msgs, Message{Role: "assistant", Content: r.text})
		prev = slices.Clone(p)
	}
	if full < 20 {
		t.Fatalf("have %d turns with dropped messages; want the context to fill early (at least 20)", full)
	}
	if kept < cutMoved {
		t.Errorf("have %d turns that kept the previous prompt and %d that cut anew; want most to keep it", kept, cutMoved)
	}
	text := m.tok.Decode(prev)
	for _, want := range []string{"bebrief", "q0xy", "q39xy"} {
		if !strings.Contains(text, want) {
			t.Errorf("the last prompt %q lost %q (the system prompt, the anchor, the question)", text, want)
		}
	}
}
