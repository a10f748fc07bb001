package main

import (
	"bytes"
	"context"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/internal/testmodels"
)

func TestBenchEdges(t *testing.T) {
	// A tiny model with a context of 512, as llama-bench's pp512 runs on.
	path := filepath.Join(t.TempDir(), "ctx512.gguf")
	if err := runMkmodel(context.Background(), []string{"--out", path, "--context", "512", "--layers", "1", "--dim", "32", "--heads", "2", "--ffn", "64", "--vocab", "300"}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		err  string // "" for success
	}{
		{"decode from an empty context", []string{"--ctx", "0", "--steps", "2", "--batches", "1,2"}, ""},
		{"prompt fills the context", []string{"--prompt", "512", "--steps", "2", "--batches", "1"}, ""},
		{"decode to the end of the context", []string{"--ctx", "509", "--steps", "2", "--batches", "1"}, ""},
		{"prompt past the context", []string{"--prompt", "513"}, "exceeds the model's context"},
		{"decode past the context", []string{"--ctx", "510", "--steps", "2"}, "exceed the model's context"},
		{"negative ctx", []string{"--ctx", "-1"}, "not negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := runBench(context.Background(), append([]string{"--model", path, "--bandwidth", "10"}, tt.args...))
			switch {
			case tt.err == "" && err != nil:
				t.Fatalf("have %v; want a run", err)
			case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
				t.Fatalf("have %v; want an error containing %q", err, tt.err)
			}
		})
	}
}

// The speculative bench's output is read by scripts: one line per batch
// size, exactly in this form.
var specLine = regexp.MustCompile(`^spec b=(\d+) plain=\d+\.\d spec=\d+\.\d speedup=\d+\.\d\d accepted_per_step=\d+\.\d\d$`)

func TestBenchSpecLines(t *testing.T) {
	target := testmodels.Path(t, testmodels.Stories260K)
	draft := testmodels.Path(t, testmodels.Stories260KQ8_0)
	for _, tc := range []struct{ kind, shape string }{{"draft", "auto"}, {"ngram", "auto"}, {"draft", "chain:3"}, {"draft", "off"}} {
		kind := tc.kind
		t.Run(kind+"-"+tc.shape, func(t *testing.T) {
			m, closeM, err := loadModel("cpu", 1, target, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer closeM()
			// Two rounds: the second runs the speculative engine first.
			sb := specBench{kind: kind, shape: tc.shape, tokens: 12, rounds: 2}
			if err := sb.check(map[bool]string{true: draft}[kind == "draft"]); err != nil {
				t.Fatal(err)
			}
			sb.target = m
			if kind == "draft" {
				d, closeD, err := loadModel("cpu", 1, draft, 0)
				if err != nil {
					t.Fatal(err)
				}
				defer closeD()
				sb.draft = d
			}
			var out bytes.Buffer
			if err := sb.run(context.Background(), &out, []int{1, 3}); err != nil {
				t.Fatal(err)
			}
			if sb.mismatches != 0 {
				t.Errorf("%d streams decoded differently with speculation; want none (greedy)", sb.mismatches)
			}
			// The step tallies of the last batch size's timed runs: a
			// speculating engine that plays Off drafts in none of its
			// steps, a fixed chain in some; the plain engine in none.
			ps, ss := sb.plainSteps, sb.specSteps
			if ps.steps[stepDraft] != 0 || ps.steps[stepDecode] == 0 {
				t.Errorf("plain engine's steps by kind %v; want decodes and no drafts", ps.steps)
			}
			if drafted := ss.steps[stepDraft] > 0; drafted != (tc.shape == "chain:3") && tc.shape != "auto" {
				t.Errorf("speculating engine's steps by kind %v with shape %s", ss.steps, tc.shape)
			}
			lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
			if len(lines) != 2 {
				t.Fatalf("have %d lines %q; want one per batch size", len(lines), lines)
			}
			for i, want := range []string{"1", "3"} {
				m := specLine.FindStringSubmatch(lines[i])
				if m == nil || m[1] != want {
					t.Errorf("line %q; want the spec line of b=%s", lines[i], want)
				}
			}
		})
	}
}

func TestBenchSpecFlagErrors(t *testing.T) {
	model := testmodels.Path(t, testmodels.Stories260K)
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--spec", "draft"}, "--spec draft needs --draft-model"},
		{[]string{"--spec", "ngram", "--draft-model", model}, "not ngram"},
		{[]string{"--spec", "eagle"}, "want draft or ngram"},
		{[]string{"--draft-model", model}, "needs --spec draft"},
		{[]string{"--spec", "ngram", "--tokens", "0"}, "must be positive"},
		{[]string{"--spec", "ngram", "--shape", "chain"}, "--shape"},
		{[]string{"--spec", "ngram", "--shape", "dynamic:0"}, "--shape"},
		{[]string{"--spec", "ngram", "--shape", "bushy:3"}, "--shape"},
		{[]string{"--spec", "ngram", "--shape", "confident:8,8,2"}, "--shape"},
		{[]string{"--spec", "ngram", "--shape", "confident:8,0,2,0.3"}, "--shape"},
		{[]string{"--spec", "ngram", "--shape", "confident:8,8,2,1.5"}, "--shape"},
		{[]string{"--spec", "draft", "--draft-model", filepath.Join(t.TempDir(), "none.gguf")}, "--draft-model"},
	}
	for _, tt := range tests {
		err := runBench(context.Background(), append([]string{"--model", model}, tt.args...))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: have %v; want an error containing %q", tt.args, err, tt.want)
		}
	}
}

// TestParseShape: --shape names every kind of shape.
func TestParseShape(t *testing.T) {
	for _, tc := range []struct{ flag, name string }{
		{"auto", ""}, {"off", "off"}, {"chain:3", "chain3"}, {"dynamic:8", "dyn8"}, {"bushy", "bushy16"}, {"wide", "wide8"},
		{"confident:8,8,2,0.3", "dyn8d8w2s30"},
	} {
		s, err := parseShape(tc.flag)
		name := ""
		if s != nil {
			name = s.Name
		}
		if err != nil || name != tc.name {
			t.Errorf("%q: have %q, %v; want %q", tc.flag, name, err, tc.name)
		}
	}
	if s, _ := parseShape("confident:8,8,2,0.3"); s == nil || s.MinScore != 0.3 || !s.Dynamic {
		t.Errorf("confident:8,8,2,0.3: have %+v; want a dynamic shape of minimum score 0.3", s)
	}
}

// TestStepTally: steps are told apart by their reports alone: a prompt
// chunk by tokens beyond one per sequence and the draft nodes, a draft by
// its nodes; a step without a pass is not a step.
func TestStepTally(t *testing.T) {
	ms := time.Millisecond
	drafts := func(n int) []engine.DraftCount { return []engine.DraftCount{{Drafter: "draft", Drafts: 2, Drafted: n}} }
	var tl stepTally
	for _, r := range []engine.StepReport{
		{Sequences: 8, Tokens: 8, Duration: 10 * ms},
		{Sequences: 8, Tokens: 8, Duration: 12 * ms},
		{Sequences: 8, Tokens: 16, Duration: 20 * ms, Drafts: drafts(8)},
		{Sequences: 8, Tokens: 17, Duration: 30 * ms, Drafts: drafts(8)},
		{Sequences: 2, Tokens: 40, Duration: 40 * ms},
		{},
	} {
		tl.ObserveStep(&r)
	}
	if want := [stepKinds]int{2, 1, 2}; tl.steps != want {
		t.Errorf("steps by kind %v; want %v", tl.steps, want)
	}
	if want := [stepKinds]time.Duration{22 * ms, 20 * ms, 70 * ms}; tl.dur != want {
		t.Errorf("time by kind %v; want %v", tl.dur, want)
	}
	// (8+8+8+8+2)/5 sequences per step.
	if s, want := tl.summary(120*ms), "6.8 sequences per step, outside plan and pass 0.008s of 0.120s"; !strings.HasSuffix(s, want) {
		t.Errorf("summary %q; want it to end %q", s, want)
	}
	tl.reset()
	if tl.steps != [stepKinds]int{} || tl.dur != [stepKinds]time.Duration{} || tl.seqs != 0 {
		t.Errorf("after reset: %v %v %d", tl.steps, tl.dur, tl.seqs)
	}
}

// TestCopyShare: a reply token counts as following a match when the two
// (three) tokens before it occur earlier in the prompt or the reply, and
// as right when the most recent such occurrence was followed by it.
func TestCopyShare(t *testing.T) {
	tests := []struct {
		name          string
		prompt, reply []int32
		after, right  [2]int
	}{
		{"no repeats", []int32{1, 2, 3}, []int32{4, 5, 6}, [2]int{}, [2]int{}},
		// 1 2 3 | 1 2 3: the second 3 follows "1 2" (right); nothing
		// before it is a 3-token repeat.
		{"quote of the prompt", []int32{1, 2, 3}, []int32{1, 2, 3}, [2]int{1, 0}, [2]int{1, 0}},
		// 5 1 2 3 9 | 1 2 3 4: 3 follows "1 2" (right), 4 follows "2 3"
		// and "1 2 3", whose earlier occurrence went on with 9 (wrong).
		{"quote that departs", []int32{5, 1, 2, 3, 9}, []int32{1, 2, 3, 4}, [2]int{2, 1}, [2]int{1, 0}},
		// The most recent occurrence decides: "7 8" went on with 1,
		// then with 2.
		{"most recent wins", []int32{7, 8, 1, 7, 8, 2}, []int32{7, 8, 2}, [2]int{1, 0}, [2]int{1, 0}},
		// Matches inside the reply count too.
		{"reply repeats itself", []int32{0}, []int32{4, 5, 6, 4, 5, 6}, [2]int{1, 0}, [2]int{1, 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c copyShare
			c.add(tt.prompt, tt.reply)
			if c.tokens != len(tt.reply) || c.after != tt.after || c.right != tt.right {
				t.Errorf("have %d tokens, after %v, right %v; want %d, %v, %v", c.tokens, c.after, c.right, len(tt.reply), tt.after, tt.right)
			}
		})
	}
}

func TestBenchSpecRounds(t *testing.T) {
	for _, tc := range []struct{ rounds, pairs, batches, want int }{
		{2, 0, 1, 2},  // no floor: --rounds alone
		{2, 8, 8, 2},  // b=1 over eight prompts: 16 pairs already
		{2, 8, 1, 8},  // b=32: one batch, eight rounds
		{2, 8, 3, 4},  // three batches: three rounds make 9, rounded up to even
		{3, 8, 4, 3},  // 12 pairs: --rounds stands, odd or not
		{1, 1, 1, 1},  // a floor of one pair
		{2, 9, 1, 10}, // nine rounds rounded up to ten
	} {
		b := specBench{rounds: tc.rounds, pairs: tc.pairs}
		if got := b.roundsFor(tc.batches); got != tc.want {
			t.Errorf("rounds %d, pairs %d, %d batches: %d rounds; want %d", tc.rounds, tc.pairs, tc.batches, got, tc.want)
		}
	}
}
