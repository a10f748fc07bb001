package cpu

// The F32 matrix product's blocking (gemm_f32_amd64.go): a pass covers up
// to gemmWRows weight rows by gemmXRows activation rows, gemmKC floats of
// k at a time. The tiles' accumulators wait in gemmScratch.acc from one
// span to the next; storing and reloading them changes no bits. Eight
// weight rows of 1024 floats (one span for a 768-wide model, two at 2048)
// ran a prompt's products on one Zen 3 core 6-10% faster than sixteen of
// 256 (which kept a span's weight rows in L1 but stored and reloaded the
// accumulators three to eight times an output, with the activation rows
// streaming past from L2 between): measured in one process, alternating the
// two call by call, 768x768, 2048x768 and 768x2048 at 4 to 512 rows.
const (
	gemmKC    = 1024
	gemmWRows = 8
	gemmXRows = 33
	// gemmDecodeWRows is a pass's weight rows where at most three
	// activation rows (a decode step's) meet each weight row once, whole:
	// two calls of the eight-row one-activation-row tile per pass.
	gemmDecodeWRows = 16
	// gemmTiles is the most tiles per activation triple in a pass: four
	// quads of weight rows, or three and one for each of three rows left
	// over.
	gemmTiles = max(gemmWRows, gemmDecodeWRows)/4 + 3
)

// gemmScratch is one worker's buffers for gemmF32: the tiles'
// accumulators (twelve vectors of eight per tile), a row for packing
// converted weights, and the Go kernel's unpacked copies.
type gemmScratch struct {
	acc             [gemmXRows / 3 * gemmTiles * 96]float32
	row             []float32
	unpack, unpackX []float32
	// accZ is gemmF32Groups' tiles' accumulators, made on first use: a
	// CPU without those kernels never needs its 30 KB.
	accZ []float32
}

// unpacked returns the rows rows of k floats packed in p, unpacked into
// *buf.
func (sc *gemmScratch) unpacked(buf *[]float32, p []float32, rows, k int) []float32 {
	if cap(*buf) < rows*k {
		*buf = make([]float32, rows*k)
	}
	u := (*buf)[:rows*k]
	for i := range rows {
		for l := range k {
			u[i*k+l] = gemmAt(p, true, rows, k, i, l)
		}
	}
	return u
}

// gemmXBlock is how many activation rows of k floats (not packed) one
// gemmF32 call takes: whole passes of gemmXRows, as many as fit in
// gemmXBytes. Within a call, gemmF32 takes the weight rows eight at a
// time and meets each group with all of the call's activation rows, which
// wait in the core's L2 cache meanwhile; with one pass per call the chunk's
// weight rows came back from L2 or L3 once per pass instead. A 128-row
// prompt at 768 wide is one call: its matrix products on one core took
// 5-10% less CPU time than pass by pass, and interfering load from the
// other core hurt them less.
func gemmXBlock(k int) int {
	return max(1, gemmXBytes/(4*max(k, 1))/gemmXRows) * gemmXRows
}

// gemmXBytes bounds a gemmF32 call's activation rows: most of a 512 KiB
// L2 cache, the rest left to the weight rows and the accumulators.
const gemmXBytes = 448 << 10

// gemmPackRows reports whether rows of k floats, weights and activations,
// in a product with n activation rows are worth packing (gemmPackRow):
// rows 512·c floats apart fall on the same L1 sets two by two or worse, so
// a pass's weight rows would evict each other before the activation rows
// after the first met them, and loads from several such rows in one cycle
// contend for the same L1 banks (on a Zen 3 core, three activation rows
// 8 KiB apart ran a tile 25% slower than packed ones). Packing copies the
// chunk's weight rows once per product, which only many activation rows
// pay for: with passes of eight weight rows over 1024 floats, unpacked
// rows ran 768x2048 and 512x1024 products 40% faster at 8 rows, 12-18% at
// 33 and 3-8% at 128, and the two ways were even from 256 rows (one
// process alternating them call by call, one thread).
func gemmPackRows(k, n int) bool { return k%512 == 0 && n >= gemmPackMinRows }

// gemmPackMinRows is the fewest activation rows worth packing for.
const gemmPackMinRows = 256

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

// The grouped layout of activation rows, for gemmF32Groups: groups of
// gemmGroupRows rows, group g at g·gemmGroupRows·k8 floats (k8 = k &^ 7;
// the tails past k8 stay in the rows as they are), and within a group of r
// rows (padded with a zero row to an even r') chunk c of every row back to
// back at c·8·r', row i's at +8·i. A kernel then reads one stream of
// chunks per group, each 512-bit load two rows' chunks of eight.
const gemmGroupRows = 6

// gemmGroupsLen is the length of nx rows of k floats in the grouped
// layout, the padding row included.
func gemmGroupsLen(nx, k int) int { return (nx + nx%2) * (k &^ 7) }

// gemmPackGroupRow copies the first k &^ 7 floats of row, activation row j
// of nx, into xg in the grouped layout; the last row of an odd nx clears
// the padding row after it.
func gemmPackGroupRow(xg []float32, nx, j int, row []float32) {
	k8 := len(row) &^ 7
	if k8 == 0 {
		return
	}
	g0 := j / gemmGroupRows * gemmGroupRows
	r := min(gemmGroupRows, nx-g0)
	re := r + r%2
	d := xg[g0*k8+8*(j-g0):]
	for c := 0; c < k8; c += 8 {
		copy(d[c*re:c*re+8], row[c:c+8])
	}
	if j == nx-1 && r%2 == 1 {
		d = d[8:]
		for c := 0; c < k8; c += 8 {
			clear(d[c*re : c*re+8])
		}
	}
}

// gemmGroupXBlock is how many activation rows of k floats one
// gemmF32Groups call takes: as gemmXBlock, in whole passes of
// gemmGroupPassRows.
func gemmGroupXBlock(k int) int {
	return max(1, gemmXBytes/(4*max(k, 1))/gemmGroupPassRows) * gemmGroupPassRows
}

const (
	// gemmGroupKC is the span of k gemmF32Groups takes at a time, and
	// gemmGroupPassRows the activation rows whose tiles' accumulators wait
	// while a span passes. On one Zen 5 core, spans of 2048 floats ran
	// 768x2048 products 2-4% faster than spans of 1024 (which ran those of
	// 768 wide as fast), and 6 to 96 rows a pass were even (128 and 512
	// rows, one thread).
	gemmGroupKC       = 2048
	gemmGroupPassRows = 8 * gemmGroupRows
	// gemmGroupAcc is the accumulators of one group, sixteen floats each:
	// by each of three pairs of activation rows, eight for its tile (of
	// which a four-row tile uses four) and four for each of up to three
	// weight rows left over, each run as all four rows of a tile.
	gemmGroupAcc = 20 * 3 * 16
)

// gemmGroupMinRows is the fewest activation rows that take gemmF32Groups:
// fewer (a decode step's) meet each weight row in the one-row kernels.
const gemmGroupMinRows = 4
