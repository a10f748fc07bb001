//go:build amd64 && !noasm

#include "textflag.h"
#include "kquant_amd64.h"

// AVX2 dot product of Q3_K weight rows with one Q8_K activation row, under
// the contract of the rows kernels in kquant_amd64.s: nrows rows, rb bytes
// apart, each computed in the same order of operations, the super-block's
// integer sum exact and then scaled and added in float32 in the order and
// roundings of dotQ3KGo.
//
// A Q3_K super-block (110 bytes): hmask[32], qs[64], scales[12], d F16.
// Value 128·n + 32·j + l is bits 2j, 2j+1 of qs[32·n + l], less 4 where bit
// 4·n + j of hmask[l] is clear. VPMADDUBSW wants an unsigned operand, so the
// kernel multiplies u = q + 4·h (0..7, h the hmask bit) and takes the 4 off
// afterwards through the activation sums per 16: Σ sc·(Σ u·x − 4·Σ x).
// Pairs of products stay within 2·7·128, far from int16 saturation.

// Q3KGROUP adds 32 values (sub-blocks 8·n + 2·j and the next, one per
// 128-bit lane) to Y0: Y4 holds their u, Y5 the hmask bits at bit 2 of each
// byte; Y3 the half's eight scales as words in both lanes, of which the
// shuffle j of q3kShuf spreads the group's two over their lanes. (Kept in
// registers: broadcasting them from a stack copy, as dotQ6KRowsAVX does,
// took 18.1 ns a super-block against 16.4, 64 rows of 768, one thread.)
#define Q3KGROUP(xoff, j) \
	VPAND      Y14, Y5, Y5 \
	VPOR       Y5, Y4, Y4 \
	VPMADDUBSW xoff(DI), Y4, Y4 \
	VPSHUFB    q3kShuf<>+32*j(SB), Y3, Y6 \
	VPMADDWD   Y6, Y4, Y4 \
	VPADDD     Y4, Y0, Y0

// Q3KQ sets Y4 to bits sh, sh+1 of the 32 qs bytes in Y9. (The word shift
// carries bits of the next byte in at the top; the mask drops them.)
#define Q3KQ(sh) \
	VPSRLW $sh, Y9, Y4 \
	VPAND  Y15, Y4, Y4

// q3kShuf's 32-byte control j picks word 2j of a lane's eight for every
// word of the low lane and word 2j+1 for the high lane.
DATA q3kShuf<>+0(SB)/8, $0x0100010001000100
DATA q3kShuf<>+8(SB)/8, $0x0100010001000100
DATA q3kShuf<>+16(SB)/8, $0x0302030203020302
DATA q3kShuf<>+24(SB)/8, $0x0302030203020302
DATA q3kShuf<>+32(SB)/8, $0x0504050405040504
DATA q3kShuf<>+40(SB)/8, $0x0504050405040504
DATA q3kShuf<>+48(SB)/8, $0x0706070607060706
DATA q3kShuf<>+56(SB)/8, $0x0706070607060706
DATA q3kShuf<>+64(SB)/8, $0x0908090809080908
DATA q3kShuf<>+72(SB)/8, $0x0908090809080908
DATA q3kShuf<>+80(SB)/8, $0x0b0a0b0a0b0a0b0a
DATA q3kShuf<>+88(SB)/8, $0x0b0a0b0a0b0a0b0a
DATA q3kShuf<>+96(SB)/8, $0x0d0c0d0c0d0c0d0c
DATA q3kShuf<>+104(SB)/8, $0x0d0c0d0c0d0c0d0c
DATA q3kShuf<>+112(SB)/8, $0x0f0e0f0e0f0e0f0e
DATA q3kShuf<>+120(SB)/8, $0x0f0e0f0e0f0e0f0e
GLOBL q3kShuf<>(SB), RODATA|NOPTR, $128

// func dotQ3KRowsAVX(w *byte, rb int, xq *int8, xd *float32, bs *int16, nb int, out *float32, nrows int)
TEXT ·dotQ3KRowsAVX(SB), NOSPLIT, $0-64
	MOVQ w+0(FP), R8
	MOVQ out+48(FP), R14
	MOVQ nrows+56(FP), BX
	MOVL $0x03030303, R9
	VMOVD R9, X15
	VPBROADCASTD X15, Y15
	MOVL $0x04040404, R9
	VMOVD R9, X14
	VPBROADCASTD X14, Y14
	MOVL $0x20202020, R9
	VMOVD R9, X13
	VPBROADCASTD X13, X13

q3krow:
	KSETUP

q3kblock:
	// The sixteen 6-bit scales from 12 bytes: scale j's low four bits are
	// the low (j < 8) or high nibble of byte j mod 8; its top two bits are
	// bits 2·(j/4), +1 of byte 8 + j mod 4. With t the last four bytes,
	// t | t<<30 holds in byte i those top bits of scale i (bits 0-1) and
	// of scale 8+i (bits 4-5), for i = 0..7; the <<30 spills into bits 6-7
	// of byte 3 only, which both masks drop.
	MOVQ 96(SI), R9
	MOVL 104(SI), R10
	MOVQ R10, R12
	SHLQ $30, R12
	ORQ  R10, R12
	MOVQ $0x3030303030303030, R11
	MOVQ R12, R13
	SHLQ $4, R13
	ANDQ R11, R13
	ANDQ R11, R12
	MOVQ $0x0f0f0f0f0f0f0f0f, R11
	MOVQ R9, R10
	ANDQ R11, R10
	ORQ  R13, R10
	SHRQ $4, R9
	ANDQ R11, R9
	ORQ  R12, R9

	// Scales less 32, as signed words; Y2 gets 4·Σ sc·(Σ x of the
	// sub-block) pairwise, to come off the sum.
	VMOVQ     R10, X1
	VPINSRQ   $1, R9, X1, X1
	VPSUBB    X13, X1, X1
	VPMOVSXBW X1, Y1
	VPMADDWD  (CX), Y1, Y2
	VPSLLD    $2, Y2, Y2
	VPERMQ    $0x44, Y1, Y3

	VMOVDQU 0(SI), Y8
	VPXOR   Y0, Y0, Y0

	// First half: qs[0:32], hmask bits 0-3.
	VMOVDQU 32(SI), Y9
	VPAND   Y15, Y9, Y4
	VPSLLW  $2, Y8, Y5
	Q3KGROUP(0, 0)
	Q3KQ(2)
	VPSLLW  $1, Y8, Y5
	Q3KGROUP(32, 1)
	Q3KQ(4)
	VMOVDQA Y8, Y5
	Q3KGROUP(64, 2)
	Q3KQ(6)
	VPSRLW  $1, Y8, Y5
	Q3KGROUP(96, 3)

	// Second half: qs[32:64], hmask bits 4-7, scales 8-15.
	VMOVDQU 64(SI), Y9
	VPERMQ  $0xee, Y1, Y3
	VPAND   Y15, Y9, Y4
	VPSRLW  $2, Y8, Y5
	Q3KGROUP(128, 0)
	Q3KQ(2)
	VPSRLW  $3, Y8, Y5
	Q3KGROUP(160, 1)
	Q3KQ(4)
	VPSRLW  $4, Y8, Y5
	Q3KGROUP(192, 2)
	Q3KQ(6)
	VPSRLW  $5, Y8, Y5
	Q3KGROUP(224, 3)

	// sum += (d·d_x)·isum, each step rounded, as in the Go reference.
	VPSUBD       Y2, Y0, Y0
	HSUMI(Y0, X0, X1)
	F16SCALE(108(SI), X7)
	VMULSS       X0, X7, X7
	VADDSS       X7, X12, X12

	ADDQ $110, SI
	ADDQ $256, DI
	ADDQ $4, DX
	ADDQ $32, CX
	DECQ AX
	JNZ  q3kblock

	KSTORE
	JNZ q3krow
	VZEROUPPER
	RET
