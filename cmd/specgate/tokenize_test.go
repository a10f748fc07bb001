package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/specgate/specgate/engine/model/gguf"
	"github.com/specgate/specgate/internal/testmodels"
)

// TestTokenizeCommand checks the output format outside checks rely on, on a
// vocab-only file of llama.cpp's tokenizer suites and on a model file.
func TestTokenizeCommand(t *testing.T) {
	spm := testmodels.Ref(t, filepath.Join("tokenizers", "ggml-vocab-llama-spm.gguf"))
	gpt2 := testmodels.Ref(t, filepath.Join("tokenizers", "ggml-vocab-gpt-2.gguf"))
	eos := withEOS(t, spm)
	text := filepath.Join(t.TempDir(), "in.txt")
	if err := os.WriteFile(text, []byte("ied 4 ½ months"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"spm with BOS", []string{"--model", spm, "--text", "ied 4 ½ months"}, "1 474 287 29871 29946 29871 30226 7378\n"},
		{"spm no-bos", []string{"--model", spm, "--text", "ied 4 ½ months", "--no-bos"}, "474 287 29871 29946 29871 30226 7378\n"},
		{"spm file", []string{"--model", spm, "--file", text, "--no-bos"}, "474 287 29871 29946 29871 30226 7378\n"},
		{"gpt2", []string{"--model", gpt2, "--text", "ied 4 ½ months"}, "798 604 25208 1933\n"},
		{"add_eos_token", []string{"--model", eos, "--text", "ied 4 ½ months"}, "1 474 287 29871 29946 29871 30226 7378 2\n"},
		{"add_eos_token no-bos", []string{"--model", eos, "--text", "ied 4 ½ months", "--no-bos"}, "474 287 29871 29946 29871 30226 7378\n"},
		{"empty", []string{"--model", spm, "--text", "", "--no-bos"}, "\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			if err := tokenizeTo(&out, &errOut, tc.args); err != nil {
				t.Fatal(err)
			}
			if out.String() != tc.want {
				t.Errorf("have %q; want %q", out.String(), tc.want)
			}
		})
	}
	for name, args := range map[string][]string{
		"no model":      {"--text", "x"},
		"no text":       {"--model", spm},
		"text and file": {"--model", spm, "--text", "x", "--file", text},
		"missing file":  {"--model", spm, "--file", filepath.Join(t.TempDir(), "nope")},
		"bad model":     {"--model", text, "--text", "x"},
	} {
		t.Run(name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			if err := tokenizeTo(&out, &errOut, args); err == nil {
				t.Errorf("have nil error; want one")
			}
		})
	}
}

// TestLogitsCommand compares the logits command with llama.cpp's reference
// on a synthetic model, by prompt text and by ids.
func TestLogitsCommand(t *testing.T) {
	path := testmodels.Path(t, filepath.Join("synth", "synth-qwen2-f32.gguf"))
	f, err := os.Open(testmodels.Ref(t, filepath.Join("synth", "synth-qwen2-f32.jsonl")))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<24)
	if !sc.Scan() {
		t.Fatal("empty reference")
	}
	var ref struct {
		Prompt    string    `json:"prompt"`
		PromptIDs []int32   `json:"prompt_ids"`
		Last      []float32 `json:"last_prompt_pos_logits"`
	}
	if err := json.Unmarshal(sc.Bytes(), &ref); err != nil {
		t.Fatal(err)
	}
	var idList []string
	for _, id := range ref.PromptIDs {
		idList = append(idList, strconv.Itoa(int(id)))
	}
	ids := strings.Join(idList, " ")
	for name, args := range map[string][]string{
		"prompt": {"--model", path, "--prompt", ref.Prompt, "--threads", "1"},
		"ids":    {"--model", path, "--ids", ids, "--threads", "1"},
	} {
		t.Run(name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			if err := logitsTo(&out, &errOut, args); err != nil {
				t.Fatal(err)
			}
			if n := bytes.Count(out.Bytes(), []byte("\n")); n != 1 || !bytes.HasSuffix(out.Bytes(), []byte("\n")) {
				t.Fatalf("have %d lines; want one JSON line", n)
			}
			var got logitsLine
			if err := json.Unmarshal(out.Bytes(), &got); err != nil {
				t.Fatal(err)
			}
			if jsonString(t, got.PromptIDs) != jsonString(t, ref.PromptIDs) {
				t.Errorf("prompt ids %v; want %v", got.PromptIDs, ref.PromptIDs)
			}
			if len(got.Logits) != len(ref.Last) {
				t.Fatalf("have %d logits; want %d", len(got.Logits), len(ref.Last))
			}
			for i := range got.Logits {
				if d := math.Abs(float64(got.Logits[i] - ref.Last[i])); d > 1e-2 {
					t.Fatalf("logit %d: have %g; want %g", i, got.Logits[i], ref.Last[i])
				}
			}
		})
	}
	for name, args := range map[string][]string{
		"no model":        {"--prompt", "x"},
		"both":            {"--model", path, "--prompt", "x", "--ids", "1"},
		"bad id":          {"--model", path, "--ids", "1 x"},
		"id out of range": {"--model", path, "--ids", "1 99999"},
		"empty ids":       {"--model", path, "--ids", ""},
	} {
		t.Run(name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			if err := logitsTo(&out, &errOut, args); err == nil {
				t.Errorf("have nil error; want one")
			}
		})
	}
}

func jsonString(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// withEOS writes a copy of the vocab-only file src whose metadata asks for
// EOS after tokenized text (tokenizer.ggml.add_eos_token).
func withEOS(t *testing.T, src string) string {
	t.Helper()
	f, err := gguf.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var w gguf.Writer
	for _, k := range f.Keys() {
		if k == gguf.KeyAlignment || k == "tokenizer.ggml.add_eos_token" {
			continue
		}
		v, _ := f.Value(k)
		if err := w.Set(k, v); err != nil {
			t.Fatal(err)
		}
	}
	w.SetBool("tokenizer.ggml.add_eos_token", true)
	dst := filepath.Join(t.TempDir(), "eos.gguf")
	if err := w.WriteFile(dst); err != nil {
		t.Fatal(err)
	}
	return dst
}
