// out[row] = sum(x[row, :]) accumulated in fp32; rows = 1 sums one long vector.
// A read stream with no reuse: the wall is HBM read bandwidth, so each thread keeps kUnroll
// 16-byte loads in flight before it adds anything (Little's law: ~3 TB/s x ~1 us of latency needs
// ~25 KB in flight per SM). Each row is cut into `splits` chunks, one block each, so a single long
// row still fills every SM. The chunks' partial sums are combined in the same launch by the block
// that finishes last (threadfence-reduction pattern): one pass, no memset, and deterministic,
// because the last block adds the partials in split order. fp32 atomicAdd onto out would also be
// one pass but needs out zeroed first and its order, hence its rounding, changes run to run.
#include "rooflint/common.cuh"

constexpr int kUnroll = 4;  // must match CudaRowSum.UNROLL in cuda.py
constexpr int kMaxWarps = 32;

// Sum over the block; the result is valid in every thread. `scratch` holds one float per warp.
__device__ __forceinline__ float rs_block_sum(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
  v = warp_sum(v);
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : 0.f;
  return warp_sum(v);
}

template <typename T>
__global__ void row_sum_kernel(const T* __restrict__ x, float* __restrict__ partials, unsigned int* __restrict__ counts,
                               float* __restrict__ out, long long cols, long long chunk, int splits) {
  __shared__ float scratch[kMaxWarps];
  __shared__ bool last;
  constexpr int kVec = Vec<T>::kSize;
  const int row = blockIdx.y, split = blockIdx.x;
  const long long begin = split * chunk;
  const long long length = (begin + chunk < cols ? chunk : cols - begin);
  const T* p = x + row * cols + begin;

  // A row of odd width starts off a 16-byte boundary: peel up to kVec-1 scalars to reach one.
  long long head = ((16 - (reinterpret_cast<uintptr_t>(p) & 15)) & 15) / sizeof(T);
  if (head > length) head = length;
  const long long vectors = (length - head) / kVec;
  const T* body = p + head;

  float acc = 0.f;
  long long v = threadIdx.x;
  // Main loop: issue all kUnroll loads, then add; the adds never stall a load behind them.
  for (; v + (kUnroll - 1) * blockDim.x < vectors; v += kUnroll * blockDim.x) {
    AlignedVec<T> in[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) in[u] = load_vec(body + (v + u * blockDim.x) * kVec);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
#pragma unroll
      for (int j = 0; j < kVec; ++j) acc += to_float(in[u].v[j]);
  }
  for (; v < vectors; v += blockDim.x) {
    const AlignedVec<T> in = load_vec(body + v * kVec);
#pragma unroll
    for (int j = 0; j < kVec; ++j) acc += to_float(in.v[j]);
  }
  // The peeled head and the tail that does not fill a whole vector.
  const long long tail = head + vectors * kVec;
  if (threadIdx.x < head) acc += to_float(p[threadIdx.x]);
  if (tail + threadIdx.x < length) acc += to_float(p[tail + threadIdx.x]);

  const float total = rs_block_sum(acc, scratch);
  if (splits == 1) {
    if (threadIdx.x == 0) out[row] = total;
    return;
  }
  if (threadIdx.x == 0) {
    partials[static_cast<long long>(row) * splits + split] = total;
    __threadfence();  // the partial is visible GPU-wide before this block's ticket is
    last = atomicAdd(&counts[row], 1u) == static_cast<unsigned int>(splits - 1);
  }
  __syncthreads();
  if (!last) return;
  __threadfence();  // acquire side: see every other block's partial
  float sum = 0.f;
  // __ldcg reads L2, where the other SMs' partials are, never a stale L1 line. The fixed
  // thread-to-split mapping and tree make the final sum identical on every run.
  for (int s = threadIdx.x; s < splits; s += blockDim.x) sum += __ldcg(&partials[static_cast<long long>(row) * splits + s]);
  sum = rs_block_sum(sum, scratch);
  if (threadIdx.x == 0) {
    out[row] = sum;
    counts[row] = 0;  // every ticket of this row is drawn: re-arm for the next launch
  }
}

// partials: rows * splits floats; counts: rows zeroed uints (left zeroed after each launch).
extern "C" int rooflint_reduce_sum(const void* x, float* partials, unsigned int* counts, float* out, long long rows,
                                   long long cols, long long chunk, long long splits, long long threads,
                                   long long dtype, cudaStream_t stream) {
  if (threads < 32 || threads > 32 * kMaxWarps || threads % 32 != 0 || splits < 1 || rows > 65535 * 1024LL ||
      splits * chunk < cols)
    return static_cast<int>(cudaErrorInvalidValue);
  // Rows go on grid.y (at most 65535), so many rows are launched in slabs.
  for (long long first = 0; first < rows; first += 65535) {
    const long long count = rows - first < 65535 ? rows - first : 65535;
    const dim3 grid(static_cast<unsigned int>(splits), static_cast<unsigned int>(count));
    ROOFLINT_DISPATCH(dtype, T, {
      row_sum_kernel<T><<<grid, static_cast<unsigned int>(threads), 0, stream>>>(
          static_cast<const T*>(x) + first * cols, partials + first * splits, counts + first, out + first, cols, chunk,
          static_cast<int>(splits));
    });
  }
  return static_cast<int>(cudaGetLastError());
}
