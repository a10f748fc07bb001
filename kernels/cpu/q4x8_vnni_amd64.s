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

// Q4PFD: 32 blocks ahead (4.5 KB) where the AVX2 kernel asks for 4, as
// the VNNI Q8_0 kernel does. On a Zen 5 host, one thread, 60 MB of ×8
// groups: 1 row 2.15 ms against 2.70-2.86, 2 rows 2.33-2.63 against
// 2.71-3.01, 4 rows 3.44-3.81 against 3.98-4.34.
#define Q4PFD 4608

#define Q4X8NAME ·dotQ4X8VNNI
#include "q4x8_amd64.h"
