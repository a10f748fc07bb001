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
// accumulators (twelve vectors of eight per tile) and one span of a pass's
// weight rows packed back to back, for row strides that would map every
// row onto the same few L1 sets.
type gemmScratch struct {
	acc  [gemmXRows / 3 * gemmTiles * 96]float32
	pack [gemmWRows * gemmKC]float32
}
