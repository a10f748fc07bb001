package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/specgate/specgate/engine/model/gguf"
	"github.com/specgate/specgate/internal/testmodels"
)

func TestMkmodelFrom(t *testing.T) {
	src := testmodels.Path(t, testmodels.Stories260K)
	out := filepath.Join(t.TempDir(), "inflated.gguf")
	args := []string{"--from", src, "--out", out, "--type", "q8_0", "--layers", "6", "--dim", "128", "--ffn", "192", "--head-dim", "16", "--noise", "0.1"}
	if err := runMkmodel(context.Background(), args); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if n, _ := f.Uint("llama.embedding_length"); n != 128 {
		t.Errorf("have width %d; want 128", n)
	}
	if n, _ := f.Uint("llama.attention.key_length"); n != 16 {
		t.Errorf("have head width %d; want 16", n)
	}
	if d, _ := f.String("general.description"); !strings.Contains(d, "NOT A TRAINED MODEL") || !strings.Contains(d, "noise 0.1") {
		t.Errorf("description %q does not say what the file is", d)
	}
}

func TestMkmodelFlagErrors(t *testing.T) {
	out := filepath.Join(t.TempDir(), "x.gguf")
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--out", out, "--noise", "0.1"}, "--noise needs --from"},
		{[]string{"--out", out, "--head-dim", "64"}, "--head-dim needs --from"},
		{[]string{"--out", out, "--from", "src.gguf", "--heads", "4"}, "--heads does not apply to --from"},
		{[]string{"--out", out, "--from", filepath.Join(t.TempDir(), "missing.gguf")}, "--from"},
		{[]string{"--out", out, "--type", "q3"}, "unknown weight type"},
		{[]string{"--out", out, "extra"}, "unexpected arguments"},
	}
	for _, tt := range tests {
		err := runMkmodel(context.Background(), tt.args)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: have %v; want an error containing %q", tt.args, err, tt.want)
		}
	}
}
