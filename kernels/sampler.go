package kernels

// SampleParams are one request's sampling settings. The zero value is
// greedy decoding without penalties. kernels/sample holds the reference
// implementation (its Params is this type) and documents the chain they
// drive: penalties → top-k → top-p → min-p → temperature → softmax → draw.
type SampleParams struct {
	Temperature      float32 // 0 (or below) = greedy
	TopK             int     // keep the K most likely tokens; 0 (or below, or ≥ vocab) = off
	TopP             float32 // keep the smallest most-likely set with mass ≥ TopP; 0 or ≥ 1 = off
	MinP             float32 // keep tokens with p ≥ MinP·p_max; 0 (or below) = off, ≥ 1 keeps the maximum only
	RepeatPenalty    float32 // divide positive, multiply non-positive logits of recent tokens; 0 (or below) or 1 = off
	RepeatLastN      int     // how many recent history tokens the penalties see; 0 = 64, -1 = all
	PresencePenalty  float32 // subtracted once from the logit of every recent token
	FrequencyPenalty float32 // subtracted per occurrence of a recent token
	Seed             uint64  // seeds the random source; equal seeds draw equal tokens at equal positions
}

// Greedy reports whether p always picks the (penalised) argmax.
func (p SampleParams) Greedy() bool { return !(p.Temperature > 0) }

// Penalties reports whether a penalty can change a logit when drawing
// after a history of n tokens.
func (p SampleParams) Penalties(n int) bool {
	rep := p.RepeatPenalty
	return n > 0 && (rep > 0 && rep != 1 || p.PresencePenalty != 0 || p.FrequencyPenalty != 0)
}

// SampleRow asks a Sampler for one token: the next token after History,
// drawn from one row of a logits tensor.
type SampleRow struct {
	// Row is the logits tensor's row.
	Row int
	// Params are the request's settings.
	Params SampleParams
	// Mask, when not nil, allows only the tokens whose bit is set, as
	// MaskLogitsRef reads a mask (guided decoding). It is only borrowed
	// for the call.
	Mask []uint64
	// History is every token of the sequence before the one drawn,
	// oldest first (prompt included): the penalties read its tail, and
	// its length is the drawn token's position, which keys the seeded
	// draw. It is only borrowed for the call.
	History []int32
}

// Sampler is an optional Backend op that turns rows of a logits tensor
// into tokens where the logits live, so that only token ids cross to the
// host: the engine's per-step sampling, greedy rows and guided masks
// included, and the draws of speculative verification. A backend without
// it has its rows downloaded and sampled by the host reference,
// kernels/sample, which is also what every implementation must equal: the
// same token for the same row, settings, mask and history, bit for bit, so
// a request's text never depends on the backend's choice of path.
//
// It is one op for every kind of row because one call per step is what a
// device wants: a greedy row without penalties is an argmax read where the
// row lies, a masked or penalised one is worked on a copy there, and the
// step's ids come back in one transfer. The op never writes the logits: a
// request's log-probabilities are read from the raw row afterwards.
type Sampler interface {
	// SampleRows writes to out[i] the token rows[i] draws: exactly what
	// kernels/sample's Sampler.SampleRow(row, rows[i]) returns, which is
	// its Sample(row, History), or SampleMasked(row, Mask, History) when
	// Mask is not nil.
	SampleRows(out []int32, logits Tensor, rows []SampleRow)
}
