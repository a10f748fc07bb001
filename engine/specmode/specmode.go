// Package specmode names the speculation modes: a tenant's or a request's
// say over which drafter may speculate for it. The tenant store, the
// gateway's protocols and the engine all check modes here, so a mode one of
// them accepts is never refused by another.
//
// It imports nothing of the project's, so the tenant store need not pull
// the engine in to check a tenant's limits.
package specmode

import (
	"fmt"
	"strings"
)

// The modes. A mode naming a drafter the engine does not run means plain
// decoding, as Off does; the engine's own choices (dispatcher, class
// policy) still apply on top. "" reads as Auto everywhere.
const (
	Auto  = "auto"  // whatever drafter the engine runs
	Off   = "off"   // plain decoding
	NGram = "ngram" // only n-gram drafts
	Draft = "draft" // only the draft model's drafts
)

// All lists the modes, in the order error messages name them.
var All = []string{Auto, Off, NGram, Draft}

// Check returns nil for a mode ("" included) and an error naming the modes
// otherwise.
func Check(mode string) error {
	switch mode {
	case "", Auto, Off, NGram, Draft:
		return nil
	}
	return fmt.Errorf("unknown speculation mode %q (want %s or %s)", mode, strings.Join(All[:len(All)-1], ", "), All[len(All)-1])
}

// Allows reports whether mode lets the drafter named drafter (NGram or
// Draft) speculate.
func Allows(mode, drafter string) bool {
	return mode == "" || mode == Auto || mode == drafter
}
