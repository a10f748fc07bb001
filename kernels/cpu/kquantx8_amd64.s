//go:build amd64 && !noasm

#include "textflag.h"

// The kernels for Q4_K, Q5_K and Q6_K weights in the ×8 layout (pack.go):
// one to four Q8_K activation rows (Q6_K: one to eight) against runs of eight-row groups. Every piece
// of a GGML block (an F16 field, or a four-byte word) sits with the other
// seven rows' copies of it, so one 32-byte load is one word of eight rows,
// lane l = row l, and the super-block's arithmetic runs on eight rows at
// once in the lanes, with nothing to transpose or sum across lanes:
//
//   - the sub-blocks' 6-bit scales and mins of the eight rows are unpacked
//     from three words with lane-wise shifts and masks, and one VPSHUFB
//     spreads sub-block j's to both words of each lane ([s, s]), kept on
//     the stack for the super-block;
//   - a word of quants meets each activation row's four values, broadcast,
//     in VPMADDUBSW (unsigned quants, signed activations); the int16 pairs
//     add up while they cannot overflow (Q4_K: 16 products of at most
//     15·128; Q5_K: 8 of 31·128; Q6_K: 4 of 63·128), and VPMADDWD with the
//     sub-block's [s, s] widens them to int32 and applies the scale;
//   - the mins (Q4_K, Q5_K) and Q6_K's offset of 32 meet the activation
//     row's sums per 16 (bs) in VPMADDWD.
//
// A super-block's integer sums are exact, and the float steps that follow
// are those of the one-row kernels (kquant_amd64.s), in the same order and
// with the same operand order, lane by lane: each row's result has the bits
// of the Go reference.
//
// Registers: Y0-Y3 activation row a's int32 sums, Y4-Y7 its int16 sums of
// a sub-block (then its mins' or offset's sum), Y8 a word of quants, Y9
// scratch, Y15 bytes of 0x0F. SI walks the weights, super-block after
// super-block, group after group; DI is activation row 0's values of the
// super-block, the rows R13 bytes apart (R14 = 3·R13); DX its scale, the
// rows' AX bytes apart (BX = 3·AX); R9 its sums per 16, the rows 8·AX
// bytes apart (R10 walks them); CX the super-blocks left, R11 the groups
// left, R12 the group's results for row 0, the rows R8 bytes apart. The
// Q6_K kernel's five-to-eight-row path holds rows 4-7's int32 sums in
// Y4-Y7 and a word pair in Y10 and Y12 (see its comment below).

// kx8lo<>+32j spreads byte j of each lane's word to both words, zero
// extended: [s_j, s_j] for VPMADDWD.

DATA kx8lo<>+0(SB)/8, $0x8004800480008000
DATA kx8lo<>+8(SB)/8, $0x800c800c80088008
DATA kx8lo<>+16(SB)/8, $0x8004800480008000
DATA kx8lo<>+24(SB)/8, $0x800c800c80088008
DATA kx8lo<>+32(SB)/8, $0x8005800580018001
DATA kx8lo<>+40(SB)/8, $0x800d800d80098009
DATA kx8lo<>+48(SB)/8, $0x8005800580018001
DATA kx8lo<>+56(SB)/8, $0x800d800d80098009
DATA kx8lo<>+64(SB)/8, $0x8006800680028002
DATA kx8lo<>+72(SB)/8, $0x800e800e800a800a
DATA kx8lo<>+80(SB)/8, $0x8006800680028002
DATA kx8lo<>+88(SB)/8, $0x800e800e800a800a
DATA kx8lo<>+96(SB)/8, $0x8007800780038003
DATA kx8lo<>+104(SB)/8, $0x800f800f800b800b
DATA kx8lo<>+112(SB)/8, $0x8007800780038003
DATA kx8lo<>+120(SB)/8, $0x800f800f800b800b
GLOBL kx8lo<>(SB), RODATA|NOPTR, $128

// kx8hi<>+32j puts byte j of each lane's word in the high byte of both
// words: VPSRAW $8 then gives [s_j, s_j] sign extended (Q6_K's scales).

DATA kx8hi<>+0(SB)/8, $0x0480048000800080
DATA kx8hi<>+8(SB)/8, $0x0c800c8008800880
DATA kx8hi<>+16(SB)/8, $0x0480048000800080
DATA kx8hi<>+24(SB)/8, $0x0c800c8008800880
DATA kx8hi<>+32(SB)/8, $0x0580058001800180
DATA kx8hi<>+40(SB)/8, $0x0d800d8009800980
DATA kx8hi<>+48(SB)/8, $0x0580058001800180
DATA kx8hi<>+56(SB)/8, $0x0d800d8009800980
DATA kx8hi<>+64(SB)/8, $0x0680068002800280
DATA kx8hi<>+72(SB)/8, $0x0e800e800a800a80
DATA kx8hi<>+80(SB)/8, $0x0680068002800280
DATA kx8hi<>+88(SB)/8, $0x0e800e800a800a80
DATA kx8hi<>+96(SB)/8, $0x0780078003800380
DATA kx8hi<>+104(SB)/8, $0x0f800f800b800b80
DATA kx8hi<>+112(SB)/8, $0x0780078003800380
DATA kx8hi<>+120(SB)/8, $0x0f800f800b800b80
GLOBL kx8hi<>(SB), RODATA|NOPTR, $128

// kx8pr<>+32i gives bytes 2i and 2i+1 of each lane's word as two words,
// after VPSRAW $8: Q6_K's scales of two sub-blocks, against a pair of sums
// per 16.

DATA kx8pr<>+0(SB)/8, $0x0580048001800080
DATA kx8pr<>+8(SB)/8, $0x0d800c8009800880
DATA kx8pr<>+16(SB)/8, $0x0580048001800080
DATA kx8pr<>+24(SB)/8, $0x0d800c8009800880
DATA kx8pr<>+32(SB)/8, $0x0780068003800280
DATA kx8pr<>+40(SB)/8, $0x0f800e800b800a80
DATA kx8pr<>+48(SB)/8, $0x0780068003800280
DATA kx8pr<>+56(SB)/8, $0x0f800e800b800a80
GLOBL kx8pr<>(SB), RODATA|NOPTR, $64

DATA kx8b3f<>+0(SB)/4, $0x3f3f3f3f
GLOBL kx8b3f<>(SB), RODATA|NOPTR, $4
DATA kx8b03<>+0(SB)/4, $0x03030303
GLOBL kx8b03<>(SB), RODATA|NOPTR, $4

// Activation row a's four values at x: the first word of a sub-block sets
// its int16 sums (KF), the others add to them (KN).
#define KF(x, T) \
	VPBROADCASTD x, Y9 \
	VPMADDUBSW   Y9, Y8, T

#define KN(x, T) \
	VPBROADCASTD x, Y9 \
	VPMADDUBSW   Y9, Y8, Y9 \
	VPADDW       Y9, T, T

#define KF1(x) \
	KF(x(DI), Y4)

#define KF2(x) \
	KF(x(DI), Y4) \
	KF(x(DI)(R13*1), Y5)

#define KF3(x) \
	KF(x(DI), Y4) \
	KF(x(DI)(R13*1), Y5) \
	KF(x(DI)(R13*2), Y6)

#define KF4(x) \
	KF(x(DI), Y4) \
	KF(x(DI)(R13*1), Y5) \
	KF(x(DI)(R13*2), Y6) \
	KF(x(DI)(R14*1), Y7)

#define KN1(x) \
	KN(x(DI), Y4)

#define KN2(x) \
	KN(x(DI), Y4) \
	KN(x(DI)(R13*1), Y5)

#define KN3(x) \
	KN(x(DI), Y4) \
	KN(x(DI)(R13*1), Y5) \
	KN(x(DI)(R13*2), Y6)

#define KN4(x) \
	KN(x(DI), Y4) \
	KN(x(DI)(R13*1), Y5) \
	KN(x(DI)(R13*2), Y6) \
	KN(x(DI)(R14*1), Y7)

// KS applies the sub-block's scales at s(SP) to the int16 sums T and adds
// them to the row's int32 sums I.
#define KS(s, T, I) \
	VPMADDWD s(SP), T, T \
	VPADDD   T, I, I

#define KS1(s) \
	KS(s, Y4, Y0)

#define KS2(s) \
	KS(s, Y4, Y0) \
	KS(s, Y5, Y1)

#define KS3(s) \
	KS(s, Y4, Y0) \
	KS(s, Y5, Y1) \
	KS(s, Y6, Y2)

#define KS4(s) \
	KS(s, Y4, Y0) \
	KS(s, Y5, Y1) \
	KS(s, Y6, Y2) \
	KS(s, Y7, Y3)

// KGROUP starts a group: the activations' first super-block, the
// results (on the stack from acc) +0.
#define KGROUP(acc) \
	MOVQ    xq+8(FP), DI \
	MOVQ    xd+24(FP), DX \
	MOVQ    bs+32(FP), R9 \
	MOVQ    nb+40(FP), CX \
	VXORPS  Y9, Y9, Y9 \
	VMOVUPS Y9, acc(SP) \
	VMOVUPS Y9, acc+32(SP) \
	VMOVUPS Y9, acc+64(SP) \
	VMOVUPS Y9, acc+96(SP)

#define KNEXT(bytes, label) \
	ADDQ $bytes, SI \
	ADDQ $256, DI \
	ADDQ $4, DX \
	ADDQ $32, R9 \
	DECQ CX \
	JNZ  label

// KSTn stores the group's results of n activation rows.
#define KST1(acc) \
	MOVQ    R12, R10 \
	VMOVUPS acc+0(SP), Y9 \
	VMOVUPS Y9, (R10) \
	ADDQ    $32, R12

#define KST2(acc) \
	MOVQ    R12, R10 \
	VMOVUPS acc+0(SP), Y9 \
	VMOVUPS Y9, (R10) \
	ADDQ    R8, R10 \
	VMOVUPS acc+32(SP), Y9 \
	VMOVUPS Y9, (R10) \
	ADDQ    $32, R12

#define KST3(acc) \
	MOVQ    R12, R10 \
	VMOVUPS acc+0(SP), Y9 \
	VMOVUPS Y9, (R10) \
	ADDQ    R8, R10 \
	VMOVUPS acc+32(SP), Y9 \
	VMOVUPS Y9, (R10) \
	ADDQ    R8, R10 \
	VMOVUPS acc+64(SP), Y9 \
	VMOVUPS Y9, (R10) \
	ADDQ    $32, R12

#define KST4(acc) \
	MOVQ    R12, R10 \
	VMOVUPS acc+0(SP), Y9 \
	VMOVUPS Y9, (R10) \
	ADDQ    R8, R10 \
	VMOVUPS acc+32(SP), Y9 \
	VMOVUPS Y9, (R10) \
	ADDQ    R8, R10 \
	VMOVUPS acc+64(SP), Y9 \
	VMOVUPS Y9, (R10) \
	ADDQ    R8, R10 \
	VMOVUPS acc+96(SP), Y9 \
	VMOVUPS Y9, (R10) \
	ADDQ    $32, R12

// Q4_K. A group's super-block is 1152 bytes: the eight d (0) and dmin
// (16), the scale words V0-V2 (32, 64, 96), then the 32 words of quants
// (128 + 32i): word i holds values 64c + 4g to 64c + 4g + 3 (c = i/8,
// g = i%8) in its low nibbles, sub-block 2c, and 32 on in its high ones,
// sub-block 2c+1. Stack: [s_j, s_j] at 32j, [m_j, m_j] at 256 + 32j, the
// results at 512.

// Q4KPFD is how far ahead the kernel asks for weights: two super-blocks
// (one was as good from memory and slower from the L3 cache).
#define Q4KPFD 2304

// Q4KSCALES unpacks the eight rows' scales and mins (ScaleMinK4) to the
// stack: scales 0-3 are V0's six low bits, mins 0-3 V1's; scales 4-7 are
// V2's low nibbles and V0's top two bits, mins 4-7 V2's high nibbles and
// V1's top two bits.
#define Q4KSCALES \
	PREFETCHT0   Q4KPFD+1024(SI) \
	PREFETCHT0   Q4KPFD+1088(SI) \
	VPBROADCASTD kx8b3f<>(SB), Y14 \
	VPBROADCASTD kx8b03<>(SB), Y13 \
	VMOVDQU      32(SI), Y10 \
	VMOVDQU      64(SI), Y11 \
	VMOVDQU      96(SI), Y12 \
	VPAND        Y14, Y10, Y8 \
	VPSHUFB      kx8lo<>+0(SB), Y8, Y9 \
	VMOVDQU      Y9, 0(SP) \
	VPSHUFB      kx8lo<>+32(SB), Y8, Y9 \
	VMOVDQU      Y9, 32(SP) \
	VPSHUFB      kx8lo<>+64(SB), Y8, Y9 \
	VMOVDQU      Y9, 64(SP) \
	VPSHUFB      kx8lo<>+96(SB), Y8, Y9 \
	VMOVDQU      Y9, 96(SP) \
	VPAND        Y14, Y11, Y8 \
	VPSHUFB      kx8lo<>+0(SB), Y8, Y9 \
	VMOVDQU      Y9, 256(SP) \
	VPSHUFB      kx8lo<>+32(SB), Y8, Y9 \
	VMOVDQU      Y9, 288(SP) \
	VPSHUFB      kx8lo<>+64(SB), Y8, Y9 \
	VMOVDQU      Y9, 320(SP) \
	VPSHUFB      kx8lo<>+96(SB), Y8, Y9 \
	VMOVDQU      Y9, 352(SP) \
	VPSRLD       $6, Y10, Y10 \
	VPAND        Y13, Y10, Y10 \
	VPSLLD       $4, Y10, Y10 \
	VPAND        Y15, Y12, Y8 \
	VPOR         Y10, Y8, Y8 \
	VPSHUFB      kx8lo<>+0(SB), Y8, Y9 \
	VMOVDQU      Y9, 128(SP) \
	VPSHUFB      kx8lo<>+32(SB), Y8, Y9 \
	VMOVDQU      Y9, 160(SP) \
	VPSHUFB      kx8lo<>+64(SB), Y8, Y9 \
	VMOVDQU      Y9, 192(SP) \
	VPSHUFB      kx8lo<>+96(SB), Y8, Y9 \
	VMOVDQU      Y9, 224(SP) \
	VPSRLD       $6, Y11, Y11 \
	VPAND        Y13, Y11, Y11 \
	VPSLLD       $4, Y11, Y11 \
	VPSRLD       $4, Y12, Y8 \
	VPAND        Y15, Y8, Y8 \
	VPOR         Y11, Y8, Y8 \
	VPSHUFB      kx8lo<>+0(SB), Y8, Y9 \
	VMOVDQU      Y9, 384(SP) \
	VPSHUFB      kx8lo<>+32(SB), Y8, Y9 \
	VMOVDQU      Y9, 416(SP) \
	VPSHUFB      kx8lo<>+64(SB), Y8, Y9 \
	VMOVDQU      Y9, 448(SP) \
	VPSHUFB      kx8lo<>+96(SB), Y8, Y9 \
	VMOVDQU      Y9, 480(SP)

// Q4KLO adds sub-block 2c (the low nibbles of chunk c) to the rows'
// sums; Q4KHI sub-block 2c+1 (the high nibbles).
#define Q4KLO(F, N, S, c) \
	PREFETCHT0 Q4KPFD+256*c(SI) \
	PREFETCHT0 Q4KPFD+256*c+64(SI) \
	VPAND      128+256*c(SI), Y15, Y8 \
	F(64*c+0) \
	VPAND      160+256*c(SI), Y15, Y8 \
	N(64*c+4) \
	VPAND      192+256*c(SI), Y15, Y8 \
	N(64*c+8) \
	VPAND      224+256*c(SI), Y15, Y8 \
	N(64*c+12) \
	VPAND      256+256*c(SI), Y15, Y8 \
	N(64*c+16) \
	VPAND      288+256*c(SI), Y15, Y8 \
	N(64*c+20) \
	VPAND      320+256*c(SI), Y15, Y8 \
	N(64*c+24) \
	VPAND      352+256*c(SI), Y15, Y8 \
	N(64*c+28) \
	S(64*c)

#define Q4KHI(F, N, S, c) \
	PREFETCHT0 Q4KPFD+256*c+128(SI) \
	PREFETCHT0 Q4KPFD+256*c+192(SI) \
	VMOVDQU    128+256*c(SI), Y8 \
	VPSRLW     $4, Y8, Y8 \
	VPAND      Y15, Y8, Y8 \
	F(64*c+32) \
	VMOVDQU    160+256*c(SI), Y8 \
	VPSRLW     $4, Y8, Y8 \
	VPAND      Y15, Y8, Y8 \
	N(64*c+36) \
	VMOVDQU    192+256*c(SI), Y8 \
	VPSRLW     $4, Y8, Y8 \
	VPAND      Y15, Y8, Y8 \
	N(64*c+40) \
	VMOVDQU    224+256*c(SI), Y8 \
	VPSRLW     $4, Y8, Y8 \
	VPAND      Y15, Y8, Y8 \
	N(64*c+44) \
	VMOVDQU    256+256*c(SI), Y8 \
	VPSRLW     $4, Y8, Y8 \
	VPAND      Y15, Y8, Y8 \
	N(64*c+48) \
	VMOVDQU    288+256*c(SI), Y8 \
	VPSRLW     $4, Y8, Y8 \
	VPAND      Y15, Y8, Y8 \
	N(64*c+52) \
	VMOVDQU    320+256*c(SI), Y8 \
	VPSRLW     $4, Y8, Y8 \
	VPAND      Y15, Y8, Y8 \
	N(64*c+56) \
	VMOVDQU    352+256*c(SI), Y8 \
	VPSRLW     $4, Y8, Y8 \
	VPAND      Y15, Y8, Y8 \
	N(64*c+60) \
	S(64*c+32)

// Q4KFIN ends a super-block for one activation row (sums per 16 at
// R10, scale at xd, result at acc on the stack): T = Σ m_j·(bs_2j +
// bs_2j+1), then acc += (d·d_x)·I − (dmin·d_x)·T, Y10 and Y11 holding the
// rows' d and dmin.
#define Q4KFIN(I, T, xd, acc) \
	VPBROADCASTD 0(R10), Y9 \
	VPMADDWD     256(SP), Y9, T \
	VPBROADCASTD 4(R10), Y9 \
	VPMADDWD     288(SP), Y9, Y9 \
	VPADDD       Y9, T, T \
	VPBROADCASTD 8(R10), Y9 \
	VPMADDWD     320(SP), Y9, Y9 \
	VPADDD       Y9, T, T \
	VPBROADCASTD 12(R10), Y9 \
	VPMADDWD     352(SP), Y9, Y9 \
	VPADDD       Y9, T, T \
	VPBROADCASTD 16(R10), Y9 \
	VPMADDWD     384(SP), Y9, Y9 \
	VPADDD       Y9, T, T \
	VPBROADCASTD 20(R10), Y9 \
	VPMADDWD     416(SP), Y9, Y9 \
	VPADDD       Y9, T, T \
	VPBROADCASTD 24(R10), Y9 \
	VPMADDWD     448(SP), Y9, Y9 \
	VPADDD       Y9, T, T \
	VPBROADCASTD 28(R10), Y9 \
	VPMADDWD     480(SP), Y9, Y9 \
	VPADDD       Y9, T, T \
	VBROADCASTSS xd, Y12 \
	VMULPS       Y12, Y10, Y13 \
	VCVTDQ2PS    I, I \
	VMULPS       I, Y13, Y13 \
	VMULPS       Y12, Y11, Y14 \
	VCVTDQ2PS    T, T \
	VMULPS       T, Y14, Y14 \
	VSUBPS       Y14, Y13, Y13 \
	VMOVUPS      acc(SP), Y14 \
	VADDPS       Y13, Y14, Y14 \
	VMOVUPS      Y14, acc(SP)

#define Q4KFIN1 \
	VCVTPH2PS (SI), Y10 \
	VCVTPH2PS 16(SI), Y11 \
	MOVQ      R9, R10 \
	Q4KFIN(Y0, Y4, (DX), 512)

#define Q4KFIN2 \
	VCVTPH2PS (SI), Y10 \
	VCVTPH2PS 16(SI), Y11 \
	MOVQ      R9, R10 \
	Q4KFIN(Y0, Y4, (DX), 512) \
	LEAQ      (R10)(AX*8), R10 \
	Q4KFIN(Y1, Y5, (DX)(AX*1), 544)

#define Q4KFIN3 \
	VCVTPH2PS (SI), Y10 \
	VCVTPH2PS 16(SI), Y11 \
	MOVQ      R9, R10 \
	Q4KFIN(Y0, Y4, (DX), 512) \
	LEAQ      (R10)(AX*8), R10 \
	Q4KFIN(Y1, Y5, (DX)(AX*1), 544) \
	LEAQ      (R10)(AX*8), R10 \
	Q4KFIN(Y2, Y6, (DX)(AX*2), 576)

#define Q4KFIN4 \
	VCVTPH2PS (SI), Y10 \
	VCVTPH2PS 16(SI), Y11 \
	MOVQ      R9, R10 \
	Q4KFIN(Y0, Y4, (DX), 512) \
	LEAQ      (R10)(AX*8), R10 \
	Q4KFIN(Y1, Y5, (DX)(AX*1), 544) \
	LEAQ      (R10)(AX*8), R10 \
	Q4KFIN(Y2, Y6, (DX)(AX*2), 576) \
	LEAQ      (R10)(AX*8), R10 \
	Q4KFIN(Y3, Y7, (DX)(BX*1), 608)

// Q4KC1 adds chunk c (sub-blocks 2c and 2c+1) to one activation row's
// sums, each word loaded once for both its nibbles.
#define Q4KC1(c) \
	PREFETCHT0 Q4KPFD+256*c(SI) \
	PREFETCHT0 Q4KPFD+256*c+64(SI) \
	PREFETCHT0 Q4KPFD+256*c+128(SI) \
	PREFETCHT0 Q4KPFD+256*c+192(SI) \
	VMOVDQU    128+256*c(SI), Y10 \
	VPAND      Y15, Y10, Y8 \
	KF(64*c+0(DI), Y4) \
	VPSRLW     $4, Y10, Y8 \
	VPAND      Y15, Y8, Y8 \
	KF(64*c+32(DI), Y5) \
	VMOVDQU    160+256*c(SI), Y10 \
	VPAND      Y15, Y10, Y8 \
	KN(64*c+4(DI), Y4) \
	VPSRLW     $4, Y10, Y8 \
	VPAND      Y15, Y8, Y8 \
	KN(64*c+36(DI), Y5) \
	VMOVDQU    192+256*c(SI), Y10 \
	VPAND      Y15, Y10, Y8 \
	KN(64*c+8(DI), Y4) \
	VPSRLW     $4, Y10, Y8 \
	VPAND      Y15, Y8, Y8 \
	KN(64*c+40(DI), Y5) \
	VMOVDQU    224+256*c(SI), Y10 \
	VPAND      Y15, Y10, Y8 \
	KN(64*c+12(DI), Y4) \
	VPSRLW     $4, Y10, Y8 \
	VPAND      Y15, Y8, Y8 \
	KN(64*c+44(DI), Y5) \
	VMOVDQU    256+256*c(SI), Y10 \
	VPAND      Y15, Y10, Y8 \
	KN(64*c+16(DI), Y4) \
	VPSRLW     $4, Y10, Y8 \
	VPAND      Y15, Y8, Y8 \
	KN(64*c+48(DI), Y5) \
	VMOVDQU    288+256*c(SI), Y10 \
	VPAND      Y15, Y10, Y8 \
	KN(64*c+20(DI), Y4) \
	VPSRLW     $4, Y10, Y8 \
	VPAND      Y15, Y8, Y8 \
	KN(64*c+52(DI), Y5) \
	VMOVDQU    320+256*c(SI), Y10 \
	VPAND      Y15, Y10, Y8 \
	KN(64*c+24(DI), Y4) \
	VPSRLW     $4, Y10, Y8 \
	VPAND      Y15, Y8, Y8 \
	KN(64*c+56(DI), Y5) \
	VMOVDQU    352+256*c(SI), Y10 \
	VPAND      Y15, Y10, Y8 \
	KN(64*c+28(DI), Y4) \
	VPSRLW     $4, Y10, Y8 \
	VPAND      Y15, Y8, Y8 \
	KN(64*c+60(DI), Y5) \
	KS(64*c, Y4, Y0) \
	KS(64*c+32, Y5, Y0)

// Q4KBLOCK1 is one super-block of a group for one activation row.
#define Q4KBLOCK1 \
	Q4KSCALES \
	VPXOR Y0, Y0, Y0 \
	Q4KC1(0) \
	Q4KC1(1) \
	Q4KC1(2) \
	Q4KC1(3) \
	Q4KFIN1

// Q4KBLOCK is one super-block of a group for n activation rows.
#define Q4KBLOCK(F, N, S, FIN) \
	Q4KSCALES \
	VPXOR Y0, Y0, Y0 \
	VPXOR Y1, Y1, Y1 \
	VPXOR Y2, Y2, Y2 \
	VPXOR Y3, Y3, Y3 \
	Q4KLO(F, N, S, 0) \
	Q4KHI(F, N, S, 0) \
	Q4KLO(F, N, S, 1) \
	Q4KHI(F, N, S, 1) \
	Q4KLO(F, N, S, 2) \
	Q4KHI(F, N, S, 2) \
	Q4KLO(F, N, S, 3) \
	Q4KHI(F, N, S, 3) \
	FIN

// Q5_K. A group's super-block is 1408 bytes: d, dmin and the scale words
// as for Q4_K (0 to 127), the eight words of qh (128 + 32g), then the 32
// words of quants (384 + 32i), nibbles as for Q4_K. Word g of qh holds the
// fifth bits of quant word 8c + g's values: bit 2c of each byte for its low
// nibble (sub-block 2c), bit 2c + 1 for its high one; a word shift brings
// it to bit 4 and the mask 0x10 (Y14) drops what crossed from the
// neighbouring byte. The int16 sums take four words at most (8 products
// of at most 31·128). Stack as for Q4_K.

// Q5KPFD is how far ahead the kernel asks for weights: two super-blocks.
#define Q5KPFD 2816

DATA kx8b10<>+0(SB)/4, $0x10101010
GLOBL kx8b10<>(SB), RODATA|NOPTR, $4

#define Q5KSUB0(F, N, S) \
	PREFETCHT0 Q5KPFD+0(SI) \
	PREFETCHT0 Q5KPFD+64(SI) \
	PREFETCHT0 Q5KPFD+128(SI) \
	VPAND      384(SI), Y15, Y8 \
	VMOVDQU    128(SI), Y11 \
	VPSLLW     $4, Y11, Y11 \
	VPAND      Y14, Y11, Y11 \
	VPOR       Y11, Y8, Y8 \
	F(0) \
	VPAND      416(SI), Y15, Y8 \
	VMOVDQU    160(SI), Y11 \
	VPSLLW     $4, Y11, Y11 \
	VPAND      Y14, Y11, Y11 \
	VPOR       Y11, Y8, Y8 \
	N(4) \
	VPAND      448(SI), Y15, Y8 \
	VMOVDQU    192(SI), Y11 \
	VPSLLW     $4, Y11, Y11 \
	VPAND      Y14, Y11, Y11 \
	VPOR       Y11, Y8, Y8 \
	N(8) \
	VPAND      480(SI), Y15, Y8 \
	VMOVDQU    224(SI), Y11 \
	VPSLLW     $4, Y11, Y11 \
	VPAND      Y14, Y11, Y11 \
	VPOR       Y11, Y8, Y8 \
	N(12) \
	S(0) \
	VPAND      512(SI), Y15, Y8 \
	VMOVDQU    256(SI), Y11 \
	VPSLLW     $4, Y11, Y11 \
	VPAND      Y14, Y11, Y11 \
	VPOR       Y11, Y8, Y8 \
	F(16) \
	VPAND      544(SI), Y15, Y8 \
	VMOVDQU    288(SI), Y11 \
	VPSLLW     $4, Y11, Y11 \
	VPAND      Y14, Y11, Y11 \
	VPOR       Y11, Y8, Y8 \
	N(20) \
	VPAND      576(SI), Y15, Y8 \
	VMOVDQU    320(SI), Y11 \
	VPSLLW     $4, Y11, Y11 \
	VPAND      Y14, Y11, Y11 \
	VPOR       Y11, Y8, Y8 \
	N(24) \
	VPAND      608(SI), Y15, Y8 \
	VMOVDQU    352(SI), Y11 \
	VPSLLW     $4, Y11, Y11 \
	VPAND      Y14, Y11, Y11 \
	VPOR       Y11, Y8, Y8 \
	N(28) \
	S(0)

#define Q5KSUB1(F, N, S) \
	PREFETCHT0 Q5KPFD+192(SI) \
	PREFETCHT0 Q5KPFD+256(SI) \
	PREFETCHT0 Q5KPFD+320(SI) \
	VMOVDQU    384(SI), Y8 \
	VPSRLW     $4, Y8, Y8 \
	VPAND      Y15, Y8, Y8 \
	VMOVDQU    128(SI), Y11 \
	VPSLLW     $3, Y11, Y11 \
	VPAND      Y14, Y11, Y11 \
	VPOR       Y11, Y8, Y8 \
	F(32) \
	VMOVDQU    416(SI), Y8 \
	VPSRLW     $4, Y8, Y8 \
	VPAND      Y15, Y8, Y8 \
	VMOVDQU    160(SI), Y11 \
	VPSLLW     $3, Y11, Y11 \
	VPAND      Y14, Y11, Y11 \
	VPOR       Y11, Y8, Y8 \
	N(36) \
	VMOVDQU    448(SI), Y8 \
	VPSRLW     $4, Y8, Y8 \
	VPAND      Y15, Y8, Y8 \
	VMOVDQU    192(SI), Y11 \
	VPSLLW     $3, Y11, Y11 \
	VPAND      Y14, Y11, Y11 \
	VPOR       Y11, Y8, Y8 \
	N(40) \
	VMOVDQU    480(SI), Y8 \
	VPSRLW     $4, Y8, Y8 \
	VPAND      Y15, Y8, Y8 \
	VMOVDQU    224(SI), Y11 \
	VPSLLW     $3, Y11, Y11 \
	VPAND      Y14, Y11, Y11 \
	VPOR       Y11, Y8, Y8 \
	N(44) \
	S(32) \
	VMOVDQU    512(SI), Y8 \
	VPSRLW     $4, Y8, Y8 \
	VPAND      Y15, Y8, Y8 \
	VMOVDQU    256(SI), Y11 \
	VPSLLW     $3, Y11, Y11 \
	VPAND      Y14, Y11, Y11 \
	VPOR       Y11, Y8, Y8 \
	F(48) \
	VMOVDQU    544(SI), Y8 \
	VPSRLW     $4, Y8, Y8 \
	VPAND      Y15, Y8, Y8 \
	VMOVDQU    288(SI), Y11 \
	VPSLLW     $3, Y11, Y11 \
	VPAND      Y14, Y11, Y11 \
	VPOR       Y11, Y8, Y8 \
	N(52) \
	VMOVDQU    576(SI), Y8 \
	VPSRLW     $4, Y8, Y8 \
	VPAND      Y15, Y8, Y8 \
	VMOVDQU    320(SI), Y11 \
	VPSLLW     $3, Y11, Y11 \
	VPAND      Y14, Y11, Y11 \
	VPOR       Y11, Y8, Y8 \
	N(56) \
	VMOVDQU    608(SI), Y8 \
	VPSRLW     $4, Y8, Y8 \
	VPAND      Y15, Y8, Y8 \
	VMOVDQU    352(SI), Y11 \
	VPSLLW     $3, Y11, Y11 \
	VPAND      Y14, Y11, Y11 \
	VPOR       Y11, Y8, Y8 \
	N(60) \
	S(32)

#define Q5KSUB2(F, N, S) \
	PREFETCHT0 Q5KPFD+384(SI) \
	PREFETCHT0 Q5KPFD+448(SI) \
	PREFETCHT0 Q5KPFD+512(SI) \
	VPAND      640(SI), Y15, Y8 \
	VMOVDQU    128(SI), Y11 \
	VPSLLW     $2, Y11, Y11 \
	VPAND      Y14, Y11, Y11 \
	VPOR       Y11, Y8, Y8 \
	F(64) \
	VPAND      672(SI), Y15, Y8 \
	VMOVDQU    160(SI), Y11 \
	VPSLLW     $2, Y11, Y11 \
	VPAND      Y14, Y11, Y11 \
	VPOR       Y11, Y8, Y8 \
	N(68) \
	VPAND      704(SI), Y15, Y8 \
	VMOVDQU    192(SI), Y11 \
	VPSLLW     $2, Y11, Y11 \
	VPAND      Y14, Y11, Y11 \
	VPOR       Y11, Y8, Y8 \
	N(72) \
	VPAND      736(SI), Y15, Y8 \
	VMOVDQU    224(SI), Y11 \
	VPSLLW     $2, Y11, Y11 \
	VPAND      Y14, Y11, Y11 \
	VPOR       Y11, Y8, Y8 \
	N(76) \
	S(64) \
	VPAND      768(SI), Y15, Y8 \
	VMOVDQU    256(SI), Y11 \
	VPSLLW     $2, Y11, Y11 \
	VPAND      Y14, Y11, Y11 \
	VPOR       Y11, Y8, Y8 \
	F(80) \
	VPAND      800(SI), Y15, Y8 \
	VMOVDQU    288(SI), Y11 \
	VPSLLW     $2, Y11, Y11 \
	VPAND      Y14, Y11, Y11 \
	VPOR       Y11, Y8, Y8 \
	N(84) \
	VPAND      832(SI), Y15, Y8 \
	VMOVDQU    320(SI), Y11 \
	VPSLLW     $2, Y11, Y11 \
	VPAND      Y14, Y11, Y11 \
	VPOR       Y11, Y8, Y8 \
	N(88) \
	VPAND      864(SI), Y15, Y8 \
	VMOVDQU    352(SI), Y11 \
	VPSLLW     $2, Y11, Y11 \
	VPAND      Y14, Y11, Y11 \
	VPOR       Y11, Y8, Y8 \
	N(92) \
	S(64)

#define Q5KSUB3(F, N, S) \
	PREFETCHT0 Q5KPFD+576(SI) \
	PREFETCHT0 Q5KPFD+640(SI) \
	PREFETCHT0 Q5KPFD+704(SI) \
	VMOVDQU    640(SI), Y8 \
	VPSRLW     $4, Y8, Y8 \
	VPAND      Y15, Y8, Y8 \
	VMOVDQU    128(SI), Y11 \
	VPSLLW     $1, Y11, Y11 \
	VPAND      Y14, Y11, Y11 \
	VPOR       Y11, Y8, Y8 \
	F(96) \
	VMOVDQU    672(SI), Y8 \
	VPSRLW     $4, Y8, Y8 \
	VPAND      Y15, Y8, Y8 \
	VMOVDQU    160(SI), Y11 \
	VPSLLW     $1, Y11, Y11 \
	VPAND      Y14, Y11, Y11 \
	VPOR       Y11, Y8, Y8 \
	N(100) \
	VMOVDQU    704(SI), Y8 \
	VPSRLW     $4, Y8, Y8 \
	VPAND      Y15, Y8, Y8 \
	VMOVDQU    192(SI), Y11 \
	VPSLLW     $1, Y11, Y11 \
	VPAND      Y14, Y11, Y11 \
	VPOR       Y11, Y8, Y8 \
	N(104) \
	VMOVDQU    736(SI), Y8 \
	VPSRLW     $4, Y8, Y8 \
	VPAND      Y15, Y8, Y8 \
	VMOVDQU    224(SI), Y11 \
	VPSLLW     $1, Y11, Y11 \
	VPAND      Y14, Y11, Y11 \
	VPOR       Y11, Y8, Y8 \
	N(108) \
	S(96) \
	VMOVDQU    768(SI), Y8 \
	VPSRLW     $4, Y8, Y8 \
	VPAND      Y15, Y8, Y8 \
	VMOVDQU    256(SI), Y11 \
	VPSLLW     $1, Y11, Y11 \
	VPAND      Y14, Y11, Y11 \
	VPOR       Y11, Y8, Y8 \
	F(112) \
	VMOVDQU    800(SI), Y8 \
	VPSRLW     $4, Y8, Y8 \
	VPAND      Y15, Y8, Y8 \
	VMOVDQU    288(SI), Y11 \
	VPSLLW     $1, Y11, Y11 \
	VPAND      Y14, Y11, Y11 \
	VPOR       Y11, Y8, Y8 \
	N(116) \
	VMOVDQU    832(SI), Y8 \
	VPSRLW     $4, Y8, Y8 \
	VPAND      Y15, Y8, Y8 \
	VMOVDQU    320(SI), Y11 \
	VPSLLW     $1, Y11, Y11 \
	VPAND      Y14, Y11, Y11 \
	VPOR       Y11, Y8, Y8 \
	N(120) \
	VMOVDQU    864(SI), Y8 \
	VPSRLW     $4, Y8, Y8 \
	VPAND      Y15, Y8, Y8 \
	VMOVDQU    352(SI), Y11 \
	VPSLLW     $1, Y11, Y11 \
	VPAND      Y14, Y11, Y11 \
	VPOR       Y11, Y8, Y8 \
	N(124) \
	S(96)

#define Q5KSUB4(F, N, S) \
	PREFETCHT0 Q5KPFD+768(SI) \
	PREFETCHT0 Q5KPFD+832(SI) \
	PREFETCHT0 Q5KPFD+896(SI) \
	VPAND      896(SI), Y15, Y8 \
	VPAND      128(SI), Y14, Y11 \
	VPOR       Y11, Y8, Y8 \
	F(128) \
	VPAND      928(SI), Y15, Y8 \
	VPAND      160(SI), Y14, Y11 \
	VPOR       Y11, Y8, Y8 \
	N(132) \
	VPAND      960(SI), Y15, Y8 \
	VPAND      192(SI), Y14, Y11 \
	VPOR       Y11, Y8, Y8 \
	N(136) \
	VPAND      992(SI), Y15, Y8 \
	VPAND      224(SI), Y14, Y11 \
	VPOR       Y11, Y8, Y8 \
	N(140) \
	S(128) \
	VPAND      1024(SI), Y15, Y8 \
	VPAND      256(SI), Y14, Y11 \
	VPOR       Y11, Y8, Y8 \
	F(144) \
	VPAND      1056(SI), Y15, Y8 \
	VPAND      288(SI), Y14, Y11 \
	VPOR       Y11, Y8, Y8 \
	N(148) \
	VPAND      1088(SI), Y15, Y8 \
	VPAND      320(SI), Y14, Y11 \
	VPOR       Y11, Y8, Y8 \
	N(152) \
	VPAND      1120(SI), Y15, Y8 \
	VPAND      352(SI), Y14, Y11 \
	VPOR       Y11, Y8, Y8 \
	N(156) \
	S(128)

#define Q5KSUB5(F, N, S) \
	PREFETCHT0 Q5KPFD+960(SI) \
	PREFETCHT0 Q5KPFD+1024(SI) \
	PREFETCHT0 Q5KPFD+1088(SI) \
	VMOVDQU    896(SI), Y8 \
	VPSRLW     $4, Y8, Y8 \
	VPAND      Y15, Y8, Y8 \
	VMOVDQU    128(SI), Y11 \
	VPSRLW     $1, Y11, Y11 \
	VPAND      Y14, Y11, Y11 \
	VPOR       Y11, Y8, Y8 \
	F(160) \
	VMOVDQU    928(SI), Y8 \
	VPSRLW     $4, Y8, Y8 \
	VPAND      Y15, Y8, Y8 \
	VMOVDQU    160(SI), Y11 \
	VPSRLW     $1, Y11, Y11 \
	VPAND      Y14, Y11, Y11 \
	VPOR       Y11, Y8, Y8 \
	N(164) \
	VMOVDQU    960(SI), Y8 \
	VPSRLW     $4, Y8, Y8 \
	VPAND      Y15, Y8, Y8 \
	VMOVDQU    192(SI), Y11 \
	VPSRLW     $1, Y11, Y11 \
	VPAND      Y14, Y11, Y11 \
	VPOR       Y11, Y8, Y8 \
	N(168) \
	VMOVDQU    992(SI), Y8 \
	VPSRLW     $4, Y8, Y8 \
	VPAND      Y15, Y8, Y8 \
	VMOVDQU    224(SI), Y11 \
	VPSRLW     $1, Y11, Y11 \
	VPAND      Y14, Y11, Y11 \
	VPOR       Y11, Y8, Y8 \
	N(172) \
	S(160) \
	VMOVDQU    1024(SI), Y8 \
	VPSRLW     $4, Y8, Y8 \
	VPAND      Y15, Y8, Y8 \
	VMOVDQU    256(SI), Y11 \
	VPSRLW     $1, Y11, Y11 \
	VPAND      Y14, Y11, Y11 \
	VPOR       Y11, Y8, Y8 \
	F(176) \
	VMOVDQU    1056(SI), Y8 \
	VPSRLW     $4, Y8, Y8 \
	VPAND      Y15, Y8, Y8 \
	VMOVDQU    288(SI), Y11 \
	VPSRLW     $1, Y11, Y11 \
	VPAND      Y14, Y11, Y11 \
	VPOR       Y11, Y8, Y8 \
	N(180) \
	VMOVDQU    1088(SI), Y8 \
	VPSRLW     $4, Y8, Y8 \
	VPAND      Y15, Y8, Y8 \
	VMOVDQU    320(SI), Y11 \
	VPSRLW     $1, Y11, Y11 \
	VPAND      Y14, Y11, Y11 \
	VPOR       Y11, Y8, Y8 \
	N(184) \
	VMOVDQU    1120(SI), Y8 \
	VPSRLW     $4, Y8, Y8 \
	VPAND      Y15, Y8, Y8 \
	VMOVDQU    352(SI), Y11 \
	VPSRLW     $1, Y11, Y11 \
	VPAND      Y14, Y11, Y11 \
	VPOR       Y11, Y8, Y8 \
	N(188) \
	S(160)

#define Q5KSUB6(F, N, S) \
	PREFETCHT0 Q5KPFD+1152(SI) \
	PREFETCHT0 Q5KPFD+1216(SI) \
	PREFETCHT0 Q5KPFD+1280(SI) \
	VPAND      1152(SI), Y15, Y8 \
	VMOVDQU    128(SI), Y11 \
	VPSRLW     $2, Y11, Y11 \
	VPAND      Y14, Y11, Y11 \
	VPOR       Y11, Y8, Y8 \
	F(192) \
	VPAND      1184(SI), Y15, Y8 \
	VMOVDQU    160(SI), Y11 \
	VPSRLW     $2, Y11, Y11 \
	VPAND      Y14, Y11, Y11 \
	VPOR       Y11, Y8, Y8 \
	N(196) \
	VPAND      1216(SI), Y15, Y8 \
	VMOVDQU    192(SI), Y11 \
	VPSRLW     $2, Y11, Y11 \
	VPAND      Y14, Y11, Y11 \
	VPOR       Y11, Y8, Y8 \
	N(200) \
	VPAND      1248(SI), Y15, Y8 \
	VMOVDQU    224(SI), Y11 \
	VPSRLW     $2, Y11, Y11 \
	VPAND      Y14, Y11, Y11 \
	VPOR       Y11, Y8, Y8 \
	N(204) \
	S(192) \
	VPAND      1280(SI), Y15, Y8 \
	VMOVDQU    256(SI), Y11 \
	VPSRLW     $2, Y11, Y11 \
	VPAND      Y14, Y11, Y11 \
	VPOR       Y11, Y8, Y8 \
	F(208) \
	VPAND      1312(SI), Y15, Y8 \
	VMOVDQU    288(SI), Y11 \
	VPSRLW     $2, Y11, Y11 \
	VPAND      Y14, Y11, Y11 \
	VPOR       Y11, Y8, Y8 \
	N(212) \
	VPAND      1344(SI), Y15, Y8 \
	VMOVDQU    320(SI), Y11 \
	VPSRLW     $2, Y11, Y11 \
	VPAND      Y14, Y11, Y11 \
	VPOR       Y11, Y8, Y8 \
	N(216) \
	VPAND      1376(SI), Y15, Y8 \
	VMOVDQU    352(SI), Y11 \
	VPSRLW     $2, Y11, Y11 \
	VPAND      Y14, Y11, Y11 \
	VPOR       Y11, Y8, Y8 \
	N(220) \
	S(192)

#define Q5KSUB7(F, N, S) \
	PREFETCHT0 Q5KPFD+1344(SI) \
	PREFETCHT0 Q5KPFD+1408(SI) \
	PREFETCHT0 Q5KPFD+1472(SI) \
	VMOVDQU    1152(SI), Y8 \
	VPSRLW     $4, Y8, Y8 \
	VPAND      Y15, Y8, Y8 \
	VMOVDQU    128(SI), Y11 \
	VPSRLW     $3, Y11, Y11 \
	VPAND      Y14, Y11, Y11 \
	VPOR       Y11, Y8, Y8 \
	F(224) \
	VMOVDQU    1184(SI), Y8 \
	VPSRLW     $4, Y8, Y8 \
	VPAND      Y15, Y8, Y8 \
	VMOVDQU    160(SI), Y11 \
	VPSRLW     $3, Y11, Y11 \
	VPAND      Y14, Y11, Y11 \
	VPOR       Y11, Y8, Y8 \
	N(228) \
	VMOVDQU    1216(SI), Y8 \
	VPSRLW     $4, Y8, Y8 \
	VPAND      Y15, Y8, Y8 \
	VMOVDQU    192(SI), Y11 \
	VPSRLW     $3, Y11, Y11 \
	VPAND      Y14, Y11, Y11 \
	VPOR       Y11, Y8, Y8 \
	N(232) \
	VMOVDQU    1248(SI), Y8 \
	VPSRLW     $4, Y8, Y8 \
	VPAND      Y15, Y8, Y8 \
	VMOVDQU    224(SI), Y11 \
	VPSRLW     $3, Y11, Y11 \
	VPAND      Y14, Y11, Y11 \
	VPOR       Y11, Y8, Y8 \
	N(236) \
	S(224) \
	VMOVDQU    1280(SI), Y8 \
	VPSRLW     $4, Y8, Y8 \
	VPAND      Y15, Y8, Y8 \
	VMOVDQU    256(SI), Y11 \
	VPSRLW     $3, Y11, Y11 \
	VPAND      Y14, Y11, Y11 \
	VPOR       Y11, Y8, Y8 \
	F(240) \
	VMOVDQU    1312(SI), Y8 \
	VPSRLW     $4, Y8, Y8 \
	VPAND      Y15, Y8, Y8 \
	VMOVDQU    288(SI), Y11 \
	VPSRLW     $3, Y11, Y11 \
	VPAND      Y14, Y11, Y11 \
	VPOR       Y11, Y8, Y8 \
	N(244) \
	VMOVDQU    1344(SI), Y8 \
	VPSRLW     $4, Y8, Y8 \
	VPAND      Y15, Y8, Y8 \
	VMOVDQU    320(SI), Y11 \
	VPSRLW     $3, Y11, Y11 \
	VPAND      Y14, Y11, Y11 \
	VPOR       Y11, Y8, Y8 \
	N(248) \
	VMOVDQU    1376(SI), Y8 \
	VPSRLW     $4, Y8, Y8 \
	VPAND      Y15, Y8, Y8 \
	VMOVDQU    352(SI), Y11 \
	VPSRLW     $3, Y11, Y11 \
	VPAND      Y14, Y11, Y11 \
	VPOR       Y11, Y8, Y8 \
	N(252) \
	S(224)

#define Q5KC1_0 \
	PREFETCHT0 Q5KPFD+0(SI) \
	PREFETCHT0 Q5KPFD+64(SI) \
	PREFETCHT0 Q5KPFD+128(SI) \
	PREFETCHT0 Q5KPFD+192(SI) \
	PREFETCHT0 Q5KPFD+256(SI) \
	PREFETCHT0 Q5KPFD+320(SI) \
	VMOVDQU    384(SI), Y10 \
	VMOVDQU    128(SI), Y12 \
	VPAND      Y15, Y10, Y8 \
	VPSLLW     $4, Y12, Y13 \
	VPAND      Y14, Y13, Y13 \
	VPOR       Y13, Y8, Y8 \
	KF(0(DI), Y4) \
	VPSRLW     $4, Y10, Y8 \
	VPAND      Y15, Y8, Y8 \
	VPSLLW     $3, Y12, Y13 \
	VPAND      Y14, Y13, Y13 \
	VPOR       Y13, Y8, Y8 \
	KF(32(DI), Y5) \
	VMOVDQU    416(SI), Y10 \
	VMOVDQU    160(SI), Y12 \
	VPAND      Y15, Y10, Y8 \
	VPSLLW     $4, Y12, Y13 \
	VPAND      Y14, Y13, Y13 \
	VPOR       Y13, Y8, Y8 \
	KN(4(DI), Y4) \
	VPSRLW     $4, Y10, Y8 \
	VPAND      Y15, Y8, Y8 \
	VPSLLW     $3, Y12, Y13 \
	VPAND      Y14, Y13, Y13 \
	VPOR       Y13, Y8, Y8 \
	KN(36(DI), Y5) \
	VMOVDQU    448(SI), Y10 \
	VMOVDQU    192(SI), Y12 \
	VPAND      Y15, Y10, Y8 \
	VPSLLW     $4, Y12, Y13 \
	VPAND      Y14, Y13, Y13 \
	VPOR       Y13, Y8, Y8 \
	KN(8(DI), Y4) \
	VPSRLW     $4, Y10, Y8 \
	VPAND      Y15, Y8, Y8 \
	VPSLLW     $3, Y12, Y13 \
	VPAND      Y14, Y13, Y13 \
	VPOR       Y13, Y8, Y8 \
	KN(40(DI), Y5) \
	VMOVDQU    480(SI), Y10 \
	VMOVDQU    224(SI), Y12 \
	VPAND      Y15, Y10, Y8 \
	VPSLLW     $4, Y12, Y13 \
	VPAND      Y14, Y13, Y13 \
	VPOR       Y13, Y8, Y8 \
	KN(12(DI), Y4) \
	VPSRLW     $4, Y10, Y8 \
	VPAND      Y15, Y8, Y8 \
	VPSLLW     $3, Y12, Y13 \
	VPAND      Y14, Y13, Y13 \
	VPOR       Y13, Y8, Y8 \
	KN(44(DI), Y5) \
	KS(0, Y4, Y0) \
	KS(32, Y5, Y0) \
	VMOVDQU    512(SI), Y10 \
	VMOVDQU    256(SI), Y12 \
	VPAND      Y15, Y10, Y8 \
	VPSLLW     $4, Y12, Y13 \
	VPAND      Y14, Y13, Y13 \
	VPOR       Y13, Y8, Y8 \
	KF(16(DI), Y4) \
	VPSRLW     $4, Y10, Y8 \
	VPAND      Y15, Y8, Y8 \
	VPSLLW     $3, Y12, Y13 \
	VPAND      Y14, Y13, Y13 \
	VPOR       Y13, Y8, Y8 \
	KF(48(DI), Y5) \
	VMOVDQU    544(SI), Y10 \
	VMOVDQU    288(SI), Y12 \
	VPAND      Y15, Y10, Y8 \
	VPSLLW     $4, Y12, Y13 \
	VPAND      Y14, Y13, Y13 \
	VPOR       Y13, Y8, Y8 \
	KN(20(DI), Y4) \
	VPSRLW     $4, Y10, Y8 \
	VPAND      Y15, Y8, Y8 \
	VPSLLW     $3, Y12, Y13 \
	VPAND      Y14, Y13, Y13 \
	VPOR       Y13, Y8, Y8 \
	KN(52(DI), Y5) \
	VMOVDQU    576(SI), Y10 \
	VMOVDQU    320(SI), Y12 \
	VPAND      Y15, Y10, Y8 \
	VPSLLW     $4, Y12, Y13 \
	VPAND      Y14, Y13, Y13 \
	VPOR       Y13, Y8, Y8 \
	KN(24(DI), Y4) \
	VPSRLW     $4, Y10, Y8 \
	VPAND      Y15, Y8, Y8 \
	VPSLLW     $3, Y12, Y13 \
	VPAND      Y14, Y13, Y13 \
	VPOR       Y13, Y8, Y8 \
	KN(56(DI), Y5) \
	VMOVDQU    608(SI), Y10 \
	VMOVDQU    352(SI), Y12 \
	VPAND      Y15, Y10, Y8 \
	VPSLLW     $4, Y12, Y13 \
	VPAND      Y14, Y13, Y13 \
	VPOR       Y13, Y8, Y8 \
	KN(28(DI), Y4) \
	VPSRLW     $4, Y10, Y8 \
	VPAND      Y15, Y8, Y8 \
	VPSLLW     $3, Y12, Y13 \
	VPAND      Y14, Y13, Y13 \
	VPOR       Y13, Y8, Y8 \
	KN(60(DI), Y5) \
	KS(0, Y4, Y0) \
	KS(32, Y5, Y0)

#define Q5KC1_1 \
	PREFETCHT0 Q5KPFD+384(SI) \
	PREFETCHT0 Q5KPFD+448(SI) \
	PREFETCHT0 Q5KPFD+512(SI) \
	PREFETCHT0 Q5KPFD+576(SI) \
	PREFETCHT0 Q5KPFD+640(SI) \
	PREFETCHT0 Q5KPFD+704(SI) \
	VMOVDQU    640(SI), Y10 \
	VMOVDQU    128(SI), Y12 \
	VPAND      Y15, Y10, Y8 \
	VPSLLW     $2, Y12, Y13 \
	VPAND      Y14, Y13, Y13 \
	VPOR       Y13, Y8, Y8 \
	KF(64(DI), Y4) \
	VPSRLW     $4, Y10, Y8 \
	VPAND      Y15, Y8, Y8 \
	VPSLLW     $1, Y12, Y13 \
	VPAND      Y14, Y13, Y13 \
	VPOR       Y13, Y8, Y8 \
	KF(96(DI), Y5) \
	VMOVDQU    672(SI), Y10 \
	VMOVDQU    160(SI), Y12 \
	VPAND      Y15, Y10, Y8 \
	VPSLLW     $2, Y12, Y13 \
	VPAND      Y14, Y13, Y13 \
	VPOR       Y13, Y8, Y8 \
	KN(68(DI), Y4) \
	VPSRLW     $4, Y10, Y8 \
	VPAND      Y15, Y8, Y8 \
	VPSLLW     $1, Y12, Y13 \
	VPAND      Y14, Y13, Y13 \
	VPOR       Y13, Y8, Y8 \
	KN(100(DI), Y5) \
	VMOVDQU    704(SI), Y10 \
	VMOVDQU    192(SI), Y12 \
	VPAND      Y15, Y10, Y8 \
	VPSLLW     $2, Y12, Y13 \
	VPAND      Y14, Y13, Y13 \
	VPOR       Y13, Y8, Y8 \
	KN(72(DI), Y4) \
	VPSRLW     $4, Y10, Y8 \
	VPAND      Y15, Y8, Y8 \
	VPSLLW     $1, Y12, Y13 \
	VPAND      Y14, Y13, Y13 \
	VPOR       Y13, Y8, Y8 \
	KN(104(DI), Y5) \
	VMOVDQU    736(SI), Y10 \
	VMOVDQU    224(SI), Y12 \
	VPAND      Y15, Y10, Y8 \
	VPSLLW     $2, Y12, Y13 \
	VPAND      Y14, Y13, Y13 \
	VPOR       Y13, Y8, Y8 \
	KN(76(DI), Y4) \
	VPSRLW     $4, Y10, Y8 \
	VPAND      Y15, Y8, Y8 \
	VPSLLW     $1, Y12, Y13 \
	VPAND      Y14, Y13, Y13 \
	VPOR       Y13, Y8, Y8 \
	KN(108(DI), Y5) \
	KS(64, Y4, Y0) \
	KS(96, Y5, Y0) \
	VMOVDQU    768(SI), Y10 \
	VMOVDQU    256(SI), Y12 \
	VPAND      Y15, Y10, Y8 \
	VPSLLW     $2, Y12, Y13 \
	VPAND      Y14, Y13, Y13 \
	VPOR       Y13, Y8, Y8 \
	KF(80(DI), Y4) \
	VPSRLW     $4, Y10, Y8 \
	VPAND      Y15, Y8, Y8 \
	VPSLLW     $1, Y12, Y13 \
	VPAND      Y14, Y13, Y13 \
	VPOR       Y13, Y8, Y8 \
	KF(112(DI), Y5) \
	VMOVDQU    800(SI), Y10 \
	VMOVDQU    288(SI), Y12 \
	VPAND      Y15, Y10, Y8 \
	VPSLLW     $2, Y12, Y13 \
	VPAND      Y14, Y13, Y13 \
	VPOR       Y13, Y8, Y8 \
	KN(84(DI), Y4) \
	VPSRLW     $4, Y10, Y8 \
	VPAND      Y15, Y8, Y8 \
	VPSLLW     $1, Y12, Y13 \
	VPAND      Y14, Y13, Y13 \
	VPOR       Y13, Y8, Y8 \
	KN(116(DI), Y5) \
	VMOVDQU    832(SI), Y10 \
	VMOVDQU    320(SI), Y12 \
	VPAND      Y15, Y10, Y8 \
	VPSLLW     $2, Y12, Y13 \
	VPAND      Y14, Y13, Y13 \
	VPOR       Y13, Y8, Y8 \
	KN(88(DI), Y4) \
	VPSRLW     $4, Y10, Y8 \
	VPAND      Y15, Y8, Y8 \
	VPSLLW     $1, Y12, Y13 \
	VPAND      Y14, Y13, Y13 \
	VPOR       Y13, Y8, Y8 \
	KN(120(DI), Y5) \
	VMOVDQU    864(SI), Y10 \
	VMOVDQU    352(SI), Y12 \
	VPAND      Y15, Y10, Y8 \
	VPSLLW     $2, Y12, Y13 \
	VPAND      Y14, Y13, Y13 \
	VPOR       Y13, Y8, Y8 \
	KN(92(DI), Y4) \
	VPSRLW     $4, Y10, Y8 \
	VPAND      Y15, Y8, Y8 \
	VPSLLW     $1, Y12, Y13 \
	VPAND      Y14, Y13, Y13 \
	VPOR       Y13, Y8, Y8 \
	KN(124(DI), Y5) \
	KS(64, Y4, Y0) \
	KS(96, Y5, Y0)

#define Q5KC1_2 \
	PREFETCHT0 Q5KPFD+768(SI) \
	PREFETCHT0 Q5KPFD+832(SI) \
	PREFETCHT0 Q5KPFD+896(SI) \
	PREFETCHT0 Q5KPFD+960(SI) \
	PREFETCHT0 Q5KPFD+1024(SI) \
	PREFETCHT0 Q5KPFD+1088(SI) \
	VMOVDQU    896(SI), Y10 \
	VMOVDQU    128(SI), Y12 \
	VPAND      Y15, Y10, Y8 \
	VPAND      Y14, Y12, Y13 \
	VPOR       Y13, Y8, Y8 \
	KF(128(DI), Y4) \
	VPSRLW     $4, Y10, Y8 \
	VPAND      Y15, Y8, Y8 \
	VPSRLW     $1, Y12, Y13 \
	VPAND      Y14, Y13, Y13 \
	VPOR       Y13, Y8, Y8 \
	KF(160(DI), Y5) \
	VMOVDQU    928(SI), Y10 \
	VMOVDQU    160(SI), Y12 \
	VPAND      Y15, Y10, Y8 \
	VPAND      Y14, Y12, Y13 \
	VPOR       Y13, Y8, Y8 \
	KN(132(DI), Y4) \
	VPSRLW     $4, Y10, Y8 \
	VPAND      Y15, Y8, Y8 \
	VPSRLW     $1, Y12, Y13 \
	VPAND      Y14, Y13, Y13 \
	VPOR       Y13, Y8, Y8 \
	KN(164(DI), Y5) \
	VMOVDQU    960(SI), Y10 \
	VMOVDQU    192(SI), Y12 \
	VPAND      Y15, Y10, Y8 \
	VPAND      Y14, Y12, Y13 \
	VPOR       Y13, Y8, Y8 \
	KN(136(DI), Y4) \
	VPSRLW     $4, Y10, Y8 \
	VPAND      Y15, Y8, Y8 \
	VPSRLW     $1, Y12, Y13 \
	VPAND      Y14, Y13, Y13 \
	VPOR       Y13, Y8, Y8 \
	KN(168(DI), Y5) \
	VMOVDQU    992(SI), Y10 \
	VMOVDQU    224(SI), Y12 \
	VPAND      Y15, Y10, Y8 \
	VPAND      Y14, Y12, Y13 \
	VPOR       Y13, Y8, Y8 \
	KN(140(DI), Y4) \
	VPSRLW     $4, Y10, Y8 \
	VPAND      Y15, Y8, Y8 \
	VPSRLW     $1, Y12, Y13 \
	VPAND      Y14, Y13, Y13 \
	VPOR       Y13, Y8, Y8 \
	KN(172(DI), Y5) \
	KS(128, Y4, Y0) \
	KS(160, Y5, Y0) \
	VMOVDQU    1024(SI), Y10 \
	VMOVDQU    256(SI), Y12 \
	VPAND      Y15, Y10, Y8 \
	VPAND      Y14, Y12, Y13 \
	VPOR       Y13, Y8, Y8 \
	KF(144(DI), Y4) \
	VPSRLW     $4, Y10, Y8 \
	VPAND      Y15, Y8, Y8 \
	VPSRLW     $1, Y12, Y13 \
	VPAND      Y14, Y13, Y13 \
	VPOR       Y13, Y8, Y8 \
	KF(176(DI), Y5) \
	VMOVDQU    1056(SI), Y10 \
	VMOVDQU    288(SI), Y12 \
	VPAND      Y15, Y10, Y8 \
	VPAND      Y14, Y12, Y13 \
	VPOR       Y13, Y8, Y8 \
	KN(148(DI), Y4) \
	VPSRLW     $4, Y10, Y8 \
	VPAND      Y15, Y8, Y8 \
	VPSRLW     $1, Y12, Y13 \
	VPAND      Y14, Y13, Y13 \
	VPOR       Y13, Y8, Y8 \
	KN(180(DI), Y5) \
	VMOVDQU    1088(SI), Y10 \
	VMOVDQU    320(SI), Y12 \
	VPAND      Y15, Y10, Y8 \
	VPAND      Y14, Y12, Y13 \
	VPOR       Y13, Y8, Y8 \
	KN(152(DI), Y4) \
	VPSRLW     $4, Y10, Y8 \
	VPAND      Y15, Y8, Y8 \
	VPSRLW     $1, Y12, Y13 \
	VPAND      Y14, Y13, Y13 \
	VPOR       Y13, Y8, Y8 \
	KN(184(DI), Y5) \
	VMOVDQU    1120(SI), Y10 \
	VMOVDQU    352(SI), Y12 \
	VPAND      Y15, Y10, Y8 \
	VPAND      Y14, Y12, Y13 \
	VPOR       Y13, Y8, Y8 \
	KN(156(DI), Y4) \
	VPSRLW     $4, Y10, Y8 \
	VPAND      Y15, Y8, Y8 \
	VPSRLW     $1, Y12, Y13 \
	VPAND      Y14, Y13, Y13 \
	VPOR       Y13, Y8, Y8 \
	KN(188(DI), Y5) \
	KS(128, Y4, Y0) \
	KS(160, Y5, Y0)

#define Q5KC1_3 \
	PREFETCHT0 Q5KPFD+1152(SI) \
	PREFETCHT0 Q5KPFD+1216(SI) \
	PREFETCHT0 Q5KPFD+1280(SI) \
	PREFETCHT0 Q5KPFD+1344(SI) \
	PREFETCHT0 Q5KPFD+1408(SI) \
	PREFETCHT0 Q5KPFD+1472(SI) \
	VMOVDQU    1152(SI), Y10 \
	VMOVDQU    128(SI), Y12 \
	VPAND      Y15, Y10, Y8 \
	VPSRLW     $2, Y12, Y13 \
	VPAND      Y14, Y13, Y13 \
	VPOR       Y13, Y8, Y8 \
	KF(192(DI), Y4) \
	VPSRLW     $4, Y10, Y8 \
	VPAND      Y15, Y8, Y8 \
	VPSRLW     $3, Y12, Y13 \
	VPAND      Y14, Y13, Y13 \
	VPOR       Y13, Y8, Y8 \
	KF(224(DI), Y5) \
	VMOVDQU    1184(SI), Y10 \
	VMOVDQU    160(SI), Y12 \
	VPAND      Y15, Y10, Y8 \
	VPSRLW     $2, Y12, Y13 \
	VPAND      Y14, Y13, Y13 \
	VPOR       Y13, Y8, Y8 \
	KN(196(DI), Y4) \
	VPSRLW     $4, Y10, Y8 \
	VPAND      Y15, Y8, Y8 \
	VPSRLW     $3, Y12, Y13 \
	VPAND      Y14, Y13, Y13 \
	VPOR       Y13, Y8, Y8 \
	KN(228(DI), Y5) \
	VMOVDQU    1216(SI), Y10 \
	VMOVDQU    192(SI), Y12 \
	VPAND      Y15, Y10, Y8 \
	VPSRLW     $2, Y12, Y13 \
	VPAND      Y14, Y13, Y13 \
	VPOR       Y13, Y8, Y8 \
	KN(200(DI), Y4) \
	VPSRLW     $4, Y10, Y8 \
	VPAND      Y15, Y8, Y8 \
	VPSRLW     $3, Y12, Y13 \
	VPAND      Y14, Y13, Y13 \
	VPOR       Y13, Y8, Y8 \
	KN(232(DI), Y5) \
	VMOVDQU    1248(SI), Y10 \
	VMOVDQU    224(SI), Y12 \
	VPAND      Y15, Y10, Y8 \
	VPSRLW     $2, Y12, Y13 \
	VPAND      Y14, Y13, Y13 \
	VPOR       Y13, Y8, Y8 \
	KN(204(DI), Y4) \
	VPSRLW     $4, Y10, Y8 \
	VPAND      Y15, Y8, Y8 \
	VPSRLW     $3, Y12, Y13 \
	VPAND      Y14, Y13, Y13 \
	VPOR       Y13, Y8, Y8 \
	KN(236(DI), Y5) \
	KS(192, Y4, Y0) \
	KS(224, Y5, Y0) \
	VMOVDQU    1280(SI), Y10 \
	VMOVDQU    256(SI), Y12 \
	VPAND      Y15, Y10, Y8 \
	VPSRLW     $2, Y12, Y13 \
	VPAND      Y14, Y13, Y13 \
	VPOR       Y13, Y8, Y8 \
	KF(208(DI), Y4) \
	VPSRLW     $4, Y10, Y8 \
	VPAND      Y15, Y8, Y8 \
	VPSRLW     $3, Y12, Y13 \
	VPAND      Y14, Y13, Y13 \
	VPOR       Y13, Y8, Y8 \
	KF(240(DI), Y5) \
	VMOVDQU    1312(SI), Y10 \
	VMOVDQU    288(SI), Y12 \
	VPAND      Y15, Y10, Y8 \
	VPSRLW     $2, Y12, Y13 \
	VPAND      Y14, Y13, Y13 \
	VPOR       Y13, Y8, Y8 \
	KN(212(DI), Y4) \
	VPSRLW     $4, Y10, Y8 \
	VPAND      Y15, Y8, Y8 \
	VPSRLW     $3, Y12, Y13 \
	VPAND      Y14, Y13, Y13 \
	VPOR       Y13, Y8, Y8 \
	KN(244(DI), Y5) \
	VMOVDQU    1344(SI), Y10 \
	VMOVDQU    320(SI), Y12 \
	VPAND      Y15, Y10, Y8 \
	VPSRLW     $2, Y12, Y13 \
	VPAND      Y14, Y13, Y13 \
	VPOR       Y13, Y8, Y8 \
	KN(216(DI), Y4) \
	VPSRLW     $4, Y10, Y8 \
	VPAND      Y15, Y8, Y8 \
	VPSRLW     $3, Y12, Y13 \
	VPAND      Y14, Y13, Y13 \
	VPOR       Y13, Y8, Y8 \
	KN(248(DI), Y5) \
	VMOVDQU    1376(SI), Y10 \
	VMOVDQU    352(SI), Y12 \
	VPAND      Y15, Y10, Y8 \
	VPSRLW     $2, Y12, Y13 \
	VPAND      Y14, Y13, Y13 \
	VPOR       Y13, Y8, Y8 \
	KN(220(DI), Y4) \
	VPSRLW     $4, Y10, Y8 \
	VPAND      Y15, Y8, Y8 \
	VPSRLW     $3, Y12, Y13 \
	VPAND      Y14, Y13, Y13 \
	VPOR       Y13, Y8, Y8 \
	KN(252(DI), Y5) \
	KS(192, Y4, Y0) \
	KS(224, Y5, Y0)

// Q5KBLOCK1 is one super-block of a group for one activation row, each
// word loaded once for both its nibbles; Q5KBLOCK for n rows.
#define Q5KBLOCK1 \
	Q4KSCALES \
	VPBROADCASTD kx8b10<>(SB), Y14 \
	VPXOR        Y0, Y0, Y0 \
	Q5KC1_0 \
	Q5KC1_1 \
	Q5KC1_2 \
	Q5KC1_3 \
	Q4KFIN1

#define Q5KBLOCK(F, N, S, FIN) \
	Q4KSCALES \
	VPBROADCASTD kx8b10<>(SB), Y14 \
	VPXOR        Y0, Y0, Y0 \
	VPXOR        Y1, Y1, Y1 \
	VPXOR        Y2, Y2, Y2 \
	VPXOR        Y3, Y3, Y3 \
	Q5KSUB0(F, N, S) \
	Q5KSUB1(F, N, S) \
	Q5KSUB2(F, N, S) \
	Q5KSUB3(F, N, S) \
	Q5KSUB4(F, N, S) \
	Q5KSUB5(F, N, S) \
	Q5KSUB6(F, N, S) \
	Q5KSUB7(F, N, S) \
	FIN

// Q6_K. A group's super-block is 1680 bytes: the words of ql (32i, i <
// 32), of qh (1024 + 32i, i < 16) and of the scales (1536 + 32i, i < 4),
// then the eight d (1664). In half h and for q < 8, ql's words A = 16h + q
// and B = 16h + 8 + q and qh's word H = 8h + q give four words of 6-bit
// quants (stored plus 32, unsigned): A's low nibbles and H's bits 0-1 are
// values 128h + 4q to 128h + 4q + 3, B's low nibbles and bits 2-3 those 32
// on, A's high nibbles and bits 4-5 those 64 on, B's high nibbles and bits
// 6-7 those 96 on; the sub-block is the value over 16. Stack: [s, s] of
// sub-block s at 32s, the scales of sub-blocks 2i and 2i+1 at 512 + 32i,
// the results at 768. Y14 holds bytes of 0x30, Y11 is scratch.

// Q6KPFD is how far ahead the kernel asks for weights, as for Q4_K.
#define Q6KPFD 3360

// Q6KSCALES spreads the eight rows' scales to the stack.
#define Q6KSCALES \
	PREFETCHT0 Q6KPFD+1536(SI) \
	PREFETCHT0 Q6KPFD+1600(SI) \
	PREFETCHT0 Q6KPFD+1664(SI) \
	VMOVDQU    1536(SI), Y10 \
	VPSHUFB    kx8hi<>+0(SB), Y10, Y9 \
	VPSRAW     $8, Y9, Y9 \
	VMOVDQU    Y9, 0(SP) \
	VPSHUFB    kx8hi<>+32(SB), Y10, Y9 \
	VPSRAW     $8, Y9, Y9 \
	VMOVDQU    Y9, 32(SP) \
	VPSHUFB    kx8hi<>+64(SB), Y10, Y9 \
	VPSRAW     $8, Y9, Y9 \
	VMOVDQU    Y9, 64(SP) \
	VPSHUFB    kx8hi<>+96(SB), Y10, Y9 \
	VPSRAW     $8, Y9, Y9 \
	VMOVDQU    Y9, 96(SP) \
	VPSHUFB    kx8pr<>+0(SB), Y10, Y9 \
	VPSRAW     $8, Y9, Y9 \
	VMOVDQU    Y9, 512(SP) \
	VPSHUFB    kx8pr<>+32(SB), Y10, Y9 \
	VPSRAW     $8, Y9, Y9 \
	VMOVDQU    Y9, 544(SP) \
	VMOVDQU    1568(SI), Y10 \
	VPSHUFB    kx8hi<>+0(SB), Y10, Y9 \
	VPSRAW     $8, Y9, Y9 \
	VMOVDQU    Y9, 128(SP) \
	VPSHUFB    kx8hi<>+32(SB), Y10, Y9 \
	VPSRAW     $8, Y9, Y9 \
	VMOVDQU    Y9, 160(SP) \
	VPSHUFB    kx8hi<>+64(SB), Y10, Y9 \
	VPSRAW     $8, Y9, Y9 \
	VMOVDQU    Y9, 192(SP) \
	VPSHUFB    kx8hi<>+96(SB), Y10, Y9 \
	VPSRAW     $8, Y9, Y9 \
	VMOVDQU    Y9, 224(SP) \
	VPSHUFB    kx8pr<>+0(SB), Y10, Y9 \
	VPSRAW     $8, Y9, Y9 \
	VMOVDQU    Y9, 576(SP) \
	VPSHUFB    kx8pr<>+32(SB), Y10, Y9 \
	VPSRAW     $8, Y9, Y9 \
	VMOVDQU    Y9, 608(SP) \
	VMOVDQU    1600(SI), Y10 \
	VPSHUFB    kx8hi<>+0(SB), Y10, Y9 \
	VPSRAW     $8, Y9, Y9 \
	VMOVDQU    Y9, 256(SP) \
	VPSHUFB    kx8hi<>+32(SB), Y10, Y9 \
	VPSRAW     $8, Y9, Y9 \
	VMOVDQU    Y9, 288(SP) \
	VPSHUFB    kx8hi<>+64(SB), Y10, Y9 \
	VPSRAW     $8, Y9, Y9 \
	VMOVDQU    Y9, 320(SP) \
	VPSHUFB    kx8hi<>+96(SB), Y10, Y9 \
	VPSRAW     $8, Y9, Y9 \
	VMOVDQU    Y9, 352(SP) \
	VPSHUFB    kx8pr<>+0(SB), Y10, Y9 \
	VPSRAW     $8, Y9, Y9 \
	VMOVDQU    Y9, 640(SP) \
	VPSHUFB    kx8pr<>+32(SB), Y10, Y9 \
	VPSRAW     $8, Y9, Y9 \
	VMOVDQU    Y9, 672(SP) \
	VMOVDQU    1632(SI), Y10 \
	VPSHUFB    kx8hi<>+0(SB), Y10, Y9 \
	VPSRAW     $8, Y9, Y9 \
	VMOVDQU    Y9, 384(SP) \
	VPSHUFB    kx8hi<>+32(SB), Y10, Y9 \
	VPSRAW     $8, Y9, Y9 \
	VMOVDQU    Y9, 416(SP) \
	VPSHUFB    kx8hi<>+64(SB), Y10, Y9 \
	VPSRAW     $8, Y9, Y9 \
	VMOVDQU    Y9, 448(SP) \
	VPSHUFB    kx8hi<>+96(SB), Y10, Y9 \
	VPSRAW     $8, Y9, Y9 \
	VMOVDQU    Y9, 480(SP) \
	VPSHUFB    kx8pr<>+0(SB), Y10, Y9 \
	VPSRAW     $8, Y9, Y9 \
	VMOVDQU    Y9, 704(SP) \
	VPSHUFB    kx8pr<>+32(SB), Y10, Y9 \
	VPSRAW     $8, Y9, Y9 \
	VMOVDQU    Y9, 736(SP)

// Q6KW sets D to word q's quants at position p of half h (see above).
#define Q6KW0(A, B, H, D) \
	VPAND   A(SI), Y15, D \
	VMOVDQU H(SI), Y11 \
	VPSLLW  $4, Y11, Y11 \
	VPAND   Y14, Y11, Y11 \
	VPOR    Y11, D, D

#define Q6KW1(A, B, H, D) \
	VPAND   B(SI), Y15, D \
	VMOVDQU H(SI), Y11 \
	VPSLLW  $2, Y11, Y11 \
	VPAND   Y14, Y11, Y11 \
	VPOR    Y11, D, D

#define Q6KW2(A, B, H, D) \
	VMOVDQU A(SI), D \
	VPSRLW  $4, D, D \
	VPAND   Y15, D, D \
	VPAND   H(SI), Y14, Y11 \
	VPOR    Y11, D, D

#define Q6KW3(A, B, H, D) \
	VMOVDQU B(SI), D \
	VPSRLW  $4, D, D \
	VPAND   Y15, D, D \
	VMOVDQU H(SI), Y11 \
	VPSRLW  $2, Y11, Y11 \
	VPAND   Y14, Y11, Y11 \
	VPOR    Y11, D, D

// Q6KPASS adds position p of half h (W is Q6KW<p>, x the values' offset
// 128h + 32p, s the first sub-block 8h + 2p) to the rows' sums: word
// pairs q, q+1 (one sub-block's int16 sums), q = 0, 2, 4, 6.
#define Q6KPASS0(W, F, N, S, x, s) \
	PREFETCHT0 Q6KPFD+6*x(SI) \
	PREFETCHT0 Q6KPFD+6*x+64(SI) \
	PREFETCHT0 Q6KPFD+6*x+128(SI) \
	W(0, 256, 1024, Y8) \
	F(x+0) \
	W(32, 288, 1056, Y8) \
	N(x+4) \
	S(s+0) \
	W(64, 320, 1088, Y8) \
	F(x+8) \
	W(96, 352, 1120, Y8) \
	N(x+12) \
	S(s+0) \
	W(128, 384, 1152, Y8) \
	F(x+16) \
	W(160, 416, 1184, Y8) \
	N(x+20) \
	S(s+32) \
	W(192, 448, 1216, Y8) \
	F(x+24) \
	W(224, 480, 1248, Y8) \
	N(x+28) \
	S(s+32)

#define Q6KPASS1(W, F, N, S, x, s) \
	PREFETCHT0 Q6KPFD+6*x(SI) \
	PREFETCHT0 Q6KPFD+6*x+64(SI) \
	PREFETCHT0 Q6KPFD+6*x+128(SI) \
	W(512, 768, 1280, Y8) \
	F(x+0) \
	W(544, 800, 1312, Y8) \
	N(x+4) \
	S(s+0) \
	W(576, 832, 1344, Y8) \
	F(x+8) \
	W(608, 864, 1376, Y8) \
	N(x+12) \
	S(s+0) \
	W(640, 896, 1408, Y8) \
	F(x+16) \
	W(672, 928, 1440, Y8) \
	N(x+20) \
	S(s+32) \
	W(704, 960, 1472, Y8) \
	F(x+24) \
	W(736, 992, 1504, Y8) \
	N(x+28) \
	S(s+32)

// Q6KFIN ends a super-block for one activation row (sums per 16 at R10,
// scale at xd, result at acc on the stack): I −= 32·Σ s·bs, then acc +=
// (d·d_x)·I, Y10 holding the rows' d.
#define Q6KFIN(I, T, xd, acc) \
	VPBROADCASTD 0(R10), Y9 \
	VPMADDWD     512(SP), Y9, T \
	VPBROADCASTD 4(R10), Y9 \
	VPMADDWD     544(SP), Y9, Y9 \
	VPADDD       Y9, T, T \
	VPBROADCASTD 8(R10), Y9 \
	VPMADDWD     576(SP), Y9, Y9 \
	VPADDD       Y9, T, T \
	VPBROADCASTD 12(R10), Y9 \
	VPMADDWD     608(SP), Y9, Y9 \
	VPADDD       Y9, T, T \
	VPBROADCASTD 16(R10), Y9 \
	VPMADDWD     640(SP), Y9, Y9 \
	VPADDD       Y9, T, T \
	VPBROADCASTD 20(R10), Y9 \
	VPMADDWD     672(SP), Y9, Y9 \
	VPADDD       Y9, T, T \
	VPBROADCASTD 24(R10), Y9 \
	VPMADDWD     704(SP), Y9, Y9 \
	VPADDD       Y9, T, T \
	VPBROADCASTD 28(R10), Y9 \
	VPMADDWD     736(SP), Y9, Y9 \
	VPADDD       Y9, T, T \
	VPSLLD       $5, T, T \
	VPSUBD       T, I, I \
	VCVTDQ2PS    I, I \
	VBROADCASTSS xd, Y12 \
	VMULPS       Y12, Y10, Y13 \
	VMULPS       I, Y13, Y13 \
	VMOVUPS      acc(SP), Y12 \
	VADDPS       Y13, Y12, Y12 \
	VMOVUPS      Y12, acc(SP)

#define Q6KFIN1 \
	VCVTPH2PS 1664(SI), Y10 \
	MOVQ      R9, R10 \
	Q6KFIN(Y0, Y4, (DX), 768)

#define Q6KFIN2 \
	VCVTPH2PS 1664(SI), Y10 \
	MOVQ      R9, R10 \
	Q6KFIN(Y0, Y4, (DX), 768) \
	LEAQ      (R10)(AX*8), R10 \
	Q6KFIN(Y1, Y5, (DX)(AX*1), 800)

#define Q6KFIN3 \
	VCVTPH2PS 1664(SI), Y10 \
	MOVQ      R9, R10 \
	Q6KFIN(Y0, Y4, (DX), 768) \
	LEAQ      (R10)(AX*8), R10 \
	Q6KFIN(Y1, Y5, (DX)(AX*1), 800) \
	LEAQ      (R10)(AX*8), R10 \
	Q6KFIN(Y2, Y6, (DX)(AX*2), 832)

#define Q6KFIN4 \
	VCVTPH2PS 1664(SI), Y10 \
	MOVQ      R9, R10 \
	Q6KFIN(Y0, Y4, (DX), 768) \
	LEAQ      (R10)(AX*8), R10 \
	Q6KFIN(Y1, Y5, (DX)(AX*1), 800) \
	LEAQ      (R10)(AX*8), R10 \
	Q6KFIN(Y2, Y6, (DX)(AX*2), 832) \
	LEAQ      (R10)(AX*8), R10 \
	Q6KFIN(Y3, Y7, (DX)(BX*1), 864)

// Q6KQ1 adds word q of half h (ql words at A and B, qh's at H, values from
// x = 128h + 4q) to one activation row's int16 sums of its four positions,
// Y4-Y7 (KF for the first word of a pair, else KN).
#define Q6KQ1(K, A, B, H, x) \
	VMOVDQU A(SI), Y10 \
	VMOVDQU B(SI), Y12 \
	VMOVDQU H(SI), Y11 \
	VPAND   Y15, Y10, Y8 \
	VPSLLW  $4, Y11, Y13 \
	VPAND   Y14, Y13, Y13 \
	VPOR    Y13, Y8, Y8 \
	K(x(DI), Y4) \
	VPAND   Y15, Y12, Y8 \
	VPSLLW  $2, Y11, Y13 \
	VPAND   Y14, Y13, Y13 \
	VPOR    Y13, Y8, Y8 \
	K(x+32(DI), Y5) \
	VPSRLW  $4, Y10, Y8 \
	VPAND   Y15, Y8, Y8 \
	VPAND   Y14, Y11, Y13 \
	VPOR    Y13, Y8, Y8 \
	K(x+64(DI), Y6) \
	VPSRLW  $4, Y12, Y8 \
	VPAND   Y15, Y8, Y8 \
	VPSRLW  $2, Y11, Y13 \
	VPAND   Y14, Y13, Y13 \
	VPOR    Y13, Y8, Y8 \
	K(x+96(DI), Y7)

// Q6KS1 applies sub-blocks s, s+2, s+4 and s+6 (their [s, s] at 32s on the
// stack, so the offsets step by 64) to Y4-Y7 and adds them to Y0.
#define Q6KS1(s) \
	KS(s, Y4, Y0) \
	KS(s+64, Y5, Y0) \
	KS(s+128, Y6, Y0) \
	KS(s+192, Y7, Y0)

// Q6KBLOCK1 is one super-block of a group for one activation row.
#define Q6KBLOCK1 \
	Q6KSCALES \
	VPXOR Y0, Y0, Y0 \
	PREFETCHT0 Q6KPFD+0(SI) \
	PREFETCHT0 Q6KPFD+64(SI) \
	PREFETCHT0 Q6KPFD+128(SI) \
	Q6KQ1(KF, 0, 256, 1024, 0) \
	Q6KQ1(KN, 32, 288, 1056, 4) \
	Q6KS1(0) \
	PREFETCHT0 Q6KPFD+192(SI) \
	PREFETCHT0 Q6KPFD+256(SI) \
	PREFETCHT0 Q6KPFD+320(SI) \
	Q6KQ1(KF, 64, 320, 1088, 8) \
	Q6KQ1(KN, 96, 352, 1120, 12) \
	Q6KS1(0) \
	PREFETCHT0 Q6KPFD+384(SI) \
	PREFETCHT0 Q6KPFD+448(SI) \
	PREFETCHT0 Q6KPFD+512(SI) \
	Q6KQ1(KF, 128, 384, 1152, 16) \
	Q6KQ1(KN, 160, 416, 1184, 20) \
	Q6KS1(32) \
	PREFETCHT0 Q6KPFD+576(SI) \
	PREFETCHT0 Q6KPFD+640(SI) \
	PREFETCHT0 Q6KPFD+704(SI) \
	Q6KQ1(KF, 192, 448, 1216, 24) \
	Q6KQ1(KN, 224, 480, 1248, 28) \
	Q6KS1(32) \
	PREFETCHT0 Q6KPFD+768(SI) \
	PREFETCHT0 Q6KPFD+832(SI) \
	PREFETCHT0 Q6KPFD+896(SI) \
	Q6KQ1(KF, 512, 768, 1280, 128) \
	Q6KQ1(KN, 544, 800, 1312, 132) \
	Q6KS1(256) \
	PREFETCHT0 Q6KPFD+960(SI) \
	PREFETCHT0 Q6KPFD+1024(SI) \
	PREFETCHT0 Q6KPFD+1088(SI) \
	Q6KQ1(KF, 576, 832, 1344, 136) \
	Q6KQ1(KN, 608, 864, 1376, 140) \
	Q6KS1(256) \
	PREFETCHT0 Q6KPFD+1152(SI) \
	PREFETCHT0 Q6KPFD+1216(SI) \
	PREFETCHT0 Q6KPFD+1280(SI) \
	Q6KQ1(KF, 640, 896, 1408, 144) \
	Q6KQ1(KN, 672, 928, 1440, 148) \
	Q6KS1(288) \
	PREFETCHT0 Q6KPFD+1344(SI) \
	PREFETCHT0 Q6KPFD+1408(SI) \
	PREFETCHT0 Q6KPFD+1472(SI) \
	Q6KQ1(KF, 704, 960, 1472, 152) \
	Q6KQ1(KN, 736, 992, 1504, 156) \
	Q6KS1(288) \
	Q6KFIN1

// Five to eight activation rows (Q6_K): the int32 sums of row a in Ya, the
// int16 ones of a word pair in Y13 or Y8 for one row at a time, and the
// pair's two words in Y10 and Y12 while all the rows meet them, so a word
// is unpacked once for up to eight rows. Rows 4-7 are at R10 = DI + 4·R13
// (the rows R13 apart as rows 0-3); their results at 896 + 32j. Each row's
// arithmetic is the one-to-four-row path's, in the same order.

// KFR and KNR are KF and KN against the word in W.
#define KFR(x, W, T) \
	VPBROADCASTD x, Y9 \
	VPMADDUBSW   Y9, W, T

#define KNR(x, W, T) \
	VPBROADCASTD x, Y9 \
	VPMADDUBSW   Y9, W, Y9 \
	VPADDW       Y9, T, T

// Q6KRa adds the word pair (values at offset o) to row a's sums I, scaled
// by sub-block s.
#define Q6KR0(o, s) \
	KFR(o(DI), Y10, Y13) \
	KNR(o+4(DI), Y12, Y13) \
	KS(s, Y13, Y0)

#define Q6KR1(o, s) \
	KFR(o(DI)(R13*1), Y10, Y8) \
	KNR(o+4(DI)(R13*1), Y12, Y8) \
	KS(s, Y8, Y1)

#define Q6KR2(o, s) \
	KFR(o(DI)(R13*2), Y10, Y13) \
	KNR(o+4(DI)(R13*2), Y12, Y13) \
	KS(s, Y13, Y2)

#define Q6KR3(o, s) \
	KFR(o(DI)(R14*1), Y10, Y8) \
	KNR(o+4(DI)(R14*1), Y12, Y8) \
	KS(s, Y8, Y3)

#define Q6KR4(o, s) \
	KFR(o(R10), Y10, Y13) \
	KNR(o+4(R10), Y12, Y13) \
	KS(s, Y13, Y4)

#define Q6KR5(o, s) \
	KFR(o(R10)(R13*1), Y10, Y8) \
	KNR(o+4(R10)(R13*1), Y12, Y8) \
	KS(s, Y8, Y5)

#define Q6KR6(o, s) \
	KFR(o(R10)(R13*2), Y10, Y13) \
	KNR(o+4(R10)(R13*2), Y12, Y13) \
	KS(s, Y13, Y6)

#define Q6KR7(o, s) \
	KFR(o(R10)(R14*1), Y10, Y8) \
	KNR(o+4(R10)(R14*1), Y12, Y8) \
	KS(s, Y8, Y7)

// Q6KUPn is rows 4 to 3 + n's part of a word pair.
#define Q6KUP1(o, s) \
	Q6KR4(o, s)

#define Q6KUP2(o, s) \
	Q6KR4(o, s) \
	Q6KR5(o, s)

#define Q6KUP3(o, s) \
	Q6KR4(o, s) \
	Q6KR5(o, s) \
	Q6KR6(o, s)

#define Q6KUP4(o, s) \
	Q6KR4(o, s) \
	Q6KR5(o, s) \
	Q6KR6(o, s) \
	Q6KR7(o, s)

// Q6KPAIR8 unpacks words (A0, B0, H0) and (A1, B1, H1) of position W and
// adds them (values at x, sub-block s) to every row.
#define Q6KPAIR8(W, UP, A0, B0, H0, A1, B1, H1, x, s) \
	W(A0, B0, H0, Y10) \
	W(A1, B1, H1, Y12) \
	Q6KR0(x, s) \
	Q6KR1(x, s) \
	Q6KR2(x, s) \
	Q6KR3(x, s) \
	UP(x, s)

// Q6KPASS8 is Q6KPASS0 (o = 0) or Q6KPASS1 (o = 512) for five to eight
// rows.
#define Q6KPASS8(W, UP, o, x, s) \
	PREFETCHT0 Q6KPFD+6*x(SI) \
	PREFETCHT0 Q6KPFD+6*x+64(SI) \
	PREFETCHT0 Q6KPFD+6*x+128(SI) \
	Q6KPAIR8(W, UP, o+0, o+256, o/2+1024, o+32, o+288, o/2+1056, x+0, s+0) \
	Q6KPAIR8(W, UP, o+64, o+320, o/2+1088, o+96, o+352, o/2+1120, x+8, s+0) \
	Q6KPAIR8(W, UP, o+128, o+384, o/2+1152, o+160, o+416, o/2+1184, x+16, s+32) \
	Q6KPAIR8(W, UP, o+192, o+448, o/2+1216, o+224, o+480, o/2+1248, x+24, s+32)

// Q6KZn clears the int32 sums of rows 4 to 3 + n.
#define Q6KZ1 \
	VPXOR Y4, Y4, Y4

#define Q6KZ2 \
	Q6KZ1 \
	VPXOR Y5, Y5, Y5

#define Q6KZ3 \
	Q6KZ2 \
	VPXOR Y6, Y6, Y6

#define Q6KZ4 \
	Q6KZ3 \
	VPXOR Y7, Y7, Y7

// Q6KFIN8 ends the super-block for rows 0-3 as Q6KFIN4 does (Y8 the
// scratch), then for rows 4 to 3 + n (UPFIN is Q6KUPFINn), DX pointing at
// row 4's scales meanwhile.
#define Q6KFIN8(UPFIN) \
	VCVTPH2PS 1664(SI), Y10 \
	MOVQ      R9, R10 \
	Q6KFIN(Y0, Y8, (DX), 768) \
	LEAQ      (R10)(AX*8), R10 \
	Q6KFIN(Y1, Y8, (DX)(AX*1), 800) \
	LEAQ      (R10)(AX*8), R10 \
	Q6KFIN(Y2, Y8, (DX)(AX*2), 832) \
	LEAQ      (R10)(AX*8), R10 \
	Q6KFIN(Y3, Y8, (DX)(BX*1), 864) \
	LEAQ      (DX)(AX*4), DX \
	UPFIN \
	SHLQ      $2, AX \
	SUBQ      AX, DX \
	SHRQ      $2, AX

#define Q6KUPFIN1 \
	LEAQ (R10)(AX*8), R10 \
	Q6KFIN(Y4, Y8, (DX), 896)

#define Q6KUPFIN2 \
	Q6KUPFIN1 \
	LEAQ (R10)(AX*8), R10 \
	Q6KFIN(Y5, Y8, (DX)(AX*1), 928)

#define Q6KUPFIN3 \
	Q6KUPFIN2 \
	LEAQ (R10)(AX*8), R10 \
	Q6KFIN(Y6, Y8, (DX)(AX*2), 960)

#define Q6KUPFIN4 \
	Q6KUPFIN3 \
	LEAQ (R10)(AX*8), R10 \
	Q6KFIN(Y7, Y8, (DX)(BX*1), 992)

// Q6KBLOCK8 is one super-block of a group for 4 + n activation rows (UP
// is Q6KUPn, Z Q6KZn, FIN Q6KUPFINn).
#define Q6KBLOCK8(UP, Z, FIN) \
	Q6KSCALES \
	VPXOR Y0, Y0, Y0 \
	VPXOR Y1, Y1, Y1 \
	VPXOR Y2, Y2, Y2 \
	VPXOR Y3, Y3, Y3 \
	Z \
	LEAQ  (DI)(R13*4), R10 \
	Q6KPASS8(Q6KW0, UP, 0, 0, 0) \
	Q6KPASS8(Q6KW1, UP, 0, 32, 64) \
	Q6KPASS8(Q6KW2, UP, 0, 64, 128) \
	Q6KPASS8(Q6KW3, UP, 0, 96, 192) \
	Q6KPASS8(Q6KW0, UP, 512, 128, 256) \
	Q6KPASS8(Q6KW1, UP, 512, 160, 320) \
	Q6KPASS8(Q6KW2, UP, 512, 192, 384) \
	Q6KPASS8(Q6KW3, UP, 512, 224, 448) \
	Q6KFIN8(FIN)

// KGROUP8 starts a group of five to eight rows: KGROUP, and rows 4-7's
// results +0 too.
#define KGROUP8(acc) \
	KGROUP(acc) \
	VMOVUPS Y9, acc+128(SP) \
	VMOVUPS Y9, acc+160(SP) \
	VMOVUPS Y9, acc+192(SP) \
	VMOVUPS Y9, acc+224(SP)

// KSTUn stores the group's results of rows 0 to 3 + n.
#define KSTROW(off) \
	ADDQ    R8, R10 \
	VMOVUPS off(SP), Y9 \
	VMOVUPS Y9, (R10)

#define KSTU1(acc) \
	MOVQ    R12, R10 \
	VMOVUPS acc+0(SP), Y9 \
	VMOVUPS Y9, (R10) \
	KSTROW(acc+32) \
	KSTROW(acc+64) \
	KSTROW(acc+96) \
	KSTROW(acc+128)

#define KSTU2(acc) \
	KSTU1(acc) \
	KSTROW(acc+160)

#define KSTU3(acc) \
	KSTU2(acc) \
	KSTROW(acc+192)

#define KSTU4(acc) \
	KSTU3(acc) \
	KSTROW(acc+224)

// Q6KBLOCK is one super-block of a group for n activation rows.
#define Q6KBLOCK(F, N, S, FIN) \
	Q6KSCALES \
	VPXOR Y0, Y0, Y0 \
	VPXOR Y1, Y1, Y1 \
	VPXOR Y2, Y2, Y2 \
	VPXOR Y3, Y3, Y3 \
	Q6KPASS0(Q6KW0, F, N, S, 0, 0) \
	Q6KPASS0(Q6KW1, F, N, S, 32, 64) \
	Q6KPASS0(Q6KW2, F, N, S, 64, 128) \
	Q6KPASS0(Q6KW3, F, N, S, 96, 192) \
	Q6KPASS1(Q6KW0, F, N, S, 128, 256) \
	Q6KPASS1(Q6KW1, F, N, S, 160, 320) \
	Q6KPASS1(Q6KW2, F, N, S, 192, 384) \
	Q6KPASS1(Q6KW3, F, N, S, 224, 448) \
	FIN

// func dotQ4KX8AVX(w *byte, xq *int8, xs int, xd *float32, bs *int16, nb int, out *float32, os int, ngroups, na int)
// out[a·os/4 + 8G + l] = the dot product of row l of group G (the groups
// back to back from w, nb super-blocks each) with activation row a (values
// xs bytes apart, scales nb·4 bytes apart, sums per 16 nb·32 bytes apart),
// for G < ngroups and a < na; nb ≥ 1, ngroups ≥ 1, 1 ≤ na ≤ 4.
TEXT ·dotQ4KX8AVX(SB), 0, $640-80
	MOVQ         w+0(FP), SI
	MOVQ         xs+16(FP), R13
	LEAQ         (R13)(R13*2), R14
	MOVQ         nb+40(FP), AX
	SHLQ         $2, AX
	LEAQ         (AX)(AX*2), BX
	MOVQ         out+48(FP), R12
	MOVQ         os+56(FP), R8
	MOVQ         ngroups+64(FP), R11
	MOVL         $0x0f0f0f0f, R10
	VMOVD        R10, X15
	VPBROADCASTD X15, Y15
	MOVQ         na+72(FP), R10
	CMPQ         R10, $2
	JL           q4kx8n1group
	JE           q4kx8n2group
	CMPQ         R10, $3
	JE           q4kx8n3group
	JMP          q4kx8n4group

q4kx8n1group:
	KGROUP(512)

q4kx8n1block:
	Q4KBLOCK1
	KNEXT(1152, q4kx8n1block)
	KST1(512)
	DECQ R11
	JNZ  q4kx8n1group
	VZEROUPPER
	RET

q4kx8n2group:
	KGROUP(512)

q4kx8n2block:
	Q4KBLOCK(KF2, KN2, KS2, Q4KFIN2)
	KNEXT(1152, q4kx8n2block)
	KST2(512)
	DECQ R11
	JNZ  q4kx8n2group
	VZEROUPPER
	RET

q4kx8n3group:
	KGROUP(512)

q4kx8n3block:
	Q4KBLOCK(KF3, KN3, KS3, Q4KFIN3)
	KNEXT(1152, q4kx8n3block)
	KST3(512)
	DECQ R11
	JNZ  q4kx8n3group
	VZEROUPPER
	RET

q4kx8n4group:
	KGROUP(512)

q4kx8n4block:
	Q4KBLOCK(KF4, KN4, KS4, Q4KFIN4)
	KNEXT(1152, q4kx8n4block)
	KST4(512)
	DECQ R11
	JNZ  q4kx8n4group
	VZEROUPPER
	RET

// func dotQ5KX8AVX(w *byte, xq *int8, xs int, xd *float32, bs *int16, nb int, out *float32, os int, ngroups, na int)
// out[a·os/4 + 8G + l] = the dot product of row l of group G (the groups
// back to back from w, nb super-blocks each) with activation row a (values
// xs bytes apart, scales nb·4 bytes apart, sums per 16 nb·32 bytes apart),
// for G < ngroups and a < na; nb ≥ 1, ngroups ≥ 1, 1 ≤ na ≤ 4.
TEXT ·dotQ5KX8AVX(SB), 0, $640-80
	MOVQ         w+0(FP), SI
	MOVQ         xs+16(FP), R13
	LEAQ         (R13)(R13*2), R14
	MOVQ         nb+40(FP), AX
	SHLQ         $2, AX
	LEAQ         (AX)(AX*2), BX
	MOVQ         out+48(FP), R12
	MOVQ         os+56(FP), R8
	MOVQ         ngroups+64(FP), R11
	MOVL         $0x0f0f0f0f, R10
	VMOVD        R10, X15
	VPBROADCASTD X15, Y15
	MOVQ         na+72(FP), R10
	CMPQ         R10, $2
	JL           q5kx8n1group
	JE           q5kx8n2group
	CMPQ         R10, $3
	JE           q5kx8n3group
	JMP          q5kx8n4group

q5kx8n1group:
	KGROUP(512)

q5kx8n1block:
	Q5KBLOCK1
	KNEXT(1408, q5kx8n1block)
	KST1(512)
	DECQ R11
	JNZ  q5kx8n1group
	VZEROUPPER
	RET

q5kx8n2group:
	KGROUP(512)

q5kx8n2block:
	Q5KBLOCK(KF2, KN2, KS2, Q4KFIN2)
	KNEXT(1408, q5kx8n2block)
	KST2(512)
	DECQ R11
	JNZ  q5kx8n2group
	VZEROUPPER
	RET

q5kx8n3group:
	KGROUP(512)

q5kx8n3block:
	Q5KBLOCK(KF3, KN3, KS3, Q4KFIN3)
	KNEXT(1408, q5kx8n3block)
	KST3(512)
	DECQ R11
	JNZ  q5kx8n3group
	VZEROUPPER
	RET

q5kx8n4group:
	KGROUP(512)

q5kx8n4block:
	Q5KBLOCK(KF4, KN4, KS4, Q4KFIN4)
	KNEXT(1408, q5kx8n4block)
	KST4(512)
	DECQ R11
	JNZ  q5kx8n4group
	VZEROUPPER
	RET

// func dotQ6KX8AVX(w *byte, xq *int8, xs int, xd *float32, bs *int16, nb int, out *float32, os int, ngroups, na int)
// out[a·os/4 + 8G + l] = the dot product of row l of group G (the groups
// back to back from w, nb super-blocks each) with activation row a (values
// xs bytes apart, scales nb·4 bytes apart, sums per 16 nb·32 bytes apart),
// for G < ngroups and a < na; nb ≥ 1, ngroups ≥ 1, 1 ≤ na ≤ 8.
TEXT ·dotQ6KX8AVX(SB), 0, $1024-80
	MOVQ         w+0(FP), SI
	MOVQ         xs+16(FP), R13
	LEAQ         (R13)(R13*2), R14
	MOVQ         nb+40(FP), AX
	SHLQ         $2, AX
	LEAQ         (AX)(AX*2), BX
	MOVQ         out+48(FP), R12
	MOVQ         os+56(FP), R8
	MOVQ         ngroups+64(FP), R11
	MOVL         $0x0f0f0f0f, R10
	VMOVD        R10, X15
	VPBROADCASTD X15, Y15
	MOVL         $0x30303030, R10
	VMOVD        R10, X14
	VPBROADCASTD X14, Y14
	MOVQ         na+72(FP), R10
	CMPQ         R10, $2
	JL           q6kx8n1group
	JE           q6kx8n2group
	CMPQ         R10, $4
	JL           q6kx8n3group
	JE           q6kx8n4group
	CMPQ         R10, $6
	JL           q6kx8n5group
	JE           q6kx8n6group
	CMPQ         R10, $7
	JE           q6kx8n7group
	JMP          q6kx8n8group

q6kx8n1group:
	KGROUP(768)

q6kx8n1block:
	Q6KBLOCK1
	KNEXT(1680, q6kx8n1block)
	KST1(768)
	DECQ R11
	JNZ  q6kx8n1group
	VZEROUPPER
	RET

q6kx8n2group:
	KGROUP(768)

q6kx8n2block:
	Q6KBLOCK(KF2, KN2, KS2, Q6KFIN2)
	KNEXT(1680, q6kx8n2block)
	KST2(768)
	DECQ R11
	JNZ  q6kx8n2group
	VZEROUPPER
	RET

q6kx8n3group:
	KGROUP(768)

q6kx8n3block:
	Q6KBLOCK(KF3, KN3, KS3, Q6KFIN3)
	KNEXT(1680, q6kx8n3block)
	KST3(768)
	DECQ R11
	JNZ  q6kx8n3group
	VZEROUPPER
	RET

q6kx8n4group:
	KGROUP(768)

q6kx8n4block:
	Q6KBLOCK(KF4, KN4, KS4, Q6KFIN4)
	KNEXT(1680, q6kx8n4block)
	KST4(768)
	DECQ R11
	JNZ  q6kx8n4group
	VZEROUPPER
	RET

q6kx8n5group:
	KGROUP8(768)

q6kx8n5block:
	Q6KBLOCK8(Q6KUP1, Q6KZ1, Q6KUPFIN1)
	KNEXT(1680, q6kx8n5block)
	KSTU1(768)
	ADDQ $32, R12
	DECQ R11
	JNZ  q6kx8n5group
	VZEROUPPER
	RET

q6kx8n6group:
	KGROUP8(768)

q6kx8n6block:
	Q6KBLOCK8(Q6KUP2, Q6KZ2, Q6KUPFIN2)
	KNEXT(1680, q6kx8n6block)
	KSTU2(768)
	ADDQ $32, R12
	DECQ R11
	JNZ  q6kx8n6group
	VZEROUPPER
	RET

q6kx8n7group:
	KGROUP8(768)

q6kx8n7block:
	Q6KBLOCK8(Q6KUP3, Q6KZ3, Q6KUPFIN3)
	KNEXT(1680, q6kx8n7block)
	KSTU3(768)
	ADDQ $32, R12
	DECQ R11
	JNZ  q6kx8n7group
	VZEROUPPER
	RET

q6kx8n8group:
	KGROUP8(768)

q6kx8n8block:
	Q6KBLOCK8(Q6KUP4, Q6KZ4, Q6KUPFIN4)
	KNEXT(1680, q6kx8n8block)
	KSTU4(768)
	ADDQ $32, R12
	DECQ R11
	JNZ  q6kx8n8group
	VZEROUPPER
	RET
