//go:build amd64 && !noasm

#include "textflag.h"

// The F32 GEMM micro-kernels for CPUs with AVX-512 (F, DQ, VL), behind
// gemm_f32z_amd64.go. Each output is still one eight-lane accumulator that
// takes its chunks of eight in order (canon.go); a 512-bit register holds
// two of them, the same weight row against two activation rows: the
// weight row's chunk broadcast to both halves (VBROADCASTF32X8), the two
// activation rows' chunks side by side, as gemmPackGroupRow lays them out.
// The halves never mix until each is reduced in canon.go's order, so an
// output's bits do not depend on its partner.
//
// A Zen 5 core runs two 512-bit FMAs a cycle, twice the multiply-adds of
// the 256-bit kernels (gemm_f32_amd64.s): in registers alone, one core
// ran 207 GFLOP/s of 512-bit FMAs against 104 of 256-bit ones. CPUs
// whose cores run 512-bit FMAs at half that rate take these kernels too;
// they were not measured on one.
//
// gemmF32ZAP runs a tile of A weight rows (four or eight, ldw floats
// apart, 0 for one row four times) by P pairs of activation rows (P ≤ 3:
// a group's first 2P rows; its chunk of eight of all 2P rows at x, the
// next chunk 64·P bytes on), over n floats (a multiple of 8, possibly 0).
// Accumulator p·A+i is weight row i by pair p: A·P of the 32 registers;
// the pairs take three, the broadcast weights two. One call runs the
// weight rows against groups groups, each xs floats after the last, its
// accumulators 64·A·P bytes after the last's (stored at the end of a
// span, reloaded at the next, unless the flags say the span starts or
// finishes k), its results 2P rows of out after the last's, activation
// row j's ldo floats after row j-1's.

#define gemmStart 1
#define gemmFinish 2

// ZSETUP loads the common arguments: R13 weight row 0, R8 ldw in bytes,
// R9 3·ldw in bytes, BX acc, DX out, R11 ldo in bytes, R12 flags, AX groups.
#define ZSETUP \
	MOVQ w+0(FP), R13 \
	MOVQ ldw+8(FP), R8 \
	SHLQ $2, R8 \
	LEAQ (R8)(R8*2), R9 \
	MOVQ acc+40(FP), BX \
	MOVQ out+48(FP), DX \
	MOVQ ldo+56(FP), R11 \
	SHLQ $2, R11 \
	MOVQ flags+64(FP), R12 \
	MOVQ groups+72(FP), AX

// ZSUM4 reduces the accumulators a, b, c, d (four weight rows by one pair)
// to the four sums of the pair's first row in a's low 128 bits and of its
// second row in bits 256-383, each in canon.go's order: the shuffles and
// adds form the pairs and the quadruples of each 128-bit lane, as
// VHADDPS does (which has no 512-bit form), and the lane swap adds each
// row's low quadruple to its high one. Z30 and Z31 are clobbered.
#define ZSUM4(a, b, c, d) \
	VSHUFPS    $0x88, b, a, Z30 \
	VSHUFPS    $0xDD, b, a, Z31 \
	VADDPS     Z31, Z30, a \
	VSHUFPS    $0x88, d, c, Z30 \
	VSHUFPS    $0xDD, d, c, Z31 \
	VADDPS     Z31, Z30, c \
	VSHUFPS    $0x88, c, a, Z30 \
	VSHUFPS    $0xDD, c, a, Z31 \
	VADDPS     Z31, Z30, a \
	VSHUFF32X4 $0xB1, a, a, Z30 \
	VADDPS     Z30, a, a

// ZLOAD4 and ZSTORE4 move four accumulators to and from their slots in
// acc, the first at off.
#define ZLOAD4(off, a, b, c, d) \
	VMOVUPS off(BX), a \
	VMOVUPS off+64(BX), b \
	VMOVUPS off+128(BX), c \
	VMOVUPS off+192(BX), d

#define ZSTORE4(off, a, b, c, d) \
	VMOVUPS a, off(BX) \
	VMOVUPS b, off+64(BX) \
	VMOVUPS c, off+128(BX) \
	VMOVUPS d, off+192(BX)

// ZZERO0 zeroes Z0-Z3; ZZERO4 copies the zeroed Z0 into four more.
#define ZZERO0 \
	VPXORD  Z0, Z0, Z0 \
	VMOVAPS Z0, Z1 \
	VMOVAPS Z0, Z2 \
	VMOVAPS Z0, Z3

#define ZZERO4(a, b, c, d) \
	VMOVAPS Z0, a \
	VMOVAPS Z0, b \
	VMOVAPS Z0, c \
	VMOVAPS Z0, d

// ZTILE4 and ZTILE8 start a group: SI weight row 0 (ZTILE8: R14 row 4),
// DI the group's activations, CX its chunks of eight, and jump to zero
// when the span starts k.
#define ZTILE4(zero) \
	MOVQ  R13, SI \
	MOVQ  x+16(FP), DI \
	MOVQ  n+32(FP), CX \
	SHRQ  $3, CX \
	TESTQ $gemmStart, R12 \
	JNZ   zero

#define ZTILE8(zero) \
	MOVQ  R13, SI \
	LEAQ  (SI)(R8*4), R14 \
	MOVQ  x+16(FP), DI \
	MOVQ  n+32(FP), CX \
	SHRQ  $3, CX \
	TESTQ $gemmStart, R12 \
	JNZ   zero

// ZX<P> loads the chunk of eight of P pairs' rows into Z24-Z26.
#define ZX1 \
	VMOVUPS 0(DI), Z24

#define ZX2 \
	ZX1 \
	VMOVUPS 64(DI), Z25

#define ZX3 \
	ZX2 \
	VMOVUPS 128(DI), Z26

// ZW<P> broadcasts one weight row's chunk at addr into t and adds it times
// pairs 0 to P-1 to their accumulators a, b, c.
#define ZW1(addr, t, a) \
	VBROADCASTF32X8 addr, t \
	VFMADD231PS     Z24, t, a

#define ZW2(addr, t, a, b) \
	ZW1(addr, t, a) \
	VFMADD231PS     Z25, t, b

#define ZW3(addr, t, a, b, c) \
	ZW2(addr, t, a, b) \
	VFMADD231PS     Z26, t, c

// ZOUT4 reduces four weight rows by one pair (ZSUM4) and stores the sums
// off bytes into the pair's two rows of out, the first row's at R10; x is
// a's X register.
#define ZOUT4(off, x, a, b, c, d) \
	ZSUM4(a, b, c, d) \
	VMOVUPS       x, off(R10) \
	VEXTRACTF32X4 $2, a, off(R10)(R11*1)

// ZNEXT<P> moves to the next group, whose accumulators are accb bytes on,
// and loops to tile while groups are left.
#define ZADVANCE(accb) \
	MOVQ xs+24(FP), R10 \
	SHLQ $2, R10 \
	ADDQ R10, x+16(FP) \
	ADDQ $accb, BX

#define ZLOOP(tile) \
	DECQ AX \
	JNZ  tile \
	VZEROUPPER \
	RET

#define ZNEXT1(accb, tile) \
	ZADVANCE(accb) \
	LEAQ (DX)(R11*2), DX \
	ZLOOP(tile)

#define ZNEXT2(accb, tile) \
	ZADVANCE(accb) \
	LEAQ (DX)(R11*2), DX \
	LEAQ (DX)(R11*2), DX \
	ZLOOP(tile)

#define ZNEXT3(accb, tile) \
	ZADVANCE(accb) \
	LEAQ (DX)(R11*2), DX \
	LEAQ (DX)(R11*2), DX \
	LEAQ (DX)(R11*2), DX \
	ZLOOP(tile)

// func gemmF32Z81(w *float32, ldw int, x *float32, xs int, n int, acc *float32, out *float32, ldo int, flags int, groups int)
TEXT ·gemmF32Z81(SB), NOSPLIT, $0-80
	ZSETUP

gemmf32z81tile:
	ZTILE8(gemmf32z81zero)
	ZLOAD4(0, Z0, Z1, Z2, Z3)
	ZLOAD4(256, Z4, Z5, Z6, Z7)
	JMP gemmf32z81body

gemmf32z81zero:
	ZZERO0
	ZZERO4(Z4, Z5, Z6, Z7)

gemmf32z81body:
	TESTQ CX, CX
	JZ    gemmf32z81end

gemmf32z81loop:
	ZX1
	ZW1((SI), Z30, Z0)
	ZW1((SI)(R8*1), Z31, Z1)
	ZW1((SI)(R8*2), Z30, Z2)
	ZW1((SI)(R9*1), Z31, Z3)
	ZW1((R14), Z30, Z4)
	ZW1((R14)(R8*1), Z31, Z5)
	ZW1((R14)(R8*2), Z30, Z6)
	ZW1((R14)(R9*1), Z31, Z7)
	ADDQ $32, SI
	ADDQ $32, R14
	ADDQ $64, DI
	DECQ CX
	JNZ  gemmf32z81loop

gemmf32z81end:
	TESTQ $gemmFinish, R12
	JNZ   gemmf32z81finish
	ZSTORE4(0, Z0, Z1, Z2, Z3)
	ZSTORE4(256, Z4, Z5, Z6, Z7)
	JMP gemmf32z81next

gemmf32z81finish:
	MOVQ DX, R10
	ZOUT4(0, X0, Z0, Z1, Z2, Z3)
	ZOUT4(16, X4, Z4, Z5, Z6, Z7)

gemmf32z81next:
	ZNEXT1(512, gemmf32z81tile)

// func gemmF32Z82(w *float32, ldw int, x *float32, xs int, n int, acc *float32, out *float32, ldo int, flags int, groups int)
TEXT ·gemmF32Z82(SB), NOSPLIT, $0-80
	ZSETUP

gemmf32z82tile:
	ZTILE8(gemmf32z82zero)
	ZLOAD4(0, Z0, Z1, Z2, Z3)
	ZLOAD4(256, Z4, Z5, Z6, Z7)
	ZLOAD4(512, Z8, Z9, Z10, Z11)
	ZLOAD4(768, Z12, Z13, Z14, Z15)
	JMP gemmf32z82body

gemmf32z82zero:
	ZZERO0
	ZZERO4(Z4, Z5, Z6, Z7)
	ZZERO4(Z8, Z9, Z10, Z11)
	ZZERO4(Z12, Z13, Z14, Z15)

gemmf32z82body:
	TESTQ CX, CX
	JZ    gemmf32z82end

gemmf32z82loop:
	ZX2
	ZW2((SI), Z30, Z0, Z8)
	ZW2((SI)(R8*1), Z31, Z1, Z9)
	ZW2((SI)(R8*2), Z30, Z2, Z10)
	ZW2((SI)(R9*1), Z31, Z3, Z11)
	ZW2((R14), Z30, Z4, Z12)
	ZW2((R14)(R8*1), Z31, Z5, Z13)
	ZW2((R14)(R8*2), Z30, Z6, Z14)
	ZW2((R14)(R9*1), Z31, Z7, Z15)
	ADDQ $32, SI
	ADDQ $32, R14
	ADDQ $128, DI
	DECQ CX
	JNZ  gemmf32z82loop

gemmf32z82end:
	TESTQ $gemmFinish, R12
	JNZ   gemmf32z82finish
	ZSTORE4(0, Z0, Z1, Z2, Z3)
	ZSTORE4(256, Z4, Z5, Z6, Z7)
	ZSTORE4(512, Z8, Z9, Z10, Z11)
	ZSTORE4(768, Z12, Z13, Z14, Z15)
	JMP gemmf32z82next

gemmf32z82finish:
	MOVQ DX, R10
	ZOUT4(0, X0, Z0, Z1, Z2, Z3)
	ZOUT4(16, X4, Z4, Z5, Z6, Z7)
	LEAQ (R10)(R11*2), R10
	ZOUT4(0, X8, Z8, Z9, Z10, Z11)
	ZOUT4(16, X12, Z12, Z13, Z14, Z15)

gemmf32z82next:
	ZNEXT2(1024, gemmf32z82tile)

// func gemmF32Z83(w *float32, ldw int, x *float32, xs int, n int, acc *float32, out *float32, ldo int, flags int, groups int)
TEXT ·gemmF32Z83(SB), NOSPLIT, $0-80
	ZSETUP

gemmf32z83tile:
	ZTILE8(gemmf32z83zero)
	ZLOAD4(0, Z0, Z1, Z2, Z3)
	ZLOAD4(256, Z4, Z5, Z6, Z7)
	ZLOAD4(512, Z8, Z9, Z10, Z11)
	ZLOAD4(768, Z12, Z13, Z14, Z15)
	ZLOAD4(1024, Z16, Z17, Z18, Z19)
	ZLOAD4(1280, Z20, Z21, Z22, Z23)
	JMP gemmf32z83body

gemmf32z83zero:
	ZZERO0
	ZZERO4(Z4, Z5, Z6, Z7)
	ZZERO4(Z8, Z9, Z10, Z11)
	ZZERO4(Z12, Z13, Z14, Z15)
	ZZERO4(Z16, Z17, Z18, Z19)
	ZZERO4(Z20, Z21, Z22, Z23)

gemmf32z83body:
	TESTQ CX, CX
	JZ    gemmf32z83end

gemmf32z83loop:
	ZX3
	ZW3((SI), Z30, Z0, Z8, Z16)
	ZW3((SI)(R8*1), Z31, Z1, Z9, Z17)
	ZW3((SI)(R8*2), Z30, Z2, Z10, Z18)
	ZW3((SI)(R9*1), Z31, Z3, Z11, Z19)
	ZW3((R14), Z30, Z4, Z12, Z20)
	ZW3((R14)(R8*1), Z31, Z5, Z13, Z21)
	ZW3((R14)(R8*2), Z30, Z6, Z14, Z22)
	ZW3((R14)(R9*1), Z31, Z7, Z15, Z23)
	ADDQ $32, SI
	ADDQ $32, R14
	ADDQ $192, DI
	DECQ CX
	JNZ  gemmf32z83loop

gemmf32z83end:
	TESTQ $gemmFinish, R12
	JNZ   gemmf32z83finish
	ZSTORE4(0, Z0, Z1, Z2, Z3)
	ZSTORE4(256, Z4, Z5, Z6, Z7)
	ZSTORE4(512, Z8, Z9, Z10, Z11)
	ZSTORE4(768, Z12, Z13, Z14, Z15)
	ZSTORE4(1024, Z16, Z17, Z18, Z19)
	ZSTORE4(1280, Z20, Z21, Z22, Z23)
	JMP gemmf32z83next

gemmf32z83finish:
	MOVQ DX, R10
	ZOUT4(0, X0, Z0, Z1, Z2, Z3)
	ZOUT4(16, X4, Z4, Z5, Z6, Z7)
	LEAQ (R10)(R11*2), R10
	ZOUT4(0, X8, Z8, Z9, Z10, Z11)
	ZOUT4(16, X12, Z12, Z13, Z14, Z15)
	LEAQ (R10)(R11*2), R10
	ZOUT4(0, X16, Z16, Z17, Z18, Z19)
	ZOUT4(16, X20, Z20, Z21, Z22, Z23)

gemmf32z83next:
	ZNEXT3(1536, gemmf32z83tile)

// func gemmF32Z41(w *float32, ldw int, x *float32, xs int, n int, acc *float32, out *float32, ldo int, flags int, groups int)
TEXT ·gemmF32Z41(SB), NOSPLIT, $0-80
	ZSETUP

gemmf32z41tile:
	ZTILE4(gemmf32z41zero)
	ZLOAD4(0, Z0, Z1, Z2, Z3)
	JMP gemmf32z41body

gemmf32z41zero:
	ZZERO0

gemmf32z41body:
	TESTQ CX, CX
	JZ    gemmf32z41end

gemmf32z41loop:
	ZX1
	ZW1((SI), Z30, Z0)
	ZW1((SI)(R8*1), Z31, Z1)
	ZW1((SI)(R8*2), Z30, Z2)
	ZW1((SI)(R9*1), Z31, Z3)
	ADDQ $32, SI
	ADDQ $64, DI
	DECQ CX
	JNZ  gemmf32z41loop

gemmf32z41end:
	TESTQ $gemmFinish, R12
	JNZ   gemmf32z41finish
	ZSTORE4(0, Z0, Z1, Z2, Z3)
	JMP gemmf32z41next

gemmf32z41finish:
	MOVQ DX, R10
	ZOUT4(0, X0, Z0, Z1, Z2, Z3)

gemmf32z41next:
	ZNEXT1(256, gemmf32z41tile)

// func gemmF32Z42(w *float32, ldw int, x *float32, xs int, n int, acc *float32, out *float32, ldo int, flags int, groups int)
TEXT ·gemmF32Z42(SB), NOSPLIT, $0-80
	ZSETUP

gemmf32z42tile:
	ZTILE4(gemmf32z42zero)
	ZLOAD4(0, Z0, Z1, Z2, Z3)
	ZLOAD4(256, Z4, Z5, Z6, Z7)
	JMP gemmf32z42body

gemmf32z42zero:
	ZZERO0
	ZZERO4(Z4, Z5, Z6, Z7)

gemmf32z42body:
	TESTQ CX, CX
	JZ    gemmf32z42end

gemmf32z42loop:
	ZX2
	ZW2((SI), Z30, Z0, Z4)
	ZW2((SI)(R8*1), Z31, Z1, Z5)
	ZW2((SI)(R8*2), Z30, Z2, Z6)
	ZW2((SI)(R9*1), Z31, Z3, Z7)
	ADDQ $32, SI
	ADDQ $128, DI
	DECQ CX
	JNZ  gemmf32z42loop

gemmf32z42end:
	TESTQ $gemmFinish, R12
	JNZ   gemmf32z42finish
	ZSTORE4(0, Z0, Z1, Z2, Z3)
	ZSTORE4(256, Z4, Z5, Z6, Z7)
	JMP gemmf32z42next

gemmf32z42finish:
	MOVQ DX, R10
	ZOUT4(0, X0, Z0, Z1, Z2, Z3)
	LEAQ (R10)(R11*2), R10
	ZOUT4(0, X4, Z4, Z5, Z6, Z7)

gemmf32z42next:
	ZNEXT2(512, gemmf32z42tile)

// func gemmF32Z43(w *float32, ldw int, x *float32, xs int, n int, acc *float32, out *float32, ldo int, flags int, groups int)
TEXT ·gemmF32Z43(SB), NOSPLIT, $0-80
	ZSETUP

gemmf32z43tile:
	ZTILE4(gemmf32z43zero)
	ZLOAD4(0, Z0, Z1, Z2, Z3)
	ZLOAD4(256, Z4, Z5, Z6, Z7)
	ZLOAD4(512, Z8, Z9, Z10, Z11)
	JMP gemmf32z43body

gemmf32z43zero:
	ZZERO0
	ZZERO4(Z4, Z5, Z6, Z7)
	ZZERO4(Z8, Z9, Z10, Z11)

gemmf32z43body:
	TESTQ CX, CX
	JZ    gemmf32z43end

gemmf32z43loop:
	ZX3
	ZW3((SI), Z30, Z0, Z4, Z8)
	ZW3((SI)(R8*1), Z31, Z1, Z5, Z9)
	ZW3((SI)(R8*2), Z30, Z2, Z6, Z10)
	ZW3((SI)(R9*1), Z31, Z3, Z7, Z11)
	ADDQ $32, SI
	ADDQ $192, DI
	DECQ CX
	JNZ  gemmf32z43loop

gemmf32z43end:
	TESTQ $gemmFinish, R12
	JNZ   gemmf32z43finish
	ZSTORE4(0, Z0, Z1, Z2, Z3)
	ZSTORE4(256, Z4, Z5, Z6, Z7)
	ZSTORE4(512, Z8, Z9, Z10, Z11)
	JMP gemmf32z43next

gemmf32z43finish:
	MOVQ DX, R10
	ZOUT4(0, X0, Z0, Z1, Z2, Z3)
	LEAQ (R10)(R11*2), R10
	ZOUT4(0, X4, Z4, Z5, Z6, Z7)
	LEAQ (R10)(R11*2), R10
	ZOUT4(0, X8, Z8, Z9, Z10, Z11)

gemmf32z43next:
	ZNEXT3(768, gemmf32z43tile)
