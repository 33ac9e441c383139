// Round 21's probe: layernorm with its rows staged in shared memory (row_staging.cuh), beside
// rooflint's own layernorm.cu, which this file includes whole (its helpers and its entry point).
#include "../../src/rooflint/kernels/layernorm.cu"
#include "row_staging.cuh"

// sm_90+: a persistent block streams its rows through a ring of shared-memory slots (row_staging.cuh)
// and reads each from there three times (sum, squared deviations, write): the exact two-pass
// variance of the register kernel, with no register cost for the row. Whole 16-byte vectors only.
template <typename T, bool kGelu, bool kStats>
__global__ void __launch_bounds__(kMaxThreads) layernorm_staged_kernel(const T* __restrict__ x, const T* __restrict__ w,
                                                                         const T* __restrict__ b, T* __restrict__ y,
                                                                         float* __restrict__ mean_out,
                                                                         float* __restrict__ rstd_out, long long rows,
                                                                         long long hidden, float eps, int slots) {
#ifdef ROOFLINT_SM90A
  __shared__ float scratch[32];
  constexpr int kVec = Vec<T>::kSize;
  const int vectors = static_cast<int>(hidden / kVec);
  rooflint_rows::for_each_staged_row(x, rows, hidden, slots, [&](const T* row, long long r) {
    const AlignedVec<T>* in = reinterpret_cast<const AlignedVec<T>*>(row);
    float sum = 0.f;
    for (int k = threadIdx.x; k < vectors; k += blockDim.x) {
      const AlignedVec<T> chunk = in[k];
#pragma unroll
      for (int j = 0; j < kVec; ++j) sum += to_float(chunk.v[j]);
    }
    const float mean = ln_block_sum(sum, scratch) / static_cast<float>(hidden);
    float squares = 0.f;
    for (int k = threadIdx.x; k < vectors; k += blockDim.x) {
      const AlignedVec<T> chunk = in[k];
#pragma unroll
      for (int j = 0; j < kVec; ++j) {
        const float d = to_float(chunk.v[j]) - mean;
        squares += d * d;
      }
    }
    const float rstd = rsqrtf(ln_block_sum(squares, scratch) / static_cast<float>(hidden) + eps);
    if (kStats && threadIdx.x == 0) {
      mean_out[r] = mean;
      rstd_out[r] = rstd;
    }
    T* out = y + r * hidden;
    for (int k = threadIdx.x; k < vectors; k += blockDim.x) {
      const AlignedVec<T> chunk = in[k], vw = load_vec(w + k * kVec), vb = load_vec(b + k * kVec);
      AlignedVec<T> o;
#pragma unroll
      for (int j = 0; j < kVec; ++j) {
        const float n = (to_float(chunk.v[j]) - mean) * rstd;
        o.v[j] = from_float<T>(epilogue<T, kGelu>(n * to_float(vw.v[j]) + to_float(vb.v[j])));
      }
      store_vec(out + static_cast<long long>(k) * kVec, o);
    }
  });
#endif
}

// The staged kernel, or cudaErrorNotSupported where it cannot run (before sm_90, rows not whole
// 16-byte vectors or unaligned, or `slots` rows do not fit one block). threads 0 picks 128 (a
// 4096-wide bf16 row is 512 vectors: 4 a thread), slots 0 picks 8.
template <typename T, bool kGelu, bool kStats>
static int launch_staged(const void* x, const void* w, const void* b, void* y, float* mean, float* rstd,
                         long long rows, long long hidden, long long threads, long long slots, float eps,
                         cudaStream_t stream) {
  constexpr int kVec = Vec<T>::kSize;
  if (hidden % kVec != 0 || !aligned16(x) || !aligned16(w) || !aligned16(b) || !aligned16(y))
    return static_cast<int>(cudaErrorNotSupported);
  const int t = threads > 0 ? static_cast<int>(threads) : 128;
  const int s = slots > 0 ? static_cast<int>(slots) : 8;
  auto kernel = layernorm_staged_kernel<T, kGelu, kStats>;
  const StagedLaunch plan = staged_launch(kernel, rows, hidden * static_cast<long long>(sizeof(T)), s, t);
  if (plan.blocks == 0) return static_cast<int>(cudaErrorNotSupported);
  kernel<<<plan.blocks, t, plan.shared, stream>>>(static_cast<const T*>(x), static_cast<const T*>(w),
                                                  static_cast<const T*>(b), static_cast<T*>(y), mean, rstd, rows,
                                                  hidden, eps, s);
  return 0;
}

// As rooflint_layernorm, always the staged kernel: threads its block size, slots its rows in flight.
extern "C" int rooflint_layernorm_staged(const void* x, const void* w, const void* b, void* y, float* mean,
                                         float* rstd, long long rows, long long hidden, long long threads,
                                         long long gelu, long long stats, long long dtype, float eps, long long slots,
                                         cudaStream_t stream) {
  int status = 0;
  ROOFLINT_DISPATCH(dtype, T, {
    if (gelu && stats)
      status = launch_staged<T, true, true>(x, w, b, y, mean, rstd, rows, hidden, threads, slots, eps, stream);
    else if (gelu)
      status = launch_staged<T, true, false>(x, w, b, y, mean, rstd, rows, hidden, threads, slots, eps, stream);
    else if (stats)
      status = launch_staged<T, false, true>(x, w, b, y, mean, rstd, rows, hidden, threads, slots, eps, stream);
    else
      status = launch_staged<T, false, false>(x, w, b, y, mean, rstd, rows, hidden, threads, slots, eps, stream);
  });
  return status != 0 ? status : static_cast<int>(cudaGetLastError());
}
