// Whole rows staged in shared memory by the copy engine (sm_90+), for the row-wise memory-bound
// kernels (softmax, layernorm). Why: a kernel that holds its row in registers keeps only as many
// rows in flight as its registers allow (two 32 KB softmax rows an SM), and none while it reduces
// the row behind barriers. The H200 streams 1.48x the H100's bytes with the same 132 SMs and about
// the same latency, so it needs 1.48x the bytes in flight per SM (Little's law); there those
// kernels ran at 0.86-0.88 of the read ceiling against a copy's 0.95 (reports/h200/ncu-round18).
// Here a persistent block keeps `slots` rows in flight: one thread asks the copy engine for each
// row (cp.async.bulk, one instruction a row, no registers held), the block works on the oldest
// while the rest arrive, and the slot is refilled as soon as every thread is done with it.
// Round 21's probe (scripts/device/row_staging.py), not a rooflint kernel: on the H200 these ran
// slower than the register kernels (reports/h200/probe-round21), so they stay here, reproducible.
#pragma once
#include "rooflint/hopper.cuh"

// Bytes of dynamic shared memory ahead of the rows: the slots' mbarriers (at most kMaxRowSlots),
// padded so each row starts 128-byte aligned.
constexpr int kRowRingHeader = 128;
constexpr int kMaxRowSlots = 16;

#ifdef ROOFLINT_SM90A
namespace rooflint_rows {

// A bulk copy (no tensor map): `bytes` contiguous bytes, a multiple of 16 from 16-byte-aligned
// addresses, into shared memory, counted toward bar like a TMA box.
__device__ __forceinline__ void bulk_load(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
               "l"(reinterpret_cast<uint64_t>(src)), "r"(bytes), "r"(bar)
               : "memory");
}

// Runs body(row_in_shared, row_index) on rows blockIdx.x, +gridDim.x, ... of x [rows, cols]; the
// caller guarantees cols * sizeof(T) is a multiple of 16 and x is 16-byte aligned (bulk copies).
// Every thread of the block calls it; body sees the row only until it returns.
template <typename T, typename Body>
__device__ __forceinline__ void for_each_staged_row(const T* __restrict__ x, long long rows, long long cols, int slots,
                                                    Body body) {
  using namespace rooflint_hopper;
  extern __shared__ __align__(128) unsigned char ring[];
  uint64_t* bars = reinterpret_cast<uint64_t*>(ring);
  T* data = reinterpret_cast<T*>(ring + kRowRingHeader);
  const uint32_t bytes = static_cast<uint32_t>(cols * static_cast<long long>(sizeof(T)));
  const long long first = blockIdx.x, stride = gridDim.x;
  const long long mine = first < rows ? (rows - 1 - first) / stride + 1 : 0;
  auto fill = [&](int slot, long long i) {
    const uint32_t bar = smem_addr(bars + slot);
    mbar_arrive_expect_tx(bar, bytes);
    bulk_load(smem_addr(data + slot * cols), x + (first + i * stride) * cols, bytes, bar);
  };
  if (threadIdx.x == 0) {
    for (int s = 0; s < slots; ++s) mbar_init(smem_addr(bars + s), 1);
    mbar_init_fence();
  }
  __syncthreads();
  if (threadIdx.x == 0)
    for (int s = 0; s < slots && s < mine; ++s) fill(s, s);
  for (long long i = 0; i < mine; ++i) {
    const int slot = static_cast<int>(i % slots);
    mbar_wait(smem_addr(bars + slot), static_cast<uint32_t>((i / slots) & 1));
    body(data + slot * cols, first + i * stride);
    __syncthreads();  // every thread is done reading the slot before the copy engine refills it
    if (threadIdx.x == 0 && i + slots < mine) fill(slot, i + slots);
  }
}

}  // namespace rooflint_rows
#endif  // ROOFLINT_SM90A

// Host: the persistent grid of a staged kernel and its shared memory, or 0 blocks where it cannot
// run (before sm_90, a row over the bulk copy's limits, or not even one block of `slots` rows fits).
struct StagedLaunch {
  unsigned int blocks = 0;
  size_t shared = 0;
};

template <typename Kernel>
inline StagedLaunch staged_launch(Kernel kernel, long long rows, long long row_bytes, int slots, int threads) {
  StagedLaunch out;
  int device = 0, major = 0, sms = 0, optin = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess)
    return out;
  if (major < 9 || slots < 1 || slots > kMaxRowSlots || row_bytes % 16 != 0 || row_bytes >= (1LL << 20)) return out;
  const long long shared = kRowRingHeader + static_cast<long long>(slots) * row_bytes;
  if (shared > optin) return out;
  if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shared)) !=
      cudaSuccess)
    return out;
  int per_sm = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, static_cast<size_t>(shared)) !=
          cudaSuccess ||
      per_sm < 1)
    return out;
  const long long grid = static_cast<long long>(per_sm) * sms;
  out.blocks = static_cast<unsigned int>(rows < grid ? rows : grid);
  out.shared = static_cast<size_t>(shared);
  return out;
}
