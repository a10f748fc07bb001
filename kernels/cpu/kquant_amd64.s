//go:build amd64 && !noasm

#include "textflag.h"

// AVX2 dot products of K-quant weight rows with one Q8_K activation row
// (see kquant.go). Each computes nrows weight rows, rb bytes apart, against
// the same activation row, in the same order of operations for every row,
// so a row's result does not depend on which call or batch computed it.
//
// The weights' unsigned quants meet the signed activations in VPMADDUBSW
// (pairs of products, at most 2·63·127, so no int16 saturation); VPMADDWD
// with the sub-block's scale broadcast to every word widens to int32 and
// applies the scale at once. A super-block's integer sum is exact; it is
// then scaled and added in float32 one super-block after another, in the
// order and roundings of the Go reference, so both give the same bits.
// (Eight float lanes per row would round differently, and on random-weight
// models a rounding can flip an activation's quantization downstream.)

// KSETUP loads the activation row's pointers for one weight row: DI the
// int8 values, DX the scales, CX the sums per 16, AX the super-block count;
// SI the weight row. X12 is the row's sum.
#define KSETUP \
	MOVQ R8, SI \
	MOVQ xq+16(FP), DI \
	MOVQ xd+24(FP), DX \
	MOVQ bs+32(FP), CX \
	MOVQ nb+40(FP), AX \
	VXORPS X12, X12, X12

// KSTORE stores the row's sum at R14 and moves on to the next weight row.
#define KSTORE \
	VMOVSS  X12, (R14) \
	ADDQ    $4, R14 \
	ADDQ    rb+8(FP), R8 \
	DECQ    BX

// F16SCALE sets x to the activation scale at (DX) times the F16 value at
// mem; R9 is clobbered.
#define F16SCALE(mem, x) \
	MOVWLZX mem, R9 \
	VMOVD   R9, x \
	VCVTPH2PS x, x \
	VMULSS  (DX), x, x

// HSUMI sets the low float of x to the exact sum of y's eight int32 lanes
// (x is y's low half); t is clobbered.
#define HSUMI(y, x, t) \
	VEXTRACTI128 $1, y, t \
	VPADDD  t, x, x \
	VPSHUFD $0x4e, x, t \
	VPADDD  t, x, x \
	VPSHUFD $0xb1, x, t \
	VPADDD  t, x, x \
	VCVTDQ2PS x, x

// Q4KPAIR adds chunk n's two sub-blocks (64 values: the low and high
// nibbles of 32 bytes) to the int32 lanes of Y0, their scales read as
// words from the stack.
#define Q4KPAIR(qoff, xoff, s0, s1) \
	VMOVDQU    qoff(SI), Y4 \
	VPSRLW     $4, Y4, Y5 \
	VPAND      Y15, Y4, Y4 \
	VPAND      Y15, Y5, Y5 \
	VPMADDUBSW xoff(DI), Y4, Y4 \
	VPMADDUBSW xoff+32(DI), Y5, Y5 \
	VPBROADCASTW s0(SP), Y6 \
	VPBROADCASTW s1(SP), Y7 \
	VPMADDWD   Y6, Y4, Y4 \
	VPMADDWD   Y7, Y5, Y5 \
	VPADDD     Y4, Y0, Y0 \
	VPADDD     Y5, Y0, Y0

// func dotQ4KRowsAVX(w *byte, rb int, xq *int8, xd *float32, bs *int16, nb int, out *float32, nrows int)
TEXT ·dotQ4KRowsAVX(SB), NOSPLIT, $32-64
	MOVQ w+0(FP), R8
	MOVQ out+48(FP), R14
	MOVQ nrows+56(FP), BX
	MOVL $0x0f0f0f0f, R9
	VMOVD R9, X15
	VPBROADCASTD X15, Y15

q4krow:
	KSETUP

q4kblock:
	// The 6-bit scales and mins of the eight sub-blocks, from 12 bytes:
	// bytes 0-3 hold scales 0-3 and bytes 4-7 mins 0-3 (low six bits);
	// bytes 8-11 the low four bits of scales 4-7 (low nibble) and of mins
	// 4-7 (high nibble); the top two bits of bytes 0-7 the high bits of
	// scales and mins 4-7.
	MOVL 4(SI), R9
	MOVL 8(SI), R10
	MOVL 12(SI), R11
	MOVL R9, R12
	ANDL $0x3f3f3f3f, R12
	MOVL R11, R13
	ANDL $0x0f0f0f0f, R13
	SHRL $6, R9
	ANDL $0x03030303, R9
	SHLL $4, R9
	ORL  R9, R13
	SHLQ $32, R13
	ORQ  R13, R12
	MOVL R10, R9
	ANDL $0x3f3f3f3f, R9
	SHRL $4, R11
	ANDL $0x0f0f0f0f, R11
	SHRL $6, R10
	ANDL $0x03030303, R10
	SHLL $4, R10
	ORL  R10, R11
	SHLQ $32, R11
	ORQ  R11, R9

	// Scales as eight words on the stack.
	VMOVQ R12, X1
	VPMOVZXBW X1, X1
	VMOVDQU X1, 0(SP)

	// Mins: word pairs [m_j, m_j] against the sums per 16 give
	// m_j·(Σ of sub-block j) in dword j; scaled by dmin·d_x into Y13.
	VMOVQ R9, X2
	VPUNPCKLBW X2, X2, X2
	VPMOVZXBW X2, Y2
	VPMADDWD  (CX), Y2, Y2

	VPXOR Y0, Y0, Y0
	Q4KPAIR(16, 0, 0, 2)
	Q4KPAIR(48, 64, 4, 6)
	Q4KPAIR(80, 128, 8, 10)
	Q4KPAIR(112, 192, 12, 14)

	// sum += (d_x·d)·isum − (d_x·dmin)·msum
	HSUMI(Y0, X0, X1)
	HSUMI(Y2, X2, X1)
	F16SCALE((SI), X3)
	VMULSS X0, X3, X3
	F16SCALE(2(SI), X4)
	VMULSS X2, X4, X4
	VSUBSS X4, X3, X3
	VADDSS X3, X12, X12

	ADDQ $144, SI
	ADDQ $256, DI
	ADDQ $4, DX
	ADDQ $32, CX
	DECQ AX
	JNZ  q4kblock

	KSTORE
	JNZ q4krow
	VZEROUPPER
	RET

// Q6KGROUP adds 32 values (sub-blocks s and s+1 of 16) to Y0: Y4 holds
// their 6-bit quants, unsigned; the scales are words on the stack.
#define Q6KGROUP(xoff, s0, s1) \
	VPMADDUBSW xoff(DI), Y4, Y4 \
	VPBROADCASTW s0(SP), X6 \
	VPBROADCASTW s1(SP), X7 \
	VINSERTI128 $1, X7, Y6, Y6 \
	VPMADDWD   Y6, Y4, Y4 \
	VPADDD     Y4, Y0, Y0

// Q6KHALF adds half n of the super-block (128 values): ql at qoff (64
// bytes), qh at hoff (32 bytes), activations at xoff, sub-blocks from s.
#define Q6KHALF(qoff, hoff, xoff, s) \
	VMOVDQU qoff(SI), Y9 \
	VMOVDQU qoff+32(SI), Y10 \
	VMOVDQU hoff(SI), Y8 \
	VPAND   Y15, Y9, Y4 \
	VPSLLW  $4, Y8, Y5 \
	VPAND   Y14, Y5, Y5 \
	VPOR    Y5, Y4, Y4 \
	Q6KGROUP(xoff, s, s+2) \
	VPAND   Y15, Y10, Y4 \
	VPSLLW  $2, Y8, Y5 \
	VPAND   Y14, Y5, Y5 \
	VPOR    Y5, Y4, Y4 \
	Q6KGROUP(xoff+32, s+4, s+6) \
	VPSRLW  $4, Y9, Y4 \
	VPAND   Y15, Y4, Y4 \
	VPAND   Y14, Y8, Y5 \
	VPOR    Y5, Y4, Y4 \
	Q6KGROUP(xoff+64, s+8, s+10) \
	VPSRLW  $4, Y10, Y4 \
	VPAND   Y15, Y4, Y4 \
	VPSRLW  $2, Y8, Y5 \
	VPAND   Y14, Y5, Y5 \
	VPOR    Y5, Y4, Y4 \
	Q6KGROUP(xoff+96, s+12, s+14)

// func dotQ6KRowsAVX(w *byte, rb int, xq *int8, xd *float32, bs *int16, nb int, out *float32, nrows int)
TEXT ·dotQ6KRowsAVX(SB), NOSPLIT, $32-64
	MOVQ w+0(FP), R8
	MOVQ out+48(FP), R14
	MOVQ nrows+56(FP), BX
	MOVL $0x0f0f0f0f, R9
	VMOVD R9, X15
	VPBROADCASTD X15, Y15
	MOVL $0x30303030, R9
	VMOVD R9, X14
	VPBROADCASTD X14, Y14

q6krow:
	KSETUP

q6kblock:
	// The sixteen signed scales as words on the stack; the quants are
	// stored plus 32, so Σ sc·32·(Σ x of the sub-block) comes off.
	VPMOVSXBW 192(SI), Y1
	VMOVDQU   Y1, 0(SP)
	VPMADDWD  (CX), Y1, Y2
	VPSLLD    $5, Y2, Y2

	VPXOR Y0, Y0, Y0
	Q6KHALF(0, 128, 0, 0)
	Q6KHALF(64, 160, 128, 16)
	// sum += (d·d_x)·isum
	VPSUBD Y2, Y0, Y0
	HSUMI(Y0, X0, X1)
	F16SCALE(208(SI), X3)
	VMULSS X0, X3, X3
	VADDSS X3, X12, X12

	ADDQ $210, SI
	ADDQ $256, DI
	ADDQ $4, DX
	ADDQ $32, CX
	DECQ AX
	JNZ  q6kblock

	KSTORE
	JNZ q6krow
	VZEROUPPER
	RET
