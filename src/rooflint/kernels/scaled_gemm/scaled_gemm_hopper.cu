// C[bf16] = (A * sa) @ (B * sb)^T for fp8 codes on Hopper (sm_90a): a persistent, warp-specialized
// wgmma GEMM with the scales in its epilogue. A [M, K] is e4m3 or e5m2, B [N, K] is e4m3 (the
// forward GEMM, and the backward one of a gradient times a weight); both K-major, as fp8 wgmma
// requires (only 16-bit operands may be transposed by the instruction).
//
// Why this shape of kernel:
// - fp8 wgmma runs k32 per instruction at twice bf16's rate, so a 128-byte swizzled row is 128
//   codes: one K slice of 128 moves the bytes of a bf16 slice of 64 (gelu_linear_hopper.cu's).
// - Warpgroup 0 produces: one thread issues the TMA copies of A's and B's K slices into a ring of
//   stages, mbarriers count the bytes in; it keeps 40 registers (setmaxnreg) so the two consumer
//   warpgroups get 232 each, for a 64 x 256 fp32 accumulator (128 registers a thread).
// - Persistent: a CTA per SM walks the tiles in a grouped order; the producer runs on into the
//   next tile's slices while the consumers scale and store this one, so the ring is full again
//   when they return: the epilogue's time overlaps the loads, not the tensor cores' work.
// - The scales touch only the fp32 accumulator, once per output: per tensor, sa * sb is one
//   product; per row, sa of the output's row (token) times sb of its column (channel).
// - GELU (gelu_linear's fp8 rows): the epilogue adds the column's bf16 bias to the scaled fp32 value
//   and applies tanh-GELU (one MUFU op, common.cuh's gelu_tanh for bf16 data) before the one rounding
//   to bf16: the activation costs registers, not a second pass over C in HBM. A template flag, so
//   the plain GEMM compiles as it did.
#include "rooflint/common.cuh"
#include "rooflint/hopper.cuh"

namespace {

constexpr int kConsumers = 2;
constexpr int kThreads = 128 * (1 + kConsumers);
constexpr int kBlockM = 64 * kConsumers;
constexpr int kBlockK = 128;  // one 128-byte swizzle row of 1-byte codes
[[maybe_unused]] constexpr int kProducerRegisters = 40, kConsumerRegisters = 232;
[[maybe_unused]] constexpr int kGroupM = 8;  // row blocks that walk the columns together (B reuse in L2)

enum AFormat { kE4M3 = 0, kE5M2 = 1 };

template <int BN>
struct Layout {
  static_assert(BN == 128 || BN == 256, "tile widths 128 and 256");
  static constexpr int kABytes = kBlockM * kBlockK;      // 16 KB
  static constexpr int kBBytes = BN * kBlockK;           // 16 or 32 KB
  static constexpr int kStageBytes = kABytes + kBBytes;  // a multiple of 1024: stages stay aligned
  static constexpr int kStages = BN == 128 ? 6 : 4;      // 192 KB of the 227 KB either way
  static constexpr int kBarriers = kStages * kStageBytes;
  static constexpr int kSmem = kBarriers + 2 * kStages * 8 + 1024;  // + the swizzle's alignment slack
};

#ifdef ROOFLINT_SM90A
using namespace rooflint_hopper;

// The persistent tile order: groups of kGroupM row blocks take each column block in turn, so the
// B slices of a column block are read from DRAM once per group and from L2 by the rest.
struct TileOrder {
  int m_blocks, n_blocks;
  __device__ __forceinline__ int count() const { return m_blocks * n_blocks; }
  __device__ __forceinline__ void origin(int tile, int bn, int& m0, int& n0) const {
    const int per_group = kGroupM * n_blocks;
    const int first_m = (tile / per_group) * kGroupM;
    const int rows_in_group = min(m_blocks - first_m, kGroupM);
    m0 = (first_m + (tile % per_group) % rows_in_group) * kBlockM;
    n0 = ((tile % per_group) / rows_in_group) * bn;
  }
};

// acc (64 x BN, fp32) (+)= A (shared, K-major, 64 rows) x B^T (shared, K-major, BN rows), k32.
// fp8 wgmma has no transpose immediates: the operand list ends at the two input scales (1, 1).
#define ROOFLINT_SG_MMA(REGS, N, ATYPE, A, B, FLAG)                                                           \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" FLAG ", 0;\n"                                        \
               "wgmma.mma_async.sync.aligned.m64n" #N "k32.f32." ATYPE ".e4m3 {" ROOFLINT_WGMMA_REGS##REGS \
               "}, %" A ", %" B ", p, 1, 1;\n}\n"                                                    \
               : ROOFLINT_WGMMA_ACC##REGS(acc)                                                               \
               : "l"(a), "l"(b), "r"(accumulate))
template <int FMT, int BN>
__device__ __forceinline__ void mma(float (&acc)[BN / 2], uint64_t a, uint64_t b, int accumulate) {
  if constexpr (BN == 128 && FMT == kE4M3) {
    ROOFLINT_SG_MMA(64, 128, "e4m3", "64", "65", "66");
  } else if constexpr (BN == 128) {
    ROOFLINT_SG_MMA(64, 128, "e5m2", "64", "65", "66");
  } else if constexpr (FMT == kE4M3) {
    ROOFLINT_SG_MMA(128, 256, "e4m3", "128", "129", "130");
  } else {
    ROOFLINT_SG_MMA(128, 256, "e5m2", "128", "129", "130");
  }
}

#endif  // ROOFLINT_SM90A

template <int FMT, int BN, bool GELU>
__global__ void __launch_bounds__(kThreads, 1)
    scaled_gemm_hopper_kernel(const __grid_constant__ CUtensorMap a_map, const __grid_constant__ CUtensorMap b_map,
                              const float* __restrict__ sa, const float* __restrict__ sb,
                              const __nv_bfloat16* __restrict__ bias, __nv_bfloat16* __restrict__ c, int M, int N,
                              int K, int row_scales) {
#ifdef ROOFLINT_SM90A
  using L = Layout<BN>;
  extern __shared__ unsigned char smem_raw[];
  const uint32_t base = (smem_addr(smem_raw) + 1023u) & ~1023u;  // the swizzle needs 1024-B alignment
  auto a_tile = [&](int s) { return base + s * static_cast<uint32_t>(L::kStageBytes); };
  auto b_tile = [&](int s) { return a_tile(s) + L::kABytes; };
  auto full = [&](int s) { return base + L::kBarriers + 8u * s; };
  auto empty = [&](int s) { return base + L::kBarriers + 8u * (L::kStages + s); };

  const TileOrder order{(M + kBlockM - 1) / kBlockM, (N + BN - 1) / BN};
  const int k_tiles = (K + kBlockK - 1) / kBlockK;
  const int warpgroup = threadIdx.x / 128;

  if (threadIdx.x == 0) {
    for (int s = 0; s < L::kStages; ++s) {
      mbar_init(full(s), 1);
      mbar_init(empty(s), kConsumers);
    }
    mbar_init_fence();
  }
  __syncthreads();

  if (warpgroup == 0) {  // ---- producer: every slice of every tile of this CTA, through one ring
    release_registers<kProducerRegisters>();
    if (threadIdx.x == 0) {
      tma_prefetch_map(&a_map);
      tma_prefetch_map(&b_map);
      int slice = 0;  // counts across tiles: the ring's stage and phase continue from tile to tile
      for (int tile = blockIdx.x; tile < order.count(); tile += gridDim.x) {
        int m0, n0;
        order.origin(tile, BN, m0, n0);
        for (int kt = 0; kt < k_tiles; ++kt, ++slice) {
          const int s = slice % L::kStages;
          if (slice >= L::kStages) mbar_wait(empty(s), ((slice / L::kStages) - 1) & 1);
          mbar_arrive_expect_tx(full(s), L::kStageBytes);  // zero-filled rows past M, N or K count too
          tma_load_3d(a_tile(s), &a_map, full(s), kt * kBlockK, m0, 0);
          tma_load_3d(b_tile(s), &b_map, full(s), kt * kBlockK, n0, 0);
        }
      }
    }
    return;
  }

  // ---- consumers: each owns 64 rows of the 128-row tile
  claim_registers<kConsumerRegisters>();
  const int consumer = warpgroup - 1;
  const bool elected = threadIdx.x % 128 == 0;
  const uint32_t a_rows = consumer * 64 * kBlockK;  // this warpgroup's 64 rows: 8 KB into each A tile
  const int lane = threadIdx.x % 32, warp = (threadIdx.x / 32) % 4;
  const int g = lane / 4, t = lane % 4;
  const float tensor_scale = row_scales ? 0.0f : sa[0] * sb[0];
  const bool pairs = N % 2 == 0;  // 4-byte stores of two bf16 need an even row pitch
  float acc[BN / 2];
#pragma unroll
  for (int i = 0; i < BN / 2; ++i) acc[i] = 0.0f;
  int slice = 0;
  for (int tile = blockIdx.x; tile < order.count(); tile += gridDim.x) {
    int m0, n0;
    order.origin(tile, BN, m0, n0);
    for (int kt = 0; kt < k_tiles; ++kt, ++slice) {
      const int s = slice % L::kStages;
      mbar_wait(full(s), (slice / L::kStages) & 1);
      pin(acc);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kBlockK / 32; ++kk)  // k32 steps: 32 B along each 128-byte swizzled row
        mma<FMT, BN>(acc, desc_k_major(a_tile(s) + a_rows + kk * 32), desc_k_major(b_tile(s) + kk * 32),
                     kt > 0 || kk > 0);
      wgmma_commit();
      // The previous slice's wgmmas have retired once at most this group is pending: its stage is free.
      wgmma_wait<1>();
      pin(acc);
      if (kt > 0 && elected) mbar_arrive(empty((slice - 1) % L::kStages));
    }
    wgmma_wait<0>();
    pin(acc);
    if (elected) mbar_arrive(empty((slice - 1) % L::kStages));  // the tile's last slice

    // Epilogue, from registers: warp w of the warpgroup holds rows 16w + g and 16w + g + 8 of its
    // 64; column block j holds columns 8j + 2t and 8j + 2t + 1. The producer is already filling the
    // ring with the next tile's slices meanwhile.
    const int row0 = m0 + consumer * 64 + warp * 16 + g;
    float row_scale[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = row0 + 8 * h;
      row_scale[h] = row_scales ? (row < M ? sa[row] : 0.0f) : tensor_scale;
    }
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) {
      const int col = n0 + 8 * j + 2 * t;
      if (col >= N) continue;
      const bool second = col + 1 < N;
      const float s0 = row_scales ? sb[col] : 1.0f;
      const float s1 = row_scales && second ? sb[col + 1] : 1.0f;
      float b0 = 0.0f, b1 = 0.0f;
      if constexpr (GELU) {
        b0 = __bfloat162float(bias[col]);
        b1 = second ? __bfloat162float(bias[col + 1]) : 0.0f;
      }
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = row0 + 8 * h;
        if (row >= M) continue;
        float v0 = acc[4 * j + 2 * h] * row_scale[h] * s0;
        float v1 = acc[4 * j + 2 * h + 1] * row_scale[h] * s1;
        if constexpr (GELU) {
          v0 = gelu_tanh<__nv_bfloat16>(v0 + b0);
          v1 = gelu_tanh<__nv_bfloat16>(v1 + b1);
        }
        __nv_bfloat16* out = c + static_cast<long long>(row) * N + col;
        if (pairs && second) {
          *reinterpret_cast<__nv_bfloat162*>(out) = __floats2bfloat162_rn(v0, v1);
        } else {
          out[0] = __float2bfloat16_rn(v0);
          if (second) out[1] = __float2bfloat16_rn(v1);
        }
      }
    }
  }
#else
  (void)a_map;
  (void)b_map;
  (void)sa;
  (void)sb;
  (void)bias;
  (void)c;
  (void)M;
  (void)N;
  (void)K;
  (void)row_scales;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  __trap();  // a plain sm_90 build has no wgmma: fail the launch rather than return garbage
#endif
#endif
}

// Host: [rows, cols] of 1-byte codes, row-major and dense, as a 3-D tensor map (one plane) whose
// boxes are [box_rows x 128 codes] with the 128-byte swizzle desc_k_major assumes. Boxes past the
// last row or column read zeros, and zero codes add nothing to the sums. cols must be a multiple of
// 16 (TMA's 16-byte row pitch).
cudaError_t codes_map(CUtensorMap* map, const void* base, long long rows, long long cols, int box_rows) {
  const auto encode = rooflint_tensor_map_encoder();
  if (encode == nullptr) return cudaErrorNotSupported;
  const cuuint64_t dims[3] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows), 1};
  const cuuint64_t strides[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows * cols)};
  const cuuint32_t box[3] = {kBlockK, static_cast<cuuint32_t>(box_rows), 1};
  const cuuint32_t steps[3] = {1, 1, 1};
  const CUresult made =
      encode(map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 3, const_cast<void*>(base), dims, strides, box, steps,
             CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
             CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return made == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}

long long tile_count(long long M, long long N, int bn) { return ((M + kBlockM - 1) / kBlockM) * ((N + bn - 1) / bn); }

// A tile's fixed cost (ring fill, epilogue) in columns of mainloop work, as gelu_linear_hopper.cu
// weighs it: the wider tile pays it fewer times, the narrower one fills more SMs on a small grid.
constexpr int kTileOverheadColumns = 64;

int choose_block_n(long long M, long long N, int sms) {
  long long best_cost = -1;
  int best = 256;
  for (const int bn : {256, 128}) {
    const long long cost = (tile_count(M, N, bn) + sms - 1) / sms * (bn + kTileOverheadColumns);
    if (best_cost < 0 || cost < best_cost) best_cost = cost, best = bn;
  }
  return best;
}

template <int FMT, int BN, bool GELU>
int launch(const void* a, const void* b, const float* sa, const float* sb, const __nv_bfloat16* bias, void* c,
           long long M, long long N, long long K, bool row_scales, int sms, cudaStream_t stream) {
  CUtensorMap a_map, b_map;
  cudaError_t status = codes_map(&a_map, a, M, K, kBlockM);
  if (status == cudaSuccess) status = codes_map(&b_map, b, N, K, BN);
  if (status != cudaSuccess) return static_cast<int>(status);
  auto kernel = scaled_gemm_hopper_kernel<FMT, BN, GELU>;
  constexpr int kSmem = Layout<BN>::kSmem;
  status = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  if (status != cudaSuccess) return static_cast<int>(status);
  const long long tiles = tile_count(M, N, BN);
  const unsigned grid = static_cast<unsigned>(tiles < sms ? tiles : sms);
  kernel<<<grid, kThreads, kSmem, stream>>>(a_map, b_map, sa, sb, bias, static_cast<__nv_bfloat16*>(c),
                                            static_cast<int>(M), static_cast<int>(N), static_cast<int>(K),
                                            row_scales ? 1 : 0);
  return static_cast<int>(cudaGetLastError());
}

// The checks and the choice of instantiation both entry points share.
template <bool GELU>
int checked_launch(const void* a, const void* b, const void* sa, const void* sb, const void* bias, void* c, long long M,
                   long long N, long long K, long long a_format, long long row_scales, long long block_n,
                   cudaStream_t stream) {
  int device = 0, major = 0, sms = 0;
  cudaError_t status = cudaGetDevice(&device);
  if (status == cudaSuccess) status = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  if (status == cudaSuccess) status = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (status != cudaSuccess) return static_cast<int>(status);
  if (major != 9) return static_cast<int>(cudaErrorNotSupported);
  if (M < 1 || N < 1 || K < 16 || K % 16 != 0 || M >= (1LL << 31) || N >= (1LL << 31) || K >= (1LL << 31))
    return static_cast<int>(cudaErrorInvalidValue);
  if (!aligned16(a) || !aligned16(b) || !aligned16(c)) return static_cast<int>(cudaErrorMisalignedAddress);
  if (GELU && bias == nullptr) return static_cast<int>(cudaErrorInvalidValue);
  const int bn = block_n == 0 ? choose_block_n(M, N, sms) : static_cast<int>(block_n);
  const auto* sa_f = static_cast<const float*>(sa);
  const auto* sb_f = static_cast<const float*>(sb);
  const auto* bias_h = static_cast<const __nv_bfloat16*>(bias);
  const bool rows = row_scales != 0;
  if (a_format == kE4M3 && bn == 128)
    return launch<kE4M3, 128, GELU>(a, b, sa_f, sb_f, bias_h, c, M, N, K, rows, sms, stream);
  if (a_format == kE4M3 && bn == 256)
    return launch<kE4M3, 256, GELU>(a, b, sa_f, sb_f, bias_h, c, M, N, K, rows, sms, stream);
  if (a_format == kE5M2 && bn == 128)
    return launch<kE5M2, 128, GELU>(a, b, sa_f, sb_f, bias_h, c, M, N, K, rows, sms, stream);
  if (a_format == kE5M2 && bn == 256)
    return launch<kE5M2, 256, GELU>(a, b, sa_f, sb_f, bias_h, c, M, N, K, rows, sms, stream);
  return static_cast<int>(cudaErrorInvalidValue);
}

}  // namespace

// a [M, K] (a_format 0: e4m3, 1: e5m2), b [N, K] e4m3, c [M, N] bf16, all contiguous, 16-byte
// aligned; sa and sb fp32: one each (row_scales 0), or sa [M] and sb [N] (row_scales 1). K a
// multiple of 16 (TMA's row pitch); M and N free. block_n 0 chooses the tile width from the SM
// count, 128 or 256 force it. Returns cudaErrorNotSupported on any GPU but sm_90.
extern "C" int rooflint_scaled_gemm_hopper(const void* a, const void* b, const void* sa, const void* sb, void* c,
                                          long long M, long long N, long long K, long long a_format,
                                          long long row_scales, long long block_n, cudaStream_t stream) {
  return checked_launch<false>(a, b, sa, sb, nullptr, c, M, N, K, a_format, row_scales, block_n, stream);
}

// The same GEMM with gelu_linear's epilogue: c = gelu_tanh((a * sa) @ (b * sb)^T + bias), bias [N] bf16.
extern "C" int rooflint_scaled_gemm_gelu_hopper(const void* a, const void* b, const void* sa, const void* sb,
                                               const void* bias, void* c, long long M, long long N, long long K,
                                               long long a_format, long long row_scales, long long block_n,
                                               cudaStream_t stream) {
  return checked_launch<true>(a, b, sa, sb, bias, c, M, N, K, a_format, row_scales, block_n, stream);
}
