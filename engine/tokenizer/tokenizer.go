// Package tokenizer turns text into token ids and back for the two tokenizer
// families that GGUF files carry: SentencePiece-style BPE (tokenizer.ggml.model
// "llama") and byte-level BPE ("gpt2"). Both follow llama.cpp token for token,
// so that prompts tokenized here hit the same KV cache entries and produce the
// same logits as a llama.cpp run.
//
// A Tokenizer is built from a plain Spec (the GGUF loader fills it); it does
// not read files. A Tokenizer is immutable after New and safe for concurrent
// use; a Detokenizer is not.
package tokenizer

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"unicode/utf8"
)

// Token types as GGUF's tokenizer.ggml.token_type stores them.
const (
	TypeUndefined   int32 = 0
	TypeNormal      int32 = 1
	TypeUnknown     int32 = 2
	TypeControl     int32 = 3
	TypeUserDefined int32 = 4
	TypeUnused      int32 = 5
	TypeByte        int32 = 6
)

// ErrSpec is wrapped by every error New returns for an invalid Spec.
var ErrSpec = errors.New("tokenizer: invalid spec")

// Spec describes a vocabulary as GGUF's tokenizer.ggml.* keys do.
//
// The boolean fields have no "absent" state, so the loader must fill the
// llama.cpp defaults itself: for Model "llama" AddBOS and AddSpacePrefix are
// true when the GGUF keys are missing; for "gpt2" AddBOS comes from
// tokenizer.ggml.add_bos_token and AddSpacePrefix is ignored.
type Spec struct {
	Model  string    // "llama" (SentencePiece BPE), "gpt2" (byte-level BPE) or "bert" (WordPiece)
	Pre    string    // gpt2 pre-tokenizer family: "llama-bpe"/"llama3", "qwen2", "smollm", "gpt2", "default" ("" = "default")
	Tokens []string  // token text, indexed by id
	Scores []float32 // SentencePiece merge scores; nil means all zero
	Types  []int32   // Type* per token; nil means inferred (see New)
	Merges []string  // gpt2 merges "left right", rank = index

	BOS, EOS, UNK, PAD int32 // -1 = none
	SEP                int32 // WordPiece separator, -1 = none
	EOT                int32 // end of turn (<|eot_id|>, <|im_end|>), -1 = none

	AddBOS bool // Encode prepends BOS
	// AddEOS says the vocab wants EOS after a text tokenized with its
	// special tokens (tokenizer.ggml.add_eos_token); Encode does not add
	// it, a prompt goes on after it, but End reports it.
	AddEOS         bool
	AddSpacePrefix bool // llama: Encode prepends a space, Decode strips it again
}

type modelKind uint8

const (
	modelSPM modelKind = iota + 1
	modelBPE
	modelWPM
)

// special is a token that EncodeSpecial (control, unknown, user-defined) or
// Encode (user-defined only) finds verbatim in the text before the BPE runs.
type special struct {
	text    string
	id      int32
	control bool // control or unknown: only EncodeSpecial matches it
}

// merge is the result of a gpt2 merge rule.
type merge struct {
	rank   int32
	result int32
}

// Tokenizer encodes and decodes one vocabulary. It is immutable and safe for
// concurrent use.
type Tokenizer struct {
	model  modelKind
	pre    preKind
	tokens []string
	scores []float32
	types  []int32
	pieces [][]byte // what each id contributes to decoded text

	all       map[string]int32 // every token's text (last id wins, like llama.cpp)
	mergeable map[string]int32 // normal, user-defined and undefined tokens only

	bos, eos, unk, pad, eot int32
	addBOS, addSpacePrefix  bool
	addEOS                  bool
	sep                     int32
	eog                     []bool

	specials      []special // longest text first
	specialFirst  [256]bool // first bytes of all specials, to skip the partition fast
	userDefFirst  [256]bool // first bytes of user-defined specials only
	hasUserDefine bool

	spmSplit bool // see spmWordsIndependent

	// SentencePiece byte fallback ids, -1 where the vocab has no <0xNN>.
	byteTok [256]int32

	// bert
	maxTokenLen int // bytes

	// gpt2
	ranks        map[[2]int32]merge
	byteSym      [256]int32 // id of the single-char token for each byte, -1 if none
	ignoreMerges bool       // llama3: a word that is a whole token skips the merges
}

// eogTexts are control tokens that end generation in chat models even when
// the GGUF does not name them, as llama.cpp collects them.
var eogTexts = map[string]bool{
	"<|eot_id|>": true, "<|im_end|>": true, "<|end|>": true, "<end_of_turn>": true,
	"<|endoftext|>": true, "<|eom_id|>": true, "<EOT>": true, "<|end_of_text|>": true,
}

// New validates s and precomputes the lookup tables. Types, when nil, are
// inferred: BOS/EOS/PAD/EOT are control, UNK unknown, "<0xNN>" byte tokens
// (llama model only) byte, the rest normal.
func New(s Spec) (*Tokenizer, error) {
	t := &Tokenizer{
		tokens: s.Tokens,
		bos:    s.BOS, eos: s.EOS, unk: s.UNK, pad: s.PAD, eot: s.EOT,
		addBOS: s.AddBOS, addEOS: s.AddEOS && s.EOS >= 0, sep: s.SEP,
	}
	switch s.Model {
	case "llama":
		t.model = modelSPM
		t.addSpacePrefix = s.AddSpacePrefix
	case "gpt2":
		t.model = modelBPE
		pre, ok := preKinds[s.Pre]
		if !ok {
			return nil, fmt.Errorf("%w: unknown pre-tokenizer %q (known: %s)", ErrSpec, s.Pre, strings.Join(preNames(), ", "))
		}
		t.pre = pre
		t.ignoreMerges = ignoresMerges[s.Pre]
	case "bert":
		t.model = modelWPM
	default:
		return nil, fmt.Errorf("%w: unknown model %q (want \"llama\", \"gpt2\" or \"bert\")", ErrSpec, s.Model)
	}
	n := len(s.Tokens)
	if n == 0 {
		return nil, fmt.Errorf("%w: no tokens", ErrSpec)
	}
	if n > 1<<31-1 {
		return nil, fmt.Errorf("%w: %d tokens do not fit int32 ids", ErrSpec, n)
	}
	if s.Scores != nil && len(s.Scores) != n {
		return nil, fmt.Errorf("%w: %d scores for %d tokens", ErrSpec, len(s.Scores), n)
	}
	if s.Types != nil && len(s.Types) != n {
		return nil, fmt.Errorf("%w: %d token types for %d tokens", ErrSpec, len(s.Types), n)
	}
	for _, f := range []struct {
		name string
		id   int32
	}{{"BOS", s.BOS}, {"EOS", s.EOS}, {"UNK", s.UNK}, {"PAD", s.PAD}, {"EOT", s.EOT}, {"SEP", s.SEP}} {
		if f.id < -1 || int(f.id) >= n {
			return nil, fmt.Errorf("%w: %s id %d out of range [-1, %d)", ErrSpec, f.name, f.id, n)
		}
	}
	if s.AddBOS && s.BOS < 0 {
		return nil, fmt.Errorf("%w: AddBOS without a BOS token", ErrSpec)
	}
	t.scores = s.Scores
	if t.scores == nil {
		t.scores = make([]float32, n)
	}

	t.types = make([]int32, n)
	if s.Types != nil {
		for i, ty := range s.Types {
			if ty < TypeUndefined || ty > TypeByte {
				return nil, fmt.Errorf("%w: token %d %q has type %d (want 0..6)", ErrSpec, i, s.Tokens[i], ty)
			}
			t.types[i] = ty
		}
	} else {
		for i, tok := range s.Tokens {
			t.types[i] = TypeNormal
			if t.model == modelSPM {
				if _, ok := parseByteToken(tok); ok {
					t.types[i] = TypeByte
				}
			}
		}
		for _, id := range []int32{s.BOS, s.EOS, s.PAD, s.EOT} {
			if id >= 0 {
				t.types[id] = TypeControl
			}
		}
		if s.UNK >= 0 {
			t.types[s.UNK] = TypeUnknown
		}
	}

	t.all = make(map[string]int32, n)
	t.mergeable = make(map[string]int32, n)
	for i := range t.byteTok {
		t.byteTok[i] = -1
		t.byteSym[i] = -1
	}
	for i, tok := range s.Tokens {
		id := int32(i)
		t.all[tok] = id
		switch t.types[i] {
		case TypeNormal, TypeUndefined, TypeUserDefined:
			// Control, unknown, byte and unused tokens are never the result
			// of a merge: user text must not turn into control tokens, and
			// SentencePiece itself never emits unused pieces.
			t.mergeable[tok] = id
		case TypeByte:
			b, ok := parseByteToken(tok)
			if !ok {
				return nil, fmt.Errorf("%w: byte token %d is %q (want <0xNN>)", ErrSpec, i, tok)
			}
			t.byteTok[b] = id
		}
		switch t.types[i] {
		case TypeControl, TypeUnknown, TypeUserDefined:
			if tok == "" {
				continue
			}
			ctl := t.types[i] != TypeUserDefined
			t.specials = append(t.specials, special{text: tok, id: id, control: ctl})
			t.specialFirst[tok[0]] = true
			if !ctl {
				t.userDefFirst[tok[0]] = true
				t.hasUserDefine = true
			}
		}
	}
	// Longest first, as llama.cpp partitions; ties by id for determinism.
	sort.SliceStable(t.specials, func(a, b int) bool {
		return len(t.specials[a].text) > len(t.specials[b].text)
	})

	if t.model == modelSPM {
		t.spmSplit = spmWordsIndependent(t.mergeable)
	}
	if t.model == modelBPE {
		if err := t.buildBPE(s.Merges); err != nil {
			return nil, err
		}
	}
	if t.model == modelWPM {
		if s.UNK < 0 {
			return nil, fmt.Errorf("%w: a WordPiece vocab needs an UNK token", ErrSpec)
		}
		for _, tok := range s.Tokens {
			t.maxTokenLen = max(t.maxTokenLen, len(tok))
		}
	}

	t.eog = make([]bool, n)
	for _, id := range []int32{s.EOS, s.EOT} {
		if id >= 0 {
			t.eog[id] = true
		}
	}
	for i, tok := range s.Tokens {
		if t.types[i] == TypeControl && eogTexts[tok] {
			t.eog[i] = true
		}
	}

	t.pieces = make([][]byte, n)
	for i := range s.Tokens {
		t.pieces[i] = t.makePiece(int32(i))
	}
	return t, nil
}

// parseByteToken reads "<0xNN>" (upper or lower case hex).
func parseByteToken(s string) (byte, bool) {
	if len(s) != 6 || s[0] != '<' || s[1] != '0' || s[2] != 'x' || s[5] != '>' {
		return 0, false
	}
	hi, ok1 := hexVal(s[3])
	lo, ok2 := hexVal(s[4])
	return hi<<4 | lo, ok1 && ok2
}

func hexVal(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}

// makePiece is llama.cpp's token_to_piece with special=false.
func (t *Tokenizer) makePiece(id int32) []byte {
	tok := t.tokens[id]
	switch t.types[id] {
	case TypeControl, TypeUnknown, TypeUnused:
		return nil
	case TypeByte:
		if b, ok := parseByteToken(tok); ok {
			return []byte{b}
		}
		return nil
	case TypeUserDefined:
		if t.model != modelBPE {
			return []byte(strings.ReplaceAll(tok, spmSpace, " "))
		}
		return []byte(tok)
	}
	if t.model != modelBPE {
		return []byte(strings.ReplaceAll(tok, spmSpace, " "))
	}
	return decodeByteLevel(tok)
}

// VocabSize returns the number of tokens.
func (t *Tokenizer) VocabSize() int { return len(t.tokens) }

// BOS returns the beginning-of-sequence id, -1 if none.
func (t *Tokenizer) BOS() int32 { return t.bos }

// EOS returns the end-of-sequence id, -1 if none.
func (t *Tokenizer) EOS() int32 { return t.eos }

// EOT returns the end-of-turn id, -1 if none.
func (t *Tokenizer) EOT() int32 { return t.eot }

// AddsBOS reports whether Encode prepends BOS.
func (t *Tokenizer) AddsBOS() bool { return t.addBOS }

// End returns the token llama.cpp's tokenize with its special tokens
// appends to a text, -1 if none: SEP for WordPiece, otherwise EOS where
// the vocab asks for it (tokenizer.ggml.add_eos_token). Encode never
// appends it: a prompt goes on after the text.
func (t *Tokenizer) End() int32 {
	switch {
	case t.model == modelWPM:
		return t.sep
	case t.addEOS:
		return t.eos
	}
	return -1
}

// IsEOG reports whether id ends generation: EOS, EOT, or a control token
// whose text is a well-known end-of-turn marker. Out-of-range ids are not.
func (t *Tokenizer) IsEOG(id int32) bool {
	return id >= 0 && int(id) < len(t.eog) && t.eog[id]
}

// IsControl reports whether id is a control token (type 3).
func (t *Tokenizer) IsControl(id int32) bool {
	return id >= 0 && int(id) < len(t.types) && t.types[id] == TypeControl
}

// Type returns the token type of id (Type*), TypeUndefined if out of range.
func (t *Tokenizer) Type(id int32) int32 {
	if id < 0 || int(id) >= len(t.types) {
		return TypeUndefined
	}
	return t.types[id]
}

// Token returns the vocabulary text of id ("" if out of range).
func (t *Tokenizer) Token(id int32) string {
	if id < 0 || int(id) >= len(t.tokens) {
		return ""
	}
	return t.tokens[id]
}

// Piece returns the bytes id contributes to decoded text in the middle of a
// sequence: byte tokens their byte, SentencePiece ▁ a space, gpt2 tokens
// their bytes through the reversed byte-to-unicode table, control, unknown
// and unused tokens nothing. The slice is shared: callers must not modify
// it. Out-of-range ids give nil.
func (t *Tokenizer) Piece(id int32) []byte {
	if id < 0 || int(id) >= len(t.pieces) {
		return nil
	}
	return t.pieces[id]
}

// Encode tokenizes user text, prepending BOS when the spec says so. Control
// token text in it stays plain text, so a user cannot forge a turn marker;
// user-defined tokens are matched, as llama.cpp does.
func (t *Tokenizer) Encode(text string) []int32 {
	out := make([]int32, 0, len(text)/3+2)
	if t.addBOS {
		out = append(out, t.bos)
	}
	return t.encode(out, text, false)
}

// EncodePlain tokenizes user text like Encode but adds no special token at
// all, not even BOS: llama.cpp's tokenize with add_special and
// parse_special both false, how its tokenizer test suites are written.
func (t *Tokenizer) EncodePlain(text string) []int32 {
	return t.encode(make([]int32, 0, len(text)/3+2), text, false)
}

// EncodeSpecial tokenizes trusted text such as a rendered chat template:
// control, unknown and user-defined token text becomes those tokens. It never
// prepends BOS; a template that wants one writes it. With AddSpacePrefix,
// every plain fragment that starts the text or follows a special token gets
// the dummy-prefix space, as llama.cpp does.
func (t *Tokenizer) EncodeSpecial(text string) []int32 {
	return t.encode(make([]int32, 0, len(text)/3+2), text, true)
}

// encode splits text around special tokens, then runs the model's BPE over
// each plain fragment, like llama.cpp's tokenizer_st_partition + tokenize.
func (t *Tokenizer) encode(out []int32, text string, parseSpecial bool) []int32 {
	if text == "" {
		return out
	}
	prevSpecial := true // the first fragment gets the SentencePiece space prefix
	var sc scratch
	emit := func(frag string) {
		switch t.model {
		case modelSPM:
			out = t.encodeSPM(out, frag, t.addSpacePrefix && prevSpecial, &sc)
		case modelWPM:
			out = t.encodeWPM(out, frag, &sc)
		default:
			out = t.encodeBPE(out, frag, &sc)
		}
		prevSpecial = false
	}
	if !t.mayHaveSpecial(text, parseSpecial) {
		emit(text)
		return out
	}
	for _, f := range t.partition(text, parseSpecial) {
		if f.id >= 0 {
			out = append(out, f.id)
			prevSpecial = true
			continue
		}
		emit(f.text)
	}
	return out
}

func (t *Tokenizer) mayHaveSpecial(text string, parseSpecial bool) bool {
	first := &t.userDefFirst
	if parseSpecial {
		first = &t.specialFirst
	} else if !t.hasUserDefine {
		return false
	}
	for i := 0; i < len(text); i++ {
		if first[text[i]] {
			return true
		}
	}
	return false
}

// fragment is plain text (id -1) or a special token found in it.
type fragment struct {
	text string
	id   int32
}

// partition splits text on special tokens, longest token first over the
// whole text, exactly as llama.cpp's tokenizer_st_partition orders it.
func (t *Tokenizer) partition(text string, parseSpecial bool) []fragment {
	frags := []fragment{{text: text, id: -1}}
	for _, sp := range t.specials {
		if sp.control && !parseSpecial {
			continue
		}
		var next []fragment
		changed := false
		for _, f := range frags {
			if f.id >= 0 || !strings.Contains(f.text, sp.text) {
				next = append(next, f)
				continue
			}
			changed = true
			rest := f.text
			for {
				i := strings.Index(rest, sp.text)
				if i < 0 {
					break
				}
				if i > 0 {
					next = append(next, fragment{text: rest[:i], id: -1})
				}
				next = append(next, fragment{id: sp.id})
				rest = rest[i+len(sp.text):]
			}
			if rest != "" {
				next = append(next, fragment{text: rest, id: -1})
			}
		}
		if changed {
			frags = next
		}
	}
	return frags
}

// Decode turns ids into text. With AddSpacePrefix (llama model), the leading
// space of the first piece after an optional leading BOS is removed, so
// Decode(Encode(s)) == s. Bytes that do not form valid UTF-8 become U+FFFD,
// one per byte, exactly as a Detokenizer emits them.
func (t *Tokenizer) Decode(ids []int32) string {
	var b []byte
	d := t.NewDetokenizer()
	for _, id := range ids {
		b = d.appendPiece(b, id)
	}
	return string(appendValid(nil, b, true))
}

// appendValid appends the whole runes of src to dst, invalid bytes as
// U+FFFD. Unless final, it stops before a trailing incomplete rune and
// returns how many bytes of src it consumed.
func appendValid(dst, src []byte, final bool) []byte {
	out, _ := appendValidN(dst, src, final)
	return out
}

func appendValidN(dst, src []byte, final bool) ([]byte, int) {
	if final && utf8.Valid(src) {
		return append(dst, src...), len(src)
	}
	i := 0
	for i < len(src) {
		c := src[i]
		if c < utf8.RuneSelf {
			dst = append(dst, c)
			i++
			continue
		}
		if !final && !utf8.FullRune(src[i:]) {
			break
		}
		r, size := utf8.DecodeRune(src[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, "\uFFFD"...)
		} else {
			dst = append(dst, src[i:i+size]...)
		}
		i += size
	}
	return dst, i
}
