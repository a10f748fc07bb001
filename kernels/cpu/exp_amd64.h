// Vector e^x for the AVX2 kernels, the same method as expf in ops.go
// (Cody-Waite reduction by ln 2, a degree-6 polynomial, 2^n built in the
// exponent bits), eight float32 lanes at a time. Included by every .s file
// that needs it; the table is file-local, so each gets its own copy.
//
// The constants are stored eight times over, 32 bytes each, so an
// instruction can take one straight from memory.

#define EXP_HI 0	// 88: larger x give e^88
#define EXP_LO 32	// -87.33654: smaller x give 0
#define EXP_LOG2E 64	// log2(e)
#define EXP_LN2HI 96	// ln 2, high part
#define EXP_LN2LO 128	// ln 2, low part
#define EXP_C0 160
#define EXP_C1 192
#define EXP_C2 224
#define EXP_C3 256
#define EXP_C4 288
#define EXP_C5 320
#define EXP_ONE 352	// 1
#define EXP_BIAS 384	// 127<<23, the exponent bias in place

DATA expc<>+0(SB)/4, $0x42b00000
DATA expc<>+4(SB)/4, $0x42b00000
DATA expc<>+8(SB)/4, $0x42b00000
DATA expc<>+12(SB)/4, $0x42b00000
DATA expc<>+16(SB)/4, $0x42b00000
DATA expc<>+20(SB)/4, $0x42b00000
DATA expc<>+24(SB)/4, $0x42b00000
DATA expc<>+28(SB)/4, $0x42b00000
DATA expc<>+32(SB)/4, $0xc2aeac4f
DATA expc<>+36(SB)/4, $0xc2aeac4f
DATA expc<>+40(SB)/4, $0xc2aeac4f
DATA expc<>+44(SB)/4, $0xc2aeac4f
DATA expc<>+48(SB)/4, $0xc2aeac4f
DATA expc<>+52(SB)/4, $0xc2aeac4f
DATA expc<>+56(SB)/4, $0xc2aeac4f
DATA expc<>+60(SB)/4, $0xc2aeac4f
DATA expc<>+64(SB)/4, $0x3fb8aa3b
DATA expc<>+68(SB)/4, $0x3fb8aa3b
DATA expc<>+72(SB)/4, $0x3fb8aa3b
DATA expc<>+76(SB)/4, $0x3fb8aa3b
DATA expc<>+80(SB)/4, $0x3fb8aa3b
DATA expc<>+84(SB)/4, $0x3fb8aa3b
DATA expc<>+88(SB)/4, $0x3fb8aa3b
DATA expc<>+92(SB)/4, $0x3fb8aa3b
DATA expc<>+96(SB)/4, $0x3f318000
DATA expc<>+100(SB)/4, $0x3f318000
DATA expc<>+104(SB)/4, $0x3f318000
DATA expc<>+108(SB)/4, $0x3f318000
DATA expc<>+112(SB)/4, $0x3f318000
DATA expc<>+116(SB)/4, $0x3f318000
DATA expc<>+120(SB)/4, $0x3f318000
DATA expc<>+124(SB)/4, $0x3f318000
DATA expc<>+128(SB)/4, $0xb95e8083
DATA expc<>+132(SB)/4, $0xb95e8083
DATA expc<>+136(SB)/4, $0xb95e8083
DATA expc<>+140(SB)/4, $0xb95e8083
DATA expc<>+144(SB)/4, $0xb95e8083
DATA expc<>+148(SB)/4, $0xb95e8083
DATA expc<>+152(SB)/4, $0xb95e8083
DATA expc<>+156(SB)/4, $0xb95e8083
DATA expc<>+160(SB)/4, $0x39506967
DATA expc<>+164(SB)/4, $0x39506967
DATA expc<>+168(SB)/4, $0x39506967
DATA expc<>+172(SB)/4, $0x39506967
DATA expc<>+176(SB)/4, $0x39506967
DATA expc<>+180(SB)/4, $0x39506967
DATA expc<>+184(SB)/4, $0x39506967
DATA expc<>+188(SB)/4, $0x39506967
DATA expc<>+192(SB)/4, $0x3ab743ce
DATA expc<>+196(SB)/4, $0x3ab743ce
DATA expc<>+200(SB)/4, $0x3ab743ce
DATA expc<>+204(SB)/4, $0x3ab743ce
DATA expc<>+208(SB)/4, $0x3ab743ce
DATA expc<>+212(SB)/4, $0x3ab743ce
DATA expc<>+216(SB)/4, $0x3ab743ce
DATA expc<>+220(SB)/4, $0x3ab743ce
DATA expc<>+224(SB)/4, $0x3c088908
DATA expc<>+228(SB)/4, $0x3c088908
DATA expc<>+232(SB)/4, $0x3c088908
DATA expc<>+236(SB)/4, $0x3c088908
DATA expc<>+240(SB)/4, $0x3c088908
DATA expc<>+244(SB)/4, $0x3c088908
DATA expc<>+248(SB)/4, $0x3c088908
DATA expc<>+252(SB)/4, $0x3c088908
DATA expc<>+256(SB)/4, $0x3d2aa9c1
DATA expc<>+260(SB)/4, $0x3d2aa9c1
DATA expc<>+264(SB)/4, $0x3d2aa9c1
DATA expc<>+268(SB)/4, $0x3d2aa9c1
DATA expc<>+272(SB)/4, $0x3d2aa9c1
DATA expc<>+276(SB)/4, $0x3d2aa9c1
DATA expc<>+280(SB)/4, $0x3d2aa9c1
DATA expc<>+284(SB)/4, $0x3d2aa9c1
DATA expc<>+288(SB)/4, $0x3e2aaaaa
DATA expc<>+292(SB)/4, $0x3e2aaaaa
DATA expc<>+296(SB)/4, $0x3e2aaaaa
DATA expc<>+300(SB)/4, $0x3e2aaaaa
DATA expc<>+304(SB)/4, $0x3e2aaaaa
DATA expc<>+308(SB)/4, $0x3e2aaaaa
DATA expc<>+312(SB)/4, $0x3e2aaaaa
DATA expc<>+316(SB)/4, $0x3e2aaaaa
DATA expc<>+320(SB)/4, $0x3f000000
DATA expc<>+324(SB)/4, $0x3f000000
DATA expc<>+328(SB)/4, $0x3f000000
DATA expc<>+332(SB)/4, $0x3f000000
DATA expc<>+336(SB)/4, $0x3f000000
DATA expc<>+340(SB)/4, $0x3f000000
DATA expc<>+344(SB)/4, $0x3f000000
DATA expc<>+348(SB)/4, $0x3f000000
DATA expc<>+352(SB)/4, $0x3f800000
DATA expc<>+356(SB)/4, $0x3f800000
DATA expc<>+360(SB)/4, $0x3f800000
DATA expc<>+364(SB)/4, $0x3f800000
DATA expc<>+368(SB)/4, $0x3f800000
DATA expc<>+372(SB)/4, $0x3f800000
DATA expc<>+376(SB)/4, $0x3f800000
DATA expc<>+380(SB)/4, $0x3f800000
DATA expc<>+384(SB)/4, $0x3f800000
DATA expc<>+388(SB)/4, $0x3f800000
DATA expc<>+392(SB)/4, $0x3f800000
DATA expc<>+396(SB)/4, $0x3f800000
DATA expc<>+400(SB)/4, $0x3f800000
DATA expc<>+404(SB)/4, $0x3f800000
DATA expc<>+408(SB)/4, $0x3f800000
DATA expc<>+412(SB)/4, $0x3f800000
GLOBL expc<>(SB), RODATA|NOPTR, $416

// EXPPS sets X = e^X in eight lanes; T1-T3 are scratch. NaN stays NaN,
// x above 88 gives e^88 (the exponent would overflow) and x below
// -87.33654 gives 0, as in expf.
#define EXPPS(X, T1, T2, T3) \
	VMOVUPS      expc<>+EXP_HI(SB), T1 \
	VMINPS       X, T1, X \
	VCMPPS       $1, expc<>+EXP_LO(SB), X, T3 \
	VMULPS       expc<>+EXP_LOG2E(SB), X, T1 \
	VROUNDPS     $0, T1, T1 \
	VFNMADD231PS expc<>+EXP_LN2HI(SB), T1, X \
	VFNMADD231PS expc<>+EXP_LN2LO(SB), T1, X \
	VMOVUPS      expc<>+EXP_C0(SB), T2 \
	VFMADD213PS  expc<>+EXP_C1(SB), X, T2 \
	VFMADD213PS  expc<>+EXP_C2(SB), X, T2 \
	VFMADD213PS  expc<>+EXP_C3(SB), X, T2 \
	VFMADD213PS  expc<>+EXP_C4(SB), X, T2 \
	VFMADD213PS  expc<>+EXP_C5(SB), X, T2 \
	VMULPS       X, T2, T2 \
	VFMADD213PS  X, X, T2 \
	VADDPS       expc<>+EXP_ONE(SB), T2, T2 \
	VCVTPS2DQ    T1, T1 \
	VPSLLD       $23, T1, T1 \
	VPADDD       expc<>+EXP_BIAS(SB), T1, T1 \
	VMULPS       T1, T2, X \
	VANDNPS      X, T3, X

// EXPPS2 is EXPPS of X (scratch T1-T3) and of U (scratch V1-V3), the two
// streams' instructions interleaved: each is a chain of about twenty
// dependent steps, so one alone leaves most of the vector units idle, and
// the out-of-order window holds too few such chains to fill them. Each
// lane's operations are EXPPS's, so the results are the same bits.
#define EXPPS2(X, T1, T2, T3, U, V1, V2, V3) \
	VMOVUPS      expc<>+EXP_HI(SB), T1 \
	VMOVUPS      expc<>+EXP_HI(SB), V1 \
	VMINPS       X, T1, X \
	VMINPS       U, V1, U \
	VCMPPS       $1, expc<>+EXP_LO(SB), X, T3 \
	VCMPPS       $1, expc<>+EXP_LO(SB), U, V3 \
	VMULPS       expc<>+EXP_LOG2E(SB), X, T1 \
	VMULPS       expc<>+EXP_LOG2E(SB), U, V1 \
	VROUNDPS     $0, T1, T1 \
	VROUNDPS     $0, V1, V1 \
	VFNMADD231PS expc<>+EXP_LN2HI(SB), T1, X \
	VFNMADD231PS expc<>+EXP_LN2HI(SB), V1, U \
	VFNMADD231PS expc<>+EXP_LN2LO(SB), T1, X \
	VFNMADD231PS expc<>+EXP_LN2LO(SB), V1, U \
	VMOVUPS      expc<>+EXP_C0(SB), T2 \
	VMOVUPS      expc<>+EXP_C0(SB), V2 \
	VFMADD213PS  expc<>+EXP_C1(SB), X, T2 \
	VFMADD213PS  expc<>+EXP_C1(SB), U, V2 \
	VFMADD213PS  expc<>+EXP_C2(SB), X, T2 \
	VFMADD213PS  expc<>+EXP_C2(SB), U, V2 \
	VFMADD213PS  expc<>+EXP_C3(SB), X, T2 \
	VFMADD213PS  expc<>+EXP_C3(SB), U, V2 \
	VFMADD213PS  expc<>+EXP_C4(SB), X, T2 \
	VFMADD213PS  expc<>+EXP_C4(SB), U, V2 \
	VFMADD213PS  expc<>+EXP_C5(SB), X, T2 \
	VFMADD213PS  expc<>+EXP_C5(SB), U, V2 \
	VMULPS       X, T2, T2 \
	VMULPS       U, V2, V2 \
	VFMADD213PS  X, X, T2 \
	VFMADD213PS  U, U, V2 \
	VADDPS       expc<>+EXP_ONE(SB), T2, T2 \
	VADDPS       expc<>+EXP_ONE(SB), V2, V2 \
	VCVTPS2DQ    T1, T1 \
	VCVTPS2DQ    V1, V1 \
	VPSLLD       $23, T1, T1 \
	VPSLLD       $23, V1, V1 \
	VPADDD       expc<>+EXP_BIAS(SB), T1, T1 \
	VPADDD       expc<>+EXP_BIAS(SB), V1, V1 \
	VMULPS       T1, T2, X \
	VMULPS       V1, V2, U \
	VANDNPS      X, T3, X \
	VANDNPS      U, V3, U


// EXPPS4 is EXPPS2 for four streams: X (T1-T3), U (V1-V3), W (S1-S3) and
// Z (R1-R3).
#define EXPPS4(X, T1, T2, T3, U, V1, V2, V3, W, S1, S2, S3, Z, R1, R2, R3) \
	VMOVUPS      expc<>+EXP_HI(SB), T1 \
	VMOVUPS      expc<>+EXP_HI(SB), V1 \
	VMOVUPS      expc<>+EXP_HI(SB), S1 \
	VMOVUPS      expc<>+EXP_HI(SB), R1 \
	VMINPS       X, T1, X \
	VMINPS       U, V1, U \
	VMINPS       W, S1, W \
	VMINPS       Z, R1, Z \
	VCMPPS       $1, expc<>+EXP_LO(SB), X, T3 \
	VCMPPS       $1, expc<>+EXP_LO(SB), U, V3 \
	VCMPPS       $1, expc<>+EXP_LO(SB), W, S3 \
	VCMPPS       $1, expc<>+EXP_LO(SB), Z, R3 \
	VMULPS       expc<>+EXP_LOG2E(SB), X, T1 \
	VMULPS       expc<>+EXP_LOG2E(SB), U, V1 \
	VMULPS       expc<>+EXP_LOG2E(SB), W, S1 \
	VMULPS       expc<>+EXP_LOG2E(SB), Z, R1 \
	VROUNDPS     $0, T1, T1 \
	VROUNDPS     $0, V1, V1 \
	VROUNDPS     $0, S1, S1 \
	VROUNDPS     $0, R1, R1 \
	VFNMADD231PS expc<>+EXP_LN2HI(SB), T1, X \
	VFNMADD231PS expc<>+EXP_LN2HI(SB), V1, U \
	VFNMADD231PS expc<>+EXP_LN2HI(SB), S1, W \
	VFNMADD231PS expc<>+EXP_LN2HI(SB), R1, Z \
	VFNMADD231PS expc<>+EXP_LN2LO(SB), T1, X \
	VFNMADD231PS expc<>+EXP_LN2LO(SB), V1, U \
	VFNMADD231PS expc<>+EXP_LN2LO(SB), S1, W \
	VFNMADD231PS expc<>+EXP_LN2LO(SB), R1, Z \
	VMOVUPS      expc<>+EXP_C0(SB), T2 \
	VMOVUPS      expc<>+EXP_C0(SB), V2 \
	VMOVUPS      expc<>+EXP_C0(SB), S2 \
	VMOVUPS      expc<>+EXP_C0(SB), R2 \
	VFMADD213PS  expc<>+EXP_C1(SB), X, T2 \
	VFMADD213PS  expc<>+EXP_C1(SB), U, V2 \
	VFMADD213PS  expc<>+EXP_C1(SB), W, S2 \
	VFMADD213PS  expc<>+EXP_C1(SB), Z, R2 \
	VFMADD213PS  expc<>+EXP_C2(SB), X, T2 \
	VFMADD213PS  expc<>+EXP_C2(SB), U, V2 \
	VFMADD213PS  expc<>+EXP_C2(SB), W, S2 \
	VFMADD213PS  expc<>+EXP_C2(SB), Z, R2 \
	VFMADD213PS  expc<>+EXP_C3(SB), X, T2 \
	VFMADD213PS  expc<>+EXP_C3(SB), U, V2 \
	VFMADD213PS  expc<>+EXP_C3(SB), W, S2 \
	VFMADD213PS  expc<>+EXP_C3(SB), Z, R2 \
	VFMADD213PS  expc<>+EXP_C4(SB), X, T2 \
	VFMADD213PS  expc<>+EXP_C4(SB), U, V2 \
	VFMADD213PS  expc<>+EXP_C4(SB), W, S2 \
	VFMADD213PS  expc<>+EXP_C4(SB), Z, R2 \
	VFMADD213PS  expc<>+EXP_C5(SB), X, T2 \
	VFMADD213PS  expc<>+EXP_C5(SB), U, V2 \
	VFMADD213PS  expc<>+EXP_C5(SB), W, S2 \
	VFMADD213PS  expc<>+EXP_C5(SB), Z, R2 \
	VMULPS       X, T2, T2 \
	VMULPS       U, V2, V2 \
	VMULPS       W, S2, S2 \
	VMULPS       Z, R2, R2 \
	VFMADD213PS  X, X, T2 \
	VFMADD213PS  U, U, V2 \
	VFMADD213PS  W, W, S2 \
	VFMADD213PS  Z, Z, R2 \
	VADDPS       expc<>+EXP_ONE(SB), T2, T2 \
	VADDPS       expc<>+EXP_ONE(SB), V2, V2 \
	VADDPS       expc<>+EXP_ONE(SB), S2, S2 \
	VADDPS       expc<>+EXP_ONE(SB), R2, R2 \
	VCVTPS2DQ    T1, T1 \
	VCVTPS2DQ    V1, V1 \
	VCVTPS2DQ    S1, S1 \
	VCVTPS2DQ    R1, R1 \
	VPSLLD       $23, T1, T1 \
	VPSLLD       $23, V1, V1 \
	VPSLLD       $23, S1, S1 \
	VPSLLD       $23, R1, R1 \
	VPADDD       expc<>+EXP_BIAS(SB), T1, T1 \
	VPADDD       expc<>+EXP_BIAS(SB), V1, V1 \
	VPADDD       expc<>+EXP_BIAS(SB), S1, S1 \
	VPADDD       expc<>+EXP_BIAS(SB), R1, R1 \
	VMULPS       T1, T2, X \
	VMULPS       V1, V2, U \
	VMULPS       S1, S2, W \
	VMULPS       R1, R2, Z \
	VANDNPS      X, T3, X \
	VANDNPS      U, V3, U \
	VANDNPS      W, S3, W \
	VANDNPS      Z, R3, Z
