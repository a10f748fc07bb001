//go:build amd64 && !noasm

#include "textflag.h"

// The F32 GEMM micro-kernels behind gemm_f32_amd64.go. Each computes a tile
// of four weight rows by one to three activation rows over n floats (a
// multiple of 8, possibly 0), every output in one eight-lane accumulator
// that takes its chunks of eight in order (canon.go): the tile shape only
// decides how many outputs share the loads, never an output's arithmetic.
//
// With three activation rows the twelve accumulators, three activation
// vectors and one weight vector fill the sixteen YMM registers; each step
// loads seven vectors for twelve fused multiply-adds, so the FMA ports, not
// the loads, bound it.
//
// Arguments common to all: w points at weight row 0, rows ldw floats apart
// (0 repeats one row); x at activation row 0, rows ldx floats apart. One
// call runs quads ≥ 1 tiles side by side: tile q's weight rows start 4q
// rows after w, its accumulators (32 bytes each, activation row by
// activation row) at acc + 384q bytes, and its four results of activation
// row j go to out + 4q + j·ldo floats.

// HSUM4 reduces the accumulators a, b, c, d to [Σa, Σb, Σc, Σd] in the low
// 128 bits of a, each sum in canon.go's order ((v0+v1)+(v2+v3)) +
// ((v4+v5)+(v6+v7)): the two horizontal adds form the pairs and the
// quadruples of each half, the last add joins the halves. tx is clobbered.
#define HSUM4(a, b, c, d, ax, tx) \
	VHADDPS      b, a, a \
	VHADDPS      d, c, c \
	VHADDPS      c, a, a \
	VEXTRACTF128 $1, a, tx \
	VADDPS       tx, ax, ax

// GSETUP loads the common arguments: R13 weight row 0, R8 ldw in bytes,
// R9 3·ldw in bytes, R10 ldx in bytes, BX acc, DX out, R11 ldo in bytes,
// R12 flags, AX quads.
#define GSETUP \
	MOVQ w+0(FP), R13 \
	MOVQ ldw+8(FP), R8 \
	SHLQ $2, R8 \
	LEAQ (R8)(R8*2), R9 \
	MOVQ ldx+24(FP), R10 \
	SHLQ $2, R10 \
	MOVQ acc+40(FP), BX \
	MOVQ out+48(FP), DX \
	MOVQ ldo+56(FP), R11 \
	SHLQ $2, R11 \
	MOVQ flags+64(FP), R12 \
	MOVQ quads+72(FP), AX

// QSTART starts a tile: SI its weight row 0 (row i at (SI)(R8*i), row 3 at
// (SI)(R9*1)), DI activation row 0 (row j at (DI)(R10*j)), CX n/8.
#define QSTART \
	MOVQ R13, SI \
	MOVQ x+16(FP), DI \
	MOVQ n+32(FP), CX \
	SHRQ $3, CX

// QNEXT moves to the next tile and loops to label while tiles are left.
#define QNEXT(label) \
	LEAQ (R13)(R8*4), R13 \
	ADDQ $384, BX \
	ADDQ $16, DX \
	DECQ AX \
	JNZ  label

// W3 and W2 fuse one weight row's vector at off (loaded into Y15)
// into the accumulators of the activation vectors held in Y12-Y14.
#define W3(off, a, b, c) \
	VMOVUPS     off, Y15 \
	VFMADD231PS Y15, Y12, a \
	VFMADD231PS Y15, Y13, b \
	VFMADD231PS Y15, Y14, c

#define W2(off, a, b) \
	VMOVUPS     off, Y15 \
	VFMADD231PS Y15, Y12, a \
	VFMADD231PS Y15, Y13, b

// flags: gemmStart starts the accumulators at +0 instead of loading them
// from acc; gemmFinish reduces them into out instead of storing them back
// to acc. Between the two, a tile's accumulators wait in acc while the
// caller moves on to other tiles over the same span of k (gemm_f32_amd64.go).
#define gemmStart 1
#define gemmFinish 2

// func gemmF32T43(w *float32, ldw int, x *float32, ldx int, n int, acc *float32, out *float32, ldo int, flags int, quads int)
TEXT ·gemmF32T43(SB), NOSPLIT, $0-80
	GSETUP

gemmf32t43tile:
	QSTART
	TESTQ $gemmStart, R12
	JNZ   gemmf32t43zero
	VMOVUPS 0(BX), Y0
	VMOVUPS 32(BX), Y1
	VMOVUPS 64(BX), Y2
	VMOVUPS 96(BX), Y3
	VMOVUPS 128(BX), Y4
	VMOVUPS 160(BX), Y5
	VMOVUPS 192(BX), Y6
	VMOVUPS 224(BX), Y7
	VMOVUPS 256(BX), Y8
	VMOVUPS 288(BX), Y9
	VMOVUPS 320(BX), Y10
	VMOVUPS 352(BX), Y11
	JMP     gemmf32t43body

gemmf32t43zero:
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	VXORPS Y8, Y8, Y8
	VXORPS Y9, Y9, Y9
	VXORPS Y10, Y10, Y10
	VXORPS Y11, Y11, Y11

gemmf32t43body:
	TESTQ CX, CX
	JZ    gemmf32t43end

gemmf32t43loop:
	VMOVUPS (DI), Y12
	VMOVUPS (DI)(R10*1), Y13
	VMOVUPS (DI)(R10*2), Y14
	W3((SI), Y0, Y4, Y8)
	W3((SI)(R8*1), Y1, Y5, Y9)
	W3((SI)(R8*2), Y2, Y6, Y10)
	W3((SI)(R9*1), Y3, Y7, Y11)
	ADDQ $32, SI
	ADDQ $32, DI
	DECQ CX
	JNZ  gemmf32t43loop

gemmf32t43end:
	TESTQ $gemmFinish, R12
	JNZ   gemmf32t43finish
	VMOVUPS Y0, 0(BX)
	VMOVUPS Y1, 32(BX)
	VMOVUPS Y2, 64(BX)
	VMOVUPS Y3, 96(BX)
	VMOVUPS Y4, 128(BX)
	VMOVUPS Y5, 160(BX)
	VMOVUPS Y6, 192(BX)
	VMOVUPS Y7, 224(BX)
	VMOVUPS Y8, 256(BX)
	VMOVUPS Y9, 288(BX)
	VMOVUPS Y10, 320(BX)
	VMOVUPS Y11, 352(BX)
	JMP     gemmf32t43next

gemmf32t43finish:
	HSUM4(Y0, Y1, Y2, Y3, X0, X1)
	VMOVUPS X0, (DX)
	HSUM4(Y4, Y5, Y6, Y7, X4, X5)
	VMOVUPS X4, (DX)(R11*1)
	HSUM4(Y8, Y9, Y10, Y11, X8, X9)
	VMOVUPS X8, (DX)(R11*2)

gemmf32t43next:
	QNEXT(gemmf32t43tile)
	VZEROUPPER
	RET

// func gemmF32T42(w *float32, ldw int, x *float32, ldx int, n int, acc *float32, out *float32, ldo int, flags int, quads int)
TEXT ·gemmF32T42(SB), NOSPLIT, $0-80
	GSETUP

gemmf32t42tile:
	QSTART
	TESTQ $gemmStart, R12
	JNZ   gemmf32t42zero
	VMOVUPS 0(BX), Y0
	VMOVUPS 32(BX), Y1
	VMOVUPS 64(BX), Y2
	VMOVUPS 96(BX), Y3
	VMOVUPS 128(BX), Y4
	VMOVUPS 160(BX), Y5
	VMOVUPS 192(BX), Y6
	VMOVUPS 224(BX), Y7
	JMP     gemmf32t42body

gemmf32t42zero:
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7

gemmf32t42body:
	TESTQ CX, CX
	JZ    gemmf32t42end

gemmf32t42loop:
	VMOVUPS (DI), Y12
	VMOVUPS (DI)(R10*1), Y13
	W2((SI), Y0, Y4)
	W2((SI)(R8*1), Y1, Y5)
	W2((SI)(R8*2), Y2, Y6)
	W2((SI)(R9*1), Y3, Y7)
	ADDQ $32, SI
	ADDQ $32, DI
	DECQ CX
	JNZ  gemmf32t42loop

gemmf32t42end:
	TESTQ $gemmFinish, R12
	JNZ   gemmf32t42finish
	VMOVUPS Y0, 0(BX)
	VMOVUPS Y1, 32(BX)
	VMOVUPS Y2, 64(BX)
	VMOVUPS Y3, 96(BX)
	VMOVUPS Y4, 128(BX)
	VMOVUPS Y5, 160(BX)
	VMOVUPS Y6, 192(BX)
	VMOVUPS Y7, 224(BX)
	JMP     gemmf32t42next

gemmf32t42finish:
	HSUM4(Y0, Y1, Y2, Y3, X0, X1)
	VMOVUPS X0, (DX)
	HSUM4(Y4, Y5, Y6, Y7, X4, X5)
	VMOVUPS X4, (DX)(R11*1)

gemmf32t42next:
	QNEXT(gemmf32t42tile)
	VZEROUPPER
	RET

// gemmF32T41 takes the four rows gemmF32T81 leaves over.
// func gemmF32T41(w *float32, ldw int, x *float32, ldx int, n int, acc *float32, out *float32, ldo int, flags int, quads int)
TEXT ·gemmF32T41(SB), NOSPLIT, $0-80
	GSETUP

gemmf32t41tile:
	QSTART
	TESTQ $gemmStart, R12
	JNZ   gemmf32t41zero
	VMOVUPS 0(BX), Y0
	VMOVUPS 32(BX), Y1
	VMOVUPS 64(BX), Y2
	VMOVUPS 96(BX), Y3
	JMP     gemmf32t41body

gemmf32t41zero:
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3

gemmf32t41body:
	TESTQ CX, CX
	JZ    gemmf32t41end

gemmf32t41loop:
	VMOVUPS     (DI), Y12
	VFMADD231PS (SI), Y12, Y0
	VFMADD231PS (SI)(R8*1), Y12, Y1
	VFMADD231PS (SI)(R8*2), Y12, Y2
	VFMADD231PS (SI)(R9*1), Y12, Y3
	ADDQ $32, SI
	ADDQ $32, DI
	DECQ CX
	JNZ  gemmf32t41loop

gemmf32t41end:
	TESTQ $gemmFinish, R12
	JNZ   gemmf32t41finish
	VMOVUPS Y0, 0(BX)
	VMOVUPS Y1, 32(BX)
	VMOVUPS Y2, 64(BX)
	VMOVUPS Y3, 96(BX)
	JMP     gemmf32t41next

gemmf32t41finish:
	HSUM4(Y0, Y1, Y2, Y3, X0, X1)
	VMOVUPS X0, (DX)

gemmf32t41next:
	QNEXT(gemmf32t41tile)
	VZEROUPPER
	RET

// gemmF32T81 is batch-1 decode's kernel: eight weight rows against one
// activation row, eight independent chains, the weights streaming straight
// into the multiply-adds. Eight streams keep more cache misses in flight
// than four do, which a lone core's share of memory bandwidth needs. Its
// quads argument counts tiles of eight rows: a tile's accumulators for
// rows 0-3 and 4-7 are two four-row tiles' (acc and acc + 384 bytes), its
// results out and out + 4.
// func gemmF32T81(w *float32, ldw int, x *float32, ldx int, n int, acc *float32, out *float32, ldo int, flags int, quads int)
TEXT ·gemmF32T81(SB), NOSPLIT, $0-80
	GSETUP

gemmf32t81tile:
	QSTART
	LEAQ  (SI)(R8*4), R10
	TESTQ $gemmStart, R12
	JNZ   gemmf32t81zero
	VMOVUPS 0(BX), Y0
	VMOVUPS 32(BX), Y1
	VMOVUPS 64(BX), Y2
	VMOVUPS 96(BX), Y3
	VMOVUPS 384(BX), Y4
	VMOVUPS 416(BX), Y5
	VMOVUPS 448(BX), Y6
	VMOVUPS 480(BX), Y7
	JMP     gemmf32t81body

gemmf32t81zero:
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7

gemmf32t81body:
	TESTQ CX, CX
	JZ    gemmf32t81end

gemmf32t81loop:
	VMOVUPS     (DI), Y12
	VFMADD231PS (SI), Y12, Y0
	VFMADD231PS (SI)(R8*1), Y12, Y1
	VFMADD231PS (SI)(R8*2), Y12, Y2
	VFMADD231PS (SI)(R9*1), Y12, Y3
	VFMADD231PS (R10), Y12, Y4
	VFMADD231PS (R10)(R8*1), Y12, Y5
	VFMADD231PS (R10)(R8*2), Y12, Y6
	VFMADD231PS (R10)(R9*1), Y12, Y7
	ADDQ $32, SI
	ADDQ $32, R10
	ADDQ $32, DI
	DECQ CX
	JNZ  gemmf32t81loop

gemmf32t81end:
	TESTQ $gemmFinish, R12
	JNZ   gemmf32t81finish
	VMOVUPS Y0, 0(BX)
	VMOVUPS Y1, 32(BX)
	VMOVUPS Y2, 64(BX)
	VMOVUPS Y3, 96(BX)
	VMOVUPS Y4, 384(BX)
	VMOVUPS Y5, 416(BX)
	VMOVUPS Y6, 448(BX)
	VMOVUPS Y7, 480(BX)
	JMP     gemmf32t81next

gemmf32t81finish:
	HSUM4(Y0, Y1, Y2, Y3, X0, X1)
	VMOVUPS X0, (DX)
	HSUM4(Y4, Y5, Y6, Y7, X4, X5)
	VMOVUPS X4, 16(DX)

gemmf32t81next:
	LEAQ (R13)(R8*8), R13
	ADDQ $768, BX
	ADDQ $32, DX
	DECQ AX
	JNZ  gemmf32t81tile
	VZEROUPPER
	RET

// F32HSUM reduces y's eight lanes in canon.go's order,
// ((v0+v1)+(v2+v3))+((v4+v5)+(v6+v7)), into the low lane of x (y's low
// half); t is clobbered.
#define F32HSUM(y, x, t) \
	VHADDPS      y, y, y \
	VHADDPS      y, y, y \
	VEXTRACTF128 $1, y, t \
	VADDPS       t, x, x

// func dotF32AVX(a, b *float32, n int) float32
// One accumulator taking the chunks in order, then HSUM4's tree for one
// (canon.go).
TEXT ·dotF32AVX(SB), NOSPLIT, $0-28
	MOVQ   a+0(FP), SI
	MOVQ   b+8(FP), DI
	MOVQ   n+16(FP), CX
	SHRQ   $3, CX
	VXORPS Y0, Y0, Y0
	TESTQ  CX, CX
	JZ     dotdone

dotloop:
	VMOVUPS     (SI), Y4
	VFMADD231PS (DI), Y4, Y0
	ADDQ        $32, SI
	ADDQ        $32, DI
	DECQ        CX
	JNZ         dotloop

dotdone:
	F32HSUM(Y0, X0, X1)
	VZEROUPPER
	MOVSS X0, ret+24(FP)
	RET

// func dotF32PairAVX(a, a2, b *float32, n int, out *[2]float32)
//
// dotF32AVX for two rows at once, a and a2 against b, n floats (a
// multiple of 8, at least 64): two chains of fused multiply-adds, each in
// dotF32's order, so each result has its bits. Row a runs four chunks
// ahead of row a2, so that their loads in one pass fall 128 bytes apart
// in the page, not on the same L1 bank when the rows are a multiple of
// 4 KiB apart.
TEXT ·dotF32PairAVX(SB), NOSPLIT, $0-40
	MOVQ   a+0(FP), SI
	MOVQ   a2+8(FP), DX
	MOVQ   b+16(FP), DI
	MOVQ   n+24(FP), CX
	SHRQ   $3, CX
	SUBQ   $4, CX
	MOVQ   DI, R8
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1

	// Row a's first four chunks.
	VMOVUPS     (DI), Y4
	VFMADD231PS (SI), Y4, Y0
	VMOVUPS     32(DI), Y4
	VFMADD231PS 32(SI), Y4, Y0
	VMOVUPS     64(DI), Y4
	VFMADD231PS 64(SI), Y4, Y0
	VMOVUPS     96(DI), Y4
	VFMADD231PS 96(SI), Y4, Y0
	ADDQ $128, SI
	ADDQ $128, DI

	// Chunk c of row a with chunk c−4 of row a2 (R8 walks b for a2).
plloop:
	VMOVUPS     (DI), Y4
	VFMADD231PS (SI), Y4, Y0
	VMOVUPS     (R8), Y5
	VFMADD231PS (DX), Y5, Y1
	ADDQ        $32, SI
	ADDQ        $32, DI
	ADDQ        $32, DX
	ADDQ        $32, R8
	DECQ        CX
	JNZ         plloop

	// Row a2's last four chunks; then both sums reduced as dotF32AVX's.
	VMOVUPS     (R8), Y5
	VFMADD231PS (DX), Y5, Y1
	VMOVUPS     32(R8), Y5
	VFMADD231PS 32(DX), Y5, Y1
	VMOVUPS     64(R8), Y5
	VFMADD231PS 64(DX), Y5, Y1
	VMOVUPS     96(R8), Y5
	VFMADD231PS 96(DX), Y5, Y1

	MOVQ         out+32(FP), R9
	F32HSUM(Y0, X0, X2)
	MOVSS        X0, (R9)
	F32HSUM(Y1, X1, X2)
	MOVSS        X1, 4(R9)
	VZEROUPPER
	RET
