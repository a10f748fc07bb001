// Q8GFIRST and Q8GNEXT (q8group_amd64.h) for CPUs with AVX-512 VNNI: the
// activation's group, its sign taken from each row as there, meets the
// rows' absolute values in one VPDPBUSD, which multiplies unsigned by
// signed bytes and adds each lane's four products into its int32 sum with
// no intermediate int16 (so nothing saturates). The sums are the same
// integers, so the results are the same bits (canon.go).

#define Q8GFIRST(x, S) \
	VPBROADCASTD x, Y14 \
	VPSIGNB      Y12, Y14, Y14 \
	VPXOR        S, S, S \
	VPDPBUSD     Y14, Y13, S

#define Q8GNEXT(x, S) \
	VPBROADCASTD x, Y14 \
	VPSIGNB      Y12, Y14, Y14 \
	VPDPBUSD     Y14, Y13, S
