package engine

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestGuidedFake(t *testing.T) {
	m := newFakeModel(t)
	tests := []struct {
		name string
		g    Guided
		o    Options
		// want matches the whole output.
		want string
	}{
		{"regex", Guided{Regex: `[0-9]{3}\.(ab|cd)`}, Options{}, `^[0-9]{3}\.(ab|cd)$`},
		{"choices", Guided{Choices: []string{"yes", "no", "maybe"}}, Options{}, `^(yes|no|maybe)$`},
		{"long regex, tight pool", Guided{Regex: `[a-z]{40}x`}, Options{KVBlocks: 16, BlockSize: 4, MaxBatchTokens: 8, HostKVBlocks: 32, NoPrefixCache: true}, `^[a-z]{40}x$`},
		{"long regex, recompute", Guided{Regex: `[a-z]{40}x`}, Options{KVBlocks: 16, BlockSize: 4, MaxBatchTokens: 8}, `^[a-z]{40}x$`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, clk := testEngine(t, m, tt.o)
			var streams []*Stream
			for i := range 3 {
				s, err := submitNow(e, Request{ID: fmt.Sprint(i), Prompt: []int32{1, tokID('a' + byte(i)), tokID('q')}, MaxTokens: 60, Guided: &tt.g})
				if err != nil {
					t.Fatal(err)
				}
				streams = append(streams, s)
			}
			drive(t, e, clk, time.Millisecond, 1000)
			re := regexp.MustCompile(tt.want)
			pre := 0
			for i, s := range streams {
				r := collect(t, s)
				if r.final.FinishReason != FinishStop {
					t.Errorf("%d: have finish %s (%v); want stop", i, r.final.FinishReason, r.final.Err)
				}
				if !re.MatchString(r.text) {
					t.Errorf("%d: have %q; want a match of %s", i, r.text, tt.want)
				}
				if got := m.tok.Decode(r.tokens); strings.TrimSpace(got) != strings.TrimSpace(r.text) {
					t.Errorf("%d: have tokens decoding to %q and text %q; want the same", i, got, r.text)
				}
				pre += r.final.Stats.Preemptions
			}
			if tt.o.KVBlocks != 0 && pre == 0 {
				t.Error("have no preemptions with a tight pool; want some")
			}
			checkWhole(t, e)
		})
	}
}

// TestGuidedFollowsModel checks that the mask only removes choices: where
// the model's own token is allowed it is the one taken.
func TestGuidedFollowsModel(t *testing.T) {
	m := newFakeModel(t)
	// The model spells "abcabc…"; the grammar allows a, b or c, then
	// digits.
	m.next = func(h []int32) int32 { return tokID("abc"[len(h)%3]) }
	e, clk := testEngine(t, m, Options{})
	s, err := submitNow(e, Request{Prompt: []int32{1, 3, 3}, MaxTokens: 50, Guided: &Guided{Regex: `[abc]{5}[0-9]`}})
	if err != nil {
		t.Fatal(err)
	}
	drive(t, e, clk, time.Millisecond, 100)
	r := collect(t, s)
	// After 3 prompt tokens: positions 3..7 are a,b,c,a,b; then the
	// model says c, the mask forbids it, and the lowest allowed id wins.
	if r.text != "abcab0" || r.final.FinishReason != FinishStop {
		t.Errorf("have %q, %s; want \"abcab0\", stop", r.text, r.final.FinishReason)
	}
}

func TestGuidedRefusals(t *testing.T) {
	m := newFakeModel(t)
	tests := []struct {
		name string
		r    Request
		// msg must appear in the error.
		msg string
	}{
		{"unsupported schema feature", Request{Prompt: []int32{1}, Guided: &Guided{Schema: []byte(`{"type":"object","properties":{"n":{"type":"array","uniqueItems":true}}}`)}}, "uniqueItems at #/properties/n"},
		{"regex syntax", Request{Prompt: []int32{1}, Guided: &Guided{Regex: `a(`}}, "invalid"},
		{"schema not JSON", Request{Prompt: []int32{1}, Guided: &Guided{Schema: []byte(`{`)}}, "invalid"},
		{"matches nothing", Request{Prompt: []int32{1}, Guided: &Guided{Schema: []byte(`false`)}}, "nothing"},
		{"generated off grammar", Request{Prompt: []int32{1}, MaxTokens: 5, Generated: []int32{tokID('z')}, Guided: &Guided{Regex: `[0-9]+`}}, "not allowed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, _ := testEngine(t, m, Options{})
			_, err := submitNow(e, tt.r)
			var ee *Error
			if !errors.As(err, &ee) || ee.Code != CodeBadRequest {
				t.Fatalf("have %v; want *Error with code %s", err, CodeBadRequest)
			}
			if !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("have %q; want it to mention %q", err, tt.msg)
			}
			if len(e.seqs) != 0 {
				t.Errorf("have %d live sequences after a refusal; want 0", len(e.seqs))
			}
		})
	}
}

// TestGuidedGeneratedResumes continues a constrained request after
// failover: the matcher starts past the tokens already streamed.
func TestGuidedGeneratedResumes(t *testing.T) {
	m := newFakeModel(t)
	e, clk := testEngine(t, m, Options{})
	gen := []int32{tokID('1'), tokID('2')}
	s, err := submitNow(e, Request{Prompt: []int32{1, 5}, MaxTokens: 20, Generated: gen, Guided: &Guided{Regex: `[0-9]{4}`}})
	if err != nil {
		t.Fatal(err)
	}
	drive(t, e, clk, time.Millisecond, 100)
	r := collect(t, s)
	if len(r.text) != 2 || r.final.FinishReason != FinishStop || slices.Contains(r.tokens, 2) {
		t.Errorf("have %q (%v), %s; want 2 more digits, stop", r.text, r.tokens, r.final.FinishReason)
	}
}

func TestGuidedGrammarCached(t *testing.T) {
	m := newFakeModel(t)
	e, _ := testEngine(t, m, Options{GrammarCache: 2})
	for i := range 5 {
		re := fmt.Sprintf("[0-9]{%d}", 1+i%3)
		if _, err := submitNow(e, Request{ID: fmt.Sprint(i), Prompt: []int32{1}, MaxTokens: 5, Guided: &Guided{Regex: re}}); err != nil {
			t.Fatal(err)
		}
	}
	if n := e.grammars.Len(); n != 2 {
		t.Errorf("have %d cached grammars; want the bound, 2", n)
	}
}

// TestGuidedSpeculative runs guided requests on a model that repeats
// itself, so n-gram drafts are proposed and accepted: the masks apply to
// drafts and targets, and the output still matches and equals the plain
// run's.
func TestGuidedSpeculative(t *testing.T) {
	m := newFakeModel(t)
	m.next = func(h []int32) int32 { return tokID("ab1c2"[len(h)%5]) }
	g := &Guided{Regex: `[a-c1-2]{30}(x|12)`}
	run := func(o Options) []result {
		e, clk := testEngine(t, m, o)
		var streams []*Stream
		for i := range 4 {
			s, err := submitNow(e, Request{ID: fmt.Sprint(i), Prompt: []int32{1, tokID('a'), tokID('b'), tokID('1')}, MaxTokens: 60, Guided: g})
			if err != nil {
				t.Fatal(err)
			}
			streams = append(streams, s)
		}
		drive(t, e, clk, time.Millisecond, 1000)
		var out []result
		for _, s := range streams {
			out = append(out, collect(t, s))
		}
		checkWhole(t, e)
		return out
	}
	plain := run(Options{Speculation: noSpec})
	spec := run(Options{BlockSize: 4, KVBlocks: 64})
	re := regexp.MustCompile(`^[a-c1-2]{30}(x|12)$`)
	for i, r := range spec {
		if !re.MatchString(r.text) || r.final.FinishReason != FinishStop {
			t.Errorf("%d: have %q, %s; want a match, stop", i, r.text, r.final.FinishReason)
		}
		if r.text != plain[i].text {
			t.Errorf("%d: have %q; want the plain run's %q", i, r.text, plain[i].text)
		}
		if r.final.Stats.AcceptedPerStep <= 1.5 {
			t.Errorf("%d: have %.2f tokens per step; want drafts accepted", i, r.final.Stats.AcceptedPerStep)
		}
	}
}
