package tokenizer

// Detokenizer turns a stream of ids into text incrementally. It emits only
// whole UTF-8 runes: the bytes of a rune split over several byte-fallback
// tokens wait until the rune is complete. The concatenation of everything
// Add and Flush return equals Decode of the same ids. Not safe for concurrent
// use.
type Detokenizer struct {
	t       *Tokenizer
	pending []byte // bytes of an incomplete rune
	seen    int    // ids added so far
	strip   bool   // the next piece still owes the space-prefix strip
}

// NewDetokenizer returns a Detokenizer for a sequence from its start: like
// Decode, it skips a leading BOS and strips the SentencePiece space prefix
// from the first piece after it.
func (t *Tokenizer) NewDetokenizer() *Detokenizer {
	return &Detokenizer{t: t, strip: t.model == modelSPM && t.addSpacePrefix}
}

// NewContinuationDetokenizer returns a Detokenizer for ids that continue an
// already decoded prefix (a completion after its prompt): every piece is
// emitted as is, its leading space included.
func (t *Tokenizer) NewContinuationDetokenizer() *Detokenizer {
	return &Detokenizer{t: t, seen: 1}
}

// appendPiece appends id's piece to b, applying the start-of-sequence rules.
func (d *Detokenizer) appendPiece(b []byte, id int32) []byte {
	first := d.seen == 0
	d.seen++
	if first && id == d.t.bos && id >= 0 {
		return b // the strip moves on to the piece after BOS
	}
	p := d.t.Piece(id)
	if d.strip {
		d.strip = false
		if len(p) > 0 && p[0] == ' ' {
			p = p[1:]
		}
	}
	return append(b, p...)
}

// Add consumes one id and returns the text that is now complete ("" while a
// rune is still partial).
func (d *Detokenizer) Add(id int32) string {
	d.pending = d.appendPiece(d.pending, id)
	if len(d.pending) == 0 {
		return ""
	}
	out, n := appendValidN(nil, d.pending, false)
	d.pending = append(d.pending[:0], d.pending[n:]...)
	return string(out)
}

// Flush returns what is still buffered, each byte of an incomplete rune as
// U+FFFD, and leaves the Detokenizer ready to continue mid-sequence.
func (d *Detokenizer) Flush() string {
	if len(d.pending) == 0 {
		return ""
	}
	out := appendValid(nil, d.pending, true)
	d.pending = d.pending[:0]
	return string(out)
}

// Pending reports how many bytes wait for the rest of a rune.
func (d *Detokenizer) Pending() int { return len(d.pending) }
