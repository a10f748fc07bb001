//go:build amd64 && !noasm

#include "textflag.h"

// The ×8 multi-row Q8_0 kernel for AVX-512 VNNI on biased weights: the
// ×8 layout with each weight byte stored as w+128 (pack.go, x8b), so the
// weights are VPDPBUSD's unsigned operand and the activations, as they
// are, its signed one: Σ(w+128)·x = Σw·x + 128·Σx. The correction depends
// on the activation row and block only: xc holds −128·Σx of each, and a
// row's block sum starts from it (one broadcast load) instead of from
// zero, so nothing is taken off afterwards and nothing is formed from the
// weights. The activations being the signed operand, each group of a row
// is VPDPBUSD's memory operand, broadcast in the instruction, and so is
// the row's scale in VMULPS. With 32 vector registers all eight rows'
// results stay in registers. The integers, and so the results, are those
// of the other ×8 kernels (canon.go). dotQ8X8BVNNI takes one group a pass:
// every pass below x8PairRows activation rows (all of decoding), where a
// pass waits on memory and one stream of groups asks less of it, and a
// chunk's odd last group above; dotQ8X8B2VNNI, below, two.
//
// Registers: Y0-Y7 activation row a's block sums; Y8-Y11 rows 0-3's
// results, Y16-Y19 rows 4-7's; Y12 a group's eight weight rows' values,
// Y13 their scales, Y14 scratch. SI walks the weight blocks, group after
// group; DI is activation row 0's current block, the rows R13 bytes apart
// (R14 = 3·R13), R15 row 4's; DX row 0's scale, the rows' scales AX bytes
// apart (BX = 3·AX), R9 row 4's; R8 row 0's correction, laid out as the
// scales, R10 row 4's; CX the blocks left, R11 the groups left, R12 the
// group's results for row 0.

// PFD: 32 blocks ahead (8.5 KB), as the VNNI Q4_0 ×8 kernel. On a Zen 5
// host, one thread, one pass over 95 MB of groups (2816 wide), the
// distances interleaved in one process (fastest pass of 25-60 rounds,
// three runs): 1 row took 2.7-3.4 ms with none, 16, 32, 64 or 128 blocks
// ahead, no difference above the noise; 3 rows took 4.9-5.6 ms with none,
// 3.7-5.1 at 16 blocks, 3.2-4.9 at 32 and about the same at 64 and 128.
#define PFD 8704

#define BPF \
	PREFETCHT0 PFD(SI) \
	PREFETCHT0 PFD+64(SI) \
	PREFETCHT0 PFD+128(SI) \
	PREFETCHT0 PFD+192(SI) \
	PREFETCHT0 PFD+256(SI)

// BI<n> starts rows 0 to n-1's block sums at their corrections.
#define BI1 \
	VPBROADCASTD (R8), Y0

#define BI2 \
	BI1 \
	VPBROADCASTD (R8)(AX*1), Y1

#define BI3 \
	BI2 \
	VPBROADCASTD (R8)(AX*2), Y2

#define BI4 \
	BI3 \
	VPBROADCASTD (R8)(BX*1), Y3

#define BI5 \
	BI4 \
	VPBROADCASTD (R10), Y4

#define BI6 \
	BI5 \
	VPBROADCASTD (R10)(AX*1), Y5

#define BI7 \
	BI6 \
	VPBROADCASTD (R10)(AX*2), Y6

#define BI8 \
	BI7 \
	VPBROADCASTD (R10)(BX*1), Y7

#define BDP(x, S) VPDPBUSD.BCST x, Y12, S

// BG<n>(g) adds group g of the eight weight rows (Y12) times rows 0 to
// n-1's group g to their block sums.
#define BG1(g) \
	BDP(g*4(DI), Y0)

#define BG2(g) \
	BG1(g) \
	BDP(g*4(DI)(R13*1), Y1)

#define BG3(g) \
	BG2(g) \
	BDP(g*4(DI)(R13*2), Y2)

#define BG4(g) \
	BG3(g) \
	BDP(g*4(DI)(R14*1), Y3)

#define BG5(g) \
	BG4(g) \
	BDP(g*4(R15), Y4)

#define BG6(g) \
	BG5(g) \
	BDP(g*4(R15)(R13*1), Y5)

#define BG7(g) \
	BG6(g) \
	BDP(g*4(R15)(R13*2), Y6)

#define BG8(g) \
	BG7(g) \
	BDP(g*4(R15)(R14*1), Y7)

// BS(xd, S, F) fuses the block sums S, times the weight rows' d_w (Y13)
// times the activation row's scale at xd, into its results F.
#define BS(xd, S, F) \
	VCVTDQ2PS   S, S \
	VMULPS.BCST xd, Y13, Y14 \
	VFMADD231PS Y14, S, F

#define BS1 \
	BS((DX), Y0, Y8)

#define BS2 \
	BS1 \
	BS((DX)(AX*1), Y1, Y9)

#define BS3 \
	BS2 \
	BS((DX)(AX*2), Y2, Y10)

#define BS4 \
	BS3 \
	BS((DX)(BX*1), Y3, Y11)

#define BS5 \
	BS4 \
	BS((R9), Y4, Y16)

#define BS6 \
	BS5 \
	BS((R9)(AX*1), Y5, Y17)

#define BS7 \
	BS6 \
	BS((R9)(AX*2), Y6, Y18)

#define BS8 \
	BS7 \
	BS((R9)(BX*1), Y7, Y19)

// BBLOCK is one block of the eight weight rows against the rows of BI,
// BG and BS.
#define BBLOCK(BI, BG, BS) \
	BPF \
	BI \
	VMOVDQU 16(SI), Y12 \
	BG(0) \
	VMOVDQU 48(SI), Y12 \
	BG(1) \
	VMOVDQU 80(SI), Y12 \
	BG(2) \
	VMOVDQU 112(SI), Y12 \
	BG(3) \
	VMOVDQU 144(SI), Y12 \
	BG(4) \
	VMOVDQU 176(SI), Y12 \
	BG(5) \
	VMOVDQU 208(SI), Y12 \
	BG(6) \
	VMOVDQU 240(SI), Y12 \
	BG(7) \
	VCVTPH2PS (SI), Y13 \
	BS

// BGROUP starts a group: the activations' first block, the results +0.
#define BGROUP \
	MOVQ   xq+8(FP), DI \
	MOVQ   xd+24(FP), DX \
	MOVQ   xc+32(FP), R8 \
	MOVQ   nb+40(FP), CX \
	VXORPS Y8, Y8, Y8 \
	VXORPS Y9, Y9, Y9 \
	VXORPS Y10, Y10, Y10 \
	VXORPS Y11, Y11, Y11

#define BZEROHI \
	VPXORD Y16, Y16, Y16 \
	VPXORD Y17, Y17, Y17 \
	VPXORD Y18, Y18, Y18 \
	VPXORD Y19, Y19, Y19

// BHI points R15, R9 and R10 at activation row 4's block, scale and
// correction.
#define BHI \
	LEAQ (DI)(R13*4), R15 \
	LEAQ (DX)(AX*4), R9 \
	LEAQ (R8)(AX*4), R10

// BNEXT moves on to the next block, looping to label while blocks are
// left.
#define BNEXT(label) \
	ADDQ $272, SI \
	ADDQ $32, DI \
	ADDQ $4, DX \
	ADDQ $4, R8 \
	DECQ CX \
	JNZ  label

// BOUT points R10 at the group's results for row 0 and R8 at the distance
// between rows' (R8 is reloaded by the next group's BGROUP).
#define BOUT \
	MOVQ R12, R10 \
	MOVQ os+56(FP), R8

#define BST(F) \
	VMOVUPS F, (R10) \
	ADDQ    R8, R10

#define BST1 \
	BOUT \
	BST(Y8)

#define BST2 \
	BST1 \
	BST(Y9)

#define BST3 \
	BST2 \
	BST(Y10)

#define BST4 \
	BST3 \
	BST(Y11)

#define BST5 \
	BST4 \
	BST(Y16)

#define BST6 \
	BST5 \
	BST(Y17)

#define BST7 \
	BST6 \
	BST(Y18)

#define BST8 \
	BST7 \
	BST(Y19)

// BNEXTGROUP moves on to the next group's results, looping to label while
// groups are left (SI is at the next group's first block already).
#define BNEXTGROUP(label) \
	ADDQ $32, R12 \
	DECQ R11 \
	JNZ  label

// NASWITCH jumps to r<na>, na in R10 (1 to 8).
#define NASWITCH(big, r1, r2, r3, r4, r5, r6, r7, r8) \
	CMPQ R10, $4 \
	JG   big \
	JE   r4 \
	CMPQ R10, $2 \
	JL   r1 \
	JE   r2 \
	JMP  r3 \
big: \
	CMPQ R10, $6 \
	JL   r5 \
	JE   r6 \
	CMPQ R10, $7 \
	JE   r7 \
	JMP  r8

// BROWS runs all the groups against activation rows 0 to n-1, given
// BI<n>, BG<n>, BS<n> and BST<n>; BROWSHI is BROWS for n > 4, whose rows
// 4 on need Y16-Y19 zeroed and R15, R9 and R10 set.
#define BROWS(group, block, BI, BG, BS, BST) \
group: \
	BGROUP \
block: \
	BBLOCK(BI, BG, BS) \
	BNEXT(block) \
	BST \
	BNEXTGROUP(group) \
	VZEROUPPER \
	RET

#define BROWSHI(group, block, BI, BG, BS, BST) \
group: \
	BGROUP \
	BZEROHI \
block: \
	BHI \
	BBLOCK(BI, BG, BS) \
	BNEXT(block) \
	BST \
	BNEXTGROUP(group) \
	VZEROUPPER \
	RET

// func dotQ8X8BVNNI(w *byte, xq *int8, xs int, xd *float32, xc *int32, nb int, out *float32, os int, ngroups, na int)
// out[a·os/4 + 8G + l] = the dot product of row l of biased ×8 group G
// (the groups back to back from w, nb blocks each) with activation row a
// (rows xs bytes apart; their scales, and their blocks' −128·Σx in xc,
// nb·4 bytes apart), for G < ngroups and a < na; nb ≥ 1, ngroups ≥ 1,
// 1 ≤ na ≤ 8.
TEXT ·dotQ8X8BVNNI(SB), NOSPLIT, $0-80
	MOVQ w+0(FP), SI
	MOVQ xs+16(FP), R13
	LEAQ (R13)(R13*2), R14
	MOVQ nb+40(FP), AX
	SHLQ $2, AX
	LEAQ (AX)(AX*2), BX
	MOVQ out+48(FP), R12
	MOVQ ngroups+64(FP), R11
	MOVQ na+72(FP), R10
	NASWITCH(bbig, b1group, b2group, b3group, b4group, b5group, b6group, b7group, b8group)

	BROWS(b1group, b1block, BI1, BG1, BS1, BST1)
	BROWS(b2group, b2block, BI2, BG2, BS2, BST2)
	BROWS(b3group, b3block, BI3, BG3, BS3, BST3)
	BROWS(b4group, b4block, BI4, BG4, BS4, BST4)
	BROWSHI(b5group, b5block, BI5, BG5, BS5, BST5)
	BROWSHI(b6group, b6block, BI6, BG6, BS6, BST6)
	BROWSHI(b7group, b7block, BI7, BG7, BS7, BST7)
	BROWSHI(b8group, b8block, BI8, BG8, BS8, BST8)

// dotQ8X8B2VNNI is dotQ8X8BVNNI for pairs of groups, in 512-bit registers:
// lanes 0-7 are group G's eight rows and lanes 8-15 group G+1's, whose
// blocks are R11 = nb·272 bytes on. On a Zen 5 host a 512-bit VPDPBUSD
// issues as often as a 256-bit one (measured: two a cycle, 16 independent
// sums, one thread), so one instruction does the work of two; it is what
// a row costs once a pass is compute-bound. Registers as in dotQ8X8BVNNI,
// widened, but for R11 (nb·272); the frame holds the pairs left. The
// pointers step as there (BHI, BNEXT, BOUT, BST).

// PFD2: 128 blocks ahead (34 KB) in each of the two streams. Against the
// 256-bit kernel on x+128 activations that this one replaced, on a Zen 5
// host, one thread, the matrix products of a ~100M Q8_0 model (101 MB of
// weights), a pass asking 32 blocks ahead took 1 row 7-10% and 4 rows
// 16-23% more time, 64 blocks ahead 1% less to 6% more and 9-13% more, 128
// blocks ahead 0-3% less and 7% less to 3% more.
#define PFD2 34816
#define PPF \
	PREFETCHT0 PFD2(SI) \
	PREFETCHT0 PFD2+64(SI) \
	PREFETCHT0 PFD2+128(SI) \
	PREFETCHT0 PFD2+192(SI) \
	PREFETCHT0 PFD2+256(SI) \
	PREFETCHT0 PFD2(SI)(R11*1) \
	PREFETCHT0 PFD2+64(SI)(R11*1) \
	PREFETCHT0 PFD2+128(SI)(R11*1) \
	PREFETCHT0 PFD2+192(SI)(R11*1) \
	PREFETCHT0 PFD2+256(SI)(R11*1)

#define PW(o) \
	VMOVDQU      o(SI), Y12 \
	VINSERTI64X4 $1, o(SI)(R11*1), Z12, Z12

#define PI1 \
	VPBROADCASTD (R8), Z0

#define PI2 \
	PI1 \
	VPBROADCASTD (R8)(AX*1), Z1

#define PI3 \
	PI2 \
	VPBROADCASTD (R8)(AX*2), Z2

#define PI4 \
	PI3 \
	VPBROADCASTD (R8)(BX*1), Z3

#define PI5 \
	PI4 \
	VPBROADCASTD (R10), Z4

#define PI6 \
	PI5 \
	VPBROADCASTD (R10)(AX*1), Z5

#define PI7 \
	PI6 \
	VPBROADCASTD (R10)(AX*2), Z6

#define PI8 \
	PI7 \
	VPBROADCASTD (R10)(BX*1), Z7

#define PDP(x, S) VPDPBUSD.BCST x, Z12, S

#define PG1(g) \
	PDP(g*4(DI), Z0)

#define PG2(g) \
	PG1(g) \
	PDP(g*4(DI)(R13*1), Z1)

#define PG3(g) \
	PG2(g) \
	PDP(g*4(DI)(R13*2), Z2)

#define PG4(g) \
	PG3(g) \
	PDP(g*4(DI)(R14*1), Z3)

#define PG5(g) \
	PG4(g) \
	PDP(g*4(R15), Z4)

#define PG6(g) \
	PG5(g) \
	PDP(g*4(R15)(R13*1), Z5)

#define PG7(g) \
	PG6(g) \
	PDP(g*4(R15)(R13*2), Z6)

#define PG8(g) \
	PG7(g) \
	PDP(g*4(R15)(R14*1), Z7)

#define PS(xd, S, F) \
	VCVTDQ2PS   S, S \
	VMULPS.BCST xd, Z13, Z14 \
	VFMADD231PS Z14, S, F

#define PS1 \
	PS((DX), Z0, Z8)

#define PS2 \
	PS1 \
	PS((DX)(AX*1), Z1, Z9)

#define PS3 \
	PS2 \
	PS((DX)(AX*2), Z2, Z10)

#define PS4 \
	PS3 \
	PS((DX)(BX*1), Z3, Z11)

#define PS5 \
	PS4 \
	PS((R9), Z4, Z16)

#define PS6 \
	PS5 \
	PS((R9)(AX*1), Z5, Z17)

#define PS7 \
	PS6 \
	PS((R9)(AX*2), Z6, Z18)

#define PS8 \
	PS7 \
	PS((R9)(BX*1), Z7, Z19)

#define PBLOCK(PI, PG, PS) \
	PPF \
	PI \
	PW(16) \
	PG(0) \
	PW(48) \
	PG(1) \
	PW(80) \
	PG(2) \
	PW(112) \
	PG(3) \
	PW(144) \
	PG(4) \
	PW(176) \
	PG(5) \
	PW(208) \
	PG(6) \
	PW(240) \
	PG(7) \
	VMOVDQU     (SI), X13 \
	VINSERTI128 $1, (SI)(R11*1), Y13, Y13 \
	VCVTPH2PS   Y13, Z13 \
	PS

#define PGROUP \
	MOVQ   xq+8(FP), DI \
	MOVQ   xd+24(FP), DX \
	MOVQ   xc+32(FP), R8 \
	MOVQ   nb+40(FP), CX \
	VPXORD Z8, Z8, Z8 \
	VPXORD Z9, Z9, Z9 \
	VPXORD Z10, Z10, Z10 \
	VPXORD Z11, Z11, Z11

#define PZEROHI \
	VPXORD Z16, Z16, Z16 \
	VPXORD Z17, Z17, Z17 \
	VPXORD Z18, Z18, Z18 \
	VPXORD Z19, Z19, Z19

#define PST1 \
	BOUT \
	BST(Z8)

#define PST2 \
	PST1 \
	BST(Z9)

#define PST3 \
	PST2 \
	BST(Z10)

#define PST4 \
	PST3 \
	BST(Z11)

#define PST5 \
	PST4 \
	BST(Z16)

#define PST6 \
	PST5 \
	BST(Z17)

#define PST7 \
	PST6 \
	BST(Z18)

#define PST8 \
	PST7 \
	BST(Z19)

#define PNEXTGROUP(label) \
	ADDQ $64, R12 \
	ADDQ R11, SI \
	DECQ 0(SP) \
	JNZ  label

#define PROWS(group, block, PI, PG, PS, PST) \
group: \
	PGROUP \
block: \
	PBLOCK(PI, PG, PS) \
	BNEXT(block) \
	PST \
	PNEXTGROUP(group) \
	VZEROUPPER \
	RET

#define PROWSHI(group, block, PI, PG, PS, PST) \
group: \
	PGROUP \
	PZEROHI \
block: \
	BHI \
	PBLOCK(PI, PG, PS) \
	BNEXT(block) \
	PST \
	PNEXTGROUP(group) \
	VZEROUPPER \
	RET

// func dotQ8X8B2VNNI(w *byte, xq *int8, xs int, xd *float32, xc *int32, nb int, out *float32, os int, npairs, na int)
// dotQ8X8BVNNI for npairs pairs of groups: out[a·os/4 + 16P + l] = row l
// of the pair P's 16 rows.
TEXT ·dotQ8X8B2VNNI(SB), NOSPLIT, $8-80
	MOVQ w+0(FP), SI
	MOVQ xs+16(FP), R13
	LEAQ (R13)(R13*2), R14
	MOVQ npairs+64(FP), AX
	MOVQ AX, 0(SP)
	MOVQ nb+40(FP), AX
	IMUL3Q $272, AX, R11
	SHLQ $2, AX
	LEAQ (AX)(AX*2), BX
	MOVQ out+48(FP), R12
	MOVQ na+72(FP), R10
	NASWITCH(pbig, p1group, p2group, p3group, p4group, p5group, p6group, p7group, p8group)

	PROWS(p1group, p1block, PI1, PG1, PS1, PST1)
	PROWS(p2group, p2block, PI2, PG2, PS2, PST2)
	PROWS(p3group, p3block, PI3, PG3, PS3, PST3)
	PROWS(p4group, p4block, PI4, PG4, PS4, PST4)
	PROWSHI(p5group, p5block, PI5, PG5, PS5, PST5)
	PROWSHI(p6group, p6block, PI6, PG6, PS6, PST6)
	PROWSHI(p7group, p7block, PI7, PG7, PS7, PST7)
	PROWSHI(p8group, p8block, PI8, PG8, PS8, PST8)
