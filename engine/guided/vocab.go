package guided

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"slices"
)

// Vocab is a tokenizer's vocabulary as guided decoding needs it: the bytes
// each token contributes to the output, and which ids end generation. It
// holds a trie of the token byte strings so that one state's mask is one
// depth-first walk of the DFA over the trie, shared prefixes walked once.
//
// Build it once per tokenizer with NewVocab; it is immutable and safe for
// concurrent use.
type Vocab struct {
	id     string
	pieces [][]byte
	eos    []int32
	isEOS  []bool

	// Trie, nodes in breadth-first order so a node's children are the
	// contiguous ids [kidLo[n], kidHi[n]). Node 0 is the root (empty
	// string); nodeByte[n] is the byte on the edge into n. The tokens
	// whose bytes end at n are toks[tokLo[n]:tokHi[n]].
	nodeByte     []byte
	kidLo, kidHi []int32
	tokLo, tokHi []int32
	toks         []int32
}

// NewVocab builds a Vocab. pieces[id] is the exact bytes token id adds to
// the output; nil or empty for control tokens, which a grammar never
// allows. eos lists the end-of-generation ids, allowed exactly in accepting
// states whatever their pieces; ids outside [0, len(pieces)) are ignored.
// The slices are copied.
func NewVocab(pieces [][]byte, eos []int32) *Vocab {
	v := &Vocab{
		pieces: make([][]byte, len(pieces)),
		isEOS:  make([]bool, len(pieces)),
	}
	h := sha256.New()
	var n [4]byte
	binary.LittleEndian.PutUint32(n[:], uint32(len(pieces)))
	h.Write(n[:])
	for i, p := range pieces {
		v.pieces[i] = bytes.Clone(p)
		binary.LittleEndian.PutUint32(n[:], uint32(len(p)))
		h.Write(n[:])
		h.Write(p)
	}
	for _, id := range eos {
		if id >= 0 && int(id) < len(pieces) && !v.isEOS[id] {
			v.isEOS[id] = true
			v.eos = append(v.eos, id)
		}
	}
	slices.Sort(v.eos)
	for _, id := range v.eos {
		binary.LittleEndian.PutUint32(n[:], uint32(id))
		h.Write(n[:])
	}
	v.id = hex.EncodeToString(h.Sum(nil)[:16])
	v.buildTrie()
	return v
}

// Size is the number of token ids.
func (v *Vocab) Size() int { return len(v.pieces) }

// ID identifies the vocabulary's content (pieces and EOS ids); equal
// content gives equal ids. Grammar caches key on it.
func (v *Vocab) ID() string { return v.id }

// Piece returns token id's bytes (nil for an unknown id). Read only.
func (v *Vocab) Piece(id int32) []byte {
	if id < 0 || int(id) >= len(v.pieces) {
		return nil
	}
	return v.pieces[id]
}

// IsEOS reports whether id ends generation.
func (v *Vocab) IsEOS(id int32) bool {
	return id >= 0 && int(id) < len(v.isEOS) && v.isEOS[id]
}

// EOS returns the end-of-generation ids, sorted. Read only.
func (v *Vocab) EOS() []int32 { return v.eos }

func (v *Vocab) buildTrie() {
	ids := make([]int32, 0, len(v.pieces))
	for i, p := range v.pieces {
		if len(p) > 0 && !v.isEOS[i] {
			ids = append(ids, int32(i))
		}
	}
	slices.SortFunc(ids, func(a, b int32) int {
		if c := bytes.Compare(v.pieces[a], v.pieces[b]); c != 0 {
			return c
		}
		return int(a - b)
	})
	// Each queued node covers the sorted ids [lo, hi) sharing its prefix
	// of length depth; ids whose piece is exactly that prefix come first.
	type span struct{ lo, hi, depth int }
	queue := []span{{0, len(ids), 0}}
	v.nodeByte = append(v.nodeByte, 0)
	for n := 0; n < len(queue); n++ {
		sp := queue[n]
		i := sp.lo
		v.tokLo = append(v.tokLo, int32(len(v.toks)))
		for i < sp.hi && len(v.pieces[ids[i]]) == sp.depth {
			v.toks = append(v.toks, ids[i])
			i++
		}
		v.tokHi = append(v.tokHi, int32(len(v.toks)))
		v.kidLo = append(v.kidLo, int32(len(queue)))
		for i < sp.hi {
			c := v.pieces[ids[i]][sp.depth]
			j := i
			for j < sp.hi && v.pieces[ids[j]][sp.depth] == c {
				j++
			}
			queue = append(queue, span{i, j, sp.depth + 1})
			v.nodeByte = append(v.nodeByte, c)
			i = j
		}
		v.kidHi = append(v.kidHi, int32(len(queue)))
	}
}
