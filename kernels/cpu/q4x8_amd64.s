//go:build amd64 && !noasm

#include "textflag.h"

// Q4F sets the int16 sums S to the nibbles N times the activation group at
// x; Q4N adds it. Q4WIDEN and Q4WIDENM add the int16 pairs into int32.
#define Q4F(x, N, S) \
	VPBROADCASTD x, Y14 \
	VPMADDUBSW   Y14, N, S

#define Q4N(x, N, S) \
	VPBROADCASTD x, Y14 \
	VPMADDUBSW   Y14, N, Y14 \
	VPADDW       Y14, S, S

#define Q4WIDEN(S) \
	VPMADDWD Y4, S, S

#define Q4WIDENM(S) \
	VPMADDWD 128(SP), S, S

#define Q4X8NAME ·dotQ4X8AVX
#include "q4x8_amd64.h"
