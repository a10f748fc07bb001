package engine_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/engine/model"
	_ "github.com/specgate/specgate/engine/model/llama"
	"github.com/specgate/specgate/internal/testmodels"
	"github.com/specgate/specgate/kernels"
	_ "github.com/specgate/specgate/kernels/cpu"
)

func loadStories(tb testing.TB) model.Loaded {
	tb.Helper()
	path := testmodels.Path(tb, testmodels.Stories260K)
	be, err := kernels.Open("cpu", kernels.Options{Threads: 2})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { be.Close() })
	m, err := model.Load(path, be)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { m.Close() })
	return m
}

var storyPrompts = []string{
	"Once upon a time", "The little dog", "Lily and Tom went", "One day, a big bear",
	"The sun was shining", "Tim had a red ball", "There was a cat", "Sara wanted to play",
	"In the park, the kids", "Mom said", "The bird flew", "A little girl named Sue",
	"Ben liked to run", "It was a cold day", "The tree was tall", "Max found a box",
}

// generate runs one request to its end and returns its tokens and final.
func generate(ctx context.Context, e *engine.Engine, r engine.Request) ([]int32, string, *engine.Final, error) {
	s, err := e.Submit(ctx, r)
	if err != nil {
		return nil, "", nil, err
	}
	var toks []int32
	var text string
	for {
		ev, err := s.Recv(ctx)
		if errors.Is(err, io.EOF) {
			return nil, "", nil, errors.New("stream ended without a final")
		}
		if err != nil {
			return nil, "", nil, err
		}
		toks = append(toks, ev.Tokens...)
		text += ev.Text
		if ev.Final != nil {
			return toks, text, ev.Final, nil
		}
	}
}

func TestStoriesGreedyConcurrentMatchesAlone(t *testing.T) {
	m := loadStories(t)
	tok := m.Tokenizer()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const maxTokens = 48
	var reqs []engine.Request
	for i, p := range storyPrompts {
		reqs = append(reqs, engine.Request{ID: fmt.Sprint("r", i), Tenant: fmt.Sprint("t", i%4), Prompt: tok.Encode(p), MaxTokens: maxTokens})
	}

	alone := make([][]int32, len(reqs))
	{
		e, err := engine.New(m, engine.Options{})
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range reqs {
			toks, _, f, err := generate(ctx, e, r)
			if err != nil {
				t.Fatal(err)
			}
			if f.FinishReason == engine.FinishError {
				t.Fatalf("%s: %v", r.ID, f.Err)
			}
			alone[i] = toks
		}
		e.Close()
	}
	checkReference(t, storyPrompts, reqs, alone)

	for _, tt := range []struct {
		name string
		o    engine.Options
	}{
		{"roomy", engine.Options{}},
		// 16 sequences of up to ~56 tokens need ~64 blocks of 16.
		{"tight pool, swap", engine.Options{KVBlocks: 24, HostKVBlocks: 64, MaxBatchTokens: 64}},
		{"tight pool, recompute", engine.Options{KVBlocks: 24, MaxBatchTokens: 64}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e, err := engine.New(m, tt.o)
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			got := make([][]int32, len(reqs))
			finals := make([]*engine.Final, len(reqs))
			var wg sync.WaitGroup
			for i, r := range reqs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					toks, _, f, err := generate(ctx, e, r)
					if err != nil {
						t.Error(err)
						return
					}
					got[i], finals[i] = toks, f
				}()
			}
			wg.Wait()
			pre := 0
			for i := range reqs {
				if finals[i] == nil {
					continue
				}
				pre += finals[i].Stats.Preemptions
				if !slices.Equal(got[i], alone[i]) {
					t.Errorf("%s: concurrent greedy ids differ from alone:\nhave %v\nwant %v", reqs[i].ID, got[i], alone[i])
				}
			}
			if tt.o.KVBlocks != 0 && pre == 0 {
				t.Error("have no preemptions with a tight pool; want some")
			}
			t.Logf("%d preemptions", pre)
		})
	}
}

// checkReference compares the alone runs with llama.cpp's greedy outputs
// for the prompts that the reference file has.
func checkReference(t *testing.T, prompts []string, reqs []engine.Request, alone [][]int32) {
	t.Helper()
	f, err := os.Open(filepath.Join(testmodels.RefDir(), "greedy.jsonl"))
	if err != nil {
		t.Logf("no reference outputs: %v", err)
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	checked := 0
	for sc.Scan() {
		var ref struct {
			Prompt    string  `json:"prompt"`
			PromptIDs []int32 `json:"prompt_ids"`
			Greedy    []int32 `json:"greedy_ids"`
		}
		if err := json.Unmarshal(sc.Bytes(), &ref); err != nil {
			t.Fatal(err)
		}
		i := slices.Index(prompts, ref.Prompt)
		if i < 0 {
			continue
		}
		checked++
		if !slices.Equal(reqs[i].Prompt, ref.PromptIDs) {
			t.Errorf("%q: have prompt ids %v; want %v", ref.Prompt, reqs[i].Prompt, ref.PromptIDs)
			continue
		}
		n := min(len(alone[i]), len(ref.Greedy))
		if !slices.Equal(alone[i][:n], ref.Greedy[:n]) {
			t.Errorf("%q: have greedy ids %v; want llama.cpp's %v", ref.Prompt, alone[i][:n], ref.Greedy[:n])
		}
	}
	if checked == 0 {
		t.Error("no prompt of the reference file was checked")
	}
}

func TestStoriesStopString(t *testing.T) {
	m := loadStories(t)
	e, err := engine.New(m, engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p := m.Tokenizer().Encode("Once upon a time")
	_, full, _, err := generate(ctx, e, engine.Request{Prompt: p, MaxTokens: 30})
	if err != nil {
		t.Fatal(err)
	}
	// llama.cpp continues ", there was a little girl named Lily."
	_, text, f, err := generate(ctx, e, engine.Request{Prompt: p, MaxTokens: 30, Stop: []string{"little girl"}})
	if err != nil {
		t.Fatal(err)
	}
	want, _, ok := strings.Cut(full, "little girl")
	if !ok {
		t.Fatalf("greedy continuation %q lacks %q, which llama.cpp's has", full, "little girl")
	}
	if text != want || f.FinishReason != engine.FinishStop {
		t.Errorf("have %q, %s; want %q, stop", text, f.FinishReason, want)
	}
}
