// Y = GELU_tanh(X W^T + b): a tensor-core GEMM with the bias and GELU fused into its epilogue.
//
// X is [M, K] and W is [N, K], both K-contiguous, so both operands feed mma.sync's "row.col" form
// straight from shared memory with ldmatrix, no transposes. The structure is the Ampere recipe:
//   * a block owns a BM x BN tile of Y; 8 warps each own a WM x WN sub-tile of fp32 accumulators;
//   * K is walked in BK=64 slices; cp.async copies slice k+STAGES-1 from HBM while the tensor
//     cores work on slice k, so the copy latency hides behind the math (STAGES-deep ring);
//   * a shared-memory row of 64 halves is 128 bytes = 8 16-byte chunks; chunk c of row r lives at
//     chunk c ^ (r & 7), so the 8 row addresses of every ldmatrix phase and every cp.async wave
//     hit 8 different 16-byte bank groups: no bank conflicts on either side;
//   * the epilogue adds the bias and applies GELU in registers before the only write of Y, which
//     is what fusing saves: the unfused chain writes Y, reads it back and writes it again.
// mma.sync (HMMA) is the Ampere instruction; on an H100 it reaches well under the wgmma (HGMMA)
// peak that cuBLAS uses, which is the limit of this first version (see docs/perf-notes).
// cp.async, bf16 mma and m16n8k16 need sm_80; the sm_75 build compiles an empty body and the
// launcher refuses to run there.
#include "common.cuh"

namespace gelu_linear_detail {

inline constexpr int kBK = 64;  // K elements per pipeline slice: one 128-byte smem row per tile row
inline constexpr int kThreads = 256;
inline constexpr int kGroupM = 8;  // tile rows walked together so the W panel they share stays in L2

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Element offset of 16-byte chunk `chunk` of tile row `row` after the XOR swizzle.
__device__ __forceinline__ int swizzle(int row, int chunk) { return row * kBK + ((chunk ^ (row & 7)) << 3); }

__device__ __forceinline__ float gelu_tanh(float z) {
  // 0.5 z (1 + tanh(u)) == z * sigmoid(2u): one exp and one divide instead of a tanh.
  const float u = 0.7978845608028654f * (z + 0.044715f * z * z * z);
  return z / (1.0f + __expf(-2.0f * u));
}

template <typename T> struct MmaOp;
template <> struct MmaOp<__nv_bfloat16> {
  __device__ __forceinline__ static void run(float* c, const uint32_t* a, const uint32_t* b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
  }
};
template <> struct MmaOp<__half> {
  __device__ __forceinline__ static void run(float* c, const uint32_t* a, const uint32_t* b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
  }
};

__device__ __forceinline__ void ldmatrix_x4(uint32_t* r, uint32_t address) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
#endif
}

// 16-byte async copy; a false `valid` copies zero bytes and zero-fills, which pads the edge tiles.
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool valid) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0));
#endif
}
__device__ __forceinline__ void cp_async_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}

__device__ __forceinline__ void store_pair(__nv_bfloat16* p, float a, float b) {
  *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(a, b);
}
__device__ __forceinline__ void store_pair(__half* p, float a, float b) {
  *reinterpret_cast<__half2*>(p) = __floats2half2_rn(a, b);
}

// Copy rows [row0, row0 + ROWS) x K-slice [k0, k0 + 64) of a K-contiguous matrix into a swizzled tile.
template <typename T, int ROWS>
__device__ __forceinline__ void load_tile(T* tile, const T* src, int row0, int rows, int k0, int K) {
  static_assert((ROWS * 8) % kThreads == 0, "tile chunks must divide evenly over the block");
#pragma unroll
  for (int i = 0; i < ROWS * 8 / kThreads; ++i) {
    const int c = threadIdx.x + i * kThreads;
    const int row = c >> 3, chunk = c & 7;
    const bool valid = (row0 + row < rows) && (k0 + chunk * 8 < K);
    // An invalid chunk still needs a legal address; the base pointer is one.
    const T* from = valid ? src + static_cast<long long>(row0 + row) * K + k0 + chunk * 8 : src;
    cp_async16(smem_u32(tile + swizzle(row, chunk)), from, valid);
  }
}

template <typename T, int BM, int BN, int WARPS_M, int STAGES>
__global__ void __launch_bounds__(kThreads) gelu_linear_kernel(const T* __restrict__ x, const T* __restrict__ w,
                                                                 const T* __restrict__ bias, T* __restrict__ y, int M,
                                                                 int N, int K) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  constexpr int WARPS_N = kThreads / 32 / WARPS_M;
  constexpr int WM = BM / WARPS_M, WN = BN / WARPS_N;
  constexpr int MT = WM / 16, NT = WN / 8;  // m16 and n8 MMA tiles per warp
  static_assert(MT >= 1 && NT % 2 == 0, "warp tile must hold whole m16 x n16 pairs");
  extern __shared__ uint4 smem_raw[];
  T* smem = reinterpret_cast<T*>(smem_raw);

  // Grouped tile order: consecutive blocks share a W panel (and cycle GROUP_M X panels), so both
  // stay L2-resident while they are reused instead of being streamed from HBM once per tile.
  const int tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;
  const int width = kGroupM * tiles_n;
  const int group = blockIdx.x / width, first_m = group * kGroupM;
  const int group_rows = min(tiles_m - first_m, kGroupM);
  const int tile_m = first_m + (blockIdx.x % width) % group_rows;
  const int tile_n = (blockIdx.x % width) / group_rows;
  const int m0 = tile_m * BM, n0 = tile_n * BN;

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int warp_m = warp / WARPS_N, warp_n = warp % WARPS_N;

  float acc[MT][NT][4];
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

  const int k_tiles = (K + kBK - 1) / kBK;
  auto stage_a = [&](int s) { return smem + s * (BM + BN) * kBK; };
  auto stage_b = [&](int s) { return smem + s * (BM + BN) * kBK + BM * kBK; };
  auto issue = [&](int s, int kt) {
    load_tile<T, BM>(stage_a(s), x, m0, M, kt * kBK, K);
    load_tile<T, BN>(stage_b(s), w, n0, N, kt * kBK, K);
  };

#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < k_tiles) issue(s, s);
    cp_async_commit();  // empty groups keep the wait_group count uniform
  }

  for (int kt = 0; kt < k_tiles; ++kt) {
    cp_async_wait<STAGES - 2>();  // slice kt has landed
    __syncthreads();              // ...for every thread, and slice kt-1's stage is free to refill
    const int next = kt + STAGES - 1;
    if (next < k_tiles) issue(next % STAGES, next);
    cp_async_commit();

    const T* a_tile = stage_a(kt % STAGES);
    const T* b_tile = stage_b(kt % STAGES);
#pragma unroll
    for (int kk = 0; kk < kBK / 16; ++kk) {
      uint32_t a[MT][4], b[NT][2];
#pragma unroll
      for (int i = 0; i < MT; ++i) {
        // lanes 0-15 address rows 0-15 of k-chunk 2kk, lanes 16-31 the same rows of chunk 2kk+1:
        // the four 8x8 matrices come back as exactly the a0..a3 fragment of m16n8k16.
        const int row = warp_m * WM + i * 16 + (lane & 15);
        ldmatrix_x4(a[i], smem_u32(a_tile + swizzle(row, kk * 2 + (lane >> 4))));
      }
#pragma unroll
      for (int j = 0; j < NT; j += 2) {
        // W rows are B's columns: matrices (n0-7,k0-7), (n0-7,k8-15), (n8-15,k0-7), (n8-15,k8-15)
        // give b0b1/b2b3 for two n8 tiles in one instruction.
        const int row = warp_n * WN + j * 8 + (lane & 7) + ((lane >> 4) << 3);
        uint32_t r[4];
        ldmatrix_x4(r, smem_u32(b_tile + swizzle(row, kk * 2 + ((lane >> 3) & 1))));
        b[j][0] = r[0];
        b[j][1] = r[1];
        b[j + 1][0] = r[2];
        b[j + 1][1] = r[3];
      }
#pragma unroll
      for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NT; ++j) MmaOp<T>::run(acc[i][j], a[i], b[j]);
    }
  }
  cp_async_wait<0>();

  // Epilogue: accumulator element (r, c) pairs sit at rows lane/4 and lane/4 + 8, columns 2*(lane%4)+{0,1}.
  const bool pairs = (N & 1) == 0;  // an even row length keeps every pair 4-byte aligned
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    const int col = n0 + warp_n * WN + j * 8 + (lane & 3) * 2;
    const float b0 = col < N ? to_float(bias[col]) : 0.0f;
    const float b1 = col + 1 < N ? to_float(bias[col + 1]) : 0.0f;
#pragma unroll
    for (int i = 0; i < MT; ++i) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int row = m0 + warp_m * WM + i * 16 + (lane >> 2) + half * 8;
        if (row >= M) continue;
        const float v0 = gelu_tanh(acc[i][j][half * 2] + b0);
        const float v1 = gelu_tanh(acc[i][j][half * 2 + 1] + b1);
        T* out = y + static_cast<long long>(row) * N + col;
        if (pairs && col + 1 < N) {
          store_pair(out, v0, v1);
        } else {
          if (col < N) out[0] = from_float<T>(v0);
          if (col + 1 < N) out[1] = from_float<T>(v1);
        }
      }
    }
  }
#endif
}

template <typename T, int BM, int BN, int WARPS_M, int STAGES>
int launch(const void* x, const void* w, const void* bias, void* y, int M, int N, int K, cudaStream_t stream) {
  constexpr int smem = STAGES * (BM + BN) * kBK * static_cast<int>(sizeof(T));
  auto kernel = gelu_linear_kernel<T, BM, BN, WARPS_M, STAGES>;
  // More than 48 KB of dynamic shared memory must be opted into, once per kernel (not per call:
  // at the GPT-2 shape a call is ~20 us and the attribute call is not free).
  static const cudaError_t opted_in = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (opted_in != cudaSuccess) return static_cast<int>(opted_in);
  const long long tiles = static_cast<long long>((M + BM - 1) / BM) * ((N + BN - 1) / BN);
  kernel<<<static_cast<unsigned int>(tiles), kThreads, smem, stream>>>(
      static_cast<const T*>(x), static_cast<const T*>(w), static_cast<const T*>(bias), static_cast<T*>(y), M, N, K);
  return static_cast<int>(cudaGetLastError());
}

// Tile configurations: 0 = 128x256 (warp tile 64x64, 3 stages, 144 KB: fits an A100's 163 KB),
// 1 = 128x128 (warp 64x32, 3 stages, 96 KB: two blocks per SM), 2 = 128x256 with 4 stages (192 KB,
// Hopper only). A 64x64 warp tile reads 4 KB of fragments per 131 KFLOP of MMA (64x32: 3 KB per
// 66 KFLOP), the least shared-memory traffic per FLOP that 128 accumulators per thread allow.
template <typename T>
int dispatch_config(int config, const void* x, const void* w, const void* bias, void* y, int M, int N, int K,
                    cudaStream_t stream) {
  switch (config) {
    case 0: return launch<T, 128, 256, 2, 3>(x, w, bias, y, M, N, K, stream);
    case 1: return launch<T, 128, 128, 2, 3>(x, w, bias, y, M, N, K, stream);
    case 2: return launch<T, 128, 256, 2, 4>(x, w, bias, y, M, N, K, stream);
    default: return static_cast<int>(cudaErrorInvalidValue);
  }
}

}  // namespace gelu_linear_detail
using namespace gelu_linear_detail;

// config < 0 picks 128x256 tiles when they still give every SM a block, else 128x128 ones.
extern "C" int rooflint_gelu_linear(const void* x, const void* w, const void* bias, void* y, long long m, long long n,
                                    long long k, long long dtype, long long config, cudaStream_t stream) {
  int device = 0, major = 0, sms = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (major < 8) return static_cast<int>(cudaErrorNotSupported);  // no bf16 mma.sync or cp.async
  // 16-byte cp.async chunks along K need K % 8 == 0 and aligned rows; int indexing needs < 2^31.
  if (k % 8 != 0 || !aligned16(x) || !aligned16(w) || m * k >= (1LL << 31) || n * k >= (1LL << 31) ||
      m * n >= (1LL << 31)) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  if (config < 0) {
    const long long big_tiles = ((m + 127) / 128) * ((n + 255) / 256);
    config = big_tiles >= sms ? 0 : 1;  // on an H100 the 4-stage config 2 measured no faster
  }
  const int M = static_cast<int>(m), N = static_cast<int>(n), K = static_cast<int>(k);
  const int c = static_cast<int>(config);
  switch (dtype) {
    case kFloat16: return dispatch_config<__half>(c, x, w, bias, y, M, N, K, stream);
    case kBFloat16: return dispatch_config<__nv_bfloat16>(c, x, w, bias, y, M, N, K, stream);
    default: return static_cast<int>(cudaErrorInvalidValue);  // fp32 would need the tf32 m16n8k8 path
  }
}
