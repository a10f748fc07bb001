// One 4-byte group of a Q8_0 block against eight weight rows at once, for
// the kernels whose lanes are weight rows (dot_amd64.s's transposed ones,
// q8x8_amd64.s's): Y12 holds group g of the eight rows (lane i = row i),
// Y13 their absolute values, Y15 int16 ones; Y14 is scratch. The
// activation's group at x is broadcast to all lanes and its sign taken
// from each row (VPMADDUBSW multiplies unsigned by signed bytes; adjacent
// products are at most 2·128·127, so no int16 saturation). Q8GFIRST sets
// the block sums S to that group's products, Q8GNEXT adds them.

#define Q8GFIRST(x, S) \
	VPBROADCASTD x, Y14 \
	VPSIGNB      Y12, Y14, Y14 \
	VPMADDUBSW   Y14, Y13, Y14 \
	VPMADDWD     Y15, Y14, S

#define Q8GNEXT(x, S) \
	VPBROADCASTD x, Y14 \
	VPSIGNB      Y12, Y14, Y14 \
	VPMADDUBSW   Y14, Y13, Y14 \
	VPMADDWD     Y15, Y14, Y14 \
	VPADDD       Y14, S, S
