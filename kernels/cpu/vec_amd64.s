//go:build amd64 && !noasm

#include "textflag.h"
#include "exp_amd64.h"

// Element-wise AVX2 kernels of the row ops and of activation quantization;
// vec_amd64.go has their Go wrappers, which handle tails.

DATA vecc<>+0(SB)/4, $0x7fffffff // |x| mask
DATA vecc<>+4(SB)/4, $0x42fe0000 // 127
DATA vecc<>+8(SB)/4, $0x3f800000 // 1
DATA vecc<>+12(SB)/4, $0x80000000 // sign bit
DATA vecc<>+16(SB)/4, $0x80808080 // bytes of 128
DATA vecc<>+20(SB)/4, $0x00800000 // the smallest normal float32
// VPERMD indexes that put the dwords of two packed lanes back in order.
DATA vecc<>+32(SB)/4, $0
DATA vecc<>+36(SB)/4, $4
DATA vecc<>+40(SB)/4, $1
DATA vecc<>+44(SB)/4, $5
DATA vecc<>+48(SB)/4, $2
DATA vecc<>+52(SB)/4, $6
DATA vecc<>+56(SB)/4, $3
DATA vecc<>+60(SB)/4, $7
GLOBL vecc<>(SB), RODATA|NOPTR, $64

// func siluMulAVX(d, gate, u *float32, n int)
// d[i] = gate[i] / (1 + e^-gate[i]) · u[i] for n, a multiple of 8.
TEXT ·siluMulAVX(SB), NOSPLIT, $0-32
	MOVQ         d+0(FP), DI
	MOVQ         gate+8(FP), SI
	MOVQ         u+16(FP), DX
	MOVQ         n+24(FP), CX
	VBROADCASTSS vecc<>+12(SB), Y8
	VBROADCASTSS vecc<>+8(SB), Y9
	SHRQ         $3, CX
	JZ           silu_done

silu_loop:
	VMOVUPS (SI), Y0
	VXORPS  Y8, Y0, Y1
	EXPPS(Y1, Y2, Y3, Y4)
	VADDPS  Y9, Y1, Y1
	VDIVPS  Y1, Y0, Y0
	VMULPS  (DX), Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ    $32, SI
	ADDQ    $32, DX
	ADDQ    $32, DI
	DECQ    CX
	JNZ     silu_loop

silu_done:
	VZEROUPPER
	RET

// func scaleMulAVX(d, x, w *float32, s float32, n int)
// d[i] = x[i]·s·w[i] for n, a multiple of 8.
TEXT ·scaleMulAVX(SB), NOSPLIT, $0-40
	MOVQ         d+0(FP), DI
	MOVQ         x+8(FP), SI
	MOVQ         w+16(FP), DX
	VBROADCASTSS s+24(FP), Y8
	MOVQ         n+32(FP), CX
	SHRQ         $3, CX
	JZ           scale_done

scale_loop:
	VMULPS  (SI), Y8, Y0
	VMULPS  (DX), Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ    $32, SI
	ADDQ    $32, DX
	ADDQ    $32, DI
	DECQ    CX
	JNZ     scale_loop

scale_done:
	VZEROUPPER
	RET

// QBLOCK quantizes the 32 floats at SI to Q8_0 as quantRowQ8 does: it
// leaves the block's scale d = max|x|/127, rounded to half precision, in
// X5 and the 32 int8 values (x·(127/max|x|), rounded to even), in order,
// in Y0. Y8 holds the |x| mask, Y9 the VPERMD order, X10 127 and X13 the
// smallest normal float32.
#define QBLOCK \
	VMOVUPS      (SI), Y0 \
	VMOVUPS      32(SI), Y1 \
	VMOVUPS      64(SI), Y2 \
	VMOVUPS      96(SI), Y3 \
	VANDPS       Y8, Y0, Y4 \
	VANDPS       Y8, Y1, Y5 \
	VANDPS       Y8, Y2, Y6 \
	VANDPS       Y8, Y3, Y7 \
	VMAXPS       Y5, Y4, Y4 \
	VMAXPS       Y7, Y6, Y6 \
	VMAXPS       Y6, Y4, Y4 \
	VEXTRACTF128 $1, Y4, X5 \
	VMAXPS       X5, X4, X4 \
	VPERMILPS    $0x4e, X4, X5 \
	VMAXPS       X5, X4, X4 \
	VPERMILPS    $0xb1, X4, X5 \
	VMAXPS       X5, X4, X4 \
	VDIVSS       X10, X4, X5 \
	VXORPS       X6, X6, X6 \
	VUCOMISS     X13, X5 \
	JCS          5(PC) \
	VDIVSS       X4, X10, X6 \
	VCVTPS2PH    $0, X5, X7 \
	VCVTPH2PS    X7, X5 \
	JMP          2(PC) \
	VXORPS       X5, X5, X5 \
	VBROADCASTSS X6, Y6 \
	VMULPS       Y6, Y0, Y0 \
	VMULPS       Y6, Y1, Y1 \
	VMULPS       Y6, Y2, Y2 \
	VMULPS       Y6, Y3, Y3 \
	VCVTPS2DQ    Y0, Y0 \
	VCVTPS2DQ    Y1, Y1 \
	VCVTPS2DQ    Y2, Y2 \
	VCVTPS2DQ    Y3, Y3 \
	VPACKSSDW    Y1, Y0, Y0 \
	VPACKSSDW    Y3, Y2, Y2 \
	VPACKSSWB    Y2, Y0, Y0 \
	VPERMD       Y0, Y9, Y0

#define QSETUP \
	VBROADCASTSS vecc<>+0(SB), Y8 \
	VMOVDQU      vecc<>+32(SB), Y9 \
	VMOVSS       vecc<>+4(SB), X10 \
	VMOVSS       vecc<>+8(SB), X11 \
	VMOVSS       vecc<>+20(SB), X13

// func quantQ8AVX(xq *int8, xd *float32, x *float32, nb int)
TEXT ·quantQ8AVX(SB), NOSPLIT, $0-32
	MOVQ xq+0(FP), DI
	MOVQ xd+8(FP), DX
	MOVQ x+16(FP), SI
	MOVQ nb+24(FP), CX
	QSETUP

q8_loop:
	QBLOCK
	VMOVSS  X5, (DX)
	VMOVDQU Y0, (DI)
	ADDQ    $128, SI
	ADDQ    $32, DI
	ADDQ    $4, DX
	DECQ    CX
	JNZ     q8_loop
	VZEROUPPER
	RET

// TLANE stores Y0's 32 bytes as block's eight 4-byte groups in a lane of
// the tile layout at DI (group g at 32g); X1 is scratch.
#define TLANE \
	VEXTRACTI128 $1, Y0, X1 \
	VMOVD        X0, (DI) \
	VPEXTRD      $1, X0, 32(DI) \
	VPEXTRD      $2, X0, 64(DI) \
	VPEXTRD      $3, X0, 96(DI) \
	VMOVD        X1, 128(DI) \
	VPEXTRD      $1, X1, 160(DI) \
	VPEXTRD      $2, X1, 192(DI) \
	VPEXTRD      $3, X1, 224(DI)

// func quantTileAVX(xp *byte, xd *float32, xc *int32, x *float32, nb int)
// Stores one row into lane l of a tile (tile.go's layout): xp, xd and xc
// point at the lane's first group, scale and correction, so block b's
// 4-byte group g goes to xp[256b+32g] and its scale to xd[8b]. With xc nil
// the bytes are u = x+128; otherwise they are x, and xc[8b] = 8·Σx.
TEXT ·quantTileAVX(SB), NOSPLIT, $0-40
	MOVQ         xp+0(FP), DI
	MOVQ         xd+8(FP), DX
	MOVQ         xc+16(FP), R11
	MOVQ         x+24(FP), SI
	MOVQ         nb+32(FP), CX
	QSETUP
	VPBROADCASTD vecc<>+16(SB), Y12
	VPXOR        Y14, Y14, Y14
	TESTQ        R11, R11
	JNZ          tile_signed

tile_loop:
	QBLOCK
	VMOVSS X5, (DX)
	VPXOR  Y12, Y0, Y0
	TLANE
	ADDQ   $128, SI
	ADDQ   $256, DI
	ADDQ   $32, DX
	DECQ   CX
	JNZ    tile_loop
	VZEROUPPER
	RET

tile_signed:
	QBLOCK
	VMOVSS       X5, (DX)
	TLANE
	// Σx = Σ(x+128) − 32·128, the unsigned sum from VPSADBW.
	VPXOR        Y12, Y0, Y1
	VPSADBW      Y14, Y1, Y1
	VEXTRACTI128 $1, Y1, X2
	VPADDQ       X2, X1, X1
	VPSHUFD      $0x4e, X1, X2
	VPADDQ       X2, X1, X1
	VMOVD        X1, AX
	SUBL         $4096, AX
	SHLL         $3, AX
	MOVL         AX, (R11)
	ADDQ         $128, SI
	ADDQ         $256, DI
	ADDQ         $32, DX
	ADDQ         $32, R11
	DECQ         CX
	JNZ          tile_signed
	VZEROUPPER
	RET

// Q8K4 quantizes the 32 floats at off(SI) to Q8_K with the scale in Y5
// (iscale): q = min(127, (iscale·x + M) − M) with M = 1.5·2²³ (round to
// even), converted with saturation (NaN gives −128), stored in order at
// off/4(DI). Y14 holds M, Y13 127, Y9 the VPERMD order.
#define Q8K4(off) \
	VMULPS     off(SI), Y5, Y0 \
	VMULPS     off+32(SI), Y5, Y1 \
	VMULPS     off+64(SI), Y5, Y2 \
	VMULPS     off+96(SI), Y5, Y3 \
	VADDPS     Y14, Y0, Y0 \
	VADDPS     Y14, Y1, Y1 \
	VADDPS     Y14, Y2, Y2 \
	VADDPS     Y14, Y3, Y3 \
	VSUBPS     Y14, Y0, Y0 \
	VSUBPS     Y14, Y1, Y1 \
	VSUBPS     Y14, Y2, Y2 \
	VSUBPS     Y14, Y3, Y3 \
	VMINPS     Y0, Y13, Y0 \
	VMINPS     Y1, Y13, Y1 \
	VMINPS     Y2, Y13, Y2 \
	VMINPS     Y3, Y13, Y3 \
	VCVTTPS2DQ Y0, Y0 \
	VCVTTPS2DQ Y1, Y1 \
	VCVTTPS2DQ Y2, Y2 \
	VCVTTPS2DQ Y3, Y3 \
	VPACKSSDW  Y1, Y0, Y0 \
	VPACKSSDW  Y3, Y2, Y2 \
	VPACKSSWB  Y2, Y0, Y0 \
	VPERMD     Y0, Y9, Y0 \
	VMOVDQU    Y0, off/4(DI) \
	Q8KSUMS

// Q8KSUMS stores the sums of Y0's two halves of 16 int8 at (R8) and
// advances R8: VPSADBW sums them as unsigned bytes (x+128, Y12 holding
// bytes of 128 and Y11 zero), and 16·128 comes off.
#define Q8KSUMS \
	VPXOR        Y12, Y0, Y1 \
	VPSADBW      Y11, Y1, Y1 \
	VPSHUFD      $0x4e, Y1, Y2 \
	VPADDQ       Y2, Y1, Y1 \
	VMOVQ        X1, AX \
	VEXTRACTI128 $1, Y1, X2 \
	VMOVQ        X2, BX \
	SUBL         $2048, AX \
	SUBL         $2048, BX \
	MOVW         AX, (R8) \
	MOVW         BX, 2(R8) \
	ADDQ         $4, R8

// func quantQ8KAVX(xq *int8, xd *float32, bs *int16, x *float32, nb int)
// quantRowQ8K for nb ≥ 1 super-blocks, with the same operations in the
// same order, so the same bits: the largest |x| (NaNs skipped: VMAXPS
// keeps its second operand, the running maximum, when the first is NaN);
// its first occurrence max sets iscale = −127/max; the values and sums as
// Q8K4 says; d = 1/iscale. A block whose largest |x| is 0 is all zeros.
TEXT ·quantQ8KAVX(SB), NOSPLIT, $0-40
	MOVQ         xq+0(FP), DI
	MOVQ         xd+8(FP), DX
	MOVQ         bs+16(FP), R8
	MOVQ         x+24(FP), SI
	MOVQ         nb+32(FP), CX
	VBROADCASTSS vecc<>+0(SB), Y8
	VMOVDQU      vecc<>+32(SB), Y9
	VBROADCASTSS vecc<>+4(SB), Y13
	MOVL         $0x4b400000, AX
	VMOVD        AX, X14
	VBROADCASTSS X14, Y14
	VPBROADCASTD vecc<>+16(SB), Y12
	VPXOR        Y11, Y11, Y11

q8k_block:
	// The largest |x|, in four lanes of running maxima.
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	XORQ   R9, R9

q8k_max:
	VANDPS (SI)(R9*1), Y8, Y0
	VANDPS 32(SI)(R9*1), Y8, Y1
	VANDPS 64(SI)(R9*1), Y8, Y2
	VANDPS 96(SI)(R9*1), Y8, Y3
	VMAXPS Y4, Y0, Y4
	VMAXPS Y5, Y1, Y5
	VMAXPS Y6, Y2, Y6
	VMAXPS Y7, Y3, Y7
	ADDQ   $128, R9
	CMPQ   R9, $1024
	JNE    q8k_max
	VMAXPS       Y5, Y4, Y4
	VMAXPS       Y7, Y6, Y6
	VMAXPS       Y6, Y4, Y4
	VEXTRACTF128 $1, Y4, X5
	VMAXPS       X5, X4, X4
	VPERMILPS    $0x4e, X4, X5
	VMAXPS       X5, X4, X4
	VPERMILPS    $0xb1, X4, X5
	VMAXPS       X5, X4, X4
	VXORPS       X5, X5, X5
	VUCOMISS     X5, X4
	JEQ          q8k_zero

	// Its first occurrence: max.
	VBROADCASTSS X4, Y4
	XORQ         R9, R9

q8k_find:
	VANDPS    (SI)(R9*4), Y8, Y0
	VCMPPS    $0, Y4, Y0, Y0
	VMOVMSKPS Y0, AX
	TESTL     AX, AX
	JNZ       q8k_found
	ADDQ      $8, R9
	JMP       q8k_find

q8k_found:
	BSFL  AX, AX
	ADDQ  AX, R9
	VMOVSS (SI)(R9*4), X4
	MOVL   $0xc2fe0000, AX
	VMOVD  AX, X5
	VDIVSS X4, X5, X5
	VMOVSS vecc<>+8(SB), X6
	VDIVSS X5, X6, X6
	VMOVSS X6, (DX)
	VBROADCASTSS X5, Y5
	Q8K4(0)
	Q8K4(128)
	Q8K4(256)
	Q8K4(384)
	Q8K4(512)
	Q8K4(640)
	Q8K4(768)
	Q8K4(896)
	JMP q8k_next

q8k_zero:
	VMOVSS  X5, (DX)
	VPXOR   Y0, Y0, Y0
	VMOVDQU Y0, (DI)
	VMOVDQU Y0, 32(DI)
	VMOVDQU Y0, 64(DI)
	VMOVDQU Y0, 96(DI)
	VMOVDQU Y0, 128(DI)
	VMOVDQU Y0, 160(DI)
	VMOVDQU Y0, 192(DI)
	VMOVDQU Y0, 224(DI)
	VMOVDQU Y0, (R8)
	ADDQ    $32, R8

q8k_next:
	ADDQ $1024, SI
	ADDQ $256, DI
	ADDQ $4, DX
	DECQ CX
	JNZ  q8k_block
	VZEROUPPER
	RET
