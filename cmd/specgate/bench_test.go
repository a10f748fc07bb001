package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
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
