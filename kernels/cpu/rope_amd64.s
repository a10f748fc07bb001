//go:build amd64 && !noasm

#include "textflag.h"

// The RoPE rotations of ops.go (rotate), eight elements at a time: each
// output is one fused multiply-add (or -subtract) of a rounded product,
// which VFMADD231PS/VFMSUB231PS compute exactly as rotate does.

// func ropeHalvesAVX(v, c, s *float32, half int)
// (v[i], v[i+half]) = (v[i]·c[i] − v[i+half]·s[i], v[i]·s[i] + v[i+half]·c[i]),
// the first product of each fused; half is a multiple of 8, ≥ 8.
TEXT ·ropeHalvesAVX(SB), NOSPLIT, $0-32
	MOVQ v+0(FP), DI
	MOVQ c+8(FP), SI
	MOVQ s+16(FP), DX
	MOVQ half+24(FP), CX
	LEAQ (DI)(CX*4), BX

halvesloop:
	VMOVUPS     (DI), Y0     // a
	VMOVUPS     (BX), Y1     // b
	VMOVUPS     (SI), Y2     // c
	VMOVUPS     (DX), Y3     // s
	VMULPS      Y3, Y1, Y4   // b·s
	VMULPS      Y2, Y1, Y5   // b·c
	VFMSUB231PS Y2, Y0, Y4   // a·c − b·s
	VFMADD231PS Y3, Y0, Y5   // a·s + b·c
	VMOVUPS     Y4, (DI)
	VMOVUPS     Y5, (BX)
	ADDQ        $32, DI
	ADDQ        $32, BX
	ADDQ        $32, SI
	ADDQ        $32, DX
	SUBQ        $8, CX
	JNZ         halvesloop
	VZEROUPPER
	RET

// func ropePairsAVX(v, c, s *float32, n int)
// (v[2i], v[2i+1]) rotated as above by (c[2i], s[2i]) (c and s hold each
// pair's value twice); n = len(v) is a multiple of 8, ≥ 8. With V the
// pairs and W them swapped, the even lanes are V·c − (W·s) and the odd
// ones W·s + (V·c), W·s and V·c rounded: both computed, then blended.
TEXT ·ropePairsAVX(SB), NOSPLIT, $0-32
	MOVQ v+0(FP), DI
	MOVQ c+8(FP), SI
	MOVQ s+16(FP), DX
	MOVQ n+24(FP), CX

pairsloop:
	VMOVUPS     (DI), Y0            // V = (a0, b0, a1, b1, …)
	VPERMILPS   $0xb1, Y0, Y1       // W = (b0, a0, b1, a1, …)
	VMOVUPS     (SI), Y2            // c
	VMOVUPS     (DX), Y3            // s
	VMULPS      Y3, Y1, Y4          // W·s
	VMULPS      Y2, Y0, Y5          // V·c
	VFMSUB231PS Y2, Y0, Y4          // even: a·c − b·s
	VFMADD231PS Y3, Y1, Y5          // odd: a·s + b·c
	VBLENDPS    $0xaa, Y5, Y4, Y4
	VMOVUPS     Y4, (DI)
	ADDQ        $32, DI
	ADDQ        $32, SI
	ADDQ        $32, DX
	SUBQ        $8, CX
	JNZ         pairsloop
	VZEROUPPER
	RET
