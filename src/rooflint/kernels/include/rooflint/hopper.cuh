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

#include <type_traits>

#include "rooflint/common.cuh"

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define ROOFLINT_SM90A 1
#endif

// mbarriers, 1-D bulk copies and named barriers are sm_90's own (the plain target has them too), so a
// kernel built for sm_90 without wgmma can stream through them.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
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

// ---- 1-D bulk copy (sm_90): `bytes` (a multiple of 16, both addresses 16-byte aligned) of global
// memory into shared memory by the copy engine, counted toward bar's transaction bytes.
__device__ __forceinline__ void bulk_load(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
               "l"(src), "r"(bytes), "r"(bar)
               : "memory");
}

// ---- named barriers (id 0 is __syncthreads): `sync` waits, `arrive` only counts.
__device__ __forceinline__ void named_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

}  // namespace rooflint_hopper
#endif  // sm_90

#ifdef ROOFLINT_SM90A
namespace rooflint_hopper {

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

// ---- thread-block clusters: CTAs of one cluster run at once on one GPC and can write each other's
// shared memory, so one TMA load can land in several CTAs (multicast) and an mbarrier can be
// arrived on from a neighbour.
__device__ __forceinline__ uint32_t cluster_rank() {
  uint32_t rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(rank));
  return rank;
}
// Every thread of every CTA in the cluster: what each CTA initialised before is visible to all.
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
// Arrive on the mbarrier at the same shared-memory offset in cluster CTA `cta` (this one included).
// The default .release.cta, as CUTLASS's ClusterBarrier: what the arrival hands back is shared
// memory that wgmma (async proxy) has finished reading, not data this thread wrote. The first
// version said .release.cluster and cost ~1,000 cycles a k-slice on the warpgroup's critical path
// (the H200: GPT-2's GEMM 16.4 -> 20.6 us, 8192^3 626 -> 380 TFLOP/s).
__device__ __forceinline__ void mbar_arrive_cluster(uint32_t bar, uint32_t cta) {
  asm volatile(
      "{\n.reg .b32 remote;\nmapa.shared::cluster.u32 remote, %0, %1;\n"
      "mbarrier.arrive.shared::cluster.b64 _, [remote];\n}\n" ::"r"(bar),
      "r"(cta)
      : "memory");
}
// tma_load_3d into every CTA of cta_mask, at the same offsets: each destination's barrier `bar`
// counts the box's bytes.
__device__ __forceinline__ void tma_load_3d_multicast(uint32_t dst, const CUtensorMap* map, uint32_t bar, int x, int y,
                                                      int z, uint16_t cta_mask) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
      " [%0], [%1, {%3, %4, %5}], [%2], %6;\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(x), "r"(y), "r"(z), "h"(cta_mask)
      : "memory");
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
// The descriptor of the address ``bytes`` past a descriptor's: its start address is the low 14
// bits, in 16-byte units, and a CTA's shared memory (under 256 KB) never carries out of them.
__device__ __forceinline__ uint64_t desc_advance(uint64_t desc, uint32_t bytes) { return desc + (bytes >> 4); }

// Operand lists of a wgmma's fp32 accumulator, 32 to 128 registers per thread (N/2 for m64nNk16):
// ROOFLINT_WGMMA_REGS<n> is the asm's "%0, ..., %<n-1>", ROOFLINT_WGMMA_ACC<n>(d) binds d[0..n-1]
// read-write, so the asm's own operands start at %<n>.
#define ROOFLINT_WGMMA_REGS32 \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15" ", " \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define ROOFLINT_WGMMA_REGS64 \
  ROOFLINT_WGMMA_REGS32 ", " \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47" ", " \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define ROOFLINT_WGMMA_REGS96 \
  ROOFLINT_WGMMA_REGS64 ", " \
  "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79" ", " \
  "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95"
#define ROOFLINT_WGMMA_REGS128 \
  ROOFLINT_WGMMA_REGS96 ", " \
  "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111" ", " \
  "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
#define ROOFLINT_WGMMA_ACC32_AT(d, o)                                                                   \
  "+f"(d[o + 0]), "+f"(d[o + 1]), "+f"(d[o + 2]), "+f"(d[o + 3]), "+f"(d[o + 4]), "+f"(d[o + 5]),     \
      "+f"(d[o + 6]), "+f"(d[o + 7]), "+f"(d[o + 8]), "+f"(d[o + 9]), "+f"(d[o + 10]), "+f"(d[o + 11]), \
      "+f"(d[o + 12]), "+f"(d[o + 13]), "+f"(d[o + 14]), "+f"(d[o + 15]), "+f"(d[o + 16]),             \
      "+f"(d[o + 17]), "+f"(d[o + 18]), "+f"(d[o + 19]), "+f"(d[o + 20]), "+f"(d[o + 21]),             \
      "+f"(d[o + 22]), "+f"(d[o + 23]), "+f"(d[o + 24]), "+f"(d[o + 25]), "+f"(d[o + 26]),             \
      "+f"(d[o + 27]), "+f"(d[o + 28]), "+f"(d[o + 29]), "+f"(d[o + 30]), "+f"(d[o + 31])
#define ROOFLINT_WGMMA_ACC32(d) ROOFLINT_WGMMA_ACC32_AT(d, 0)
// m64n80k16 (FlashAttention's D=256 score tile): 40 registers.
#define ROOFLINT_WGMMA_REGS40 ROOFLINT_WGMMA_REGS32 ", %32, %33, %34, %35, %36, %37, %38, %39"
#define ROOFLINT_WGMMA_ACC40(d)                                                                             \
  ROOFLINT_WGMMA_ACC32(d), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), \
      "+f"(d[38]), "+f"(d[39])
#define ROOFLINT_WGMMA_ACC64(d) ROOFLINT_WGMMA_ACC32(d), ROOFLINT_WGMMA_ACC32_AT(d, 32)
#define ROOFLINT_WGMMA_ACC96(d) ROOFLINT_WGMMA_ACC64(d), ROOFLINT_WGMMA_ACC32_AT(d, 64)
#define ROOFLINT_WGMMA_ACC128(d) ROOFLINT_WGMMA_ACC96(d), ROOFLINT_WGMMA_ACC32_AT(d, 96)

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// A shared-memory store, kept in program order with the wgmma waits and barriers around it.
__device__ __forceinline__ void st_shared_v2(uint32_t addr, float a, float b) {
  asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(addr), "f"(a), "f"(b) : "memory");
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

// Host: [planes, rows, cols] of 16-bit T, row-major and dense, as a 3-D tensor map (cols innermost)
// whose boxes are [box_rows x 64 columns], one plane deep, with the 128-byte swizzle that
// desc_k_major / desc_mn_major assume. A box past a plane's last row or column reads zeros, so a
// ragged tile never touches the next plane. cols must be a multiple of 8 (16-byte rows).
// Returns cudaSuccess, cudaErrorNotSupported (a driver without the encoder) or cudaErrorInvalidValue
// (a layout the encoder refuses).
template <typename T>
cudaError_t rooflint_tensor_map_rows(CUtensorMap* map, const void* base, long long planes, long long rows, long long cols,
                              int box_rows) {
  const auto encode = rooflint_tensor_map_encoder();
  if (encode == nullptr) return cudaErrorNotSupported;
  const CUtensorMapDataType type =
      std::is_same_v<T, __nv_bfloat16> ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  const cuuint64_t dims[3] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows),
                              static_cast<cuuint64_t>(planes)};
  const cuuint64_t strides[2] = {static_cast<cuuint64_t>(cols) * sizeof(T),
                                 static_cast<cuuint64_t>(rows) * cols * sizeof(T)};
  const cuuint32_t box[3] = {64, static_cast<cuuint32_t>(box_rows), 1};
  const cuuint32_t steps[3] = {1, 1, 1};
  const CUresult made =
      encode(map, type, 3, const_cast<void*>(base), dims, strides, box, steps, CU_TENSOR_MAP_INTERLEAVE_NONE,
             CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return made == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}
