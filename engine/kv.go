package engine

import (
	"github.com/specgate/specgate/kernels"
	"github.com/specgate/specgate/prefixcache"
)

// kvBackend is what the engine needs of a backend for its KV cache: to
// make the device and host tiers in the shape the model reports
// (model.Config.KVSpec), and to move whole blocks between them when
// sequences are swapped or the prefix cache demotes and promotes.
type kvBackend interface {
	NewKV(s kernels.KVSpec) (kernels.KVCache, error)
	prefixcache.BlockCopier
}
