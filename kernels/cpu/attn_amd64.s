//go:build amd64 && !noasm

#include "textflag.h"
#include "exp_amd64.h"

// AVX2/F16C kernels of attention; attn_amd64.go has their Go wrappers.

// PREFETCH4 asks for this head's hdb bytes in the next group's four slots
// (AX, BX, R11, R12 are this group's, R9 bytes before them), into L2;
// label names its loop, ask its start, and the macro ends at skip. It asks
// once per kv head (R10 = 0), and for heads narrower than a line only
// where the kv head's bytes start in a line's first hdb bytes (judged by
// the first slot) or it is the call's first head: otherwise the kv head
// before it, in the same line, asked for that line. Asking for every
// head's own bytes issued four or more prefetches to a line when heads
// are narrow (a head of 8 halves is 16 bytes), a third of a narrow head's
// instructions. R14 is scratch.
#define PREFETCH4(label, ask, skip) \
	TESTQ      R10, R10 \
	JNZ        skip \
	CMPQ       hdb+24(FP), $64 \
	JGE        ask \
	CMPQ       CX, nh+32(FP) \
	JEQ        ask \
	LEAQ       (AX)(R9*1), R14 \
	ANDQ       $63, R14 \
	CMPQ       R14, hdb+24(FP) \
	JGE        skip \
ask: \
	ADDQ       R9, AX \
	ADDQ       R9, BX \
	ADDQ       R9, R11 \
	ADDQ       R9, R12 \
	XORQ       R14, R14 \
label: \
	PREFETCHT1 (AX)(R14*1) \
	PREFETCHT1 (BX)(R14*1) \
	PREFETCHT1 (R11)(R14*1) \
	PREFETCHT1 (R12)(R14*1) \
	ADDQ       $64, R14 \
	CMPQ       R14, hdb+24(FP) \
	JLT        label \
	SUBQ       R9, AX \
	SUBQ       R9, BX \
	SUBQ       R9, R11 \
	SUBQ       R9, R12 \
skip:

// SLOTS4 points AX, BX, R11 and R12 at the four positions' slots from R8
// (strideb apart); a position past the last (R13 positions left) repeats
// the first, so its sums are formed the same way and dropped.
#define SLOTS4 \
	MOVQ    R8, AX \
	MOVQ    R8, BX \
	ADDQ    strideb+56(FP), BX \
	CMPQ    R13, $2 \
	CMOVQLT AX, BX \
	MOVQ    BX, R11 \
	ADDQ    strideb+56(FP), R11 \
	CMPQ    R13, $3 \
	CMOVQLT AX, R11 \
	MOVQ    R11, R12 \
	ADDQ    strideb+56(FP), R12 \
	CMPQ    R13, $4 \
	CMOVQLT AX, R12

// func dotsF16AVX(q *float32, k *uint16, out *float32, hdb, nh, group, npos, strideb, ostride int)
// out[p·nh+h] = Σ_{i<hd} q[h·hd+i]·k[p·stride+(h/group)·hd+i] for h < nh,
// p < npos ≥ 1, k in F16. hdb = 2·hd (hd a multiple of 8), strideb =
// 2·stride and ostride = 4·nh are in bytes.
//
// Positions go four at a time, and for each four every head in turn: the
// query is loaded once for four keys and the four sums are reduced
// together, while the keys are still read as four streams along their
// slots. A position past the end repeats the group's first (its sums are
// computed and dropped), so every position's sum is formed the same way:
// one accumulator in order of i, then the same horizontal tree.
TEXT ·dotsF16AVX(SB), NOSPLIT, $0-72
	MOVQ k+8(FP), R8        // keys of the group's first position
	MOVQ out+16(FP), DX     // its scores
	MOVQ npos+48(FP), R13   // positions left
	MOVQ ostride+64(FP), DI
	MOVQ strideb+56(FP), R9
	SHLQ $2, R9             // a group of slots, in bytes

dgroup:
	SLOTS4
	MOVQ    q+0(FP), SI
	MOVQ    nh+32(FP), CX
	XORQ    R10, R10 // heads done in this kv head

dhead:
	// Prefetch this head's keys in the next group's slots: reading four
	// slots side by side defeats the hardware's stream prefetch. Into L2
	// (T1): on a Zen 5 host a cold batch-8 decode ran about a third faster
	// than with T0 or no prefetch, and a group further ahead did not help.
	PREFETCH4(dpf, dpfask, dpfdone)

	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	XORQ   R14, R14 // offset in the keys, in bytes

dloop:
	VMOVUPS     (SI)(R14*2), Y4
	VCVTPH2PS   (AX)(R14*1), Y5
	VCVTPH2PS   (BX)(R14*1), Y6
	VCVTPH2PS   (R11)(R14*1), Y7
	VCVTPH2PS   (R12)(R14*1), Y8
	VFMADD231PS Y5, Y4, Y0
	VFMADD231PS Y6, Y4, Y1
	VFMADD231PS Y7, Y4, Y2
	VFMADD231PS Y8, Y4, Y3
	ADDQ        $16, R14
	CMPQ        R14, hdb+24(FP)
	JLT         dloop

	// X0 = [Σ0 Σ1 Σ2 Σ3], stored for the positions that exist.
	VHADDPS      Y1, Y0, Y0
	VHADDPS      Y3, Y2, Y2
	VHADDPS      Y2, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS       X1, X0, X0
	VMOVSS       X0, (DX)
	CMPQ         R13, $3
	JLT          dlt3
	VEXTRACTPS   $2, X0, (DX)(DI*2)

dlt3:
	CMPQ       R13, $2
	JLT        dstored
	ADDQ       DI, DX
	VEXTRACTPS $1, X0, (DX)
	CMPQ       R13, $4
	JLT        dback
	VEXTRACTPS $3, X0, (DX)(DI*2)

dback:
	SUBQ DI, DX

dstored:
	LEAQ (SI)(R14*2), SI // R14 = hdb: the next head's query
	ADDQ $4, DX
	INCQ R10
	CMPQ R10, group+40(FP)
	JLT  dnext
	XORQ R10, R10
	ADDQ R14, AX // the next kv head
	ADDQ R14, BX
	ADDQ R14, R11
	ADDQ R14, R12

dnext:
	DECQ CX
	JNZ  dhead

	LEAQ (DX)(DI*2), DX // DX = scores of head nh: on to the next group's
	ADDQ DI, DX
	ADDQ R9, R8
	SUBQ $4, R13
	JGT  dgroup
	VZEROUPPER
	RET

// func axpysF16AVX(y, w *float32, v *uint16, hdb, nh, group, npos, strideb, wstride int)
// y[h·hd+i] += Σ_p w[p·nh+h]·v[p·stride+(h/group)·hd+i] for h < nh,
// p < npos ≥ 1, v in F16, adding in order of p; sizes as dotsF16AVX's
// (wstride = 4·nh).
//
// Positions go four at a time, and for each four every head in turn, so a
// vector of y is loaded and stored once for four fused multiply-adds; the
// last npos mod 4 go one at a time, which is the same arithmetic.
TEXT ·axpysF16AVX(SB), NOSPLIT, $0-72
	MOVQ v+16(FP), R8       // values of the group's first position
	MOVQ w+8(FP), DX        // its weights
	MOVQ npos+48(FP), R13   // positions left
	MOVQ wstride+64(FP), DI
	MOVQ strideb+56(FP), R9
	SHLQ $2, R9             // a group of slots, in bytes
	CMPQ R13, $4
	JLT  atail

agroup:
	MOVQ strideb+56(FP), BX
	MOVQ R8, AX
	LEAQ (R8)(BX*2), R11
	LEAQ (R11)(BX*1), R12
	ADDQ R8, BX
	MOVQ y+0(FP), SI
	MOVQ nh+32(FP), CX
	XORQ R10, R10

ahead:
	// Prefetch this head's values in the next group's slots, as
	// dotsF16AVX does its keys.
	PREFETCH4(apf, apfask, apfdone)

	VBROADCASTSS (DX), Y0
	VBROADCASTSS (DX)(DI*1), Y1
	VBROADCASTSS (DX)(DI*2), Y2
	ADDQ         DI, DX
	VBROADCASTSS (DX)(DI*2), Y3
	SUBQ         DI, DX
	XORQ         R14, R14

aloop:
	VMOVUPS     (SI)(R14*2), Y4
	VCVTPH2PS   (AX)(R14*1), Y5
	VCVTPH2PS   (BX)(R14*1), Y6
	VCVTPH2PS   (R11)(R14*1), Y7
	VCVTPH2PS   (R12)(R14*1), Y8
	VFMADD231PS Y5, Y0, Y4
	VFMADD231PS Y6, Y1, Y4
	VFMADD231PS Y7, Y2, Y4
	VFMADD231PS Y8, Y3, Y4
	VMOVUPS     Y4, (SI)(R14*2)
	ADDQ        $16, R14
	CMPQ        R14, hdb+24(FP)
	JLT         aloop

	LEAQ (SI)(R14*2), SI // the next head's output
	ADDQ $4, DX
	INCQ R10
	CMPQ R10, group+40(FP)
	JLT  anext
	XORQ R10, R10
	ADDQ R14, AX
	ADDQ R14, BX
	ADDQ R14, R11
	ADDQ R14, R12

anext:
	DECQ CX
	JNZ  ahead

	LEAQ (DX)(DI*2), DX // DX = weights of head nh: on to the next group's
	ADDQ DI, DX
	ADDQ R9, R8
	SUBQ $4, R13
	CMPQ R13, $4
	JGE  agroup

atail:
	TESTQ R13, R13
	JZ    adone
	MOVQ  R8, AX
	MOVQ  y+0(FP), SI
	MOVQ  nh+32(FP), CX
	XORQ  R10, R10

ahead1:
	VBROADCASTSS (DX), Y0
	XORQ         R14, R14

aloop1:
	VMOVUPS     (SI)(R14*2), Y4
	VCVTPH2PS   (AX)(R14*1), Y5
	VFMADD231PS Y5, Y0, Y4
	VMOVUPS     Y4, (SI)(R14*2)
	ADDQ        $16, R14
	CMPQ        R14, hdb+24(FP)
	JLT         aloop1

	LEAQ (SI)(R14*2), SI
	ADDQ $4, DX
	INCQ R10
	CMPQ R10, group+40(FP)
	JLT  anext1
	XORQ R10, R10
	ADDQ R14, AX

anext1:
	DECQ CX
	JNZ  ahead1

	ADDQ strideb+56(FP), R8 // DX is at the next position's weights
	DECQ R13
	JMP  atail

adone:
	VZEROUPPER
	RET

// func f32ToF16AVX(dst *uint16, src *float32, n int)
// Converts n floats (a multiple of 8), rounding to nearest even.
TEXT ·f32ToF16AVX(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $3, CX
	JZ   tohdone

tohloop:
	VMOVUPS   (SI), Y0
	VCVTPS2PH $0, Y0, (DI)
	ADDQ      $32, SI
	ADDQ      $16, DI
	DECQ      CX
	JNZ       tohloop

tohdone:
	VZEROUPPER
	RET

// func colMaxAVX(s, m *float32, width, stretches int)
// m[i] = max over k < stretches of s[k·width+i]; width is a multiple of 8,
// stretches ≥ 1. Each vector of m is one register folded down the
// stretches, so nothing is stored until it is done.
TEXT ·colMaxAVX(SB), NOSPLIT, $0-32
	MOVQ s+0(FP), SI
	MOVQ m+8(FP), DI
	MOVQ width+16(FP), R8
	MOVQ stretches+24(FP), R9
	MOVQ R8, R12
	SHLQ $2, R12 // stretch in bytes
	SHRQ $3, R8  // vectors per stretch

cmvec:
	VMOVUPS (SI), Y0
	LEAQ    (SI)(R12*1), AX
	MOVQ    R9, CX
	DECQ    CX
	JZ      cmstore

cmloop:
	VMAXPS (AX), Y0, Y0
	ADDQ   R12, AX
	DECQ   CX
	JNZ    cmloop

cmstore:
	VMOVUPS Y0, (DI)
	ADDQ    $32, SI
	ADDQ    $32, DI
	DECQ    R8
	JNZ     cmvec
	VZEROUPPER
	RET

// func expSubAVX(s, p, sum *float32, width, stretches int)
// s[k·width+i] = e^(s[k·width+i] − p[i]) and sum[i] = Σ_k of those, added
// in order of k; width is a multiple of 8, stretches ≥ 1.
TEXT ·expSubAVX(SB), NOSPLIT, $0-40
	MOVQ s+0(FP), SI
	MOVQ p+8(FP), DX
	MOVQ sum+16(FP), DI
	MOVQ width+24(FP), R8
	MOVQ stretches+32(FP), R9
	MOVQ R8, R12
	SHLQ $2, R12
	SHRQ $3, R8

esvec:
	VMOVUPS (DX), Y5
	VXORPS  Y6, Y6, Y6
	MOVQ    SI, AX
	MOVQ    R9, CX

esloop:
	VMOVUPS (AX), Y0
	VSUBPS  Y5, Y0, Y0
	EXPPS(Y0, Y1, Y2, Y3)
	VMOVUPS Y0, (AX)
	VADDPS  Y0, Y6, Y6
	ADDQ    R12, AX
	DECQ    CX
	JNZ     esloop

	VMOVUPS Y6, (DI)
	ADDQ    $32, SI
	ADDQ    $32, DX
	ADDQ    $32, DI
	DECQ    R8
	JNZ     esvec
	VZEROUPPER
	RET

// func colMaxRowsAVX(s, m *float32, width, stretches int)
// colMaxAVX's result for wide stretches, computed as expSubRowsAVX goes:
// along s with m in memory. Each lane still folds its stretches in order
// of k with the same operands (the running maximum first, so ties of zeros
// and NaNs resolve as before).
TEXT ·colMaxRowsAVX(SB), NOSPLIT, $0-32
	MOVQ s+0(FP), SI
	MOVQ m+8(FP), DI
	MOVQ width+16(FP), R8
	MOVQ stretches+24(FP), R9
	SHRQ $3, R8 // vectors per stretch
	MOVQ DI, AX
	MOVQ R8, CX

crfirst:
	VMOVUPS (SI), Y0
	VMOVUPS Y0, (AX)
	ADDQ    $32, SI
	ADDQ    $32, AX
	DECQ    CX
	JNZ     crfirst
	DECQ    R9
	JZ      crdone

crrow:
	MOVQ DI, AX
	MOVQ R8, CX

crvec:
	VMOVUPS (AX), Y0
	VMAXPS  (SI), Y0, Y0
	VMOVUPS Y0, (AX)
	ADDQ    $32, SI
	ADDQ    $32, AX
	DECQ    CX
	JNZ     crvec
	DECQ    R9
	JNZ     crrow

crdone:
	VZEROUPPER
	RET

// func expSubRowsAVX(s, p, sum *float32, width, stretches int)
// expSubAVX's results for wide stretches. It goes along s, a stretch at a
// time, with the sums in memory, rather than down each vector's column of
// stretches with its sum in a register: a stretch of 128 heads is 4 KiB,
// and a column at that stride falls in one L1 set and aliases the store
// before it at every step, which made this pass a third of a
// narrow-headed model's attention. Each lane still adds its terms in order
// of k with the same operands, so the results are the same bits. Narrow
// stretches keep expSubAVX: the sums' loads and stores cost more there
// than the column walk.
TEXT ·expSubRowsAVX(SB), NOSPLIT, $0-40
	MOVQ   s+0(FP), SI
	MOVQ   sum+16(FP), DI
	MOVQ   width+24(FP), R8
	MOVQ   stretches+32(FP), R9
	SHRQ   $3, R8 // vectors per stretch
	VXORPS Y6, Y6, Y6
	MOVQ   DI, AX
	MOVQ   R8, CX

erzero:
	VMOVUPS Y6, (AX)
	ADDQ    $32, AX
	DECQ    CX
	JNZ     erzero

errow:
	MOVQ p+8(FP), DX
	MOVQ DI, AX
	MOVQ R8, CX

	// Four vectors at a time (EXPPS4), then two, then an odd last one.
ervec4:
	CMPQ    CX, $4
	JLT     ervec2
	VMOVUPS (SI), Y0
	VMOVUPS 32(SI), Y4
	VMOVUPS 64(SI), Y8
	VMOVUPS 96(SI), Y12
	VSUBPS  (DX), Y0, Y0
	VSUBPS  32(DX), Y4, Y4
	VSUBPS  64(DX), Y8, Y8
	VSUBPS  96(DX), Y12, Y12
	EXPPS4(Y0, Y1, Y2, Y3, Y4, Y5, Y6, Y7, Y8, Y9, Y10, Y11, Y12, Y13, Y14, Y15)
	VMOVUPS Y0, (SI)
	VMOVUPS Y4, 32(SI)
	VMOVUPS Y8, 64(SI)
	VMOVUPS Y12, 96(SI)
	VMOVUPS (AX), Y1
	VMOVUPS 32(AX), Y5
	VMOVUPS 64(AX), Y9
	VMOVUPS 96(AX), Y13
	VADDPS  Y0, Y1, Y1
	VADDPS  Y4, Y5, Y5
	VADDPS  Y8, Y9, Y9
	VADDPS  Y12, Y13, Y13
	VMOVUPS Y1, (AX)
	VMOVUPS Y5, 32(AX)
	VMOVUPS Y9, 64(AX)
	VMOVUPS Y13, 96(AX)
	ADDQ    $128, SI
	ADDQ    $128, DX
	ADDQ    $128, AX
	SUBQ    $4, CX
	JMP     ervec4

ervec2:
	CMPQ    CX, $2
	JLT     ervec
	VMOVUPS (SI), Y0
	VMOVUPS 32(SI), Y4
	VSUBPS  (DX), Y0, Y0
	VSUBPS  32(DX), Y4, Y4
	EXPPS2(Y0, Y1, Y2, Y3, Y4, Y5, Y6, Y7)
	VMOVUPS Y0, (SI)
	VMOVUPS Y4, 32(SI)
	VMOVUPS (AX), Y1
	VMOVUPS 32(AX), Y5
	VADDPS  Y0, Y1, Y1
	VADDPS  Y4, Y5, Y5
	VMOVUPS Y1, (AX)
	VMOVUPS Y5, 32(AX)
	ADDQ    $64, SI
	ADDQ    $64, DX
	ADDQ    $64, AX
	SUBQ    $2, CX
	JMP     ervec2

ervec:
	TESTQ   CX, CX
	JZ      errowdone
	VMOVUPS (SI), Y0
	VSUBPS  (DX), Y0, Y0
	EXPPS(Y0, Y1, Y2, Y3)
	VMOVUPS Y0, (SI)
	VMOVUPS (AX), Y4
	VADDPS  Y0, Y4, Y4
	VMOVUPS Y4, (AX)
	ADDQ    $32, SI
	ADDQ    $32, DX
	ADDQ    $32, AX

errowdone:
	DECQ R9
	JNZ  errow
	VZEROUPPER
	RET

// func dots8F16AVX(q *float32, k *uint16, out *float32, hdb, nh, group, npos, strideb, ostride int)
// dotsF16AVX for heads of 8 (hdb = 16) and nh a whole number of groups.
// A head is one vector, so a kv head's four keys are converted once for
// all the group's query heads rather than once per head, which left the
// conversions a quarter of a narrow head's work. Each sum is formed as
// dotsF16AVX forms it: one fused multiply-add onto zero, then the same
// horizontal tree, so the bits are the same.
TEXT ·dots8F16AVX(SB), NOSPLIT, $0-72
	MOVQ k+8(FP), R8
	MOVQ out+16(FP), DX
	MOVQ npos+48(FP), R13
	MOVQ ostride+64(FP), DI
	MOVQ strideb+56(FP), R9
	SHLQ $2, R9

d8group:
	SLOTS4
	MOVQ    q+0(FP), SI
	MOVQ    nh+32(FP), CX

d8kv:
	XORQ R10, R10
	PREFETCH4(d8pf, d8ask, d8pfdone)
	VCVTPH2PS (AX), Y5
	VCVTPH2PS (BX), Y6
	VCVTPH2PS (R11), Y7
	VCVTPH2PS (R12), Y8
	MOVQ      group+40(FP), R10

d8head:
	VMOVUPS      (SI), Y4
	VXORPS       Y0, Y0, Y0
	VXORPS       Y1, Y1, Y1
	VXORPS       Y2, Y2, Y2
	VXORPS       Y3, Y3, Y3
	VFMADD231PS  Y5, Y4, Y0
	VFMADD231PS  Y6, Y4, Y1
	VFMADD231PS  Y7, Y4, Y2
	VFMADD231PS  Y8, Y4, Y3
	VHADDPS      Y1, Y0, Y0
	VHADDPS      Y3, Y2, Y2
	VHADDPS      Y2, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS       X1, X0, X0
	VMOVSS       X0, (DX)
	CMPQ         R13, $3
	JLT          d8lt3
	VEXTRACTPS   $2, X0, (DX)(DI*2)

d8lt3:
	CMPQ       R13, $2
	JLT        d8stored
	ADDQ       DI, DX
	VEXTRACTPS $1, X0, (DX)
	CMPQ       R13, $4
	JLT        d8back
	VEXTRACTPS $3, X0, (DX)(DI*2)

d8back:
	SUBQ DI, DX

d8stored:
	ADDQ $32, SI
	ADDQ $4, DX
	DECQ CX
	DECQ R10
	JNZ  d8head
	ADDQ $16, AX
	ADDQ $16, BX
	ADDQ $16, R11
	ADDQ $16, R12
	TESTQ CX, CX
	JNZ  d8kv

	LEAQ (DX)(DI*2), DX
	ADDQ DI, DX
	ADDQ R9, R8
	SUBQ $4, R13
	JGT  d8group
	VZEROUPPER
	RET

// func axpys8F16AVX(y, w *float32, v *uint16, hdb, nh, group, npos, strideb, wstride int)
// axpysF16AVX for heads of 8 (hdb = 16) and nh a whole number of groups:
// a kv head's values are converted once for all the group's query heads.
// Each output adds its terms in order of p with the same fused
// multiply-adds, so the bits are the same.
TEXT ·axpys8F16AVX(SB), NOSPLIT, $0-72
	MOVQ v+16(FP), R8
	MOVQ w+8(FP), DX
	MOVQ npos+48(FP), R13
	MOVQ wstride+64(FP), DI
	MOVQ strideb+56(FP), R9
	SHLQ $2, R9
	CMPQ R13, $4
	JLT  a8tail

a8group:
	MOVQ strideb+56(FP), BX
	MOVQ R8, AX
	LEAQ (R8)(BX*2), R11
	LEAQ (R11)(BX*1), R12
	ADDQ R8, BX
	MOVQ y+0(FP), SI
	MOVQ nh+32(FP), CX

a8kv:
	XORQ R10, R10
	PREFETCH4(a8pf, a8ask, a8pfdone)
	VCVTPH2PS (AX), Y5
	VCVTPH2PS (BX), Y6
	VCVTPH2PS (R11), Y7
	VCVTPH2PS (R12), Y8
	MOVQ      group+40(FP), R10

a8head:
	VBROADCASTSS (DX), Y0
	VBROADCASTSS (DX)(DI*1), Y1
	VBROADCASTSS (DX)(DI*2), Y2
	ADDQ         DI, DX
	VBROADCASTSS (DX)(DI*2), Y3
	SUBQ         DI, DX
	VMOVUPS      (SI), Y4
	VFMADD231PS  Y5, Y0, Y4
	VFMADD231PS  Y6, Y1, Y4
	VFMADD231PS  Y7, Y2, Y4
	VFMADD231PS  Y8, Y3, Y4
	VMOVUPS      Y4, (SI)
	ADDQ         $32, SI
	ADDQ         $4, DX
	DECQ         CX
	DECQ         R10
	JNZ          a8head
	ADDQ         $16, AX
	ADDQ         $16, BX
	ADDQ         $16, R11
	ADDQ         $16, R12
	TESTQ        CX, CX
	JNZ          a8kv

	LEAQ (DX)(DI*2), DX
	ADDQ DI, DX
	ADDQ R9, R8
	SUBQ $4, R13
	CMPQ R13, $4
	JGE  a8group

a8tail:
	TESTQ R13, R13
	JZ    a8done
	MOVQ  R8, AX
	MOVQ  y+0(FP), SI
	MOVQ  nh+32(FP), CX

a8kv1:
	VCVTPH2PS (AX), Y5
	MOVQ      group+40(FP), R10

a8head1:
	VBROADCASTSS (DX), Y0
	VMOVUPS      (SI), Y4
	VFMADD231PS  Y5, Y0, Y4
	VMOVUPS      Y4, (SI)
	ADDQ         $32, SI
	ADDQ         $4, DX
	DECQ         CX
	DECQ         R10
	JNZ          a8head1
	ADDQ         $16, AX
	TESTQ        CX, CX
	JNZ          a8kv1

	ADDQ strideb+56(FP), R8
	DECQ R13
	JMP  a8tail

a8done:
	VZEROUPPER
	RET

// The grouped kernels below take several query rows of one sequence over
// the same run of positions, for heads of 8 with two query heads per kv
// head, in an F16 cache. A block is 8 query heads (4 kv heads), and a
// vector holds one element of a position's key (or value) for the 8
// heads, so a score or an output is formed in the lanes of vertical
// operations, with no horizontal reduction and no scattered store: a
// position's keys are converted and spread once for every row, and every
// row then costs its multiply-adds alone.
//
// Each score is formed with the operations dots8F16AVX uses, in the same
// order: eight products, each a fused multiply-add onto zero (q times k),
// added as its horizontal tree adds them, ((p0+p1)+(p2+p3)) +
// ((p4+p5)+(p6+p7)), the lower element first as VHADDPS takes it (which
// decides the NaN a sum of two NaNs keeps); each output adds its terms in
// order of position with the same fused multiply-adds as axpys8F16AVX
// (w times v, onto the sum). So a row gets the same bits from either,
// which TestGroupedKernelsBits holds them to, NaN payloads included.

DATA grpdup<>+0(SB)/4, $0
DATA grpdup<>+4(SB)/4, $0
DATA grpdup<>+8(SB)/4, $1
DATA grpdup<>+12(SB)/4, $1
DATA grpdup<>+16(SB)/4, $2
DATA grpdup<>+20(SB)/4, $2
DATA grpdup<>+24(SB)/4, $3
DATA grpdup<>+28(SB)/4, $3
DATA grpdup<>+32(SB)/4, $4
DATA grpdup<>+36(SB)/4, $4
DATA grpdup<>+40(SB)/4, $5
DATA grpdup<>+44(SB)/4, $5
DATA grpdup<>+48(SB)/4, $6
DATA grpdup<>+52(SB)/4, $6
DATA grpdup<>+56(SB)/4, $7
DATA grpdup<>+60(SB)/4, $7
GLOBL grpdup<>(SB), RODATA|NOPTR, $64

// GRPSPREAD converts the 4 kv heads of 8 halves at (SRC) and writes the
// 8 vectors of their elements spread over a block's query heads to (DST):
// vector i holds element i of kv heads 0 0 1 1 2 2 3 3. Y14 and Y15 hold
// grpdup; Y0–Y7 are clobbered.
#define GRPSPREAD(SRC, DST) \
	VCVTPH2PS (SRC), Y0 \
	VCVTPH2PS 16(SRC), Y1 \
	VCVTPH2PS 32(SRC), Y2 \
	VCVTPH2PS 48(SRC), Y3 \
	VUNPCKLPS Y1, Y0, Y4 \
	VUNPCKHPS Y1, Y0, Y5 \
	VUNPCKLPS Y3, Y2, Y6 \
	VUNPCKHPS Y3, Y2, Y7 \
	VSHUFPS   $0x44, Y6, Y4, Y0 \
	VSHUFPS   $0xee, Y6, Y4, Y1 \
	VSHUFPS   $0x44, Y7, Y5, Y2 \
	VSHUFPS   $0xee, Y7, Y5, Y3 \
	VPERMPS   Y0, Y14, Y4 \
	VPERMPS   Y0, Y15, Y5 \
	VPERMPS   Y1, Y14, Y6 \
	VPERMPS   Y1, Y15, Y7 \
	VMOVUPS   Y4, (DST) \
	VMOVUPS   Y6, 32(DST) \
	VMOVUPS   Y5, 128(DST) \
	VMOVUPS   Y7, 160(DST) \
	VPERMPS   Y2, Y14, Y4 \
	VPERMPS   Y2, Y15, Y5 \
	VPERMPS   Y3, Y14, Y6 \
	VPERMPS   Y3, Y15, Y7 \
	VMOVUPS   Y4, 64(DST) \
	VMOVUPS   Y6, 96(DST) \
	VMOVUPS   Y5, 192(DST) \
	VMOVUPS   Y7, 224(DST)

// func spreadF16G2AVX(dst *float32, kv *uint16, slots *int32, npos, strideb int)
// For p < npos ≥ 1: GRPSPREAD of the 4 kv heads at kv + slots[p]·strideb
// bytes into dst[p·64:].
TEXT ·spreadF16G2AVX(SB), NOSPLIT, $0-40
	MOVQ    dst+0(FP), DI
	MOVQ    kv+8(FP), SI
	MOVQ    slots+16(FP), BX
	MOVQ    npos+24(FP), CX
	MOVQ    strideb+32(FP), R8
	VMOVUPS grpdup<>+0(SB), Y14
	VMOVUPS grpdup<>+32(SB), Y15

spnext:
	// Ask for the line four positions on: the slots are a cache line
	// or more apart, often in scattered blocks, and the spread would
	// otherwise wait on each.
	CMPQ       CX, $4
	JLE        spgo
	MOVLQSX    16(BX), AX
	IMULQ      R8, AX
	PREFETCHT0 (SI)(AX*1)

spgo:
	MOVLQSX (BX), AX
	IMULQ   R8, AX
	ADDQ    SI, AX
	GRPSPREAD(AX, DI)
	ADDQ    $4, BX
	ADDQ    $256, DI
	DECQ    CX
	JNZ     spnext
	VZEROUPPER
	RET

// GRPPROD sets Yd to the products of query vector i (Y8+i) with element i
// of the spread keys at off(KX), each a fused multiply-add onto zero.
#define GRPPROD(off, q, d) \
	VXORPS      d, d, d \
	VFMADD231PS off(DX), q, d

// func dotsG2AVX(kx, qt, s *float32, npos, nrows, qrowb, sposb, srowb int)
// For r < nrows ≥ 1 and p < npos ≥ 1: the 8 scores of row r's block of
// query heads (qt + r·qrowb bytes: 8 vectors, vector i holding element i
// of the 8 heads) with the spread keys at kx[p·64:], stored at s + r·srowb
// + p·sposb bytes.
TEXT ·dotsG2AVX(SB), NOSPLIT, $0-64
	MOVQ qt+8(FP), SI
	MOVQ s+16(FP), DI
	MOVQ nrows+32(FP), R9

drow:
	VMOVUPS (SI), Y8
	VMOVUPS 32(SI), Y9
	VMOVUPS 64(SI), Y10
	VMOVUPS 96(SI), Y11
	VMOVUPS 128(SI), Y12
	VMOVUPS 160(SI), Y13
	VMOVUPS 192(SI), Y14
	VMOVUPS 224(SI), Y15
	MOVQ    kx+0(FP), DX
	MOVQ    DI, AX
	MOVQ    npos+24(FP), CX
	MOVQ    sposb+48(FP), R10

dpos:
	GRPPROD(0, Y8, Y0)
	GRPPROD(32, Y9, Y1)
	VADDPS  Y1, Y0, Y0 // p0+p1
	GRPPROD(64, Y10, Y1)
	GRPPROD(96, Y11, Y2)
	VADDPS  Y2, Y1, Y1 // p2+p3
	VADDPS  Y1, Y0, Y0 // (p0+p1)+(p2+p3)
	GRPPROD(128, Y12, Y1)
	GRPPROD(160, Y13, Y2)
	VADDPS  Y2, Y1, Y1
	GRPPROD(192, Y14, Y2)
	GRPPROD(224, Y15, Y3)
	VADDPS  Y3, Y2, Y2
	VADDPS  Y2, Y1, Y1
	VADDPS  Y1, Y0, Y0 // low half + high half
	VMOVUPS Y0, (AX)
	ADDQ    $256, DX
	ADDQ    R10, AX
	DECQ    CX
	JNZ     dpos

	ADDQ qrowb+40(FP), SI
	ADDQ srowb+56(FP), DI
	DECQ R9
	JNZ  drow
	VZEROUPPER
	RET

// func axpysG2AVX(vx, w, acc *float32, npos, nrows, wposb, wrowb int)
// For r < nrows ≥ 1: the 8 vectors at acc[r·64:] (vector i holding
// output element i of the block's 8 heads) plus, in order of p < npos ≥ 1,
// the weights at w + r·wrowb + p·wposb bytes times the spread values at
// vx[p·64:], by fused multiply-adds.
TEXT ·axpysG2AVX(SB), NOSPLIT, $0-56
	MOVQ w+8(FP), SI
	MOVQ acc+16(FP), DI
	MOVQ nrows+32(FP), R9
	MOVQ wposb+40(FP), R10

arow:
	VMOVUPS (DI), Y8
	VMOVUPS 32(DI), Y9
	VMOVUPS 64(DI), Y10
	VMOVUPS 96(DI), Y11
	VMOVUPS 128(DI), Y12
	VMOVUPS 160(DI), Y13
	VMOVUPS 192(DI), Y14
	VMOVUPS 224(DI), Y15
	MOVQ    vx+0(FP), DX
	MOVQ    SI, AX
	MOVQ    npos+24(FP), CX

apos:
	VMOVUPS     (AX), Y0
	VFMADD231PS (DX), Y0, Y8
	VFMADD231PS 32(DX), Y0, Y9
	VFMADD231PS 64(DX), Y0, Y10
	VFMADD231PS 96(DX), Y0, Y11
	VFMADD231PS 128(DX), Y0, Y12
	VFMADD231PS 160(DX), Y0, Y13
	VFMADD231PS 192(DX), Y0, Y14
	VFMADD231PS 224(DX), Y0, Y15
	ADDQ        $256, DX
	ADDQ        R10, AX
	DECQ        CX
	JNZ         apos

	VMOVUPS Y8, (DI)
	VMOVUPS Y9, 32(DI)
	VMOVUPS Y10, 64(DI)
	VMOVUPS Y11, 96(DI)
	VMOVUPS Y12, 128(DI)
	VMOVUPS Y13, 160(DI)
	VMOVUPS Y14, 192(DI)
	VMOVUPS Y15, 224(DI)
	ADDQ    $256, DI
	ADDQ    wrowb+48(FP), SI
	DECQ    R9
	JNZ     arow
	VZEROUPPER
	RET

// func transpose8AVX(dst, src *float32, n, dstrideb, sstrideb int)
// Transposes n ≥ 1 blocks of 8×8 floats: dst[j][i] = src[i][j] for the
// block at src + k·sstrideb into the one at dst + k·dstrideb.
TEXT ·transpose8AVX(SB), NOSPLIT, $0-40
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	MOVQ dstrideb+24(FP), R8
	MOVQ sstrideb+32(FP), R9

trnext:
	VMOVUPS    (SI), Y0
	VMOVUPS    32(SI), Y1
	VMOVUPS    64(SI), Y2
	VMOVUPS    96(SI), Y3
	VMOVUPS    128(SI), Y4
	VMOVUPS    160(SI), Y5
	VMOVUPS    192(SI), Y6
	VMOVUPS    224(SI), Y7
	VUNPCKLPS  Y1, Y0, Y8
	VUNPCKHPS  Y1, Y0, Y9
	VUNPCKLPS  Y3, Y2, Y10
	VUNPCKHPS  Y3, Y2, Y11
	VUNPCKLPS  Y5, Y4, Y12
	VUNPCKHPS  Y5, Y4, Y13
	VUNPCKLPS  Y7, Y6, Y14
	VUNPCKHPS  Y7, Y6, Y15
	VSHUFPS    $0x44, Y10, Y8, Y0
	VSHUFPS    $0xee, Y10, Y8, Y1
	VSHUFPS    $0x44, Y11, Y9, Y2
	VSHUFPS    $0xee, Y11, Y9, Y3
	VSHUFPS    $0x44, Y14, Y12, Y4
	VSHUFPS    $0xee, Y14, Y12, Y5
	VSHUFPS    $0x44, Y15, Y13, Y6
	VSHUFPS    $0xee, Y15, Y13, Y7
	VPERM2F128 $0x20, Y4, Y0, Y8
	VPERM2F128 $0x20, Y5, Y1, Y9
	VPERM2F128 $0x20, Y6, Y2, Y10
	VPERM2F128 $0x20, Y7, Y3, Y11
	VPERM2F128 $0x31, Y4, Y0, Y12
	VPERM2F128 $0x31, Y5, Y1, Y13
	VPERM2F128 $0x31, Y6, Y2, Y14
	VPERM2F128 $0x31, Y7, Y3, Y15
	VMOVUPS    Y8, (DI)
	VMOVUPS    Y9, 32(DI)
	VMOVUPS    Y10, 64(DI)
	VMOVUPS    Y11, 96(DI)
	VMOVUPS    Y12, 128(DI)
	VMOVUPS    Y13, 160(DI)
	VMOVUPS    Y14, 192(DI)
	VMOVUPS    Y15, 224(DI)
	ADDQ       R8, DI
	ADDQ       R9, SI
	DECQ       CX
	JNZ        trnext
	VZEROUPPER
	RET
