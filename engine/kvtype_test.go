package engine

import (
	"fmt"
	"testing"

	"github.com/specgate/specgate/engine/model"
	"github.com/specgate/specgate/kernels"
)

// f16Backend is the fake backend with F16 KV caches too.
type f16Backend struct{ fakeBackend }

func (f16Backend) KVTypes() []kernels.DType { return []kernels.DType{kernels.F32, kernels.F16} }

// f16Model is the fake model on it.
type f16Model struct{ *fakeModel }

func (m f16Model) Backend() kernels.Backend { return f16Backend{} }

func (m f16Model) SetKVType(dt kernels.DType) error {
	if !kernels.SupportsKV(m.Backend(), dt) {
		return fmt.Errorf("fake: no %v KV cache", dt)
	}
	m.kvType = dt
	return nil
}

// TestKVType checks that the KV type option reaches both tiers, falls back to F32 where the backend has no F16, and sizes blocks
// by the element size.
func TestKVType(t *testing.T) {
	// The fake model has one layer of KV width 1: a block of 16 slots is
	// 2·16·4 = 128 bytes in F32 and 64 in F16.
	const dev, host = 512 << 10, 256 << 10
	cases := []struct {
		name   string
		m      model.Model
		kt     KVType
		want   kernels.DType
		blocks int
	}{
		{"f16", f16Model{newFakeModel(t)}, KVF16, kernels.F16, dev / 64},
		{"f32", f16Model{newFakeModel(t)}, KVF32, kernels.F32, dev / 128},
		{"f16 falls back", newFakeModel(t), KVF16, kernels.F32, dev / 128},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e, err := newEngine(tc.m, Options{KVBytes: dev, HostKVBytes: host, KVType: tc.kt})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			if have := e.devKV.Spec().DType; have != tc.want {
				t.Errorf("device cache of %v; want %v", have, tc.want)
			}
			if have := e.hostKV.Spec().DType; have != tc.want {
				t.Errorf("host cache of %v; want %v", have, tc.want)
			}
			if o := e.Options(); o.KVBlocks != tc.blocks || o.HostKVBlocks != tc.blocks/2 {
				t.Errorf("have %d device and %d host blocks; want %d and %d", o.KVBlocks, o.HostKVBlocks, tc.blocks, tc.blocks/2)
			}
		})
	}
	if _, err := newEngine(newFakeModel(t), Options{KVType: 7}); err == nil {
		t.Error("have nil error for KV type 7; want one")
	}
}

func TestParseKVType(t *testing.T) {
	for _, kt := range []KVType{KVF16, KVF32} {
		if have, err := ParseKVType(kt.String()); err != nil || have != kt {
			t.Errorf("ParseKVType(%q) = %v, %v; want %v", kt.String(), have, err, kt)
		}
	}
	if _, err := ParseKVType("q8_0"); err == nil {
		t.Error("ParseKVType(q8_0): have nil error; want one")
	}
}
