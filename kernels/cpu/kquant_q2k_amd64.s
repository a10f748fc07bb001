//go:build amd64 && !noasm

#include "textflag.h"
#include "kquant_amd64.h"

// AVX2 dot product of Q2_K weight rows with one Q8_K activation row, with
// the contract and the float order of kquant_amd64.s's rows kernels: a
// super-block's integer sums are exact, then scaled and added in float32
// in the Go reference's order (dotQ2KGo), so both give the same bits and
// a row's result does not depend on the call that computed it.
//
// A super-block (84 bytes): 16 bytes of 4-bit scales (low nibble) and
// mins (high nibble), one pair per 16 values; 64 bytes of 2-bit quants;
// d and dmin as F16 at bytes 80 and 82. Element 128·n + 32·j + l is bits
// 2j of quant byte 32·n + l, so shifting the 32 bytes of half n right by
// 2j and masking gives 32 consecutive elements, sub-blocks 8n+2j (low
// lane) and 8n+2j+1 (high lane). The quants are unsigned, so VPMADDUBSW
// takes them as they are (pairs at most 2·3·128, with scales at most 15
// far from int16 or int32 limits); the mins never meet the quants: they
// go against the activation's sums per 16.

// q2kscale holds, for each group g of 32 values, the VPSHUFB pattern that
// spreads scale 2g (low lane) and 2g+1 (high lane), as bytes 0-15 of both
// lanes, to every word, zero-extended.
DATA q2kscale<>+0(SB)/8, $0x8000800080008000
DATA q2kscale<>+8(SB)/8, $0x8000800080008000
DATA q2kscale<>+16(SB)/8, $0x8001800180018001
DATA q2kscale<>+24(SB)/8, $0x8001800180018001
DATA q2kscale<>+32(SB)/8, $0x8002800280028002
DATA q2kscale<>+40(SB)/8, $0x8002800280028002
DATA q2kscale<>+48(SB)/8, $0x8003800380038003
DATA q2kscale<>+56(SB)/8, $0x8003800380038003
DATA q2kscale<>+64(SB)/8, $0x8004800480048004
DATA q2kscale<>+72(SB)/8, $0x8004800480048004
DATA q2kscale<>+80(SB)/8, $0x8005800580058005
DATA q2kscale<>+88(SB)/8, $0x8005800580058005
DATA q2kscale<>+96(SB)/8, $0x8006800680068006
DATA q2kscale<>+104(SB)/8, $0x8006800680068006
DATA q2kscale<>+112(SB)/8, $0x8007800780078007
DATA q2kscale<>+120(SB)/8, $0x8007800780078007
DATA q2kscale<>+128(SB)/8, $0x8008800880088008
DATA q2kscale<>+136(SB)/8, $0x8008800880088008
DATA q2kscale<>+144(SB)/8, $0x8009800980098009
DATA q2kscale<>+152(SB)/8, $0x8009800980098009
DATA q2kscale<>+160(SB)/8, $0x800a800a800a800a
DATA q2kscale<>+168(SB)/8, $0x800a800a800a800a
DATA q2kscale<>+176(SB)/8, $0x800b800b800b800b
DATA q2kscale<>+184(SB)/8, $0x800b800b800b800b
DATA q2kscale<>+192(SB)/8, $0x800c800c800c800c
DATA q2kscale<>+200(SB)/8, $0x800c800c800c800c
DATA q2kscale<>+208(SB)/8, $0x800d800d800d800d
DATA q2kscale<>+216(SB)/8, $0x800d800d800d800d
DATA q2kscale<>+224(SB)/8, $0x800e800e800e800e
DATA q2kscale<>+232(SB)/8, $0x800e800e800e800e
DATA q2kscale<>+240(SB)/8, $0x800f800f800f800f
DATA q2kscale<>+248(SB)/8, $0x800f800f800f800f
GLOBL q2kscale<>(SB), RODATA|NOPTR, $256

// Q2KGROUP adds group g's 32 values to acc: q holds their quant bytes
// shifted into the low two bits, Y2 the scales in both lanes.
#define Q2KGROUP(q, xoff, soff, acc) \
	VPAND      Y15, q, Y4 \
	VPMADDUBSW xoff(DI), Y4, Y4 \
	VPSHUFB    q2kscale<>+soff(SB), Y2, Y5 \
	VPMADDWD   Y5, Y4, Y4 \
	VPADDD     Y4, acc, acc

// Q2KHALF adds half n's 128 values: quants at qoff (32 bytes), activations
// and scale patterns from off.
#define Q2KHALF(qoff, off) \
	VMOVDQU qoff(SI), Y8 \
	Q2KGROUP(Y8, off, off, Y0) \
	VPSRLW  $2, Y8, Y9 \
	Q2KGROUP(Y9, off+32, off+32, Y3) \
	VPSRLW  $4, Y8, Y9 \
	Q2KGROUP(Y9, off+64, off+64, Y0) \
	VPSRLW  $6, Y8, Y9 \
	Q2KGROUP(Y9, off+96, off+96, Y3)

// Q2KMASKS sets Y15 to bytes of 0x03 and X14 to bytes of 0x0F (R9
// clobbered).
#define Q2KMASKS \
	MOVL         $0x03030303, R9 \
	VMOVD        R9, X15 \
	VPBROADCASTD X15, Y15 \
	MOVL         $0x0f0f0f0f, R9 \
	VMOVD        R9, X14 \
	VPBROADCASTD X14, X14

// Q2KSCALES sets Y2 to the super-block's 16 scales in both lanes and Y6
// to its 16 mins as words (X1 clobbered).
#define Q2KSCALES \
	VMOVDQU     (SI), X1 \
	VPAND       X14, X1, X2 \
	VINSERTI128 $1, X2, Y2, Y2 \
	VPSRLW      $4, X1, X6 \
	VPAND       X14, X6, X6 \
	VPMOVZXBW   X6, Y6

// Q2KSTEP adds a super-block's term to sum: sum += (d_x·d)·isum −
// (d_x·dmin)·msum, isum the int32 lanes of yi (xi its low half), msum
// those of ym, d_x at dx (R9, X1, X3 and X4 clobbered).
#define Q2KSTEP(yi, xi, ym, xm, dx, sum) \
	HSUMI(yi, xi, X1) \
	HSUMI(ym, xm, X1) \
	MOVWLZX   80(SI), R9 \
	VMOVD     R9, X3 \
	VCVTPH2PS X3, X3 \
	VMULSS    dx, X3, X3 \
	VMULSS    xi, X3, X3 \
	MOVWLZX   82(SI), R9 \
	VMOVD     R9, X4 \
	VCVTPH2PS X4, X4 \
	VMULSS    dx, X4, X4 \
	VMULSS    xm, X4, X4 \
	VSUBSS    X4, X3, X3 \
	VADDSS    X3, sum, sum

// func dotQ2KRowsAVX(w *byte, rb int, xq *int8, xd *float32, bs *int16, nb int, out *float32, nrows int)
TEXT ·dotQ2KRowsAVX(SB), NOSPLIT, $0-64
	MOVQ w+0(FP), R8
	MOVQ out+48(FP), R14
	MOVQ nrows+56(FP), BX
	Q2KMASKS

q2krow:
	KSETUP

q2kblock:
	// Mins against the sums per 16 give min_j·(Σ of sub-block j) in
	// dword pairs of Y6.
	Q2KSCALES
	VPMADDWD (CX), Y6, Y6

	// Two accumulators, so consecutive groups do not wait on each other.
	VPXOR Y0, Y0, Y0
	VPXOR Y3, Y3, Y3
	Q2KHALF(16, 0)
	Q2KHALF(48, 128)
	VPADDD Y3, Y0, Y0

	Q2KSTEP(Y0, X0, Y6, X6, (DX), X12)

	ADDQ $84, SI
	ADDQ $256, DI
	ADDQ $4, DX
	ADDQ $32, CX
	DECQ AX
	JNZ  q2kblock

	KSTORE
	JNZ q2krow
	VZEROUPPER
	RET

// dotQ2KRows2AVX is dotQ2KRowsAVX for two activation rows at once, the
// second xqs, xds and bss bytes after the first in values, scales and
// sums per 16, its results os bytes after the first's: each group's quants
// are masked and its scales spread once for both rows, and each row's
// integer sums and float steps are the one-row kernel's, so both results
// have its bits. Y0 and Y10 are the rows' int32 sums, X12 and X13 their
// float sums; R13 xqs, R12 xds, R11 bss, R10 os.

// Q2KGROUP2 adds group g's 32 values to both rows' sums: q holds their
// quant bytes shifted into the low two bits, Y2 the scales in both lanes.
#define Q2KGROUP2(q, off) \
	VPAND      Y15, q, Y4 \
	VPSHUFB    q2kscale<>+off(SB), Y2, Y5 \
	VPMADDUBSW off(DI), Y4, Y1 \
	VPMADDWD   Y5, Y1, Y1 \
	VPADDD     Y1, Y0, Y0 \
	VPMADDUBSW off(DI)(R13*1), Y4, Y3 \
	VPMADDWD   Y5, Y3, Y3 \
	VPADDD     Y3, Y10, Y10

// Q2KHALF2 is Q2KHALF for both rows.
#define Q2KHALF2(qoff, off) \
	VMOVDQU qoff(SI), Y8 \
	Q2KGROUP2(Y8, off) \
	VPSRLW  $2, Y8, Y9 \
	Q2KGROUP2(Y9, off+32) \
	VPSRLW  $4, Y8, Y9 \
	Q2KGROUP2(Y9, off+64) \
	VPSRLW  $6, Y8, Y9 \
	Q2KGROUP2(Y9, off+96)

// func dotQ2KRows2AVX(w *byte, rb int, xq *int8, xqs int, xd *float32, xds int, bs *int16, bss, nb int, out *float32, os, nrows int)
TEXT ·dotQ2KRows2AVX(SB), NOSPLIT, $0-96
	MOVQ w+0(FP), R8
	MOVQ xqs+24(FP), R13
	MOVQ xds+40(FP), R12
	MOVQ bss+56(FP), R11
	MOVQ out+72(FP), R14
	MOVQ os+80(FP), R10
	MOVQ nrows+88(FP), BX
	Q2KMASKS

q2k2row:
	MOVQ   R8, SI
	MOVQ   xq+16(FP), DI
	MOVQ   xd+32(FP), DX
	MOVQ   bs+48(FP), CX
	MOVQ   nb+64(FP), AX
	VXORPS X12, X12, X12
	VXORPS X13, X13, X13

q2k2block:
	Q2KSCALES

	VPXOR Y0, Y0, Y0
	VPXOR Y10, Y10, Y10
	Q2KHALF2(16, 0)
	Q2KHALF2(48, 128)

	// The mins against each row's sums per 16.
	VPMADDWD (CX)(R11*1), Y6, Y7
	VPMADDWD (CX), Y6, Y6

	Q2KSTEP(Y0, X0, Y6, X6, (DX), X12)
	Q2KSTEP(Y10, X10, Y7, X7, (DX)(R12*1), X13)

	ADDQ $84, SI
	ADDQ $256, DI
	ADDQ $4, DX
	ADDQ $32, CX
	DECQ AX
	JNZ  q2k2block

	VMOVSS X12, (R14)
	VMOVSS X13, (R14)(R10*1)
	ADDQ   $4, R14
	ADDQ   rb+8(FP), R8
	DECQ   BX
	JNZ    q2k2row
	VZEROUPPER
	RET
