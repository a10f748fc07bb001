//go:build amd64 && !noasm

#include "textflag.h"

// Q4F and Q4N for CPUs with AVX-512 VNNI: the nibbles (unsigned) meet the
// activation group (signed) in one VPDPBUSD, which adds each lane's four
// products straight into its int32 sum, so there is nothing to widen. The
// sums are the same integers, so the results are the same bits (canon.go).
#define Q4F(x, N, S) \
	VPBROADCASTD x, Y14 \
	VPXOR        S, S, S \
	VPDPBUSD     Y14, N, S

#define Q4N(x, N, S) \
	VPBROADCASTD x, Y14 \
	VPDPBUSD     Y14, N, S

#define Q4WIDEN(S)
#define Q4WIDENM(S)

#define Q4X8NAME ·dotQ4X8VNNI
#include "q4x8_amd64.h"
