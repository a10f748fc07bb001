// The steps every K-quant rows kernel shares (kquant_amd64.s,
// kquant_q2k_amd64.s, kquant_q3k_amd64.s): per weight row its setup and
// store, and per super-block the exact integer sum and the scale product
// that the Go references' float steps start from.

// KSETUP loads the activation row's pointers for one weight row: DI the
// int8 values, DX the scales, CX the sums per 16, AX the super-block count;
// SI the weight row. X12 is the row's sum.
#define KSETUP \
	MOVQ R8, SI \
	MOVQ xq+16(FP), DI \
	MOVQ xd+24(FP), DX \
	MOVQ bs+32(FP), CX \
	MOVQ nb+40(FP), AX \
	VXORPS X12, X12, X12

// KSTORE stores the row's sum at R14 and moves on to the next weight row.
#define KSTORE \
	VMOVSS  X12, (R14) \
	ADDQ    $4, R14 \
	ADDQ    rb+8(FP), R8 \
	DECQ    BX

// F16SCALE sets x to the activation scale at (DX) times the F16 value at
// mem; R9 is clobbered.
#define F16SCALE(mem, x) \
	MOVWLZX mem, R9 \
	VMOVD   R9, x \
	VCVTPH2PS x, x \
	VMULSS  (DX), x, x

// HSUMI sets the low float of x to the exact sum of y's eight int32 lanes
// (x is y's low half); t is clobbered.
#define HSUMI(y, x, t) \
	VEXTRACTI128 $1, y, t \
	VPADDD  t, x, x \
	VPSHUFD $0x4e, x, t \
	VPADDD  t, x, x \
	VPSHUFD $0xb1, x, t \
	VPADDD  t, x, x \
	VCVTDQ2PS x, x
