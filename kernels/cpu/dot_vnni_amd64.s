//go:build amd64 && !noasm

#include "textflag.h"

// The tiled AVX-512 VNNI kernels behind dot_vnni_amd64.go; tile.go
// describes the activation layout (u = x+128, eight rows interleaved by
// 4-byte group). Registers of the 4×8 kernels:
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

// TSCALES runs TSCALE for the four weight rows.
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
	MOVQ         128(SP), SI \
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

// Q8GROUPS runs a block's eight 4-byte groups through EVEN and ODD (the
// group macros of a kernel) for four Q8_0 weight rows in place: a block's
// values start after its 2-byte scale.
#define Q8GROUPS(EVEN, ODD) \
	EVEN(0, 2(SI), 2(SI)(R8*1), 2(SI)(R8*2), 2(SI)(R9*1)) \
	ODD(32, 6(SI), 6(SI)(R8*1), 6(SI)(R8*2), 6(SI)(R9*1)) \
	EVEN(64, 10(SI), 10(SI)(R8*1), 10(SI)(R8*2), 10(SI)(R9*1)) \
	ODD(96, 14(SI), 14(SI)(R8*1), 14(SI)(R8*2), 14(SI)(R9*1)) \
	EVEN(128, 18(SI), 18(SI)(R8*1), 18(SI)(R8*2), 18(SI)(R9*1)) \
	ODD(160, 22(SI), 22(SI)(R8*1), 22(SI)(R8*2), 22(SI)(R9*1)) \
	EVEN(192, 26(SI), 26(SI)(R8*1), 26(SI)(R8*2), 26(SI)(R9*1)) \
	ODD(224, 30(SI), 30(SI)(R8*1), 30(SI)(R8*2), 30(SI)(R9*1))

// Q4GROUPS is Q8GROUPS for Q4_0 rows unpacked into the frame, 32 bytes a
// row.
#define Q4GROUPS(EVEN, ODD) \
	EVEN(0, (SP), 32(SP), 64(SP), 96(SP)) \
	ODD(32, 4(SP), 36(SP), 68(SP), 100(SP)) \
	EVEN(64, 8(SP), 40(SP), 72(SP), 104(SP)) \
	ODD(96, 12(SP), 44(SP), 76(SP), 108(SP)) \
	EVEN(128, 16(SP), 48(SP), 80(SP), 112(SP)) \
	ODD(160, 20(SP), 52(SP), 84(SP), 116(SP)) \
	EVEN(192, 24(SP), 56(SP), 88(SP), 120(SP)) \
	ODD(224, 28(SP), 60(SP), 92(SP), 124(SP))

// A kernel call runs ntiles tiles: four weight rows after four, their
// results four columns after four. The frame holds the current tile's
// weight rows at 128(SP), its outputs at 136(SP) and the tiles left at
// 144(SP) (the frame's first 128 bytes are the Q4_0 kernels' unpacked
// blocks). One call per chunk of weight rows, rather than per tile, saves
// MatMul a Go call, its bounds checks and slicing for every four rows.

// TTILES sets up the tile loop.
#define TTILES \
	MOVQ w+0(FP), AX \
	MOVQ AX, 128(SP) \
	MOVQ out+40(FP), AX \
	MOVQ AX, 136(SP) \
	MOVQ ntiles+64(FP), AX \
	MOVQ AX, 144(SP)

// TNEXTTILE moves to the next tile and loops to label while tiles are
// left.
#define TNEXTTILE(label) \
	MOVQ stride+8(FP), AX \
	SHLQ $2, AX \
	ADDQ AX, 128(SP) \
	ADDQ $16, 136(SP) \
	DECQ 144(SP) \
	JNZ  label

// TOUT loads the storing kernels' output arguments for TSTORE8.
#define TOUT \
	MOVQ 136(SP), AX \
	MOVQ ostride+48(FP), BX \
	SHLQ $2, BX \
	MOVQ nrows+56(FP), CX

// T16SETUP loads the 4×16 kernels' arguments and clears their sums.
#define T16SETUP \
	MOVQ         128(SP), SI \
	MOVQ         stride+8(FP), R8 \
	LEAQ         (R8)(R8*2), R9 \
	MOVQ         xp+16(FP), DI \
	MOVQ         xd+24(FP), DX \
	MOVQ         nb+32(FP), CX \
	MOVQ         CX, R12 \
	SHLQ         $8, R12 \
	MOVQ         CX, R11 \
	SHLQ         $5, R11 \
	VPXOR        Y0, Y0, Y0 \
	VPXOR        Y1, Y1, Y1 \
	VPXOR        Y2, Y2, Y2 \
	VPXOR        Y3, Y3, Y3 \
	VPXOR        Y4, Y4, Y4 \
	VPXOR        Y5, Y5, Y5 \
	VPXOR        Y6, Y6, Y6 \
	VPXOR        Y7, Y7, Y7 \
	VPXORD       Y16, Y16, Y16 \
	VPXORD       Y17, Y17, Y17 \
	VPXORD       Y18, Y18, Y18 \
	VPXORD       Y19, Y19, Y19 \
	VPXORD       Y26, Y26, Y26 \
	VPXORD       Y27, Y27, Y27 \
	VPXORD       Y28, Y28, Y28 \
	VPXORD       Y29, Y29, Y29 \
	MOVL         $0x80808080, AX \
	VPBROADCASTD AX, Y15

// Q4NIBS writes the Q4_0 block at q (16 bytes of nibble pairs) as its 32
// nibbles (0-15, the values plus 8), one a byte, at dst: low nibbles are
// elements 0-15, high ones 16-31. M holds bytes of 0x0F.
#define Q4NIBS(q, dst, M) \
	VMOVDQU     q, X12 \
	VPSRLW      $4, X12, X13 \
	VINSERTI128 $1, X13, Y12, Y12 \
	VPANDD      M, Y12, Y12 \
	VMOVDQU     Y12, dst

// Q4NIBS4 unpacks the four weight rows' current blocks into the frame.
#define Q4NIBS4(M) \
	Q4NIBS(2(SI), (SP), M) \
	Q4NIBS(2(SI)(R8*1), 32(SP), M) \
	Q4NIBS(2(SI)(R8*2), 64(SP), M) \
	Q4NIBS(2(SI)(R9*1), 96(SP), M)

// Q4MASK loads bytes of 0x0F into M.
#define Q4MASK(M) \
	MOVL         $0x0f0f0f0f, AX \
	VPBROADCASTD AX, M

// The Q4_0 kernels read the signed tile layout: the nibbles are the
// unsigned operand (broadcast) and the activations the signed one, and the
// block's corrections 8·Σx (one per activation row, the same for every
// weight row) come from xc instead of TCORR.

// TSGROUP is TGROUP with the operands' roles swapped.
#define TSGROUP(xo, a0, a1, a2, a3, A0, A1, A2, A3) \
	VMOVDQU      xo(DI), Y12 \
	VPBROADCASTD a0, Y13 \
	VPDPBUSD     Y12, Y13, A0 \
	VPBROADCASTD a1, Y14 \
	VPDPBUSD     Y12, Y14, A1 \
	VPBROADCASTD a2, Y13 \
	VPDPBUSD     Y12, Y13, A2 \
	VPBROADCASTD a3, Y14 \
	VPDPBUSD     Y12, Y14, A3

#define TSEVEN(xo, a0, a1, a2, a3) TSGROUP(xo, a0, a1, a2, a3, Y0, Y1, Y2, Y3)
#define TSODD(xo, a0, a1, a2, a3) TSGROUP(xo, a0, a1, a2, a3, Y22, Y23, Y24, Y25)

// TSCALESC is TSCALES with one correction C for every weight row.
#define TSCALESC(C) \
	VMOVUPS (DX), Y12 \
	TSCALE(Y0, Y22, C, Y8, (SI)) \
	TSCALE(Y1, Y23, C, Y9, (SI)(R8*1)) \
	TSCALE(Y2, Y24, C, Y10, (SI)(R8*2)) \
	TSCALE(Y3, Y25, C, Y11, (SI)(R9*1))

// TNEXT moves to the next block (rb bytes a weight block) and loops to
// label while blocks are left.
#define TNEXT(rb, label) \
	ADDQ rb, SI \
	ADDQ $256, DI \
	ADDQ $32, DX \
	DECQ CX \
	JNZ  label


// The kernels store their results straight into the output matrix, which
// saves MatMul a Go loop scattering 32 floats per call. They take out
// (activation row 0, weight row 0 of the tile), ostride (floats between
// output rows) and nrows (activation rows to store; the tile's padding
// rows are not stored).

// TSTORE8 stores the 4×8 results in Y8-Y11 (weight rows 0-3, lane l =
// activation row l) as rows of four floats at AX, BX bytes apart, until CX
// rows are stored (then it jumps to done). Y0-Y7 are scratch.
#define TSTORE8(done) \
	VUNPCKLPS    Y9, Y8, Y0 \
	VUNPCKHPS    Y9, Y8, Y1 \
	VUNPCKLPS    Y11, Y10, Y2 \
	VUNPCKHPS    Y11, Y10, Y3 \
	VUNPCKLPD    Y2, Y0, Y4 \
	VUNPCKHPD    Y2, Y0, Y5 \
	VUNPCKLPD    Y3, Y1, Y6 \
	VUNPCKHPD    Y3, Y1, Y7 \
	VMOVUPS      X4, (AX) \
	ADDQ         BX, AX \
	DECQ         CX \
	JZ           done \
	VMOVUPS      X5, (AX) \
	ADDQ         BX, AX \
	DECQ         CX \
	JZ           done \
	VMOVUPS      X6, (AX) \
	ADDQ         BX, AX \
	DECQ         CX \
	JZ           done \
	VMOVUPS      X7, (AX) \
	ADDQ         BX, AX \
	DECQ         CX \
	JZ           done \
	VEXTRACTF128 $1, Y4, (AX) \
	ADDQ         BX, AX \
	DECQ         CX \
	JZ           done \
	VEXTRACTF128 $1, Y5, (AX) \
	ADDQ         BX, AX \
	DECQ         CX \
	JZ           done \
	VEXTRACTF128 $1, Y6, (AX) \
	ADDQ         BX, AX \
	DECQ         CX \
	JZ           done \
	VEXTRACTF128 $1, Y7, (AX) \
	ADDQ         BX, AX \
	DECQ         CX \
	JZ           done

// func q8Tile8VNNI(w *byte, stride int, xp *byte, xd *float32, nb int, out *float32, ostride, nrows, ntiles int)
TEXT ·q8Tile8VNNI(SB), NOSPLIT, $152-72
	TTILES

q8t8tile:
	TSETUP

q8t8loop:
	TPREFETCH
	TCORR(2(SI), 2(SI)(R8*1), 2(SI)(R8*2), 2(SI)(R9*1))
	Q8GROUPS(TEVEN, TODD)
	TSCALES
	TNEXT($34, q8t8loop)

	TOUT
	TSTORE8(q8t8next)

q8t8next:
	TNEXTTILE(q8t8tile)
	VZEROUPPER
	RET

// func q4Tile8VNNI(w *byte, stride int, xp *byte, xd *float32, nb int, out *float32, ostride, nrows, ntiles int, xc *int32)
TEXT ·q4Tile8VNNI(SB), NOSPLIT, $152-80
	TTILES

q4t8tile:
	TSETUP
	MOVQ xc+72(FP), R11
	Q4MASK(Y16)

q4t8loop:
	TPREFETCH
	Q4NIBS4(Y16)
	Q4GROUPS(TSEVEN, TSODD)
	VMOVDQU (R11), Y4
	TSCALESC(Y4)
	ADDQ    $32, R11
	TNEXT($18, q4t8loop)

	TOUT
	TSTORE8(q4t8next)

q4t8next:
	TNEXTTILE(q4t8tile)
	VZEROUPPER
	RET

// The 4×16 kernels: two eight-row groups of activations (the second nb
// tile blocks after the first) against the same four weight rows. Each
// broadcast weight group and each block's correction then serves sixteen
// rows instead of eight, which is what batches of 16 and more are short
// of: there the tile kernel is compute-bound. Registers:
//
//	Y0-Y3   int32 sums of weight rows 0-3 for group A, lane l = row l
//	Y4-Y7   the same for group B
//	Y8-Y11  scratch for the corrections
//	Y12-Y14 scratch
//	Y15     bytes of 128
//	Y16-Y19 float32 results of weight rows 0-3, group A
//	Y20-Y23 the block's corrections 128·Σw of rows 0-3, in every lane
//	Y24-Y25 scratch
//	Y26-Y29 float32 results, group B
//	Y30-Y31 the Q4_0 unpacking constants
//
// SI, R8, R9, CX as in the 4×8 kernels; DI is group A's current block and
// DI+R12 group B's, DX group A's scales and DX+R11 group B's. With eight
// chains of accumulators (four rows × two groups) there are enough
// independent VPDPBUSDs in flight without splitting even and odd groups.

// T16CORR leaves 128·Σw of the four weight blocks at a0-a3 in every lane
// of Y20-Y23.
#define T16CORR(a0, a1, a2, a3) \
	VPXOR    Y8, Y8, Y8 \
	VPXOR    Y9, Y9, Y9 \
	VPXOR    Y10, Y10, Y10 \
	VPXOR    Y11, Y11, Y11 \
	VPDPBUSD a0, Y15, Y8 \
	VPDPBUSD a1, Y15, Y9 \
	VPDPBUSD a2, Y15, Y10 \
	VPDPBUSD a3, Y15, Y11 \
	VPHADDD  Y9, Y8, Y8 \
	VPHADDD  Y11, Y10, Y10 \
	VPHADDD  Y10, Y8, Y8 \
	VPERMQ   $0x4e, Y8, Y9 \
	VPADDD   Y9, Y8, Y8 \
	VPSHUFD  $0x00, Y8, Y20 \
	VPSHUFD  $0x55, Y8, Y21 \
	VPSHUFD  $0xaa, Y8, Y22 \
	VPSHUFD  $0xff, Y8, Y23

// T16GROUP multiplies 4-byte group xo of the four weight blocks (at
// a0-a3) by both activation groups.
#define T16GROUP(xo, a0, a1, a2, a3) \
	VMOVDQU      xo(DI), Y12 \
	VMOVDQU      xo(DI)(R12*1), Y13 \
	VPBROADCASTD a0, Y24 \
	VPDPBUSD     Y24, Y12, Y0 \
	VPDPBUSD     Y24, Y13, Y4 \
	VPBROADCASTD a1, Y25 \
	VPDPBUSD     Y25, Y12, Y1 \
	VPDPBUSD     Y25, Y13, Y5 \
	VPBROADCASTD a2, Y24 \
	VPDPBUSD     Y24, Y12, Y2 \
	VPDPBUSD     Y24, Y13, Y6 \
	VPBROADCASTD a3, Y25 \
	VPDPBUSD     Y25, Y12, Y3 \
	VPDPBUSD     Y25, Y13, Y7

// T16SCALE folds weight row j's block sums (A for group A, B for group B,
// less the corrections CA and CB) into its results FA and FB, scaled by d_w
// (the F16 at d) times each row's scale (Y12 for group A, Y13 for group B).
#define T16SCALE(A, B, CA, CB, FA, FB, d) \
	VPBROADCASTW d, X14 \
	VCVTPH2PS    X14, Y14 \
	VMULPS       Y12, Y14, Y24 \
	VMULPS       Y13, Y14, Y25 \
	VPSUBD       CA, A, A \
	VCVTDQ2PS    A, A \
	VFMADD231PS  Y24, A, FA \
	VPXOR        A, A, A \
	VPSUBD       CB, B, B \
	VCVTDQ2PS    B, B \
	VFMADD231PS  Y25, B, FB \
	VPXOR        B, B, B

// T16SCALES runs T16SCALE for the four weight rows.
#define T16SCALES \
	VMOVUPS (DX), Y12 \
	VMOVUPS (DX)(R11*1), Y13 \
	T16SCALE(Y0, Y4, Y20, Y20, Y16, Y26, (SI)) \
	T16SCALE(Y1, Y5, Y21, Y21, Y17, Y27, (SI)(R8*1)) \
	T16SCALE(Y2, Y6, Y22, Y22, Y18, Y28, (SI)(R8*2)) \
	T16SCALE(Y3, Y7, Y23, Y23, Y19, Y29, (SI)(R9*1))

// T16SGROUP is T16GROUP with the operands' roles swapped, for the signed
// layout.
#define T16SGROUP(xo, a0, a1, a2, a3) \
	VMOVDQU      xo(DI), Y12 \
	VMOVDQU      xo(DI)(R12*1), Y13 \
	VPBROADCASTD a0, Y24 \
	VPDPBUSD     Y12, Y24, Y0 \
	VPDPBUSD     Y13, Y24, Y4 \
	VPBROADCASTD a1, Y25 \
	VPDPBUSD     Y12, Y25, Y1 \
	VPDPBUSD     Y13, Y25, Y5 \
	VPBROADCASTD a2, Y24 \
	VPDPBUSD     Y12, Y24, Y2 \
	VPDPBUSD     Y13, Y24, Y6 \
	VPBROADCASTD a3, Y25 \
	VPDPBUSD     Y12, Y25, Y3 \
	VPDPBUSD     Y13, Y25, Y7

// T16SCALESC is T16SCALES with one correction a group, from xc (R13) and
// group B's at R13+R11, for every weight row.
#define T16SCALESC \
	VMOVUPS (DX), Y12 \
	VMOVUPS (DX)(R11*1), Y13 \
	VMOVDQU32 (R13), Y20 \
	VMOVDQU32 (R13)(R11*1), Y21 \
	T16SCALE(Y0, Y4, Y20, Y21, Y16, Y26, (SI)) \
	T16SCALE(Y1, Y5, Y20, Y21, Y17, Y27, (SI)(R8*1)) \
	T16SCALE(Y2, Y6, Y20, Y21, Y18, Y28, (SI)(R8*2)) \
	T16SCALE(Y3, Y7, Y20, Y21, Y19, Y29, (SI)(R9*1))

// T16STORE stores both groups' results (group B's rows after group A's).
#define T16STORE(done) \
	TOUT \
	VMOVAPS Y16, Y8 \
	VMOVAPS Y17, Y9 \
	VMOVAPS Y18, Y10 \
	VMOVAPS Y19, Y11 \
	TSTORE8(done) \
	VMOVAPS Y26, Y8 \
	VMOVAPS Y27, Y9 \
	VMOVAPS Y28, Y10 \
	VMOVAPS Y29, Y11 \
	TSTORE8(done)

// func q8Tile16VNNI(w *byte, stride int, xp *byte, xd *float32, nb int, out *float32, ostride, nrows, ntiles int)
TEXT ·q8Tile16VNNI(SB), NOSPLIT, $152-72
	TTILES

q8t16tile:
	T16SETUP

q8t16loop:
	TPREFETCH
	T16CORR(2(SI), 2(SI)(R8*1), 2(SI)(R8*2), 2(SI)(R9*1))
	Q8GROUPS(T16GROUP, T16GROUP)
	T16SCALES
	TNEXT($34, q8t16loop)

	T16STORE(q8t16next)

q8t16next:
	TNEXTTILE(q8t16tile)
	VZEROUPPER
	RET

// func q4Tile16VNNI(w *byte, stride int, xp *byte, xd *float32, nb int, out *float32, ostride, nrows, ntiles int, xc *int32)
TEXT ·q4Tile16VNNI(SB), NOSPLIT, $152-80
	TTILES

q4t16tile:
	T16SETUP
	MOVQ xc+72(FP), R13
	Q4MASK(Y30)

q4t16loop:
	TPREFETCH
	Q4NIBS4(Y30)
	Q4GROUPS(T16SGROUP, T16SGROUP)
	T16SCALESC
	ADDQ $32, R13
	TNEXT($18, q4t16loop)

	T16STORE(q4t16next)

q4t16next:
	TNEXTTILE(q4t16tile)
	VZEROUPPER
	RET
