//go:build amd64 && !noasm

package cpu

// The AVX2 tile kernels (tile_avx2_amd64.s), for CPUs without VNNI: the
// tiled path with exact per-row block sums and no horizontal adds, which
// batches need both for speed and to compute each row as canon.go defines.
// They read the signed tile layout for Q8_0 too (q8TileSigned).

//go:noescape
func q8Tile4x8AVX(w *byte, stride int, xp *byte, xd *float32, nb int, o *[tileOut]float32)

//go:noescape
func q4Tile4x8AVX(w *byte, stride int, xp *byte, xd *float32, nb int, o *[tileOut]float32, xc *int32)

func setTilesAVX2() {
	q8TileStore = tileStoreAVX2(func(w []byte, stride int, a tileAct, nb int, o *[tileOut]float32) {
		q8Tile4x8AVX(&w[0], stride, &a.xp[0], &a.xd[0], nb, o)
	}, q8Bytes)
	q4TileStore = tileStoreAVX2(func(w []byte, stride int, a tileAct, nb int, o *[tileOut]float32) {
		q4Tile4x8AVX(&w[0], stride, &a.xp[0], &a.xd[0], nb, o, &a.xc[0])
	}, q4Bytes)
	q8TileSigned = true
	// Without VNNI the multi-row kernels (dotQ8RowsN, eight activation
	// rows a call) cost less per row than a tile, which also pads a batch
	// to whole tiles of eight: measured on an AVX2-only two-core host (the
	// matrix products of one step of a 110 MB Q8_0 model), 9 rows take 28
	// ms against 46 with tiles, 16 rows 41 against 46, 32 rows 77 against
	// 82. The tiles win on long prefill chunks (128 rows), where they keep
	// a 32-row slice of the activations in cache.
	tileMinRows = 33
}

// tileStoreAVX2 is a store kernel on a one-tile kernel: it checks the
// shapes once, then runs each tile and group and scatters the results.
func tileStoreAVX2(tile func([]byte, int, tileAct, int, *[tileOut]float32), blockBytes int) tileStoreFunc {
	return func(w []byte, stride int, a tileAct, nb, groups int, out []float32, ostride, nrows, ntiles int) {
		checkTileStore(w, stride, blockBytes, a, nb, groups, out, ostride, nrows, ntiles)
		if a.xc != nil {
			_ = a.xc[groups*nb*tileRows-1]
		} else {
			panic("cpu: AVX2 tile kernel: activations not in the signed layout")
		}
		var o [tileOut]float32
		for j := range ntiles {
			for g := range groups {
				tile(w[j*tileW*stride:], stride, a.group(g, nb), nb, &o)
				for l := range min(tileRows, nrows-g*tileRows) {
					r := out[(g*tileRows+l)*ostride+j*tileW:]
					r[0], r[1], r[2], r[3] = o[l], o[tileRows+l], o[2*tileRows+l], o[3*tileRows+l]
				}
			}
		}
	}
}
