// Row-wise softmax of a [rows, cols] tensor, one block per row.
// Memory-bound (5 FLOPs per 4 bytes in bf16). Rows up to 32768 columns stay in registers from
// load to store, so each element is read once and written once, the floor. What bounds speed is
// bytes in flight per SM, i.e. rows resident per SM: at 16384 bf16 columns a 512-thread block
// (32 elements a thread) takes 63 registers, so two blocks fit per SM (64 KB of loads in flight)
// and reach ~3.0 TB/s on the H100; 1024 threads x 16 needs 43 registers, one block per SM, and
// falls to ~2.1 TB/s. exp is computed twice (sum, then output) rather than held in fp32
// registers: the MUFU time it costs hides under the memory time.
// Wider rows take a looped kernel: an online max/sum pass, then a second read to write.
#include <math.h>

#include "rooflint/common.cuh"

constexpr float kLog2e = 1.4426950408889634f;

// All threads get the block-wide result. Each reduction has its own shared slots, so two
// back-to-back reductions need no barrier between them. blockDim.x is a multiple of 32.
template <bool kMax>
__device__ __forceinline__ float block_reduce(float v, float* slots) {
  v = kMax ? warp_max(v) : warp_sum(v);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) slots[warp] = v;
  __syncthreads();
  const float identity = kMax ? -INFINITY : 0.0f;
  v = lane < static_cast<int>(blockDim.x >> 5) ? slots[lane] : identity;
  return kMax ? warp_max(v) : warp_sum(v);
}

// exp(x - max) as one FMA and one ex2: the max is pre-scaled by log2(e) once per row.
__device__ __forceinline__ float exp_shifted(float x, float max_log2) { return exp2f(fmaf(x, kLog2e, -max_log2)); }

// kEpt elements a thread, in chunks of kWidth (16-byte vectors when kWidth == Vec<T>::kSize).
// Chunk k of thread t starts at element (t + k * blockDim.x) * kWidth: coalesced across the warp.
// Storage is always whole 16-byte vectors; with compile-time indices it all lives in registers.
template <typename T, int kEpt, int kWidth>
__global__ void __launch_bounds__(kEpt >= 64 ? 512 : 1024)
    softmax_registers_kernel(const T* __restrict__ x, T* __restrict__ y, int cols) {
  constexpr int kV = Vec<T>::kSize, kChunks = kEpt / kWidth;
  static_assert(kEpt % kV == 0, "whole vectors per thread");
  __shared__ float max_slots[32], sum_slots[32];
  const T* row_x = x + blockIdx.x * static_cast<long long>(cols);
  T* row_y = y + blockIdx.x * static_cast<long long>(cols);
  const T pad = from_float<T>(-INFINITY);  // exp(-inf) = 0: padding adds nothing
  AlignedVec<T> raw[kEpt / kV];
  // Every load is issued before any is used: the whole row's worth of bytes in flight at once.
#pragma unroll
  for (int k = 0; k < kChunks; ++k) {
    const int start = (threadIdx.x + k * blockDim.x) * kWidth;  // int: cols <= 32768 here
    if constexpr (kWidth == kV) {
      if (start < cols) {
        raw[k] = load_vec(row_x + start);
      } else {
#pragma unroll
        for (int j = 0; j < kV; ++j) raw[k].v[j] = pad;
      }
    } else {
      raw[k / kV].v[k % kV] = start < cols ? row_x[start] : pad;
    }
  }
  float m = -INFINITY;
#pragma unroll
  for (int i = 0; i < kEpt; ++i) m = fmaxf(m, to_float(raw[i / kV].v[i % kV]));
  const float max_log2 = block_reduce<true>(m, max_slots) * kLog2e;
  float s = 0.0f;
#pragma unroll
  for (int i = 0; i < kEpt; ++i) s += exp_shifted(to_float(raw[i / kV].v[i % kV]), max_log2);
  const float inv = 1.0f / block_reduce<false>(s, sum_slots);
#pragma unroll
  for (int k = 0; k < kChunks; ++k) {
    const int start = (threadIdx.x + k * blockDim.x) * kWidth;
    if (start >= cols) continue;
    if constexpr (kWidth == kV) {
      AlignedVec<T> out;
#pragma unroll
      for (int j = 0; j < kV; ++j) out.v[j] = from_float<T>(exp_shifted(to_float(raw[k].v[j]), max_log2) * inv);
      store_vec(row_y + start, out);
    } else {
      row_y[start] = from_float<T>(exp_shifted(to_float(raw[k / kV].v[k % kV]), max_log2) * inv);
    }
  }
}

// Any width: pass 1 keeps a per-thread running max m and a sum s rescaled whenever m grows
// (online softmax), merged across the block; pass 2 re-reads the row to write. The re-read
// mostly hits L2: only a few rows per SM are in flight, far less than the 50 MB L2.
template <typename T, int kWidth>
__global__ void __launch_bounds__(1024) softmax_looped_kernel(const T* __restrict__ x, T* __restrict__ y,
                                                              long long cols) {
  __shared__ float max_slots[32], sum_slots[32];
  const T* row_x = x + blockIdx.x * cols;
  T* row_y = y + blockIdx.x * cols;
  const long long step = static_cast<long long>(blockDim.x) * kWidth;
  float m = -INFINITY, s = 0.0f;
  for (long long start = threadIdx.x * static_cast<long long>(kWidth); start < cols; start += step) {
    float v[kWidth];
    if constexpr (kWidth == Vec<T>::kSize) {
      const AlignedVec<T> chunk = load_vec(row_x + start);
#pragma unroll
      for (int j = 0; j < kWidth; ++j) v[j] = to_float(chunk.v[j]);
    } else {
      v[0] = to_float(row_x[start]);
    }
    float chunk_max = v[0];
#pragma unroll
    for (int j = 1; j < kWidth; ++j) chunk_max = fmaxf(chunk_max, v[j]);
    const float m_new = fmaxf(m, chunk_max);
    // One rescale per chunk, not per element: kWidth + 1 exps for kWidth elements.
    s *= exp2f((m - m_new) * kLog2e);  // m = -inf on the first chunk: s = 0 * 0
#pragma unroll
    for (int j = 0; j < kWidth; ++j) s += exp_shifted(v[j], m_new * kLog2e);
    m = m_new;
  }
  const float row_max = block_reduce<true>(m, max_slots);
  const float max_log2 = row_max * kLog2e;
  const float mine = m == -INFINITY ? 0.0f : s * exp2f((m - row_max) * kLog2e);  // threads with no data
  const float inv = 1.0f / block_reduce<false>(mine, sum_slots);
  for (long long start = threadIdx.x * static_cast<long long>(kWidth); start < cols; start += step) {
    if constexpr (kWidth == Vec<T>::kSize) {
      const AlignedVec<T> chunk = load_vec(row_x + start);
      AlignedVec<T> out;
#pragma unroll
      for (int j = 0; j < kWidth; ++j) out.v[j] = from_float<T>(exp_shifted(to_float(chunk.v[j]), max_log2) * inv);
      store_vec(row_y + start, out);
    } else {
      row_y[start] = from_float<T>(exp_shifted(to_float(row_x[start]), max_log2) * inv);
    }
  }
}

constexpr int kMaxThreads = 1024;
constexpr int kMaxRegisterCols = 32768;  // 1024 threads x 32 or 512 x 64 elements
enum SoftmaxMode { kAuto = 0, kRegisters = 1, kLooped = 2 };

template <typename T, int kWidth>
static int launch_registers(const T* in, T* out, long long rows, long long cols, long long threads,
                            cudaStream_t stream) {
  const unsigned int grid = static_cast<unsigned int>(rows);
  // Threads: the hint, or enough for about 32 elements each (16384 cols: 512 threads).
  if (threads <= 0) {
    threads = 128;
    while (threads < kMaxThreads && threads * 32 < cols) threads *= 2;
  }
  const int n = static_cast<int>(cols);
  if (threads * 8 >= cols) {
    softmax_registers_kernel<T, 8, kWidth><<<grid, threads, 0, stream>>>(in, out, n);
  } else if (threads * 16 >= cols) {
    softmax_registers_kernel<T, 16, kWidth><<<grid, threads, 0, stream>>>(in, out, n);
  } else if (threads * 32 >= cols) {
    softmax_registers_kernel<T, 32, kWidth><<<grid, threads, 0, stream>>>(in, out, n);
  } else if (threads <= 512 && threads * 64 >= cols) {
    softmax_registers_kernel<T, 64, kWidth><<<grid, threads, 0, stream>>>(in, out, n);
  } else {
    return static_cast<int>(cudaErrorInvalidValue);  // the block cannot hold the row
  }
  return 0;
}

template <typename T, int kWidth>
static int launch_softmax(const void* x, void* y, long long rows, long long cols, long long threads,
                          long long mode, cudaStream_t stream) {
  const T* in = static_cast<const T*>(x);
  T* out = static_cast<T*>(y);
  if (mode == kAuto) mode = cols <= kMaxRegisterCols ? kRegisters : kLooped;
  if (mode == kRegisters) return launch_registers<T, kWidth>(in, out, rows, cols, threads, stream);
  softmax_looped_kernel<T, kWidth><<<static_cast<unsigned int>(rows), threads > 0 ? threads : kMaxThreads, 0, stream>>>(
      in, out, cols);
  return 0;
}

// threads: block size (a multiple of 32, at most 1024; 0 picks one). mode: 0 picks the path by
// row width, 1 registers, 2 the looped two-pass kernel (any width).
extern "C" int rooflint_softmax(const void* x, void* y, long long rows, long long cols, long long dtype,
                                long long threads, long long mode, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return 0;
  if (rows > 0x7fffffffLL || threads < 0 || threads > kMaxThreads || threads % 32 != 0 || mode < 0 || mode > 2) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  int status = 0;
  ROOFLINT_DISPATCH(dtype, T, {
    // 16-byte vectors need every row start aligned: cols a multiple of the vector, aligned bases.
    if (cols % Vec<T>::kSize == 0 && aligned16(x) && aligned16(y)) {
      status = launch_softmax<T, Vec<T>::kSize>(x, y, rows, cols, threads, mode, stream);
    } else {
      status = launch_softmax<T, 1>(x, y, rows, cols, threads, mode, stream);
    }
  });
  return status != 0 ? status : static_cast<int>(cudaGetLastError());
}
