//go:build amd64 && !noasm

#include "textflag.h"

// The AVX2 tile kernels behind tile_avx2_amd64.go: one 4×8 tile (four
// weight rows against the eight rows of an activation group) per call, in
// the signed tile layout (tile.go: row l's four int8 of 4-byte group g at
// 32g+4l of each block's 256 bytes). A lane of an accumulator is an
// activation row, as in the VNNI kernels, so each row's block sum is formed
// exactly without horizontal adds, then scaled and fused into the row's
// result once per block (canon.go).
//
// Without VPDPBUSD, a 4-byte group is VPMADDUBSW (unsigned × signed bytes
// to int16 pairs) and VPMADDWD by ones (pairs to int32). Q8_0 weights are
// signed: their absolute values are the unsigned operand and their signs
// move onto the activations (VPSIGNB), so a pair is at most 2·128·127.
// Q4_0 nibbles (0-15, the value plus 8) are unsigned as they are; their
// pairs (at most 2·15·127) are summed over a block's eight groups in int16
// before widening, and the offset of 8 is taken off through xc.
//
// Registers: Y0-Y3 the four weight rows' block sums, Y8-Y11 their results
// (lane l = activation row l), Y4 the group's activations, Y15 int16 ones,
// the rest scratch. SI is weight row 0's current block, rows R8 bytes
// apart (R9 = 3·R8); DI the activations' current block, DX its eight
// scales, CX the blocks left. The frame holds the four rows' current
// blocks prepared: |w| for Q8_0, the nibbles for Q4_0, 32 bytes a row.

// T2SETUP loads the arguments and clears the results.
#define T2SETUP \
	MOVQ     w+0(FP), SI \
	MOVQ     stride+8(FP), R8 \
	LEAQ     (R8)(R8*2), R9 \
	MOVQ     xp+16(FP), DI \
	MOVQ     xd+24(FP), DX \
	MOVQ     nb+32(FP), CX \
	VXORPS   Y8, Y8, Y8 \
	VXORPS   Y9, Y9, Y9 \
	VXORPS   Y10, Y10, Y10 \
	VXORPS   Y11, Y11, Y11 \
	VPCMPEQW Y15, Y15, Y15 \
	VPSRLW   $15, Y15, Y15

// T2ABS stores |w| of the Q8_0 block at q in the frame at dst.
#define T2ABS(q, dst) \
	VMOVDQU q, Y12 \
	VPABSB  Y12, Y12 \
	VMOVDQU Y12, dst

// T2Q8 adds 4-byte group g (at xo) of weight row j (its signed bytes at w,
// absolute ones at a) times the eight rows to A.
#define T2Q8(w, a, A) \
	VPBROADCASTD w, Y5 \
	VPBROADCASTD a, Y6 \
	VPSIGNB      Y5, Y4, Y7 \
	VPMADDUBSW   Y7, Y6, Y7 \
	VPMADDWD     Y15, Y7, Y7 \
	VPADDD       Y7, A, A

#define T2Q8GROUP(g) \
	VMOVDQU g*32(DI), Y4 \
	T2Q8(2+g*4(SI), g*4(SP), Y0) \
	T2Q8(2+g*4(SI)(R8*1), 32+g*4(SP), Y1) \
	T2Q8(2+g*4(SI)(R8*2), 64+g*4(SP), Y2) \
	T2Q8(2+g*4(SI)(R9*1), 96+g*4(SP), Y3)

// T2SCALE fuses row j's block sum A (int32), times d_w (the F16 at d)
// times the rows' scales (Y12), into F.
#define T2SCALE(A, F, d) \
	VCVTDQ2PS    A, A \
	VPBROADCASTW d, X13 \
	VCVTPH2PS    X13, Y13 \
	VMULPS       Y12, Y13, Y13 \
	VFMADD231PS  Y13, A, F

#define T2SCALES \
	VMOVUPS (DX), Y12 \
	T2SCALE(Y0, Y8, (SI)) \
	T2SCALE(Y1, Y9, (SI)(R8*1)) \
	T2SCALE(Y2, Y10, (SI)(R8*2)) \
	T2SCALE(Y3, Y11, (SI)(R9*1))

#define T2STORE \
	MOVQ    o+40(FP), AX \
	VMOVUPS Y8, (AX) \
	VMOVUPS Y9, 32(AX) \
	VMOVUPS Y10, 64(AX) \
	VMOVUPS Y11, 96(AX) \
	VZEROUPPER

// func q8Tile4x8AVX(w *byte, stride int, xp *byte, xd *float32, nb int, o *[32]float32)
// o[8j+l] = weight row j's dot product with activation row l; nb ≥ 1.
TEXT ·q8Tile4x8AVX(SB), NOSPLIT, $128-48
	T2SETUP

q8t2block:
	T2ABS(2(SI), (SP))
	T2ABS(2(SI)(R8*1), 32(SP))
	T2ABS(2(SI)(R8*2), 64(SP))
	T2ABS(2(SI)(R9*1), 96(SP))
	VPXOR Y0, Y0, Y0
	VPXOR Y1, Y1, Y1
	VPXOR Y2, Y2, Y2
	VPXOR Y3, Y3, Y3
	T2Q8GROUP(0)
	T2Q8GROUP(1)
	T2Q8GROUP(2)
	T2Q8GROUP(3)
	T2Q8GROUP(4)
	T2Q8GROUP(5)
	T2Q8GROUP(6)
	T2Q8GROUP(7)
	T2SCALES
	ADDQ $34, SI
	ADDQ $256, DI
	ADDQ $32, DX
	DECQ CX
	JNZ  q8t2block

	T2STORE
	RET

// T2NIBS stores the 32 nibbles of the Q4_0 block at q (low nibbles are
// elements 0-15) in the frame at dst; Y14 holds bytes of 0x0F.
#define T2NIBS(q, dst) \
	VMOVDQU     q, X12 \
	VPSRLW      $4, X12, X13 \
	VINSERTI128 $1, X13, Y12, Y12 \
	VPAND       Y14, Y12, Y12 \
	VMOVDQU     Y12, dst

// T2Q4 adds group g's int16 pair sums of weight row j (nibbles at n) to A.
#define T2Q4(n, A) \
	VPBROADCASTD n, Y5 \
	VPMADDUBSW   Y4, Y5, Y5 \
	VPADDW       Y5, A, A

#define T2Q4GROUP(g) \
	VMOVDQU g*32(DI), Y4 \
	T2Q4(g*4(SP), Y0) \
	T2Q4(32+g*4(SP), Y1) \
	T2Q4(64+g*4(SP), Y2) \
	T2Q4(96+g*4(SP), Y3)

// T2WIDEN widens row j's int16 sums A to int32 and takes off the rows'
// corrections (Y6).
#define T2WIDEN(A) \
	VPMADDWD Y15, A, A \
	VPSUBD   Y6, A, A

// func q4Tile4x8AVX(w *byte, stride int, xp *byte, xd *float32, nb int, o *[32]float32, xc *int32)
// q8Tile4x8AVX for Q4_0 weight rows; xc holds the activation rows' 8·Σx
// per block, eight a block.
TEXT ·q4Tile4x8AVX(SB), NOSPLIT, $128-56
	T2SETUP
	MOVQ         xc+48(FP), BX
	MOVL         $0x0f0f0f0f, AX
	VMOVD        AX, X14
	VPBROADCASTD X14, Y14

q4t2block:
	T2NIBS(2(SI), (SP))
	T2NIBS(2(SI)(R8*1), 32(SP))
	T2NIBS(2(SI)(R8*2), 64(SP))
	T2NIBS(2(SI)(R9*1), 96(SP))
	VPXOR Y0, Y0, Y0
	VPXOR Y1, Y1, Y1
	VPXOR Y2, Y2, Y2
	VPXOR Y3, Y3, Y3
	T2Q4GROUP(0)
	T2Q4GROUP(1)
	T2Q4GROUP(2)
	T2Q4GROUP(3)
	T2Q4GROUP(4)
	T2Q4GROUP(5)
	T2Q4GROUP(6)
	T2Q4GROUP(7)
	VMOVDQU (BX), Y6
	T2WIDEN(Y0)
	T2WIDEN(Y1)
	T2WIDEN(Y2)
	T2WIDEN(Y3)
	T2SCALES
	ADDQ $18, SI
	ADDQ $256, DI
	ADDQ $32, DX
	ADDQ $32, BX
	DECQ CX
	JNZ  q4t2block

	T2STORE
	RET
