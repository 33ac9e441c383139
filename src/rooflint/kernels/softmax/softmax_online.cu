// Row-wise softmax of a [rows, cols] tensor, one block per row, the row staged in shared memory by
// cp.async and reduced in ONE block-wide step: each thread reduces its own elements to a pair
// (max, sum of exp(x - max)), and the pairs merge across the block with the rescale
// s = s_a exp(m_a - m) + s_b exp(m_b - m). softmax.cu reduces the max, then the sum: two block
// reductions with their barriers between a row's load and its store.
//
// Why shared memory and not registers (the hardware reason). A memory-bound kernel runs at the DRAM
// roof only with enough bytes in flight per SM, i.e. rows resident per SM. A load into registers pins
// its destination registers from issue until use, so a register-held row costs the register file its
// packed bytes plus each thread's working registers: softmax.cu's 512-thread block takes 63
// registers a thread and two 32 KB rows fit an SM. cp.async.cg copies global -> shared memory
// without passing through the register file (or L1): a thread issues all its 16-byte copies back to
// back holding only addresses, so the kernel needs few registers and the rows resident per SM are
// set by shared memory alone: six 32 KB rows (bf16, 16384 columns, 128 threads) in Hopper's 228 KB,
// three of 72 KB at the widest staged row. The price is reading the row back from shared memory
// three times (max, sum, output): ~96 KB a 32 KB row at 128 B/clk, on a pipe the DRAM stream of
// the other resident rows does not use.
//
// Vector q of the stage belongs to thread q % blockDim.x, which copies it and is the only thread to
// read it: its own cp.async.wait_group makes it visible, with no barrier. The block's one barrier is
// the merge of the warps' pairs.
#include <math.h>

#include <type_traits>

#include "rooflint/common.cuh"

constexpr float kLog2e = 1.4426950408889634f;
constexpr int kMaxThreads = 256;
constexpr int kMaxWarps = kMaxThreads / 32;
// The largest stage a block takes: three blocks (and their 1 KB reserve each) fit Hopper's 227 KB.
constexpr int kMaxStageBytes = 72 * 1024;

// A (max, sum) pair in log2 units: m2 = max * log2(e), s = sum of exp2(x log2(e) - m2). Carrying the
// scaled max keeps every exp2 argument one FMA, and a rescale is the exp2 of a difference of the very
// m2 values the sums were taken against (no second rounding of max * log2(e)). exp2 is ex2.approx.ftz
// (one MUFU op, within a few ulp, results under 2^-126 flushed to 0): inside even fp32's
// tolerance against the float64 reference.
struct MaxSum {
  float m2, s;
};

// exp2's shift for a max of -inf (no finite element seen) is 0: exp2(-inf - 0) = 0 where
// exp2(-inf + inf) would be NaN. A row of all -inf still ends in NaN at the output, as torch's
// float64 softmax (the family's reference) and softmax.cu give.
__device__ __forceinline__ float finite_shift(float m2) { return m2 == -INFINITY ? 0.0f : m2; }

__device__ __forceinline__ MaxSum merge(MaxSum a, MaxSum b) {
  const float m2 = fmaxf(a.m2, b.m2);
  const float shift = finite_shift(m2);
  return {m2, a.s * fast_exp2(a.m2 - shift) + b.s * fast_exp2(b.m2 - shift)};
}

__device__ __forceinline__ MaxSum warp_merge(MaxSum pair) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    pair = merge(pair, {__shfl_xor_sync(0xffffffffu, pair.m2, offset), __shfl_xor_sync(0xffffffffu, pair.s, offset)});
  }
  return pair;
}

// One 16-byte vector global -> shared. sm_80+: cp.async, no register holds the data in flight.
// sm_75 has no cp.async: a load into registers and a store, the same program otherwise.
template <typename T>
__device__ __forceinline__ void stage16(AlignedVec<T>* dst, const AlignedVec<T>* src) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  cp_async16(static_cast<uint32_t>(__cvta_generic_to_shared(dst)), src, true);
#else
  *dst = load_vec(src->v);
#endif
}

// A stage vector's kV values as fp32 (common.cuh's vec_to_float: one integer op a bf16 element).
template <typename T>
__device__ __forceinline__ void unpack_stage(const AlignedVec<T>& v, float (&out)[Vec<T>::kSize]) {
  vec_to_float<T>(*reinterpret_cast<const uint4*>(&v), out);
}

// fp32 -> one vector of T (vec_from_float: 16-bit types round two values with one F2FP).
template <typename T>
__device__ __forceinline__ AlignedVec<T> pack_stage(const float (&in)[Vec<T>::kSize]) {
  AlignedVec<T> out;
  *reinterpret_cast<uint4*>(&out) = vec_from_float<T>(in);
  return out;
}

// The thread's max over its stage vectors. 16-bit data compares two values an instruction (HMNMX2)
// with no conversion; a max picks one of its inputs, so this is exact. Like fmaxf, __hmax2 returns
// the other input where one is NaN: a NaN reaches the row through the sum instead.
template <typename T>
__device__ __forceinline__ float thread_max(const AlignedVec<T>* stage, int vectors) {
  constexpr int kV = Vec<T>::kSize;
  float m = -INFINITY;
  if constexpr (std::is_same_v<T, float>) {
    float lane_max[kV];
#pragma unroll
    for (int j = 0; j < kV; ++j) lane_max[j] = -INFINITY;
#pragma unroll 4
    for (int q = threadIdx.x; q < vectors; q += blockDim.x) {
#pragma unroll
      for (int j = 0; j < kV; ++j) lane_max[j] = fmaxf(lane_max[j], stage[q].v[j]);
    }
#pragma unroll
    for (int j = 0; j < kV; ++j) m = fmaxf(m, lane_max[j]);
  } else {
    using T2 = std::conditional_t<std::is_same_v<T, __half>, __half2, __nv_bfloat162>;
    const T pad = from_float<T>(-INFINITY);
    T2 lane_max[kV / 2];
#pragma unroll
    for (int i = 0; i < kV / 2; ++i) lane_max[i] = T2{pad, pad};
#pragma unroll 4
    for (int q = threadIdx.x; q < vectors; q += blockDim.x) {
      const AlignedVec<T> v = stage[q];
      const T2* pairs = reinterpret_cast<const T2*>(&v);
#pragma unroll
      for (int i = 0; i < kV / 2; ++i) lane_max[i] = __hmax2(lane_max[i], pairs[i]);
    }
#pragma unroll
    for (int i = 0; i < kV / 2; ++i) m = fmaxf(m, fmaxf(to_float(lane_max[i].x), to_float(lane_max[i].y)));
  }
  return m;
}

template <typename T>
__global__ void __launch_bounds__(kMaxThreads) softmax_online_kernel(const T* __restrict__ x, T* __restrict__ y,
                                                                     int cols) {
  constexpr int kV = Vec<T>::kSize;
  extern __shared__ __align__(16) unsigned char stage_bytes[];
  AlignedVec<T>* stage = reinterpret_cast<AlignedVec<T>*>(stage_bytes);
  __shared__ MaxSum warp_pairs[kMaxWarps];
  const T* row_x = x + blockIdx.x * static_cast<long long>(cols);
  T* row_y = y + blockIdx.x * static_cast<long long>(cols);
  // The stage mirrors the row's 16-byte-aligned window: vector q holds row elements
  // [q kV - phase, q kV - phase + kV). Whole vectors go by cp.async; the one or two vectors at the
  // row's ragged ends (cols not a multiple of kV, or an unaligned base) go element by element, their
  // lanes outside the row set to -inf, so the max and sum loops need no masks.
  const int phase = static_cast<int>((reinterpret_cast<uintptr_t>(row_x) & 15) / sizeof(T));
  const int vectors = (cols + phase + kV - 1) / kV;
  // Pointer arithmetic, not an integer mask, so nvcc still knows these point to global memory
  // (STG/LDGSTS rather than generic ST).
  const AlignedVec<T>* window = reinterpret_cast<const AlignedVec<T>*>(row_x - phase);
  const T pad = from_float<T>(-INFINITY);
#pragma unroll 4
  for (int q = threadIdx.x; q < vectors; q += blockDim.x) {
    const int first = q * kV - phase;
    if (first >= 0 && first + kV <= cols) {
      stage16(&stage[q], &window[q]);
    } else {
      AlignedVec<T> edge;
#pragma unroll
      for (int j = 0; j < kV; ++j) edge.v[j] = first + j >= 0 && first + j < cols ? row_x[first + j] : pad;
      stage[q] = edge;
    }
  }
  cp_async_commit();  // every copy in one group: the thread's whole share of the row in flight at once
  cp_async_wait<0>();

  // This thread's max, then its sum against that max. Lane-wise partials: kV independent
  // dependency chains instead of one, so the loops are not bound by the HMNMX2/FADD latency.
  const float m = thread_max(stage, vectors);
  const float m2 = m * kLog2e, shift = finite_shift(m2);
  float lane_sum[kV];
#pragma unroll
  for (int j = 0; j < kV; ++j) lane_sum[j] = 0.0f;
#pragma unroll 4
  for (int q = threadIdx.x; q < vectors; q += blockDim.x) {
    float v[kV];
    unpack_stage(stage[q], v);
#pragma unroll
    for (int j = 0; j < kV; ++j) lane_sum[j] += fast_exp2(fmaf(v[j], kLog2e, -shift));
  }
  float s = 0.0f;
#pragma unroll
  for (int j = 0; j < kV; ++j) s += lane_sum[j];

  // The block's one reduction: warps merge by shuffles, lane 0 of each publishes its pair, and every
  // warp merges the published pairs itself (no second barrier, no broadcast slot).
  MaxSum pair = warp_merge({m2, s});
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) warp_pairs[warp] = pair;
  __syncthreads();
  pair = lane < static_cast<int>(blockDim.x >> 5) ? warp_pairs[lane] : MaxSum{-INFINITY, 0.0f};
  pair = warp_merge(pair);
  const float row_shift = pair.m2;  // -inf only for a row of -inf: NaN out, like the reference
  const float inv = 1.0f / pair.s;

  // Outputs from the stage, never a second global read: 16-byte stores where y's rows share x's
  // alignment within 16 bytes (always, for dense tensors from the allocator), element stores at the
  // ragged ends.
  const bool whole_vectors_out = ((reinterpret_cast<uintptr_t>(row_x) ^ reinterpret_cast<uintptr_t>(row_y)) & 15) == 0;
  AlignedVec<T>* out_window = reinterpret_cast<AlignedVec<T>*>(row_y - phase);  // aligned when whole_vectors_out
#pragma unroll 4
  for (int q = threadIdx.x; q < vectors; q += blockDim.x) {
    float v[kV];
    unpack_stage(stage[q], v);
#pragma unroll
    for (int j = 0; j < kV; ++j) v[j] = fast_exp2(fmaf(v[j], kLog2e, -row_shift)) * inv;
    const AlignedVec<T> out = pack_stage<T>(v);
    const int first = q * kV - phase;
    if (whole_vectors_out && first >= 0 && first + kV <= cols) {
      store_vec(out_window[q].v, out);
    } else {
#pragma unroll
      for (int j = 0; j < kV; ++j) {
        if (first + j >= 0 && first + j < cols) row_y[first + j] = out.v[j];
      }
    }
  }
}

// Stage vectors a block needs: cols / kV when every row starts 16-byte aligned, else one more for
// the worst phase.
template <typename T>
static long long stage_vectors(long long cols, bool aligned_rows) {
  constexpr long long kV = Vec<T>::kSize;
  return aligned_rows ? cols / kV : (cols + 2 * kV - 2) / kV;
}

// The largest stage this GPU gives one block: kMaxStageBytes, or less where the opt-in limit is lower
// (sm_75: 64 KB), less the static shared memory; 0 or minus a CUDA error.
static int stage_limit_bytes() {
  int device = 0, optin = 0;
  cudaError_t status = cudaGetDevice(&device);
  if (status == cudaSuccess) status = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
  if (status != cudaSuccess) return -static_cast<int>(status);
  const int limit = optin - static_cast<int>(sizeof(MaxSum)) * kMaxWarps;
  return limit < kMaxStageBytes ? limit : kMaxStageBytes;
}

// 32 threads up to 4 vectors each, doubling to 128; 256 for rows over 2048 vectors (32 KB): about
// 16 vectors a thread at the widths this kernel is for.
static int default_threads(long long vectors) {
  if (vectors > 128 * 16) return 256;
  int threads = 32;
  while (threads < 128 && threads * 4 < vectors) threads *= 2;
  return threads;
}

template <typename T>
static int launch_online(const void* x, void* y, long long rows, long long cols, long long threads,
                         cudaStream_t stream) {
  const bool aligned_rows = cols % Vec<T>::kSize == 0 && aligned16(x);
  const long long bytes = stage_vectors<T>(cols, aligned_rows) * 16;
  const int limit = stage_limit_bytes();
  if (limit < 0) return -limit;
  if (bytes > limit) return static_cast<int>(cudaErrorInvalidValue);  // wider rows: softmax.cu's looped kernel
  if (bytes > 48 * 1024) {  // past the default per-block limit: opt in (per launch, so per device)
    const cudaError_t status = cudaFuncSetAttribute(softmax_online_kernel<T>,
                                                    cudaFuncAttributeMaxDynamicSharedMemorySize, limit);
    if (status != cudaSuccess) return static_cast<int>(status);
  }
  const int block = threads > 0 ? static_cast<int>(threads) : default_threads(bytes / 16);
  softmax_online_kernel<T><<<static_cast<unsigned int>(rows), block, static_cast<size_t>(bytes), stream>>>(
      static_cast<const T*>(x), static_cast<T*>(y), static_cast<int>(cols));
  return 0;
}

// threads: block size (a multiple of 32, at most 256; 0 picks one). Rows wider than
// rooflint_softmax_online_max_cols are refused (cudaErrorInvalidValue).
extern "C" int rooflint_softmax_online(const void* x, void* y, long long rows, long long cols, long long dtype,
                                       long long threads, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return 0;
  if (rows > 0x7fffffffLL || cols > 0x7fffffffLL || threads < 0 || threads > kMaxThreads || threads % 32 != 0) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  int status = 0;
  ROOFLINT_DISPATCH(dtype, T, { status = launch_online<T>(x, y, rows, cols, threads, stream); });
  return status != 0 ? status : static_cast<int>(cudaGetLastError());
}

// The widest row this GPU stages for this dtype whatever the rows' alignment, or minus a CUDA error.
extern "C" int rooflint_softmax_online_max_cols(long long dtype) {
  if (dtype < kFloat32 || dtype > kBFloat16) return -static_cast<int>(cudaErrorInvalidValue);
  const int limit = stage_limit_bytes();
  if (limit < 0) return limit;
  int widest = 0;
  ROOFLINT_DISPATCH(dtype, T, {
    constexpr int kV = Vec<T>::kSize;
    widest = (limit / 16) * kV - (2 * kV - 2);
  });
  return widest;
}

// Blocks (rows) resident per SM for this width, dtype and block size (0: the default), or minus a
// CUDA error: what the device script reports beside its timings.
extern "C" int rooflint_softmax_online_rows_per_sm(long long cols, long long dtype, long long threads) {
  if (dtype < kFloat32 || dtype > kBFloat16 || cols <= 0 || cols > 0x7fffffffLL || threads < 0 ||
      threads > kMaxThreads || threads % 32 != 0) {
    return -static_cast<int>(cudaErrorInvalidValue);
  }
  int blocks = 0;
  cudaError_t status = cudaSuccess;
  ROOFLINT_DISPATCH(dtype, T, {
    const long long bytes = stage_vectors<T>(cols, cols % Vec<T>::kSize == 0) * 16;
    const int block = threads > 0 ? static_cast<int>(threads) : default_threads(bytes / 16);
    if (bytes > 48 * 1024) {
      status = cudaFuncSetAttribute(softmax_online_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(bytes));
    }
    if (status == cudaSuccess) {
      status = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, softmax_online_kernel<T>, block,
                                                             static_cast<size_t>(bytes));
    }
  });
  return status == cudaSuccess ? blocks : -static_cast<int>(status);
}
