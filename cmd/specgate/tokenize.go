package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/engine/model"
	"github.com/specgate/specgate/engine/model/gguf"
)

// The tokenize and logits commands print what outside checks compare with
// llama.cpp, so their output formats are fixed: ids space-separated on one
// line, and one JSON object per run.

func runTokenize(_ context.Context, args []string) error {
	return tokenizeTo(os.Stdout, os.Stderr, args)
}

func tokenizeTo(stdout, stderr io.Writer, args []string) error {
	fs := newFlags("tokenize", "--model FILE (--text TEXT | --file PATH) [--no-bos]")
	fs.SetOutput(stderr)
	path := fs.String("model", "", "GGUF `file` (a vocab-only file is enough)")
	text := fs.String("text", "", "text to tokenize")
	file := fs.String("file", "", "tokenize this file's whole text instead of --text")
	noBOS := fs.Bool("no-bos", false, "add no special token at all (BOS; EOS where the metadata asks for it; BERT's CLS and SEP), whatever the model's metadata says: how llama.cpp's tokenizer test suites are written")
	if err := fs.Parse(args); err != nil {
		return err // flag.ErrHelp included: main exits 0 on it
	}
	if _, err := checkInputFlags(fs, *path, "text", "file"); err != nil {
		return err
	}
	if *file != "" {
		b, err := os.ReadFile(*file)
		if err != nil {
			return fmt.Errorf("--file: %w", err)
		}
		*text = string(b)
	}
	// Only the tokenizer metadata is read, so vocab-only files work.
	f, err := gguf.Open(*path)
	if err != nil {
		return err
	}
	defer f.Close()
	tok, err := model.NewTokenizer(f)
	if err != nil {
		return fmt.Errorf("%s: %w", *path, err)
	}
	var ids []int32
	if *noBOS {
		ids = tok.EncodePlain(*text)
	} else {
		ids = tok.Encode(*text)
		if end := tok.End(); end >= 0 {
			ids = append(ids, end)
		}
	}
	w := bufio.NewWriter(stdout)
	for i, id := range ids {
		if i > 0 {
			w.WriteByte(' ')
		}
		w.WriteString(strconv.Itoa(int(id)))
	}
	w.WriteByte('\n')
	return w.Flush()
}

func runLogits(_ context.Context, args []string) error {
	return logitsTo(os.Stdout, os.Stderr, args)
}

// logitsLine is the logits command's output.
type logitsLine struct {
	PromptIDs []int32   `json:"prompt_ids"`
	Logits    []float32 `json:"logits"`
}

func logitsTo(stdout, stderr io.Writer, args []string) error {
	fs := newFlags("logits", "--model FILE (--prompt TEXT | --ids \"1 2 3\")")
	fs.SetOutput(stderr)
	path := fs.String("model", "", "GGUF model `file`")
	prompt := fs.String("prompt", "", "prompt text, tokenized with BOS as the model's metadata says")
	idList := fs.String("ids", "", "prompt token ids, space-separated, used as they are")
	backend := fs.String("backend", "cpu", "compute backend")
	threads := fs.Int("threads", 0, "worker threads (0 = one per CPU)")
	if err := fs.Parse(args); err != nil {
		return err // flag.ErrHelp included: main exits 0 on it
	}
	byPrompt, err := checkInputFlags(fs, *path, "prompt", "ids")
	if err != nil {
		return err
	}
	var given []int32
	if !byPrompt {
		for _, s := range strings.Fields(*idList) {
			v, err := strconv.ParseInt(s, 10, 32)
			if err != nil {
				return fmt.Errorf("--ids: %q is not a token id", s)
			}
			given = append(given, int32(v))
		}
	}
	// llama.cpp's reference logits are computed with an F32 KV cache.
	m, closeModel, err := loadModel(*backend, *threads, *path, engine.KVF32)
	if err != nil {
		return err
	}
	defer closeModel()
	ids := given
	if byPrompt {
		ids = m.Tokenizer().Encode(*prompt)
	}
	c := m.Config()
	if len(ids) == 0 {
		return fmt.Errorf("the prompt has no tokens")
	}
	if len(ids) > c.Context {
		return fmt.Errorf("the prompt's %d tokens exceed the model's context of %d", len(ids), c.Context)
	}
	for _, id := range ids {
		if id < 0 || int(id) >= c.Vocab {
			return fmt.Errorf("token id %d is outside the vocabulary of %d", id, c.Vocab)
		}
	}
	seqs, err := model.NewSequences(m, 1, len(ids))
	if err != nil {
		return err
	}
	logits, err := seqs.Step([][]int32{ids})
	if err != nil {
		return err
	}
	b, err := json.Marshal(logitsLine{PromptIDs: ids, Logits: logits})
	if err != nil {
		return fmt.Errorf("logits: %w", err) // a NaN or Inf has no JSON form
	}
	if _, err := stdout.Write(append(b, '\n')); err != nil {
		return err
	}
	return nil
}

// checkInputFlags checks what tokenize and logits both require: a model,
// no stray arguments, and exactly one of the two input flags a and b
// (set at all, so that an empty --text "" still counts as given). It
// reports whether a is the one given.
func checkInputFlags(fs *flag.FlagSet, model, a, b string) (bool, error) {
	if model == "" {
		return false, fmt.Errorf("--model is required")
	}
	if fs.NArg() > 0 {
		return false, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if set[a] == set[b] {
		return false, fmt.Errorf("give exactly one of --%s and --%s", a, b)
	}
	return set[a], nil
}
