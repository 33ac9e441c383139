// Hopper (sm_90a) primitives for rooflint's CUDA kernels: mbarriers, TMA tile loads, named barriers,
// register reallocation between warpgroups and wgmma shared-memory descriptors.
//
// Everything here compiles only into the sm_90a target (ROOFLINT_SM90A is defined there): wgmma and
// setmaxnreg exist in no other target, and a kernel's older-arch build must not reference them.
// The host side (CUtensorMap, the driver's encoder) is in every build.
#pragma once
#include <cuda.h>          // CUtensorMap and its enums: types only, nothing here links libcuda
#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled_v12000
#include <stdint.h>

#include "rooflint/common.cuh"

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define ROOFLINT_SM90A 1
#endif

#ifdef ROOFLINT_SM90A
namespace rooflint_hopper {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// ---- mbarriers: a transaction count lets one thread's TMA copies complete a phase for everyone.
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(arrivals));
}
// Initialised barriers must be visible to the async proxy (TMA's complete_tx) before first use.
__device__ __forceinline__ void mbar_init_fence() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ bool mbar_try_wait(uint32_t bar, uint32_t parity) {
  uint32_t done;
  asm volatile(
      "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(done)
      : "r"(bar), "r"(parity)
      : "memory");
  return done != 0;
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  while (!mbar_try_wait(bar, parity)) {
  }
}

// ---- TMA: one thread copies a whole [rows x cols] box of a 3-D tensor map into shared memory,
// swizzled as the map says; rows past the tensor's end arrive as zeros. The bytes count toward bar.
__device__ __forceinline__ void tma_load_3d(uint32_t dst, const CUtensorMap* map, uint32_t bar, int x, int y, int z) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], [%2];\n" ::
          "r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(x), "r"(y), "r"(z)
      : "memory");
}
__device__ __forceinline__ void tma_prefetch_map(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

// ---- named barriers (id 0 is __syncthreads): `sync` waits, `arrive` only counts.
__device__ __forceinline__ void named_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// ---- register reallocation: a producer warpgroup that only issues TMA gives registers to the
// consumers' accumulators (every warp of a warpgroup executes the same one).
template <int N>
__device__ __forceinline__ void release_registers() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N>
__device__ __forceinline__ void claim_registers() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}

// ---- wgmma shared-memory descriptors for 16-bit operands in 128-byte-swizzled tiles (TMA's
// SWIZZLE_128B: rows of 64 elements, the 16-byte chunk index XOR the row index mod 8).
// Bits 0-13 start >> 4, 16-29 leading byte offset >> 4, 32-45 stride byte offset >> 4, 62-63 mode 1.
// K-major (the contraction dim along the 128-byte row): a k16 step is 32 bytes into the row, 8-row
// groups are 1024 bytes apart (stride); the leading offset is unused.
__device__ __forceinline__ uint64_t desc_k_major(uint32_t address) {
  return static_cast<uint64_t>((address & 0x3FFFF) >> 4) | (1ull << 16) | (64ull << 32) | (1ull << 62);
}
// MN-major (the output dim along the row, imm-trans 1): CUTLASS's canonical SW128 MN layout
// ((8,8,m),(8,k)) : ((1,8,LBO),(64,SBO)) in elements. The leading offset is the jump to the next 64
// output columns (the next TMA box), the stride the jump to the next 8 rows of the contraction dim.
__device__ __forceinline__ uint64_t desc_mn_major(uint32_t address, uint32_t next_columns_bytes) {
  return static_cast<uint64_t>((address & 0x3FFFF) >> 4) | (static_cast<uint64_t>(next_columns_bytes >> 4) << 16) |
         (64ull << 32) | (1ull << 62);
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Pins registers that an asynchronous wgmma writes or reads to this point of the program: after a
// wait, no use of them may be hoisted above it, and the allocator may not reuse them before it.
template <int N>
__device__ __forceinline__ void pin(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
template <int N>
__device__ __forceinline__ void pin(uint32_t (&r)[N][4]) {
#pragma unroll
  for (int i = 0; i < N; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+r"(r[i][e])::"memory");
}

}  // namespace rooflint_hopper
#endif  // ROOFLINT_SM90A

// Host: the driver's tensor-map encoder, looked up once through the runtime (no -lcuda needed).
inline PFN_cuTensorMapEncodeTiled_v12000 rooflint_tensor_map_encoder() {
  static PFN_cuTensorMapEncodeTiled_v12000 encoder = [] {
    void* function = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &function, 12000, cudaEnableDefault, &found) !=
            cudaSuccess ||
        found != cudaDriverEntryPointSuccess)
      function = nullptr;
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(function);
  }();
  return encoder;
}
