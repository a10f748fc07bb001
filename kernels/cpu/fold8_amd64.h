// Folding eight weight rows' partial sums into one vector, lane i = row i,
// for the kernels whose lanes are weight rows (dot_amd64.s,
// kquant_legacy_amd64.s).

// R8FOLD folds the eight rows' int32 partial sums in Y0-Y7 into their
// exact block sums, lane i = row i, in Y1 (as floats); Y0, Y2, Y4 and Y6
// are clobbered.
#define R8FOLD \
	R8FOLDI \
	VCVTDQ2PS  Y1, Y1

// R8FOLDI is R8FOLD leaving the sums as int32.
#define R8FOLDI \
	VPHADDD    Y1, Y0, Y0 \
	VPHADDD    Y3, Y2, Y2 \
	VPHADDD    Y2, Y0, Y0 \
	VPHADDD    Y5, Y4, Y4 \
	VPHADDD    Y7, Y6, Y6 \
	VPHADDD    Y6, Y4, Y4 \
	VPERM2I128 $0x20, Y4, Y0, Y1 \
	VPERM2I128 $0x31, Y4, Y0, Y2 \
	VPADDD     Y2, Y1, Y1
