package cpu

// The F32 matrix product's blocking (gemm_f32_amd64.go): a pass covers up
// to gemmWRows weight rows by gemmXRows activation rows, gemmKC floats of
// k at a time. Sixteen weight rows and three activation rows of 256 floats
// are 19 KiB, so while a pass's tiles step through one span of k every load
// comes from L1 (four weight rows of 2048 floats alone would fill it). The
// tiles' accumulators wait in gemmScratch.acc from one span to the next;
// storing and reloading them changes no bits.
const (
	gemmKC    = 256
	gemmWRows = 16
	gemmXRows = 33
	// gemmTiles is the most tiles per activation triple in a pass: four
	// quads of weight rows, or three and one for each of three rows left
	// over.
	gemmTiles = gemmWRows/4 + 3
)

// gemmScratch is one worker's buffers for gemmF32: the tiles'
// accumulators (twelve vectors of eight per tile), a row for packing
// converted weights and one for the Go kernel to unpack a row into.
type gemmScratch struct {
	acc         [gemmXRows / 3 * gemmTiles * 96]float32
	row, unpack []float32
}

// gemmPackRows reports whether a chunk of weight rows of k floats meeting
// n activation rows is worth packing (gemmPackRow): rows 512·c floats
// apart fall on the same L1 sets two by two or worse, so a pass's rows
// would evict each other before the activation rows after the first met
// them.
func gemmPackRows(k, n int) bool { return k%512 == 0 && n > 3 }

// gemmPackRow copies row, weight row i of mw rows of len(row) floats, into
// w in gemmF32's packed layout: span by span of gemmKC floats of k, the
// span of every row back to back, so a pass's rows over one span are
// contiguous.
func gemmPackRow(w []float32, mw, i int, row []float32) {
	k := len(row)
	for kb := 0; kb < k; kb += gemmKC {
		n := min(gemmKC, k-kb)
		copy(w[kb*mw+i*n:kb*mw+(i+1)*n], row[kb:])
	}
}

// gemmAt returns float l of weight row i of mw rows of k floats, packed or
// not.
func gemmAt(w []float32, packed bool, mw, k, i, l int) float32 {
	if !packed {
		return w[i*k+l]
	}
	kb := l / gemmKC * gemmKC
	return w[kb*mw+i*min(gemmKC, k-kb)+l-kb]
}
