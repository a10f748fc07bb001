// kernels.cu holds the device code of the CUDA backend: every op of
// kernels.Backend plus the optional ones (tree attention, slot copies,
// masked logits, device sampling). It is compiled to PTX (make ptx), which
// the Go package embeds and loads with the driver API at run time.
//
// Conventions shared with the Go side (kernels/cuda/*.go):
//
//   - Every kernel is extern "C" so its PTX name is its C name.
//   - Every kernel parameter is 8 bytes wide or narrower and is passed in an
//     8-byte slot, little-endian: int and float parameters read the low half
//     of their slot. Pointers are device addresses.
//   - Activations are F32, row-major, rows contiguous.
//   - Weights keep their stored type. F32, F16 and BF16 are row-major
//     values. Q8_0 and Q4_0 are repacked at upload into two arrays so that
//     the quantized values are aligned: qs (Q8_0: int8 [rows][cols]; Q4_0:
//     uint8 [rows][cols/2], block b's 16 bytes at b*16 in GGML's nibble
//     order) and d (half [rows][cols/32], the block scales).
//   - A KV cache is one allocation: section (layer, kind) with kind 0 = K,
//     1 = V holds Blocks*BlockSize slots of Width floats; slot s of section
//     i starts at (i*Blocks*BlockSize + s)*Width.

#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <stdint.h>

#define DT_F32 0
#define DT_F16 1
#define DT_Q4_0 2
#define DT_Q8_0 8
#define DT_BF16 30

#define QK 32
#define NEG_INF (-__int_as_float(0x7f800000))

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

__device__ __forceinline__ float bf16_to_f32(uint16_t h) {
    return __uint_as_float(((uint32_t)h) << 16);
}

__device__ __forceinline__ float f16_to_f32(uint16_t h) {
    return __half2float(__ushort_as_half(h));
}

// weight_at returns element (r, c) of a weight matrix of cols columns.
__device__ __forceinline__ float weight_at(const void *data, const uint16_t *d, int dt,
                                           long long r, int cols, int c) {
    switch (dt) {
    case DT_F32:
        return ((const float *)data)[r * cols + c];
    case DT_F16:
        return f16_to_f32(((const uint16_t *)data)[r * cols + c]);
    case DT_BF16:
        return bf16_to_f32(((const uint16_t *)data)[r * cols + c]);
    case DT_Q8_0: {
        float s = f16_to_f32(d[r * (cols / QK) + c / QK]);
        return s * (float)((const int8_t *)data)[r * cols + c];
    }
    case DT_Q4_0: {
        float s = f16_to_f32(d[r * (cols / QK) + c / QK]);
        int j = c % QK;
        uint8_t b = ((const uint8_t *)data)[r * (cols / 2) + (c / QK) * 16 + (j & 15)];
        int q = j < 16 ? (b & 15) : (b >> 4);
        return s * (float)(q - 8);
    }
    }
    return 0.0f;
}

// ---------------------------------------------------------------------------
// Embedding gather and small row ops.

// gather: dst[i][c] = w[idx[i]][c] as F32. Grid (x: column chunks, y: i).
extern "C" __global__ void gather(float *dst, const void *data, const uint16_t *d, int dt,
                                  const int *idx, int cols) {
    int i = blockIdx.y;
    long long r = idx[i];
    for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < cols; c += gridDim.x * blockDim.x)
        dst[(long long)i * cols + c] = weight_at(data, d, dt, r, cols, c);
}

// rmsnorm: dst[r] = x[r] / sqrt(mean(x[r]^2) + eps) * w. One block per row;
// dst may be x.
extern "C" __global__ void rmsnorm(float *dst, const float *x, const float *w, int cols, float eps) {
    __shared__ float part[32];
    const float *xr = x + (long long)blockIdx.x * cols;
    float *dr = dst + (long long)blockIdx.x * cols;
    float ss = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) ss += xr[c] * xr[c];
    ss = warp_sum(ss);
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (lane == 0) part[warp] = ss;
    __syncthreads();
    if (warp == 0) {
        ss = lane < (int)(blockDim.x >> 5) ? part[lane] : 0.0f;
        ss = warp_sum(ss);
        if (lane == 0) part[0] = ss;
    }
    __syncthreads();
    float s = 1.0f / sqrtf(part[0] / (float)cols + eps);
    for (int c = threadIdx.x; c < cols; c += blockDim.x) dr[c] = xr[c] * s * w[c];
}

// add: dst = a + b over n elements.
extern "C" __global__ void add(float *dst, const float *a, const float *b, long long n) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x)
        dst[i] = a[i] + b[i];
}

// add_bias: x[r][c] += bias[c] over n = rows*cols elements.
extern "C" __global__ void add_bias(float *x, const float *bias, long long n, int cols) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x)
        x[i] += bias[i % cols];
}

// swiglu: dst = gate / (1 + e^-gate) * up.
extern "C" __global__ void swiglu(float *dst, const float *gate, const float *up, long long n) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        float g = gate[i];
        dst[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

// rope rotates every head of row blockIdx.y of x in place. inv holds the
// dims/2 per-pair inverse frequencies in double; the angle is formed and
// reduced in double so long positions keep their precision.
extern "C" __global__ void rope(float *x, const int *pos, const double *inv, int cols, int head_dim,
                                int dims, int neox, double scale) {
    int r = blockIdx.y;
    int half = dims / 2;
    int heads = cols / head_dim;
    float *xr = x + (long long)r * cols;
    double p = (double)pos[r] / scale;
    for (int t = blockIdx.x * blockDim.x + threadIdx.x; t < heads * half; t += gridDim.x * blockDim.x) {
        int h = t / half, i = t % half;
        double sd, cd;
        sincos(p * inv[i], &sd, &cd);
        float s = (float)sd, c = (float)cd;
        float *v = xr + h * head_dim;
        int ia = neox ? i : 2 * i, ib = neox ? i + half : 2 * i + 1;
        float a = v[ia], b = v[ib];
        v[ia] = a * c - b * s;
        v[ib] = a * s + b * c;
    }
}

// ---------------------------------------------------------------------------
// MatMul: dst[n][o] = sum_k x[n][k] * w[o][k]; dst is N x M (row stride M).

// mm_generic handles any weight type and any K: one warp per (output row,
// group of 4 x rows). Grid (x: ceil(M/8), y: ceil(N/4)), 256 threads.
extern "C" __global__ void mm_generic(float *dst, const float *x, const void *w, const uint16_t *wd,
                                      int dt, int M, int K, int N) {
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int o = blockIdx.x * 8 + warp;
    int n0 = blockIdx.y * 4;
    if (o >= M) return;
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int k = lane; k < K; k += 32) {
        float wv = weight_at(w, wd, dt, o, K, k);
#pragma unroll
        for (int j = 0; j < 4; j++)
            if (n0 + j < N) acc[j] += wv * x[(long long)(n0 + j) * K + k];
    }
#pragma unroll
    for (int j = 0; j < 4; j++) {
        float s = warp_sum(acc[j]);
        if (lane == 0 && n0 + j < N) dst[(long long)(n0 + j) * M + o] = s;
    }
}

// split_half writes x (N x K) as a sum of two half-precision matrices,
// hi = round(x) and lo = round(x - hi), in F16 (bf == 0) or BF16 (bf == 1).
// Multiplying both by a half-precision weight on tensor cores gives the
// product of the F32 activations to about 2^-16 (BF16) or 2^-22 (F16).
extern "C" __global__ void split_half(uint16_t *hi, uint16_t *lo, const float *x, long long n, int bf) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        float v = x[i];
        if (bf) {
            __nv_bfloat16 h = __float2bfloat16_rn(v);
            __nv_bfloat16 l = __float2bfloat16_rn(v - __bfloat162float(h));
            hi[i] = __bfloat16_as_ushort(h);
            lo[i] = __bfloat16_as_ushort(l);
        } else {
            __half h = __float2half_rn(v);
            __half l = __float2half_rn(v - __half2float(h));
            hi[i] = __half_as_ushort(h);
            lo[i] = __half_as_ushort(l);
        }
    }
}

template <bool BF>
__device__ __forceinline__ void mma16816(float *c, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint32_t b0, uint32_t b1) {
    if (BF) {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                     "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    } else {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                     "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    }
}

__device__ __forceinline__ uint4 ldg16(const uint16_t *p) {
    return __ldg((const uint4 *)p);
}

// mm_half: tensor-core matmul for F16/BF16 weights (K % 32 == 0). A block
// of 8 warps computes 16 output rows (blockIdx.x) for 8*NT x rows
// (blockIdx.y); the warps split K in chunks of 32 and their partial sums
// meet in shared memory. Each lane loads 8 consecutive halves of a weight
// row and of an x row per chunk (16-byte loads); since a dot product does
// not care about the order of k, the same permutation of k within the
// chunk is fed to both mma operands. x comes split in hi + lo halves.
template <bool BF, int NT>
__device__ void mm_half(float *dst, const uint16_t *w, const uint16_t *xh, const uint16_t *xl, int M, int K,
                        int N) {
    __shared__ float red[8][NT * 4][32];
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int g = lane >> 2, tig = lane & 3;
    int row0 = blockIdx.x * 16;
    int n0 = blockIdx.y * 8 * NT;
    int ra = min(row0 + g, M - 1), rb = min(row0 + g + 8, M - 1);
    const uint16_t *wa = w + (long long)ra * K + tig * 8;
    const uint16_t *wb = w + (long long)rb * K + tig * 8;
    float acc[NT][4];
#pragma unroll
    for (int t = 0; t < NT; t++) acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = 0.0f;
    const uint4 zero = make_uint4(0, 0, 0, 0);
    int chunks = K / 32;
    for (int c = warp; c < chunks; c += 8) {
        int k0 = c * 32;
        uint4 a = ldg16(wa + k0), b = ldg16(wb + k0);
#pragma unroll
        for (int t = 0; t < NT; t++) {
            int n = n0 + t * 8 + g;
            uint4 h = zero, l = zero;
            if (n < N) {
                h = ldg16(xh + (long long)n * K + k0 + tig * 8);
                l = ldg16(xl + (long long)n * K + k0 + tig * 8);
            }
            mma16816<BF>(acc[t], a.x, b.x, a.y, b.y, h.x, h.y);
            mma16816<BF>(acc[t], a.z, b.z, a.w, b.w, h.z, h.w);
            mma16816<BF>(acc[t], a.x, b.x, a.y, b.y, l.x, l.y);
            mma16816<BF>(acc[t], a.z, b.z, a.w, b.w, l.z, l.w);
        }
    }
#pragma unroll
    for (int t = 0; t < NT; t++)
#pragma unroll
        for (int e = 0; e < 4; e++) red[warp][t * 4 + e][lane] = acc[t][e];
    __syncthreads();
    for (int i = threadIdx.x; i < NT * 4 * 32; i += blockDim.x) {
        int te = i >> 5, ln = i & 31;
        float s = 0.0f;
#pragma unroll
        for (int wp = 0; wp < 8; wp++) s += red[wp][te][ln];
        int t = te >> 2, e = te & 3;
        int row = row0 + (ln >> 2) + (e >= 2 ? 8 : 0);
        int n = n0 + t * 8 + 2 * (ln & 3) + (e & 1);
        if (row < M && n < N) dst[(long long)n * M + row] = s;
    }
}

#define MM_HALF(name, BF, NT)                                                                          \
    extern "C" __global__ void __launch_bounds__(256)                                                  \
        name(float *dst, const uint16_t *w, const uint16_t *xh, const uint16_t *xl, int M, int K, int N) { \
        mm_half<BF, NT>(dst, w, xh, xl, M, K, N);                                                      \
    }
MM_HALF(mm_f16_n8, false, 1)
MM_HALF(mm_f16_n16, false, 2)
MM_HALF(mm_f16_n32, false, 4)
MM_HALF(mm_bf16_n8, true, 1)
MM_HALF(mm_bf16_n16, true, 2)
MM_HALF(mm_bf16_n32, true, 4)

// quant_q8 quantizes x (N x K) to Q8_0 as llama.cpp does for quantized
// matmuls: per 32 values, d = max|x|/127, q = round-to-even(x/d). One warp
// per block of 32; grid covers N*K/32 warps of 8 per block.
extern "C" __global__ void quant_q8(int8_t *xq, float *xd, const float *x, long long nblocks) {
    long long b = (long long)blockIdx.x * 8 + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (b >= nblocks) return;
    float v = x[b * QK + lane];
    float amax = warp_max(fabsf(v));
    float d = amax / 127.0f;
    float id = d != 0.0f ? 1.0f / d : 0.0f;
    xq[b * QK + lane] = (int8_t)__float2int_rn(v * id);
    if (lane == 0) xd[b] = d;
}

// mm_q: integer matmul for Q8_0 / Q4_0 weights against x quantized by
// quant_q8. A block of 8 warps computes 4 output rows (blockIdx.x) for NX x
// rows (blockIdx.y); each lane takes a quarter (8 values) of a 32-value
// block, 8 blocks per warp step, and the warps split K.
template <bool Q4, int NX>
__device__ void mm_q(float *dst, const uint8_t *wq, const uint16_t *wd, const int8_t *xq, const float *xd,
                     int M, int K, int N) {
    const int R = 4;
    __shared__ float red[8][R * NX];
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int q = lane & 3;
    int row0 = blockIdx.x * R, n0 = blockIdx.y * NX;
    int kb = K / QK;
    float acc[R][NX];
#pragma unroll
    for (int i = 0; i < R; i++)
#pragma unroll
        for (int j = 0; j < NX; j++) acc[i][j] = 0.0f;
    for (int b = warp * 8 + (lane >> 2); b < kb; b += 64) {
        int x0[NX], x1[NX];
        float xs[NX];
#pragma unroll
        for (int j = 0; j < NX; j++) {
            int n = min(n0 + j, N - 1);
            const int8_t *xp = xq + (long long)n * K + b * QK;
            if (Q4) {
                x0[j] = *(const int *)(xp + 4 * q);
                x1[j] = *(const int *)(xp + 16 + 4 * q);
            } else {
                int2 v = *(const int2 *)(xp + 8 * q);
                x0[j] = v.x;
                x1[j] = v.y;
            }
            xs[j] = xd[(long long)n * kb + b];
        }
#pragma unroll
        for (int i = 0; i < R; i++) {
            int row = min(row0 + i, M - 1);
            float ws = f16_to_f32(wd[(long long)row * kb + b]);
            int w0, w1;
            if (Q4) {
                int v = __ldg((const int *)(wq + (long long)row * (K / 2) + b * 16 + 4 * q));
                w0 = v & 0x0f0f0f0f;
                w1 = (v >> 4) & 0x0f0f0f0f;
            } else {
                int2 v = __ldg((const int2 *)(wq + (long long)row * K + b * QK + 8 * q));
                w0 = v.x;
                w1 = v.y;
            }
#pragma unroll
            for (int j = 0; j < NX; j++) {
                int s = __dp4a(w0, x0[j], __dp4a(w1, x1[j], 0));
                if (Q4) s -= 8 * __dp4a(0x01010101, x0[j], __dp4a(0x01010101, x1[j], 0));
                acc[i][j] += ws * xs[j] * (float)s;
            }
        }
    }
#pragma unroll
    for (int i = 0; i < R; i++)
#pragma unroll
        for (int j = 0; j < NX; j++) {
            float s = warp_sum(acc[i][j]);
            if (lane == 0) red[warp][i * NX + j] = s;
        }
    __syncthreads();
    if (threadIdx.x < R * NX) {
        int i = threadIdx.x / NX, j = threadIdx.x % NX;
        float s = 0.0f;
#pragma unroll
        for (int wp = 0; wp < 8; wp++) s += red[wp][threadIdx.x];
        int row = row0 + i, n = n0 + j;
        if (row < M && n < N) dst[(long long)n * M + row] = s;
    }
}

#define MM_Q(name, Q4, NX)                                                                            \
    extern "C" __global__ void __launch_bounds__(256) name(float *dst, const uint8_t *wq, const uint16_t *wd, \
                                                           const int8_t *xq, const float *xd, int M, int K,   \
                                                           int N) {                                           \
        mm_q<Q4, NX>(dst, wq, wd, xq, xd, M, K, N);                                                   \
    }
MM_Q(mm_q8_n1, false, 1)
MM_Q(mm_q8_n2, false, 2)
MM_Q(mm_q8_n4, false, 4)
MM_Q(mm_q8_n8, false, 8)
MM_Q(mm_q4_n1, true, 1)
MM_Q(mm_q4_n2, true, 2)
MM_Q(mm_q4_n4, true, 4)
MM_Q(mm_q4_n8, true, 8)

// ---------------------------------------------------------------------------
// KV cache.

// store_kv writes row r of k and v into slot slots[r] of one layer's K and
// V sections; a negative slot skips the row. Grid: rows.
extern "C" __global__ void store_kv(float *K, float *V, const float *k, const float *v, const int *slots,
                                    int width) {
    int r = blockIdx.x;
    long long s = slots[r];
    if (s < 0) return;
    for (int c = threadIdx.x; c < width; c += blockDim.x) {
        K[s * width + c] = k[(long long)r * width + c];
        V[s * width + c] = v[(long long)r * width + c];
    }
}

// copy_units copies units of unit floats between two caches of the same
// layout (or within one): for every section (blockIdx.x: layer*2 + kind)
// and every move, in order, unit moves[2i] of src to unit moves[2i+1] of
// dst. Moves run in order, so a move may read what an earlier one wrote.
// A unit is a block (CopyBlocks) or a slot (CopySlots).
extern "C" __global__ void copy_units(float *dst, long long dst_section, const float *src,
                                      long long src_section, long long unit, const int *moves, int nmoves) {
    float *d = dst + blockIdx.x * dst_section;
    const float *s = src + blockIdx.x * src_section;
    for (int m = 0; m < nmoves; m++) {
        const float *from = s + (long long)moves[2 * m] * unit;
        float *to = d + (long long)moves[2 * m + 1] * unit;
        for (long long i = threadIdx.x; i < unit; i += blockDim.x) to[i] = from[i];
        __syncthreads();
    }
}

// ---------------------------------------------------------------------------
// Attention: flash-decoding over a paged cache.
//
// Each query row r sees P = prefix[r] positions of its block table (table
// entries tab_off[r] ..) and then T = slot_off[r+1] - slot_off[r] explicit
// slots (tree attention; T = 0 for plain attention). The work item (row,
// head, split) is one warp: splits 0 .. ceil(P/chunk)-1 cover the prefix,
// the following ones the explicit slots, so the prefix and the tree part
// are separate partial softmaxes merged by log-sum-exp in attn_merge. A
// warp keeps the running max m, the sum l and the unnormalised output of
// its split (online softmax); lane holds dims lane + 32e of the head.
// When nsplit == 1 the warp normalises and writes dst directly.

struct AttnArgs {
    float *dst;
    const float *q;
    const float *K, *V;
    const int *table, *tab_off, *prefix, *slots, *slot_off;
    float *po, *pm, *pl;
    int rows, heads, kv_heads, head_dim, width, block_size, chunk, nsplit;
    float scale;
};

template <int E>
__device__ void attn_partial(const AttnArgs a) {
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    long long item = (long long)blockIdx.x * (blockDim.x >> 5) + warp;
    if (item >= (long long)a.rows * a.heads * a.nsplit) return;
    int split = item % a.nsplit;
    int h = (item / a.nsplit) % a.heads;
    int r = item / ((long long)a.nsplit * a.heads);
    int hd = a.head_dim, qw = a.heads * hd;
    int koff = (h / (a.heads / a.kv_heads)) * hd;
    int P = a.prefix[r];
    int so = a.slot_off[r], T = a.slot_off[r + 1] - so;
    const int *tab = a.table + a.tab_off[r];
    int nsp = (P + a.chunk - 1) / a.chunk;
    int lo, hi;
    bool tree;
    if (split < nsp) {
        tree = false;
        lo = split * a.chunk;
        hi = min(P, lo + a.chunk);
    } else {
        tree = true;
        lo = (split - nsp) * a.chunk;
        hi = min(T, lo + a.chunk);
    }
    float qv[E], acc[E];
    const float *qr = a.q + (long long)r * qw + h * hd;
#pragma unroll
    for (int e = 0; e < E; e++) {
        int d = lane + 32 * e;
        qv[e] = d < hd ? qr[d] * a.scale : 0.0f;
        acc[e] = 0.0f;
    }
    float m = NEG_INF, l = 0.0f;
    for (int p0 = lo; p0 < hi; p0 += 4) {
        float sc[4];
        long long base[4];
#pragma unroll
        for (int u = 0; u < 4; u++) {
            int p = p0 + u;
            sc[u] = 0.0f;
            base[u] = -1;
            if (p < hi) {
                long long slot = tree ? (long long)a.slots[so + p]
                                      : (long long)tab[p / a.block_size] * a.block_size + p % a.block_size;
                base[u] = slot * a.width + koff;
                const float *kr = a.K + base[u];
#pragma unroll
                for (int e = 0; e < E; e++) {
                    int d = lane + 32 * e;
                    if (d < hd) sc[u] += qv[e] * kr[d];
                }
            }
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1)
#pragma unroll
            for (int u = 0; u < 4; u++) sc[u] += __shfl_xor_sync(0xffffffffu, sc[u], o);
#pragma unroll
        for (int u = 0; u < 4; u++) {
            if (base[u] < 0) continue;
            float mn = fmaxf(m, sc[u]);
            float corr = expf(m - mn), pe = expf(sc[u] - mn);
            l = l * corr + pe;
            const float *vr = a.V + base[u];
#pragma unroll
            for (int e = 0; e < E; e++) {
                int d = lane + 32 * e;
                acc[e] = acc[e] * corr + (d < hd ? pe * vr[d] : 0.0f);
            }
            m = mn;
        }
    }
    if (a.nsplit == 1) {
        float inv = l > 0.0f ? 1.0f / l : 0.0f;
        float *out = a.dst + (long long)r * qw + h * hd;
#pragma unroll
        for (int e = 0; e < E; e++) {
            int d = lane + 32 * e;
            if (d < hd) out[d] = acc[e] * inv;
        }
        return;
    }
    float *po = a.po + item * hd;
#pragma unroll
    for (int e = 0; e < E; e++) {
        int d = lane + 32 * e;
        if (d < hd) po[d] = acc[e];
    }
    if (lane == 0) {
        a.pm[item] = m;
        a.pl[item] = l;
    }
}

#define ATTN(name, E) \
    extern "C" __global__ void __launch_bounds__(128) name(const AttnArgs a) { attn_partial<E>(a); }
ATTN(attn_e1, 1)
ATTN(attn_e2, 2)
ATTN(attn_e4, 4)
ATTN(attn_e8, 8)

// attn_merge combines the nsplit partial softmaxes of each (row, head) by
// their log-sum-exp: out = sum_s po_s e^(m_s - M) / sum_s l_s e^(m_s - M).
// One warp per (row, head); a (row, head) that saw nothing gets zeros.
extern "C" __global__ void attn_merge(const AttnArgs a) {
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    long long rh = (long long)blockIdx.x * (blockDim.x >> 5) + warp;
    if (rh >= (long long)a.rows * a.heads) return;
    int hd = a.head_dim;
    long long first = rh * a.nsplit;
    float M = NEG_INF;
    for (int s = 0; s < a.nsplit; s++)
        if (a.pl[first + s] > 0.0f) M = fmaxf(M, a.pm[first + s]);
    float L = 0.0f;
    for (int s = 0; s < a.nsplit; s++)
        if (a.pl[first + s] > 0.0f) L += a.pl[first + s] * expf(a.pm[first + s] - M);
    float inv = L > 0.0f ? 1.0f / L : 0.0f;
    int r = rh / a.heads, h = rh % a.heads;
    float *out = a.dst + (long long)r * a.heads * hd + h * hd;
    for (int d = lane; d < hd; d += 32) {
        float o = 0.0f;
        for (int s = 0; s < a.nsplit; s++)
            if (a.pl[first + s] > 0.0f) o += a.po[(first + s) * hd + d] * expf(a.pm[first + s] - M);
        out[d] = o * inv;
    }
}

// ---------------------------------------------------------------------------
// Guided decoding and sampling on the device.

// mask_logits sets logits[rows[i]][j] = -Inf for every token j whose bit is
// clear in row i's mask (words mask_off[i] .. mask_off[i+1]-1; bits past
// the mask are clear). Grid (x: column chunks, y: i).
extern "C" __global__ void mask_logits(float *logits, int cols, const int *rows, const int *mask_off,
                                       const unsigned long long *words) {
    int i = blockIdx.y;
    int off = mask_off[i], nw = mask_off[i + 1] - off;
    float *row = logits + (long long)rows[i] * cols;
    for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < cols; j += gridDim.x * blockDim.x) {
        int w = j >> 6;
        bool ok = w < nw && ((words[off + w] >> (j & 63)) & 1ull);
        if (!ok) row[j] = NEG_INF;
    }
}

// penalize_rows applies engine/sample's penalties to rows of logits: for
// each pair j in [off[i], off[i+1]) of row i, the logit v of token ids[j]
// (seen counts[j] times in the penalty window) stays -Inf if it is, else
// is divided (v > 0) or multiplied (v <= 0) by rep[i] when that is on, then
// loses counts[j]*freq[i] + pres[i]; each step is rounded to float with no
// fused multiply-add, as the host computes it; NaN becomes -Inf. One block
// per row; a row's ids are distinct, so no two threads write one logit.
extern "C" __global__ void penalize_rows(float *logits, int cols, const int *rows, const int *off,
                                         const int *ids, const int *counts, const float *rep,
                                         const float *pres, const float *freq) {
    int i = blockIdx.x;
    float *row = logits + (long long)rows[i] * cols;
    float r = rep[i], p = pres[i], f = freq[i];
    bool rep_on = r > 0.0f && r != 1.0f;
    for (int j = off[i] + threadIdx.x; j < off[i + 1]; j += blockDim.x) {
        float v = row[ids[j]];
        if (v == NEG_INF) continue;
        if (rep_on) v = v <= 0.0f ? __fmul_rn(v, r) : __fdiv_rn(v, r);
        v = __fsub_rn(v, __fadd_rn(__fmul_rn((float)counts[j], f), p));
        if (v != v) v = NEG_INF;
        row[ids[j]] = v;
    }
}

// Block-wide helpers for 1024-thread sampling blocks.
#define SBLOCK 1024

struct ArgBest {
    float v;
    int i;
};

__device__ __forceinline__ ArgBest better(ArgBest a, ArgBest b) {
    if (b.v > a.v || (b.v == a.v && b.i < a.i)) return b;
    return a;
}

// block_argmax returns the largest logit and its lowest index; NaN never
// wins; a row of only -Inf / NaN gives index 0 (value -Inf).
__device__ ArgBest block_argmax(const float *l, int n) {
    __shared__ ArgBest part[SBLOCK / 32];
    ArgBest b = {NEG_INF, 0x7fffffff};
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        if (l[i] > b.v) b = (ArgBest){l[i], i};
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        ArgBest c = {__shfl_xor_sync(0xffffffffu, b.v, o), __shfl_xor_sync(0xffffffffu, b.i, o)};
        b = better(b, c);
    }
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    __syncthreads();
    if (lane == 0) part[warp] = b;
    __syncthreads();
    b = part[0];
    for (int w = 1; w < (int)(blockDim.x >> 5); w++) b = better(b, part[w]);
    if (b.i == 0x7fffffff) b.i = 0;
    return b;
}

// argmax_rows: out[i] = argmax of row rows[i] (lowest index on a tie).
extern "C" __global__ void __launch_bounds__(SBLOCK) argmax_rows(int *out, const float *logits, int cols,
                                                                  const int *rows) {
    ArgBest b = block_argmax(logits + (long long)rows[blockIdx.x] * cols, cols);
    if (threadIdx.x == 0) out[blockIdx.x] = b.i;
}

// key orders tokens best first as one unsigned 64-bit number: the logit's
// order-preserving bits above, the complemented id below, so a higher key
// is a higher logit or, on a tie, a lower id.
__device__ __forceinline__ unsigned long long token_key(float v, int i) {
    if (v != v) v = NEG_INF;
    uint32_t u = __float_as_uint(v);
    u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
    return ((unsigned long long)u << 32) | (uint32_t)(~(uint32_t)i);
}

__device__ __forceinline__ float clean(float v) { return v != v ? NEG_INF : v; }

// select_key finds, among tokens with key >= floor, the key at which the
// running count (by_mass == 0) or running mass exp(l - mx) (by_mass == 1),
// taken best first, first reaches need. It walks the key's eight bytes
// from the top with a 256-bin histogram per byte.
__device__ unsigned long long select_key(const float *l, int n, unsigned long long floor, double need,
                                         int by_mass, float mx) {
    __shared__ double hist[256];
    __shared__ unsigned long long s_prefix;
    __shared__ double s_above;
    if (threadIdx.x == 0) {
        s_prefix = 0;
        s_above = 0.0;
    }
    __syncthreads();
    for (int level = 7; level >= 0; level--) {
        for (int i = threadIdx.x; i < 256; i += blockDim.x) hist[i] = 0.0;
        __syncthreads();
        unsigned long long prefix = s_prefix;
        int shift = 8 * (level + 1);
        for (int i = threadIdx.x; i < n; i += blockDim.x) {
            unsigned long long k = token_key(l[i], i);
            if (k < floor) continue;
            if (shift < 64 && (k >> shift) != (prefix >> shift)) continue;
            int bin = (int)((k >> (8 * level)) & 255);
            atomicAdd(&hist[bin], by_mass ? exp((double)clean(l[i]) - (double)mx) : 1.0);
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            double above = s_above;
            int pick = -1, lowest = -1;
            for (int bin = 255; bin >= 0; bin--) {
                if (hist[bin] == 0.0) continue;
                lowest = bin;
                if (above + hist[bin] >= need) {
                    pick = bin;
                    break;
                }
                above += hist[bin];
            }
            if (pick < 0) pick = lowest < 0 ? 0 : lowest; // rounding: keep everything left
            // Mass strictly above the chosen bin, for the next level.
            double a2 = s_above;
            for (int bin = 255; bin > pick; bin--) a2 += hist[bin];
            s_above = a2;
            s_prefix = prefix | ((unsigned long long)pick << (8 * level));
        }
        __syncthreads();
    }
    return s_prefix;
}

// prob is a token's probability exactly as engine/sample stores it: the
// weight rounded to float, divided by the double normaliser, rounded to
// float again.
__device__ __forceinline__ double prob(double e, double z) { return (double)(float)((double)(float)e / z); }

struct SampleArgs {
    int *out;
    const float *logits;
    const int *rows;
    const float *temp, *top_p, *min_p;
    const int *top_k;
    const double *u;
    int cols;
};

// sample_rows draws token out[i] from row rows[i] of logits as
// engine/sample does without penalties: top-k, then top-p on the
// untempered distribution, then min-p, then softmax at temp[i], then one
// draw with the uniform u[i] in id order. temp[i] <= 0 (greedy), or an
// infinite maximum, gives the argmax. One 1024-thread block per row.
extern "C" __global__ void __launch_bounds__(SBLOCK) sample_rows(const SampleArgs a) {
    __shared__ double s_part[SBLOCK];
    __shared__ int s_pick;
    __shared__ double s_cum, s_target;
    const float *l = a.logits + (long long)a.rows[blockIdx.x] * a.cols;
    int n = a.cols;
    ArgBest top = block_argmax(l, n);
    float T = a.temp[blockIdx.x];
    if (!(T > 0.0f) || isinf(top.v)) {
        if (threadIdx.x == 0) a.out[blockIdx.x] = top.i;
        return;
    }
    float mx = top.v;
    unsigned long long floor = 0;
    int k = a.top_k[blockIdx.x];
    if (k > 0 && k < n) floor = select_key(l, n, 0, (double)k, 0, mx);
    float p = a.top_p[blockIdx.x];
    if (p > 0.0f && p < 1.0f) {
        double z = 0.0;
        for (int i = threadIdx.x; i < n; i += blockDim.x)
            if (token_key(l[i], i) >= floor) z += exp((double)clean(l[i]) - (double)mx);
        s_part[threadIdx.x] = z;
        __syncthreads();
        for (int s = blockDim.x / 2; s > 0; s >>= 1) {
            if ((int)threadIdx.x < s) s_part[threadIdx.x] += s_part[threadIdx.x + s];
            __syncthreads();
        }
        z = s_part[0];
        __syncthreads();
        unsigned long long f2 = select_key(l, n, floor, (double)p * z, 1, mx);
        floor = f2 > floor ? f2 : floor;
    }
    float minl = NEG_INF;
    float mp = a.min_p[blockIdx.x];
    if (mp > 0.0f) minl = mx + logf(fminf(mp, 1.0f));
    // Weights in id order: thread t owns ids [t*per, (t+1)*per).
    int per = (n + blockDim.x - 1) / blockDim.x;
    int i0 = threadIdx.x * per, i1 = min(n, i0 + per);
    double inv = 1.0 / (double)T, z = 0.0;
    for (int i = i0; i < i1; i++) {
        float v = clean(l[i]);
        if (token_key(v, i) >= floor && v >= minl) {
            double e = exp(((double)v - (double)mx) * inv);
            if (e == e) z += e;
        }
    }
    s_part[threadIdx.x] = z;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) s_part[threadIdx.x] += s_part[threadIdx.x + s];
        __syncthreads();
    }
    z = s_part[0];
    __syncthreads();
    // Probabilities as float (as the host sampler stores them), their
    // per-thread sums, then a scan to find the thread holding the target.
    double mine = 0.0;
    for (int i = i0; i < i1; i++) {
        float v = clean(l[i]);
        if (token_key(v, i) >= floor && v >= minl) {
            double e = exp(((double)v - (double)mx) * inv);
            if (e == e) mine += prob(e, z);
        }
    }
    s_part[threadIdx.x] = mine;
    __syncthreads();
    if (threadIdx.x == 0) {
        double total = 0.0;
        for (int t = 0; t < (int)blockDim.x; t++) total += s_part[t];
        double target = a.u[blockIdx.x] * total, cum = 0.0;
        int pick = -1, last = 0;
        for (int t = 0; t < (int)blockDim.x; t++) {
            if (s_part[t] <= 0.0) continue;
            last = t;
            if (cum + s_part[t] > target) {
                pick = t;
                break;
            }
            cum += s_part[t];
        }
        if (pick < 0) { // rounding left the target at the very top
            pick = last;
            target = -1.0; // the picked thread returns its last weighted id
        }
        s_pick = pick;
        s_cum = cum;
        s_target = target;
    }
    __syncthreads();
    if ((int)threadIdx.x != s_pick) return;
    double cum = s_cum, target = s_target;
    int last = i0;
    for (int i = i0; i < i1; i++) {
        float v = clean(l[i]);
        if (token_key(v, i) < floor || v < minl) continue;
        double e = exp(((double)v - (double)mx) * inv);
        if (!(e == e) || prob(e, z) <= 0.0) continue;
        last = i;
        cum += prob(e, z);
        if (target >= 0.0 && cum > target) {
            a.out[blockIdx.x] = i;
            return;
        }
    }
    a.out[blockIdx.x] = last;
}
