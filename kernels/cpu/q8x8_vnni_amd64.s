//go:build amd64 && !noasm

#include "textflag.h"

// The ×8 Q8_0 kernel for AVX-512 VNNI with the activations unsigned: each
// activation row arrives as u = x+128 (bytes; x is never −128), so its
// broadcast group is VPDPBUSD's unsigned operand as it is and the weights
// its signed one, with no VPSIGNB per row and group. VPDPBUSD then sums
// Σu·w = Σx·w + 128·Σw into each lane; 128·Σw of the block's eight rows is
// formed once a block (one more VPDPBUSD a group, against bytes of 128,
// into Y13) and taken off each row's sums before they are scaled. The
// integers, and so the results, are those of the other ×8 kernels.

#define X8INIT \
	MOVL         $0x80808080, R10 \
	MOVQ         R10, X15 \
	VPBROADCASTD X15, Y15

#define X8BLK \
	VPXOR Y13, Y13, Y13

#define X8W(g) \
	VMOVDQU  16+g*32(SI), Y12 \
	VPDPBUSD Y12, Y15, Y13

#define X8FIX(S) \
	VPSUBD Y13, S, S

#define Q8GFIRST(x, S) \
	VPBROADCASTD x, Y14 \
	VPXOR        S, S, S \
	VPDPBUSD     Y12, Y14, S

#define Q8GNEXT(x, S) \
	VPBROADCASTD x, Y14 \
	VPDPBUSD     Y12, Y14, S

// PFD: 32 blocks ahead (8.5 KB) where the AVX2 kernel asks for 4. On a
// Zen 4 host a row's pass over 100 MB of ×8 groups (one thread) took
// 3.1-3.3 ms with it against 3.8-4.4 with 4 blocks, and four rows 4.2-4.5
// against 6.0-6.3: with fewer instructions a block, the pass outruns the
// short prefetch and waits on memory.
#define PFD 8704

#define X8NAME ·dotQ8X8VNNI
#include "q8x8_amd64.h"
