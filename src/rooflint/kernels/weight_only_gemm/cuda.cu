// y = act(x @ (W_q * scale)^T + b) [+ r] for a decode step: bf16 x [M <= 16, K], int8 or fp8 e4m3
// codes W_q [N, K], one fp32 scale per output channel. The weight is half the bytes of bf16's, and at
// M <= 16 the bytes are the time.
//
// The block layout is that of the bf16 decode GEMM (kernels/gelu_linear/skinny_pdl.cu, its "held"
// kernel): a block owns 16 rows of W, its warps split K, and each warp loads its whole share of the
// codes into registers before it waits for the kernel before it (programmatic dependent launch,
// sm_90), so the weight stream overlaps the previous kernels of the step. In one byte a code, the
// same registers hold twice the K: a warp holds 16 x 16*STEPS codes in 2*STEPS registers (64 at
// STEPS 32), so 16 warps take K = 8192 (a Llama-3.2-1B MLP's down projection), where bf16 stops at
// 4096.
//
// The codes become bf16 in registers after the wait, exactly (every int8 and every finite e4m3 value
// is a bf16 value), and the MMAs are bf16 ones (mma.m16n8k16, fp32 accumulation). The scale
// multiplies each output once, in the epilogue. Conversions are integer and bf16x2 ALU work, no
// conversion-unit instruction (I2F and F2F issue at a quarter of the ALU rate on sm_90):
// - int8: a code b is l - 128 s (l its low 7 bits, s its sign bit). Two bf16 pairs from one LOP3
//   and one PRMT each, 0x43 in each half's high byte: 128 + l, and 128 + 128 s; one bf16x2
//   subtraction of them is b. 2 instructions a code.
// - e4m3: one PRMT makes each 16-bit half (the code's sign replicated over a byte, the code); shifted
//   left 4 and masked, the sign lands in bit 15 and the exponent and mantissa in bf16's low exponent
//   and top mantissa bits (the value times 2^-120, e4m3's subnormals as bf16 subnormals); one bf16x2
//   multiply by 2^120. 2 instructions a code, as int8 (putting the sign back apart from the shifted
//   magnitude took 2.5).
//
// Thread t's 16-byte load of a row holds codes 16t..16t+15 of a 64-wide K chunk. Its four words feed
// the chunk's four k16 MMAs: word s (codes 16t+4s..16t+4s+3) becomes the A operand's pairs for
// logical k (2t, 2t+1) and (2t+8, 2t+9), and x's elements 16t+4s..16t+4s+3 the B operand's: the MMA's
// K order is a permutation of memory order, the same for W and x, so the dot product is unchanged.
// Each warp sums its own K positions in one accumulator and the warps are summed in warp order, so
// the result does not depend on timing.
//
// SwiGLU (a Llama MLP's gate/up projection, W = [gate rows; up rows]): a block holds 16 gate rows and
// the 16 up rows of the same outputs (rows n and n + ffn) as two tiles, and writes silu(gate) * up,
// so the [M, 2 ffn] product never leaves the SM and the step has one kernel less. gate and up are
// rounded to bf16 before the product, as the unfused GEMM's output is, and silu(g) * u is computed
// in fp32 and rounded once, as kernels/swiglu does.
//
// RoPE (a Llama QKV projection, ROPE = true): as in the bf16 kernel, a block of the rotated outputs
// holds 8 rows of one head's first half and, as its tile rows 8-15, their rotate-half partners
// rope_dim / 2 further, so each output's partner is summed (and scaled) in the same block. Both are
// rounded to bf16 first, as the unfused GEMM's output is, then rotated in fp32 with the position's cos
// and sin and rounded once, as models/ops/rope_append.py does. The rotated K and the V columns also go
// to their slots of the paged cache, so a quantized decode step has no rope kernel either.
#include "rooflint/common.cuh"
#include "rooflint/pdl.cuh"

namespace {

constexpr int kRows = 16;      // W rows per block: the MMA's M
constexpr int kMaxWarps = 16;  // K / (16 * STEPS) warps per block, at most
enum CodeFormat { kInt8 = 0, kE4m3 = 1 };

__device__ __forceinline__ void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#if __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

__device__ __forceinline__ uint32_t bf16x2_bits(__nv_bfloat162 v) { return *reinterpret_cast<uint32_t*>(&v); }
__device__ __forceinline__ __nv_bfloat162 as_bf16x2(uint32_t bits) {
  return *reinterpret_cast<__nv_bfloat162*>(&bits);
}

// Four codes of one word as two bf16 pairs: (c0, c1) into `first`, (c2, c3) into `second`.
template <int FORMAT> __device__ __forceinline__ void dequantize4(uint32_t w, uint32_t& first, uint32_t& second);

template <> __device__ __forceinline__ void dequantize4<kInt8>(uint32_t w, uint32_t& first, uint32_t& second) {
  const uint32_t low = w & 0x7f7f7f7fu, sign = w & 0x80808080u;
  // PRMT selectors: bytes (i, 0x43, i + 1, 0x43) of {0x43434343, word}; bf16 0x43XX is 128 + XX for XX
  // < 128, and 0x4380 is 256.
  const __nv_bfloat162 l01 = as_bf16x2(__byte_perm(low, 0x43434343u, 0x5140));
  const __nv_bfloat162 s01 = as_bf16x2(__byte_perm(sign, 0x43434343u, 0x5140));
  const __nv_bfloat162 l23 = as_bf16x2(__byte_perm(low, 0x43434343u, 0x5342));
  const __nv_bfloat162 s23 = as_bf16x2(__byte_perm(sign, 0x43434343u, 0x5342));
  first = bf16x2_bits(__hsub2(l01, s01));  // exact: every operand and result is an integer <= 256
  second = bf16x2_bits(__hsub2(l23, s23));
}

// PRMT in its generic mode: a selector nibble's low 3 bits pick a byte of {b, a}, its top bit
// replicates that byte's sign over the target byte. Inline PTX: __byte_perm documents only the 3-bit
// selection.
__device__ __forceinline__ uint32_t permute_bytes(uint32_t a, uint32_t selector) {
  uint32_t d;
  asm("prmt.b32 %0, %1, 0, %2;" : "=r"(d) : "r"(a), "r"(selector));
  return d;
}

template <> __device__ __forceinline__ void dequantize4<kE4m3>(uint32_t w, uint32_t& first, uint32_t& second) {
  // bf16 2^120 in both halves: e4m3's exponent bias 7 against bf16's 127.
  const __nv_bfloat162 rescale = as_bf16x2(0x7b807b80u);
  // Halves (sign byte, code): 0x9180 gives (c0's sign, c0) low and (c1's sign, c1) high.
  const uint32_t p01 = permute_bytes(w, 0x9180u), p23 = permute_bytes(w, 0xb3a2u);
  // << 4: the sign byte's low bit reaches bit 15, the code's 7 magnitude bits 4-10; the mask drops
  // the code's own sign (bit 11), the sign byte's other bits (12-14) and what crossed into the next
  // half (its bits 0-3).
  const uint32_t v01 = (p01 << 4) & 0x87f087f0u, v23 = (p23 << 4) & 0x87f087f0u;
  first = bf16x2_bits(__hmul2(as_bf16x2(v01), rescale));  // exact: a power of two, no overflow
  second = bf16x2_bits(__hmul2(as_bf16x2(v23), rescale));
}

// A 16-byte read-only load as volatile asm: the compiler keeps it before the PDL wait (itself volatile
// asm) in program order. As __ldg it was free to sink the loads past the wait, and did at 32 steps, to
// save registers, which would put the weight stream back on the step's critical path.
__device__ __forceinline__ uint4 load_codes(const uint8_t* at) {
  uint4 v;
  asm volatile("ld.global.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(at));
  return v;
}

struct Params {
  const __nv_bfloat16* x;
  const uint8_t* w;          // [N, K] codes
  const float* scale;        // [N]
  const __nv_bfloat16* bias;      // [N] or null
  const __nv_bfloat16* residual;  // [M, N] (row stride r_row) or null
  __nv_bfloat16* y;               // [M, N] (row stride y_row)
  long long m, n, k, x_row, r_row, y_row;
  long long ffn;  // SwiGLU: the up rows' offset in W (the outputs are n < ffn); 0 without
  int gelu, pdl;
};

// A QKV projection's (skinny_codes_kernel's ROPE form): the other forms keep Params alone, since a
// larger parameter block moved ptxas's register allocation of some of them.
struct RopeParams : Params {
  // RoPE (rotate-half) of the first rope_width outputs, heads of rope_dim: x row m is token position
  // rope_start + m % rope_tokens of cos and sin [positions, rope_dim] (bf16)
  const __nv_bfloat16* cos;
  const __nv_bfloat16* sin;
  long long rope_width, rope_dim, rope_start, rope_tokens;
  // Paged K/V append: output columns [kv_start, kv_start + kv_width) are K, the next kv_width V; row
  // m's kv head h goes to slot slots[m * kv_heads + h] of k_rows / v_rows [slots, head_dim]; null without
  const long long* slots;
  __nv_bfloat16* k_rows;
  __nv_bfloat16* v_rows;
  long long kv_start, kv_width, kv_heads, head_dim;
};

__device__ __forceinline__ float bf16_round(float v) { return __bfloat162float(__float2bfloat16_rn(v)); }

// A block a row block of 16 outputs (TILES = 2: their gate and up rows; ROPE: 8 rows of a head's first
// half and their partners); warp w holds K positions [w * 16 * STEPS, (w + 1) * 16 * STEPS).
template <int FORMAT, int STEPS, int MT, int TILES, typename P = Params>
__global__ void __launch_bounds__(kMaxWarps * 32) skinny_codes_kernel(const P p) {
  constexpr bool ROPE = std::is_same_v<P, RopeParams>;
  constexpr int kChunks = STEPS / 4;  // 64-wide K chunks a warp holds
  __shared__ float partial[kMaxWarps][TILES][kRows][8 * MT];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const int warps = blockDim.x / 32;
  const long long row0 = static_cast<long long>(blockIdx.x) * kRows;
  const long long k0 = static_cast<long long>(warp) * 16 * STEPS + 16 * t;

  if (p.pdl) launch_dependents();
  // The block's first W row and how much further its tile rows 8-15 start: 8, or with RoPE half a head.
  long long first = row0, half = 8;
  if constexpr (ROPE) {
    if (row0 < p.rope_width) first = row0 / p.rope_dim * p.rope_dim + row0 % p.rope_dim / 2, half = p.rope_dim / 2;
  }
  // The codes of rows first + g and first + g + half (and the same up rows, ffn further): 16 of each
  // 64-wide chunk. Rows past N read row N - 1 (no branch around the loads) and multiply nothing:
  // their outputs are not written.
  uint4 w_lo[TILES][kChunks], w_hi[TILES][kChunks];
  const long long lo_row = min(first + g, p.n - 1), hi_row = min(first + g + half, p.n - 1);
#pragma unroll
  for (int tile = 0; tile < TILES; ++tile) {
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      const long long col = k0 + 64 * c;
      w_lo[tile][c] = load_codes(p.w + (lo_row + tile * p.ffn) * p.k + col);
      w_hi[tile][c] = load_codes(p.w + (hi_row + tile * p.ffn) * p.k + col);
    }
  }
  // The epilogue's constant operands (one output, W row n and x row m, a thread of the first
  // 16 * 8 * MT), also before the wait.
  const int out_n = threadIdx.x / (8 * MT), out_m = threadIdx.x % (8 * MT);
  const long long n = ROPE ? first + (out_n < 8 ? out_n : half + out_n - 8) : row0 + out_n;
  const bool writes = threadIdx.x < kRows * 8 * MT && n < p.n && out_m < p.m;
  float scale[TILES] = {}, bias[TILES] = {};
  bool rotates = false;
  // RoPE: the partner's scale and bias, this output's angle
  float pair_scale = 0.0f, pair_bias = 0.0f, cos_n = 0.0f, sin_n = 0.0f;
  __nv_bfloat16* cache = nullptr;  // the K/V append: this output's element of the paged cache, or null
  if (writes) {
#pragma unroll
    for (int tile = 0; tile < TILES; ++tile) {
      scale[tile] = p.scale[n + tile * p.ffn];
      if (p.bias != nullptr) bias[tile] = to_float(p.bias[n + tile * p.ffn]);
    }
    if constexpr (ROPE) {
      rotates = n < p.rope_width;
      if (rotates) {
        const long long pair = out_n < 8 ? n + half : n - half;
        pair_scale = p.scale[pair];
        if (p.bias != nullptr) pair_bias = to_float(p.bias[pair]);
        // the tables hold cat(freqs, freqs): the first half's entry serves both
        const long long angle =
            (p.rope_start + out_m % p.rope_tokens) * p.rope_dim + (out_n < 8 ? n : pair) % p.rope_dim;
        cos_n = to_float(p.cos[angle]), sin_n = to_float(p.sin[angle]);
      }
      if (p.slots != nullptr) {
        const long long rel = n - p.kv_start;
        if (rel >= 0 && rel < 2 * p.kv_width) {
          const bool to_v = rel >= p.kv_width;
          const long long col = to_v ? rel - p.kv_width : rel;
          cache = (to_v ? p.v_rows : p.k_rows) + p.slots[out_m * p.kv_heads + col / p.head_dim] * p.head_dim +
                  col % p.head_dim;
        }
      }
    }
  }

  if (p.pdl) wait_for_previous();
  // x: rows g (and g + 8 where MT = 2), the same 16 elements of each chunk, loaded together.
  uint4 xv[MT][kChunks][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    const long long row = g + 8 * mt;
    const bool ok = row < p.m;
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      const __nv_bfloat16* at = p.x + row * p.x_row + k0 + 64 * c;
      xv[mt][c][0] = ok ? *reinterpret_cast<const uint4*>(at) : make_uint4(0, 0, 0, 0);
      xv[mt][c][1] = ok ? *reinterpret_cast<const uint4*>(at + 8) : make_uint4(0, 0, 0, 0);
    }
  }
  float acc[TILES][MT][4] = {};
#pragma unroll
  for (int tile = 0; tile < TILES; ++tile) {
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      const uint4 wl = w_lo[tile][c], wh = w_hi[tile][c];
      const uint32_t lo[4] = {wl.x, wl.y, wl.z, wl.w};
      const uint32_t hi[4] = {wh.x, wh.y, wh.z, wh.w};
#pragma unroll
      for (int s = 0; s < 4; ++s) {
        uint32_t a[4];  // rows g, g + 8 at logical k (2t, 2t + 1); the same at (2t + 8, 2t + 9)
        dequantize4<FORMAT>(lo[s], a[0], a[2]);
        dequantize4<FORMAT>(hi[s], a[1], a[3]);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          const uint4& xs = xv[mt][c][s / 2];
          const uint32_t b0 = s % 2 == 0 ? xs.x : xs.z, b1 = s % 2 == 0 ? xs.y : xs.w;
          mma_bf16(acc[tile][mt], a, b0, b1);
        }
      }
    }
  }
  // Across warps: each warp's partial tile (W rows g, g + 8; x rows 2t, 2t + 1 of each n8 tile)
  // through shared memory, summed in warp order.
#pragma unroll
  for (int tile = 0; tile < TILES; ++tile) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      partial[warp][tile][g][8 * mt + 2 * t] = acc[tile][mt][0];
      partial[warp][tile][g][8 * mt + 2 * t + 1] = acc[tile][mt][1];
      partial[warp][tile][g + 8][8 * mt + 2 * t] = acc[tile][mt][2];
      partial[warp][tile][g + 8][8 * mt + 2 * t + 1] = acc[tile][mt][3];
    }
  }
  __syncthreads();
  if (!writes) return;
  float zs[TILES];
#pragma unroll
  for (int tile = 0; tile < TILES; ++tile) {
    float sum = 0.0f;
    for (int i = 0; i < warps; ++i) sum += partial[i][tile][out_n][out_m];
    zs[tile] = sum * scale[tile] + bias[tile];
  }
  float z = zs[0];
  if constexpr (TILES == 2) {
    const float gate = bf16_round(zs[0]), up = bf16_round(zs[1]);
    z = gate / (1.0f + __expf(-gate)) * up;
  }
  if constexpr (ROPE) {
    if (rotates) {  // x1 cos - x2 sin for the first half's x1, x2 cos + x1 sin for the second half's x2
      float other = 0.0f;
      for (int i = 0; i < warps; ++i) other += partial[i][0][out_n ^ 8][out_m];
      const float mine = bf16_round(z), partner = bf16_round(other * pair_scale + pair_bias);
      z = out_n < 8 ? mine * cos_n - partner * sin_n : mine * cos_n + partner * sin_n;
    }
  }
  if (p.gelu) z = gelu_tanh_sigmoid(z);
  if (p.residual != nullptr) z += to_float(p.residual[out_m * p.r_row + n]);
  const __nv_bfloat16 out = from_float<__nv_bfloat16>(z);
  p.y[out_m * p.y_row + n] = out;
  if constexpr (ROPE) {
    if (cache != nullptr) *cache = out;
  }
}

template <typename P> cudaError_t launch_kernel(void (*kernel)(P), const P& p, int warps, cudaStream_t stream) {
  return launch_with_pdl(kernel, p, (p.n + kRows - 1) / kRows, warps, p.pdl != 0, stream);
}

template <int FORMAT, int STEPS>
cudaError_t launch_steps(const RopeParams& p, int warps, cudaStream_t stream) {  // RoPE and the K/V append
  if (p.m <= 8) return launch_kernel(skinny_codes_kernel<FORMAT, STEPS, 1, 1, RopeParams>, p, warps, stream);
  if constexpr (STEPS <= 16) return launch_kernel(skinny_codes_kernel<FORMAT, STEPS, 2, 1, RopeParams>, p, warps, stream);
  return cudaErrorInvalidValue;
}

template <int FORMAT, int STEPS>
cudaError_t launch_steps(const Params& p, int warps, cudaStream_t stream) {
  if (p.ffn == 0) {
    if (p.m <= 8) return launch_kernel(skinny_codes_kernel<FORMAT, STEPS, 1, 1>, p, warps, stream);
    // Two x tiles double x's registers: only the shorter shares fit (the host picks STEPS <= 16).
    if constexpr (STEPS <= 16) return launch_kernel(skinny_codes_kernel<FORMAT, STEPS, 2, 1>, p, warps, stream);
    return cudaErrorInvalidValue;
  }
  // SwiGLU's two W tiles double W's registers: 16 steps at most (8 with two x tiles).
  if constexpr (STEPS <= 16) {
    if (p.m <= 8) return launch_kernel(skinny_codes_kernel<FORMAT, STEPS, 1, 2>, p, warps, stream);
  }
  if constexpr (STEPS <= 8) return launch_kernel(skinny_codes_kernel<FORMAT, STEPS, 2, 2>, p, warps, stream);
  return cudaErrorInvalidValue;
}

template <int FORMAT, typename P>
cudaError_t launch(const P& p, long long steps, cudaStream_t stream) {
  const int warps = static_cast<int>(p.k / (16 * steps));
  switch (steps) {
    case 4: return launch_steps<FORMAT, 4>(p, warps, stream);
    case 8: return launch_steps<FORMAT, 8>(p, warps, stream);
    case 12: return launch_steps<FORMAT, 12>(p, warps, stream);
    case 16: return launch_steps<FORMAT, 16>(p, warps, stream);
    case 24: return launch_steps<FORMAT, 24>(p, warps, stream);
    case 32: return launch_steps<FORMAT, 32>(p, warps, stream);
    default: return cudaErrorInvalidValue;
  }
}

// What every entry point checks: M, N, the K split and alignment (and SwiGLU's ffn).
bool shape_ok(const void* x, const void* w, long long m, long long n, long long k, long long x_row, long long steps,
              long long ffn) {
  if (steps <= 0) return false;
  const long long warps = k / (16 * steps);
  // The epilogue gives each of the block's 16 x 8 (M <= 8) or 16 x 16 outputs a thread of its own.
  return m >= 1 && m <= 16 && n >= 1 && (m <= 8 || steps <= 16) && k == 16 * steps * warps &&
         warps >= (m <= 8 ? 4 : 8) && warps <= kMaxWarps && x_row % 8 == 0 && aligned16(x) && aligned16(w) &&
         (ffn == 0 || (ffn == n && steps <= (m <= 8 ? 16 : 8)));
}

template <typename P> int run(const P& p, long long steps, long long format, cudaStream_t stream) {
  cudaError_t status;
  switch (format) {
    case kInt8: status = launch<kInt8>(p, steps, stream); break;
    case kE4m3: status = launch<kE4m3>(p, steps, stream); break;
    default: return static_cast<int>(cudaErrorInvalidValue);
  }
  return static_cast<int>(status != cudaSuccess ? status : cudaGetLastError());
}

}  // namespace

// steps: k16 steps per warp, 4, 8, 12, 16, 24 or 32 (at most 16 for M > 8), with K = 16 * steps *
// warps and 4 (M <= 8) or 8 (M <= 16) <= warps <= 16. format: 0 int8, 1 fp8 e4m3. x and W 16-byte
// aligned, x's row stride a multiple of 8 elements; bf16 x, bias, residual and y. ffn > 0: SwiGLU,
// W [2 ffn, K] (gate rows, then up rows), n = ffn outputs, steps at most 16 (8 for M > 8).
extern "C" int rooflint_skinny_codes(const void* x, const void* w, const void* scale, const void* bias,
                                     const void* residual, void* y, long long m, long long n, long long k,
                                     long long x_row, long long r_row, long long y_row, long long steps,
                                     long long ffn, long long format, long long gelu, long long pdl,
                                     cudaStream_t stream) {
  if (!shape_ok(x, w, m, n, k, x_row, steps, ffn)) return static_cast<int>(cudaErrorInvalidValue);
  Params p{static_cast<const __nv_bfloat16*>(x), static_cast<const uint8_t*>(w), static_cast<const float*>(scale),
           static_cast<const __nv_bfloat16*>(bias), static_cast<const __nv_bfloat16*>(residual),
           static_cast<__nv_bfloat16*>(y), m, n, k, x_row, r_row, y_row, ffn, static_cast<int>(gelu),
           static_cast<int>(pdl)};
  return run(p, steps, format, stream);
}

// A QKV projection with RoPE over outputs [0, rope_width) (heads of rope_dim, a multiple of 16; cos and
// sin bf16 [positions, rope_dim], row m at position rope_start + m % rope_tokens) and, with slots, the
// paged K/V append of columns [kv_start, kv_start + 2 kv_width) (K then V, kv_heads heads of head_dim);
// no residual, GELU or SwiGLU. Otherwise as rooflint_skinny_codes, at most 16 steps for M > 8.
extern "C" int rooflint_skinny_codes_rope(const void* x, const void* w, const void* scale, const void* bias, void* y,
                                          long long m, long long n, long long k, long long x_row, long long y_row,
                                          long long steps, long long format, long long pdl, const void* cos,
                                          const void* sin, long long rope_width, long long rope_dim,
                                          long long rope_start, long long rope_tokens, const void* slots,
                                          void* k_rows, void* v_rows, long long kv_start, long long kv_width,
                                          long long kv_heads, long long head_dim, cudaStream_t stream) {
  if (!shape_ok(x, w, m, n, k, x_row, steps, 0)) return static_cast<int>(cudaErrorInvalidValue);
  const bool rope_ok = rope_width > 0 && rope_dim >= 16 && rope_dim % 16 == 0 && rope_width % rope_dim == 0 &&
                       rope_width <= n && rope_start >= 0 && rope_tokens >= 1 && cos != nullptr && sin != nullptr;
  const bool kv_ok = slots == nullptr || (kv_width > 0 && kv_heads > 0 && head_dim > 0 && kv_width == kv_heads * head_dim &&
                                          kv_start >= 0 && kv_start + 2 * kv_width <= n && k_rows != nullptr &&
                                          v_rows != nullptr);
  if (!rope_ok || !kv_ok) return static_cast<int>(cudaErrorInvalidValue);
  RopeParams p;
  static_cast<Params&>(p) = Params{static_cast<const __nv_bfloat16*>(x), static_cast<const uint8_t*>(w),
                                   static_cast<const float*>(scale), static_cast<const __nv_bfloat16*>(bias), nullptr,
                                   static_cast<__nv_bfloat16*>(y), m, n, k, x_row, 0, y_row, 0, 0,
                                   static_cast<int>(pdl)};
  p.cos = static_cast<const __nv_bfloat16*>(cos), p.sin = static_cast<const __nv_bfloat16*>(sin);
  p.rope_width = rope_width, p.rope_dim = rope_dim, p.rope_start = rope_start, p.rope_tokens = rope_tokens;
  p.slots = static_cast<const long long*>(slots);
  p.k_rows = static_cast<__nv_bfloat16*>(k_rows), p.v_rows = static_cast<__nv_bfloat16*>(v_rows);
  p.kv_start = kv_start, p.kv_width = kv_width, p.kv_heads = kv_heads, p.head_dim = head_dim;
  return run(p, steps, format, stream);
}
