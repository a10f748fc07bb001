//go:build amd64 && !noasm

#include "textflag.h"

// The tiled AVX-512 VNNI kernels behind dot_vnni_amd64.go; tile.go
// describes the activation layout (u = x+128, eight rows interleaved by
// 4-byte group). Registers:
//
//	Y0-Y3   int32 Σu·w of weight rows 0-3 for the current block, lane l = row l
//	Y4-Y7   the blocks' corrections 128·Σw
//	Y8-Y11  float32 results of weight rows 0-3
//	Y12-Y14 scratch
//	Y15     bytes of 128
//	Y18-Y21 VPERMD indexes 0, 1, 2, 3 (broadcast one lane)
//	Y22-Y25 like Y0-Y3, for the odd 4-byte groups
//
// SI is weight row 0, rows R8 bytes apart (R9 = 3·R8); DI the tile's
// current block; DX its eight row scales; CX the blocks left.

// TCORR leaves 128·Σw of the four weight blocks (32 signed bytes at a0-a3)
// in every lane of Y5, Y6, Y7 and Y4 (rows 0-3): one VPDPBUSD each against
// bytes of 128, then horizontal adds fold the four vectors into one, whose
// lanes VPERMD broadcasts. Once per block, it serves all eight rows.
#define TCORR(a0, a1, a2, a3) \
	VPXOR        Y4, Y4, Y4 \
	VPXOR        Y5, Y5, Y5 \
	VPXOR        Y6, Y6, Y6 \
	VPXOR        Y7, Y7, Y7 \
	VPDPBUSD     a0, Y15, Y4 \
	VPDPBUSD     a1, Y15, Y5 \
	VPDPBUSD     a2, Y15, Y6 \
	VPDPBUSD     a3, Y15, Y7 \
	VPHADDD      Y5, Y4, Y4 \
	VPHADDD      Y7, Y6, Y6 \
	VPHADDD      Y6, Y4, Y4 \
	VEXTRACTI128 $1, Y4, X5 \
	VPADDD       X5, X4, X4 \
	VPERMD       Y4, Y18, Y5 \
	VPERMD       Y4, Y19, Y6 \
	VPERMD       Y4, Y20, Y7 \
	VPERMD       Y4, Y21, Y4

// TGROUP multiplies 4-byte group g of the four weight blocks (at a0-a3,
// broadcast) by the eight rows' u of that group (at xo), adding to A0-A3.
// Even groups go to Y0-Y3, odd ones to Y22-Y25: the two sets of chains
// hide VPDPBUSD's latency.
#define TGROUP(xo, a0, a1, a2, a3, A0, A1, A2, A3) \
	VMOVDQU      xo(DI), Y12 \
	VPBROADCASTD a0, Y13 \
	VPDPBUSD     Y13, Y12, A0 \
	VPBROADCASTD a1, Y14 \
	VPDPBUSD     Y14, Y12, A1 \
	VPBROADCASTD a2, Y13 \
	VPDPBUSD     Y13, Y12, A2 \
	VPBROADCASTD a3, Y14 \
	VPDPBUSD     Y14, Y12, A3

#define TEVEN(xo, a0, a1, a2, a3) TGROUP(xo, a0, a1, a2, a3, Y0, Y1, Y2, Y3)
#define TODD(xo, a0, a1, a2, a3) TGROUP(xo, a0, a1, a2, a3, Y22, Y23, Y24, Y25)

// TSCALE adds weight row j's block sums P+Q less its correction C, times
// d_w (the F16 at d) times the rows' scales (Y12), to its result F, and
// clears P and Q for the next block.
#define TSCALE(P, Q, C, F, d) \
	VPADDD       Q, P, P \
	VPSUBD       C, P, P \
	VCVTDQ2PS    P, P \
	VPBROADCASTW d, X13 \
	VCVTPH2PS    X13, Y13 \
	VMULPS       Y12, Y13, Y13 \
	VFMADD231PS  Y13, P, F \
	VPXOR        P, P, P \
	VPXORD       Q, Q, Q

#define TSCALES \
	VMOVUPS (DX), Y12 \
	TSCALE(Y0, Y22, Y5, Y8, (SI)) \
	TSCALE(Y1, Y23, Y6, Y9, (SI)(R8*1)) \
	TSCALE(Y2, Y24, Y7, Y10, (SI)(R8*2)) \
	TSCALE(Y3, Y25, Y4, Y11, (SI)(R9*1))

// TPREFETCH asks for the next tile's four weight rows (the rows after
// these four, when the caller walks a chunk of rows) at this block's
// offset, so they arrive while this tile computes: the weights stream from
// memory once per batch, and the tile is compute-bound enough that the
// hardware prefetcher alone does not keep it fed.
#define TPREFETCH \
	LEAQ       (SI)(R8*4), R10 \
	PREFETCHT0 (R10) \
	PREFETCHT0 (R10)(R8*1) \
	PREFETCHT0 (R10)(R8*2) \
	PREFETCHT0 (R10)(R9*1)

#define TSETUP \
	MOVQ         w+0(FP), SI \
	MOVQ         stride+8(FP), R8 \
	LEAQ         (R8)(R8*2), R9 \
	MOVQ         xp+16(FP), DI \
	MOVQ         xd+24(FP), DX \
	MOVQ         nb+32(FP), CX \
	VPXOR        Y0, Y0, Y0 \
	VPXOR        Y1, Y1, Y1 \
	VPXOR        Y2, Y2, Y2 \
	VPXOR        Y3, Y3, Y3 \
	VPXORD       Y22, Y22, Y22 \
	VPXORD       Y23, Y23, Y23 \
	VPXORD       Y24, Y24, Y24 \
	VPXORD       Y25, Y25, Y25 \
	VXORPS       Y8, Y8, Y8 \
	VXORPS       Y9, Y9, Y9 \
	VXORPS       Y10, Y10, Y10 \
	VXORPS       Y11, Y11, Y11 \
	MOVL         $0x80808080, AX \
	VPBROADCASTD AX, Y15 \
	XORL         AX, AX \
	VPBROADCASTD AX, Y18 \
	INCL         AX \
	VPBROADCASTD AX, Y19 \
	INCL         AX \
	VPBROADCASTD AX, Y20 \
	INCL         AX \
	VPBROADCASTD AX, Y21

#define TSTORE \
	MOVQ    out+40(FP), AX \
	VMOVUPS Y8, (AX) \
	VMOVUPS Y9, 32(AX) \
	VMOVUPS Y10, 64(AX) \
	VMOVUPS Y11, 96(AX) \
	VZEROUPPER

// func q8TileVNNI(w *byte, stride int, xp *byte, xd *float32, nb int, out *[32]float32)
TEXT ·q8TileVNNI(SB), NOSPLIT, $0-48
	TSETUP

q8tloop:
	TPREFETCH
	TCORR(2(SI), 2(SI)(R8*1), 2(SI)(R8*2), 2(SI)(R9*1))
	TEVEN(0, 2(SI), 2(SI)(R8*1), 2(SI)(R8*2), 2(SI)(R9*1))
	TODD(32, 6(SI), 6(SI)(R8*1), 6(SI)(R8*2), 6(SI)(R9*1))
	TEVEN(64, 10(SI), 10(SI)(R8*1), 10(SI)(R8*2), 10(SI)(R9*1))
	TODD(96, 14(SI), 14(SI)(R8*1), 14(SI)(R8*2), 14(SI)(R9*1))
	TEVEN(128, 18(SI), 18(SI)(R8*1), 18(SI)(R8*2), 18(SI)(R9*1))
	TODD(160, 22(SI), 22(SI)(R8*1), 22(SI)(R8*2), 22(SI)(R9*1))
	TEVEN(192, 26(SI), 26(SI)(R8*1), 26(SI)(R8*2), 26(SI)(R9*1))
	TODD(224, 30(SI), 30(SI)(R8*1), 30(SI)(R8*2), 30(SI)(R9*1))
	TSCALES
	ADDQ $34, SI
	ADDQ $256, DI
	ADDQ $32, DX
	DECQ CX
	JNZ  q8tloop

	TSTORE
	RET

// Q4UNPACK writes the Q4_0 block at q (16 bytes of nibble pairs) as 32
// signed bytes (nibble − 8) at dst: low nibbles are elements 0-15, high
// ones 16-31. Y16 holds bytes of 0x0F, Y17 bytes of 8.
#define Q4UNPACK(q, dst) \
	VMOVDQU     q, X12 \
	VPSRLW      $4, X12, X13 \
	VINSERTI128 $1, X13, Y12, Y12 \
	VPANDD      Y16, Y12, Y12 \
	VPSUBB      Y17, Y12, Y12 \
	VMOVDQU     Y12, dst

// func q4TileVNNI(w *byte, stride int, xp *byte, xd *float32, nb int, out *[32]float32)
// The four rows' blocks are unpacked into the frame (32 bytes a row), from
// where they are read like Q8_0 blocks.
TEXT ·q4TileVNNI(SB), NOSPLIT, $128-48
	TSETUP
	MOVL         $0x0f0f0f0f, AX
	VPBROADCASTD AX, Y16
	MOVL         $0x08080808, AX
	VPBROADCASTD AX, Y17

q4tloop:
	TPREFETCH
	Q4UNPACK(2(SI), (SP))
	Q4UNPACK(2(SI)(R8*1), 32(SP))
	Q4UNPACK(2(SI)(R8*2), 64(SP))
	Q4UNPACK(2(SI)(R9*1), 96(SP))
	TCORR((SP), 32(SP), 64(SP), 96(SP))
	TEVEN(0, (SP), 32(SP), 64(SP), 96(SP))
	TODD(32, 4(SP), 36(SP), 68(SP), 100(SP))
	TEVEN(64, 8(SP), 40(SP), 72(SP), 104(SP))
	TODD(96, 12(SP), 44(SP), 76(SP), 108(SP))
	TEVEN(128, 16(SP), 48(SP), 80(SP), 112(SP))
	TODD(160, 20(SP), 52(SP), 84(SP), 116(SP))
	TEVEN(192, 24(SP), 56(SP), 88(SP), 120(SP))
	TODD(224, 28(SP), 60(SP), 92(SP), 124(SP))
	TSCALES
	ADDQ $18, SI
	ADDQ $256, DI
	ADDQ $32, DX
	DECQ CX
	JNZ  q4tloop

	TSTORE
	RET
