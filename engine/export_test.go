package engine

import "context"

// DemotePrefixes moves every cached device block that no sequence holds to
// the host tier (dropping what does not fit), as if the device had run
// short: benchmarks measure promotion with it.
func (e *Engine) DemotePrefixes(ctx context.Context) error {
	_, err := call(e, ctx, func() struct{} {
		if e.cache != nil {
			e.cache.EvictDevice(e.o.KVBlocks)
		}
		return struct{}{}
	})
	return err
}
