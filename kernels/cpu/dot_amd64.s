//go:build amd64 && !noasm

#include "textflag.h"

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

// QROW leaves in t the eight int32 partial dot products of one activation
// row's block x with the weight block: Y5 holds the signed weights, Y6 their
// absolute values, Y15 int16 ones.
#define QROW(x, t) \
	VMOVDQU    x, t \
	VPSIGNB    Y5, t, t \
	VPMADDUBSW t, Y6, t \
	VPMADDWD   Y15, t, t

// QX4SETUP loads the x4 kernels' arguments: SI weight blocks, DI row 0's
// int8 values (rows R8 bytes apart, row 3 at R10), DX the four rows' scales
// interleaved by block, CX the block count.
#define QX4SETUP \
	MOVQ w+0(FP), SI \
	MOVQ xq+8(FP), DI \
	MOVQ xd+16(FP), DX \
	MOVQ nb+24(FP), CX \
	MOVQ CX, R8 \
	SHLQ $5, R8 \
	LEAQ (R8)(R8*2), R10 \
	VXORPS   Y0, Y0, Y0 \
	VPCMPEQW Y15, Y15, Y15 \
	VPSRLW   $15, Y15, Y15

// QX4ROWS adds the block's four dot products to X0, lane j = row j: three
// horizontal adds and one add of the halves fold each row's eight partial
// sums into its exact block sum, which is then converted, scaled and fused
// into the row's accumulator once per block, as canon.go defines. X4 holds
// d_w in every lane.
#define QX4ROWS \
	QROW((DI), Y7) \
	QROW((DI)(R8*1), Y8) \
	QROW((DI)(R8*2), Y9) \
	QROW((DI)(R10*1), Y10) \
	VPHADDD        Y8, Y7, Y7 \
	VPHADDD        Y10, Y9, Y9 \
	VPHADDD        Y9, Y7, Y7 \
	VEXTRACTI128   $1, Y7, X8 \
	VPADDD         X8, X7, X7 \
	VCVTDQ2PS      X7, X7 \
	VMOVUPS        (DX), X11 \
	VMULPS         X4, X11, X11 \
	VFMADD231PS    X11, X7, X0

#define QX4STORE \
	MOVQ         out+32(FP), AX \
	VMOVUPS      X0, (AX) \
	VZEROUPPER

// Q4W decodes the Q4_0 block at off(SI) (quants at off+2) into Y5 (signed,
// −8..7) and Y6 (absolute); Y12 holds bytes of 8 and Y13 bytes of 0x0F.
#define Q4W(q) \
	VMOVDQU     q, X5 \
	VPSRLW      $4, X5, X6 \
	VINSERTI128 $1, X6, Y5, Y5 \
	VPAND       Y13, Y5, Y5 \
	VPSUBB      Y12, Y5, Y5 \
	VPSIGNB     Y5, Y5, Y6

#define Q4CONSTS11 \
	MOVL         $0x0f0f0f0f, AX \
	VMOVD        AX, X12 \
	VPBROADCASTD X12, Y12 \
	MOVL         $0x08080808, AX \
	VMOVD        AX, X11 \
	VPBROADCASTD X11, Y11

#define Q4CONSTS \
	MOVL         $0x08080808, AX \
	VMOVD        AX, X12 \
	VPBROADCASTD X12, Y12 \
	MOVL         $0x0f0f0f0f, AX \
	VMOVD        AX, X13 \
	VPBROADCASTD X13, Y13

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

// QR4 is QR8 for the Q4_0 block at wq (XV is V's low half); Y12 holds
// bytes of 0x0F and Y11 bytes of 8.
#define QR4(wq, XV, V, XT, T) \
	VMOVDQU     wq, XV \
	VPSRLW      $4, XV, XT \
	VINSERTI128 $1, XT, V, V \
	VPAND       Y12, V, V \
	VPSUBB      Y11, V, V \
	VPSIGNB     V, Y14, T \
	VPSIGNB     V, V, V \
	VPMADDUBSW  T, V, V \
	VPMADDWD    Y15, V, V

// R8FOLD folds the eight rows' partial sums in Y0-Y7 into their exact
// block sums, lane i = row i, in Y1 (as floats); Y2 is clobbered.
#define R8FOLD \
	VPHADDD    Y1, Y0, Y0 \
	VPHADDD    Y3, Y2, Y2 \
	VPHADDD    Y2, Y0, Y0 \
	VPHADDD    Y5, Y4, Y4 \
	VPHADDD    Y7, Y6, Y6 \
	VPHADDD    Y6, Y4, Y4 \
	VPERM2I128 $0x20, Y4, Y0, Y1 \
	VPERM2I128 $0x31, Y4, Y0, Y2 \
	VPADDD     Y2, Y1, Y1 \
	VCVTDQ2PS  Y1, Y1

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

// func dotF32AVX(a, b *float32, n int) float32
// Chunk c of eight goes to accumulator c mod 2 (canon.go), then the same
// horizontal tree as HSUM4.
TEXT ·dotF32AVX(SB), NOSPLIT, $0-28
	MOVQ a+0(FP), SI
	MOVQ b+8(FP), DI
	MOVQ n+16(FP), CX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1

f32loop16:
	CMPQ CX, $16
	JL   f32loop8
	VMOVUPS (SI), Y4
	VMOVUPS 32(SI), Y5
	VFMADD231PS (DI), Y4, Y0
	VFMADD231PS 32(DI), Y5, Y1
	ADDQ $64, SI
	ADDQ $64, DI
	SUBQ $16, CX
	JMP  f32loop16

f32loop8:
	CMPQ CX, $8
	JL   f32done
	VMOVUPS (SI), Y4
	VFMADD231PS (DI), Y4, Y0

f32done:
	VADDPS  Y1, Y0, Y0
	VHADDPS Y0, Y0, Y0
	VHADDPS Y0, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS  X1, X0, X0
	VZEROUPPER
	MOVSS X0, ret+24(FP)
	RET

// func dotF32x4AVX(w, x *float32, stride, n int, out *[4]float32)
// Row j of x starts stride floats after row j-1.
TEXT ·dotF32x4AVX(SB), NOSPLIT, $0-40
	MOVQ w+0(FP), SI
	MOVQ x+8(FP), DI
	MOVQ stride+16(FP), R8
	SHLQ $2, R8
	MOVQ n+24(FP), CX
	LEAQ (DI)(R8*1), R9
	LEAQ (R9)(R8*1), R10
	LEAQ (R10)(R8*1), R11
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y8, Y8, Y8
	VXORPS Y9, Y9, Y9
	VXORPS Y10, Y10, Y10
	VXORPS Y11, Y11, Y11
	XORQ AX, AX

f32x4loop16:
	CMPQ CX, $16
	JL   f32x4loop8
	VMOVUPS (SI)(AX*1), Y4
	VMOVUPS 32(SI)(AX*1), Y5
	VFMADD231PS (DI)(AX*1), Y4, Y0
	VFMADD231PS (R9)(AX*1), Y4, Y1
	VFMADD231PS (R10)(AX*1), Y4, Y2
	VFMADD231PS (R11)(AX*1), Y4, Y3
	VFMADD231PS 32(DI)(AX*1), Y5, Y8
	VFMADD231PS 32(R9)(AX*1), Y5, Y9
	VFMADD231PS 32(R10)(AX*1), Y5, Y10
	VFMADD231PS 32(R11)(AX*1), Y5, Y11
	ADDQ $64, AX
	SUBQ $16, CX
	JMP  f32x4loop16

f32x4loop8:
	CMPQ CX, $8
	JL   f32x4done
	VMOVUPS (SI)(AX*1), Y4
	VFMADD231PS (DI)(AX*1), Y4, Y0
	VFMADD231PS (R9)(AX*1), Y4, Y1
	VFMADD231PS (R10)(AX*1), Y4, Y2
	VFMADD231PS (R11)(AX*1), Y4, Y3
	ADDQ $32, AX
	SUBQ $8, CX

f32x4done:
	VADDPS Y8, Y0, Y0
	VADDPS Y9, Y1, Y1
	VADDPS Y10, Y2, Y2
	VADDPS Y11, Y3, Y3
	HSUM4(Y0, Y1, Y2, Y3, Y4, X0, X4)
	MOVQ out+32(FP), DX
	VMOVUPS X0, (DX)
	VZEROUPPER
	RET

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

// func dotQ4R8AVX(w *byte, rb int, xq *int8, xd *float32, nb int, out *float32, ngroups int)
// dotQ8R8AVX for Q4_0 weight rows.
TEXT ·dotQ4R8AVX(SB), NOSPLIT, $0-56
	R8SETUP
	Q4CONSTS11

q4r8group:
	R8GROUP

q4r8block:
	VMOVDQU (DI), Y14
	QR4(2(SI), X0, Y0, X8, Y8)
	QR4(2(SI)(R8*1), X1, Y1, X9, Y9)
	QR4(2(SI)(R8*2), X2, Y2, X10, Y10)
	QR4(2(SI)(R9*1), X3, Y3, X8, Y8)
	QR4(2(R10), X4, Y4, X9, Y9)
	QR4(2(R10)(R8*1), X5, Y5, X10, Y10)
	QR4(2(R10)(R8*2), X6, Y6, X8, Y8)
	QR4(2(R10)(R9*1), X7, Y7, X9, Y9)
	R8FOLD
	R8SCALE
	R8PREFETCH
	ADDQ $18, SI
	ADDQ $18, R10
	ADDQ $32, DI
	ADDQ $4, DX
	DECQ CX
	JNZ  q4r8block

	R8NEXT(q4r8group)
	VZEROUPPER
	RET

// func dotQ8x4AVX(w *byte, xq *int8, xd *float32, nb int, out *[4]float32)
TEXT ·dotQ8x4AVX(SB), NOSPLIT, $0-40
	QX4SETUP

q8x4loop:
	VPBROADCASTW (SI), X4
	VCVTPH2PS    X4, X4
	VMOVDQU      2(SI), Y5
	VPSIGNB      Y5, Y5, Y6
	QX4ROWS
	ADDQ $34, SI
	ADDQ $32, DI
	ADDQ $16, DX
	DECQ CX
	JNZ  q8x4loop

	QX4STORE
	RET

// func dotQ4x4AVX(w *byte, xq *int8, xd *float32, nb int, out *[4]float32)
TEXT ·dotQ4x4AVX(SB), NOSPLIT, $0-40
	QX4SETUP
	Q4CONSTS

q4x4loop:
	VPBROADCASTW (SI), X4
	VCVTPH2PS    X4, X4
	Q4W(2(SI))
	QX4ROWS
	ADDQ $18, SI
	ADDQ $32, DI
	ADDQ $16, DX
	DECQ CX
	JNZ  q4x4loop

	QX4STORE
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
