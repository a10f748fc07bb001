//go:build amd64 && !noasm

#include "textflag.h"
#include "q8group_amd64.h"
#include "fold8_amd64.h"

// The AVX2+FMA kernels behind dot_amd64.go. Float kernels handle a multiple
// of 8 elements (the Go wrappers finish the tail); quantized kernels handle
// whole 32-value blocks.
//
// Quantized dot products follow the usual AVX2 recipe: VPMADDUBSW multiplies
// unsigned by signed bytes, so the weight is made non-negative (VPSIGNB w,w)
// and its sign moved onto the activation (VPSIGNB x,w); adjacent products
// (at most 2·128·127, so no int16 saturation) are then widened to int32 by
// VPMADDWD with ones, converted to float and scaled by d_w·d_x per block.

// HSUM4 reduces the four accumulators a, b, c, d to [Σa, Σb, Σc, Σd] in the
// low 128 bits of a; t is clobbered.
#define HSUM4(a, b, c, d, t, ax, tx) \
	VHADDPS b, a, a \
	VHADDPS d, c, c \
	VHADDPS c, a, a \
	VEXTRACTF128 $1, a, tx \
	VADDPS tx, ax, ax

// Q4CONSTS11 puts bytes of 0x0F in Y12 and the dword shift counts
// 0,0,0,0,4,4,4,4 in Y11 (QR4).
#define Q4CONSTS11 \
	MOVL         $0x0f0f0f0f, AX \
	VMOVD        AX, X12 \
	VPBROADCASTD X12, Y12 \
	MOVL         $4, AX \
	VMOVD        AX, X11 \
	VPBROADCASTD X11, X11 \
	VPXOR        Y10, Y10, Y10 \
	VINSERTI128  $1, X11, Y10, Y11

// The batch-1 kernels take eight weight rows at a time, one lane each:
// every row's block sum is formed exactly in integers and folded, like the
// x4 and tile kernels do, into its own accumulator lane once per block
// (canon.go), so a row's result does not depend on which kernel ran it.
// Weight row i of the group is at SI + i·R8 for i < 4 and R10 + (i−4)·R8
// after (R9 = 3·R8); DI is the activation block, DX its scale, Y14 the
// block's 32 int8 values, Y15 int16 ones, Y13 the eight results.

// QR8 leaves in V the eight int32 partial sums of the Q8_0 weight block at
// wq times the activation block; T is scratch.
#define QR8(wq, V, T) \
	VMOVDQU    wq, V \
	VPSIGNB    V, Y14, T \
	VPSIGNB    V, V, V \
	VPMADDUBSW T, V, V \
	VPMADDWD   Y15, V, V

// QR4 is QR8 for the Q4_0 block at wq, taking its nibbles (the values
// plus 8) unsigned as they are, so no signs move: the block's 16 bytes go
// to both halves of V, the high half shifted right by 4 (Y11 holds dword
// shift counts 0,0,0,0,4,4,4,4), and Y12 bytes of 0x0F keep the nibbles.
// The sums are then 8·Σx over the sums wanted (R8FOLD4 takes it off).
#define QR4(wq, V) \
	VBROADCASTI128 wq, V \
	VPSRLVD        Y11, V, V \
	VPAND          Y12, V, V \
	VPMADDUBSW     Y14, V, V \
	VPMADDWD       Y15, V, V

// R8FOLD4 is R8FOLD for QR4's sums, taking off the activation block's
// 8·Σx at (R14).
#define R8FOLD4 \
	R8FOLDI \
	VPBROADCASTD (R14), Y2 \
	VPSUBD       Y2, Y1, Y1 \
	VCVTDQ2PS    Y1, Y1

// R8SCALE fuses the block sums in Y1, times d_w of each row (the F16s at
// the rows' current blocks) times the activation's scale, into Y13.
#define R8SCALE \
	MOVWLZX      (SI), AX \
	VMOVD        AX, X2 \
	VPINSRW      $1, (SI)(R8*1), X2, X2 \
	VPINSRW      $2, (SI)(R8*2), X2, X2 \
	VPINSRW      $3, (SI)(R9*1), X2, X2 \
	VPINSRW      $4, (R10), X2, X2 \
	VPINSRW      $5, (R10)(R8*1), X2, X2 \
	VPINSRW      $6, (R10)(R8*2), X2, X2 \
	VPINSRW      $7, (R10)(R9*1), X2, X2 \
	VCVTPH2PS    X2, Y2 \
	VBROADCASTSS (DX), Y3 \
	VMULPS       Y3, Y2, Y2 \
	VFMADD231PS  Y2, Y1, Y13

// R8PREFETCH asks for this block of the next group's eight rows (the rows
// after these, when the caller walks a chunk), so a group's weights stream
// in while the one before computes: eight rows read side by side are eight
// streams, more than the hardware prefetcher follows well. R13 is
// clobbered; past the chunk's end it prefetches what it may.
#define R8PREFETCH \
	LEAQ       (SI)(R8*8), R13 \
	PREFETCHT0 (R13) \
	PREFETCHT0 (R13)(R8*1) \
	PREFETCHT0 (R13)(R8*2) \
	PREFETCHT0 (R13)(R9*1) \
	LEAQ       (R10)(R8*8), R13 \
	PREFETCHT0 (R13) \
	PREFETCHT0 (R13)(R8*1) \
	PREFETCHT0 (R13)(R8*2) \
	PREFETCHT0 (R13)(R9*1)

// R8GROUP starts a group of eight rows at R12.
#define R8GROUP \
	MOVQ   R12, SI \
	LEAQ   (R12)(R8*4), R10 \
	MOVQ   xq+16(FP), DI \
	MOVQ   xd+24(FP), DX \
	MOVQ   nb+32(FP), CX \
	VXORPS Y13, Y13, Y13

// R8SETUP loads the arguments common to both kernels.
#define R8SETUP \
	MOVQ     w+0(FP), R12 \
	MOVQ     rb+8(FP), R8 \
	LEAQ     (R8)(R8*2), R9 \
	MOVQ     out+40(FP), BX \
	MOVQ     ngroups+48(FP), R11 \
	VPCMPEQW Y15, Y15, Y15 \
	VPSRLW   $15, Y15, Y15

// R8NEXT stores a group's results and moves on to the next group, looping
// to label while groups are left.
#define R8NEXT(label) \
	VMOVUPS Y13, (BX) \
	ADDQ    $32, BX \
	LEAQ    (R12)(R8*8), R12 \
	DECQ    R11 \
	JNZ     label

// The transposed multi-row kernels: eight weight rows against na (1 to 4)
// activation rows, with no horizontal adds. Each block of the eight rows is
// transposed once, so that 4-byte group g of the eight rows is one vector
// (lane i = row i); each activation row's group g, broadcast to all lanes,
// then meets all eight rows in one VPSIGNB, VPMADDUBSW, VPMADDWD and
// VPADDD, and after the eight groups lane i holds row i's exact block sum,
// which is scaled and fused into the row's accumulator as canon.go
// defines. The transposition and the eight scales' conversion are shared
// by the na activation rows, and a weight block is read from memory once.
//
// Registers, for one to four activation rows: Y0-Y3 their results (lane
// i = weight row i), Y8-Y11 their block sums, Y4-Y7 the half-transposed
// rows; for five to eight: Y0-Y7 their block sums, Y8-Y11 the
// half-transposed rows, and the results in the frame (192 + 32a). Y12 and
// Y13 hold a group's weights and their absolute values, Y14 is scratch,
// Y15 int16 ones. SI is weight row 0's current block, R10 row 4's, rows R8
// bytes apart (R9 = 3·R8); DI activation row 0's current block, the rows
// R13 bytes apart (R14 = 3·R13); DX row 0's scale, the rows' scales AX
// bytes apart (BX = 3·AX); R11 row 0's correction (Q4_0, RT4ACC); CX the
// blocks left (in the frame at 176 for five rows or more, where CX and R15
// address rows 4-7); R12 the group's first row, R15 scratch. The frame
// also holds the first half of the transposition (0-127), the output
// pointer (128), for Q4_0 bytes of 0x0F (136), and the groups left (168).

// RTLOAD8 loads the Q8_0 quants of the four rows at p (R8 apart) into
// A-D.
#define RTLOAD8(p, A, B, C, D) \
	VMOVDQU 2(p), A \
	VMOVDQU 2(p)(R8*1), B \
	VMOVDQU 2(p)(R8*2), C \
	VMOVDQU 2(p)(R9*1), D

// RTQ4 spreads the nibbles of the Q4_0 block at q to 32 bytes in V (XV
// its low half), in the order of the values: the values plus 8, 0 to 15;
// XS is scratch.
#define RTQ4(q, XV, V, XS) \
	VMOVDQU     q, XV \
	VPSRLW      $4, XV, XS \
	VINSERTI128 $1, XS, V, V \
	VPAND       136(SP), V, V

// RTLOAD4 is RTLOAD8 for Q4_0 rows.
#define RTLOAD4(p, A, B, C, D, XA, XB, XC, XD, XS) \
	RTQ4(2(p), XA, A, XS) \
	RTQ4(2(p)(R8*1), XB, B, XS) \
	RTQ4(2(p)(R8*2), XC, C, XS) \
	RTQ4(2(p)(R9*1), XD, D, XS)

// RTU4 half-transposes the four rows in A-D (eight 4-byte groups each):
// the k-th of A-D becomes [group k of rows 0-3 | group k+4 of rows 0-3].
// T0-T3 are scratch.
#define RTU4(A, B, C, D, T0, T1, T2, T3) \
	VPUNPCKLDQ  B, A, T0 \
	VPUNPCKHDQ  B, A, T1 \
	VPUNPCKLDQ  D, C, T2 \
	VPUNPCKHDQ  D, C, T3 \
	VPUNPCKLQDQ T2, T0, A \
	VPUNPCKHQDQ T2, T0, B \
	VPUNPCKLQDQ T3, T1, C \
	VPUNPCKHQDQ T3, T1, D

#define RTSTOREU(A, B, C, D) \
	VMOVDQU A, 0(SP) \
	VMOVDQU B, 32(SP) \
	VMOVDQU C, 64(SP) \
	VMOVDQU D, 96(SP)

// RTW puts group g of the eight rows in Y12 and their absolute values in
// Y13, from rows 0-3's half (u, in the frame) and rows 4-7's (v): imm is
// 0x02 for g < 4 (the low halves), 0x13 for the others.
#define RTW(imm, u, v) \
	VPERM2I128 imm, u, v, Y12 \
	VPABSB     Y12, Y13

// Q8GFIRST and Q8GNEXT (q8group_amd64.h) form the block sums of a group
// in Y12 against an activation group.

// For Q4_0 the nibbles themselves (the values plus 8) are the unsigned
// operand and the activations the signed one, so no signs move; a group's
// pairs are at most 2·15·127, so a block's eight groups add up in int16
// (RT4FIRST, RT4NEXT, with the group's nibbles in Y12), and RT4ACC widens
// the sums and takes off 8·Σx, the activation row's correction at xc
// (8·Σx over the block, from quantTask), before the scaling.
#define RT4FIRST(x, S) \
	VPBROADCASTD x, Y14 \
	VPMADDUBSW   Y14, Y12, S

#define RT4NEXT(x, S) \
	VPBROADCASTD x, Y14 \
	VPMADDUBSW   Y14, Y12, Y14 \
	VPADDW       Y14, S, S

#define RT4ACC(xd, xc, S, R) \
	VPMADDWD     Y15, S, S \
	VPBROADCASTD xc, Y5 \
	VPSUBD       Y5, S, S \
	RTACC(xd, S, R)

// RTSCALE8 leaves the eight rows' current d_w in YR (XR its low half).
#define RTSCALE8(XR, YR) \
	MOVWLZX   (SI), R15 \
	VMOVD     R15, XR \
	VPINSRW   $1, (SI)(R8*1), XR, XR \
	VPINSRW   $2, (SI)(R8*2), XR, XR \
	VPINSRW   $3, (SI)(R9*1), XR, XR \
	VPINSRW   $4, (R10), XR, XR \
	VPINSRW   $5, (R10)(R8*1), XR, XR \
	VPINSRW   $6, (R10)(R8*2), XR, XR \
	VPINSRW   $7, (R10)(R9*1), XR, XR \
	VCVTPH2PS XR, YR

// RTACC fuses the block sums S (int32), times d_w (Y4) times the
// activation row's scale at xd, into its results R.
#define RTACC(xd, S, R) \
	VCVTDQ2PS    S, S \
	VBROADCASTSS xd, Y5 \
	VMULPS       Y5, Y4, Y5 \
	VFMADD231PS  Y5, S, R

// RTACCM and RT4ACCM are RTACC and RT4ACC for five to eight activation
// rows, whose results live in the frame (M); d_w is in Y12.
#define RTACCM(xd, S, M) \
	VCVTDQ2PS    S, S \
	VBROADCASTSS xd, Y13 \
	VMULPS       Y13, Y12, Y13 \
	VMOVUPS      M, Y14 \
	VFMADD231PS  Y13, S, Y14 \
	VMOVUPS      Y14, M

#define RT4ACCM(xd, xc, S, M) \
	VPMADDWD     Y15, S, S \
	VPBROADCASTD xc, Y13 \
	VPSUBD       Y13, S, S \
	RTACCM(xd, S, M)

// RTPREFETCH is R8PREFETCH with R15 as scratch.
#define RTPREFETCH \
	LEAQ       (SI)(R8*8), R15 \
	PREFETCHT0 (R15) \
	PREFETCHT0 (R15)(R8*1) \
	PREFETCHT0 (R15)(R8*2) \
	PREFETCHT0 (R15)(R9*1) \
	LEAQ       (R10)(R8*8), R15 \
	PREFETCHT0 (R15) \
	PREFETCHT0 (R15)(R8*1) \
	PREFETCHT0 (R15)(R8*2) \
	PREFETCHT0 (R15)(R9*1)

#define RTSETUP \
	MOVQ     w+0(FP), R12 \
	MOVQ     rb+8(FP), R8 \
	LEAQ     (R8)(R8*2), R9 \
	MOVQ     xs+24(FP), R13 \
	LEAQ     (R13)(R13*2), R14 \
	MOVQ     nb+40(FP), AX \
	SHLQ     $2, AX \
	LEAQ     (AX)(AX*2), BX \
	MOVQ     ngroups+64(FP), R11 \
	MOVQ     R11, 168(SP) \
	MOVQ     out+48(FP), R15 \
	MOVQ     R15, 128(SP) \
	VPCMPEQW Y15, Y15, Y15 \
	VPSRLW   $15, Y15, Y15

#define RTQ4CONSTS \
	MOVL         $0x0f0f0f0f, R15 \
	VMOVD        R15, X4 \
	VPBROADCASTD X4, Y4 \
	VMOVDQU      Y4, 136(SP)

#define RTGROUP \
	MOVQ R12, SI \
	LEAQ (R12)(R8*4), R10 \
	MOVQ xq+16(FP), DI \
	MOVQ xd+32(FP), DX \
	MOVQ nb+40(FP), CX

// RTNEXTGROUP moves on to the next group of eight rows, looping to label
// while groups are left.
#define RTNEXTGROUP(label) \
	ADDQ $32, 128(SP) \
	LEAQ (R12)(R8*8), R12 \
	DECQ 168(SP) \
	JNZ  label

// func dotQ8R8AVX(w *byte, rb int, xq *int8, xd *float32, nb int, out *float32, ngroups int)
// out[r] = the dot product of Q8_0 weight row r (rows rb bytes apart) with
// one quantized activation row, for r < 8·ngroups; nb ≥ 1, ngroups ≥ 1.
TEXT ·dotQ8R8AVX(SB), NOSPLIT, $0-56
	R8SETUP

q8r8group:
	R8GROUP

q8r8block:
	VMOVDQU (DI), Y14
	QR8(2(SI), Y0, Y8)
	QR8(2(SI)(R8*1), Y1, Y9)
	QR8(2(SI)(R8*2), Y2, Y10)
	QR8(2(SI)(R9*1), Y3, Y11)
	QR8(2(R10), Y4, Y8)
	QR8(2(R10)(R8*1), Y5, Y9)
	QR8(2(R10)(R8*2), Y6, Y10)
	QR8(2(R10)(R9*1), Y7, Y11)
	R8FOLD
	R8SCALE
	R8PREFETCH
	ADDQ $34, SI
	ADDQ $34, R10
	ADDQ $32, DI
	ADDQ $4, DX
	DECQ CX
	JNZ  q8r8block

	R8NEXT(q8r8group)
	VZEROUPPER
	RET

// func dotQ4R8AVX(w *byte, rb int, xq *int8, xd *float32, nb int, out *float32, ngroups int, xc *int32)
// dotQ8R8AVX for Q4_0 weight rows; xc holds 8·Σx of each activation block.
TEXT ·dotQ4R8AVX(SB), NOSPLIT, $0-64
	R8SETUP
	Q4CONSTS11

q4r8group:
	R8GROUP
	MOVQ xc+56(FP), R14

q4r8block:
	VMOVDQU (DI), Y14
	QR4(2(SI), Y0)
	QR4(2(SI)(R8*1), Y1)
	QR4(2(SI)(R8*2), Y2)
	QR4(2(SI)(R9*1), Y3)
	QR4(2(R10), Y4)
	QR4(2(R10)(R8*1), Y5)
	QR4(2(R10)(R8*2), Y6)
	QR4(2(R10)(R9*1), Y7)
	R8FOLD4
	R8SCALE
	R8PREFETCH
	ADDQ $18, SI
	ADDQ $18, R10
	ADDQ $32, DI
	ADDQ $4, DX
	ADDQ $4, R14
	DECQ CX
	JNZ  q4r8block

	R8NEXT(q4r8group)
	VZEROUPPER
	RET

// func axpyAVX(y *float32, a float32, x *float32, n int)
TEXT ·axpyAVX(SB), NOSPLIT, $0-32
	MOVQ         y+0(FP), DI
	VBROADCASTSS a+8(FP), Y0
	MOVQ         x+16(FP), SI
	MOVQ         n+24(FP), CX

axpyloop16:
	CMPQ CX, $16
	JL   axpyloop8
	VMOVUPS     (DI), Y1
	VMOVUPS     32(DI), Y2
	VFMADD231PS (SI), Y0, Y1
	VFMADD231PS 32(SI), Y0, Y2
	VMOVUPS     Y1, (DI)
	VMOVUPS     Y2, 32(DI)
	ADDQ $64, DI
	ADDQ $64, SI
	SUBQ $16, CX
	JMP  axpyloop16

axpyloop8:
	CMPQ CX, $8
	JL   axpydone
	VMOVUPS     (DI), Y1
	VFMADD231PS (SI), Y0, Y1
	VMOVUPS     Y1, (DI)

axpydone:
	VZEROUPPER
	RET

// func f16RowAVX(dst *float32, src *byte, n int)
TEXT ·f16RowAVX(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $3, CX
	JZ   f16done

f16loop:
	VCVTPH2PS (SI), Y0
	VMOVUPS   Y0, (DI)
	ADDQ $16, SI
	ADDQ $32, DI
	DECQ CX
	JNZ  f16loop

f16done:
	VZEROUPPER
	RET

// func dotsF32AVX(q, k *float32, hd, nh, group int, out *float32)
// out[h] = Σ q[h·hd+i]·k[(h/group)·hd+i]; hd is a multiple of 8, nh ≥ 1.
TEXT ·dotsF32AVX(SB), NOSPLIT, $0-48
	MOVQ q+0(FP), SI
	MOVQ k+8(FP), DI
	MOVQ hd+16(FP), R8
	MOVQ nh+24(FP), CX
	MOVQ group+32(FP), R9
	MOVQ out+40(FP), DX
	MOVQ R8, R12
	SHLQ $2, R12 // head width in bytes
	XORQ R10, R10 // heads done in this group

dotshead:
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	MOVQ   SI, AX
	MOVQ   DI, BX
	MOVQ   R8, R11

dotsloop16:
	CMPQ        R11, $16
	JL          dotsloop8
	VMOVUPS     (AX), Y2
	VMOVUPS     32(AX), Y3
	VFMADD231PS (BX), Y2, Y0
	VFMADD231PS 32(BX), Y3, Y1
	ADDQ        $64, AX
	ADDQ        $64, BX
	SUBQ        $16, R11
	JMP         dotsloop16

dotsloop8:
	CMPQ        R11, $8
	JL          dotssum
	VMOVUPS     (AX), Y2
	VFMADD231PS (BX), Y2, Y0

dotssum:
	VADDPS       Y1, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS       X1, X0, X0
	VHADDPS      X0, X0, X0
	VHADDPS      X0, X0, X0
	MOVSS        X0, (DX)
	ADDQ         $4, DX
	ADDQ         R12, SI
	INCQ         R10
	CMPQ         R10, R9
	JL           dotsnext
	XORQ         R10, R10
	ADDQ         R12, DI

dotsnext:
	DECQ CX
	JNZ  dotshead
	VZEROUPPER
	RET

// func axpysF32AVX(y, w, v *float32, hd, nh, group int)
// y[h·hd+i] += w[h]·v[(h/group)·hd+i]; hd is a multiple of 8, nh ≥ 1.
TEXT ·axpysF32AVX(SB), NOSPLIT, $0-48
	MOVQ y+0(FP), DI
	MOVQ w+8(FP), DX
	MOVQ v+16(FP), SI
	MOVQ hd+24(FP), R8
	MOVQ nh+32(FP), CX
	MOVQ group+40(FP), R9
	MOVQ R8, R12
	SHLQ $2, R12
	XORQ R10, R10

axpyshead:
	VBROADCASTSS (DX), Y0
	MOVQ         DI, AX
	MOVQ         SI, BX
	MOVQ         R8, R11

axpysloop:
	VMOVUPS     (AX), Y1
	VFMADD231PS (BX), Y0, Y1
	VMOVUPS     Y1, (AX)
	ADDQ        $32, AX
	ADDQ        $32, BX
	SUBQ        $8, R11
	JNZ         axpysloop

	ADDQ $4, DX
	ADDQ R12, DI
	INCQ R10
	CMPQ R10, R9
	JL   axpysnext
	XORQ R10, R10
	ADDQ R12, SI

axpysnext:
	DECQ CX
	JNZ  axpyshead
	VZEROUPPER
	RET

// func dotQ8TAVX(w *byte, rb int, xq *int8, xs int, xd *float32, nb int, out *float32, os int, ngroups, na int)
// out[a·os/4 + r] = the dot product of Q8_0 weight row r (rows rb bytes
// apart) with activation row a (rows xs bytes apart, their scales nb·4
// bytes apart), for r < 8·ngroups and a < na; nb ≥ 1, ngroups ≥ 1,
// 1 ≤ na ≤ 8.
TEXT ·dotQ8TAVX(SB), NOSPLIT, $448-80
	RTSETUP
	MOVQ na+72(FP), R15
	CMPQ R15, $4
	JG   q8tbig
	JE   q8t4group
	CMPQ R15, $2
	JL   q8t1group
	JE   q8t2group
	JMP  q8t3group

q8tbig:
	CMPQ R15, $6
	JL   q8t5group
	JE   q8t6group
	CMPQ R15, $7
	JE   q8t7group

q8t8group:
	RTGROUP
	MOVQ CX, 176(SP)
	VXORPS Y0, Y0, Y0
	VMOVUPS Y0, 192(SP)
	VMOVUPS Y0, 224(SP)
	VMOVUPS Y0, 256(SP)
	VMOVUPS Y0, 288(SP)
	VMOVUPS Y0, 320(SP)
	VMOVUPS Y0, 352(SP)
	VMOVUPS Y0, 384(SP)
	VMOVUPS Y0, 416(SP)

q8t8block:
	RTLOAD8(SI, Y8, Y9, Y10, Y11)
	RTU4(Y8, Y9, Y10, Y11, Y0, Y1, Y2, Y3)
	RTSTOREU(Y8, Y9, Y10, Y11)
	RTLOAD8(R10, Y8, Y9, Y10, Y11)
	RTU4(Y8, Y9, Y10, Y11, Y0, Y1, Y2, Y3)
	LEAQ (DI)(R13*4), R15
	RTW($0x02, 0(SP), Y8)
	Q8GFIRST((DI), Y0)
	Q8GFIRST((DI)(R13*1), Y1)
	Q8GFIRST((DI)(R13*2), Y2)
	Q8GFIRST((DI)(R14*1), Y3)
	Q8GFIRST((R15), Y4)
	Q8GFIRST((R15)(R13*1), Y5)
	Q8GFIRST((R15)(R13*2), Y6)
	Q8GFIRST((R15)(R14*1), Y7)
	RTW($0x02, 32(SP), Y9)
	Q8GNEXT(4(DI), Y0)
	Q8GNEXT(4(DI)(R13*1), Y1)
	Q8GNEXT(4(DI)(R13*2), Y2)
	Q8GNEXT(4(DI)(R14*1), Y3)
	Q8GNEXT(4(R15), Y4)
	Q8GNEXT(4(R15)(R13*1), Y5)
	Q8GNEXT(4(R15)(R13*2), Y6)
	Q8GNEXT(4(R15)(R14*1), Y7)
	RTW($0x02, 64(SP), Y10)
	Q8GNEXT(8(DI), Y0)
	Q8GNEXT(8(DI)(R13*1), Y1)
	Q8GNEXT(8(DI)(R13*2), Y2)
	Q8GNEXT(8(DI)(R14*1), Y3)
	Q8GNEXT(8(R15), Y4)
	Q8GNEXT(8(R15)(R13*1), Y5)
	Q8GNEXT(8(R15)(R13*2), Y6)
	Q8GNEXT(8(R15)(R14*1), Y7)
	RTW($0x02, 96(SP), Y11)
	Q8GNEXT(12(DI), Y0)
	Q8GNEXT(12(DI)(R13*1), Y1)
	Q8GNEXT(12(DI)(R13*2), Y2)
	Q8GNEXT(12(DI)(R14*1), Y3)
	Q8GNEXT(12(R15), Y4)
	Q8GNEXT(12(R15)(R13*1), Y5)
	Q8GNEXT(12(R15)(R13*2), Y6)
	Q8GNEXT(12(R15)(R14*1), Y7)
	RTW($0x13, 0(SP), Y8)
	Q8GNEXT(16(DI), Y0)
	Q8GNEXT(16(DI)(R13*1), Y1)
	Q8GNEXT(16(DI)(R13*2), Y2)
	Q8GNEXT(16(DI)(R14*1), Y3)
	Q8GNEXT(16(R15), Y4)
	Q8GNEXT(16(R15)(R13*1), Y5)
	Q8GNEXT(16(R15)(R13*2), Y6)
	Q8GNEXT(16(R15)(R14*1), Y7)
	RTW($0x13, 32(SP), Y9)
	Q8GNEXT(20(DI), Y0)
	Q8GNEXT(20(DI)(R13*1), Y1)
	Q8GNEXT(20(DI)(R13*2), Y2)
	Q8GNEXT(20(DI)(R14*1), Y3)
	Q8GNEXT(20(R15), Y4)
	Q8GNEXT(20(R15)(R13*1), Y5)
	Q8GNEXT(20(R15)(R13*2), Y6)
	Q8GNEXT(20(R15)(R14*1), Y7)
	RTW($0x13, 64(SP), Y10)
	Q8GNEXT(24(DI), Y0)
	Q8GNEXT(24(DI)(R13*1), Y1)
	Q8GNEXT(24(DI)(R13*2), Y2)
	Q8GNEXT(24(DI)(R14*1), Y3)
	Q8GNEXT(24(R15), Y4)
	Q8GNEXT(24(R15)(R13*1), Y5)
	Q8GNEXT(24(R15)(R13*2), Y6)
	Q8GNEXT(24(R15)(R14*1), Y7)
	RTW($0x13, 96(SP), Y11)
	Q8GNEXT(28(DI), Y0)
	Q8GNEXT(28(DI)(R13*1), Y1)
	Q8GNEXT(28(DI)(R13*2), Y2)
	Q8GNEXT(28(DI)(R14*1), Y3)
	Q8GNEXT(28(R15), Y4)
	Q8GNEXT(28(R15)(R13*1), Y5)
	Q8GNEXT(28(R15)(R13*2), Y6)
	Q8GNEXT(28(R15)(R14*1), Y7)
	RTSCALE8(X12, Y12)
	LEAQ (DX)(AX*4), R15
	RTACCM((DX), Y0, 192(SP))
	RTACCM((DX)(AX*1), Y1, 224(SP))
	RTACCM((DX)(AX*2), Y2, 256(SP))
	RTACCM((DX)(BX*1), Y3, 288(SP))
	RTACCM((R15), Y4, 320(SP))
	RTACCM((R15)(AX*1), Y5, 352(SP))
	RTACCM((R15)(AX*2), Y6, 384(SP))
	RTACCM((R15)(BX*1), Y7, 416(SP))
	RTPREFETCH
	ADDQ $34, SI
	ADDQ $34, R10
	ADDQ $32, DI
	ADDQ $4, DX
	DECQ 176(SP)
	JNZ  q8t8block

	MOVQ 128(SP), R15
	VMOVUPS 192(SP), Y0
	VMOVUPS Y0, (R15)
	ADDQ os+56(FP), R15
	VMOVUPS 224(SP), Y0
	VMOVUPS Y0, (R15)
	ADDQ os+56(FP), R15
	VMOVUPS 256(SP), Y0
	VMOVUPS Y0, (R15)
	ADDQ os+56(FP), R15
	VMOVUPS 288(SP), Y0
	VMOVUPS Y0, (R15)
	ADDQ os+56(FP), R15
	VMOVUPS 320(SP), Y0
	VMOVUPS Y0, (R15)
	ADDQ os+56(FP), R15
	VMOVUPS 352(SP), Y0
	VMOVUPS Y0, (R15)
	ADDQ os+56(FP), R15
	VMOVUPS 384(SP), Y0
	VMOVUPS Y0, (R15)
	ADDQ os+56(FP), R15
	VMOVUPS 416(SP), Y0
	VMOVUPS Y0, (R15)
	RTNEXTGROUP(q8t8group)
	VZEROUPPER
	RET

q8t7group:
	RTGROUP
	MOVQ CX, 176(SP)
	VXORPS Y0, Y0, Y0
	VMOVUPS Y0, 192(SP)
	VMOVUPS Y0, 224(SP)
	VMOVUPS Y0, 256(SP)
	VMOVUPS Y0, 288(SP)
	VMOVUPS Y0, 320(SP)
	VMOVUPS Y0, 352(SP)
	VMOVUPS Y0, 384(SP)

q8t7block:
	RTLOAD8(SI, Y8, Y9, Y10, Y11)
	RTU4(Y8, Y9, Y10, Y11, Y0, Y1, Y2, Y3)
	RTSTOREU(Y8, Y9, Y10, Y11)
	RTLOAD8(R10, Y8, Y9, Y10, Y11)
	RTU4(Y8, Y9, Y10, Y11, Y0, Y1, Y2, Y3)
	LEAQ (DI)(R13*4), R15
	RTW($0x02, 0(SP), Y8)
	Q8GFIRST((DI), Y0)
	Q8GFIRST((DI)(R13*1), Y1)
	Q8GFIRST((DI)(R13*2), Y2)
	Q8GFIRST((DI)(R14*1), Y3)
	Q8GFIRST((R15), Y4)
	Q8GFIRST((R15)(R13*1), Y5)
	Q8GFIRST((R15)(R13*2), Y6)
	RTW($0x02, 32(SP), Y9)
	Q8GNEXT(4(DI), Y0)
	Q8GNEXT(4(DI)(R13*1), Y1)
	Q8GNEXT(4(DI)(R13*2), Y2)
	Q8GNEXT(4(DI)(R14*1), Y3)
	Q8GNEXT(4(R15), Y4)
	Q8GNEXT(4(R15)(R13*1), Y5)
	Q8GNEXT(4(R15)(R13*2), Y6)
	RTW($0x02, 64(SP), Y10)
	Q8GNEXT(8(DI), Y0)
	Q8GNEXT(8(DI)(R13*1), Y1)
	Q8GNEXT(8(DI)(R13*2), Y2)
	Q8GNEXT(8(DI)(R14*1), Y3)
	Q8GNEXT(8(R15), Y4)
	Q8GNEXT(8(R15)(R13*1), Y5)
	Q8GNEXT(8(R15)(R13*2), Y6)
	RTW($0x02, 96(SP), Y11)
	Q8GNEXT(12(DI), Y0)
	Q8GNEXT(12(DI)(R13*1), Y1)
	Q8GNEXT(12(DI)(R13*2), Y2)
	Q8GNEXT(12(DI)(R14*1), Y3)
	Q8GNEXT(12(R15), Y4)
	Q8GNEXT(12(R15)(R13*1), Y5)
	Q8GNEXT(12(R15)(R13*2), Y6)
	RTW($0x13, 0(SP), Y8)
	Q8GNEXT(16(DI), Y0)
	Q8GNEXT(16(DI)(R13*1), Y1)
	Q8GNEXT(16(DI)(R13*2), Y2)
	Q8GNEXT(16(DI)(R14*1), Y3)
	Q8GNEXT(16(R15), Y4)
	Q8GNEXT(16(R15)(R13*1), Y5)
	Q8GNEXT(16(R15)(R13*2), Y6)
	RTW($0x13, 32(SP), Y9)
	Q8GNEXT(20(DI), Y0)
	Q8GNEXT(20(DI)(R13*1), Y1)
	Q8GNEXT(20(DI)(R13*2), Y2)
	Q8GNEXT(20(DI)(R14*1), Y3)
	Q8GNEXT(20(R15), Y4)
	Q8GNEXT(20(R15)(R13*1), Y5)
	Q8GNEXT(20(R15)(R13*2), Y6)
	RTW($0x13, 64(SP), Y10)
	Q8GNEXT(24(DI), Y0)
	Q8GNEXT(24(DI)(R13*1), Y1)
	Q8GNEXT(24(DI)(R13*2), Y2)
	Q8GNEXT(24(DI)(R14*1), Y3)
	Q8GNEXT(24(R15), Y4)
	Q8GNEXT(24(R15)(R13*1), Y5)
	Q8GNEXT(24(R15)(R13*2), Y6)
	RTW($0x13, 96(SP), Y11)
	Q8GNEXT(28(DI), Y0)
	Q8GNEXT(28(DI)(R13*1), Y1)
	Q8GNEXT(28(DI)(R13*2), Y2)
	Q8GNEXT(28(DI)(R14*1), Y3)
	Q8GNEXT(28(R15), Y4)
	Q8GNEXT(28(R15)(R13*1), Y5)
	Q8GNEXT(28(R15)(R13*2), Y6)
	RTSCALE8(X12, Y12)
	LEAQ (DX)(AX*4), R15
	RTACCM((DX), Y0, 192(SP))
	RTACCM((DX)(AX*1), Y1, 224(SP))
	RTACCM((DX)(AX*2), Y2, 256(SP))
	RTACCM((DX)(BX*1), Y3, 288(SP))
	RTACCM((R15), Y4, 320(SP))
	RTACCM((R15)(AX*1), Y5, 352(SP))
	RTACCM((R15)(AX*2), Y6, 384(SP))
	RTPREFETCH
	ADDQ $34, SI
	ADDQ $34, R10
	ADDQ $32, DI
	ADDQ $4, DX
	DECQ 176(SP)
	JNZ  q8t7block

	MOVQ 128(SP), R15
	VMOVUPS 192(SP), Y0
	VMOVUPS Y0, (R15)
	ADDQ os+56(FP), R15
	VMOVUPS 224(SP), Y0
	VMOVUPS Y0, (R15)
	ADDQ os+56(FP), R15
	VMOVUPS 256(SP), Y0
	VMOVUPS Y0, (R15)
	ADDQ os+56(FP), R15
	VMOVUPS 288(SP), Y0
	VMOVUPS Y0, (R15)
	ADDQ os+56(FP), R15
	VMOVUPS 320(SP), Y0
	VMOVUPS Y0, (R15)
	ADDQ os+56(FP), R15
	VMOVUPS 352(SP), Y0
	VMOVUPS Y0, (R15)
	ADDQ os+56(FP), R15
	VMOVUPS 384(SP), Y0
	VMOVUPS Y0, (R15)
	RTNEXTGROUP(q8t7group)
	VZEROUPPER
	RET

q8t6group:
	RTGROUP
	MOVQ CX, 176(SP)
	VXORPS Y0, Y0, Y0
	VMOVUPS Y0, 192(SP)
	VMOVUPS Y0, 224(SP)
	VMOVUPS Y0, 256(SP)
	VMOVUPS Y0, 288(SP)
	VMOVUPS Y0, 320(SP)
	VMOVUPS Y0, 352(SP)

q8t6block:
	RTLOAD8(SI, Y8, Y9, Y10, Y11)
	RTU4(Y8, Y9, Y10, Y11, Y0, Y1, Y2, Y3)
	RTSTOREU(Y8, Y9, Y10, Y11)
	RTLOAD8(R10, Y8, Y9, Y10, Y11)
	RTU4(Y8, Y9, Y10, Y11, Y0, Y1, Y2, Y3)
	LEAQ (DI)(R13*4), R15
	RTW($0x02, 0(SP), Y8)
	Q8GFIRST((DI), Y0)
	Q8GFIRST((DI)(R13*1), Y1)
	Q8GFIRST((DI)(R13*2), Y2)
	Q8GFIRST((DI)(R14*1), Y3)
	Q8GFIRST((R15), Y4)
	Q8GFIRST((R15)(R13*1), Y5)
	RTW($0x02, 32(SP), Y9)
	Q8GNEXT(4(DI), Y0)
	Q8GNEXT(4(DI)(R13*1), Y1)
	Q8GNEXT(4(DI)(R13*2), Y2)
	Q8GNEXT(4(DI)(R14*1), Y3)
	Q8GNEXT(4(R15), Y4)
	Q8GNEXT(4(R15)(R13*1), Y5)
	RTW($0x02, 64(SP), Y10)
	Q8GNEXT(8(DI), Y0)
	Q8GNEXT(8(DI)(R13*1), Y1)
	Q8GNEXT(8(DI)(R13*2), Y2)
	Q8GNEXT(8(DI)(R14*1), Y3)
	Q8GNEXT(8(R15), Y4)
	Q8GNEXT(8(R15)(R13*1), Y5)
	RTW($0x02, 96(SP), Y11)
	Q8GNEXT(12(DI), Y0)
	Q8GNEXT(12(DI)(R13*1), Y1)
	Q8GNEXT(12(DI)(R13*2), Y2)
	Q8GNEXT(12(DI)(R14*1), Y3)
	Q8GNEXT(12(R15), Y4)
	Q8GNEXT(12(R15)(R13*1), Y5)
	RTW($0x13, 0(SP), Y8)
	Q8GNEXT(16(DI), Y0)
	Q8GNEXT(16(DI)(R13*1), Y1)
	Q8GNEXT(16(DI)(R13*2), Y2)
	Q8GNEXT(16(DI)(R14*1), Y3)
	Q8GNEXT(16(R15), Y4)
	Q8GNEXT(16(R15)(R13*1), Y5)
	RTW($0x13, 32(SP), Y9)
	Q8GNEXT(20(DI), Y0)
	Q8GNEXT(20(DI)(R13*1), Y1)
	Q8GNEXT(20(DI)(R13*2), Y2)
	Q8GNEXT(20(DI)(R14*1), Y3)
	Q8GNEXT(20(R15), Y4)
	Q8GNEXT(20(R15)(R13*1), Y5)
	RTW($0x13, 64(SP), Y10)
	Q8GNEXT(24(DI), Y0)
	Q8GNEXT(24(DI)(R13*1), Y1)
	Q8GNEXT(24(DI)(R13*2), Y2)
	Q8GNEXT(24(DI)(R14*1), Y3)
	Q8GNEXT(24(R15), Y4)
	Q8GNEXT(24(R15)(R13*1), Y5)
	RTW($0x13, 96(SP), Y11)
	Q8GNEXT(28(DI), Y0)
	Q8GNEXT(28(DI)(R13*1), Y1)
	Q8GNEXT(28(DI)(R13*2), Y2)
	Q8GNEXT(28(DI)(R14*1), Y3)
	Q8GNEXT(28(R15), Y4)
	Q8GNEXT(28(R15)(R13*1), Y5)
	RTSCALE8(X12, Y12)
	LEAQ (DX)(AX*4), R15
	RTACCM((DX), Y0, 192(SP))
	RTACCM((DX)(AX*1), Y1, 224(SP))
	RTACCM((DX)(AX*2), Y2, 256(SP))
	RTACCM((DX)(BX*1), Y3, 288(SP))
	RTACCM((R15), Y4, 320(SP))
	RTACCM((R15)(AX*1), Y5, 352(SP))
	RTPREFETCH
	ADDQ $34, SI
	ADDQ $34, R10
	ADDQ $32, DI
	ADDQ $4, DX
	DECQ 176(SP)
	JNZ  q8t6block

	MOVQ 128(SP), R15
	VMOVUPS 192(SP), Y0
	VMOVUPS Y0, (R15)
	ADDQ os+56(FP), R15
	VMOVUPS 224(SP), Y0
	VMOVUPS Y0, (R15)
	ADDQ os+56(FP), R15
	VMOVUPS 256(SP), Y0
	VMOVUPS Y0, (R15)
	ADDQ os+56(FP), R15
	VMOVUPS 288(SP), Y0
	VMOVUPS Y0, (R15)
	ADDQ os+56(FP), R15
	VMOVUPS 320(SP), Y0
	VMOVUPS Y0, (R15)
	ADDQ os+56(FP), R15
	VMOVUPS 352(SP), Y0
	VMOVUPS Y0, (R15)
	RTNEXTGROUP(q8t6group)
	VZEROUPPER
	RET

q8t5group:
	RTGROUP
	MOVQ CX, 176(SP)
	VXORPS Y0, Y0, Y0
	VMOVUPS Y0, 192(SP)
	VMOVUPS Y0, 224(SP)
	VMOVUPS Y0, 256(SP)
	VMOVUPS Y0, 288(SP)
	VMOVUPS Y0, 320(SP)

q8t5block:
	RTLOAD8(SI, Y8, Y9, Y10, Y11)
	RTU4(Y8, Y9, Y10, Y11, Y0, Y1, Y2, Y3)
	RTSTOREU(Y8, Y9, Y10, Y11)
	RTLOAD8(R10, Y8, Y9, Y10, Y11)
	RTU4(Y8, Y9, Y10, Y11, Y0, Y1, Y2, Y3)
	LEAQ (DI)(R13*4), R15
	RTW($0x02, 0(SP), Y8)
	Q8GFIRST((DI), Y0)
	Q8GFIRST((DI)(R13*1), Y1)
	Q8GFIRST((DI)(R13*2), Y2)
	Q8GFIRST((DI)(R14*1), Y3)
	Q8GFIRST((R15), Y4)
	RTW($0x02, 32(SP), Y9)
	Q8GNEXT(4(DI), Y0)
	Q8GNEXT(4(DI)(R13*1), Y1)
	Q8GNEXT(4(DI)(R13*2), Y2)
	Q8GNEXT(4(DI)(R14*1), Y3)
	Q8GNEXT(4(R15), Y4)
	RTW($0x02, 64(SP), Y10)
	Q8GNEXT(8(DI), Y0)
	Q8GNEXT(8(DI)(R13*1), Y1)
	Q8GNEXT(8(DI)(R13*2), Y2)
	Q8GNEXT(8(DI)(R14*1), Y3)
	Q8GNEXT(8(R15), Y4)
	RTW($0x02, 96(SP), Y11)
	Q8GNEXT(12(DI), Y0)
	Q8GNEXT(12(DI)(R13*1), Y1)
	Q8GNEXT(12(DI)(R13*2), Y2)
	Q8GNEXT(12(DI)(R14*1), Y3)
	Q8GNEXT(12(R15), Y4)
	RTW($0x13, 0(SP), Y8)
	Q8GNEXT(16(DI), Y0)
	Q8GNEXT(16(DI)(R13*1), Y1)
	Q8GNEXT(16(DI)(R13*2), Y2)
	Q8GNEXT(16(DI)(R14*1), Y3)
	Q8GNEXT(16(R15), Y4)
	RTW($0x13, 32(SP), Y9)
	Q8GNEXT(20(DI), Y0)
	Q8GNEXT(20(DI)(R13*1), Y1)
	Q8GNEXT(20(DI)(R13*2), Y2)
	Q8GNEXT(20(DI)(R14*1), Y3)
	Q8GNEXT(20(R15), Y4)
	RTW($0x13, 64(SP), Y10)
	Q8GNEXT(24(DI), Y0)
	Q8GNEXT(24(DI)(R13*1), Y1)
	Q8GNEXT(24(DI)(R13*2), Y2)
	Q8GNEXT(24(DI)(R14*1), Y3)
	Q8GNEXT(24(R15), Y4)
	RTW($0x13, 96(SP), Y11)
	Q8GNEXT(28(DI), Y0)
	Q8GNEXT(28(DI)(R13*1), Y1)
	Q8GNEXT(28(DI)(R13*2), Y2)
	Q8GNEXT(28(DI)(R14*1), Y3)
	Q8GNEXT(28(R15), Y4)
	RTSCALE8(X12, Y12)
	LEAQ (DX)(AX*4), R15
	RTACCM((DX), Y0, 192(SP))
	RTACCM((DX)(AX*1), Y1, 224(SP))
	RTACCM((DX)(AX*2), Y2, 256(SP))
	RTACCM((DX)(BX*1), Y3, 288(SP))
	RTACCM((R15), Y4, 320(SP))
	RTPREFETCH
	ADDQ $34, SI
	ADDQ $34, R10
	ADDQ $32, DI
	ADDQ $4, DX
	DECQ 176(SP)
	JNZ  q8t5block

	MOVQ 128(SP), R15
	VMOVUPS 192(SP), Y0
	VMOVUPS Y0, (R15)
	ADDQ os+56(FP), R15
	VMOVUPS 224(SP), Y0
	VMOVUPS Y0, (R15)
	ADDQ os+56(FP), R15
	VMOVUPS 256(SP), Y0
	VMOVUPS Y0, (R15)
	ADDQ os+56(FP), R15
	VMOVUPS 288(SP), Y0
	VMOVUPS Y0, (R15)
	ADDQ os+56(FP), R15
	VMOVUPS 320(SP), Y0
	VMOVUPS Y0, (R15)
	RTNEXTGROUP(q8t5group)
	VZEROUPPER
	RET

q8t4group:
	RTGROUP
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3

q8t4block:
	RTLOAD8(SI, Y4, Y5, Y6, Y7)
	RTU4(Y4, Y5, Y6, Y7, Y8, Y9, Y10, Y11)
	RTSTOREU(Y4, Y5, Y6, Y7)
	RTLOAD8(R10, Y4, Y5, Y6, Y7)
	RTU4(Y4, Y5, Y6, Y7, Y8, Y9, Y10, Y11)
	RTW($0x02, 0(SP), Y4)
	Q8GFIRST((DI), Y8)
	Q8GFIRST((DI)(R13*1), Y9)
	Q8GFIRST((DI)(R13*2), Y10)
	Q8GFIRST((DI)(R14*1), Y11)
	RTW($0x02, 32(SP), Y5)
	Q8GNEXT(4(DI), Y8)
	Q8GNEXT(4(DI)(R13*1), Y9)
	Q8GNEXT(4(DI)(R13*2), Y10)
	Q8GNEXT(4(DI)(R14*1), Y11)
	RTW($0x02, 64(SP), Y6)
	Q8GNEXT(8(DI), Y8)
	Q8GNEXT(8(DI)(R13*1), Y9)
	Q8GNEXT(8(DI)(R13*2), Y10)
	Q8GNEXT(8(DI)(R14*1), Y11)
	RTW($0x02, 96(SP), Y7)
	Q8GNEXT(12(DI), Y8)
	Q8GNEXT(12(DI)(R13*1), Y9)
	Q8GNEXT(12(DI)(R13*2), Y10)
	Q8GNEXT(12(DI)(R14*1), Y11)
	RTW($0x13, 0(SP), Y4)
	Q8GNEXT(16(DI), Y8)
	Q8GNEXT(16(DI)(R13*1), Y9)
	Q8GNEXT(16(DI)(R13*2), Y10)
	Q8GNEXT(16(DI)(R14*1), Y11)
	RTW($0x13, 32(SP), Y5)
	Q8GNEXT(20(DI), Y8)
	Q8GNEXT(20(DI)(R13*1), Y9)
	Q8GNEXT(20(DI)(R13*2), Y10)
	Q8GNEXT(20(DI)(R14*1), Y11)
	RTW($0x13, 64(SP), Y6)
	Q8GNEXT(24(DI), Y8)
	Q8GNEXT(24(DI)(R13*1), Y9)
	Q8GNEXT(24(DI)(R13*2), Y10)
	Q8GNEXT(24(DI)(R14*1), Y11)
	RTW($0x13, 96(SP), Y7)
	Q8GNEXT(28(DI), Y8)
	Q8GNEXT(28(DI)(R13*1), Y9)
	Q8GNEXT(28(DI)(R13*2), Y10)
	Q8GNEXT(28(DI)(R14*1), Y11)
	RTSCALE8(X4, Y4)
	RTACC((DX), Y8, Y0)
	RTACC((DX)(AX*1), Y9, Y1)
	RTACC((DX)(AX*2), Y10, Y2)
	RTACC((DX)(BX*1), Y11, Y3)
	RTPREFETCH
	ADDQ $34, SI
	ADDQ $34, R10
	ADDQ $32, DI
	ADDQ $4, DX
	DECQ CX
	JNZ  q8t4block

	MOVQ 128(SP), R15
	VMOVUPS Y0, (R15)
	ADDQ os+56(FP), R15
	VMOVUPS Y1, (R15)
	ADDQ os+56(FP), R15
	VMOVUPS Y2, (R15)
	ADDQ os+56(FP), R15
	VMOVUPS Y3, (R15)
	RTNEXTGROUP(q8t4group)
	VZEROUPPER
	RET

q8t3group:
	RTGROUP
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2

q8t3block:
	RTLOAD8(SI, Y4, Y5, Y6, Y7)
	RTU4(Y4, Y5, Y6, Y7, Y8, Y9, Y10, Y11)
	RTSTOREU(Y4, Y5, Y6, Y7)
	RTLOAD8(R10, Y4, Y5, Y6, Y7)
	RTU4(Y4, Y5, Y6, Y7, Y8, Y9, Y10, Y11)
	RTW($0x02, 0(SP), Y4)
	Q8GFIRST((DI), Y8)
	Q8GFIRST((DI)(R13*1), Y9)
	Q8GFIRST((DI)(R13*2), Y10)
	RTW($0x02, 32(SP), Y5)
	Q8GNEXT(4(DI), Y8)
	Q8GNEXT(4(DI)(R13*1), Y9)
	Q8GNEXT(4(DI)(R13*2), Y10)
	RTW($0x02, 64(SP), Y6)
	Q8GNEXT(8(DI), Y8)
	Q8GNEXT(8(DI)(R13*1), Y9)
	Q8GNEXT(8(DI)(R13*2), Y10)
	RTW($0x02, 96(SP), Y7)
	Q8GNEXT(12(DI), Y8)
	Q8GNEXT(12(DI)(R13*1), Y9)
	Q8GNEXT(12(DI)(R13*2), Y10)
	RTW($0x13, 0(SP), Y4)
	Q8GNEXT(16(DI), Y8)
	Q8GNEXT(16(DI)(R13*1), Y9)
	Q8GNEXT(16(DI)(R13*2), Y10)
	RTW($0x13, 32(SP), Y5)
	Q8GNEXT(20(DI), Y8)
	Q8GNEXT(20(DI)(R13*1), Y9)
	Q8GNEXT(20(DI)(R13*2), Y10)
	RTW($0x13, 64(SP), Y6)
	Q8GNEXT(24(DI), Y8)
	Q8GNEXT(24(DI)(R13*1), Y9)
	Q8GNEXT(24(DI)(R13*2), Y10)
	RTW($0x13, 96(SP), Y7)
	Q8GNEXT(28(DI), Y8)
	Q8GNEXT(28(DI)(R13*1), Y9)
	Q8GNEXT(28(DI)(R13*2), Y10)
	RTSCALE8(X4, Y4)
	RTACC((DX), Y8, Y0)
	RTACC((DX)(AX*1), Y9, Y1)
	RTACC((DX)(AX*2), Y10, Y2)
	RTPREFETCH
	ADDQ $34, SI
	ADDQ $34, R10
	ADDQ $32, DI
	ADDQ $4, DX
	DECQ CX
	JNZ  q8t3block

	MOVQ 128(SP), R15
	VMOVUPS Y0, (R15)
	ADDQ os+56(FP), R15
	VMOVUPS Y1, (R15)
	ADDQ os+56(FP), R15
	VMOVUPS Y2, (R15)
	RTNEXTGROUP(q8t3group)
	VZEROUPPER
	RET

q8t2group:
	RTGROUP
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1

q8t2block:
	RTLOAD8(SI, Y4, Y5, Y6, Y7)
	RTU4(Y4, Y5, Y6, Y7, Y8, Y9, Y10, Y11)
	RTSTOREU(Y4, Y5, Y6, Y7)
	RTLOAD8(R10, Y4, Y5, Y6, Y7)
	RTU4(Y4, Y5, Y6, Y7, Y8, Y9, Y10, Y11)
	RTW($0x02, 0(SP), Y4)
	Q8GFIRST((DI), Y8)
	Q8GFIRST((DI)(R13*1), Y9)
	RTW($0x02, 32(SP), Y5)
	Q8GNEXT(4(DI), Y8)
	Q8GNEXT(4(DI)(R13*1), Y9)
	RTW($0x02, 64(SP), Y6)
	Q8GNEXT(8(DI), Y8)
	Q8GNEXT(8(DI)(R13*1), Y9)
	RTW($0x02, 96(SP), Y7)
	Q8GNEXT(12(DI), Y8)
	Q8GNEXT(12(DI)(R13*1), Y9)
	RTW($0x13, 0(SP), Y4)
	Q8GNEXT(16(DI), Y8)
	Q8GNEXT(16(DI)(R13*1), Y9)
	RTW($0x13, 32(SP), Y5)
	Q8GNEXT(20(DI), Y8)
	Q8GNEXT(20(DI)(R13*1), Y9)
	RTW($0x13, 64(SP), Y6)
	Q8GNEXT(24(DI), Y8)
	Q8GNEXT(24(DI)(R13*1), Y9)
	RTW($0x13, 96(SP), Y7)
	Q8GNEXT(28(DI), Y8)
	Q8GNEXT(28(DI)(R13*1), Y9)
	RTSCALE8(X4, Y4)
	RTACC((DX), Y8, Y0)
	RTACC((DX)(AX*1), Y9, Y1)
	RTPREFETCH
	ADDQ $34, SI
	ADDQ $34, R10
	ADDQ $32, DI
	ADDQ $4, DX
	DECQ CX
	JNZ  q8t2block

	MOVQ 128(SP), R15
	VMOVUPS Y0, (R15)
	ADDQ os+56(FP), R15
	VMOVUPS Y1, (R15)
	RTNEXTGROUP(q8t2group)
	VZEROUPPER
	RET

q8t1group:
	RTGROUP
	VXORPS Y0, Y0, Y0

q8t1block:
	RTLOAD8(SI, Y4, Y5, Y6, Y7)
	RTU4(Y4, Y5, Y6, Y7, Y8, Y9, Y10, Y11)
	RTSTOREU(Y4, Y5, Y6, Y7)
	RTLOAD8(R10, Y4, Y5, Y6, Y7)
	RTU4(Y4, Y5, Y6, Y7, Y8, Y9, Y10, Y11)
	RTW($0x02, 0(SP), Y4)
	Q8GFIRST((DI), Y8)
	RTW($0x02, 32(SP), Y5)
	Q8GNEXT(4(DI), Y8)
	RTW($0x02, 64(SP), Y6)
	Q8GNEXT(8(DI), Y8)
	RTW($0x02, 96(SP), Y7)
	Q8GNEXT(12(DI), Y8)
	RTW($0x13, 0(SP), Y4)
	Q8GNEXT(16(DI), Y8)
	RTW($0x13, 32(SP), Y5)
	Q8GNEXT(20(DI), Y8)
	RTW($0x13, 64(SP), Y6)
	Q8GNEXT(24(DI), Y8)
	RTW($0x13, 96(SP), Y7)
	Q8GNEXT(28(DI), Y8)
	RTSCALE8(X4, Y4)
	RTACC((DX), Y8, Y0)
	RTPREFETCH
	ADDQ $34, SI
	ADDQ $34, R10
	ADDQ $32, DI
	ADDQ $4, DX
	DECQ CX
	JNZ  q8t1block

	MOVQ 128(SP), R15
	VMOVUPS Y0, (R15)
	RTNEXTGROUP(q8t1group)
	VZEROUPPER
	RET

// func dotQ4TAVX(w *byte, rb int, xq *int8, xs int, xd *float32, nb int, out *float32, os int, ngroups, na int, xc *int32)
// dotQ8TAVX for Q4_0 weight rows; xc holds 8·Σx of each activation row's
// blocks, laid out as xd.
TEXT ·dotQ4TAVX(SB), NOSPLIT, $448-88
	RTSETUP
	RTQ4CONSTS
	MOVQ na+72(FP), R15
	CMPQ R15, $4
	JG   q4tbig
	JE   q4t4group
	CMPQ R15, $2
	JL   q4t1group
	JE   q4t2group
	JMP  q4t3group

q4tbig:
	CMPQ R15, $6
	JL   q4t5group
	JE   q4t6group
	CMPQ R15, $7
	JE   q4t7group

q4t8group:
	RTGROUP
	MOVQ xc+80(FP), R11
	MOVQ CX, 176(SP)
	VXORPS Y0, Y0, Y0
	VMOVUPS Y0, 192(SP)
	VMOVUPS Y0, 224(SP)
	VMOVUPS Y0, 256(SP)
	VMOVUPS Y0, 288(SP)
	VMOVUPS Y0, 320(SP)
	VMOVUPS Y0, 352(SP)
	VMOVUPS Y0, 384(SP)
	VMOVUPS Y0, 416(SP)

q4t8block:
	RTLOAD4(SI, Y8, Y9, Y10, Y11, X8, X9, X10, X11, X0)
	RTU4(Y8, Y9, Y10, Y11, Y0, Y1, Y2, Y3)
	RTSTOREU(Y8, Y9, Y10, Y11)
	RTLOAD4(R10, Y8, Y9, Y10, Y11, X8, X9, X10, X11, X0)
	RTU4(Y8, Y9, Y10, Y11, Y0, Y1, Y2, Y3)
	LEAQ (DI)(R13*4), R15
	VPERM2I128 $0x02, 0(SP), Y8, Y12
	RT4FIRST((DI), Y0)
	RT4FIRST((DI)(R13*1), Y1)
	RT4FIRST((DI)(R13*2), Y2)
	RT4FIRST((DI)(R14*1), Y3)
	RT4FIRST((R15), Y4)
	RT4FIRST((R15)(R13*1), Y5)
	RT4FIRST((R15)(R13*2), Y6)
	RT4FIRST((R15)(R14*1), Y7)
	VPERM2I128 $0x02, 32(SP), Y9, Y12
	RT4NEXT(4(DI), Y0)
	RT4NEXT(4(DI)(R13*1), Y1)
	RT4NEXT(4(DI)(R13*2), Y2)
	RT4NEXT(4(DI)(R14*1), Y3)
	RT4NEXT(4(R15), Y4)
	RT4NEXT(4(R15)(R13*1), Y5)
	RT4NEXT(4(R15)(R13*2), Y6)
	RT4NEXT(4(R15)(R14*1), Y7)
	VPERM2I128 $0x02, 64(SP), Y10, Y12
	RT4NEXT(8(DI), Y0)
	RT4NEXT(8(DI)(R13*1), Y1)
	RT4NEXT(8(DI)(R13*2), Y2)
	RT4NEXT(8(DI)(R14*1), Y3)
	RT4NEXT(8(R15), Y4)
	RT4NEXT(8(R15)(R13*1), Y5)
	RT4NEXT(8(R15)(R13*2), Y6)
	RT4NEXT(8(R15)(R14*1), Y7)
	VPERM2I128 $0x02, 96(SP), Y11, Y12
	RT4NEXT(12(DI), Y0)
	RT4NEXT(12(DI)(R13*1), Y1)
	RT4NEXT(12(DI)(R13*2), Y2)
	RT4NEXT(12(DI)(R14*1), Y3)
	RT4NEXT(12(R15), Y4)
	RT4NEXT(12(R15)(R13*1), Y5)
	RT4NEXT(12(R15)(R13*2), Y6)
	RT4NEXT(12(R15)(R14*1), Y7)
	VPERM2I128 $0x13, 0(SP), Y8, Y12
	RT4NEXT(16(DI), Y0)
	RT4NEXT(16(DI)(R13*1), Y1)
	RT4NEXT(16(DI)(R13*2), Y2)
	RT4NEXT(16(DI)(R14*1), Y3)
	RT4NEXT(16(R15), Y4)
	RT4NEXT(16(R15)(R13*1), Y5)
	RT4NEXT(16(R15)(R13*2), Y6)
	RT4NEXT(16(R15)(R14*1), Y7)
	VPERM2I128 $0x13, 32(SP), Y9, Y12
	RT4NEXT(20(DI), Y0)
	RT4NEXT(20(DI)(R13*1), Y1)
	RT4NEXT(20(DI)(R13*2), Y2)
	RT4NEXT(20(DI)(R14*1), Y3)
	RT4NEXT(20(R15), Y4)
	RT4NEXT(20(R15)(R13*1), Y5)
	RT4NEXT(20(R15)(R13*2), Y6)
	RT4NEXT(20(R15)(R14*1), Y7)
	VPERM2I128 $0x13, 64(SP), Y10, Y12
	RT4NEXT(24(DI), Y0)
	RT4NEXT(24(DI)(R13*1), Y1)
	RT4NEXT(24(DI)(R13*2), Y2)
	RT4NEXT(24(DI)(R14*1), Y3)
	RT4NEXT(24(R15), Y4)
	RT4NEXT(24(R15)(R13*1), Y5)
	RT4NEXT(24(R15)(R13*2), Y6)
	RT4NEXT(24(R15)(R14*1), Y7)
	VPERM2I128 $0x13, 96(SP), Y11, Y12
	RT4NEXT(28(DI), Y0)
	RT4NEXT(28(DI)(R13*1), Y1)
	RT4NEXT(28(DI)(R13*2), Y2)
	RT4NEXT(28(DI)(R14*1), Y3)
	RT4NEXT(28(R15), Y4)
	RT4NEXT(28(R15)(R13*1), Y5)
	RT4NEXT(28(R15)(R13*2), Y6)
	RT4NEXT(28(R15)(R14*1), Y7)
	RTSCALE8(X12, Y12)
	LEAQ (DX)(AX*4), R15
	LEAQ (R11)(AX*4), CX
	RT4ACCM((DX), (R11), Y0, 192(SP))
	RT4ACCM((DX)(AX*1), (R11)(AX*1), Y1, 224(SP))
	RT4ACCM((DX)(AX*2), (R11)(AX*2), Y2, 256(SP))
	RT4ACCM((DX)(BX*1), (R11)(BX*1), Y3, 288(SP))
	RT4ACCM((R15), (CX), Y4, 320(SP))
	RT4ACCM((R15)(AX*1), (CX)(AX*1), Y5, 352(SP))
	RT4ACCM((R15)(AX*2), (CX)(AX*2), Y6, 384(SP))
	RT4ACCM((R15)(BX*1), (CX)(BX*1), Y7, 416(SP))
	RTPREFETCH
	ADDQ $18, SI
	ADDQ $18, R10
	ADDQ $32, DI
	ADDQ $4, DX
	ADDQ $4, R11
	DECQ 176(SP)
	JNZ  q4t8block

	MOVQ 128(SP), R15
	VMOVUPS 192(SP), Y0
	VMOVUPS Y0, (R15)
	ADDQ os+56(FP), R15
	VMOVUPS 224(SP), Y0
	VMOVUPS Y0, (R15)
	ADDQ os+56(FP), R15
	VMOVUPS 256(SP), Y0
	VMOVUPS Y0, (R15)
	ADDQ os+56(FP), R15
	VMOVUPS 288(SP), Y0
	VMOVUPS Y0, (R15)
	ADDQ os+56(FP), R15
	VMOVUPS 320(SP), Y0
	VMOVUPS Y0, (R15)
	ADDQ os+56(FP), R15
	VMOVUPS 352(SP), Y0
	VMOVUPS Y0, (R15)
	ADDQ os+56(FP), R15
	VMOVUPS 384(SP), Y0
	VMOVUPS Y0, (R15)
	ADDQ os+56(FP), R15
	VMOVUPS 416(SP), Y0
	VMOVUPS Y0, (R15)
	RTNEXTGROUP(q4t8group)
	VZEROUPPER
	RET

q4t7group:
	RTGROUP
	MOVQ xc+80(FP), R11
	MOVQ CX, 176(SP)
	VXORPS Y0, Y0, Y0
	VMOVUPS Y0, 192(SP)
	VMOVUPS Y0, 224(SP)
	VMOVUPS Y0, 256(SP)
	VMOVUPS Y0, 288(SP)
	VMOVUPS Y0, 320(SP)
	VMOVUPS Y0, 352(SP)
	VMOVUPS Y0, 384(SP)

q4t7block:
	RTLOAD4(SI, Y8, Y9, Y10, Y11, X8, X9, X10, X11, X0)
	RTU4(Y8, Y9, Y10, Y11, Y0, Y1, Y2, Y3)
	RTSTOREU(Y8, Y9, Y10, Y11)
	RTLOAD4(R10, Y8, Y9, Y10, Y11, X8, X9, X10, X11, X0)
	RTU4(Y8, Y9, Y10, Y11, Y0, Y1, Y2, Y3)
	LEAQ (DI)(R13*4), R15
	VPERM2I128 $0x02, 0(SP), Y8, Y12
	RT4FIRST((DI), Y0)
	RT4FIRST((DI)(R13*1), Y1)
	RT4FIRST((DI)(R13*2), Y2)
	RT4FIRST((DI)(R14*1), Y3)
	RT4FIRST((R15), Y4)
	RT4FIRST((R15)(R13*1), Y5)
	RT4FIRST((R15)(R13*2), Y6)
	VPERM2I128 $0x02, 32(SP), Y9, Y12
	RT4NEXT(4(DI), Y0)
	RT4NEXT(4(DI)(R13*1), Y1)
	RT4NEXT(4(DI)(R13*2), Y2)
	RT4NEXT(4(DI)(R14*1), Y3)
	RT4NEXT(4(R15), Y4)
	RT4NEXT(4(R15)(R13*1), Y5)
	RT4NEXT(4(R15)(R13*2), Y6)
	VPERM2I128 $0x02, 64(SP), Y10, Y12
	RT4NEXT(8(DI), Y0)
	RT4NEXT(8(DI)(R13*1), Y1)
	RT4NEXT(8(DI)(R13*2), Y2)
	RT4NEXT(8(DI)(R14*1), Y3)
	RT4NEXT(8(R15), Y4)
	RT4NEXT(8(R15)(R13*1), Y5)
	RT4NEXT(8(R15)(R13*2), Y6)
	VPERM2I128 $0x02, 96(SP), Y11, Y12
	RT4NEXT(12(DI), Y0)
	RT4NEXT(12(DI)(R13*1), Y1)
	RT4NEXT(12(DI)(R13*2), Y2)
	RT4NEXT(12(DI)(R14*1), Y3)
	RT4NEXT(12(R15), Y4)
	RT4NEXT(12(R15)(R13*1), Y5)
	RT4NEXT(12(R15)(R13*2), Y6)
	VPERM2I128 $0x13, 0(SP), Y8, Y12
	RT4NEXT(16(DI), Y0)
	RT4NEXT(16(DI)(R13*1), Y1)
	RT4NEXT(16(DI)(R13*2), Y2)
	RT4NEXT(16(DI)(R14*1), Y3)
	RT4NEXT(16(R15), Y4)
	RT4NEXT(16(R15)(R13*1), Y5)
	RT4NEXT(16(R15)(R13*2), Y6)
	VPERM2I128 $0x13, 32(SP), Y9, Y12
	RT4NEXT(20(DI), Y0)
	RT4NEXT(20(DI)(R13*1), Y1)
	RT4NEXT(20(DI)(R13*2), Y2)
	RT4NEXT(20(DI)(R14*1), Y3)
	RT4NEXT(20(R15), Y4)
	RT4NEXT(20(R15)(R13*1), Y5)
	RT4NEXT(20(R15)(R13*2), Y6)
	VPERM2I128 $0x13, 64(SP), Y10, Y12
	RT4NEXT(24(DI), Y0)
	RT4NEXT(24(DI)(R13*1), Y1)
	RT4NEXT(24(DI)(R13*2), Y2)
	RT4NEXT(24(DI)(R14*1), Y3)
	RT4NEXT(24(R15), Y4)
	RT4NEXT(24(R15)(R13*1), Y5)
	RT4NEXT(24(R15)(R13*2), Y6)
	VPERM2I128 $0x13, 96(SP), Y11, Y12
	RT4NEXT(28(DI), Y0)
	RT4NEXT(28(DI)(R13*1), Y1)
	RT4NEXT(28(DI)(R13*2), Y2)
	RT4NEXT(28(DI)(R14*1), Y3)
	RT4NEXT(28(R15), Y4)
	RT4NEXT(28(R15)(R13*1), Y5)
	RT4NEXT(28(R15)(R13*2), Y6)
	RTSCALE8(X12, Y12)
	LEAQ (DX)(AX*4), R15
	LEAQ (R11)(AX*4), CX
	RT4ACCM((DX), (R11), Y0, 192(SP))
	RT4ACCM((DX)(AX*1), (R11)(AX*1), Y1, 224(SP))
	RT4ACCM((DX)(AX*2), (R11)(AX*2), Y2, 256(SP))
	RT4ACCM((DX)(BX*1), (R11)(BX*1), Y3, 288(SP))
	RT4ACCM((R15), (CX), Y4, 320(SP))
	RT4ACCM((R15)(AX*1), (CX)(AX*1), Y5, 352(SP))
	RT4ACCM((R15)(AX*2), (CX)(AX*2), Y6, 384(SP))
	RTPREFETCH
	ADDQ $18, SI
	ADDQ $18, R10
	ADDQ $32, DI
	ADDQ $4, DX
	ADDQ $4, R11
	DECQ 176(SP)
	JNZ  q4t7block

	MOVQ 128(SP), R15
	VMOVUPS 192(SP), Y0
	VMOVUPS Y0, (R15)
	ADDQ os+56(FP), R15
	VMOVUPS 224(SP), Y0
	VMOVUPS Y0, (R15)
	ADDQ os+56(FP), R15
	VMOVUPS 256(SP), Y0
	VMOVUPS Y0, (R15)
	ADDQ os+56(FP), R15
	VMOVUPS 288(SP), Y0
	VMOVUPS Y0, (R15)
	ADDQ os+56(FP), R15
	VMOVUPS 320(SP), Y0
	VMOVUPS Y0, (R15)
	ADDQ os+56(FP), R15
	VMOVUPS 352(SP), Y0
	VMOVUPS Y0, (R15)
	ADDQ os+56(FP), R15
	VMOVUPS 384(SP), Y0
	VMOVUPS Y0, (R15)
	RTNEXTGROUP(q4t7group)
	VZEROUPPER
	RET

q4t6group:
	RTGROUP
	MOVQ xc+80(FP), R11
	MOVQ CX, 176(SP)
	VXORPS Y0, Y0, Y0
	VMOVUPS Y0, 192(SP)
	VMOVUPS Y0, 224(SP)
	VMOVUPS Y0, 256(SP)
	VMOVUPS Y0, 288(SP)
	VMOVUPS Y0, 320(SP)
	VMOVUPS Y0, 352(SP)

q4t6block:
	RTLOAD4(SI, Y8, Y9, Y10, Y11, X8, X9, X10, X11, X0)
	RTU4(Y8, Y9, Y10, Y11, Y0, Y1, Y2, Y3)
	RTSTOREU(Y8, Y9, Y10, Y11)
	RTLOAD4(R10, Y8, Y9, Y10, Y11, X8, X9, X10, X11, X0)
	RTU4(Y8, Y9, Y10, Y11, Y0, Y1, Y2, Y3)
	LEAQ (DI)(R13*4), R15
	VPERM2I128 $0x02, 0(SP), Y8, Y12
	RT4FIRST((DI), Y0)
	RT4FIRST((DI)(R13*1), Y1)
	RT4FIRST((DI)(R13*2), Y2)
	RT4FIRST((DI)(R14*1), Y3)
	RT4FIRST((R15), Y4)
	RT4FIRST((R15)(R13*1), Y5)
	VPERM2I128 $0x02, 32(SP), Y9, Y12
	RT4NEXT(4(DI), Y0)
	RT4NEXT(4(DI)(R13*1), Y1)
	RT4NEXT(4(DI)(R13*2), Y2)
	RT4NEXT(4(DI)(R14*1), Y3)
	RT4NEXT(4(R15), Y4)
	RT4NEXT(4(R15)(R13*1), Y5)
	VPERM2I128 $0x02, 64(SP), Y10, Y12
	RT4NEXT(8(DI), Y0)
	RT4NEXT(8(DI)(R13*1), Y1)
	RT4NEXT(8(DI)(R13*2), Y2)
	RT4NEXT(8(DI)(R14*1), Y3)
	RT4NEXT(8(R15), Y4)
	RT4NEXT(8(R15)(R13*1), Y5)
	VPERM2I128 $0x02, 96(SP), Y11, Y12
	RT4NEXT(12(DI), Y0)
	RT4NEXT(12(DI)(R13*1), Y1)
	RT4NEXT(12(DI)(R13*2), Y2)
	RT4NEXT(12(DI)(R14*1), Y3)
	RT4NEXT(12(R15), Y4)
	RT4NEXT(12(R15)(R13*1), Y5)
	VPERM2I128 $0x13, 0(SP), Y8, Y12
	RT4NEXT(16(DI), Y0)
	RT4NEXT(16(DI)(R13*1), Y1)
	RT4NEXT(16(DI)(R13*2), Y2)
	RT4NEXT(16(DI)(R14*1), Y3)
	RT4NEXT(16(R15), Y4)
	RT4NEXT(16(R15)(R13*1), Y5)
	VPERM2I128 $0x13, 32(SP), Y9, Y12
	RT4NEXT(20(DI), Y0)
	RT4NEXT(20(DI)(R13*1), Y1)
	RT4NEXT(20(DI)(R13*2), Y2)
	RT4NEXT(20(DI)(R14*1), Y3)
	RT4NEXT(20(R15), Y4)
	RT4NEXT(20(R15)(R13*1), Y5)
	VPERM2I128 $0x13, 64(SP), Y10, Y12
	RT4NEXT(24(DI), Y0)
	RT4NEXT(24(DI)(R13*1), Y1)
	RT4NEXT(24(DI)(R13*2), Y2)
	RT4NEXT(24(DI)(R14*1), Y3)
	RT4NEXT(24(R15), Y4)
	RT4NEXT(24(R15)(R13*1), Y5)
	VPERM2I128 $0x13, 96(SP), Y11, Y12
	RT4NEXT(28(DI), Y0)
	RT4NEXT(28(DI)(R13*1), Y1)
	RT4NEXT(28(DI)(R13*2), Y2)
	RT4NEXT(28(DI)(R14*1), Y3)
	RT4NEXT(28(R15), Y4)
	RT4NEXT(28(R15)(R13*1), Y5)
	RTSCALE8(X12, Y12)
	LEAQ (DX)(AX*4), R15
	LEAQ (R11)(AX*4), CX
	RT4ACCM((DX), (R11), Y0, 192(SP))
	RT4ACCM((DX)(AX*1), (R11)(AX*1), Y1, 224(SP))
	RT4ACCM((DX)(AX*2), (R11)(AX*2), Y2, 256(SP))
	RT4ACCM((DX)(BX*1), (R11)(BX*1), Y3, 288(SP))
	RT4ACCM((R15), (CX), Y4, 320(SP))
	RT4ACCM((R15)(AX*1), (CX)(AX*1), Y5, 352(SP))
	RTPREFETCH
	ADDQ $18, SI
	ADDQ $18, R10
	ADDQ $32, DI
	ADDQ $4, DX
	ADDQ $4, R11
	DECQ 176(SP)
	JNZ  q4t6block

	MOVQ 128(SP), R15
	VMOVUPS 192(SP), Y0
	VMOVUPS Y0, (R15)
	ADDQ os+56(FP), R15
	VMOVUPS 224(SP), Y0
	VMOVUPS Y0, (R15)
	ADDQ os+56(FP), R15
	VMOVUPS 256(SP), Y0
	VMOVUPS Y0, (R15)
	ADDQ os+56(FP), R15
	VMOVUPS 288(SP), Y0
	VMOVUPS Y0, (R15)
	ADDQ os+56(FP), R15
	VMOVUPS 320(SP), Y0
	VMOVUPS Y0, (R15)
	ADDQ os+56(FP), R15
	VMOVUPS 352(SP), Y0
	VMOVUPS Y0, (R15)
	RTNEXTGROUP(q4t6group)
	VZEROUPPER
	RET

q4t5group:
	RTGROUP
	MOVQ xc+80(FP), R11
	MOVQ CX, 176(SP)
	VXORPS Y0, Y0, Y0
	VMOVUPS Y0, 192(SP)
	VMOVUPS Y0, 224(SP)
	VMOVUPS Y0, 256(SP)
	VMOVUPS Y0, 288(SP)
	VMOVUPS Y0, 320(SP)

q4t5block:
	RTLOAD4(SI, Y8, Y9, Y10, Y11, X8, X9, X10, X11, X0)
	RTU4(Y8, Y9, Y10, Y11, Y0, Y1, Y2, Y3)
	RTSTOREU(Y8, Y9, Y10, Y11)
	RTLOAD4(R10, Y8, Y9, Y10, Y11, X8, X9, X10, X11, X0)
	RTU4(Y8, Y9, Y10, Y11, Y0, Y1, Y2, Y3)
	LEAQ (DI)(R13*4), R15
	VPERM2I128 $0x02, 0(SP), Y8, Y12
	RT4FIRST((DI), Y0)
	RT4FIRST((DI)(R13*1), Y1)
	RT4FIRST((DI)(R13*2), Y2)
	RT4FIRST((DI)(R14*1), Y3)
	RT4FIRST((R15), Y4)
	VPERM2I128 $0x02, 32(SP), Y9, Y12
	RT4NEXT(4(DI), Y0)
	RT4NEXT(4(DI)(R13*1), Y1)
	RT4NEXT(4(DI)(R13*2), Y2)
	RT4NEXT(4(DI)(R14*1), Y3)
	RT4NEXT(4(R15), Y4)
	VPERM2I128 $0x02, 64(SP), Y10, Y12
	RT4NEXT(8(DI), Y0)
	RT4NEXT(8(DI)(R13*1), Y1)
	RT4NEXT(8(DI)(R13*2), Y2)
	RT4NEXT(8(DI)(R14*1), Y3)
	RT4NEXT(8(R15), Y4)
	VPERM2I128 $0x02, 96(SP), Y11, Y12
	RT4NEXT(12(DI), Y0)
	RT4NEXT(12(DI)(R13*1), Y1)
	RT4NEXT(12(DI)(R13*2), Y2)
	RT4NEXT(12(DI)(R14*1), Y3)
	RT4NEXT(12(R15), Y4)
	VPERM2I128 $0x13, 0(SP), Y8, Y12
	RT4NEXT(16(DI), Y0)
	RT4NEXT(16(DI)(R13*1), Y1)
	RT4NEXT(16(DI)(R13*2), Y2)
	RT4NEXT(16(DI)(R14*1), Y3)
	RT4NEXT(16(R15), Y4)
	VPERM2I128 $0x13, 32(SP), Y9, Y12
	RT4NEXT(20(DI), Y0)
	RT4NEXT(20(DI)(R13*1), Y1)
	RT4NEXT(20(DI)(R13*2), Y2)
	RT4NEXT(20(DI)(R14*1), Y3)
	RT4NEXT(20(R15), Y4)
	VPERM2I128 $0x13, 64(SP), Y10, Y12
	RT4NEXT(24(DI), Y0)
	RT4NEXT(24(DI)(R13*1), Y1)
	RT4NEXT(24(DI)(R13*2), Y2)
	RT4NEXT(24(DI)(R14*1), Y3)
	RT4NEXT(24(R15), Y4)
	VPERM2I128 $0x13, 96(SP), Y11, Y12
	RT4NEXT(28(DI), Y0)
	RT4NEXT(28(DI)(R13*1), Y1)
	RT4NEXT(28(DI)(R13*2), Y2)
	RT4NEXT(28(DI)(R14*1), Y3)
	RT4NEXT(28(R15), Y4)
	RTSCALE8(X12, Y12)
	LEAQ (DX)(AX*4), R15
	LEAQ (R11)(AX*4), CX
	RT4ACCM((DX), (R11), Y0, 192(SP))
	RT4ACCM((DX)(AX*1), (R11)(AX*1), Y1, 224(SP))
	RT4ACCM((DX)(AX*2), (R11)(AX*2), Y2, 256(SP))
	RT4ACCM((DX)(BX*1), (R11)(BX*1), Y3, 288(SP))
	RT4ACCM((R15), (CX), Y4, 320(SP))
	RTPREFETCH
	ADDQ $18, SI
	ADDQ $18, R10
	ADDQ $32, DI
	ADDQ $4, DX
	ADDQ $4, R11
	DECQ 176(SP)
	JNZ  q4t5block

	MOVQ 128(SP), R15
	VMOVUPS 192(SP), Y0
	VMOVUPS Y0, (R15)
	ADDQ os+56(FP), R15
	VMOVUPS 224(SP), Y0
	VMOVUPS Y0, (R15)
	ADDQ os+56(FP), R15
	VMOVUPS 256(SP), Y0
	VMOVUPS Y0, (R15)
	ADDQ os+56(FP), R15
	VMOVUPS 288(SP), Y0
	VMOVUPS Y0, (R15)
	ADDQ os+56(FP), R15
	VMOVUPS 320(SP), Y0
	VMOVUPS Y0, (R15)
	RTNEXTGROUP(q4t5group)
	VZEROUPPER
	RET

q4t4group:
	RTGROUP
	MOVQ xc+80(FP), R11
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3

q4t4block:
	RTLOAD4(SI, Y4, Y5, Y6, Y7, X4, X5, X6, X7, X8)
	RTU4(Y4, Y5, Y6, Y7, Y8, Y9, Y10, Y11)
	RTSTOREU(Y4, Y5, Y6, Y7)
	RTLOAD4(R10, Y4, Y5, Y6, Y7, X4, X5, X6, X7, X8)
	RTU4(Y4, Y5, Y6, Y7, Y8, Y9, Y10, Y11)
	VPERM2I128 $0x02, 0(SP), Y4, Y12
	RT4FIRST((DI), Y8)
	RT4FIRST((DI)(R13*1), Y9)
	RT4FIRST((DI)(R13*2), Y10)
	RT4FIRST((DI)(R14*1), Y11)
	VPERM2I128 $0x02, 32(SP), Y5, Y12
	RT4NEXT(4(DI), Y8)
	RT4NEXT(4(DI)(R13*1), Y9)
	RT4NEXT(4(DI)(R13*2), Y10)
	RT4NEXT(4(DI)(R14*1), Y11)
	VPERM2I128 $0x02, 64(SP), Y6, Y12
	RT4NEXT(8(DI), Y8)
	RT4NEXT(8(DI)(R13*1), Y9)
	RT4NEXT(8(DI)(R13*2), Y10)
	RT4NEXT(8(DI)(R14*1), Y11)
	VPERM2I128 $0x02, 96(SP), Y7, Y12
	RT4NEXT(12(DI), Y8)
	RT4NEXT(12(DI)(R13*1), Y9)
	RT4NEXT(12(DI)(R13*2), Y10)
	RT4NEXT(12(DI)(R14*1), Y11)
	VPERM2I128 $0x13, 0(SP), Y4, Y12
	RT4NEXT(16(DI), Y8)
	RT4NEXT(16(DI)(R13*1), Y9)
	RT4NEXT(16(DI)(R13*2), Y10)
	RT4NEXT(16(DI)(R14*1), Y11)
	VPERM2I128 $0x13, 32(SP), Y5, Y12
	RT4NEXT(20(DI), Y8)
	RT4NEXT(20(DI)(R13*1), Y9)
	RT4NEXT(20(DI)(R13*2), Y10)
	RT4NEXT(20(DI)(R14*1), Y11)
	VPERM2I128 $0x13, 64(SP), Y6, Y12
	RT4NEXT(24(DI), Y8)
	RT4NEXT(24(DI)(R13*1), Y9)
	RT4NEXT(24(DI)(R13*2), Y10)
	RT4NEXT(24(DI)(R14*1), Y11)
	VPERM2I128 $0x13, 96(SP), Y7, Y12
	RT4NEXT(28(DI), Y8)
	RT4NEXT(28(DI)(R13*1), Y9)
	RT4NEXT(28(DI)(R13*2), Y10)
	RT4NEXT(28(DI)(R14*1), Y11)
	RTSCALE8(X4, Y4)
	RT4ACC((DX), (R11), Y8, Y0)
	RT4ACC((DX)(AX*1), (R11)(AX*1), Y9, Y1)
	RT4ACC((DX)(AX*2), (R11)(AX*2), Y10, Y2)
	RT4ACC((DX)(BX*1), (R11)(BX*1), Y11, Y3)
	RTPREFETCH
	ADDQ $18, SI
	ADDQ $18, R10
	ADDQ $32, DI
	ADDQ $4, DX
	ADDQ $4, R11
	DECQ CX
	JNZ  q4t4block

	MOVQ 128(SP), R15
	VMOVUPS Y0, (R15)
	ADDQ os+56(FP), R15
	VMOVUPS Y1, (R15)
	ADDQ os+56(FP), R15
	VMOVUPS Y2, (R15)
	ADDQ os+56(FP), R15
	VMOVUPS Y3, (R15)
	RTNEXTGROUP(q4t4group)
	VZEROUPPER
	RET

q4t3group:
	RTGROUP
	MOVQ xc+80(FP), R11
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2

q4t3block:
	RTLOAD4(SI, Y4, Y5, Y6, Y7, X4, X5, X6, X7, X8)
	RTU4(Y4, Y5, Y6, Y7, Y8, Y9, Y10, Y11)
	RTSTOREU(Y4, Y5, Y6, Y7)
	RTLOAD4(R10, Y4, Y5, Y6, Y7, X4, X5, X6, X7, X8)
	RTU4(Y4, Y5, Y6, Y7, Y8, Y9, Y10, Y11)
	VPERM2I128 $0x02, 0(SP), Y4, Y12
	RT4FIRST((DI), Y8)
	RT4FIRST((DI)(R13*1), Y9)
	RT4FIRST((DI)(R13*2), Y10)
	VPERM2I128 $0x02, 32(SP), Y5, Y12
	RT4NEXT(4(DI), Y8)
	RT4NEXT(4(DI)(R13*1), Y9)
	RT4NEXT(4(DI)(R13*2), Y10)
	VPERM2I128 $0x02, 64(SP), Y6, Y12
	RT4NEXT(8(DI), Y8)
	RT4NEXT(8(DI)(R13*1), Y9)
	RT4NEXT(8(DI)(R13*2), Y10)
	VPERM2I128 $0x02, 96(SP), Y7, Y12
	RT4NEXT(12(DI), Y8)
	RT4NEXT(12(DI)(R13*1), Y9)
	RT4NEXT(12(DI)(R13*2), Y10)
	VPERM2I128 $0x13, 0(SP), Y4, Y12
	RT4NEXT(16(DI), Y8)
	RT4NEXT(16(DI)(R13*1), Y9)
	RT4NEXT(16(DI)(R13*2), Y10)
	VPERM2I128 $0x13, 32(SP), Y5, Y12
	RT4NEXT(20(DI), Y8)
	RT4NEXT(20(DI)(R13*1), Y9)
	RT4NEXT(20(DI)(R13*2), Y10)
	VPERM2I128 $0x13, 64(SP), Y6, Y12
	RT4NEXT(24(DI), Y8)
	RT4NEXT(24(DI)(R13*1), Y9)
	RT4NEXT(24(DI)(R13*2), Y10)
	VPERM2I128 $0x13, 96(SP), Y7, Y12
	RT4NEXT(28(DI), Y8)
	RT4NEXT(28(DI)(R13*1), Y9)
	RT4NEXT(28(DI)(R13*2), Y10)
	RTSCALE8(X4, Y4)
	RT4ACC((DX), (R11), Y8, Y0)
	RT4ACC((DX)(AX*1), (R11)(AX*1), Y9, Y1)
	RT4ACC((DX)(AX*2), (R11)(AX*2), Y10, Y2)
	RTPREFETCH
	ADDQ $18, SI
	ADDQ $18, R10
	ADDQ $32, DI
	ADDQ $4, DX
	ADDQ $4, R11
	DECQ CX
	JNZ  q4t3block

	MOVQ 128(SP), R15
	VMOVUPS Y0, (R15)
	ADDQ os+56(FP), R15
	VMOVUPS Y1, (R15)
	ADDQ os+56(FP), R15
	VMOVUPS Y2, (R15)
	RTNEXTGROUP(q4t3group)
	VZEROUPPER
	RET

q4t2group:
	RTGROUP
	MOVQ xc+80(FP), R11
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1

q4t2block:
	RTLOAD4(SI, Y4, Y5, Y6, Y7, X4, X5, X6, X7, X8)
	RTU4(Y4, Y5, Y6, Y7, Y8, Y9, Y10, Y11)
	RTSTOREU(Y4, Y5, Y6, Y7)
	RTLOAD4(R10, Y4, Y5, Y6, Y7, X4, X5, X6, X7, X8)
	RTU4(Y4, Y5, Y6, Y7, Y8, Y9, Y10, Y11)
	VPERM2I128 $0x02, 0(SP), Y4, Y12
	RT4FIRST((DI), Y8)
	RT4FIRST((DI)(R13*1), Y9)
	VPERM2I128 $0x02, 32(SP), Y5, Y12
	RT4NEXT(4(DI), Y8)
	RT4NEXT(4(DI)(R13*1), Y9)
	VPERM2I128 $0x02, 64(SP), Y6, Y12
	RT4NEXT(8(DI), Y8)
	RT4NEXT(8(DI)(R13*1), Y9)
	VPERM2I128 $0x02, 96(SP), Y7, Y12
	RT4NEXT(12(DI), Y8)
	RT4NEXT(12(DI)(R13*1), Y9)
	VPERM2I128 $0x13, 0(SP), Y4, Y12
	RT4NEXT(16(DI), Y8)
	RT4NEXT(16(DI)(R13*1), Y9)
	VPERM2I128 $0x13, 32(SP), Y5, Y12
	RT4NEXT(20(DI), Y8)
	RT4NEXT(20(DI)(R13*1), Y9)
	VPERM2I128 $0x13, 64(SP), Y6, Y12
	RT4NEXT(24(DI), Y8)
	RT4NEXT(24(DI)(R13*1), Y9)
	VPERM2I128 $0x13, 96(SP), Y7, Y12
	RT4NEXT(28(DI), Y8)
	RT4NEXT(28(DI)(R13*1), Y9)
	RTSCALE8(X4, Y4)
	RT4ACC((DX), (R11), Y8, Y0)
	RT4ACC((DX)(AX*1), (R11)(AX*1), Y9, Y1)
	RTPREFETCH
	ADDQ $18, SI
	ADDQ $18, R10
	ADDQ $32, DI
	ADDQ $4, DX
	ADDQ $4, R11
	DECQ CX
	JNZ  q4t2block

	MOVQ 128(SP), R15
	VMOVUPS Y0, (R15)
	ADDQ os+56(FP), R15
	VMOVUPS Y1, (R15)
	RTNEXTGROUP(q4t2group)
	VZEROUPPER
	RET

q4t1group:
	RTGROUP
	MOVQ xc+80(FP), R11
	VXORPS Y0, Y0, Y0

q4t1block:
	RTLOAD4(SI, Y4, Y5, Y6, Y7, X4, X5, X6, X7, X8)
	RTU4(Y4, Y5, Y6, Y7, Y8, Y9, Y10, Y11)
	RTSTOREU(Y4, Y5, Y6, Y7)
	RTLOAD4(R10, Y4, Y5, Y6, Y7, X4, X5, X6, X7, X8)
	RTU4(Y4, Y5, Y6, Y7, Y8, Y9, Y10, Y11)
	VPERM2I128 $0x02, 0(SP), Y4, Y12
	RT4FIRST((DI), Y8)
	VPERM2I128 $0x02, 32(SP), Y5, Y12
	RT4NEXT(4(DI), Y8)
	VPERM2I128 $0x02, 64(SP), Y6, Y12
	RT4NEXT(8(DI), Y8)
	VPERM2I128 $0x02, 96(SP), Y7, Y12
	RT4NEXT(12(DI), Y8)
	VPERM2I128 $0x13, 0(SP), Y4, Y12
	RT4NEXT(16(DI), Y8)
	VPERM2I128 $0x13, 32(SP), Y5, Y12
	RT4NEXT(20(DI), Y8)
	VPERM2I128 $0x13, 64(SP), Y6, Y12
	RT4NEXT(24(DI), Y8)
	VPERM2I128 $0x13, 96(SP), Y7, Y12
	RT4NEXT(28(DI), Y8)
	RTSCALE8(X4, Y4)
	RT4ACC((DX), (R11), Y8, Y0)
	RTPREFETCH
	ADDQ $18, SI
	ADDQ $18, R10
	ADDQ $32, DI
	ADDQ $4, DX
	ADDQ $4, R11
	DECQ CX
	JNZ  q4t1block

	MOVQ 128(SP), R15
	VMOVUPS Y0, (R15)
	RTNEXTGROUP(q4t1group)
	VZEROUPPER
	RET
