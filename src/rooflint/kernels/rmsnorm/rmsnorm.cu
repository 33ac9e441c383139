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

// Sum over the `warps_per_row` warps that own this thread's row, valid in each of them. One barrier:
// the block's rows exchange their warp sums through disjoint slots of `scratch`.
__device__ __forceinline__ float rms_row_sum(float v, float* scratch, int warps_per_row) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = warp_sum(v);
  if (warps_per_row == 1) return v;
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  const int first = warp - warp % warps_per_row;
  float total = 0.f;
  for (int k = 0; k < warps_per_row; ++k) total += scratch[first + k];
  return total;
}

template <typename T, int kVecs, bool kResidual>
__global__ void __launch_bounds__(max_threads(kVecs))
    rmsnorm_fast_kernel(const T* __restrict__ x, const T* __restrict__ residual, const T* __restrict__ w,
                        T* __restrict__ y, T* __restrict__ h_out, long long rows, long long hidden,
                        int threads_per_row, float eps) {
  __shared__ float scratch[32];
  constexpr int kVec = Vec<T>::kSize;
  const long long vectors = hidden / kVec;
  const int rows_per_block = blockDim.x / threads_per_row;
  const long long row = static_cast<long long>(blockIdx.x) * rows_per_block + threadIdx.x / threads_per_row;
  // A block's last rows may lie past the end; their threads still reach the barrier below.
  const bool live = row < rows;
  const long long base = (live ? row : 0) * hidden;
  const int lane_in_row = threadIdx.x % threads_per_row;
  AlignedVec<T> in[kVecs];
  // Every load of the row is issued before the first add: kVecs x 16 B in flight per thread.
#pragma unroll
  for (int k = 0; k < kVecs; ++k) {
    const long long v = lane_in_row + static_cast<long long>(k) * threads_per_row;
    if (live && v < vectors) in[k] = load_vec(x + base + v * kVec);
  }
  if constexpr (kResidual) {
#pragma unroll
    for (int k = 0; k < kVecs; ++k) {
      const long long v = lane_in_row + static_cast<long long>(k) * threads_per_row;
      if (live && v < vectors) {
        const AlignedVec<T> r = load_vec(residual + base + v * kVec);
#pragma unroll
        for (int j = 0; j < kVec; ++j) in[k].v[j] = from_float<T>(to_float(in[k].v[j]) + to_float(r.v[j]));
        // The rounded sum is what the next layer reads, so it is also what gets normalized.
        store_vec(h_out + base + v * kVec, in[k]);
      }
    }
  }
  float squares = 0.f;
#pragma unroll
  for (int k = 0; k < kVecs; ++k)
    if (live && lane_in_row + static_cast<long long>(k) * threads_per_row < vectors)
#pragma unroll
      for (int j = 0; j < kVec; ++j) {
        const float v = to_float(in[k].v[j]);
        squares += v * v;
      }
  const float rstd =
      rsqrtf(rms_row_sum(squares, scratch, threads_per_row >> 5) / static_cast<float>(hidden) + eps);
#pragma unroll
  for (int k = 0; k < kVecs; ++k) {
    const long long v = lane_in_row + static_cast<long long>(k) * threads_per_row;
    if (live && v < vectors) {
      // w is re-read by every row: it stays in L1/L2, only the rows touch HBM.
      const AlignedVec<T> vw = load_vec(w + v * kVec);
      AlignedVec<T> out;
#pragma unroll
      for (int j = 0; j < kVec; ++j) out.v[j] = from_float<T>(to_float(in[k].v[j]) * rstd * to_float(vw.v[j]));
      store_vec(y + base + v * kVec, out);
    }
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
          static_cast<T*>(h), rows, hidden, threads_per_row, eps);
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
