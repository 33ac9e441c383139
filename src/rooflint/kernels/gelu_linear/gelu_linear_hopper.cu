// Y = GELU_tanh(X W^T + b) for Hopper (sm_90a): a warp-specialized wgmma GEMM with the bias and
// GELU in its epilogue. gelu_linear.cu stays the sm_80 path and the cp.async wgmma kernel beside it.
//
// Why this shape of kernel (the limiter it answers: docs/perf-notes/gelu_linear.md measured
// the Triton kernel at GPT-2's 1024x768->3072 stalled on barriers and waits while cuBLASLt's
// warp-specialized kernel kept its warps waiting on the tensor cores):
// - Warpgroup 0 produces: one thread issues TMA copies of X and W k-slices into a ring of stages,
//   mbarriers count the bytes in, and it keeps 40 registers (setmaxnreg) so the consumers get 232.
// - Warpgroups 1 and 2 consume cooperatively: each owns 64 rows of the 128-row tile and issues
//   wgmma m64 x BLOCK_N x k16 on the stage's shared memory, then releases the stage once its
//   wgmmas have retired, one stage behind, so a stage is refilled while the next one multiplies.
//   No thread both loads and multiplies, so no __syncthreads sits inside the K loop.
// - BLOCK_N from the SM count: the fewest waves times tile width (GPT-2's 3072 columns in 192-wide
//   tiles make 8 x 16 = 128 tiles, one wave on 132 SMs, where 128-wide tiles need 1.45 waves).
// - Two CTAs of a cluster take neighbouring row blocks of the same columns and share the W slice:
//   each loads half of it with TMA multicast into both, so a pair reads 16 + 16 + 24 KB of L2 per
//   k-slice instead of 2 x 40 (cuBLASLt's kernel at this shape, nvjet_sm90_tst_192x128_64x5_1x2,
//   runs the same tile area on a 1x2 cluster). A stage is then free only when the consumers of
//   both CTAs have released it, so each consumer arrives on the empty barrier of both.
// - Bias and GELU are applied to the fp32 accumulators before the only write of Y.
#include <type_traits>

#include "rooflint/common.cuh"
#include "rooflint/hopper.cuh"

namespace {

constexpr int kConsumers = 2;
constexpr int kThreads = 128 * (1 + kConsumers);
constexpr int kBlockM = 64 * kConsumers;
constexpr int kBlockK = 64;  // one 128-byte swizzle row of 16-bit elements
[[maybe_unused]] constexpr int kProducerRegisters = 40, kConsumerRegisters = 232;
[[maybe_unused]] constexpr int kGroupM = 16;  // tiles of 16 row blocks share their W columns in L2

template <int BN>
struct Layout {
  static_assert(BN == 192 || BN == 256, "tile widths 192 and 256");
  static constexpr int kABytes = kBlockM * kBlockK * 2;  // 16 KB
  static constexpr int kBBytes = BN * kBlockK * 2;       // 24 or 32 KB
  static constexpr int kStageBytes = kABytes + kBBytes;  // a multiple of 1024: stages stay aligned
  static constexpr int kStages = BN == 192 ? 5 : 4;     // 200 / 192 KB of the 227 KB
  static constexpr int kBarriers = kStages * kStageBytes;
  static constexpr int kBias = kBarriers + 2 * kStages * 8;  // BN fp32 bias values, 16-byte aligned
  static constexpr int kSmem = kBias + BN * 4 + 1024;
};

#ifdef ROOFLINT_SM90A
using namespace rooflint_hopper;

// acc (64 x BN, fp32) (+)= A (shared, K-major, 64 rows) x B^T (shared, K-major, BN rows).
#define ROOFLINT_GL_MMA(REGS, N, TYPE, A, B, FLAG)                                                              \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" FLAG ", 0;\n"                                          \
               "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TYPE "." TYPE " {" ROOFLINT_WGMMA_REGS##REGS \
               "}, %" A ", %" B ", p, 1, 1, 0, 0;\n}\n"                                                 \
               : ROOFLINT_WGMMA_ACC##REGS(acc)                                                                 \
               : "l"(a), "l"(b), "r"(accumulate))
template <typename T, int BN>
__device__ __forceinline__ void mma(float (&acc)[BN / 2], uint64_t a, uint64_t b, int accumulate) {
  constexpr bool bf16 = std::is_same_v<T, __nv_bfloat16>;
  if constexpr (BN == 192 && bf16) {
    ROOFLINT_GL_MMA(96, 192, "bf16", "96", "97", "98");
  } else if constexpr (BN == 192) {
    ROOFLINT_GL_MMA(96, 192, "f16", "96", "97", "98");
  } else if constexpr (bf16) {
    ROOFLINT_GL_MMA(128, 256, "bf16", "128", "129", "130");
  } else {
    ROOFLINT_GL_MMA(128, 256, "f16", "128", "129", "130");
  }
}

#endif  // ROOFLINT_SM90A

template <typename T, int BN, int CL>
__global__ void __launch_bounds__(kThreads, 1)
    gelu_linear_hopper_kernel(const __grid_constant__ CUtensorMap x_map, const __grid_constant__ CUtensorMap w_map,
                              const T* __restrict__ bias, T* __restrict__ y, int M, int N, int K) {
#ifdef ROOFLINT_SM90A
  using L = Layout<BN>;
  // The ring's M is the N of the weights: W is [N, K], K-major like X, so both are plain TMA boxes.
  using Acc = float[BN / 2];
  extern __shared__ unsigned char smem_raw[];
  const uint32_t base = (smem_addr(smem_raw) + 1023u) & ~1023u;  // the swizzle needs 1024-B alignment
  auto a_tile = [&](int s) { return base + s * static_cast<uint32_t>(L::kStageBytes); };
  auto b_tile = [&](int s) { return a_tile(s) + L::kABytes; };
  auto full = [&](int s) { return base + L::kBarriers + 8u * s; };
  auto empty = [&](int s) { return base + L::kBarriers + 8u * (L::kStages + s); };
  float* smem_base = reinterpret_cast<float*>(smem_raw + (base - smem_addr(smem_raw)));
  float* bias_tile = smem_base + L::kBias / 4;

  // Grouped raster: kGroupM row blocks walk the columns together, so their W tiles are reused in L2.
  // Row blocks are counted up to a multiple of the cluster, so the CTAs of a cluster (consecutive
  // blockIdx.x) take neighbouring row blocks of one column block; a CTA past M loads zeros (TMA
  // fills out-of-range rows), serves its half of W to its neighbour, and stores nothing.
  const int m_blocks = ((M + kBlockM - 1) / kBlockM + CL - 1) / CL * CL, n_blocks = (N + BN - 1) / BN;
  const int per_group = kGroupM * n_blocks;
  const int group = blockIdx.x / per_group, first_m = group * kGroupM;
  const int rows_in_group = min(m_blocks - first_m, kGroupM);
  const int m0 = (first_m + (blockIdx.x % per_group) % rows_in_group) * kBlockM;
  const int n0 = ((blockIdx.x % per_group) / rows_in_group) * BN;
  const int k_tiles = (K + kBlockK - 1) / kBlockK;
  const int warpgroup = threadIdx.x / 128;
  const uint32_t rank = CL > 1 ? cluster_rank() : 0;

  if (threadIdx.x == 0) {
    for (int s = 0; s < L::kStages; ++s) {
      mbar_init(full(s), 1);
      mbar_init(empty(s), kConsumers * CL);
    }
    mbar_init_fence();
  }
  if constexpr (CL > 1) {
    cluster_sync();  // the neighbour's barriers exist before anything arrives on them or lands there
  } else {
    __syncthreads();
  }

  if (warpgroup == 0) {  // ---- producer
    release_registers<kProducerRegisters>();
    if (threadIdx.x == 0) {
      tma_prefetch_map(&x_map);
      tma_prefetch_map(&w_map);
      for (int kt = 0; kt < k_tiles; ++kt) {
        const int s = kt % L::kStages;
        if (kt >= L::kStages) mbar_wait(empty(s), ((kt / L::kStages) - 1) & 1);
        mbar_arrive_expect_tx(full(s), L::kStageBytes);  // both halves of W count here
        tma_load_3d(a_tile(s), &x_map, full(s), kt * kBlockK, m0, 0);
        if constexpr (CL > 1) {
          constexpr int kRows = BN / CL;  // this CTA's share of the W slice, into every CTA
          tma_load_3d_multicast(b_tile(s) + rank * kRows * 128, &w_map, full(s), kt * kBlockK, n0 + rank * kRows, 0,
                                static_cast<uint16_t>((1u << CL) - 1));
        } else {
          tma_load_3d(b_tile(s), &w_map, full(s), kt * kBlockK, n0, 0);
        }
      }
    }
    return;
  }

  // ---- consumers
  claim_registers<kConsumerRegisters>();
  const int consumer = warpgroup - 1;
  const bool elected = threadIdx.x % 128 == 0;
  // The tile's bias is loaded now, into a register, and parked in shared memory after the K loop:
  // its L2 round trip overlaps the mainloop. Loaded inside the epilogue's rolled loop it cost one
  // exposed round trip per 8 columns (ncu: long_scoreboard 1.37 per issue, the second stall).
  const int bias_col = threadIdx.x - 128;  // 256 consumer threads cover BN <= 256 columns
  const float bias_value = bias_col < BN && n0 + bias_col < N ? to_float(bias[n0 + bias_col]) : 0.0f;
  Acc acc;
#pragma unroll
  for (int i = 0; i < BN / 2; ++i) acc[i] = 0.0f;
  const uint32_t a_rows = consumer * 64 * 128;  // this warpgroup's 64 rows: 8 KB into each A tile

  for (int kt = 0; kt < k_tiles; ++kt) {
    const int s = kt % L::kStages;
    mbar_wait(full(s), (kt / L::kStages) & 1);
    pin(acc);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kBlockK / 16; ++kk)  // k16 steps: 32 B along each 128-byte swizzled row
      mma<T, BN>(acc, desc_k_major(a_tile(s) + a_rows + kk * 32), desc_k_major(b_tile(s) + kk * 32), kt > 0 || kk > 0);
    wgmma_commit();
    // The previous slice's wgmmas have retired once at most this group is pending: its stage is free.
    wgmma_wait<1>();
    pin(acc);
    // Release slice kt - 1 to every producer that will refill it. Slices within kStages of the
    // end are never refilled, and skipping them means no arrival can reach a CTA that has exited.
    if (kt > 0 && kt - 1 + L::kStages < k_tiles) {
      if constexpr (CL > 1) {
        const int lane_of_group = threadIdx.x % 128;  // lane c of warp 0 arrives at CTA c: in parallel
        if (lane_of_group < CL) mbar_arrive_cluster(empty((kt - 1) % L::kStages), lane_of_group);
      } else if (elected) {
        mbar_arrive(empty((kt - 1) % L::kStages));
      }
    }
  }
  wgmma_wait<0>();
  pin(acc);

  // Epilogue, in two steps, because a fully unrolled bias + GELU + store over 96-128 accumulators
  // is tens of KB of straight-line code that every warp fetches once: ncu measured the first
  // version stalled on instruction fetch (no_instruction 4.1 per issue, tensor pipe 17% active).
  // 1. The fp32 accumulators go to shared memory, into the ring (free once both consumers' last
  //    wgmmas have retired: the named barrier). Warp w of the warpgroup holds rows 16w + g and
  //    16w + g + 8; column block j holds columns 8j + 2t, +1. Rows are padded by 8 floats (8
  //    banks), so the 8 row groups of one 8-byte store cover all 32 banks twice: 2 wavefronts,
  //    the least 256 bytes can take.
  // 2. A rolled loop: each thread takes 8 consecutive columns of a row, reads them and their bias
  //    as two 16-byte shared loads each, applies GELU and writes 16 bytes, so a warp's stores are
  //    whole 128-byte lines.
  constexpr int kPitch = BN + 8;
  static_assert(kConsumers * 64 * kPitch * 4 <= L::kBarriers, "the staging tile fits in the ring");
  if (bias_col < BN) bias_tile[bias_col] = bias_value;
  named_sync(1, 128 * kConsumers);  // the ring is free and the bias is parked
  const int lane = threadIdx.x % 32, warp = (threadIdx.x / 32) % 4;
  const int g = lane / 4, t = lane % 4;
  float* stage = smem_base + consumer * 64 * kPitch;
#pragma unroll
  for (int j = 0; j < BN / 8; ++j)
#pragma unroll
    for (int h = 0; h < 2; ++h)
      *reinterpret_cast<float2*>(stage + (warp * 16 + g + 8 * h) * kPitch + 8 * j + 2 * t) =
          make_float2(acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
  named_sync(2 + consumer, 128);  // this warpgroup's 64 rows are staged
  const int local = threadIdx.x % 128;
  const bool vector_rows = N % 8 == 0;  // 16-byte stores need rows of 16-byte multiples
#pragma unroll 1
  for (int item = local; item < 64 * (BN / 8); item += 128) {
    const int r = item / (BN / 8), c = (item % (BN / 8)) * 8;
    const int out_row = m0 + consumer * 64 + r, col = n0 + c;
    if (out_row >= M || col >= N) continue;
    const float* in = stage + r * kPitch + c;
    T* out = y + static_cast<long long>(out_row) * N + col;
    const float* bias8 = bias_tile + c;
    if (vector_rows && col + 8 <= N) {
      float z[8], b8[8];
      *reinterpret_cast<float4*>(z) = *reinterpret_cast<const float4*>(in);
      *reinterpret_cast<float4*>(z + 4) = *reinterpret_cast<const float4*>(in + 4);
      *reinterpret_cast<float4*>(b8) = *reinterpret_cast<const float4*>(bias8);
      *reinterpret_cast<float4*>(b8 + 4) = *reinterpret_cast<const float4*>(bias8 + 4);
      AlignedVec<T> v;
#pragma unroll
      for (int e = 0; e < 8; ++e) v.v[e] = from_float<T>(gelu_tanh<T>(z[e] + b8[e]));
      store_vec(out, v);
    } else {
      for (int e = 0; e < 8 && col + e < N; ++e) out[e] = from_float<T>(gelu_tanh<T>(in[e] + bias8[e]));
    }
  }
#else
  (void)x_map;
  (void)w_map;
  (void)bias;
  (void)y;
  (void)M;
  (void)N;
  (void)K;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  __trap();  // a plain sm_90 build has no wgmma: fail the launch rather than return garbage
#endif
#endif
}

template <typename T, int BN, int CL>
int launch(const void* x, const void* w, const void* b, void* y, long long M, long long N, long long K,
           cudaStream_t stream) {
  CUtensorMap x_map, w_map;
  cudaError_t made = rooflint_tensor_map_rows<T>(&x_map, x, 1, M, K, kBlockM);
  if (made == cudaSuccess) made = rooflint_tensor_map_rows<T>(&w_map, w, 1, N, K, BN / CL);
  if (made != cudaSuccess) return static_cast<int>(made);
  auto kernel = gelu_linear_hopper_kernel<T, BN, CL>;
  constexpr int kSmem = Layout<BN>::kSmem;
  cudaError_t status = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  if (status != cudaSuccess) return static_cast<int>(status);
  const long long m_blocks = ((M + kBlockM - 1) / kBlockM + CL - 1) / CL * CL;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(m_blocks * ((N + BN - 1) / BN)));
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = kSmem;
  config.stream = stream;
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeClusterDimension;
  attribute[0].val.clusterDim.x = CL;
  attribute[0].val.clusterDim.y = 1;
  attribute[0].val.clusterDim.z = 1;
  config.attrs = attribute;
  config.numAttrs = 1;
  status = cudaLaunchKernelEx(&config, kernel, x_map, w_map, static_cast<const T*>(b), static_cast<T*>(y),
                              static_cast<int>(M), static_cast<int>(N), static_cast<int>(K));
  return static_cast<int>(status == cudaSuccess ? cudaGetLastError() : status);
}

template <typename T, int BN>
int launch_cluster(int cluster, const void* x, const void* w, const void* b, void* y, long long M, long long N,
                   long long K, cudaStream_t stream) {
  return cluster == 2 ? launch<T, BN, 2>(x, w, b, y, M, N, K, stream) : launch<T, BN, 1>(x, w, b, y, M, N, K, stream);
}

// A tile's fixed cost (pipeline fill, epilogue) in columns of mainloop work. Width alone would call
// 192 cheaper at 8192^3 (21 waves x 192 < 16 x 256), but the fixed cost is paid per tile, and the
// wider tile pays it fewer times.
constexpr int kTileOverheadColumns = 64;

long long tile_count(long long M, long long N, int bn) { return ((M + kBlockM - 1) / kBlockM) * ((N + bn - 1) / bn); }

// The tile width with the least time in waves x (width + fixed cost): on 132 SMs GPT-2's
// 1024 x 3072 takes 192 (one wave of 128 tiles), a square 8192 GEMM takes 256.
int choose_block_n(long long M, long long N, int sms) {
  long long best_cost = -1;
  int best = 256;
  for (const int bn : {256, 192}) {
    const long long cost = (tile_count(M, N, bn) + sms - 1) / sms * (bn + kTileOverheadColumns);
    if (best_cost < 0 || cost < best_cost) best_cost = cost, best = bn;
  }
  return best;
}

}  // namespace

// x [M, K], w [N, K], b [N], y [M, N], all contiguous; dtype 1 (fp16) or 2 (bf16); K a multiple of 8
// (TMA rows are 16-byte multiples). block_n 0 chooses from the SM count, or forces 192 or 256;
// cluster 0 pairs CTAs where the grid is more than one wave of SMs, or forces 1 or 2.
// Returns cudaErrorNotSupported on any GPU but sm_90.
extern "C" int rooflint_gelu_linear_hopper(const void* x, const void* w, const void* b, void* y, long long M,
                                          long long N, long long K, long long dtype, long long block_n,
                                          long long cluster, cudaStream_t stream) {
  int device = 0, major = 0, sms = 0;
  cudaError_t status = cudaGetDevice(&device);
  if (status == cudaSuccess) status = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  if (status == cudaSuccess) status = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (status != cudaSuccess) return static_cast<int>(status);
  if (major != 9) return static_cast<int>(cudaErrorNotSupported);
  if (M < 1 || N < 1 || K < 8 || K % 8 != 0 || M >= (1LL << 31) || N >= (1LL << 31))
    return static_cast<int>(cudaErrorInvalidValue);
  if (!aligned16(x) || !aligned16(w) || !aligned16(y))
    return static_cast<int>(cudaErrorMisalignedAddress);  // TMA boxes and the epilogue's 16-byte stores
  const int bn = block_n == 0 ? choose_block_n(M, N, sms) : static_cast<int>(block_n);
  if (bn != 192 && bn != 256) return static_cast<int>(cudaErrorInvalidValue);
  // Pairs pay where the grid runs several waves (8192^3 on an H100: 664 against 631 TFLOP/s), not in
  // a single wave, whose L2 traffic is not its limiter (GPT-2's shape: 17.7 against 17.4 us).
  const int cl = cluster == 0 ? (M > kBlockM && tile_count(M, N, bn) > sms ? 2 : 1) : static_cast<int>(cluster);
  if (cl != 1 && cl != 2) return static_cast<int>(cudaErrorInvalidValue);
  if (dtype == kBFloat16 && bn == 192) return launch_cluster<__nv_bfloat16, 192>(cl, x, w, b, y, M, N, K, stream);
  if (dtype == kBFloat16) return launch_cluster<__nv_bfloat16, 256>(cl, x, w, b, y, M, N, K, stream);
  if (dtype == kFloat16 && bn == 192) return launch_cluster<__half, 192>(cl, x, w, b, y, M, N, K, stream);
  if (dtype == kFloat16) return launch_cluster<__half, 256>(cl, x, w, b, y, M, N, K, stream);
  return static_cast<int>(cudaErrorInvalidValue);
}
