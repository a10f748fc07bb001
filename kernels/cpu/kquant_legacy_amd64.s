//go:build amd64 && !noasm

#include "textflag.h"
#include "fold8_amd64.h"

// AVX2 dot products of the legacy GGML weight types (32 values a block)
// with one activation row quantized to Q8_0 or Q8_1 (see kquant.go). Each
// computes nrows weight rows, rb bytes apart, against the same activation
// row. Eight rows go at once, lane r of a vector holding row r, so the
// float steps of every block (d·dy, and the block's exact integer sum
// times that fused into the row's sum: canon.go's rule for Q8_0) are those
// of the Go reference, rounded lane by
// lane in its order, without a serial chain of additions; fewer than eight
// remaining rows go one at a time by the same steps in scalar form, so a
// row's bits do not depend on the call that computed it.
//
// A block's 16 bytes of nibbles go to both halves of a vector, the high
// half shifted right by 4 (legshift: dword shift counts 0,0,0,0,4,4,4,4),
// and bytes of 0x0F keep the low nibbles in the low half and the high
// nibbles in the high half: byte j holds value j.
//
// Registers: R8 the current row (group), R10 rb, R11 3·rb, SI and R12 the
// current block of rows 0-3 and 4-7 of a group, DI the activation values,
// DX their scales, CX their Q8_1 sums, AX blocks left, BX rows left, R13
// the next group's bytes to prefetch, R14 out. Y11 (X11 one row at a
// time) is the sum, Y10 (X10) the Q8_1 min sum.

DATA legshift<>+0(SB)/8, $0
DATA legshift<>+8(SB)/8, $0
DATA legshift<>+16(SB)/8, $0x0000000400000004
DATA legshift<>+24(SB)/8, $0x0000000400000004
GLOBL legshift<>(SB), RODATA|NOPTR, $32

DATA legones<>+0(SB)/8, $0x0001000100010001
DATA legones<>+8(SB)/8, $0x0001000100010001
DATA legones<>+16(SB)/8, $0x0001000100010001
DATA legones<>+24(SB)/8, $0x0001000100010001
GLOBL legones<>(SB), RODATA|NOPTR, $32

// leghidx spreads the fifth bits' dword so byte j holds byte j/8 of it.
DATA leghidx<>+0(SB)/8, $0
DATA leghidx<>+8(SB)/8, $0x0101010101010101
DATA leghidx<>+16(SB)/8, $0x0202020202020202
DATA leghidx<>+24(SB)/8, $0x0303030303030303
GLOBL leghidx<>(SB), RODATA|NOPTR, $32

// legbit picks bit j%8 of byte j.
DATA legbit<>+0(SB)/8, $0x8040201008040201
DATA legbit<>+8(SB)/8, $0x8040201008040201
DATA legbit<>+16(SB)/8, $0x8040201008040201
DATA legbit<>+24(SB)/8, $0x8040201008040201
GLOBL legbit<>(SB), RODATA|NOPTR, $32

DATA iq4nltab<>+0(SB)/8, $0xf6eaddcfbfad9881
DATA iq4nltab<>+8(SB)/8, $0x7159453526190d01
GLOBL iq4nltab<>(SB), RODATA|NOPTR, $16

// BYTES sets every byte of y to b (R9 clobbered).
#define BYTES(b, y) \
	MOVL         b, R9 \
	VMOVD        R9, X9 \
	VPBROADCASTD X9, y

// NIBBLES sets y's 32 bytes to the 32 nibbles at mem, in value order.
#define NIBBLES(mem, y) \
	VBROADCASTI128 mem, y \
	VPSRLVD        legshift<>(SB), y, y \
	VPAND          Y15, y, y

// FIFTH sets byte j of y to 0x10 where bit j of the dword at mem is set,
// else 0 (Y14 leghidx, Y13 legbit, Y12 bytes of 0x10).
#define FIFTH(mem, y) \
	VPBROADCASTD mem, y \
	VPSHUFB      Y14, y, y \
	VPAND        Y13, y, y \
	VPCMPEQB     Y13, y, y \
	VPAND        Y12, y, y

// LEGSETUP loads the arguments every row needs.
#define LEGSETUP \
	MOVQ w+0(FP), R8 \
	MOVQ rb+8(FP), R10 \
	LEAQ (R10)(R10*2), R11 \
	MOVQ out+48(FP), R14 \
	MOVQ nrows+56(FP), BX

// LEGROW starts a row (SI) or a group of eight (SI, R12): the activation
// row's pointers and zero sums.
#define LEGROW \
	MOVQ  R8, SI \
	LEAQ  (R8)(R10*4), R12 \
	LEAQ  (R8)(R10*8), R13 \
	MOVQ  xq+16(FP), DI \
	MOVQ  xd+24(FP), DX \
	MOVQ  xs+32(FP), CX \
	MOVQ  nb+40(FP), AX \
	VXORPS Y11, Y11, Y11 \
	VXORPS Y10, Y10, Y10

// XSETUP and XGROUP are the rewrites' (expandQ5_0X8AVX, below).
// XSETUP loads the arguments and c, broadcast, into Y11.
#define XSETUP \
	MOVQ         dst+0(FP), DI \
	MOVQ         w+8(FP), R8 \
	MOVQ         rb+16(FP), R10 \
	LEAQ         (R10)(R10*2), R11 \
	MOVQ         ngroups+32(FP), BX \
	VPBROADCASTD c+40(FP), Y11

// XGROUP starts a group.
#define XGROUP \
	MOVQ R8, SI \
	LEAQ (R8)(R10*4), R12 \
	MOVQ nb+24(FP), AX

// LEGPF asks for three more cache lines of the next group's rows, R13 on
// from its start: a group's eight rows are a few KB of contiguous bytes
// read in eight short streams, too short for the hardware prefetcher to
// run ahead of, and three lines a block step (192 bytes, at least eight
// blocks of these types) cover the next group by the end of this one.
#define LEGPF \
	PREFETCHT0 (R13) \
	PREFETCHT0 64(R13) \
	PREFETCHT0 128(R13) \
	ADDQ       $192, R13

// LEGNEXT moves to the next block of blockBytes, for one row or a group.
#define LEGNEXT(blockBytes) \
	ADDQ $blockBytes, SI \
	ADDQ $blockBytes, R12 \
	ADDQ $32, DI \
	ADDQ $4, DX \
	ADDQ $4, CX \
	DECQ AX

// ROWS8 applies a row macro m(base, acc) to the block of each of
// the eight rows of a group, row r's sums in Yr.
#define ROWS8(m) \
	m((SI), Y0) \
	m((SI)(R10*1), Y1) \
	m((SI)(R10*2), Y2) \
	m((SI)(R11*1), Y3) \
	m((R12), Y4) \
	m((R12)(R10*1), Y5) \
	m((R12)(R10*2), Y6) \
	m((R12)(R11*1), Y7)

// F16X8 sets y to the F16 fields at offset off of the eight rows' blocks,
// as floats (R9 and x, y's low half, clobbered).
#define F16X8(off, x, y) \
	MOVWLZX off(SI), R9 \
	VMOVD   R9, x \
	VPINSRW $1, off(SI)(R10*1), x, x \
	VPINSRW $2, off(SI)(R10*2), x, x \
	VPINSRW $3, off(SI)(R11*1), x, x \
	VPINSRW $4, off(R12), x, x \
	VPINSRW $5, off(R12)(R10*1), x, x \
	VPINSRW $6, off(R12)(R10*2), x, x \
	VPINSRW $7, off(R12)(R11*1), x, x \
	VCVTPH2PS x, y

// SUM8 fuses each row's s·(d·dy) into its sum in Y11, the block sums s
// in Y1, d the F16 at the start of each row's block; Y2, Y3 clobbered.
#define SUM8 \
	F16X8(0, X2, Y2) \
	VBROADCASTSS (DX), Y3 \
	VMULPS       Y3, Y2, Y2 \
	VFMADD231PS  Y1, Y2, Y11

// MIN8 adds each row's m·s_x to its min sum in Y10, m the F16 at offset 2
// of its block, s_x the activation block's d·Σq; Y2, Y3 clobbered.
#define MIN8 \
	F16X8(2, X2, Y2) \
	VBROADCASTSS (CX), Y3 \
	VMULPS       Y3, Y2, Y2 \
	VADDPS       Y2, Y10, Y10

// HSUM1 sets X1 to the exact sum of Y0's eight int32 lanes, as a float
// (X0 clobbered).
#define HSUM1 \
	VEXTRACTI128 $1, Y0, X1 \
	VPADDD       X1, X0, X0 \
	VPSHUFD      $0x4e, X0, X1 \
	VPADDD       X1, X0, X0 \
	VPSHUFD      $0xb1, X0, X1 \
	VPADDD       X1, X0, X1 \
	VCVTDQ2PS    X1, X1

// SUM1 is SUM8 for one row: s·(d·dy) fused into X11, s in X1.
#define SUM1 \
	MOVWLZX     (SI), R9 \
	VMOVD       R9, X2 \
	VCVTPH2PS   X2, X2 \
	VMULSS      (DX), X2, X2 \
	VFMADD231SS X1, X2, X11

// MIN1 is MIN8 for one row.
#define MIN1 \
	MOVWLZX   2(SI), R9 \
	VMOVD     R9, X2 \
	VCVTPH2PS X2, X2 \
	VMULSS    (CX), X2, X2 \
	VADDSS    X2, X10, X10

// The N kernels compute ngroups groups of eight weight rows against na
// activation rows (1 ≤ na ≤ 8, xqs and xds bytes apart in values and
// scales), out row a os bytes after row a−1. A block of the eight rows is
// decoded once to bytes on the stack (frame 0-255, IQ4_NL's signed values
// at 256-511), their d at 512, then taken with each activation row in
// turn: that row's sums at 544+32·a, by the steps of the one-row kernels'
// groups, so every output has their bits. Prefill then decodes a weight
// block once per eight activation rows, not once per row.
//
// Registers: as the one-row kernels, but R9 and CX the current activation
// row's values and scale, AX its sums; the frame holds at 800 the blocks
// left, at 808 the end of the sums. Y9 holds legones.

// ROWS8OFF applies m(base, off) to the block of each of the eight rows,
// row r's bytes at off = 32·r of the frame.
#define ROWS8OFF(m) \
	m((SI), 0) \
	m((SI)(R10*1), 32) \
	m((SI)(R10*2), 64) \
	m((SI)(R11*1), 96) \
	m((R12), 128) \
	m((R12)(R10*1), 160) \
	m((R12)(R10*2), 192) \
	m((R12)(R11*1), 224)

// MUL8 applies m(off, acc) to each of the eight decoded rows.
#define MUL8(m) \
	m(0, Y0) \
	m(32, Y1) \
	m(64, Y2) \
	m(96, Y3) \
	m(128, Y4) \
	m(160, Y5) \
	m(192, Y6) \
	m(224, Y7)

// NSETUP loads the arguments and sets the end of the sums.
#define NSETUP \
	MOVQ w+0(FP), R8 \
	MOVQ rb+8(FP), R10 \
	LEAQ (R10)(R10*2), R11 \
	MOVQ out+72(FP), R14 \
	MOVQ ngroups+64(FP), BX \
	MOVQ na+56(FP), AX \
	SHLQ $5, AX \
	LEAQ 544(SP)(AX*1), AX \
	MOVQ AX, 808(SP) \
	VMOVDQU legones<>(SB), Y9

// NGROUP starts a group: zero sums, the rows' pointers, the activations'
// first block.
#define NGROUP(zero) \
	VXORPS Y0, Y0, Y0 \
	LEAQ   544(SP), AX \
zero: \
	VMOVUPS Y0, (AX) \
	ADDQ    $32, AX \
	CMPQ    AX, 808(SP) \
	JNE     zero \
	MOVQ    R8, SI \
	LEAQ    (R8)(R10*4), R12 \
	LEAQ    (R8)(R10*8), R13 \
	MOVQ    xq+16(FP), DI \
	MOVQ    xd+32(FP), DX \
	MOVQ    nb+48(FP), AX \
	MOVQ    AX, 800(SP)

// NBLOCK ends the decoding of a block: the rows' d, prefetch, and the
// first activation row.
#define NBLOCK \
	F16X8(0, X2, Y2) \
	VMOVUPS Y2, 512(SP) \
	LEGPF \
	MOVQ    DI, R9 \
	MOVQ    DX, CX \
	LEAQ    544(SP), AX

// NSUM fuses each row's s·(d·dy) into the activation row's sums, as
// SUM8; the block sums s in Y1; Y2, Y3 clobbered.
#define NSUM \
	VBROADCASTSS (CX), Y3 \
	VMULPS       512(SP), Y3, Y2 \
	VFMADD213PS  (AX), Y1, Y2 \
	VMOVUPS      Y2, (AX) \
	ADDQ         xqs+24(FP), R9 \
	ADDQ         xds+40(FP), CX \
	ADDQ         $32, AX \
	CMPQ         AX, 808(SP)

// NNEXT moves to the next block of blockBytes.
#define NNEXT(blockBytes) \
	ADDQ $blockBytes, SI \
	ADDQ $blockBytes, R12 \
	ADDQ $32, DI \
	ADDQ $4, DX \
	DECQ 800(SP)

// NSTORE writes the group's sums, one activation row os bytes after the
// other, and moves to the next group.
#define NSTORE(store) \
	LEAQ 544(SP), AX \
	MOVQ R14, R9 \
store: \
	VMOVUPS (AX), Y0 \
	VMOVUPS Y0, (R9) \
	ADDQ    os+80(FP), R9 \
	ADDQ    $32, AX \
	CMPQ    AX, 808(SP) \
	JNE     store \
	ADDQ    $32, R14 \
	LEAQ    (R8)(R10*8), R8 \
	DECQ    BX

// Q50DEC decodes the block at base to its values 0..31 at off.
#define Q50DEC(base, off) \
	NIBBLES(6 base, Y0) \
	FIFTH(2 base, Y8) \
	VPOR    Y8, Y0, Y0 \
	VMOVDQU Y0, off(SP)

// Q50MUL sets acc to int32 partial sums of the decoded row at off.
#define Q50MUL(off, acc) \
	VMOVDQU    off(SP), acc \
	VPMADDUBSW (R9), acc, acc \
	VPSUBW     Y10, acc, acc \
	VPMADDWD   Y9, acc, acc

// LEGROWS is a rows kernel after its setup: groups of eight weight rows,
// a row to a lane, while eight are left, then the rest one at a time by
// the same steps. PREP readies the activation block, ROW decodes the
// type's blocks of size bytes, MIN8 and MIN1 take a Q8_1 type's minimum
// term into its own sum and ADD8 and ADD1 add that sum last (LEGNONE for
// the Q8_0 types).
#define LEGROWS(group, gblock, tail, row, rblock, done, PREP, ROW, bytes, MIN8, MIN1, ADD8, ADD1) \
	CMPQ BX, $8 \
	JLT  tail \
group: \
	LEGROW \
gblock: \
	PREP \
	ROWS8(ROW) \
	LEGPF \
	R8FOLD \
	SUM8 \
	MIN8 \
	LEGNEXT(bytes) \
	JNZ gblock \
	ADD8 \
	VMOVUPS Y11, (R14) \
	ADDQ    $32, R14 \
	LEAQ    (R8)(R10*8), R8 \
	SUBQ    $8, BX \
	CMPQ    BX, $8 \
	JGE     group \
tail: \
	TESTQ BX, BX \
	JZ    done \
row: \
	LEGROW \
rblock: \
	PREP \
	ROW((SI), Y0) \
	HSUM1 \
	SUM1 \
	MIN1 \
	LEGNEXT(bytes) \
	JNZ rblock \
	ADD1 \
	VMOVSS X11, (R14) \
	ADDQ   $4, R14 \
	ADDQ   R10, R8 \
	DECQ   BX \
	JNZ    row \
done: \
	VZEROUPPER \
	RET

// LEGNONE stands for a step a type does not take.
#define LEGNONE

// LEGADD8 and LEGADD1 add the minimum's sum (Y10) to the result (Y11).
#define LEGADD8 VADDPS Y10, Y11, Y11
#define LEGADD1 VADDSS X10, X11, X11

// Q5_0: d (F16), the fifth bits qh (4 bytes), 16 bytes of nibbles; value
// j is nibble j | bit j of qh << 4, less 16. VPMADDUBSW takes the
// unsigned 0..31 (pairs at most 2·31·127, no saturation) and Y10 holds
// the block's 16·(x_2i + x_2i+1), taken off in int16 (the differences
// are the pairs' sums of (v−16)·x, at most 2·16·128 in size): exact.

// Q50PREP sets Y10 to the pair sums 16·(x_2i + x_2i+1) of the block.
#define Q50PREP VPMADDUBSW (DI), Y12, Y10

// Q50ROW sets acc to int32 partial sums of the block at base.
#define Q50ROW(base, acc) \
	NIBBLES(6 base, acc) \
	FIFTH(2 base, Y8) \
	VPOR       Y8, acc, acc \
	VPMADDUBSW (DI), acc, acc \
	VPSUBW     Y10, acc, acc \
	VPMADDWD   legones<>(SB), acc, acc

// func dotQ5_0RowsAVX(w *byte, rb int, xq *int8, xd, xs *float32, nb int, out *float32, nrows int)
TEXT ·dotQ5_0RowsAVX(SB), NOSPLIT, $0-64
	LEGSETUP
	BYTES($0x0f0f0f0f, Y15)
	VMOVDQU leghidx<>(SB), Y14
	VMOVDQU legbit<>(SB), Y13
	BYTES($0x10101010, Y12)
	LEGROWS(q50group, q50gblock, q50tail, q50row, q50rblock, q50done, Q50PREP, Q50ROW, 22, LEGNONE, LEGNONE, LEGNONE, LEGNONE)

// IQ4_NL: d (F16) and 16 bytes of indices into the non-linear table
// (Y13). As for IQ4_XS the values are signed, so their absolute values
// become VPMADDUBSW's unsigned operand and their signs move onto the
// activations (Y12, the block's values): pairs at most 2·127·127. The
// sign move assumes no activation is −128 (it cannot be negated): the
// quantizer gives −128 only for a non-finite input, whose results are
// then infinite or NaN, with a sign that may differ from the reference's.

// NLROW sets acc to int32 partial sums of the block at base.
#define NLROW(base, acc) \
	NIBBLES(2 base, Y8) \
	VPSHUFB    Y8, Y13, Y8 \
	VPSIGNB    Y8, Y8, acc \
	VPSIGNB    Y8, Y12, Y8 \
	VPMADDUBSW Y8, acc, acc \
	VPMADDWD   legones<>(SB), acc, acc

#define NLPREP VMOVDQU (DI), Y12

// func dotIQ4NLRowsAVX(w *byte, rb int, xq *int8, xd, xs *float32, nb int, out *float32, nrows int)
TEXT ·dotIQ4NLRowsAVX(SB), NOSPLIT, $0-64
	LEGSETUP
	BYTES($0x0f0f0f0f, Y15)
	VBROADCASTI128 iq4nltab<>(SB), Y13
	LEGROWS(nlgroup, nlgblock, nltail, nlrow, nlrblock, nldone, NLPREP, NLROW, 18, LEGNONE, LEGNONE, LEGNONE, LEGNONE)

// Q4_1 and Q5_1: d and the minimum m (F16s), for Q5_1 the fifth bits qh,
// and 16 bytes of nibbles; the values (0..15, or nibble | bit j of qh << 4)
// are unsigned as they are (pairs at most 2·31·127). A row's result is
// Σ(d·dy)·s + Σm·s_x, the two sums kept apart in Y11 and Y10 as the
// reference keeps them.

// Q41ROW sets acc to int32 partial sums of the block at base.
#define Q41ROW(base, acc) \
	NIBBLES(4 base, acc) \
	VPMADDUBSW (DI), acc, acc \
	VPMADDWD   legones<>(SB), acc, acc

// func dotQ4_1RowsAVX(w *byte, rb int, xq *int8, xd, xs *float32, nb int, out *float32, nrows int)
TEXT ·dotQ4_1RowsAVX(SB), NOSPLIT, $0-64
	LEGSETUP
	BYTES($0x0f0f0f0f, Y15)
	LEGROWS(q41group, q41gblock, q41tail, q41row, q41rblock, q41done, LEGNONE, Q41ROW, 20, MIN8, MIN1, LEGADD8, LEGADD1)

// Q51ROW sets acc to int32 partial sums of the block at base.
#define Q51ROW(base, acc) \
	NIBBLES(8 base, acc) \
	FIFTH(4 base, Y8) \
	VPOR       Y8, acc, acc \
	VPMADDUBSW (DI), acc, acc \
	VPMADDWD   legones<>(SB), acc, acc

// func dotQ5_1RowsAVX(w *byte, rb int, xq *int8, xd, xs *float32, nb int, out *float32, nrows int)
TEXT ·dotQ5_1RowsAVX(SB), NOSPLIT, $0-64
	LEGSETUP
	BYTES($0x0f0f0f0f, Y15)
	VMOVDQU leghidx<>(SB), Y14
	VMOVDQU legbit<>(SB), Y13
	BYTES($0x10101010, Y12)
	LEGROWS(q51group, q51gblock, q51tail, q51row, q51rblock, q51done, LEGNONE, Q51ROW, 24, MIN8, MIN1, LEGADD8, LEGADD1)

// func dotQ5_0RowsNAVX(w *byte, rb int, xq *int8, xqs int, xd *float32, xds int, nb, na, ngroups int, out *float32, os int)
TEXT ·dotQ5_0RowsNAVX(SB), 0, $816-88
	BYTES($0x0f0f0f0f, Y15)
	VMOVDQU leghidx<>(SB), Y14
	VMOVDQU legbit<>(SB), Y13
	BYTES($0x10101010, Y12)
	NSETUP

q50ngroup:
	NGROUP(q50nzero)

q50nblock:
	ROWS8OFF(Q50DEC)
	NBLOCK

q50nact:
	VPMADDUBSW (R9), Y12, Y10
	MUL8(Q50MUL)
	R8FOLD
	NSUM
	JNE q50nact
	NNEXT(22)
	JNZ q50nblock
	NSTORE(q50nstore)
	JNZ q50ngroup
	VZEROUPPER
	RET

// NLDEC decodes the block at base: |value| at off, the value at 256+off.
#define NLDEC(base, off) \
	NIBBLES(2 base, Y8) \
	VPSHUFB Y8, Y13, Y8 \
	VPSIGNB Y8, Y8, Y0 \
	VMOVDQU Y0, off(SP) \
	VMOVDQU Y8, 256+off(SP)

// NLMUL sets acc to int32 partial sums of the decoded row at off, the
// activations in Y12.
#define NLMUL(off, acc) \
	VPSIGNB    256+off(SP), Y12, Y8 \
	VMOVDQU    off(SP), acc \
	VPMADDUBSW Y8, acc, acc \
	VPMADDWD   Y9, acc, acc

// func dotIQ4NLRowsNAVX(w *byte, rb int, xq *int8, xqs int, xd *float32, xds int, nb, na, ngroups int, out *float32, os int)
TEXT ·dotIQ4NLRowsNAVX(SB), 0, $816-88
	BYTES($0x0f0f0f0f, Y15)
	VBROADCASTI128 iq4nltab<>(SB), Y13
	NSETUP

nlngroup:
	NGROUP(nlnzero)

nlnblock:
	ROWS8OFF(NLDEC)
	NBLOCK

nlnact:
	VMOVDQU (R9), Y12
	MUL8(NLMUL)
	R8FOLD
	NSUM
	JNE nlnact
	NNEXT(18)
	JNZ nlnblock
	NSTORE(nlnstore)
	JNZ nlngroup
	VZEROUPPER
	RET

// The rewrites of legacyx8.go: ngroups groups of eight Q5_0 or IQ4_NL
// weight rows (rb bytes apart, from w on, nb blocks each) into Q8_0 in
// the ×8 layout at dst. A block of the eight rows is decoded to a vector
// a row (Y0-Y7, byte j = value j, plus the bias), the eight vectors
// transposed as an 8×8 matrix of dwords, so that vector j holds dword j of
// rows 0-7, and stored after the rows' eight scales, copied as they are.
//
// Registers: R8 the current group, R10 rb, R11 3·rb, SI and R12 the
// current block of rows 0-3 and 4-7, DI the output block, AX blocks left,
// BX groups left, R13 the output minimums (Q4_1, Q5_1); Y11 the bias (plus
// Q5_0's −16) or the biased table (IQ4_NL).

// XSC copies the F16 scale at src to off(DI).
#define XSC(src, off) \
	MOVW src, R9 \
	MOVW R9, off(DI)

// XSCALES copies the eight rows' F16 scales (offset 0 of each block).
#define XSCALES \
	XSC((SI), 0) \
	XSC((SI)(R10*1), 2) \
	XSC((SI)(R10*2), 4) \
	XSC((SI)(R11*1), 6) \
	XSC((R12), 8) \
	XSC((R12)(R10*1), 10) \
	XSC((R12)(R10*2), 12) \
	XSC((R12)(R11*1), 14)

// XT4 transposes the dwords of four rows a, b, c, d in place (Y8, Y9
// clobbered): afterwards a holds dwords 2 and 6 of the four rows (row r's
// at 4r of each half), b dwords 3 and 7, c dwords 0 and 4, d 1 and 5.
#define XT4(a, b, c, d) \
	VPUNPCKLDQ  b, a, Y8 \
	VPUNPCKHDQ  b, a, Y9 \
	VPUNPCKLDQ  d, c, a \
	VPUNPCKHDQ  d, c, b \
	VPUNPCKLQDQ a, Y8, c \
	VPUNPCKHQDQ a, Y8, d \
	VPUNPCKLQDQ b, Y9, a \
	VPUNPCKHQDQ b, Y9, b

// XSTORE transposes Y0-Y7 and stores dword j of the eight rows at
// 16+32·j of the output block.
#define XSTORE \
	XT4(Y0, Y1, Y2, Y3) \
	XT4(Y4, Y5, Y6, Y7) \
	VPERM2I128 $0x20, Y6, Y2, Y8 \
	VPERM2I128 $0x31, Y6, Y2, Y9 \
	VMOVDQU    Y8, 16(DI) \
	VMOVDQU    Y9, 144(DI) \
	VPERM2I128 $0x20, Y7, Y3, Y8 \
	VPERM2I128 $0x31, Y7, Y3, Y9 \
	VMOVDQU    Y8, 48(DI) \
	VMOVDQU    Y9, 176(DI) \
	VPERM2I128 $0x20, Y4, Y0, Y8 \
	VPERM2I128 $0x31, Y4, Y0, Y9 \
	VMOVDQU    Y8, 80(DI) \
	VMOVDQU    Y9, 208(DI) \
	VPERM2I128 $0x20, Y5, Y1, Y8 \
	VPERM2I128 $0x31, Y5, Y1, Y9 \
	VMOVDQU    Y8, 112(DI) \
	VMOVDQU    Y9, 240(DI)

// XNEXT moves to the next block of blockBytes, then (at the end of a
// group's blocks) to the next group.
#define XNEXT(blockBytes, block, group) \
	ADDQ $blockBytes, SI \
	ADDQ $blockBytes, R12 \
	ADDQ $272, DI \
	DECQ AX \
	JNZ  block \
	LEAQ (R8)(R10*8), R8 \
	DECQ BX \
	JNZ  group

// Q50X decodes the Q5_0 block at base to y: its values 0..31 plus c's
// bytes, that is v−16 XOR the bias.
#define Q50X(base, y) \
	NIBBLES(6 base, y) \
	FIFTH(2 base, Y9) \
	VPOR   Y9, y, y \
	VPADDB Y11, y, y

// func expandQ5_0X8AVX(dst, w *byte, rb, nb, ngroups int, c uint32, mins *float32)
// c: four bytes of bias−16 (0xf0 unbiased, 0x70 biased); mins unused.
TEXT ·expandQ5_0X8AVX(SB), NOSPLIT, $0-56
	XSETUP
	BYTES($0x0f0f0f0f, Y15)
	VMOVDQU leghidx<>(SB), Y14
	VMOVDQU legbit<>(SB), Y13
	BYTES($0x10101010, Y12)

q50xgroup:
	XGROUP

q50xblock:
	XSCALES
	ROWS8(Q50X)
	XSTORE
	XNEXT(22, q50xblock, q50xgroup)
	VZEROUPPER
	RET

// NLX decodes the IQ4_NL block at base to y: its values XOR the bias.
#define NLX(base, y) \
	NIBBLES(2 base, y) \
	VPSHUFB y, Y11, y

// func expandIQ4NLX8AVX(dst, w *byte, rb, nb, ngroups int, c uint32, mins *float32)
// c: four bytes of the bias (0 or 0x80); mins unused.
TEXT ·expandIQ4NLX8AVX(SB), NOSPLIT, $0-56
	XSETUP
	BYTES($0x0f0f0f0f, Y15)
	VBROADCASTI128 iq4nltab<>(SB), Y10
	VPXOR          Y10, Y11, Y11

nlxgroup:
	XGROUP

nlxblock:
	XSCALES
	ROWS8(NLX)
	XSTORE
	XNEXT(18, nlxblock, nlxgroup)
	VZEROUPPER
	RET

// Q4_1 and Q5_1 rewrite their values 0..15 (0..31) the same way, plus the
// bias, and their minimums, as floats, to mins: eight a block, lane l =
// row l, the blocks of a group in order, group after group.

// XMINS writes the eight rows' minimums (the F16 at offset 2) as floats.
#define XMINS \
	F16X8(2, X9, Y9) \
	VMOVUPS Y9, (R13) \
	ADDQ    $32, R13

// Q41X decodes the Q4_1 block at base to y: its values plus the bias.
#define Q41X(base, y) \
	NIBBLES(4 base, y) \
	VPADDB Y11, y, y

// func expandQ4_1X8AVX(dst, w *byte, rb, nb, ngroups int, c uint32, mins *float32)
// c: four bytes of the bias (0 or 0x80).
TEXT ·expandQ4_1X8AVX(SB), NOSPLIT, $0-56
	XSETUP
	MOVQ mins+48(FP), R13
	BYTES($0x0f0f0f0f, Y15)

q41xgroup:
	XGROUP

q41xblock:
	XSCALES
	XMINS
	ROWS8(Q41X)
	XSTORE
	XNEXT(20, q41xblock, q41xgroup)
	VZEROUPPER
	RET

// Q51X decodes the Q5_1 block at base to y: its values plus the bias.
#define Q51X(base, y) \
	NIBBLES(8 base, y) \
	FIFTH(4 base, Y9) \
	VPOR   Y9, y, y \
	VPADDB Y11, y, y

// func expandQ5_1X8AVX(dst, w *byte, rb, nb, ngroups int, c uint32, mins *float32)
// c: four bytes of the bias (0 or 0x80).
TEXT ·expandQ5_1X8AVX(SB), NOSPLIT, $0-56
	XSETUP
	MOVQ mins+48(FP), R13
	BYTES($0x0f0f0f0f, Y15)
	VMOVDQU leghidx<>(SB), Y14
	VMOVDQU legbit<>(SB), Y13
	BYTES($0x10101010, Y12)

q51xgroup:
	XGROUP

q51xblock:
	XSCALES
	XMINS
	ROWS8(Q51X)
	XSTORE
	XNEXT(24, q51xblock, q51xgroup)
	VZEROUPPER
	RET

// func addMinsX8AVX(mins *float32, nb int, s *float32, ss, na int, out *float32, os, ngroups int)
//
// For the minimums that expandQ4_1X8AVX and expandQ5_1X8AVX wrote:
// adds to out[a·os + 8g + l] (os in bytes) the sum over blocks b, in
// order from +0, of mins[(g·nb + b)·8 + l] · s[a·ss + b] (ss in bytes),
// each product rounded, then added: the reference's Σm·s_x, added to its
// Σ(d·dy)·s, for groups g < ngroups and activation rows a < na. Four
// activation rows go at once while four are left, so that their sums,
// chains of dependent additions, overlap.
//
// Registers: SI the group's minimums, R8 nb, R9 ss, R13 3·ss, R12 os,
// R11 the group's results for row 0, BX groups left, R10 rows left, CX
// the current rows' s, DX their results, AX the minimums of the block,
// R14 blocks left.
TEXT ·addMinsX8AVX(SB), NOSPLIT, $0-64
	MOVQ mins+0(FP), SI
	MOVQ nb+8(FP), R8
	MOVQ ss+24(FP), R9
	LEAQ (R9)(R9*2), R13
	MOVQ out+40(FP), R11
	MOVQ os+48(FP), R12
	MOVQ ngroups+56(FP), BX

amgroup:
	MOVQ s+16(FP), CX
	MOVQ R11, DX
	MOVQ na+32(FP), R10

amrows:
	CMPQ R10, $4
	JLT  amone
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	MOVQ   SI, AX
	MOVQ   R8, R14
	MOVQ   CX, DI

am4block:
	VMOVUPS      (AX), Y4
	VBROADCASTSS (DI), Y5
	VMULPS       Y4, Y5, Y5
	VADDPS       Y5, Y0, Y0
	VBROADCASTSS (DI)(R9*1), Y6
	VMULPS       Y4, Y6, Y6
	VADDPS       Y6, Y1, Y1
	VBROADCASTSS (DI)(R9*2), Y7
	VMULPS       Y4, Y7, Y7
	VADDPS       Y7, Y2, Y2
	VBROADCASTSS (DI)(R13*1), Y8
	VMULPS       Y4, Y8, Y8
	VADDPS       Y8, Y3, Y3
	ADDQ         $32, AX
	ADDQ         $4, DI
	DECQ         R14
	JNZ          am4block

	VADDPS  (DX), Y0, Y0
	VMOVUPS Y0, (DX)
	ADDQ    R12, DX
	VADDPS  (DX), Y1, Y1
	VMOVUPS Y1, (DX)
	ADDQ    R12, DX
	VADDPS  (DX), Y2, Y2
	VMOVUPS Y2, (DX)
	ADDQ    R12, DX
	VADDPS  (DX), Y3, Y3
	VMOVUPS Y3, (DX)
	ADDQ    R12, DX
	LEAQ    (CX)(R9*4), CX
	SUBQ    $4, R10
	JMP     amrows

amone:
	TESTQ R10, R10
	JZ    amnext
	VXORPS Y0, Y0, Y0
	MOVQ   SI, AX
	MOVQ   R8, R14
	MOVQ   CX, DI

am1block:
	VBROADCASTSS (DI), Y5
	VMULPS       (AX), Y5, Y5
	VADDPS       Y5, Y0, Y0
	ADDQ         $32, AX
	ADDQ         $4, DI
	DECQ         R14
	JNZ          am1block

	VADDPS  (DX), Y0, Y0
	VMOVUPS Y0, (DX)
	ADDQ    R12, DX
	ADDQ    R9, CX
	DECQ    R10
	JMP     amone

amnext:
	MOVQ R8, AX
	SHLQ $5, AX
	ADDQ AX, SI
	ADDQ $32, R11
	DECQ BX
	JNZ  amgroup
	VZEROUPPER
	RET
