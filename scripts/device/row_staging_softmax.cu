// Round 21's probe: softmax with its rows staged in shared memory (row_staging.cuh), beside
// rooflint's own softmax.cu, which this file includes whole (its helpers and its entry point).
#include "../../src/rooflint/kernels/softmax.cu"
#include "row_staging.cuh"

// sm_90+: a persistent block streams its rows through a ring of shared-memory slots (row_staging.cuh)
// and reads each row from there three times (max, sum, write). exp is computed twice, as in the
// register kernel; the row in shared memory costs no registers, so a block is 256 threads whatever
// the width. Vectors of 16 bytes: the caller checks cols is a whole number of them.
template <typename T>
__global__ void __launch_bounds__(256) softmax_staged_kernel(const T* __restrict__ x, T* __restrict__ y,
                                                             long long rows, long long cols, int slots) {
#ifdef ROOFLINT_SM90A
  __shared__ float max_slots[32], sum_slots[32];
  constexpr int kV = Vec<T>::kSize;
  const int vectors = static_cast<int>(cols / kV);
  rooflint_rows::for_each_staged_row(x, rows, cols, slots, [&](const T* row, long long r) {
    const AlignedVec<T>* in = reinterpret_cast<const AlignedVec<T>*>(row);
    float m = -INFINITY;
    for (int k = threadIdx.x; k < vectors; k += blockDim.x) {
      const AlignedVec<T> chunk = in[k];
#pragma unroll
      for (int j = 0; j < kV; ++j) m = fmaxf(m, to_float(chunk.v[j]));
    }
    const float max_log2 = block_reduce<true>(m, max_slots) * kLog2e;
    float s = 0.0f;
    for (int k = threadIdx.x; k < vectors; k += blockDim.x) {
      const AlignedVec<T> chunk = in[k];
#pragma unroll
      for (int j = 0; j < kV; ++j) s += exp_shifted(to_float(chunk.v[j]), max_log2);
    }
    const float inv = 1.0f / block_reduce<false>(s, sum_slots);
    T* out = y + r * cols;
    for (int k = threadIdx.x; k < vectors; k += blockDim.x) {
      const AlignedVec<T> chunk = in[k];
      AlignedVec<T> o;
#pragma unroll
      for (int j = 0; j < kV; ++j) o.v[j] = from_float<T>(exp_shifted(to_float(chunk.v[j]), max_log2) * inv);
      store_vec(out + static_cast<long long>(k) * kV, o);
    }
  });
#endif
}

// The staged kernel, or cudaErrorNotSupported where it cannot run (before sm_90, or `slots` rows do
// not fit one block's shared memory); slots 0 picks 3.
template <typename T>
static int launch_staged(const T* in, T* out, long long rows, long long cols, long long slots, cudaStream_t stream) {
  const int s = slots > 0 ? static_cast<int>(slots) : 3;
  const StagedLaunch plan =
      staged_launch(softmax_staged_kernel<T>, rows, cols * static_cast<long long>(sizeof(T)), s, 256);
  if (plan.blocks == 0) return static_cast<int>(cudaErrorNotSupported);
  softmax_staged_kernel<T><<<plan.blocks, 256, plan.shared, stream>>>(in, out, rows, cols, s);
  return 0;
}


// x, y [rows, cols] contiguous, cols a whole number of 16-byte vectors; slots rows in flight a block.
extern "C" int rooflint_softmax_staged(const void* x, void* y, long long rows, long long cols, long long dtype,
                                       long long slots, cudaStream_t stream) {
  int status = static_cast<int>(cudaErrorInvalidValue);
  ROOFLINT_DISPATCH(dtype, T, {
    if (cols % Vec<T>::kSize == 0 && aligned16(x) && aligned16(y))
      status = launch_staged<T>(static_cast<const T*>(x), static_cast<T*>(y), rows, cols, slots, stream);
  });
  return status != 0 ? status : static_cast<int>(cudaGetLastError());
}
