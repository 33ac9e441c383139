// LayerNorm forward over the last dim, y = (x - mean) * rstd * w + b, optionally followed by tanh
// GELU (the layernorm_gelu family) and optionally saving mean and rstd for backward.
// One block per row. Memory-bound (~8 FLOPs per 4 bytes moved in bf16), so x is read from HBM
// exactly once: the fast path keeps the whole row in registers (kVecs 16-byte vectors per thread),
// which also makes the variance an exact two-pass one (mean first, then sum of squared deviations)
// at no extra traffic. Rows of odd width (unaligned starts) or too wide for one block's registers
// take the general path: scalar loads, Welford/Chan statistics, and a second read of x.
#include "rooflint/common.cuh"

constexpr int kMaxThreads = 1024;

// Block-wide sum, valid in every thread. `scratch` holds one float per warp.
__device__ __forceinline__ float ln_block_sum(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
  v = warp_sum(v);
  __syncthreads();  // the previous call's readers are done with scratch
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : 0.f;
  return warp_sum(v);
}

// The GELU epilogue (layernorm_gelu) runs on every element of a kernel that is only just
// memory-bound: common.cuh's gelu_tanh<T>, one MUFU op an element for 16-bit data. An IEEE divide
// there (a dozen instructions and a slow-path branch) had measurably slowed it.
template <typename T, bool kGelu>
__device__ __forceinline__ float epilogue(float v) {
  if constexpr (kGelu) {
    return gelu_tanh<T>(v);
  } else {
    return v;
  }
}

template <typename T, int kVecs, bool kGelu, bool kStats>
__global__ void __launch_bounds__(kMaxThreads) layernorm_fast_kernel(const T* __restrict__ x, const T* __restrict__ w,
                                                                       const T* __restrict__ b, T* __restrict__ y,
                                                                       float* __restrict__ mean_out,
                                                                       float* __restrict__ rstd_out, long long hidden,
                                                                       float eps) {
  __shared__ float scratch[32];
  constexpr int kVec = Vec<T>::kSize;
  const long long vectors = hidden / kVec;
  const long long base = blockIdx.x * hidden;
  AlignedVec<T> in[kVecs];
  // All of this thread's loads are issued before the first add, so each thread has kVecs x 16 B
  // in flight; x is streamed once, so bypassing L1 costs nothing (load_vec uses the read-only path).
#pragma unroll
  for (int k = 0; k < kVecs; ++k) {
    const long long v = threadIdx.x + static_cast<long long>(k) * blockDim.x;
    if (v < vectors) in[k] = load_vec(x + base + v * kVec);
  }
  float sum = 0.f;
#pragma unroll
  for (int k = 0; k < kVecs; ++k)
    if (threadIdx.x + static_cast<long long>(k) * blockDim.x < vectors)
#pragma unroll
      for (int j = 0; j < kVec; ++j) sum += to_float(in[k].v[j]);
  const float mean = ln_block_sum(sum, scratch) / static_cast<float>(hidden);
  float squares = 0.f;
#pragma unroll
  for (int k = 0; k < kVecs; ++k)
    if (threadIdx.x + static_cast<long long>(k) * blockDim.x < vectors)
#pragma unroll
      for (int j = 0; j < kVec; ++j) {
        const float d = to_float(in[k].v[j]) - mean;
        squares += d * d;
      }
  const float rstd = rsqrtf(ln_block_sum(squares, scratch) / static_cast<float>(hidden) + eps);
  if (kStats && threadIdx.x == 0) {
    mean_out[blockIdx.x] = mean;
    rstd_out[blockIdx.x] = rstd;
  }
#pragma unroll
  for (int k = 0; k < kVecs; ++k) {
    const long long v = threadIdx.x + static_cast<long long>(k) * blockDim.x;
    if (v < vectors) {
      // w and b are re-read by every row: they stay in L1/L2, only x and y touch HBM.
      const AlignedVec<T> vw = load_vec(w + v * kVec), vb = load_vec(b + v * kVec);
      AlignedVec<T> out;
#pragma unroll
      for (int j = 0; j < kVec; ++j) {
        const float n = (to_float(in[k].v[j]) - mean) * rstd;
        out.v[j] = from_float<T>(epilogue<T, kGelu>(n * to_float(vw.v[j]) + to_float(vb.v[j])));
      }
      store_vec(y + base + v * kVec, out);
    }
  }
}

// Merge the statistics (count, mean, sum of squared deviations) of b into a: Chan et al.'s
// parallel form of Welford's update, exact in real arithmetic and stable in floating point.
__device__ __forceinline__ void merge(float& n, float& mean, float& m2, float nb, float mb, float m2b) {
  const float total = n + nb;
  if (total == 0.f) return;
  const float delta = mb - mean, share = nb / total;
  mean += delta * share;
  m2 += m2b + delta * delta * n * share;
  n = total;
}

template <typename T, bool kGelu, bool kStats>
__global__ void layernorm_general_kernel(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ b,
                                         T* __restrict__ y, float* __restrict__ mean_out,
                                         float* __restrict__ rstd_out, long long hidden, float eps) {
  __shared__ float scratch[3][32];
  __shared__ float row_mean, row_rstd;
  const T* row = x + blockIdx.x * hidden;
  // One read for the statistics: each thread runs Welford over its strided elements, then the
  // threads' (n, mean, m2) are merged by shuffles and across warps. Sums of x and x^2 would be
  // cheaper but lose the variance when |mean| >> std, and a shifted sum loses the mean's relative
  // precision when |mean| << std (a 2^20-wide row of N(0,1) failed fp32's 1e-5 that way).
  float n = 0.f, mean = 0.f, m2 = 0.f;
  for (long long i = threadIdx.x; i < hidden; i += blockDim.x) {
    const float v = to_float(row[i]);
    n += 1.f;
    const float delta = v - mean;
    mean += delta / n;
    m2 += delta * (v - mean);
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1)
    merge(n, mean, m2, __shfl_xor_sync(0xffffffffu, n, offset), __shfl_xor_sync(0xffffffffu, mean, offset),
          __shfl_xor_sync(0xffffffffu, m2, offset));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
  if (lane == 0) {
    scratch[0][warp] = n;
    scratch[1][warp] = mean;
    scratch[2][warp] = m2;
  }
  __syncthreads();
  if (warp == 0) {
    n = lane < warps ? scratch[0][lane] : 0.f;
    mean = lane < warps ? scratch[1][lane] : 0.f;
    m2 = lane < warps ? scratch[2][lane] : 0.f;
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1)
      merge(n, mean, m2, __shfl_xor_sync(0xffffffffu, n, offset), __shfl_xor_sync(0xffffffffu, mean, offset),
            __shfl_xor_sync(0xffffffffu, m2, offset));
    if (lane == 0) {
      row_mean = mean;
      row_rstd = rsqrtf(m2 / static_cast<float>(hidden) + eps);
      if (kStats) {
        mean_out[blockIdx.x] = row_mean;
        rstd_out[blockIdx.x] = row_rstd;
      }
    }
  }
  __syncthreads();
  const float mu = row_mean, rstd = row_rstd;
  // Second read of the row: from L2 when the rows in flight fit in its 50 MB, else from HBM.
  T* out = y + blockIdx.x * hidden;
  for (long long i = threadIdx.x; i < hidden; i += blockDim.x)
    out[i] = from_float<T>(epilogue<T, kGelu>((to_float(row[i]) - mu) * rstd * to_float(w[i]) + to_float(b[i])));
}

template <typename T, int kVecs, bool kGelu, bool kStats>
static void launch_fast(const void* x, const void* w, const void* b, void* y, float* mean, float* rstd, long long rows,
                        long long hidden, int threads, float eps, cudaStream_t stream) {
  layernorm_fast_kernel<T, kVecs, kGelu, kStats><<<static_cast<unsigned int>(rows), threads, 0, stream>>>(
      static_cast<const T*>(x), static_cast<const T*>(w), static_cast<const T*>(b), static_cast<T*>(y), mean, rstd,
      hidden, eps);
}

template <typename T, bool kGelu, bool kStats>
static int launch(const void* x, const void* w, const void* b, void* y, float* mean, float* rstd, long long rows,
                  long long hidden, long long threads_per_row, float eps, cudaStream_t stream) {
  constexpr int kVec = Vec<T>::kSize;
  const long long vectors = hidden / kVec;
  const bool vectorizable = hidden % kVec == 0 && aligned16(x) && aligned16(w) && aligned16(b) && aligned16(y);
  // Aim for `threads_per_row` threads (128 by default: 16 blocks per SM then keep 16 rows of loads
  // in flight), giving each thread up to 8 vectors; wider rows grow the block up to 1024 threads.
  const long long target = threads_per_row > 0 ? threads_per_row : 128;
  int vecs = 1;
  while (vecs < 8 && (vectors + vecs - 1) / vecs > target) vecs *= 2;
  const long long threads = ((vectors + vecs - 1) / vecs + 31) / 32 * 32;
  if (vectorizable && threads <= kMaxThreads) {
    const int t = static_cast<int>(threads < 32 ? 32 : threads);
    switch (vecs) {
      case 1: launch_fast<T, 1, kGelu, kStats>(x, w, b, y, mean, rstd, rows, hidden, t, eps, stream); break;
      case 2: launch_fast<T, 2, kGelu, kStats>(x, w, b, y, mean, rstd, rows, hidden, t, eps, stream); break;
      case 4: launch_fast<T, 4, kGelu, kStats>(x, w, b, y, mean, rstd, rows, hidden, t, eps, stream); break;
      default: launch_fast<T, 8, kGelu, kStats>(x, w, b, y, mean, rstd, rows, hidden, t, eps, stream); break;
    }
  } else {
    // Small rows get one warp; wide ones a full block so each thread's strided loop stays short.
    const long long want = (hidden + 31) / 32 * 32;
    const int t = static_cast<int>(want < 1024 ? want : 1024);
    layernorm_general_kernel<T, kGelu, kStats><<<static_cast<unsigned int>(rows), t, 0, stream>>>(
        static_cast<const T*>(x), static_cast<const T*>(w), static_cast<const T*>(b), static_cast<T*>(y), mean, rstd,
        hidden, eps);
  }
  return 0;
}

// mean and rstd: rows floats each, written only when stats != 0 (pass any pointer otherwise).
// threads_per_row: 0 for the default; the device sweep passes 64..512 to pick it.
extern "C" int rooflint_layernorm(const void* x, const void* w, const void* b, void* y, float* mean, float* rstd,
                                  long long rows, long long hidden, long long threads_per_row, long long gelu,
                                  long long stats, long long dtype, float eps, cudaStream_t stream) {
  if (rows < 1 || hidden < 1 || rows > 0x7fffffffLL) return static_cast<int>(cudaErrorInvalidValue);
  ROOFLINT_DISPATCH(dtype, T, {
    if (gelu && stats) launch<T, true, true>(x, w, b, y, mean, rstd, rows, hidden, threads_per_row, eps, stream);
    else if (gelu) launch<T, true, false>(x, w, b, y, mean, rstd, rows, hidden, threads_per_row, eps, stream);
    else if (stats) launch<T, false, true>(x, w, b, y, mean, rstd, rows, hidden, threads_per_row, eps, stream);
    else launch<T, false, false>(x, w, b, y, mean, rstd, rows, hidden, threads_per_row, eps, stream);
  });
  return static_cast<int>(cudaGetLastError());
}
