// Y = GELU_tanh(X W^T + b): a tensor-core GEMM with the bias and GELU fused into its epilogue.
//
// X is [M, K] and W is [N, K], both K-contiguous, so both operands are "K-major" for the tensor
// cores: no transposes. Both kernels share the load side and the epilogue:
//   * a block owns a BM x BN tile of Y; blocks walk the tiles in GROUP_M-row groups for L2 reuse;
//   * K is walked in BK=64 slices; cp.async copies slices ahead from HBM into a STAGES-deep
//     shared-memory ring while the tensor cores work on the current one;
//   * a shared-memory row of 64 halves is 128 bytes = 8 16-byte chunks; chunk c of row r lives at
//     chunk c ^ (r & 7), so the 8 row addresses of every ldmatrix phase and every cp.async wave
//     hit 8 different 16-byte bank groups, and the layout is also wgmma's 128-byte swizzle;
//   * the epilogue adds the bias and applies GELU in registers before the only write of Y, which
//     is what fusing saves: the unfused chain writes Y, reads it back and writes it again.
// The math differs by architecture:
//   * Hopper (sm_90a): two warpgroups issue asynchronous wgmma.m64n256k16 (HGMMA) on a 128x256
//     tile straight from shared memory; 583 TFLOP/s at 8192^3 on an H100 against 405 for the best
//     mma.sync kernel (6cbb232).
//   * everything else, and grids too small to fill an H100 with 128x256 tiles: Ampere's mma.sync
//     m16n8k16 (HMMA) fed by ldmatrix, on 128x128 tiles, two blocks per SM.
// cp.async, bf16 mma and m16n8k16 need sm_80; the sm_75 build compiles empty bodies and the
// launcher refuses to run there.
#include "rooflint/common.cuh"

namespace gelu_linear_detail {

inline constexpr int kBK = 64;  // K elements per pipeline slice: one 128-byte smem row per tile row
inline constexpr int kThreads = 256;

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Element offset of 16-byte chunk `chunk` of tile row `row` after the XOR swizzle.
__device__ __forceinline__ int swizzle(int row, int chunk) { return row * kBK + ((chunk ^ (row & 7)) << 3); }

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

__device__ __forceinline__ void store_pair(__nv_bfloat16* p, float a, float b) {
  *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(a, b);
}
__device__ __forceinline__ void store_pair(__half* p, float a, float b) {
  *reinterpret_cast<__half2*>(p) = __floats2half2_rn(a, b);
}

// Copy rows [row0, row0 + ROWS) x K-slice [k0, k0 + 64) of a K-contiguous matrix into a swizzled tile.
// Thread t copies chunk t & 7 of rows t / 8 + 32 i: one 64-bit row address per call, stepped by 32 K.
template <typename T, int ROWS>
__device__ __forceinline__ void load_tile(T* tile, const T* src, int row0, int rows, int k0, int K) {
  static_assert((ROWS * 8) % kThreads == 0, "tile chunks must divide evenly over the block");
  const int row = threadIdx.x >> 3, chunk = threadIdx.x & 7;
  const bool k_valid = k0 + chunk * 8 < K;
  const T* from = src + static_cast<long long>(row0 + row) * K + k0 + chunk * 8;
  const long long step = 32LL * K;
#pragma unroll
  for (int i = 0; i < ROWS * 8 / kThreads; ++i) {
    const bool valid = k_valid && (row0 + row + 32 * i < rows);
    // An invalid chunk still needs a legal address; the base pointer is one.
    cp_async16(smem_u32(tile + swizzle(row + 32 * i, chunk)), valid ? from + i * step : src, valid);
  }
}

// Grouped tile order: consecutive blocks share a W panel (and cycle GROUP_M X panels), so both
// stay L2-resident while they are reused instead of being streamed from HBM once per tile.
template <int BM, int BN, int GROUP_M>
__device__ __forceinline__ void tile_origin(int M, int N, int& m0, int& n0) {
  const int tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;
  const int width = GROUP_M * tiles_n;
  const int group = blockIdx.x / width, first_m = group * GROUP_M;
  const int group_rows = min(tiles_m - first_m, GROUP_M);
  m0 = (first_m + (blockIdx.x % width) % group_rows) * BM;
  n0 = ((blockIdx.x % width) / group_rows) * BN;
}

// Epilogue for a warp's MT x NT grid of m16n8 fp32 accumulators whose origin is (row0, col0): element
// (r, c) pairs sit at rows lane/4 and lane/4 + 8, columns 2*(lane%4)+{0,1} (mma.sync's C fragment,
// and also each warp's slice of a wgmma accumulator). Bias and GELU are applied before the only write.
template <typename T, int MT, int NT>
__device__ __forceinline__ void store_tile(const float (&acc)[MT][NT][4], const T* __restrict__ bias, T* __restrict__ y,
                                           int M, int N, int row0, int col0) {
  const int lane = threadIdx.x & 31;
  const bool pairs = (N & 1) == 0;  // an even row length keeps every pair 4-byte aligned
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    const int col = col0 + j * 8 + (lane & 3) * 2;
    const float b0 = col < N ? to_float(bias[col]) : 0.0f;
    const float b1 = col + 1 < N ? to_float(bias[col + 1]) : 0.0f;
#pragma unroll
    for (int i = 0; i < MT; ++i) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int row = row0 + i * 16 + (lane >> 2) + half * 8;
        if (row >= M) continue;
        const float v0 = gelu_tanh<T>(acc[i][j][half * 2] + b0);
        const float v1 = gelu_tanh<T>(acc[i][j][half * 2 + 1] + b1);
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
}

// mma.sync kernel: 128x128 tile, 8 warps as 2x4 with 64x32 warp tiles, 3 stages (96 KB). The
// launch bound caps it at 128 registers so two blocks share an SM: one block's barrier stalls and
// epilogue then overlap the other's math.
namespace mma_sync {
inline constexpr int kBM = 128, kBN = 128, kWarpsM = 2, kStages = 3, kGroupM = 8;
}

template <typename T>
__global__ void __launch_bounds__(kThreads, 2)
    gelu_linear_mma_kernel(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ bias,
                           T* __restrict__ y, int M, int N, int K) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  using namespace mma_sync;
  constexpr int BM = kBM, BN = kBN, STAGES = kStages;
  constexpr int WARPS_N = kThreads / 32 / kWarpsM;
  constexpr int WM = BM / kWarpsM, WN = BN / WARPS_N;
  constexpr int MT = WM / 16, NT = WN / 8;  // m16 and n8 MMA tiles per warp
  static_assert(MT >= 1 && NT % 2 == 0, "warp tile must hold whole m16 x n16 pairs");
  extern __shared__ uint4 smem_raw[];
  T* smem = reinterpret_cast<T*>(smem_raw);

  int m0, n0;
  tile_origin<BM, BN, kGroupM>(M, N, m0, n0);
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
  store_tile<T, MT, NT>(acc, bias, y, M, N, m0 + warp_m * WM, n0 + warp_n * WN);
#endif
}

// ---- Hopper path: wgmma (sm_90a only) ----
// A warpgroup (4 warps) issues one asynchronous wgmma.m64n256k16 that reads both operands straight
// from shared memory through 64-bit descriptors, so no ldmatrix and no fragment registers: the
// 128 accumulators per thread are all the kernel holds. The XOR layout above is exactly the
// hardware's 128-byte swizzle (16-byte chunk bits 4-6 XOR row bits 7-9 of a 1024-byte-aligned
// tile), so the cp.async ring is reused unchanged.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define ROOFLINT_WGMMA_PATH 1
#endif

#ifdef ROOFLINT_WGMMA_PATH
// Descriptor of a K-major, 128-byte-swizzled operand starting at shared address `address`:
// start >> 4 in bits 0-13, leading offset 1 (unused when a k16 step sits inside one 128-byte row),
// stride 1024 bytes (8 rows of 128 B) >> 4 in bits 32-45, swizzle mode 1 (128 B) in bits 62-63.
__device__ __forceinline__ uint64_t wgmma_desc(uint32_t address) {
  return static_cast<uint64_t>((address & 0x3FFFF) >> 4) | (1ull << 16) | (64ull << 32) | (1ull << 62);
}
#define ROOFLINT_WGMMA_D \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, " \
  "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, " \
  "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, " \
  "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, " \
  "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
#define ROOFLINT_WGMMA_ACC(d) \
        "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), \
        "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), \
        "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), \
        "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), \
        "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), \
        "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), \
        "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), \
        "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3]), \
        "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), "+f"(d[8][3]), \
        "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]), \
        "+f"(d[10][0]), "+f"(d[10][1]), "+f"(d[10][2]), "+f"(d[10][3]), \
        "+f"(d[11][0]), "+f"(d[11][1]), "+f"(d[11][2]), "+f"(d[11][3]), \
        "+f"(d[12][0]), "+f"(d[12][1]), "+f"(d[12][2]), "+f"(d[12][3]), \
        "+f"(d[13][0]), "+f"(d[13][1]), "+f"(d[13][2]), "+f"(d[13][3]), \
        "+f"(d[14][0]), "+f"(d[14][1]), "+f"(d[14][2]), "+f"(d[14][3]), \
        "+f"(d[15][0]), "+f"(d[15][1]), "+f"(d[15][2]), "+f"(d[15][3]), \
        "+f"(d[16][0]), "+f"(d[16][1]), "+f"(d[16][2]), "+f"(d[16][3]), \
        "+f"(d[17][0]), "+f"(d[17][1]), "+f"(d[17][2]), "+f"(d[17][3]), \
        "+f"(d[18][0]), "+f"(d[18][1]), "+f"(d[18][2]), "+f"(d[18][3]), \
        "+f"(d[19][0]), "+f"(d[19][1]), "+f"(d[19][2]), "+f"(d[19][3]), \
        "+f"(d[20][0]), "+f"(d[20][1]), "+f"(d[20][2]), "+f"(d[20][3]), \
        "+f"(d[21][0]), "+f"(d[21][1]), "+f"(d[21][2]), "+f"(d[21][3]), \
        "+f"(d[22][0]), "+f"(d[22][1]), "+f"(d[22][2]), "+f"(d[22][3]), \
        "+f"(d[23][0]), "+f"(d[23][1]), "+f"(d[23][2]), "+f"(d[23][3]), \
        "+f"(d[24][0]), "+f"(d[24][1]), "+f"(d[24][2]), "+f"(d[24][3]), \
        "+f"(d[25][0]), "+f"(d[25][1]), "+f"(d[25][2]), "+f"(d[25][3]), \
        "+f"(d[26][0]), "+f"(d[26][1]), "+f"(d[26][2]), "+f"(d[26][3]), \
        "+f"(d[27][0]), "+f"(d[27][1]), "+f"(d[27][2]), "+f"(d[27][3]), \
        "+f"(d[28][0]), "+f"(d[28][1]), "+f"(d[28][2]), "+f"(d[28][3]), \
        "+f"(d[29][0]), "+f"(d[29][1]), "+f"(d[29][2]), "+f"(d[29][3]), \
        "+f"(d[30][0]), "+f"(d[30][1]), "+f"(d[30][2]), "+f"(d[30][3]), \
        "+f"(d[31][0]), "+f"(d[31][1]), "+f"(d[31][2]), "+f"(d[31][3])

template <typename T> struct Wgmma;
template <> struct Wgmma<__nv_bfloat16> {
  __device__ __forceinline__ static void run(float (&d)[32][4], uint64_t desc_a, uint64_t desc_b) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
        ROOFLINT_WGMMA_D "}, %128, %129, p, 1, 1, 0, 0;\n}\n"
        : ROOFLINT_WGMMA_ACC(d)
        : "l"(desc_a), "l"(desc_b), "r"(1));
  }
};
template <> struct Wgmma<__half> {
  __device__ __forceinline__ static void run(float (&d)[32][4], uint64_t desc_a, uint64_t desc_b) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 {"
        ROOFLINT_WGMMA_D "}, %128, %129, p, 1, 1, 0, 0;\n}\n"
        : ROOFLINT_WGMMA_ACC(d)
        : "l"(desc_a), "l"(desc_b), "r"(1));
  }
};
#endif

// wgmma kernel: 128x256 tile, two warpgroups of 64x256, 168 registers, 4 stages (192 KB, one
// block per SM). Loads run only STAGES-2 slices ahead: the slice before the current one may still
// be read by the previous, still-running wgmma group, so its stage is refilled one iteration later
// than in the mma.sync loop. GROUP_M 16 measured 2% faster than 8 (a smaller L2 working set).
namespace wgmma {
inline constexpr int kBM = 128, kBN = 256, kStages = 4, kGroupM = 16;
}

template <typename T>
__global__ void __launch_bounds__(kThreads, 1)
    gelu_linear_wgmma_kernel(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ bias,
                             T* __restrict__ y, int M, int N, int K) {
#ifdef ROOFLINT_WGMMA_PATH
  using namespace wgmma;
  constexpr int BM = kBM, BN = kBN, STAGES = kStages;
  static_assert(STAGES >= 3, "a stage is read by two wgmma groups in flight plus one being loaded");
  extern __shared__ __align__(1024) uint4 smem_raw[];
  T* smem = reinterpret_cast<T*>(smem_raw);
  int m0, n0;
  tile_origin<BM, BN, kGroupM>(M, N, m0, n0);
  const int warpgroup = threadIdx.x >> 7;

  float acc[1][32][4];
#pragma unroll
  for (int j = 0; j < 32; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[0][j][e] = 0.0f;

  const int k_tiles = (K + kBK - 1) / kBK;
  auto stage_a = [&](int s) { return smem + s * (BM + BN) * kBK; };
  auto stage_b = [&](int s) { return smem + s * (BM + BN) * kBK + BM * kBK; };
  auto issue = [&](int s, int kt) {
    load_tile<T, BM>(stage_a(s), x, m0, M, kt * kBK, K);
    load_tile<T, BN>(stage_b(s), w, n0, N, kt * kBK, K);
  };
#pragma unroll
  for (int s = 0; s < STAGES - 2; ++s) {
    if (s < k_tiles) issue(s, s);
    cp_async_commit();
  }
  for (int kt = 0; kt < k_tiles; ++kt) {
    cp_async_wait<STAGES - 3>();  // slice kt has landed (this thread's part)
    // cp.async writes through the generic proxy; wgmma reads through the async proxy.
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    __syncthreads();  // every part has; and every warpgroup's wgmma of slice kt-2 has retired
    const int next = kt + STAGES - 2;
    if (next < k_tiles) issue(next % STAGES, next);
    cp_async_commit();

    const uint32_t a = smem_u32(stage_a(kt % STAGES)) + warpgroup * 64 * kBK * static_cast<int>(sizeof(T));
    const uint32_t b = smem_u32(stage_b(kt % STAGES));
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
    for (int kk = 0; kk < kBK / 16; ++kk) {
      // k16 step kk starts 32 bytes into each 128-byte row; the hardware applies the swizzle.
      Wgmma<T>::run(acc[0], wgmma_desc(a + kk * 32), wgmma_desc(b + kk * 32));
    }
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");  // slice kt-1's group has retired
  }
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
  cp_async_wait<0>();
  // Warp v of warpgroup g holds rows 64g + 16(v % 4) .. +15 of all 256 columns, laid out like
  // 32 mma.sync C fragments side by side.
  store_tile<T, 1, 32>(acc, bias, y, M, N, m0 + (threadIdx.x >> 5) * 16, n0);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  __trap();  // a plain sm_90 build has no wgmma: fail the launch rather than return garbage
#endif
}

template <typename T, int BM, int BN, int STAGES>
int launch(void (*kernel)(const T*, const T*, const T*, T*, int, int, int), const void* x, const void* w,
           const void* bias, void* y, int M, int N, int K, cudaStream_t stream) {
  constexpr int smem = STAGES * (BM + BN) * kBK * static_cast<int>(sizeof(T));
  // More than 48 KB of dynamic shared memory must be opted into, once per kernel (not per call:
  // at the GPT-2 shape a call is ~20 us and the attribute call is not free).
  static const cudaError_t opted_in = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (opted_in != cudaSuccess) return static_cast<int>(opted_in);
  const long long tiles = static_cast<long long>((M + BM - 1) / BM) * ((N + BN - 1) / BN);
  kernel<<<static_cast<unsigned int>(tiles), kThreads, smem, stream>>>(
      static_cast<const T*>(x), static_cast<const T*>(w), static_cast<const T*>(bias), static_cast<T*>(y), M, N, K);
  return static_cast<int>(cudaGetLastError());
}

// config 0: mma.sync 128x128; config 1: wgmma 128x256 (Hopper, sm_90a build only).
template <typename T>
int dispatch_config(int config, const void* x, const void* w, const void* bias, void* y, int M, int N, int K,
                    cudaStream_t stream) {
  switch (config) {
    case 0:
      return launch<T, mma_sync::kBM, mma_sync::kBN, mma_sync::kStages>(gelu_linear_mma_kernel<T>, x, w, bias, y,
                                                                        M, N, K, stream);
    case 1:
      return launch<T, wgmma::kBM, wgmma::kBN, wgmma::kStages>(gelu_linear_wgmma_kernel<T>, x, w, bias, y, M, N, K,
                                                               stream);
    default: return static_cast<int>(cudaErrorInvalidValue);
  }
}

}  // namespace gelu_linear_detail
using namespace gelu_linear_detail;

// config < 0 picks the kernel; 0 or 1 forces one (see dispatch_config).
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
  if (config == 1 && major != 9) return static_cast<int>(cudaErrorNotSupported);  // wgmma is Hopper-only
  if (config < 0) {
    // wgmma's 128x256 tiles only when they still give every SM a block: at GPT-2's 1024x3072, 96
    // of them leave 36 of 132 SMs idle and 128x128 mma.sync (192 tiles) measured 31 vs 37 us.
    // rooflint builds sm_90a on Hopper (cuda_build.device_arch), which the wgmma path needs.
    const long long big_tiles = ((m + 127) / 128) * ((n + 255) / 256);
    config = major == 9 && big_tiles >= sms ? 1 : 0;
  }
  const int M = static_cast<int>(m), N = static_cast<int>(n), K = static_cast<int>(k);
  const int c = static_cast<int>(config);
  switch (dtype) {
    case kFloat16: return dispatch_config<__half>(c, x, w, bias, y, M, N, K, stream);
    case kBFloat16: return dispatch_config<__nv_bfloat16>(c, x, w, bias, y, M, N, K, stream);
    default: return static_cast<int>(cudaErrorInvalidValue);  // fp32 would need the tf32 m16n8k8 path
  }
}
