package model

import "github.com/specgate/specgate/kernels"

// Batch is one forward pass over tokens from any number of sequences: the
// engine's continuous batching packs decode tokens and prefill chunks of
// different requests into one Batch, and speculative decoding packs a draft
// tree. Every slice but Logits has one entry per token.
type Batch struct {
	// Tokens are the input token ids.
	Tokens []int32
	// Pos is each token's position in its sequence (RoPE).
	Pos []int32
	// Slots is the KV slot (block*BlockSize + offset) each token's key and
	// value are written to before attention runs.
	Slots []int32
	// Attn is each token's view of the cache: its sequence's block table
	// and how many positions it attends to (Pos+1 for causal attention).
	// Rows of one sequence usually share the Table slice.
	Attn []kernels.AttnRow
	// Logits lists the token indices whose next-token logits Forward
	// returns, in output order (one vocabulary-wide row each).
	Logits []int32
	// Tree, when set, makes this a draft-tree verification pass: token i
	// attends to positions [0, Tree.Rows[i].Prefix) of its table plus the
	// slots Tree.Rows[i].Slots (its ancestors and itself), through the
	// backend's kernels.TreeAttention; Attn[i].Len then only bounds the
	// table. The backend must implement kernels.TreeAttention.
	Tree *kernels.TreeMask
}

// Len is the number of tokens.
func (b *Batch) Len() int { return len(b.Tokens) }

// Reset empties the batch, keeping its capacity.
func (b *Batch) Reset() {
	b.Tokens, b.Pos, b.Slots, b.Attn, b.Logits = b.Tokens[:0], b.Pos[:0], b.Slots[:0], b.Attn[:0], b.Logits[:0]
	b.Tree = nil
}

// Add appends one token.
func (b *Batch) Add(tok, pos, slot int32, table []int32, wantLogits bool) {
	if wantLogits {
		b.Logits = append(b.Logits, int32(len(b.Tokens)))
	}
	b.Tokens = append(b.Tokens, tok)
	b.Pos = append(b.Pos, pos)
	b.Slots = append(b.Slots, slot)
	b.Attn = append(b.Attn, kernels.AttnRow{Table: table, Len: pos + 1})
}
