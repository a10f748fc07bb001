//go:build amd64 && !noasm

#include "textflag.h"
#include "q8group_amd64.h"

// The AVX2 multi-row kernel for Q8_0 weights in the ×8 layout (pack.go): one to
// eight activation rows against runs of eight-row groups. A group's block
// is 272 bytes: the eight F16 scales, then for each 4-byte group g of the
// block the eight rows' four values (row l at 16 + 32g + 4l), so one load
// is group g of the eight rows, lane l = row l. Each activation row's
// group g, broadcast to all lanes, meets them in one VPSIGNB, VPMADDUBSW,
// VPMADDWD and VPADDD (dot_amd64.s explains the signs), and after the
// eight groups lane l holds row l's exact block sum, which is scaled and
// fused into the row's result as canon.go defines. Nothing is transposed
// or gathered: the layout did that once, at load, and the groups of a
// chunk are one sequential stream. AVX-512 VNNI hosts store the weights
// biased and run the kernels of q8x8b_vnni_amd64.s instead.
//
// Registers: Y0-Y7 activation row a's block sums (a < na); Y8-Y11 rows
// 0-3's results, rows 4-7's in the frame (32a - 128); Y12 a group's eight
// rows' values (later their scales), Y13 their absolute values, Y14
// scratch, Y15 int16 ones. SI walks the weight blocks, group after
// group; DI is activation row 0's current block, the rows R13 bytes apart (R14 =
// 3·R13), R15 row 4's; DX row 0's scale, the rows' scales AX bytes apart
// (BX = 3·AX), R9 row 4's; CX the blocks left, R11 the groups left, R12
// the group's results for row 0, the rows R8 bytes apart.

// PFD is how far ahead X8PF asks for weights: four blocks. The groups are
// one sequential stream the hardware prefetcher follows, but asking ahead
// as well lets memory keep up while a pass of several rows computes:
// measured (one thread, 48 MB of weights: BenchmarkVerifyRows) a one-row
// pass took about 10% less time, a four-row one 10-20% less; 2 and 6
// blocks ahead did no better.
#define PFD 1088

// X8INIT sets the constants: Y15 int16 ones. X8W(g) loads 4-byte group g
// of the block's eight rows into Y12, their absolute values into Y13.
#define X8INIT \
	VPCMPEQW Y15, Y15, Y15 \
	VPSRLW   $15, Y15, Y15

#define X8W(g) \
	VMOVDQU 16+g*32(SI), Y12 \
	VPABSB  Y12, Y13

// Q8GFIRST and Q8GNEXT (q8group_amd64.h) form the block sums of a group
// in Y12 against an activation group.

// X8S fuses the block sums S (int32), times the rows' d_w (Y12) times the
// activation row's scale at xd, into its results R; X8SM into results in
// the frame at M.
#define X8S(xd, S, R) \
	VCVTDQ2PS    S, S \
	VBROADCASTSS xd, Y14 \
	VMULPS       Y14, Y12, Y14 \
	VFMADD231PS  Y14, S, R

#define X8SM(xd, S, M) \
	VCVTDQ2PS    S, S \
	VBROADCASTSS xd, Y14 \
	VMULPS       Y14, Y12, Y14 \
	VFMADD213PS  M, S, Y14 \
	VMOVUPS      Y14, M

#define X8F1(g) \
	Q8GFIRST(g*4(DI), Y0)

#define X8F2(g) \
	X8F1(g) \
	Q8GFIRST(g*4(DI)(R13*1), Y1)

#define X8F3(g) \
	X8F2(g) \
	Q8GFIRST(g*4(DI)(R13*2), Y2)

#define X8F4(g) \
	X8F3(g) \
	Q8GFIRST(g*4(DI)(R14*1), Y3)

#define X8F5(g) \
	X8F4(g) \
	Q8GFIRST(g*4(R15), Y4)

#define X8F6(g) \
	X8F5(g) \
	Q8GFIRST(g*4(R15)(R13*1), Y5)

#define X8F7(g) \
	X8F6(g) \
	Q8GFIRST(g*4(R15)(R13*2), Y6)

#define X8F8(g) \
	X8F7(g) \
	Q8GFIRST(g*4(R15)(R14*1), Y7)

#define X8N1(g) \
	Q8GNEXT(g*4(DI), Y0)

#define X8N2(g) \
	X8N1(g) \
	Q8GNEXT(g*4(DI)(R13*1), Y1)

#define X8N3(g) \
	X8N2(g) \
	Q8GNEXT(g*4(DI)(R13*2), Y2)

#define X8N4(g) \
	X8N3(g) \
	Q8GNEXT(g*4(DI)(R14*1), Y3)

#define X8N5(g) \
	X8N4(g) \
	Q8GNEXT(g*4(R15), Y4)

#define X8N6(g) \
	X8N5(g) \
	Q8GNEXT(g*4(R15)(R13*1), Y5)

#define X8N7(g) \
	X8N6(g) \
	Q8GNEXT(g*4(R15)(R13*2), Y6)

#define X8N8(g) \
	X8N7(g) \
	Q8GNEXT(g*4(R15)(R14*1), Y7)

#define X8S1 \
	X8S((DX), Y0, Y8)

#define X8S2 \
	X8S1 \
	X8S((DX)(AX*1), Y1, Y9)

#define X8S3 \
	X8S2 \
	X8S((DX)(AX*2), Y2, Y10)

#define X8S4 \
	X8S3 \
	X8S((DX)(BX*1), Y3, Y11)

#define X8S5 \
	X8S4 \
	X8SM((R9), Y4, 0(SP))

#define X8S6 \
	X8S5 \
	X8SM((R9)(AX*1), Y5, 32(SP))

#define X8S7 \
	X8S6 \
	X8SM((R9)(AX*2), Y6, 64(SP))

#define X8S8 \
	X8S7 \
	X8SM((R9)(BX*1), Y7, 96(SP))

// X8GROUP starts a group: the activations' first block, the results +0.
#define X8GROUP \
	MOVQ   xq+8(FP), DI \
	MOVQ   xd+24(FP), DX \
	MOVQ   nb+32(FP), CX \
	VXORPS Y8, Y8, Y8 \
	VXORPS Y9, Y9, Y9 \
	VXORPS Y10, Y10, Y10 \
	VXORPS Y11, Y11, Y11

#define X8ZEROM \
	VMOVUPS Y8, 0(SP) \
	VMOVUPS Y8, 32(SP) \
	VMOVUPS Y8, 64(SP) \
	VMOVUPS Y8, 96(SP)

// X8PF asks for the block PFD bytes ahead.
#define X8PF \
	PREFETCHT0 PFD(SI) \
	PREFETCHT0 PFD+64(SI) \
	PREFETCHT0 PFD+128(SI) \
	PREFETCHT0 PFD+192(SI) \
	PREFETCHT0 PFD+256(SI)

// X8HI points R15 and R9 at activation row 4's block and scale.
#define X8HI \
	LEAQ (DI)(R13*4), R15 \
	LEAQ (DX)(AX*4), R9

// X8NEXT moves on to the next block, looping to label while blocks are
// left.
#define X8NEXT(label) \
	ADDQ $272, SI \
	ADDQ $32, DI \
	ADDQ $4, DX \
	DECQ CX \
	JNZ  label

// X8STORE stores row a's results at R10 (row 0's at R12) and moves on.
#define X8STORE(R) \
	VMOVUPS R, (R10) \
	ADDQ    R8, R10

#define X8STOREM(M) \
	VMOVUPS M, Y14 \
	VMOVUPS Y14, (R10) \
	ADDQ    R8, R10

#define X8ST1 \
	X8STORE(Y8)

#define X8ST2 \
	X8ST1 \
	X8STORE(Y9)

#define X8ST3 \
	X8ST2 \
	X8STORE(Y10)

#define X8ST4 \
	X8ST3 \
	X8STORE(Y11)

#define X8ST5 \
	X8ST4 \
	X8STOREM(0(SP))

#define X8ST6 \
	X8ST5 \
	X8STOREM(32(SP))

#define X8ST7 \
	X8ST6 \
	X8STOREM(64(SP))

#define X8ST8 \
	X8ST7 \
	X8STOREM(96(SP))

// X8NEXTGROUP moves on to the next group's results, looping to label
// while groups are left (SI is at the next group's first block already).
#define X8NEXTGROUP(label) \
	ADDQ $32, R12 \
	DECQ R11 \
	JNZ  label

// func dotQ8X8AVX(w *byte, xq *int8, xs int, xd *float32, nb int, out *float32, os int, ngroups, na int)
// out[a·os/4 + 8G + l] = the dot product of row l of ×8 group G (the
// groups back to back from w, nb blocks each) with activation row a (rows
// xs bytes apart, their scales nb·4 bytes apart), for G < ngroups and
// a < na; nb ≥ 1, ngroups ≥ 1, 1 ≤ na ≤ 8.
TEXT ·dotQ8X8AVX(SB), NOSPLIT, $128-72
	MOVQ     w+0(FP), SI
	MOVQ     xs+16(FP), R13
	LEAQ     (R13)(R13*2), R14
	MOVQ     nb+32(FP), AX
	SHLQ     $2, AX
	LEAQ     (AX)(AX*2), BX
	MOVQ     out+40(FP), R12
	MOVQ     os+48(FP), R8
	MOVQ     ngroups+56(FP), R11
	X8INIT
	MOVQ     na+64(FP), R10
	CMPQ     R10, $4
	JG       x8big
	JE       x8n4group
	CMPQ     R10, $2
	JL       x8n1group
	JE       x8n2group
	JMP      x8n3group

x8big:
	CMPQ R10, $6
	JL   x8n5group
	JE   x8n6group
	CMPQ R10, $7
	JE   x8n7group
	JMP  x8n8group

x8n1group:
	X8GROUP

x8n1block:
	X8PF
	X8W(0)
	X8F1(0)
	X8W(1)
	X8N1(1)
	X8W(2)
	X8N1(2)
	X8W(3)
	X8N1(3)
	X8W(4)
	X8N1(4)
	X8W(5)
	X8N1(5)
	X8W(6)
	X8N1(6)
	X8W(7)
	X8N1(7)
	VCVTPH2PS (SI), Y12
	X8S1
	X8NEXT(x8n1block)

	MOVQ R12, R10
	X8ST1
	X8NEXTGROUP(x8n1group)
	VZEROUPPER
	RET

x8n2group:
	X8GROUP

x8n2block:
	X8PF
	X8W(0)
	X8F2(0)
	X8W(1)
	X8N2(1)
	X8W(2)
	X8N2(2)
	X8W(3)
	X8N2(3)
	X8W(4)
	X8N2(4)
	X8W(5)
	X8N2(5)
	X8W(6)
	X8N2(6)
	X8W(7)
	X8N2(7)
	VCVTPH2PS (SI), Y12
	X8S2
	X8NEXT(x8n2block)

	MOVQ R12, R10
	X8ST2
	X8NEXTGROUP(x8n2group)
	VZEROUPPER
	RET

x8n3group:
	X8GROUP

x8n3block:
	X8PF
	X8W(0)
	X8F3(0)
	X8W(1)
	X8N3(1)
	X8W(2)
	X8N3(2)
	X8W(3)
	X8N3(3)
	X8W(4)
	X8N3(4)
	X8W(5)
	X8N3(5)
	X8W(6)
	X8N3(6)
	X8W(7)
	X8N3(7)
	VCVTPH2PS (SI), Y12
	X8S3
	X8NEXT(x8n3block)

	MOVQ R12, R10
	X8ST3
	X8NEXTGROUP(x8n3group)
	VZEROUPPER
	RET

x8n4group:
	X8GROUP

x8n4block:
	X8PF
	X8W(0)
	X8F4(0)
	X8W(1)
	X8N4(1)
	X8W(2)
	X8N4(2)
	X8W(3)
	X8N4(3)
	X8W(4)
	X8N4(4)
	X8W(5)
	X8N4(5)
	X8W(6)
	X8N4(6)
	X8W(7)
	X8N4(7)
	VCVTPH2PS (SI), Y12
	X8S4
	X8NEXT(x8n4block)

	MOVQ R12, R10
	X8ST4
	X8NEXTGROUP(x8n4group)
	VZEROUPPER
	RET

x8n5group:
	X8GROUP
	X8ZEROM

x8n5block:
	X8PF
	X8HI
	X8W(0)
	X8F5(0)
	X8W(1)
	X8N5(1)
	X8W(2)
	X8N5(2)
	X8W(3)
	X8N5(3)
	X8W(4)
	X8N5(4)
	X8W(5)
	X8N5(5)
	X8W(6)
	X8N5(6)
	X8W(7)
	X8N5(7)
	VCVTPH2PS (SI), Y12
	X8S5
	X8NEXT(x8n5block)

	MOVQ R12, R10
	X8ST5
	X8NEXTGROUP(x8n5group)
	VZEROUPPER
	RET

x8n6group:
	X8GROUP
	X8ZEROM

x8n6block:
	X8PF
	X8HI
	X8W(0)
	X8F6(0)
	X8W(1)
	X8N6(1)
	X8W(2)
	X8N6(2)
	X8W(3)
	X8N6(3)
	X8W(4)
	X8N6(4)
	X8W(5)
	X8N6(5)
	X8W(6)
	X8N6(6)
	X8W(7)
	X8N6(7)
	VCVTPH2PS (SI), Y12
	X8S6
	X8NEXT(x8n6block)

	MOVQ R12, R10
	X8ST6
	X8NEXTGROUP(x8n6group)
	VZEROUPPER
	RET

x8n7group:
	X8GROUP
	X8ZEROM

x8n7block:
	X8PF
	X8HI
	X8W(0)
	X8F7(0)
	X8W(1)
	X8N7(1)
	X8W(2)
	X8N7(2)
	X8W(3)
	X8N7(3)
	X8W(4)
	X8N7(4)
	X8W(5)
	X8N7(5)
	X8W(6)
	X8N7(6)
	X8W(7)
	X8N7(7)
	VCVTPH2PS (SI), Y12
	X8S7
	X8NEXT(x8n7block)

	MOVQ R12, R10
	X8ST7
	X8NEXTGROUP(x8n7group)
	VZEROUPPER
	RET

x8n8group:
	X8GROUP
	X8ZEROM

x8n8block:
	X8PF
	X8HI
	X8W(0)
	X8F8(0)
	X8W(1)
	X8N8(1)
	X8W(2)
	X8N8(2)
	X8W(3)
	X8N8(3)
	X8W(4)
	X8N8(4)
	X8W(5)
	X8N8(5)
	X8W(6)
	X8N8(6)
	X8W(7)
	X8N8(7)
	VCVTPH2PS (SI), Y12
	X8S8
	X8NEXT(x8n8block)

	MOVQ R12, R10
	X8ST8
	X8NEXTGROUP(x8n8group)
	VZEROUPPER
	RET
