package prefixcache

import (
	"errors"
	"math/rand/v2"
	"slices"
	"testing"
)

func TestPoolAlloc(t *testing.T) {
	tests := []struct {
		name      string
		cap       int
		allocs    []int // sizes, in order
		wantErr   []bool
		wantFree  int
		wantFirst []int32 // ids of the first successful allocation
	}{
		{name: "fresh pool hands out ids in order", cap: 4, allocs: []int{3}, wantErr: []bool{false}, wantFree: 1, wantFirst: []int32{0, 1, 2}},
		{name: "exactly all", cap: 2, allocs: []int{2}, wantErr: []bool{false}, wantFree: 0, wantFirst: []int32{0, 1}},
		{name: "short is all-or-nothing", cap: 3, allocs: []int{2, 2}, wantErr: []bool{false, true}, wantFree: 1, wantFirst: []int32{0, 1}},
		{name: "zero and negative", cap: 2, allocs: []int{0, -1}, wantErr: []bool{false, false}, wantFree: 2},
		{name: "empty pool", cap: 0, allocs: []int{1}, wantErr: []bool{true}, wantFree: 0},
		{name: "negative capacity is empty", cap: -5, allocs: []int{1}, wantErr: []bool{true}, wantFree: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := NewPool(Device, tt.cap)
			var first []int32
			for i, n := range tt.allocs {
				got, err := p.Alloc(n)
				if have := err != nil; have != tt.wantErr[i] {
					t.Fatalf("Alloc(%d): have err %v; want err %v", n, err, tt.wantErr[i])
				}
				if err != nil && !errors.Is(err, ErrNoBlocks) {
					t.Fatalf("Alloc(%d): have %v; want ErrNoBlocks", n, err)
				}
				if err != nil && got != nil {
					t.Fatalf("Alloc(%d) failed but returned %v", n, got)
				}
				if first == nil && len(got) > 0 {
					first = got
				}
			}
			if have := p.Free(); have != tt.wantFree {
				t.Errorf("Free: have %d; want %d", have, tt.wantFree)
			}
			if have, want := p.Used()+p.Free(), max(tt.cap, 0); have != want {
				t.Errorf("Used+Free: have %d; want %d", have, want)
			}
			if tt.wantFirst != nil && !slices.Equal(first, tt.wantFirst) {
				t.Errorf("first alloc: have %v; want %v", first, tt.wantFirst)
			}
			if err := p.check(); err != nil {
				t.Error(err)
			}
		})
	}
}

func TestPoolRefUnref(t *testing.T) {
	p := NewPool(Host, 3)
	if p.Tier() != Host || p.Cap() != 3 {
		t.Fatalf("have tier %v cap %d; want host 3", p.Tier(), p.Cap())
	}
	b, _ := p.Alloc(1)
	if err := p.Ref(b[0]); err != nil {
		t.Fatal(err)
	}
	if have := p.Refs(b[0]); have != 2 {
		t.Fatalf("Refs: have %d; want 2", have)
	}
	if err := p.Unref(b[0]); err != nil {
		t.Fatal(err)
	}
	if have := p.Free(); have != 2 {
		t.Fatalf("after one of two unrefs Free: have %d; want 2", have)
	}
	if err := p.Unref(b[0]); err != nil {
		t.Fatal(err)
	}
	if have := p.Free(); have != 3 {
		t.Fatalf("after last unref Free: have %d; want 3", have)
	}

	bad := []struct {
		name string
		op   func(int32) error
		b    int32
	}{
		{"unref free block (double free)", p.Unref, b[0]},
		{"ref free block", p.Ref, b[0]},
		{"unref negative", p.Unref, -1},
		{"ref past end", p.Ref, 3},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.op(tt.b); !errors.Is(err, ErrBadBlock) {
				t.Errorf("have %v; want ErrBadBlock", err)
			}
			if have := p.Free(); have != 3 {
				t.Errorf("Free: have %d; want 3 (a bad call must change nothing)", have)
			}
			if err := p.check(); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestPoolConservation runs random allocs, refs and unrefs against a model
// of who holds what and checks the pool after every step.
func TestPoolConservation(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	p := NewPool(Device, 32)
	var held []int32 // one entry per reference we own
	for step := range 2000 {
		switch rng.IntN(3) {
		case 0:
			got, err := p.Alloc(rng.IntN(6))
			if err == nil {
				held = append(held, got...)
			}
		case 1:
			if len(held) > 0 {
				b := held[rng.IntN(len(held))]
				if err := p.Ref(b); err != nil {
					t.Fatalf("step %d: %v", step, err)
				}
				held = append(held, b)
			}
		case 2:
			if len(held) > 0 {
				i := rng.IntN(len(held))
				if err := p.Unref(held[i]); err != nil {
					t.Fatalf("step %d: %v", step, err)
				}
				held = slices.Delete(held, i, i+1)
			}
		}
		if err := p.check(); err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		refs := map[int32]int{}
		for _, b := range held {
			refs[b]++
		}
		if have, want := p.Used(), len(refs); have != want {
			t.Fatalf("step %d: Used: have %d; want %d", step, have, want)
		}
		for b, n := range refs {
			if have := p.Refs(b); have != n {
				t.Fatalf("step %d: Refs(%d): have %d; want %d", step, b, have, n)
			}
		}
	}
}

func TestTierString(t *testing.T) {
	for _, tt := range []struct {
		t    Tier
		want string
	}{{Device, "device"}, {Host, "host"}, {Tier(7), "tier(7)"}} {
		if have := tt.t.String(); have != tt.want {
			t.Errorf("have %q; want %q", have, tt.want)
		}
	}
}
