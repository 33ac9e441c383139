// LayerNorm forward over the last dim, y = (x - mean) * rstd * w + b, optionally followed by tanh
// GELU (the layernorm_gelu family) and optionally saving mean and rstd for backward.
// One block per row. Memory-bound (~8 FLOPs per 4 bytes moved in bf16), so x is read from HBM
// exactly once: the fast path keeps the whole row in registers (kVecs 16-byte vectors per thread),
// which also makes the variance an exact two-pass one (mean first, then sum of squared deviations)
// at no extra traffic. Rows of odd width (unaligned starts) or too wide for one block's registers
// take the general path: scalar loads, Welford/Chan statistics, and a second read of x.
#include "rooflint/common.cuh"

constexpr int kMaxThreads = 1024;

// Block-wide sum, valid in every thread: each warp's sum, then those summed by one more warp
// reduction. `scratch` holds one float per warp; one barrier, so a block's calls each take their
// own scratch (a second call reusing the first's would overwrite sums still being read).
__device__ __forceinline__ float ln_block_sum(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
  v = warp_sum(v);
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

// Sum of squared deviations from the mean over this thread's vectors, in element order.
template <typename T, int kVecs, bool kMasked>
__device__ __forceinline__ float ln_squares(const uint4 (&in)[kVecs], const bool (&valid)[kVecs], float mean) {
  constexpr int kVec = Vec<T>::kSize;
  float squares = 0.f;
#pragma unroll
  for (int k = 0; k < kVecs; ++k) {
    if (kMasked && !valid[k]) continue;
    float v[kVec];
    vec_to_float<T>(in[k], v);
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      const float d = v[j] - mean;
      squares += d * d;
    }
  }
  return squares;
}

// y = epilogue((x - mean) * rstd * w + b), element by element in that order, rounded to T.
template <typename T, int kVecs, bool kGelu, bool kMasked>
__device__ __forceinline__ void ln_write(const uint4 (&in)[kVecs], const bool (&valid)[kVecs], const uint4* w,
                                         const uint4* b, uint4* y, unsigned stride, float mean, float rstd) {
  constexpr int kVec = Vec<T>::kSize;
#pragma unroll
  for (int k = 0; k < kVecs; ++k) {
    if (kMasked && !valid[k]) continue;
    // w and b are re-read by every row: they stay in L1/L2, only x and y touch HBM.
    float v[kVec], vw[kVec], vb[kVec];
    vec_to_float<T>(in[k], v);
    vec_to_float<T>(__ldg(w + k * stride), vw);
    vec_to_float<T>(__ldg(b + k * stride), vb);
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      const float n = (v[j] - mean) * rstd;
      v[j] = epilogue<T, kGelu>(n * vw[j] + vb[j]);
    }
    y[k * stride] = vec_from_float<T>(v);
  }
}

// The instruction budget: at [16384, 4096] bf16 this kernel kept the SM's issue slots 84% busy, so
// the work a vector is kept to its arithmetic: the row's start is one 64-bit product a thread and
// each vector inside it a 32-bit index; 16-bit pairs convert a word at a time; the two block sums
// take one barrier each. A thread whose vectors all lie in the row (every thread, where the row's
// vectors are a multiple of the block's) runs with no bounds checks at all; the others mask
// theirs. Masked vectors load as zeros, and a zero adds +0 to the row's sum, which leaves its bits
// as they are (a sum that starts at +0 is never -0 under round-to-nearest).
template <typename T, int kVecs, bool kGelu, bool kStats>
__global__ void __launch_bounds__(kMaxThreads) layernorm_fast_kernel(const T* __restrict__ x, const T* __restrict__ w,
                                                                       const T* __restrict__ b, T* __restrict__ y,
                                                                       float* __restrict__ mean_out,
                                                                       float* __restrict__ rstd_out, int hidden,
                                                                       float eps) {
  __shared__ float scratch[2][32];
  constexpr int kVec = Vec<T>::kSize;
  const int vectors = hidden / kVec;
  const unsigned stride = blockDim.x, lane = threadIdx.x;
  const size_t start = static_cast<size_t>(blockIdx.x) * static_cast<size_t>(hidden);
  const uint4* x_row = reinterpret_cast<const uint4*>(x + start) + lane;
  bool valid[kVecs];
#pragma unroll
  for (int k = 0; k < kVecs; ++k) valid[k] = static_cast<int>(lane + k * stride) < vectors;
  const bool full = valid[kVecs - 1];
  // All of this thread's loads are issued before the first add, so each thread has kVecs x 16 B
  // in flight; x is streamed once, so bypassing L1 costs nothing (the read-only path).
  uint4 in[kVecs];
  if (full) {
    load_vecs<false>(in, x_row, stride, valid);
  } else {
    load_vecs<true>(in, x_row, stride, valid);
  }
  float sum = 0.f;
#pragma unroll
  for (int k = 0; k < kVecs; ++k) {
    float v[kVec];
    vec_to_float<T>(in[k], v);
#pragma unroll
    for (int j = 0; j < kVec; ++j) sum += v[j];
  }
  const float mean = ln_block_sum(sum, scratch[0]) / static_cast<float>(hidden);
  const float squares = full ? ln_squares<T, kVecs, false>(in, valid, mean) : ln_squares<T, kVecs, true>(in, valid, mean);
  const float rstd = rsqrtf(ln_block_sum(squares, scratch[1]) / static_cast<float>(hidden) + eps);
  if (kStats && threadIdx.x == 0) {
    mean_out[blockIdx.x] = mean;
    rstd_out[blockIdx.x] = rstd;
  }
  const uint4* w_row = reinterpret_cast<const uint4*>(w) + lane;
  const uint4* b_row = reinterpret_cast<const uint4*>(b) + lane;
  uint4* y_row = reinterpret_cast<uint4*>(y + start) + lane;
  if (full) {
    ln_write<T, kVecs, kGelu, false>(in, valid, w_row, b_row, y_row, stride, mean, rstd);
  } else {
    ln_write<T, kVecs, kGelu, true>(in, valid, w_row, b_row, y_row, stride, mean, rstd);
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
      static_cast<int>(hidden), eps);
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
