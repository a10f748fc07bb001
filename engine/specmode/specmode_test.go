package specmode

import (
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	for _, tt := range []struct {
		mode string
		ok   bool
	}{
		{"", true}, {Auto, true}, {Off, true}, {NGram, true}, {Draft, true},
		{"Auto", false}, {"eagle", false}, {" off", false}, {"auto,off", false},
	} {
		err := Check(tt.mode)
		if (err == nil) != tt.ok {
			t.Errorf("Check(%q): have %v; want ok=%v", tt.mode, err, tt.ok)
		}
		if err != nil && !strings.Contains(err.Error(), `(want auto, off, ngram or draft)`) {
			t.Errorf("Check(%q): have %q; want the modes named", tt.mode, err)
		}
	}
}

func TestAllows(t *testing.T) {
	for _, tt := range []struct {
		mode, drafter string
		want          bool
	}{
		{"", NGram, true}, {Auto, Draft, true}, {NGram, NGram, true}, {Draft, Draft, true},
		{Off, NGram, false}, {Off, Draft, false}, {NGram, Draft, false}, {Draft, NGram, false},
	} {
		if got := Allows(tt.mode, tt.drafter); got != tt.want {
			t.Errorf("Allows(%q, %q): have %v; want %v", tt.mode, tt.drafter, got, tt.want)
		}
	}
}
