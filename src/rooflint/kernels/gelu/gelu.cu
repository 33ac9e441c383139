// y = (tanh-GELU(x) + bias) * scale over a [rows, cols] tensor, bias over cols.
// Memory-bound (11 FLOPs per 4 bytes in bf16): one pass, 16-byte loads and stores, and the bias
// slice of each thread held in registers across every row it visits, so bias costs no traffic.
#include "rooflint/common.cuh"

constexpr int kThreads = 256;

// kWidth elements starting at p: one 16-byte transaction on the vector path, one element otherwise.
template <typename T, int kWidth>
__device__ __forceinline__ void load_floats(const T* p, float (&out)[kWidth]) {
  if constexpr (kWidth == Vec<T>::kSize) {
    const AlignedVec<T> v = load_vec(p);
#pragma unroll
    for (int j = 0; j < kWidth; ++j) out[j] = to_float(v.v[j]);
  } else {
#pragma unroll
    for (int j = 0; j < kWidth; ++j) out[j] = to_float(p[j]);
  }
}

template <typename T, int kWidth>
__device__ __forceinline__ void store_floats(T* p, const float (&in)[kWidth]) {
  if constexpr (kWidth == Vec<T>::kSize) {
    AlignedVec<T> v;
#pragma unroll
    for (int j = 0; j < kWidth; ++j) v.v[j] = from_float<T>(in[j]);
    store_vec(p, v);
  } else {
#pragma unroll
    for (int j = 0; j < kWidth; ++j) p[j] = from_float<T>(in[j]);
  }
}

// A block covers a tile of ty * kRows rows by tx * kWidth columns: threadIdx.x walks columns
// (coalesced), threadIdx.y and the kRows rows of each thread walk rows. Each thread issues its
// kRows 16-byte loads before using any, so many bytes are in flight per thread, and reuses its
// bias registers for all of them. Tiles past gridDim.y are covered by striding over tiles.
template <typename T, int kWidth, int kRows>
__global__ void __launch_bounds__(kThreads) gelu_bias_scale_kernel(const T* __restrict__ x,
                                                                   const T* __restrict__ bias, T* __restrict__ y,
                                                                   long long rows, long long cols, float scale) {
  const long long col = (blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x) * kWidth;
  if (col >= cols) return;
  float b[kWidth];
  load_floats<T, kWidth>(bias + col, b);
  const long long tile_rows = static_cast<long long>(blockDim.y) * kRows;
  for (long long first = blockIdx.y * tile_rows + threadIdx.y; first < rows; first += gridDim.y * tile_rows) {
    float v[kRows][kWidth];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const long long row = first + r * static_cast<long long>(blockDim.y);
      if (row < rows) load_floats<T, kWidth>(x + row * cols + col, v[r]);
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const long long row = first + r * static_cast<long long>(blockDim.y);
      if (row >= rows) break;
#pragma unroll
      for (int j = 0; j < kWidth; ++j) v[r][j] = (gelu_tanh<T>(v[r][j]) + b[j]) * scale;
      store_floats<T, kWidth>(y + row * cols + col, v[r]);
    }
  }
}

template <typename T, int kWidth, int kRows>
static void launch_gelu(const void* x, const void* bias, void* y, long long rows, long long cols, float scale,
                        cudaStream_t stream) {
  const long long chunks = (cols + kWidth - 1) / kWidth;  // per row
  int tx = 1;
  while (tx < kThreads && tx < chunks) tx *= 2;  // narrow rows: spend the spare threads on rows
  const int ty = kThreads / tx;
  const unsigned int gx = blocks_for(chunks, tx, 1 << 30);
  // One tile per block (many small blocks balance better than a capped grid); 65535 is the
  // hardware limit on gridDim.y, beyond which the tile loop takes over.
  const long long tiles = (rows + static_cast<long long>(ty) * kRows - 1) / (static_cast<long long>(ty) * kRows);
  const unsigned int gy = static_cast<unsigned int>(tiles < 65535 ? tiles : 65535);
  gelu_bias_scale_kernel<T, kWidth, kRows><<<dim3(gx, gy), dim3(tx, ty), 0, stream>>>(
      static_cast<const T*>(x), static_cast<const T*>(bias), static_cast<T*>(y), rows, cols, scale);
}

template <typename T, int kWidth>
static int launch_rows(const void* x, const void* bias, void* y, long long rows, long long cols,
                       long long rows_in_flight, float scale, cudaStream_t stream) {
  switch (rows_in_flight) {
    // The default, one row: one 16-byte load a thread, many small blocks, which keep the most blocks
    // resident to hide DRAM latency; the multi-row forms stay for sweeps (docs/perf-notes).
    case 0:
    case 1: launch_gelu<T, kWidth, 1>(x, bias, y, rows, cols, scale, stream); break;
    case 4: launch_gelu<T, kWidth, 4>(x, bias, y, rows, cols, scale, stream); break;
    case 2: launch_gelu<T, kWidth, 2>(x, bias, y, rows, cols, scale, stream); break;
    case 8: launch_gelu<T, kWidth, 8>(x, bias, y, rows, cols, scale, stream); break;
    default: return static_cast<int>(cudaErrorInvalidValue);
  }
  return 0;
}

// rows_in_flight: rows each thread loads before computing (1, 2, 4 or 8; 0 for the default 1).
extern "C" int rooflint_gelu(const void* x, const void* bias, void* y, long long rows, long long cols,
                             long long dtype, long long rows_in_flight, float scale, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return 0;
  int status = 0;
  ROOFLINT_DISPATCH(dtype, T, {
    // 16-byte vectors need every row start aligned: cols a multiple of the vector and aligned bases.
    if (cols % Vec<T>::kSize == 0 && aligned16(x) && aligned16(bias) && aligned16(y)) {
      status = launch_rows<T, Vec<T>::kSize>(x, bias, y, rows, cols, rows_in_flight, scale, stream);
    } else {
      status = launch_rows<T, 1>(x, bias, y, rows, cols, rows_in_flight, scale, stream);
    }
  });
  return status != 0 ? status : static_cast<int>(cudaGetLastError());
}
