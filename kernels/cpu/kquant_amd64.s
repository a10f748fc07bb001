//go:build amd64 && !noasm

#include "textflag.h"
#include "kquant_amd64.h"

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

// Q5KNIB sets Y4 and Y5 to the low and high nibbles of 32 bytes at qoff.
#define Q5KNIB(qoff) \
	VMOVDQU    qoff(SI), Y4 \
	VPSRLW     $4, Y4, Y5 \
	VPAND      Y15, Y4, Y4 \
	VPAND      Y15, Y5, Y5

// Q5KBITL and Q5KBITR put a fifth bit of qh (Y11) at bit 4 of y's bytes:
// a word shift by n brings the bit there and the byte mask 0x10 (Y14)
// drops what crossed from the neighbouring byte. Bits 2c and 2c+1 of qh[l]
// belong to chunk c's low and high sub-block.
#define Q5KBITL(n, y) \
	VPSLLW $n, Y11, Y9 \
	VPAND  Y14, Y9, Y9 \
	VPOR   Y9, y, y

#define Q5KBITR(n, y) \
	VPSRLW $n, Y11, Y9 \
	VPAND  Y14, Y9, Y9 \
	VPOR   Y9, y, y

// Q5KMUL adds the chunk's two sub-blocks in Y4 and Y5 (activations at
// xoff, scales at words s0, s1 of the stack) to Y0.
#define Q5KMUL(xoff, s0, s1) \
	VPMADDUBSW xoff(DI), Y4, Y4 \
	VPMADDUBSW xoff+32(DI), Y5, Y5 \
	VPBROADCASTW s0(SP), Y6 \
	VPBROADCASTW s1(SP), Y7 \
	VPMADDWD   Y6, Y4, Y4 \
	VPMADDWD   Y7, Y5, Y5 \
	VPADDD     Y4, Y0, Y0 \
	VPADDD     Y5, Y0, Y0

// func dotQ5KRowsAVX(w *byte, rb int, xq *int8, xd *float32, bs *int16, nb int, out *float32, nrows int)
TEXT ·dotQ5KRowsAVX(SB), NOSPLIT, $32-64
	MOVQ w+0(FP), R8
	MOVQ out+48(FP), R14
	MOVQ nrows+56(FP), BX
	MOVL $0x0f0f0f0f, R9
	VMOVD R9, X15
	VPBROADCASTD X15, Y15
	MOVL $0x10101010, R9
	VMOVD R9, X14
	VPBROADCASTD X14, Y14

q5krow:
	KSETUP

q5kblock:
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
	VMOVDQU 16(SI), Y11
	Q5KNIB(48)
	Q5KBITL(4, Y4)
	Q5KBITL(3, Y5)
	Q5KMUL(0, 0, 2)
	Q5KNIB(80)
	Q5KBITL(2, Y4)
	Q5KBITL(1, Y5)
	Q5KMUL(64, 4, 6)
	Q5KNIB(112)
	Q5KBITL(0, Y4)
	Q5KBITR(1, Y5)
	Q5KMUL(128, 8, 10)
	Q5KNIB(144)
	Q5KBITR(2, Y4)
	Q5KBITR(3, Y5)
	Q5KMUL(192, 12, 14)

	// sum += (d_x·d)·isum − (d_x·dmin)·msum
	HSUMI(Y0, X0, X1)
	HSUMI(Y2, X2, X1)
	F16SCALE((SI), X3)
	VMULSS X0, X3, X3
	F16SCALE(2(SI), X4)
	VMULSS X2, X4, X4
	VSUBSS X4, X3, X3
	VADDSS X3, X12, X12

	ADDQ $176, SI
	ADDQ $256, DI
	ADDQ $4, DX
	ADDQ $32, CX
	DECQ AX
	JNZ  q5kblock

	KSTORE
	JNZ q5krow
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

// The x4 kernels compute one weight row against four activation rows in
// the grouped layout (kAct.g): per super-block a record of the four rows'
// int8 values (4·256 bytes), their sums per 16 (4·16 int16 from byte
// 1024) and their scales (4 float32 from byte 1152). A super-block's
// weights are unpacked once for the four rows. Each row's integer sums are
// exact, and the float steps run lane-wise on the four rows with the same
// IEEE operations, in the same order, as the one-row kernels above: a row
// gets the same bits in a group of four as alone.

// ISUM4 sets x0 to [Σy0, Σy1, Σy2, Σy3] of four registers of eight int32
// lanes, as float (exact); y0-y3 are clobbered, t too.
#define ISUM4(y0, y1, y2, y3, x0, t) \
	VPHADDD y1, y0, y0 \
	VPHADDD y3, y2, y2 \
	VPHADDD y2, y0, y0 \
	VEXTRACTI128 $1, y0, t \
	VPADDD  t, x0, x0 \
	VCVTDQ2PS x0, x0

// F16B sets every lane of x to the F16 value at mem; R9 is clobbered.
#define F16B(mem, x) \
	MOVWLZX mem, R9 \
	VMOVD   R9, x \
	VCVTPH2PS x, x \
	VBROADCASTSS x, x

#define Q4KX4ROW(r, xoff, acc) \
	VPMADDUBSW 256*r+xoff(DI), Y4, Y8 \
	VPMADDWD   Y6, Y8, Y8 \
	VPADDD     Y8, acc, acc \
	VPMADDUBSW 256*r+xoff+32(DI), Y5, Y9 \
	VPMADDWD   Y7, Y9, Y9 \
	VPADDD     Y9, acc, acc

#define Q4KX4PAIR(qoff, xoff, s0, s1) \
	VMOVDQU    qoff(SI), Y4 \
	VPSRLW     $4, Y4, Y5 \
	VPAND      Y15, Y4, Y4 \
	VPAND      Y15, Y5, Y5 \
	Q4KX4MUL(xoff, s0, s1)

// Q4KX4MUL multiplies the chunk's two sub-blocks in Y4 and Y5 with the
// four rows' activations at xoff, scales at words s0 and s1 of the stack.
#define Q4KX4MUL(xoff, s0, s1) \
	VPBROADCASTW s0(SP), Y6 \
	VPBROADCASTW s1(SP), Y7 \
	Q4KX4ROW(0, xoff, Y0) \
	Q4KX4ROW(1, xoff, Y1) \
	Q4KX4ROW(2, xoff, Y2) \
	Q4KX4ROW(3, xoff, Y3)

// func dotQ4Kx4AVX(w *byte, grp *byte, nb int, out *[4]float32)
TEXT ·dotQ4Kx4AVX(SB), NOSPLIT, $32-32
	MOVQ w+0(FP), SI
	MOVQ grp+8(FP), DI
	MOVQ nb+16(FP), AX
	MOVL $0x0f0f0f0f, R9
	VMOVD R9, X15
	VPBROADCASTD X15, Y15
	VXORPS X13, X13, X13

q4kx4block:
	// Scales and mins as in dotQ4KRowsAVX.
	MOVL 4(SI), R10
	MOVL 12(SI), R11
	MOVL R10, R12
	ANDL $0x3f3f3f3f, R12
	MOVL R11, R9
	ANDL $0x0f0f0f0f, R9
	SHRL $6, R10
	ANDL $0x03030303, R10
	SHLL $4, R10
	ORL  R10, R9
	SHLQ $32, R9
	ORQ  R9, R12
	VMOVQ R12, X1
	VPMOVZXBW X1, X1
	VMOVDQU X1, 0(SP)
	MOVL 8(SI), R10
	MOVL R10, R12
	ANDL $0x3f3f3f3f, R12
	SHRL $4, R11
	ANDL $0x0f0f0f0f, R11
	SHRL $6, R10
	ANDL $0x03030303, R10
	SHLL $4, R10
	ORL  R10, R11
	SHLQ $32, R11
	ORQ  R11, R12
	VMOVQ R12, X10
	VPUNPCKLBW X10, X10, X10
	VPMOVZXBW X10, Y10

	VPXOR Y0, Y0, Y0
	VPXOR Y1, Y1, Y1
	VPXOR Y2, Y2, Y2
	VPXOR Y3, Y3, Y3
	Q4KX4PAIR(16, 0, 0, 2)
	Q4KX4PAIR(48, 64, 4, 6)
	Q4KX4PAIR(80, 128, 8, 10)
	Q4KX4PAIR(112, 192, 12, 14)
	ISUM4(Y0, Y1, Y2, Y3, X0, X8)

	VPMADDWD 1024(DI), Y10, Y4
	VPMADDWD 1056(DI), Y10, Y5
	VPMADDWD 1088(DI), Y10, Y6
	VPMADDWD 1120(DI), Y10, Y7
	ISUM4(Y4, Y5, Y6, Y7, X4, X8)

	// sum += (d_x·d)·isum − (d_x·dmin)·msum, lane by lane.
	VMOVUPS 1152(DI), X11
	F16B((SI), X8)
	VMULPS X8, X11, X8
	VMULPS X0, X8, X8
	F16B(2(SI), X9)
	VMULPS X9, X11, X9
	VMULPS X4, X9, X9
	VSUBPS X9, X8, X8
	VADDPS X8, X13, X13

	ADDQ $144, SI
	ADDQ $1168, DI
	DECQ AX
	JNZ  q4kx4block

	MOVQ out+24(FP), R9
	VMOVUPS X13, (R9)
	VZEROUPPER
	RET

// func dotQ5Kx4AVX(w *byte, grp *byte, nb int, out *[4]float32)
TEXT ·dotQ5Kx4AVX(SB), NOSPLIT, $32-32
	MOVQ w+0(FP), SI
	MOVQ grp+8(FP), DI
	MOVQ nb+16(FP), AX
	MOVL $0x0f0f0f0f, R9
	VMOVD R9, X15
	VPBROADCASTD X15, Y15
	MOVL $0x10101010, R9
	VMOVD R9, X14
	VPBROADCASTD X14, Y14
	VXORPS X13, X13, X13

q5kx4block:
	// Scales and mins as in dotQ4KRowsAVX.
	MOVL 4(SI), R10
	MOVL 12(SI), R11
	MOVL R10, R12
	ANDL $0x3f3f3f3f, R12
	MOVL R11, R9
	ANDL $0x0f0f0f0f, R9
	SHRL $6, R10
	ANDL $0x03030303, R10
	SHLL $4, R10
	ORL  R10, R9
	SHLQ $32, R9
	ORQ  R9, R12
	VMOVQ R12, X1
	VPMOVZXBW X1, X1
	VMOVDQU X1, 0(SP)
	MOVL 8(SI), R10
	MOVL R10, R12
	ANDL $0x3f3f3f3f, R12
	SHRL $4, R11
	ANDL $0x0f0f0f0f, R11
	SHRL $6, R10
	ANDL $0x03030303, R10
	SHLL $4, R10
	ORL  R10, R11
	SHLQ $32, R11
	ORQ  R11, R12
	VMOVQ R12, X10
	VPUNPCKLBW X10, X10, X10
	VPMOVZXBW X10, Y10

	VPXOR Y0, Y0, Y0
	VPXOR Y1, Y1, Y1
	VPXOR Y2, Y2, Y2
	VPXOR Y3, Y3, Y3
	VMOVDQU 16(SI), Y11
	Q5KNIB(48)
	Q5KBITL(4, Y4)
	Q5KBITL(3, Y5)
	Q4KX4MUL(0, 0, 2)
	Q5KNIB(80)
	Q5KBITL(2, Y4)
	Q5KBITL(1, Y5)
	Q4KX4MUL(64, 4, 6)
	Q5KNIB(112)
	Q5KBITL(0, Y4)
	Q5KBITR(1, Y5)
	Q4KX4MUL(128, 8, 10)
	Q5KNIB(144)
	Q5KBITR(2, Y4)
	Q5KBITR(3, Y5)
	Q4KX4MUL(192, 12, 14)
	ISUM4(Y0, Y1, Y2, Y3, X0, X8)

	VPMADDWD 1024(DI), Y10, Y4
	VPMADDWD 1056(DI), Y10, Y5
	VPMADDWD 1088(DI), Y10, Y6
	VPMADDWD 1120(DI), Y10, Y7
	ISUM4(Y4, Y5, Y6, Y7, X4, X8)

	// sum += (d_x·d)·isum − (d_x·dmin)·msum, lane by lane.
	VMOVUPS 1152(DI), X11
	F16B((SI), X8)
	VMULPS X8, X11, X8
	VMULPS X0, X8, X8
	F16B(2(SI), X9)
	VMULPS X9, X11, X9
	VMULPS X4, X9, X9
	VSUBPS X9, X8, X8
	VADDPS X8, X13, X13

	ADDQ $176, SI
	ADDQ $1168, DI
	DECQ AX
	JNZ  q5kx4block

	MOVQ out+24(FP), R9
	VMOVUPS X13, (R9)
	VZEROUPPER
	RET

#define Q6KX4GROUP(xoff, s0, s1) \
	VPBROADCASTW s0(SP), X6 \
	VPBROADCASTW s1(SP), X7 \
	VINSERTI128 $1, X7, Y6, Y6 \
	VPMADDUBSW xoff(DI), Y4, Y8 \
	VPMADDWD   Y6, Y8, Y8 \
	VPADDD     Y8, Y0, Y0 \
	VPMADDUBSW 256+xoff(DI), Y4, Y8 \
	VPMADDWD   Y6, Y8, Y8 \
	VPADDD     Y8, Y1, Y1 \
	VPMADDUBSW 512+xoff(DI), Y4, Y8 \
	VPMADDWD   Y6, Y8, Y8 \
	VPADDD     Y8, Y2, Y2 \
	VPMADDUBSW 768+xoff(DI), Y4, Y8 \
	VPMADDWD   Y6, Y8, Y8 \
	VPADDD     Y8, Y3, Y3

#define Q6KX4HALF(qoff, hoff, xoff, s) \
	VMOVDQU qoff(SI), Y9 \
	VMOVDQU qoff+32(SI), Y10 \
	VMOVDQU hoff(SI), Y11 \
	VPAND   Y15, Y9, Y4 \
	VPSLLW  $4, Y11, Y5 \
	VPAND   Y14, Y5, Y5 \
	VPOR    Y5, Y4, Y4 \
	Q6KX4GROUP(xoff, s, s+2) \
	VPAND   Y15, Y10, Y4 \
	VPSLLW  $2, Y11, Y5 \
	VPAND   Y14, Y5, Y5 \
	VPOR    Y5, Y4, Y4 \
	Q6KX4GROUP(xoff+32, s+4, s+6) \
	VPSRLW  $4, Y9, Y4 \
	VPAND   Y15, Y4, Y4 \
	VPAND   Y14, Y11, Y5 \
	VPOR    Y5, Y4, Y4 \
	Q6KX4GROUP(xoff+64, s+8, s+10) \
	VPSRLW  $4, Y10, Y4 \
	VPAND   Y15, Y4, Y4 \
	VPSRLW  $2, Y11, Y5 \
	VPAND   Y14, Y5, Y5 \
	VPOR    Y5, Y4, Y4 \
	Q6KX4GROUP(xoff+96, s+12, s+14)

// func dotQ6Kx4AVX(w *byte, grp *byte, nb int, out *[4]float32)
TEXT ·dotQ6Kx4AVX(SB), NOSPLIT, $32-32
	MOVQ w+0(FP), SI
	MOVQ grp+8(FP), DI
	MOVQ nb+16(FP), AX
	MOVL $0x0f0f0f0f, R9
	VMOVD R9, X15
	VPBROADCASTD X15, Y15
	MOVL $0x30303030, R9
	VMOVD R9, X14
	VPBROADCASTD X14, Y14
	VXORPS X13, X13, X13

q6kx4block:
	VPMOVSXBW 192(SI), Y12
	VMOVDQU   Y12, 0(SP)

	VPXOR Y0, Y0, Y0
	VPXOR Y1, Y1, Y1
	VPXOR Y2, Y2, Y2
	VPXOR Y3, Y3, Y3
	Q6KX4HALF(0, 128, 0, 0)
	Q6KX4HALF(64, 160, 128, 16)

	// Σ sc·32·(Σ x of the sub-block) comes off each row.
	VPMADDWD 1024(DI), Y12, Y4
	VPSLLD   $5, Y4, Y4
	VPSUBD   Y4, Y0, Y0
	VPMADDWD 1056(DI), Y12, Y4
	VPSLLD   $5, Y4, Y4
	VPSUBD   Y4, Y1, Y1
	VPMADDWD 1088(DI), Y12, Y4
	VPSLLD   $5, Y4, Y4
	VPSUBD   Y4, Y2, Y2
	VPMADDWD 1120(DI), Y12, Y4
	VPSLLD   $5, Y4, Y4
	VPSUBD   Y4, Y3, Y3
	ISUM4(Y0, Y1, Y2, Y3, X0, X8)

	// sum += (d·d_x)·isum, lane by lane.
	F16B(208(SI), X8)
	VMULPS 1152(DI), X8, X8
	VMULPS X0, X8, X8
	VADDPS X8, X13, X13

	ADDQ $210, SI
	ADDQ $1168, DI
	DECQ AX
	JNZ  q6kx4block

	MOVQ out+24(FP), R9
	VMOVUPS X13, (R9)
	VZEROUPPER
	RET

// IQ4_XS: per 32 values a 6-bit scale less 32 and 4-bit indices into the
// non-linear table kvalues (iq4tab). VPSHUFB looks the 32 indices up at
// once; the values are signed, so as in the Q8_0 kernels their absolute
// values become the unsigned operand of VPMADDUBSW and their signs move
// onto the activations (pairs at most 2·127·127, no saturation).

DATA iq4tab<>+0(SB)/8, $0xf6eaddcfbfad9881
DATA iq4tab<>+8(SB)/8, $0x7159453526190d01
GLOBL iq4tab<>(SB), RODATA|NOPTR, $16

// IQ4XSSUB adds sub-block s's 32 values (signed, in y) times the
// activations at xoff, scaled by word s of the stack, to Y0.
#define IQ4XSSUB(y, xoff, s) \
	VPSIGNB    y, y, Y6 \
	VMOVDQU    xoff(DI), Y7 \
	VPSIGNB    y, Y7, Y7 \
	VPMADDUBSW Y7, Y6, Y6 \
	VPBROADCASTW s(SP), Y7 \
	VPMADDWD   Y7, Y6, Y6 \
	VPADDD     Y6, Y0, Y0

// IQ4XSIDX looks up a pair of sub-blocks' values (32 bytes of indices at
// qoff: 16 for each, low nibbles the first 16 values, high nibbles the
// next 16): the first sub-block's to Y8, the second's to Y9 (Y4, Y5
// clobbered).
#define IQ4XSIDX(qoff) \
	VMOVDQU    qoff(SI), Y4 \
	VPSRLW     $4, Y4, Y5 \
	VPAND      Y15, Y4, Y4 \
	VPAND      Y15, Y5, Y5 \
	VPERM2I128 $0x20, Y5, Y4, Y8 \
	VPERM2I128 $0x31, Y5, Y4, Y9 \
	VPSHUFB    Y8, Y14, Y8 \
	VPSHUFB    Y9, Y14, Y9

// IQ4XSPAIR adds sub-blocks s and s+1 (32 bytes of indices at qoff: 16
// for each, low nibbles the first 16 values, high nibbles the next 16).
#define IQ4XSPAIR(qoff, xoff, s) \
	IQ4XSIDX(qoff) \
	IQ4XSSUB(Y8, xoff, s) \
	IQ4XSSUB(Y9, xoff+32, s+2)

// IQ4XSSCALES stores the super-block's eight scales, less 32, as words at
// 0(SP) (R9-R12, X1 and X2 clobbered). Scale j: bits 4j..4j+3 of
// scales_l (bytes 4-7) low, bits 2j, 2j+1 of scales_h (bytes 2-3) high;
// PDEP spreads both to one byte per j.
#define IQ4XSSCALES \
	MOVL      4(SI), R9 \
	MOVQ      $0x0f0f0f0f0f0f0f0f, R10 \
	PDEPQ     R10, R9, R11 \
	MOVWLZX   2(SI), R9 \
	MOVQ      $0x0303030303030303, R10 \
	PDEPQ     R10, R9, R12 \
	SHLQ      $4, R12 \
	ORQ       R12, R11 \
	VMOVQ     R11, X1 \
	VPMOVZXBW X1, X1 \
	MOVL      $0x00200020, R9 \
	VMOVD     R9, X2 \
	VPBROADCASTD X2, X2 \
	VPSUBW    X2, X1, X1 \
	VMOVDQU   X1, 0(SP)

// func dotIQ4XSRowsAVX(w *byte, rb int, xq *int8, xd *float32, bs *int16, nb int, out *float32, nrows int)
TEXT ·dotIQ4XSRowsAVX(SB), NOSPLIT, $32-64
	MOVQ w+0(FP), R8
	MOVQ out+48(FP), R14
	MOVQ nrows+56(FP), BX
	MOVL $0x0f0f0f0f, R9
	VMOVD R9, X15
	VPBROADCASTD X15, Y15
	VBROADCASTI128 iq4tab<>(SB), Y14

iq4xsrow:
	KSETUP

iq4xsblock:
	IQ4XSSCALES

	VPXOR Y0, Y0, Y0
	IQ4XSPAIR(8, 0, 0)
	IQ4XSPAIR(40, 64, 4)
	IQ4XSPAIR(72, 128, 8)
	IQ4XSPAIR(104, 192, 12)

	// sum += (d·d_x)·isum
	HSUMI(Y0, X0, X1)
	F16SCALE((SI), X3)
	VMULSS X0, X3, X3
	VADDSS X3, X12, X12

	ADDQ $136, SI
	ADDQ $256, DI
	ADDQ $4, DX
	ADDQ $32, CX
	DECQ AX
	JNZ  iq4xsblock

	KSTORE
	JNZ iq4xsrow
	VZEROUPPER
	RET

// The IQ4_XS N kernel: nrows weight rows, one at a time, against na
// activation rows (1 ≤ na ≤ 8; values xqs bytes apart, scales xds), out
// row a os bytes after row a−1. Each super-block of the weight row is
// decoded once, its values' magnitudes to 32-287 of the frame and the
// values to 288-543 (sub-block j at 32j), its scales as words to 0-15,
// and then taken with each activation row in turn by the steps of the
// one-row kernel, so every output has its bits; the rows' sums wait at
// 544+4a. Prefill then decodes a block once for eight activation rows.
//
// Registers: R8 the weight row, SI its super-block, R13 and R14 activation
// row 0's values and scale of that super-block, DI, DX and CX the current
// activation row's values, scale and sum, X10 the block's d, AX the
// super-blocks left, BX the weight rows left; 576(SP) holds the weight
// row's output for activation row 0, 584(SP) the end of the sums.

// IQ4XSDEC decodes the pair of sub-blocks p (32 bytes of indices at qoff).
#define IQ4XSDEC(qoff, p) \
	IQ4XSIDX(qoff) \
	VPSIGNB    Y8, Y8, Y6 \
	VMOVDQU    Y6, 32+64*p(SP) \
	VMOVDQU    Y8, 288+64*p(SP) \
	VPSIGNB    Y9, Y9, Y6 \
	VMOVDQU    Y6, 64+64*p(SP) \
	VMOVDQU    Y9, 320+64*p(SP)

// IQ4XSN adds sub-block j's values times the activations at DI, scaled, to
// Y0, as IQ4XSSUB does.
#define IQ4XSN(j) \
	VMOVDQU      32*j(DI), Y7 \
	VPSIGNB      288+32*j(SP), Y7, Y7 \
	VMOVDQU      32+32*j(SP), Y6 \
	VPMADDUBSW   Y7, Y6, Y6 \
	VPBROADCASTW 2*j(SP), Y7 \
	VPMADDWD     Y7, Y6, Y6 \
	VPADDD       Y6, Y0, Y0

// func dotIQ4XSRowsNAVX(w *byte, rb int, xq *int8, xqs int, xd *float32, xds int, nb, na, nrows int, out *float32, os int)
TEXT ·dotIQ4XSRowsNAVX(SB), NOSPLIT, $592-88
	MOVQ w+0(FP), R8
	MOVQ nrows+64(FP), BX
	MOVQ out+72(FP), R9
	MOVQ R9, 576(SP)
	MOVQ na+56(FP), R9
	LEAQ 544(SP)(R9*4), R9
	MOVQ R9, 584(SP)
	MOVL $0x0f0f0f0f, R9
	VMOVD R9, X15
	VPBROADCASTD X15, Y15
	VBROADCASTI128 iq4tab<>(SB), Y14

xnrow:
	VXORPS  X0, X0, X0
	VMOVUPS Y0, 544(SP)
	MOVQ    R8, SI
	MOVQ    xq+16(FP), R13
	MOVQ    xd+32(FP), R14
	MOVQ    nb+48(FP), AX

xnblock:
	IQ4XSSCALES

	IQ4XSDEC(8, 0)
	IQ4XSDEC(40, 1)
	IQ4XSDEC(72, 2)
	IQ4XSDEC(104, 3)
	MOVWLZX   (SI), R9
	VMOVD     R9, X10
	VCVTPH2PS X10, X10

	MOVQ R13, DI
	MOVQ R14, DX
	LEAQ 544(SP), CX

xnact:
	VPXOR Y0, Y0, Y0
	IQ4XSN(0)
	IQ4XSN(1)
	IQ4XSN(2)
	IQ4XSN(3)
	IQ4XSN(4)
	IQ4XSN(5)
	IQ4XSN(6)
	IQ4XSN(7)
	// sum += (d·d_x)·isum
	HSUMI(Y0, X0, X1)
	VMULSS (DX), X10, X3
	VMULSS X0, X3, X3
	VADDSS (CX), X3, X3
	VMOVSS X3, (CX)
	ADDQ   xqs+24(FP), DI
	ADDQ   xds+40(FP), DX
	ADDQ   $4, CX
	CMPQ   CX, 584(SP)
	JNE    xnact

	ADDQ $136, SI
	ADDQ $256, R13
	ADDQ $4, R14
	DECQ AX
	JNZ  xnblock

	MOVQ 576(SP), R9
	LEAQ 544(SP), CX

xnstore:
	VMOVSS (CX), X0
	VMOVSS X0, (R9)
	ADDQ   os+80(FP), R9
	ADDQ   $4, CX
	CMPQ   CX, 584(SP)
	JNE    xnstore
	ADDQ   $4, 576(SP)
	ADDQ   rb+8(FP), R8
	DECQ   BX
	JNZ    xnrow
	VZEROUPPER
	RET
