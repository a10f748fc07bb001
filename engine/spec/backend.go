package spec

import (
	"fmt"

	"github.com/specgate/specgate/kernels"
)

// TreeBackend lets a model written against plain Attention verify draft
// trees without knowing about them: load the target model on a TreeBackend,
// and while the Runner has a tree mask armed, the model's Attention calls
// go to the wrapped backend's TreeAttention with that mask. Outside a tree
// forward pass (and for any other model on it, such as a draft model) it is
// the wrapped backend unchanged.
//
// It hides the wrapped backend's other optional ops; Unwrap returns it.
type TreeBackend struct {
	kernels.Backend
	ta   kernels.TreeAttention
	sc   kernels.SlotCopier
	tree *kernels.TreeMask // armed for the current forward pass, else nil
}

// ErrNoTreeAttention reports a backend without the tree attention op.
var ErrNoTreeAttention = fmt.Errorf("spec: backend does not implement kernels.TreeAttention")

// NewTreeBackend wraps b, which must implement kernels.TreeAttention and
// kernels.SlotCopier.
func NewTreeBackend(b kernels.Backend) (*TreeBackend, error) {
	ta, ok := b.(kernels.TreeAttention)
	if !ok {
		return nil, fmt.Errorf("%w (%s)", ErrNoTreeAttention, b.Name())
	}
	sc, ok := b.(kernels.SlotCopier)
	if !ok {
		return nil, fmt.Errorf("spec: backend %s does not implement kernels.SlotCopier", b.Name())
	}
	return &TreeBackend{Backend: b, ta: ta, sc: sc}, nil
}

var (
	_ kernels.Backend       = (*TreeBackend)(nil)
	_ kernels.TreeAttention = (*TreeBackend)(nil)
	_ kernels.SlotCopier    = (*TreeBackend)(nil)
)

// Unwrap returns the wrapped backend.
func (t *TreeBackend) Unwrap() kernels.Backend { return t.Backend }

// Attention is the wrapped backend's Attention, or its TreeAttention with
// the armed mask during a tree forward pass.
func (t *TreeBackend) Attention(dst, q kernels.Tensor, c kernels.KVCache, layer int, a kernels.Attn) {
	if t.tree != nil {
		t.ta.TreeAttention(dst, q, c, layer, a, *t.tree)
		return
	}
	t.Backend.Attention(dst, q, c, layer, a)
}

// TreeAttention is the wrapped backend's.
func (t *TreeBackend) TreeAttention(dst, q kernels.Tensor, c kernels.KVCache, layer int, a kernels.Attn, tree kernels.TreeMask) {
	t.ta.TreeAttention(dst, q, c, layer, a, tree)
}

// CopySlots is the wrapped backend's.
func (t *TreeBackend) CopySlots(c kernels.KVCache, moves []kernels.SlotCopy) {
	t.sc.CopySlots(c, moves)
}

// arm sets the mask the model's Attention calls use until disarm.
func (t *TreeBackend) arm(m *kernels.TreeMask) { t.tree = m }
func (t *TreeBackend) disarm()                 { t.tree = nil }
