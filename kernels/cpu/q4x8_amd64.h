// The body of the ×8 multi-row Q4_0 kernels, shared by q4x8_amd64.s
// (AVX2) and q4x8_vnni_amd64.s (AVX-512 VNNI): the including file defines
// Q4X8NAME, the function's name, Q4F and Q4N, one 4-byte group of the
// eight weight rows' nibbles against an activation group, and Q4WIDEN and
// Q4WIDENM, which make the block sums int32.

// The multi-row kernel for Q4_0 weights in the ×8 layout (pack.go): one to
// eight activation rows against runs of eight-row groups. A group's block is
// 144 bytes: the eight F16 scales, then four 32-byte vectors h, row l's
// bytes 4h to 4h+3 at 16 + 32h + 4l, whose low nibbles are values 4h to
// 4h+3 and high nibbles values 4h+16 to 4h+19. One load, a shift and two
// masks give two 4-byte groups of the eight rows' nibbles (the values plus
// 8, unsigned), lane l = row l; each activation row's group, broadcast,
// meets them in one VPMADDUBSW and VPADDW: no signs move, and a group's
// pairs (at most 2·15·127) add up over the block's eight groups in int16.
// (With VNNI, one VPDPBUSD adds a group's products into int32 sums.) The
// sums are widened, the activation row's 8·Σx over the block (xc, from
// blockSums8) taken off, and the result scaled and fused into the row's
// accumulator as canon.go defines.
//
// Registers: Y0-Y7 activation row a's block sums (a < na; int16, int32
// with VNNI), Y8-Y11 rows 0-3's results, rows 4-7's in the frame (32a -
// 128); Y12 and Y13 a vector's low and high nibbles (Y12 later the rows'
// scales), Y14 scratch, Y15 bytes of 0x0F, Y4 int16 ones while na ≤ 4
// (else at 128(SP); unused with VNNI). SI walks the weight blocks, group
// after group; DI is activation row 0's current block, the rows R13 bytes
// apart (R14 = 3·R13), R15 row 4's; DX row 0's scale and R9 its
// correction, the rows' AX bytes apart (BX = 3·AX), R10 row 4's (its
// correction, then its scale); CX the blocks left, R11 the groups left, R12
// the group's results for row 0, the rows R8 bytes apart.
//
// Five to eight rows share one pass over the weights, so that the rows past
// the fourth are multiplied while the pass waits for memory anyway, instead
// of in a second pass after it.

// Q4PFD is how far ahead Q4PF asks for weights: four blocks, as for Q8_0.
#ifndef Q4PFD
#define Q4PFD 576
#endif

#define Q4PF \
	PREFETCHT0 Q4PFD(SI) \
	PREFETCHT0 Q4PFD+64(SI) \
	PREFETCHT0 Q4PFD+128(SI)

// Q4W loads vector h of the block: groups h (Y12) and h+4 (Y13).
#define Q4W(h) \
	VMOVDQU 16+h*32(SI), Y12 \
	VPSRLW  $4, Y12, Y13 \
	VPAND   Y15, Y12, Y12 \
	VPAND   Y15, Y13, Y13

// Q4F and Q4N (defined by the including file) set and add to the block
// sums S the nibbles N times the activation group at x; Q4WIDEN and
// Q4WIDENM make int32 sums of them, with the int16 ones in Y4 or in the
// frame.

// Q4S widens row a's sums S, takes off its correction at xc, and fuses
// them, times the rows' d_w (Y12) times its scale at xd, into R.
#define Q4S(xd, xc, S, R) \
	Q4WIDEN(S) \
	VPBROADCASTD xc, Y14 \
	VPSUBD       Y14, S, S \
	VCVTDQ2PS    S, S \
	VBROADCASTSS xd, Y14 \
	VMULPS       Y14, Y12, Y14 \
	VFMADD231PS  Y14, S, R

#define Q4F1(h) \
	Q4F(h*4(DI), Y12, Y0) \
	Q4N(16+h*4(DI), Y13, Y0)

#define Q4F2(h) \
	Q4F1(h) \
	Q4F(h*4(DI)(R13*1), Y12, Y1) \
	Q4N(16+h*4(DI)(R13*1), Y13, Y1)

#define Q4F3(h) \
	Q4F2(h) \
	Q4F(h*4(DI)(R13*2), Y12, Y2) \
	Q4N(16+h*4(DI)(R13*2), Y13, Y2)

#define Q4F4(h) \
	Q4F3(h) \
	Q4F(h*4(DI)(R14*1), Y12, Y3) \
	Q4N(16+h*4(DI)(R14*1), Y13, Y3)

#define Q4N1(h) \
	Q4N(h*4(DI), Y12, Y0) \
	Q4N(16+h*4(DI), Y13, Y0)

#define Q4N2(h) \
	Q4N1(h) \
	Q4N(h*4(DI)(R13*1), Y12, Y1) \
	Q4N(16+h*4(DI)(R13*1), Y13, Y1)

#define Q4N3(h) \
	Q4N2(h) \
	Q4N(h*4(DI)(R13*2), Y12, Y2) \
	Q4N(16+h*4(DI)(R13*2), Y13, Y2)

#define Q4N4(h) \
	Q4N3(h) \
	Q4N(h*4(DI)(R14*1), Y12, Y3) \
	Q4N(16+h*4(DI)(R14*1), Y13, Y3)

#define Q4S1 \
	Q4S((DX), (R9), Y0, Y8)

#define Q4S2 \
	Q4S1 \
	Q4S((DX)(AX*1), (R9)(AX*1), Y1, Y9)

#define Q4S3 \
	Q4S2 \
	Q4S((DX)(AX*2), (R9)(AX*2), Y2, Y10)

#define Q4S4 \
	Q4S3 \
	Q4S((DX)(BX*1), (R9)(BX*1), Y3, Y11)

#define Q4ST1 \
	VMOVUPS Y8, (R10) \
	ADDQ    R8, R10

#define Q4ST2 \
	Q4ST1 \
	VMOVUPS Y9, (R10) \
	ADDQ    R8, R10

#define Q4ST3 \
	Q4ST2 \
	VMOVUPS Y10, (R10) \
	ADDQ    R8, R10

#define Q4ST4 \
	Q4ST3 \
	VMOVUPS Y11, (R10) \
	ADDQ    R8, R10

// Rows 4-7 (na > 4): their activations from R15, their int16 ones at
// 128(SP) (Y4 holds row 4's sums), their results in the frame.

#define Q4F5(h) \
	Q4F4(h) \
	Q4F(h*4(R15), Y12, Y4) \
	Q4N(16+h*4(R15), Y13, Y4)

#define Q4F6(h) \
	Q4F5(h) \
	Q4F(h*4(R15)(R13*1), Y12, Y5) \
	Q4N(16+h*4(R15)(R13*1), Y13, Y5)

#define Q4F7(h) \
	Q4F6(h) \
	Q4F(h*4(R15)(R13*2), Y12, Y6) \
	Q4N(16+h*4(R15)(R13*2), Y13, Y6)

#define Q4F8(h) \
	Q4F7(h) \
	Q4F(h*4(R15)(R14*1), Y12, Y7) \
	Q4N(16+h*4(R15)(R14*1), Y13, Y7)

#define Q4N5(h) \
	Q4N4(h) \
	Q4N(h*4(R15), Y12, Y4) \
	Q4N(16+h*4(R15), Y13, Y4)

#define Q4N6(h) \
	Q4N5(h) \
	Q4N(h*4(R15)(R13*1), Y12, Y5) \
	Q4N(16+h*4(R15)(R13*1), Y13, Y5)

#define Q4N7(h) \
	Q4N6(h) \
	Q4N(h*4(R15)(R13*2), Y12, Y6) \
	Q4N(16+h*4(R15)(R13*2), Y13, Y6)

#define Q4N8(h) \
	Q4N7(h) \
	Q4N(h*4(R15)(R14*1), Y12, Y7) \
	Q4N(16+h*4(R15)(R14*1), Y13, Y7)

// Q4SB is Q4S with the int16 ones in the frame, for rows 0-3 when na > 4.
#define Q4SB(xd, xc, S, R) \
	Q4WIDENM(S) \
	VPBROADCASTD xc, Y14 \
	VPSUBD       Y14, S, S \
	VCVTDQ2PS    S, S \
	VBROADCASTSS xd, Y14 \
	VMULPS       Y14, Y12, Y14 \
	VFMADD231PS  Y14, S, R

#define Q4SB4 \
	Q4SB((DX), (R9), Y0, Y8) \
	Q4SB((DX)(AX*1), (R9)(AX*1), Y1, Y9) \
	Q4SB((DX)(AX*2), (R9)(AX*2), Y2, Y10) \
	Q4SB((DX)(BX*1), (R9)(BX*1), Y3, Y11)

// Q4C widens row 4+a's sums S and takes off its correction at xc (R10 at
// row 4's corrections); Q4T scales them, as Q4S, into its results in the
// frame at M (R10 at row 4's scales).
#define Q4C(xc, S) \
	Q4WIDENM(S) \
	VPBROADCASTD xc, Y14 \
	VPSUBD       Y14, S, S

#define Q4T(xd, S, M) \
	VCVTDQ2PS    S, S \
	VBROADCASTSS xd, Y14 \
	VMULPS       Y14, Y12, Y14 \
	VFMADD213PS  M, S, Y14 \
	VMOVUPS      Y14, M

#define Q4C5 \
	Q4C((R10), Y4)

#define Q4C6 \
	Q4C5 \
	Q4C((R10)(AX*1), Y5)

#define Q4C7 \
	Q4C6 \
	Q4C((R10)(AX*2), Y6)

#define Q4C8 \
	Q4C7 \
	Q4C((R10)(BX*1), Y7)

#define Q4T5 \
	Q4T((R10), Y4, 0(SP))

#define Q4T6 \
	Q4T5 \
	Q4T((R10)(AX*1), Y5, 32(SP))

#define Q4T7 \
	Q4T6 \
	Q4T((R10)(AX*2), Y6, 64(SP))

#define Q4T8 \
	Q4T7 \
	Q4T((R10)(BX*1), Y7, 96(SP))

// Q4SBIG fuses the block into all na > 4 rows' results.
#define Q4SBIG(C, T) \
	Q4SB4 \
	LEAQ (R9)(AX*4), R10 \
	C \
	LEAQ (DX)(AX*4), R10 \
	T

#define Q4STM(M) \
	VMOVUPS M, Y14 \
	VMOVUPS Y14, (R10) \
	ADDQ    R8, R10

#define Q4ST5 \
	Q4ST4 \
	Q4STM(0(SP))

#define Q4ST6 \
	Q4ST5 \
	Q4STM(32(SP))

#define Q4ST7 \
	Q4ST6 \
	Q4STM(64(SP))

#define Q4ST8 \
	Q4ST7 \
	Q4STM(96(SP))

#define Q4ZEROM \
	VMOVUPS Y8, 0(SP) \
	VMOVUPS Y8, 32(SP) \
	VMOVUPS Y8, 64(SP) \
	VMOVUPS Y8, 96(SP)

// Q4GROUP starts a group: the activations' first block, the results +0.
#define Q4GROUP \
	MOVQ   xq+8(FP), DI \
	MOVQ   xd+24(FP), DX \
	MOVQ   xc+32(FP), R9 \
	MOVQ   nb+40(FP), CX \
	VXORPS Y8, Y8, Y8 \
	VXORPS Y9, Y9, Y9 \
	VXORPS Y10, Y10, Y10 \
	VXORPS Y11, Y11, Y11

#define Q4NEXT(label) \
	ADDQ $144, SI \
	ADDQ $32, DI \
	ADDQ $4, DX \
	ADDQ $4, R9 \
	DECQ CX \
	JNZ  label

#define Q4NEXTGROUP(label) \
	ADDQ $32, R12 \
	DECQ R11 \
	JNZ  label

// func Q4X8NAME(w *byte, xq *int8, xs int, xd *float32, xc *int32, nb int, out *float32, os int, ngroups, na int)
// out[a·os/4 + 8G + l] = the dot product of row l of ×8 Q4_0 group G (the
// groups back to back from w, nb blocks each) with activation row a (rows
// xs bytes apart, their scales and corrections nb·4 bytes apart), for
// G < ngroups and a < na; nb ≥ 1, ngroups ≥ 1, 1 ≤ na ≤ 8.
TEXT Q4X8NAME(SB), NOSPLIT, $160-80
	MOVQ         w+0(FP), SI
	MOVQ         xs+16(FP), R13
	LEAQ         (R13)(R13*2), R14
	MOVQ         nb+40(FP), AX
	SHLQ         $2, AX
	LEAQ         (AX)(AX*2), BX
	MOVQ         out+48(FP), R12
	MOVQ         os+56(FP), R8
	MOVQ         ngroups+64(FP), R11
	VPCMPEQW     Y4, Y4, Y4
	VPSRLW       $15, Y4, Y4
	MOVL         $0x0f0f0f0f, R10
	VMOVD        R10, X15
	VPBROADCASTD X15, Y15
	MOVQ         na+72(FP), R10
	CMPQ         R10, $4
	JG           q4x8big
	JE           q4x8n4group
	CMPQ         R10, $2
	JL           q4x8n1group
	JE           q4x8n2group
	JMP          q4x8n3group

q4x8big:
	VMOVDQU Y4, 128(SP)
	CMPQ    R10, $6
	JL      q4x8n5group
	JE      q4x8n6group
	CMPQ    R10, $7
	JE      q4x8n7group
	JMP     q4x8n8group

q4x8n1group:
	Q4GROUP

q4x8n1block:
	Q4PF
	Q4W(0)
	Q4F1(0)
	Q4W(1)
	Q4N1(1)
	Q4W(2)
	Q4N1(2)
	Q4W(3)
	Q4N1(3)
	VCVTPH2PS (SI), Y12
	Q4S1
	Q4NEXT(q4x8n1block)

	MOVQ R12, R10
	Q4ST1
	Q4NEXTGROUP(q4x8n1group)
	VZEROUPPER
	RET

q4x8n2group:
	Q4GROUP

q4x8n2block:
	Q4PF
	Q4W(0)
	Q4F2(0)
	Q4W(1)
	Q4N2(1)
	Q4W(2)
	Q4N2(2)
	Q4W(3)
	Q4N2(3)
	VCVTPH2PS (SI), Y12
	Q4S2
	Q4NEXT(q4x8n2block)

	MOVQ R12, R10
	Q4ST2
	Q4NEXTGROUP(q4x8n2group)
	VZEROUPPER
	RET

q4x8n3group:
	Q4GROUP

q4x8n3block:
	Q4PF
	Q4W(0)
	Q4F3(0)
	Q4W(1)
	Q4N3(1)
	Q4W(2)
	Q4N3(2)
	Q4W(3)
	Q4N3(3)
	VCVTPH2PS (SI), Y12
	Q4S3
	Q4NEXT(q4x8n3block)

	MOVQ R12, R10
	Q4ST3
	Q4NEXTGROUP(q4x8n3group)
	VZEROUPPER
	RET

q4x8n4group:
	Q4GROUP

q4x8n4block:
	Q4PF
	Q4W(0)
	Q4F4(0)
	Q4W(1)
	Q4N4(1)
	Q4W(2)
	Q4N4(2)
	Q4W(3)
	Q4N4(3)
	VCVTPH2PS (SI), Y12
	Q4S4
	Q4NEXT(q4x8n4block)

	MOVQ R12, R10
	Q4ST4
	Q4NEXTGROUP(q4x8n4group)
	VZEROUPPER
	RET

q4x8n5group:
	Q4GROUP
	Q4ZEROM

q4x8n5block:
	Q4PF
	LEAQ (DI)(R13*4), R15
	Q4W(0)
	Q4F5(0)
	Q4W(1)
	Q4N5(1)
	Q4W(2)
	Q4N5(2)
	Q4W(3)
	Q4N5(3)
	VCVTPH2PS (SI), Y12
	Q4SBIG(Q4C5, Q4T5)
	Q4NEXT(q4x8n5block)

	MOVQ R12, R10
	Q4ST5
	Q4NEXTGROUP(q4x8n5group)
	VZEROUPPER
	RET

q4x8n6group:
	Q4GROUP
	Q4ZEROM

q4x8n6block:
	Q4PF
	LEAQ (DI)(R13*4), R15
	Q4W(0)
	Q4F6(0)
	Q4W(1)
	Q4N6(1)
	Q4W(2)
	Q4N6(2)
	Q4W(3)
	Q4N6(3)
	VCVTPH2PS (SI), Y12
	Q4SBIG(Q4C6, Q4T6)
	Q4NEXT(q4x8n6block)

	MOVQ R12, R10
	Q4ST6
	Q4NEXTGROUP(q4x8n6group)
	VZEROUPPER
	RET

q4x8n7group:
	Q4GROUP
	Q4ZEROM

q4x8n7block:
	Q4PF
	LEAQ (DI)(R13*4), R15
	Q4W(0)
	Q4F7(0)
	Q4W(1)
	Q4N7(1)
	Q4W(2)
	Q4N7(2)
	Q4W(3)
	Q4N7(3)
	VCVTPH2PS (SI), Y12
	Q4SBIG(Q4C7, Q4T7)
	Q4NEXT(q4x8n7block)

	MOVQ R12, R10
	Q4ST7
	Q4NEXTGROUP(q4x8n7group)
	VZEROUPPER
	RET

q4x8n8group:
	Q4GROUP
	Q4ZEROM

q4x8n8block:
	Q4PF
	LEAQ (DI)(R13*4), R15
	Q4W(0)
	Q4F8(0)
	Q4W(1)
	Q4N8(1)
	Q4W(2)
	Q4N8(2)
	Q4W(3)
	Q4N8(3)
	VCVTPH2PS (SI), Y12
	Q4SBIG(Q4C8, Q4T8)
	Q4NEXT(q4x8n8block)

	MOVQ R12, R10
	Q4ST8
	Q4NEXTGROUP(q4x8n8group)
	VZEROUPPER
	RET
