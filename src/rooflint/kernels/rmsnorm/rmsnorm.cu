// RMSNorm forward over the last dim, y = h * rsqrt(mean(h^2) + eps) * w, where h = x, or, with a
// residual, h = x + residual, which is also written out (the next layer's residual stream).
// Memory-bound (~5 FLOPs per 4-8 bytes moved in 16-bit types), so the fast path keeps the whole row
// in registers as 16-byte vectors: x (and the residual) are read once, y (and h) written once. A
// block holds one or more rows, each owned by a whole number of warps. Rows of odd width (unaligned
// starts) or too wide for one block's registers take the general path, one block per row, which
// reads the row a second time (h, from L2 where the rows in flight fit).
#include "rooflint/common.cuh"

constexpr int kMaxThreads = 1024;
// Eight 16-byte vectors a thread are 32 registers of row alone: at 1,024 threads a block (64
// registers a thread) the bf16 kernel spills, so the 8-vector kernel is built for at most 512.
constexpr int max_threads(int vecs) { return vecs >= 8 ? 512 : kMaxThreads; }

// Block-wide sum, valid in every thread. `scratch` holds one float per warp.
__device__ __forceinline__ float rms_block_sum(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
  v = warp_sum(v);
  __syncthreads();  // the previous call's readers are done with scratch
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : 0.f;
  return warp_sum(v);
}

// Sum over the `warps_per_row` warps from `first_warp` on, the ones that own this thread's row,
// valid in each of them: each warp's sum, then those added in warp order. One barrier: the
// block's rows exchange their warp sums through disjoint slots of `scratch`.
__device__ __forceinline__ float rms_row_sum(float v, float* scratch, int warps_per_row, int first_warp) {
  v = warp_sum(v);
  if (warps_per_row == 1) return v;
  if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = v;
  __syncthreads();
  float total = 0.f;
  if (warps_per_row % 4 == 0) {
    // first_warp is then a multiple of 4 too: four sums a 16-byte shared load, added in the same order.
#pragma unroll 1
    for (int k = 0; k < warps_per_row; k += 4) {
      const float4 s = *reinterpret_cast<const float4*>(scratch + first_warp + k);
      total += s.x;
      total += s.y;
      total += s.z;
      total += s.w;
    }
  } else {
#pragma unroll 1
    for (int k = 0; k < warps_per_row; ++k) total += scratch[first_warp + k];
  }
  return total;
}

// h = x + residual, rounded to T (the next layer reads the rounded sum, so it is also what gets
// normalized), written to h and returned in `in`.
template <typename T, int kVecs, bool kMasked>
__device__ __forceinline__ void rms_add_residual(uint4 (&in)[kVecs], const uint4* residual, uint4* h,
                                                 unsigned stride, const bool (&valid)[kVecs]) {
  constexpr int kVec = Vec<T>::kSize;
  uint4 r[kVecs];
  load_vecs<kMasked>(r, residual, stride, valid);
#pragma unroll
  for (int k = 0; k < kVecs; ++k) {
    float a[kVec], b[kVec];
    vec_to_float<T>(in[k], a);
    vec_to_float<T>(r[k], b);
#pragma unroll
    for (int j = 0; j < kVec; ++j) a[j] = a[j] + b[j];
    in[k] = vec_from_float<T>(a);
    if (!kMasked || valid[k]) h[k * stride] = in[k];
  }
}

// y = h * rstd * w, element by element in that order, rounded to T.
template <typename T, int kVecs, bool kMasked>
__device__ __forceinline__ void rms_write(const uint4 (&in)[kVecs], const uint4* w, uint4* y, unsigned stride,
                                          const bool (&valid)[kVecs], float rstd) {
  constexpr int kVec = Vec<T>::kSize;
#pragma unroll
  for (int k = 0; k < kVecs; ++k) {
    if (kMasked && !valid[k]) continue;
    // w is re-read by every row: it stays in L1/L2, only the rows touch HBM.
    float v[kVec], vw[kVec];
    vec_to_float<T>(in[k], v);
    vec_to_float<T>(__ldg(w + k * stride), vw);
#pragma unroll
    for (int j = 0; j < kVec; ++j) v[j] = v[j] * rstd * vw[j];
    y[k * stride] = vec_from_float<T>(v);
  }
}

// At [16384, 4096] bf16 on an H200 this kernel is only just memory-bound, with the SM's issue slots
// the limiter at fixed clocks, so the work a vector is kept to its arithmetic: the row's start is
// one 64-bit product a thread and each vector inside it a 32-bit index; 16-bit pairs convert a
// word at a time. A thread whose vectors all lie in the row (every thread, where the row's vectors
// are a multiple of the block's) runs with no bounds checks at all; the others mask theirs.
// Masked vectors load as zeros, and a zero adds +0 to the non-negative sum of squares, which
// leaves its bits as they are.
template <typename T, int kVecs, bool kResidual>
__global__ void __launch_bounds__(max_threads(kVecs))
    rmsnorm_fast_kernel(const T* __restrict__ x, const T* __restrict__ residual, const T* __restrict__ w,
                        T* __restrict__ y, T* __restrict__ h_out, long long rows, int hidden, int threads_per_row,
                        int rows_per_block, float eps) {
  __shared__ alignas(16) float scratch[32];
  constexpr int kVec = Vec<T>::kSize;
  const int vectors = hidden / kVec;
  // The default block is one row: the division by the (runtime) row width is taken only when the
  // launcher packed several rows, on a branch every thread of the block takes alike.
  unsigned sub = 0, lane = threadIdx.x;
  const unsigned stride = threads_per_row;
  if (rows_per_block > 1) {
    sub = threadIdx.x / stride;
    lane = threadIdx.x - sub * stride;
  }
  const long long row = static_cast<long long>(blockIdx.x) * rows_per_block + sub;
  // A block's last rows may lie past the end; their threads still reach the barrier below.
  const bool live = row < rows;
  const size_t start = static_cast<size_t>(live ? row : 0) * static_cast<size_t>(hidden);
  const uint4* x_row = reinterpret_cast<const uint4*>(x + start) + lane;
  const uint4* w_row = reinterpret_cast<const uint4*>(w) + lane;
  uint4* y_row = reinterpret_cast<uint4*>(y + start) + lane;
  bool valid[kVecs];
#pragma unroll
  for (int k = 0; k < kVecs; ++k) valid[k] = live && static_cast<int>(lane + k * stride) < vectors;
  const bool full = valid[kVecs - 1];
  // Every load of the row is issued before the first add: kVecs x 16 B in flight per thread.
  uint4 in[kVecs];
  if (full) {
    load_vecs<false>(in, x_row, stride, valid);
  } else {
    load_vecs<true>(in, x_row, stride, valid);
  }
  if constexpr (kResidual) {
    const uint4* r_row = reinterpret_cast<const uint4*>(residual + start) + lane;
    uint4* h_row = reinterpret_cast<uint4*>(h_out + start) + lane;
    if (full) {
      rms_add_residual<T, kVecs, false>(in, r_row, h_row, stride, valid);
    } else {
      rms_add_residual<T, kVecs, true>(in, r_row, h_row, stride, valid);
    }
  }
  float squares = 0.f;
#pragma unroll
  for (int k = 0; k < kVecs; ++k) {
    float v[kVec];
    vec_to_float<T>(in[k], v);
#pragma unroll
    for (int j = 0; j < kVec; ++j) squares += v[j] * v[j];
  }
  const int warps_per_row = threads_per_row >> 5;
  const float rstd = rsqrtf(rms_row_sum(squares, scratch, warps_per_row, static_cast<int>(sub) * warps_per_row) /
                                static_cast<float>(hidden) +
                            eps);
  if (full) {
    rms_write<T, kVecs, false>(in, w_row, y_row, stride, valid, rstd);
  } else {
    rms_write<T, kVecs, true>(in, w_row, y_row, stride, valid, rstd);
  }
}

template <typename T, bool kResidual>
__global__ void rmsnorm_general_kernel(const T* __restrict__ x, const T* __restrict__ residual,
                                       const T* __restrict__ w, T* __restrict__ y, T* __restrict__ h_out,
                                       long long hidden, float eps) {
  __shared__ float scratch[32];
  const long long base = blockIdx.x * hidden;
  float squares = 0.f;
  for (long long i = threadIdx.x; i < hidden; i += blockDim.x) {
    T h = x[base + i];
    if constexpr (kResidual) {
      h = from_float<T>(to_float(h) + to_float(residual[base + i]));
      h_out[base + i] = h;
    }
    const float v = to_float(h);
    squares += v * v;
  }
  const float rstd = rsqrtf(rms_block_sum(squares, scratch) / static_cast<float>(hidden) + eps);
  // Each thread re-reads the elements it wrote itself, so h needs no barrier before this pass.
  const T* h = kResidual ? h_out : x;
  for (long long i = threadIdx.x; i < hidden; i += blockDim.x)
    y[base + i] = from_float<T>(to_float(h[base + i]) * rstd * to_float(w[i]));
}

template <typename T, int kVecs, bool kResidual>
static void launch_fast(const void* x, const void* residual, const void* w, void* y, void* h, long long rows,
                        long long hidden, int threads_per_row, int rows_per_block, float eps, cudaStream_t stream) {
  const long long blocks = (rows + rows_per_block - 1) / rows_per_block;
  rmsnorm_fast_kernel<T, kVecs, kResidual>
      <<<static_cast<unsigned int>(blocks), threads_per_row * rows_per_block, 0, stream>>>(
          static_cast<const T*>(x), static_cast<const T*>(residual), static_cast<const T*>(w), static_cast<T*>(y),
          static_cast<T*>(h), rows, static_cast<int>(hidden), threads_per_row, rows_per_block, eps);
}

template <typename T, bool kResidual>
static void launch(const void* x, const void* residual, const void* w, void* y, void* h, long long rows,
                   long long hidden, long long threads_per_row, long long block_threads, float eps,
                   cudaStream_t stream) {
  constexpr int kVec = Vec<T>::kSize;
  const long long vectors = hidden / kVec;
  bool vectorizable = hidden % kVec == 0 && aligned16(x) && aligned16(w) && aligned16(y);
  if (kResidual) vectorizable = vectorizable && aligned16(residual) && aligned16(h);
  // `target` threads a row, each with up to 8 vectors; wider rows grow the row's threads up to 1024.
  // 128 by default: 16 blocks per SM then keep 16 rows of loads in flight. With the residual, 256: a
  // thread then holds x and the residual, twice the registers a vector, and the wider row with half
  // the vectors a thread keeps more warps resident (2.4% faster at [16384, 4096] bf16 on an H200,
  // where 128 was the best without it). A block of `block_threads` (default: one row's) holds as
  // many whole rows as fit.
  const long long target = threads_per_row > 0 ? threads_per_row : (kResidual ? 256 : 128);
  int vecs = 1;
  while (vecs < 8 && (vectors + vecs - 1) / vecs > target) vecs *= 2;
  long long per_row = ((vectors + vecs - 1) / vecs + 31) / 32 * 32;
  if (per_row < 32) per_row = 32;
  const long long limit = max_threads(vecs);
  if (vectorizable && per_row <= limit) {
    const int t = static_cast<int>(per_row);
    const long long fit = block_threads > per_row ? block_threads / per_row : 1;
    const int rows_per_block = static_cast<int>(fit * per_row > limit ? limit / per_row : fit);
    switch (vecs) {
      case 1: launch_fast<T, 1, kResidual>(x, residual, w, y, h, rows, hidden, t, rows_per_block, eps, stream); break;
      case 2: launch_fast<T, 2, kResidual>(x, residual, w, y, h, rows, hidden, t, rows_per_block, eps, stream); break;
      case 4: launch_fast<T, 4, kResidual>(x, residual, w, y, h, rows, hidden, t, rows_per_block, eps, stream); break;
      default: launch_fast<T, 8, kResidual>(x, residual, w, y, h, rows, hidden, t, rows_per_block, eps, stream); break;
    }
  } else {
    // Small rows get one warp; wide ones a full block so each thread's strided loop stays short.
    const long long want = (hidden + 31) / 32 * 32;
    const int t = static_cast<int>(want < 1024 ? want : 1024);
    rmsnorm_general_kernel<T, kResidual><<<static_cast<unsigned int>(rows), t, 0, stream>>>(
        static_cast<const T*>(x), static_cast<const T*>(residual), static_cast<const T*>(w), static_cast<T*>(y),
        static_cast<T*>(h), hidden, eps);
  }
}

// residual and h: null without the residual add; with it, h = x + residual is written (rows x hidden).
// threads_per_row and block_threads: 0 for the defaults; a device sweep passes others to pick them.
extern "C" int rooflint_rmsnorm(const void* x, const void* residual, const void* w, void* y, void* h, long long rows,
                                long long hidden, long long threads_per_row, long long block_threads,
                                long long dtype, float eps, cudaStream_t stream) {
  if (rows < 1 || hidden < 1 || rows > 0x7fffffffLL) return static_cast<int>(cudaErrorInvalidValue);
  if ((residual == nullptr) != (h == nullptr)) return static_cast<int>(cudaErrorInvalidValue);
  ROOFLINT_DISPATCH(dtype, T, {
    if (residual != nullptr) launch<T, true>(x, residual, w, y, h, rows, hidden, threads_per_row, block_threads, eps, stream);
    else launch<T, false>(x, residual, w, y, h, rows, hidden, threads_per_row, block_threads, eps, stream);
  });
  return static_cast<int>(cudaGetLastError());
}
