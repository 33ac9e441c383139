// Y = act(LN(X) W^T + b) [+ R] for a few rows of X (M <= 16): a decode step's GEMMs, with the
// program's whole share of W in registers before it waits for the kernel before it.
//
// A decode step is a chain of ~80 dependent kernels of a few microseconds. Each GEMM's bytes are
// its weights, which no kernel of the step writes; only X (a few KB) is the previous kernel's.
// Launched with programmatic dependent launch (sm_90), a block lets the next kernel's blocks in
// at once (griddepcontrol.launch_dependents), loads its W into registers, and only then waits
// (griddepcontrol.wait): the weight stream runs while the kernels before it still work, and what
// is left on the chain is X from L2, the MMAs, a reduction across warps and the epilogue.
// (Triton could not hold the loads across the wait without keeping each X tile's global load,
// shared-memory round trip and MMA in one serial chain: docs/perf-notes/models.md, Tried and lost.)
//
// A block owns 16 rows of W; its warps split K, each holding 16 x 16*STEPS of W as mma.m16n8k16
// A fragments (4*STEPS registers, 48 at STEPS 12). X's rows are the MMA's N side (one n8 tile for
// M <= 8, two for M <= 16). A 32-wide K chunk is loaded as one 16-byte vector per thread and
// row; the MMA's K order within the chunk is then a permutation of memory order, the same one for
// A and B, so the dot product is unchanged: thread t's words 0..3 are elements 8t..8t+7, words
// 0-1 feed the chunk's first k16 step (logical k 2t, 2t+1 and 2t+8, 2t+9) and words 2-3 its second.
//
// Where a row of W is longer than 16 warps can hold (K = 8192, a Llama MLP's down projection), the
// block streams it instead: 8 warps, each holding one chunk of 16 x 16*STEPS of W while the next
// chunk's loads are in flight (two register buffers, hence 8 warps and not 16: 255 registers a
// thread). The first chunk is loaded before the PDL wait. One chunk of a block is 16 rows x 1024 or
// 2048 elements, 32 or 64 KB: HBM needs ~30 KB in flight per SM (4.8 TB/s over 132 SMs at ~0.8 us of
// loaded latency), so one block an SM keeps it streaming. Each warp still sums its own K positions
// in one accumulator and the blocks' warps are summed in warp order, so the result does not depend on
// timing.
//
// Fusions as the Triton kernel (kernels/gelu_linear/skinny.py): a layer norm folded into W (c1, c2;
// the row statistics from the same X elements the MMA reads, shifted by each row's first
// element), bias, tanh-GELU, a residual add, and K/V columns scattered into a paged cache.
//
// SwiGLU (the held kernel only; a Llama MLP's gate/up projection, W = [gate rows; up rows]): a block
// holds 16 gate rows and the 16 up rows of the same outputs (rows n and n + ffn) as two tiles, and
// writes silu(gate) * up, so the [M, 2 ffn] product never leaves the SM and the decode step has one
// kernel less on its chain. Two tiles hold twice the W registers, so a warp holds half the K: 8 steps
// (4 with two X tiles), 16 warps for K = 2048. gate and up are rounded to T before the product, as the
// unfused GEMM's output is, and silu(g) * u is computed in fp32 and rounded once, as kernels/swiglu
// does.
#include "rooflint/common.cuh"
#include "rooflint/pdl.cuh"

namespace {

constexpr int kRows = 16;         // W rows per block: the MMA's M
constexpr int kMaxWarps = 16;     // K / (16 * STEPS) warps per block, at most
constexpr int kStreamWarps = 8;   // warps of a streaming block: two W buffers of 4 * STEPS registers
// SHARED's tile of 16 rows x K in shared memory, at most: an SM's 228 KB less the reduction's 16 KB
// and room for the next kernel's blocks under PDL (K <= 4096).
constexpr long long kSharedTileBytes = 128 * 1024;

template <typename T> __device__ __forceinline__ void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                                              uint32_t b1);
template <> __device__ __forceinline__ void mma16816<__nv_bfloat16>(float (&c)[4], const uint32_t (&a)[4],
                                                                    uint32_t b0, uint32_t b1) {
#if __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}
template <> __device__ __forceinline__ void mma16816<__half>(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                                             uint32_t b1) {
#if __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

template <typename T> __device__ __forceinline__ uint32_t pack(float lo, float hi) {
  T pair[2] = {from_float<T>(lo), from_float<T>(hi)};
  return *reinterpret_cast<uint32_t*>(pair);
}
template <typename T> __device__ __forceinline__ float2 unpack(uint32_t word) {
  const T* pair = reinterpret_cast<const T*>(&word);
  return make_float2(to_float(pair[0]), to_float(pair[1]));
}

struct Params {
  const void* x;
  const void* w;
  const void* bias;      // [N] or null
  const void* residual;  // [M, N] (row stride r_row) or null
  void* y;               // [M, N] (row stride y_row)
  const float* c1;       // folded layer norm (fold_layer_norm), or null
  const float* c2;
  const long long* slots;  // paged K/V append: slot of (row, kv head), or null
  void* k_rows;
  void* v_rows;
  long long m, n, k, x_row, r_row, y_row;
  long long kv_start, kv_width, kv_heads, head_dim;
  float eps;
  int gelu, pdl;
  long long ffn;  // SwiGLU: the up rows' offset in W (the outputs are n < ffn); 0 without
  // RoPE (rotate-half) of the first rope_width outputs, heads of rope_dim: X row m is token position
  // rope_start + m % rope_tokens, cos and sin [positions, rope_dim]; rope_width 0 without
  const void* cos;
  const void* sin;
  long long rope_width, rope_dim, rope_start, rope_tokens;
  int rms;  // an RMSNorm folded into W (gamma in W's columns): each X row's 1 / rms scales its outputs (RMS)
  long long pairs;  // SHARED without SwiGLU: blocks [0, pairs) own two row blocks each, the blocks after one
};

// W rows row0 + g and row0 + g + 8: this thread's 8 elements of each 32-wide chunk from column k0.
template <typename T, int kChunks>
__device__ __forceinline__ void load_w(uint4 (&lo)[kChunks], uint4 (&hi)[kChunks], const T* w, long long row0, int g,
                                       long long k, long long k0, bool lo_ok, bool hi_ok) {
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const long long col = k0 + 32 * c;
    lo[c] = lo_ok ? __ldg(reinterpret_cast<const uint4*>(w + (row0 + g) * k + col)) : make_uint4(0, 0, 0, 0);
    hi[c] = hi_ok ? __ldg(reinterpret_cast<const uint4*>(w + (row0 + g + 8) * k + col)) : make_uint4(0, 0, 0, 0);
  }
}

// Each X row's first element: a folded layer norm's shift (0 without one).
template <typename T, int MT>
__device__ __forceinline__ void load_shift(float (&shift)[MT], const T* x, const Params& p, int g, bool norm) {
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    const long long row = g + 8 * mt;
    shift[mt] = row < p.m && norm ? to_float(x[row * p.x_row]) : 0.0f;
  }
}

// X rows g (and g + 8 where MT = 2) at W's columns from k0, loaded together (one L2 round trip), then
// the MMAs over them; with a folded layer norm also each row's shifted sum and sum of squares.
template <typename T, int kChunks, int MT>
__device__ __forceinline__ void mma_x(float (&acc)[MT][4], float (&s1)[MT], float (&s2)[MT],
                                      const uint4 (&w_lo)[kChunks], const uint4 (&w_hi)[kChunks], const T* x,
                                      const Params& p, int g, long long k0, const float (&shift)[MT], bool norm) {
  uint4 xv[MT][kChunks];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    const long long row = g + 8 * mt;
    const bool ok = row < p.m;
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      xv[mt][c] = ok ? *reinterpret_cast<const uint4*>(x + row * p.x_row + k0 + 32 * c) : make_uint4(0, 0, 0, 0);
    }
  }
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      uint32_t b[4] = {xv[mt][c].x, xv[mt][c].y, xv[mt][c].z, xv[mt][c].w};
      if (norm) {  // the MMA takes x - shift, rounded once as an unfused layer norm's input is
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const float2 v = unpack<T>(b[i]);
          const float lo = v.x - shift[mt], hi = v.y - shift[mt];
          s1[mt] += lo + hi;
          s2[mt] += lo * lo + hi * hi;
          b[i] = pack<T>(lo, hi);
        }
      }
      const uint32_t a0[4] = {w_lo[c].x, w_hi[c].x, w_lo[c].y, w_hi[c].y};
      const uint32_t a1[4] = {w_lo[c].z, w_hi[c].z, w_lo[c].w, w_hi[c].w};
      mma16816<T>(acc[mt], a0, b[0], b[1]);
      mma16816<T>(acc[mt], a1, b[2], b[3]);
    }
  }
}

// One output of the block's 16 x 8 * MT tile (W row n, the block's row r; X row m), a thread each,
// with its epilogue's constant operands.
struct Output {
  long long n, dst;
  int r, m;
  bool writes, to_v;
  float bias, c1, c2;
};

template <typename T, int MT>
__device__ __forceinline__ Output output_of(const Params& p, long long row0, bool norm) {
  Output o;
  o.r = threadIdx.x / (8 * MT);
  o.m = threadIdx.x % (8 * MT);
  o.n = row0 + o.r;
  o.writes = threadIdx.x < kRows * 8 * MT && o.n < p.n && o.m < p.m;
  o.bias = 0.0f, o.c1 = 0.0f, o.c2 = 0.0f;
  o.dst = -1;
  o.to_v = false;
  if (o.writes) {
    if (p.bias != nullptr) o.bias = to_float(static_cast<const T*>(p.bias)[o.n]);
    if (norm) o.c1 = p.c1[o.n], o.c2 = p.c2[o.n];
    if (p.slots != nullptr) {
      const long long rel = o.n - p.kv_start;
      if (rel >= 0 && rel < 2 * p.kv_width) {
        o.to_v = rel >= p.kv_width;
        const long long col = o.to_v ? rel - p.kv_width : rel;
        o.dst = p.slots[o.m * p.kv_heads + col / p.head_dim] * p.head_dim + col % p.head_dim;
      }
    }
  }
  return o;
}

// Each warp's partial tile (W rows g, g + 8; X rows 2t, 2t + 1 of each n8 tile) and its X rows'
// statistics into shared memory.
template <int MT>
__device__ __forceinline__ void share(float (*partial)[kRows][8 * MT], float (*stats)[8 * MT][2],
                                      const float (&acc)[MT][4], const float (&s1)[MT], const float (&s2)[MT],
                                      int warp, int g, int t, bool norm) {
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    partial[warp][g][8 * mt + 2 * t] = acc[mt][0];
    partial[warp][g][8 * mt + 2 * t + 1] = acc[mt][1];
    partial[warp][g + 8][8 * mt + 2 * t] = acc[mt][2];
    partial[warp][g + 8][8 * mt + 2 * t + 1] = acc[mt][3];
    if (norm) {
      float a = s1[mt], b2 = s2[mt];
      a += __shfl_xor_sync(0xffffffffu, a, 1);
      a += __shfl_xor_sync(0xffffffffu, a, 2);
      b2 += __shfl_xor_sync(0xffffffffu, b2, 1);
      b2 += __shfl_xor_sync(0xffffffffu, b2, 2);
      if (t == 0) stats[warp][g + 8 * mt][0] = a, stats[warp][g + 8 * mt][1] = b2;
    }
  }
}

// After the barrier: this thread's output summed over the warps in warp order (deterministic), then
// the epilogue and the stores.
template <typename T, int MT>
__device__ __forceinline__ void store(const Output& o, const float (*partial)[kRows][8 * MT],
                                      const float (*stats)[8 * MT][2], int warps, const Params& p, bool norm) {
  float z = 0.0f;
  for (int i = 0; i < warps; ++i) z += partial[i][o.r][o.m];
  if (norm) {
    float sum = 0.0f, squares = 0.0f;
    for (int i = 0; i < warps; ++i) sum += stats[i][o.m][0], squares += stats[i][o.m][1];
    const float mean = sum / static_cast<float>(p.k);
    const float rstd = 1.0f / sqrtf(fmaxf(squares / static_cast<float>(p.k) - mean * mean, 0.0f) + p.eps);
    z = rstd * (z - mean * o.c1) + o.c2;
  }
  z += o.bias;
  if (p.gelu) z = gelu_tanh_sigmoid(z);
  if (p.residual != nullptr) z += to_float(static_cast<const T*>(p.residual)[o.m * p.r_row + o.n]);
  const T out = from_float<T>(z);
  static_cast<T*>(p.y)[o.m * p.y_row + o.n] = out;
  if (o.dst >= 0) static_cast<T*>(o.to_v ? p.v_rows : p.k_rows)[o.dst] = out;
}

// A block a row block of 16 (TILES = 2: their gate and up rows), its whole share of W held at once.
// Its code is its own, not the streamed kernel's helpers: under PDL the next kernel's blocks become
// resident beside it only while registers are left, so its register count is part of its speed.
// Built from the shared helpers it took 97 registers at 12 steps instead of 96, a 16-warp block was
// then allocated 104 a thread, the next layer's first GEMM no longer fitted beside GPT-2's down
// projection, and the step went from 0.277 to 0.295 ms (H200).
//
// ROPE (a Llama QKV projection): a block of the rotated outputs holds 8 rows of one head's first half
// and, as its tile rows 8-15, their rotate-half partners rope_dim / 2 further, so each output's partner
// is summed in the same block. Both are rounded to T first, as the unfused GEMM's output is, then
// rotated in fp32 with the position's cos and sin and rounded once, as models/ops/rope_append.py does;
// the rotated K (and V) also go to the paged cache.
//
// SHARED (TILES = 2): the second tile is held in shared memory, copied there by cp.async before the
// wait beside the first tile's register loads. A block then owns 256 KB of W at K = 4096 where
// registers alone hold 128 KB, so a projection takes half the waves, and each block's exposed end
// (X's round trip, the reduction, the epilogue, the next block's start) comes half as often. With
// SwiGLU (ffn > 0) the second tile is the up rows, so K = 4096 keeps the SwiGLU epilogue; without,
// it is the next row block (the block's outputs are then 32 rows, a thread each of the first 256).
template <typename T, int STEPS, int MT, int TILES, bool ROPE = false, bool SHARED = false, bool RMS = false>
__global__ void __launch_bounds__(kMaxWarps * 32) skinny_pdl_kernel(const Params p) {
  constexpr int kChunks = STEPS / 2;                // 32-wide K chunks a warp holds
  constexpr int kHeld = SHARED ? TILES - 1 : TILES;  // tiles in registers
  constexpr int kOutputs = kRows * 8 * MT;           // outputs of one tile
  __shared__ float partial[kMaxWarps][TILES][kRows][8 * MT];
  __shared__ float stats[kMaxWarps][8 * MT][2];
  extern __shared__ uint4 held_w[];  // SHARED: [kChunks][2][threads], each thread's own 16-byte words
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const int warps = blockDim.x / 32;
  // SwiGLU: the tiles are one row block's gate and up rows; else with two tiles, two row blocks.
  const bool swiglu = TILES == 2 && (!SHARED || p.ffn > 0);
  const bool paired = TILES == 2 && !swiglu && blockIdx.x < p.pairs;
  const long long k0 = static_cast<long long>(warp) * 16 * STEPS + 8 * t;
  const T* w = static_cast<const T*>(p.w);
  const T* x = static_cast<const T*>(p.x);
  const bool norm = p.c1 != nullptr;
  constexpr bool rms = RMS;  // a template flag: the squares cost the other kernels a register
  // A tile's first W row and how much further its rows 8-15 start: 8, or with RoPE half a head.
  auto rows_of = [&](int tile, long long& first, long long& half) {
    const long long block = blockIdx.x;
    const long long single = TILES == 2 && !swiglu ? p.pairs + block : block;  // after the pairs' row blocks
    const long long row0 = (paired ? 2 * block + tile : single) * kRows;
    first = row0, half = 8;
    if constexpr (ROPE) {
      if (row0 < p.rope_width) first = row0 / p.rope_dim * p.rope_dim + row0 % p.rope_dim / 2, half = p.rope_dim / 2;
    }
  };

  if (p.pdl) launch_dependents();
  // W: tile rows g and g + 8, this thread's 8 elements of each 32-wide chunk.
  uint4 w_lo[kHeld][kChunks], w_hi[kHeld][kChunks];
#pragma unroll
  for (int tile = 0; tile < TILES; ++tile) {
    long long first, half;
    rows_of(tile, first, half);
    const T* rows = w + (swiglu ? tile * p.ffn * p.k : 0);
    const bool lo_ok = first + g < p.n, hi_ok = first + g + half < p.n;
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      const T* lo = rows + (first + g) * p.k + k0 + 32 * c;
      const T* hi = rows + (first + g + half) * p.k + k0 + 32 * c;
      if (SHARED && tile == TILES - 1) {
        if (!paired && !swiglu) continue;  // a block of one row block holds no second tile
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
        cp_async16(static_cast<uint32_t>(__cvta_generic_to_shared(&held_w[(2 * c) * blockDim.x + threadIdx.x])), lo,
                   lo_ok);
        cp_async16(static_cast<uint32_t>(__cvta_generic_to_shared(&held_w[(2 * c + 1) * blockDim.x + threadIdx.x])),
                   hi, hi_ok);
#else
        held_w[(2 * c) * blockDim.x + threadIdx.x] = lo_ok ? __ldg(reinterpret_cast<const uint4*>(lo)) : uint4{};
        held_w[(2 * c + 1) * blockDim.x + threadIdx.x] = hi_ok ? __ldg(reinterpret_cast<const uint4*>(hi)) : uint4{};
#endif
      } else if (tile < kHeld) {
        w_lo[tile][c] = lo_ok ? __ldg(reinterpret_cast<const uint4*>(lo)) : make_uint4(0, 0, 0, 0);
        w_hi[tile][c] = hi_ok ? __ldg(reinterpret_cast<const uint4*>(hi)) : make_uint4(0, 0, 0, 0);
      }
    }
  }
  if constexpr (SHARED) cp_async_commit();
  // The epilogue's constant operands, one output (W row n, X row m) per thread of the first
  // 16 * 8 * MT (two tiles' worth where paired), also before the wait.
  const int out_tile = paired ? threadIdx.x / kOutputs : 0;
  const int out_n = (paired ? threadIdx.x % kOutputs : threadIdx.x) / (8 * MT), out_m = threadIdx.x % (8 * MT);
  long long first, half;
  rows_of(out_tile, first, half);
  const long long n = first + (out_n < 8 ? out_n : half + out_n - 8);
  const bool rotates = ROPE && n < p.rope_width;
  float pair_bias = 0.0f, cos_n = 0.0f, sin_n = 0.0f;  // RoPE: the partner's bias, this output's angle
  const bool writes = threadIdx.x < kOutputs * (paired ? 2 : 1) && n < p.n && out_m < p.m;
  float bias[TILES] = {}, c1 = 0.0f, c2 = 0.0f;
  long long dst = -1;
  bool to_v = false;
  if (writes) {
#pragma unroll
    for (int tile = 0; tile < TILES; ++tile) {
      if (p.bias != nullptr && (tile == 0 || swiglu)) {
        bias[tile] = to_float(static_cast<const T*>(p.bias)[n + tile * p.ffn]);
      }
    }
    if (norm) c1 = p.c1[n], c2 = p.c2[n];
    if (rotates) {
      const long long pair = out_n < 8 ? n + half : n - half;
      if (p.bias != nullptr) pair_bias = to_float(static_cast<const T*>(p.bias)[pair]);
      // the tables hold cat(freqs, freqs): the first half's entry serves both
      const long long angle = (p.rope_start + out_m % p.rope_tokens) * p.rope_dim + (out_n < 8 ? n : pair) % p.rope_dim;
      cos_n = to_float(static_cast<const T*>(p.cos)[angle]), sin_n = to_float(static_cast<const T*>(p.sin)[angle]);
    }
    if (p.slots != nullptr) {
      const long long rel = n - p.kv_start;
      if (rel >= 0 && rel < 2 * p.kv_width) {
        to_v = rel >= p.kv_width;
        const long long col = to_v ? rel - p.kv_width : rel;
        dst = p.slots[out_m * p.kv_heads + col / p.head_dim] * p.head_dim + col % p.head_dim;
      }
    }
  }

  if (p.pdl) wait_for_previous();
  // X: rows g (and g + 8 where MT = 2), the same elements; loaded together, one L2 round trip.
  uint4 xv[MT][kChunks];
  float shift[MT];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    const long long row = g + 8 * mt;
    const bool ok = row < p.m;
    shift[mt] = ok && norm ? to_float(x[row * p.x_row]) : 0.0f;
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      xv[mt][c] = ok ? *reinterpret_cast<const uint4*>(x + row * p.x_row + k0 + 32 * c) : make_uint4(0, 0, 0, 0);
    }
  }
  // Each thread reads back only the words it copied itself, so its own wait suffices (no barrier).
  if constexpr (SHARED) cp_async_wait<0>();
  float acc[TILES][MT][4] = {};
  float s1[MT] = {}, s2[MT] = {};
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      uint32_t b[4] = {xv[mt][c].x, xv[mt][c].y, xv[mt][c].z, xv[mt][c].w};
      if constexpr (RMS) {  // the row's squares from the elements the MMA takes
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const float2 v = unpack<T>(b[i]);
          s2[mt] += v.x * v.x + v.y * v.y;
        }
      }
      if (norm) {  // the MMA takes x - shift, rounded once as an unfused layer norm's input is
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const float2 v = unpack<T>(b[i]);
          const float lo = v.x - shift[mt], hi = v.y - shift[mt];
          s1[mt] += lo + hi;
          s2[mt] += lo * lo + hi * hi;
          b[i] = pack<T>(lo, hi);
        }
        xv[mt][c] = make_uint4(b[0], b[1], b[2], b[3]);  // as the shared tile's MMAs take it too
      }
#pragma unroll
      for (int tile = 0; tile < kHeld; ++tile) {
        const uint32_t a0[4] = {w_lo[tile][c].x, w_hi[tile][c].x, w_lo[tile][c].y, w_hi[tile][c].y};
        const uint32_t a1[4] = {w_lo[tile][c].z, w_hi[tile][c].z, w_lo[tile][c].w, w_hi[tile][c].w};
        mma16816<T>(acc[tile][mt], a0, b[0], b[1]);
        mma16816<T>(acc[tile][mt], a1, b[2], b[3]);
      }
    }
  }
  if (SHARED && (paired || swiglu)) {  // after the register tiles' MMAs, so their registers are free for these words
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
      for (int c = 0; c < kChunks; ++c) {
        const uint4 lo = held_w[(2 * c) * blockDim.x + threadIdx.x];
        const uint4 hi = held_w[(2 * c + 1) * blockDim.x + threadIdx.x];
        const uint32_t a0[4] = {lo.x, hi.x, lo.y, hi.y};
        const uint32_t a1[4] = {lo.z, hi.z, lo.w, hi.w};
        mma16816<T>(acc[TILES - 1][mt], a0, xv[mt][c].x, xv[mt][c].y);
        mma16816<T>(acc[TILES - 1][mt], a1, xv[mt][c].z, xv[mt][c].w);
      }
    }
  }
  // Across warps: each warp's partial tile (W rows g, g + 8; X rows 2t, 2t + 1 of each n8 tile)
  // and its X rows' statistics through shared memory, summed in warp order (deterministic).
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int tile = 0; tile < TILES; ++tile) {
      partial[warp][tile][g][8 * mt + 2 * t] = acc[tile][mt][0];
      partial[warp][tile][g][8 * mt + 2 * t + 1] = acc[tile][mt][1];
      partial[warp][tile][g + 8][8 * mt + 2 * t] = acc[tile][mt][2];
      partial[warp][tile][g + 8][8 * mt + 2 * t + 1] = acc[tile][mt][3];
    }
    if (norm || rms) {
      float a = s1[mt], b2 = s2[mt];
      a += __shfl_xor_sync(0xffffffffu, a, 1);
      a += __shfl_xor_sync(0xffffffffu, a, 2);
      b2 += __shfl_xor_sync(0xffffffffu, b2, 1);
      b2 += __shfl_xor_sync(0xffffffffu, b2, 2);
      if (t == 0) stats[warp][g + 8 * mt][0] = a, stats[warp][g + 8 * mt][1] = b2;
    }
  }
  __syncthreads();
  if (!writes) return;
  float scale = 1.0f;  // rms: the X row's 1 / rms, for every output of the row before its bias
  if (rms) {
    float squares = 0.0f;
    for (int i = 0; i < warps; ++i) squares += stats[i][out_m][1];
    scale = 1.0f / sqrtf(squares / static_cast<float>(p.k) + p.eps);
  }
  float zs[TILES];
#pragma unroll
  for (int tile = 0; tile < TILES; ++tile) {
    zs[tile] = 0.0f;
    if (tile == out_tile || swiglu) {
      for (int i = 0; i < warps; ++i) zs[tile] += partial[i][tile][out_n][out_m];
    }
    if (rms) zs[tile] *= scale;
  }
  float z = zs[paired ? out_tile : 0];
  if (swiglu) {
    const float gate = to_float(from_float<T>(zs[0] + bias[0]));
    const float up = to_float(from_float<T>(zs[TILES - 1] + bias[TILES - 1]));
    z = gate / (1.0f + __expf(-gate)) * up;
  }
  if (!swiglu && norm) {
    float sum = 0.0f, squares = 0.0f;
    for (int i = 0; i < warps; ++i) sum += stats[i][out_m][0], squares += stats[i][out_m][1];
    const float mean = sum / static_cast<float>(p.k);
    const float rstd = 1.0f / sqrtf(fmaxf(squares / static_cast<float>(p.k) - mean * mean, 0.0f) + p.eps);
    z = rstd * (z - mean * c1) + c2;
  }
  if (!swiglu) z += bias[0];
  if constexpr (ROPE) {
    if (rotates) {  // x1 cos - x2 sin for the first half's x1, x2 cos + x1 sin for the second half's x2
      float other = 0.0f;
      for (int i = 0; i < warps; ++i) other += partial[i][out_tile][out_n ^ 8][out_m];
      other = (rms ? other * scale : other) + pair_bias;
      const float mine = to_float(from_float<T>(z)), partner = to_float(from_float<T>(other));
      z = out_n < 8 ? mine * cos_n - partner * sin_n : mine * cos_n + partner * sin_n;
    }
  }
  if (p.gelu) z = gelu_tanh_sigmoid(z);
  if (p.residual != nullptr) z += to_float(static_cast<const T*>(p.residual)[out_m * p.r_row + n]);
  const T out = from_float<T>(z);
  static_cast<T*>(p.y)[out_m * p.y_row + n] = out;
  if (dst >= 0) static_cast<T*>(to_v ? p.v_rows : p.k_rows)[dst] = out;
}

// Streamed: a block of kStreamWarps warps, one an SM, walks row blocks blockIdx.x, blockIdx.x +
// gridDim.x, ... and each one's K in chunks of 16 * STEPS a warp: item i is (row block i / chunks,
// chunk i % chunks). Item i + 1's W loads go out before item i's X loads and MMAs, across row blocks
// too, so the block's stream does not pause between them; a row block's sum over warps and its
// epilogue run while the next item's W is in flight. The partial sums alternate between two shared
// buffers by row block, so one barrier a row block suffices.
template <typename T, int STEPS, int MT>
__global__ void __launch_bounds__(kStreamWarps * 32, 1) skinny_stream_kernel(const Params p) {
  constexpr int kChunks = STEPS / 2;
  __shared__ float partial[2][kStreamWarps][kRows][8 * MT];
  __shared__ float stats[2][kStreamWarps][8 * MT][2];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const T* w = static_cast<const T*>(p.w);
  const T* x = static_cast<const T*>(p.x);
  const bool norm = p.c1 != nullptr;
  const long long stride = 16LL * STEPS * kStreamWarps;
  const int chunks = static_cast<int>(p.k / stride);
  const int row_blocks = static_cast<int>((p.n + kRows - 1) / kRows);
  const int items = (row_blocks - static_cast<int>(blockIdx.x) + static_cast<int>(gridDim.x) - 1) /
                    static_cast<int>(gridDim.x) * chunks;
  const long long kw = static_cast<long long>(warp) * 16 * STEPS + 8 * t;
  auto row0_of = [&](int i) { return (static_cast<long long>(blockIdx.x) + (i / chunks) * gridDim.x) * kRows; };
  auto k0_of = [&](int i) { return kw + (i % chunks) * stride; };
  auto load = [&](uint4(&lo)[kChunks], uint4(&hi)[kChunks], int i) {
    const long long row0 = row0_of(i);
    load_w<T, kChunks>(lo, hi, w, row0, g, p.k, k0_of(i), row0 + g < p.n, row0 + g + 8 < p.n);
  };

  if (p.pdl) launch_dependents();
  uint4 a_lo[kChunks], a_hi[kChunks], b_lo[kChunks], b_hi[kChunks];
  load(a_lo, a_hi, 0);
  Output o = output_of<T, MT>(p, row0_of(0), norm), next = o;  // the first row block's, before the wait
  if (p.pdl) wait_for_previous();
  float shift[MT];
  load_shift<T, MT>(shift, x, p, g, norm);
  float acc[MT][4] = {};
  float s1[MT] = {}, s2[MT] = {};
  auto begin = [&](uint4(&lo)[kChunks], uint4(&hi)[kChunks], int i) {
    load(lo, hi, i);
    if (i % chunks == 0) next = output_of<T, MT>(p, row0_of(i), norm);
  };
  auto end = [&](int i) {  // after item i's MMAs: at its row block's last chunk, the sums and epilogue
    if ((i + 1) % chunks != 0) return;
    const int buffer = (i / chunks) & 1;
    share<MT>(partial[buffer], stats[buffer], acc, s1, s2, warp, g, t, norm);
    __syncthreads();
    if (o.writes) store<T, MT>(o, partial[buffer], stats[buffer], kStreamWarps, p, norm);
    o = next;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      acc[mt][0] = acc[mt][1] = acc[mt][2] = acc[mt][3] = 0.0f;
      s1[mt] = s2[mt] = 0.0f;
    }
  };
  for (int i = 0; i < items; i += 2) {
    if (i + 1 < items) begin(b_lo, b_hi, i + 1);
    mma_x<T, kChunks, MT>(acc, s1, s2, a_lo, a_hi, x, p, g, k0_of(i), shift, norm);
    end(i);
    if (i + 1 == items) break;
    if (i + 2 < items) begin(a_lo, a_hi, i + 2);
    mma_x<T, kChunks, MT>(acc, s1, s2, b_lo, b_hi, x, p, g, k0_of(i + 1), shift, norm);
    end(i + 1);
  }
}

int sm_count() {
  static int counts[64] = {};  // the SMs of each device, asked once per device
  int device = 0;
  cudaGetDevice(&device);
  int count = device >= 0 && device < 64 ? counts[device] : 0;
  if (count == 0) {
    cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device);
    if (device >= 0 && device < 64) counts[device] = count;
  }
  return count > 0 ? count : 1;
}

template <typename Kernel>
cudaError_t launch_kernel(Kernel kernel, const Params& p, long long blocks, int warps, cudaStream_t stream,
                          size_t shared_bytes = 0) {
  return launch_with_pdl(kernel, p, blocks, warps, p.pdl != 0, stream, shared_bytes);
}

// The held kernel with its second tile in shared memory (SHARED): a SwiGLU block's up rows, or else
// the next row block; M <= 8 (the entry checks it), 8 or 16 steps. Each thread's 16-byte words of the
// tile: 16 rows x K. A plain projection's first p.pairs blocks own two row blocks each, the rest one
// (the host's choice: skinny_pdl.py's shared_pairs).
template <typename T, int STEPS, bool RMS>
cudaError_t launch_shared(const Params& p, int warps, cudaStream_t stream) {
  const long long row_blocks = (p.n + kRows - 1) / kRows;
  const long long singles = row_blocks > 2 * p.pairs ? row_blocks - 2 * p.pairs : 0;
  const long long blocks = p.ffn > 0 ? row_blocks : p.pairs + singles;  // RoPE has no ffn: paired
  const size_t bytes = static_cast<size_t>(STEPS / 2) * 2 * warps * 32 * sizeof(uint4);
  if (p.rope_width > 0) {
    return launch_kernel(skinny_pdl_kernel<T, STEPS, 1, 2, true, true, RMS>, p, blocks, warps, stream, bytes);
  }
  return launch_kernel(skinny_pdl_kernel<T, STEPS, 1, 2, false, true, RMS>, p, blocks, warps, stream, bytes);
}

// The held kernel with a folded RMSNorm (RMS): M <= 8, 16 or 8 steps, the shares of the K = 2048 and
// 4096 projections the fold is built for; plain, RoPE or (8 steps) SwiGLU.
template <typename T, int STEPS>
cudaError_t launch_rms(const Params& p, int warps, cudaStream_t stream) {
  const long long blocks = (p.n + kRows - 1) / kRows;
  if (p.m > 8) return cudaErrorInvalidValue;
  if (p.rope_width > 0) {
    return launch_kernel(skinny_pdl_kernel<T, STEPS, 1, 1, true, false, true>, p, blocks, warps, stream);
  }
  if (p.ffn > 0) {
    if constexpr (STEPS == 8) {
      return launch_kernel(skinny_pdl_kernel<T, 8, 1, 2, false, false, true>, p, blocks, warps, stream);
    }
    return cudaErrorInvalidValue;
  }
  return launch_kernel(skinny_pdl_kernel<T, STEPS, 1, 1, false, false, true>, p, blocks, warps, stream);
}

template <typename T, int STEPS, bool STREAM>
cudaError_t launch_steps(const Params& p, int warps, cudaStream_t stream) {
  const long long row_blocks = (p.n + kRows - 1) / kRows;
  // Streamed: one block an SM (its registers allow no second), each walking its row blocks.
  const long long blocks = STREAM ? (row_blocks < sm_count() ? row_blocks : sm_count()) : row_blocks;
  if (p.rope_width > 0) {  // RoPE: the held kernel at 16 steps (M <= 8) or 8, the shares a QKV projection's K takes
    if constexpr (!STREAM && (STEPS == 16 || STEPS == 8)) {
      if (p.m <= 8) return launch_kernel(skinny_pdl_kernel<T, STEPS, 1, 1, true>, p, blocks, warps, stream);
      if constexpr (STEPS == 8) return launch_kernel(skinny_pdl_kernel<T, STEPS, 2, 1, true>, p, blocks, warps, stream);
    }
    return cudaErrorInvalidValue;
  }
  if (p.ffn > 0) {  // SwiGLU's two W tiles double W's registers: 8 steps at most (4 with two X tiles)
    if constexpr (!STREAM && STEPS <= 8) {
      if (p.m <= 8) return launch_kernel(skinny_pdl_kernel<T, STEPS, 1, 2>, p, blocks, warps, stream);
      if constexpr (STEPS <= 4) return launch_kernel(skinny_pdl_kernel<T, STEPS, 2, 2>, p, blocks, warps, stream);
    }
    return cudaErrorInvalidValue;
  }
  if (p.m <= 8) {
    if constexpr (STREAM) return launch_kernel(skinny_stream_kernel<T, STEPS, 1>, p, blocks, warps, stream);
    else return launch_kernel(skinny_pdl_kernel<T, STEPS, 1, 1>, p, blocks, warps, stream);
  }
  // Two X tiles double X's registers: only the shorter shares fit (the host picks STEPS <= 8).
  if constexpr (STEPS <= 8) {
    if constexpr (STREAM) return launch_kernel(skinny_stream_kernel<T, STEPS, 2>, p, blocks, warps, stream);
    else return launch_kernel(skinny_pdl_kernel<T, STEPS, 2, 1>, p, blocks, warps, stream);
  }
  return cudaErrorInvalidValue;
}

template <typename T>
cudaError_t launch(const Params& p, long long steps, bool streamed, bool shared, cudaStream_t stream) {
  const int warps = static_cast<int>(p.k / (16 * steps));  // a held block's (a streamed one has kStreamWarps)
  if (shared) {
    if (steps == 16) {
      return p.rms ? launch_shared<T, 16, true>(p, warps, stream) : launch_shared<T, 16, false>(p, warps, stream);
    }
    if (steps == 8) {
      return p.rms ? launch_shared<T, 8, true>(p, warps, stream) : launch_shared<T, 8, false>(p, warps, stream);
    }
    return cudaErrorInvalidValue;
  }
  if (p.rms) {
    if (streamed) return cudaErrorInvalidValue;
    if (steps == 16) return launch_rms<T, 16>(p, warps, stream);
    if (steps == 8) return launch_rms<T, 8>(p, warps, stream);
    return cudaErrorInvalidValue;
  }
  if (streamed) {
    switch (steps) {
      case 4: return launch_steps<T, 4, true>(p, kStreamWarps, stream);
      case 6: return launch_steps<T, 6, true>(p, kStreamWarps, stream);
      case 8: return launch_steps<T, 8, true>(p, kStreamWarps, stream);
      case 12: return launch_steps<T, 12, true>(p, kStreamWarps, stream);
      case 16: return launch_steps<T, 16, true>(p, kStreamWarps, stream);
      default: return cudaErrorInvalidValue;
    }
  }
  switch (steps) {
    case 4: return launch_steps<T, 4, false>(p, warps, stream);
    case 6: return launch_steps<T, 6, false>(p, warps, stream);
    case 8: return launch_steps<T, 8, false>(p, warps, stream);
    case 10: return launch_steps<T, 10, false>(p, warps, stream);
    case 12: return launch_steps<T, 12, false>(p, warps, stream);
    case 16: return launch_steps<T, 16, false>(p, warps, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace

// steps: k16 steps per warp. Held (streamed = 0): 4, 6, 8, 10, 12 or 16, at most 8 for M > 8, with
// K = 16 * steps * warps and 4 (M <= 8) or 8 (M <= 16) <= warps <= 16. Streamed (streamed = 1): 4, 6,
// 8, 12 or 16, at most 8 for M > 8, with K a multiple of 16 * steps * 8.
// Pointers to X, W, Y and the residual 16-byte aligned and row strides multiples of 8 for the
// vector loads; fp16 or bf16 (the MMA's types). ffn > 0: SwiGLU, held only, W [2 ffn, K] (gate rows,
// then up rows), n = ffn outputs, steps at most 8 (4 for M > 8), bias [2 ffn] or null, no residual,
// GELU, layer norm or K/V append. rope_width > 0: RoPE of outputs [0, rope_width) (q and K heads of
// rope_dim, a multiple of 16), held only at 16 or 8 steps (8 for M > 8), cos and sin [positions,
// rope_dim] of T, bias and K/V append allowed, no residual, GELU or layer norm. shared = 1: the held
// kernel with a second tile of 16 W rows in shared memory (SwiGLU's up rows, else the next row block),
// M <= 8, 8 or 16 steps, 8-16 warps, K <= 4096; without SwiGLU its first ``pairs`` blocks own two row
// blocks each and the blocks after them one (pairs = ceil(N / 32): every block two). rms = 1: an RMSNorm
// folded into W (W diag(gamma)): the held kernel scales each X row's outputs by 1 / sqrt(mean(x^2) +
// eps) before bias, RoPE or SwiGLU: held, M <= 8, 16 or 8 steps (SwiGLU 8, or 16 with shared), no c1.
extern "C" int rooflint_skinny_pdl(const void* x, const void* w, const void* bias, const void* residual, void* y,
                                   const void* c1, const void* c2, const void* slots, void* k_rows, void* v_rows,
                                   long long m, long long n, long long k, long long x_row, long long r_row,
                                   long long y_row, long long kv_start, long long kv_width, long long kv_heads,
                                   long long head_dim, long long steps, long long streamed, long long gelu,
                                   long long pdl, float eps, long long dtype, long long ffn, const void* cos,
                                   const void* sin, long long rope_width, long long rope_dim, long long rope_start,
                                   long long rope_tokens, long long shared, long long pairs, long long rms,
                                   cudaStream_t stream) {
  bool ok = m >= 1 && m <= 16 && n >= 1 && steps > 0 && (m <= 8 || steps <= 8) && x_row % 8 == 0 && aligned16(x) &&
            aligned16(w);
  if (ffn > 0) {
    ok = ok && !streamed && n == ffn && (shared || steps <= (m <= 8 ? 8 : 4)) && residual == nullptr && c1 == nullptr &&
         slots == nullptr && gelu == 0;
  }
  if (rope_width > 0) {
    ok = ok && !streamed && ffn == 0 && (steps == 16 || steps == 8) && rope_dim >= 16 && rope_dim % 16 == 0 &&
         rope_width % rope_dim == 0 && rope_width <= n && rope_start >= 0 && rope_tokens >= 1 && cos != nullptr &&
         sin != nullptr && residual == nullptr && c1 == nullptr && gelu == 0;
  }
  if (rms) ok = ok && !streamed && c1 == nullptr && m <= 8 && (steps == 16 || steps == 8);  // launch_rms
  if (shared) {  // the held kernel, M <= 8, 8 or 16 steps, the second tile within an SM's shared memory
    const long long warps = k / (16 * steps);
    ok = ok && !streamed && m <= 8 && (steps == 16 || steps == 8) && k == 16 * steps * warps && warps >= 8 &&
         warps <= kMaxWarps && k * kRows * 2 <= kSharedTileBytes && pairs >= 0 &&
         2 * pairs <= (n + kRows - 1) / kRows + 1;
  } else if (streamed) {
    ok = ok && k % (16 * steps * kStreamWarps) == 0 && k > 0;
  } else {
    const long long warps = k / (16 * steps);
    // The epilogue gives each of the block's 16 x 8 (M <= 8) or 16 x 16 outputs a thread of its own.
    ok = ok && k == 16 * steps * warps && warps >= (m <= 8 ? 4 : 8) && warps <= kMaxWarps;
  }
  if (!ok) return static_cast<int>(cudaErrorInvalidValue);
  Params p{x, w, bias, residual, y, static_cast<const float*>(c1), static_cast<const float*>(c2),
           static_cast<const long long*>(slots), k_rows, v_rows, m, n, k, x_row, r_row, y_row, kv_start, kv_width,
           kv_heads > 0 ? kv_heads : 1, head_dim > 0 ? head_dim : 1, eps, static_cast<int>(gelu),
           static_cast<int>(pdl), ffn > 0 ? ffn : 0, cos, sin, rope_width > 0 ? rope_width : 0,
           rope_width > 0 ? rope_dim : 1, rope_start, rope_tokens > 0 ? rope_tokens : 1, rms != 0, pairs};
  cudaError_t status;
  switch (dtype) {
    case kFloat16: status = launch<__half>(p, steps, streamed != 0, shared != 0, stream); break;
    case kBFloat16: status = launch<__nv_bfloat16>(p, steps, streamed != 0, shared != 0, stream); break;
    default: return static_cast<int>(cudaErrorInvalidValue);
  }
  return static_cast<int>(status != cudaSuccess ? status : cudaGetLastError());
}

