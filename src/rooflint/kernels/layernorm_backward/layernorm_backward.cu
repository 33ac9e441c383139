// LayerNorm backward: dx, dweight, dbias from x, dy, weight and the saved fp32 mean and rstd.
// Memory-bound (13 FLOPs per 6 bytes in bf16): the job is to read x and dy once and write dx once.
// Stage 1: each block owns the rows blockIdx.x, blockIdx.x + gridDim.x, ...; a thread keeps its
// columns of the row, of the weight, and of the fp32 dweight/dbias sums in registers, so the column
// sums cost no memory traffic until the block writes one partial row. Stage 2 adds the partial rows.
// Rows too wide for registers take a scalar two-pass kernel.
#include "rooflint/common.cuh"

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

// Sum two values over the block. `buffer` alternates between two halves row by row, so one
// __syncthreads per row suffices: a warp can only overwrite a half after every warp has passed
// the barrier of the row in between, i.e. after every warp has read that half.
__device__ __forceinline__ void block_sum2(float (&v)[2], float (&buffer)[2][2][kWarps], int parity) {
  v[0] = warp_sum(v[0]);
  v[1] = warp_sum(v[1]);
  if (threadIdx.x % 32 == 0) {
    buffer[parity][0][threadIdx.x / 32] = v[0];
    buffer[parity][1][threadIdx.x / 32] = v[1];
  }
  __syncthreads();
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    float total = 0.f;
#pragma unroll
    for (int i = 0; i < kWarps; ++i) total += buffer[parity][k][i];
    v[k] = total;
  }
}

// kVec elements (16 bytes, or 1 element for rows that break 16-byte alignment), zero outside the
// row: zeros add nothing to any sum, so the arithmetic needs no branch on the row's end.
template <typename T, int kVec>
__device__ __forceinline__ AlignedVec<T> load_chunk(const T* p, bool valid) {
  AlignedVec<T> out;
  *reinterpret_cast<uint4*>(&out) = make_uint4(0u, 0u, 0u, 0u);
  if (valid) {
    if constexpr (kVec > 1) {
      out = load_vec(p);
    } else {
      out.v[0] = p[0];
    }
  }
  return out;
}

template <int kVec>
__device__ __forceinline__ long long column(int i) {
  return (static_cast<long long>(i) * kThreads + threadIdx.x) * kVec;
}

// This thread's share of one row and the row's statistics, kept as the raw input dtype until used.
template <typename T, int kIters>
struct Slice {
  AlignedVec<T> x[kIters], dy[kIters];
  float mean, rstd;
};

// All of a slice's loads, the statistics included, are issued back to back before anything waits
// on them. A row past the end loads nothing (its slice is never processed).
template <typename T, int kVec, int kIters>
__device__ __forceinline__ void load_slice(Slice<T, kIters>& s, const T* x, const T* dy, const float* mean,
                                           const float* rstd, long long row, long long rows, long long n) {
  const bool live = row < rows;
  s.mean = live ? __ldg(mean + row) : 0.f;
  s.rstd = live ? __ldg(rstd + row) : 0.f;
#pragma unroll
  for (int i = 0; i < kIters; ++i) {
    const long long col = column<kVec>(i);
    s.x[i] = load_chunk<T, kVec>(x + row * n + col, live && col < n);
    s.dy[i] = load_chunk<T, kVec>(dy + row * n + col, live && col < n);
  }
}

// Both row sums (one barrier), then dx and this row's share of the column sums.
template <typename T, int kVec, int kIters>
__device__ __forceinline__ void process_slice(const Slice<T, kIters>& s, const AlignedVec<T> (&w)[kIters],
                                              float (&dw)[kIters][kVec], float (&db)[kIters][kVec], T* dx,
                                              float (&buffer)[2][2][kWarps], int parity, long long row,
                                              long long n, float inv_n) {
  float sums[2] = {0.f, 0.f};
#pragma unroll
  for (int i = 0; i < kIters; ++i) {
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      const float g = to_float(s.dy[i].v[j]) * to_float(w[i].v[j]);
      sums[0] += g;
      sums[1] += g * (to_float(s.x[i].v[j]) - s.mean);
    }
  }
  sums[1] *= s.rstd;
  block_sum2(sums, buffer, parity);
  const float mu = s.mean, rs = s.rstd, c1 = sums[0] * inv_n, c2 = sums[1] * inv_n;
#pragma unroll
  for (int i = 0; i < kIters; ++i) {
    const long long col = column<kVec>(i);
    AlignedVec<T> out;
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      const float d = to_float(s.dy[i].v[j]), xhat = (to_float(s.x[i].v[j]) - mu) * rs;
      // __fmul_rn: g must be the rounded product that c1 summed; an FMA-fused g - c1 would keep
      // the product's rounding error, times rstd (with n == 1, a nonzero dx where the exact one is 0).
      out.v[j] = from_float<T>((__fmul_rn(d, to_float(w[i].v[j])) - c1 - xhat * c2) * rs);
      dw[i][j] += d * xhat;  // columns past the end hold dy == 0: they add nothing
      db[i][j] += d;
    }
    if (col < n) {
      if constexpr (kVec > 1) {
        store_vec(dx + row * n + col, out);
      } else {
        dx[row * n + col] = out.v[0];
      }
    }
  }
}

// A row of up to kThreads * kVec * kIters elements lives in registers, with the same columns of the
// weight (loaded once) and of the fp32 column sums. Two slices ping-pong: the next row's loads are
// issued before this row's reduction and barrier, and land in the other slice, so no register copy
// waits on them; per SM, 16 warps x 2 rows x 2 tensors x 8 KB / 8 warps keep ~64 KB of reads in
// flight, which HBM3's latency needs at 3 TB/s. Up to 16 values per thread, the registers are
// capped for 2 blocks per SM (128 each): 1 block per SM would halve the reads in flight.
template <typename T, int kVec, int kIters>
__global__ void __launch_bounds__(kThreads, kVec* kIters <= 16 ? 2 : 1) ln_bwd_rows_kernel(
    const T* __restrict__ x, const T* __restrict__ dy, const T* __restrict__ weight, const float* __restrict__ mean,
    const float* __restrict__ rstd, T* __restrict__ dx, float* __restrict__ part_dw, float* __restrict__ part_db,
    long long rows, long long n) {
  __shared__ float buffer[2][2][kWarps];
  float dw[kIters][kVec], db[kIters][kVec];
  AlignedVec<T> w[kIters];
#pragma unroll
  for (int i = 0; i < kIters; ++i) {
    const long long col = column<kVec>(i);
    w[i] = load_chunk<T, kVec>(weight + col, col < n);
#pragma unroll
    for (int j = 0; j < kVec; ++j) dw[i][j] = 0.f, db[i][j] = 0.f;
  }
  const float inv_n = 1.f / static_cast<float>(n);
  const long long step = gridDim.x;
  long long row = blockIdx.x;
  Slice<T, kIters> a, b;
  load_slice<T, kVec, kIters>(a, x, dy, mean, rstd, row, rows, n);
  while (row < rows) {
    load_slice<T, kVec, kIters>(b, x, dy, mean, rstd, row + step, rows, n);
    process_slice<T, kVec, kIters>(a, w, dw, db, dx, buffer, 0, row, n, inv_n);
    row += step;
    if (row >= rows) break;
    load_slice<T, kVec, kIters>(a, x, dy, mean, rstd, row + step, rows, n);
    process_slice<T, kVec, kIters>(b, w, dw, db, dx, buffer, 1, row, n, inv_n);
    row += step;
  }
  float* pdw = part_dw + blockIdx.x * n;
  float* pdb = part_db + blockIdx.x * n;
#pragma unroll
  for (int i = 0; i < kIters; ++i) {
    const long long col = column<kVec>(i);
    if (col >= n) continue;
    if constexpr (kVec % 4 == 0) {
      // n % kVec == 0 on this path, so each partial row starts 16-byte aligned.
#pragma unroll
      for (int j = 0; j < kVec; j += 4) {
        *reinterpret_cast<float4*>(pdw + col + j) = make_float4(dw[i][j], dw[i][j + 1], dw[i][j + 2], dw[i][j + 3]);
        *reinterpret_cast<float4*>(pdb + col + j) = make_float4(db[i][j], db[i][j + 1], db[i][j + 2], db[i][j + 3]);
      }
    } else {
#pragma unroll
      for (int j = 0; j < kVec; ++j) pdw[col + j] = dw[i][j], pdb[col + j] = db[i][j];
    }
  }
}

// Any width, scalar: pass 1 reduces c1 and c2 over the row, pass 2 recomputes, writes dx and adds
// into the block's own partial row. Each thread always owns the same columns, so the read-modify-
// write of the partial row needs no atomics; the second read of the row mostly hits L2.
template <typename T>
__global__ void __launch_bounds__(kThreads) ln_bwd_wide_kernel(
    const T* __restrict__ x, const T* __restrict__ dy, const T* __restrict__ w, const float* __restrict__ mean,
    const float* __restrict__ rstd, T* __restrict__ dx, float* __restrict__ part_dw, float* __restrict__ part_db,
    long long rows, long long n) {
  __shared__ float buffer[2][2][kWarps];
  float* pdw = part_dw + blockIdx.x * n;
  float* pdb = part_db + blockIdx.x * n;
  for (long long col = threadIdx.x; col < n; col += kThreads) pdw[col] = 0.f, pdb[col] = 0.f;
  const float inv_n = 1.f / static_cast<float>(n);
  int parity = 0;
  for (long long row = blockIdx.x; row < rows; row += gridDim.x, parity ^= 1) {
    const T* xr = x + row * n;
    const T* dyr = dy + row * n;
    const float mu = mean[row], rs = rstd[row];
    float sums[2] = {0.f, 0.f};
    for (long long col = threadIdx.x; col < n; col += kThreads) {
      const float g = to_float(dyr[col]) * to_float(w[col]);
      sums[0] += g;
      sums[1] += g * (to_float(xr[col]) - mu) * rs;
    }
    block_sum2(sums, buffer, parity);
    const float c1 = sums[0] * inv_n, c2 = sums[1] * inv_n;
    for (long long col = threadIdx.x; col < n; col += kThreads) {
      const float xh = (to_float(xr[col]) - mu) * rs, d = to_float(dyr[col]);
      dx[row * n + col] = from_float<T>((__fmul_rn(d, to_float(w[col])) - c1 - xh * c2) * rs);
      pdw[col] += d * xh;
      pdb[col] += d;
    }
  }
}

// Stage 2: out[c] = sum over blocks of part[b][c]; dweight and dbias in separate blocks (blockIdx.y).
// 32 columns per block keep each warp's reads one 128-byte line; 16 warps stride over the partial
// rows and meet in shared memory (measured ~1 us faster than 8 or 4: more loads in flight).
constexpr int kSumWarps = 16;

template <typename T>
__global__ void __launch_bounds__(kSumWarps * 32) sum_partials_kernel(const float* __restrict__ part_dw,
                                                                      const float* __restrict__ part_db,
                                                                      T* __restrict__ dw, T* __restrict__ db,
                                                                      long long programs, long long n) {
  __shared__ float sums[kSumWarps][33];  // +1 column: no bank conflicts on the transposed read
  const float* part = blockIdx.y == 0 ? part_dw : part_db;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const long long col = blockIdx.x * 32LL + lane;
  float total = 0.f;
  if (col < n) {
    // Unrolled so each thread has several independent loads in flight: this kernel is latency-bound.
#pragma unroll 8
    for (long long p = warp; p < programs; p += kSumWarps) total += part[p * n + col];
  }
  sums[warp][lane] = total;
  __syncthreads();
  if (warp == 0 && col < n) {
    total = 0.f;
#pragma unroll
    for (int i = 0; i < kSumWarps; ++i) total += sums[i][lane];
    (blockIdx.y == 0 ? dw : db)[col] = from_float<T>(total);
  }
}

struct Problem {
  const void *x, *dy, *w;
  const float *mean, *rstd;
  void* dx;
  float *pdw, *pdb;  // partial rows [capacity, n] each
  long long rows, n, capacity;
  cudaStream_t stream;
};

// The grid is exactly the blocks that fit on the GPU at once (registers decide: 2 per SM for a bf16
// row of 4096). One more block per SM would run as a second, partial wave with SMs idle at the end.
template <typename Kernel>
long long resident_blocks(Kernel kernel, const Problem& p) {
  int device = 0, sms = 1, per_sm = 1;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, 0);
  long long blocks = static_cast<long long>(per_sm > 0 ? per_sm : 1) * sms;
  if (blocks > p.rows) blocks = p.rows;
  return blocks < p.capacity ? blocks : p.capacity;
}

template <typename T, int kVec, int kIters>
long long launch_rows(const Problem& p) {
  const auto kernel = ln_bwd_rows_kernel<T, kVec, kIters>;
  const long long blocks = resident_blocks(kernel, p);
  kernel<<<static_cast<unsigned int>(blocks), kThreads, 0, p.stream>>>(
      static_cast<const T*>(p.x), static_cast<const T*>(p.dy), static_cast<const T*>(p.w), p.mean, p.rstd,
      static_cast<T*>(p.dx), p.pdw, p.pdb, p.rows, p.n);
  return blocks;
}

// The smallest register footprint that holds the row, else the scalar wide kernel. Returns the
// number of partial rows written.
template <typename T, int kVec>
long long launch_stage1(const Problem& p) {
  const long long per_thread = (p.n + kThreads * kVec - 1) / (kThreads * kVec);
  if (per_thread <= 1) return launch_rows<T, kVec, 1>(p);
  if (per_thread <= 2) return launch_rows<T, kVec, 2>(p);
  if (per_thread <= 4) return launch_rows<T, kVec, 4>(p);
  if constexpr (kVec <= 4) {
    if (per_thread <= 8) return launch_rows<T, kVec, 8>(p);
  }
  const auto kernel = ln_bwd_wide_kernel<T>;
  const long long blocks = resident_blocks(kernel, p);
  kernel<<<static_cast<unsigned int>(blocks), kThreads, 0, p.stream>>>(
      static_cast<const T*>(p.x), static_cast<const T*>(p.dy), static_cast<const T*>(p.w), p.mean, p.rstd,
      static_cast<T*>(p.dx), p.pdw, p.pdb, p.rows, p.n);
  return blocks;
}

}  // namespace

// partial: fp32 [2, capacity, n] scratch for the per-block sums; capacity >= 1.
extern "C" int rooflint_layernorm_backward(const void* x, const void* dy, const void* w, const void* mean,
                                           const void* rstd, void* dx, void* dw, void* db, void* partial,
                                           long long rows, long long n, long long capacity, long long dtype,
                                           cudaStream_t stream) {
  if (rows < 1 || n < 1 || capacity < 1) return static_cast<int>(cudaErrorInvalidValue);
  float* pdw = static_cast<float*>(partial);
  const Problem p{x,   dy,  w, static_cast<const float*>(mean), static_cast<const float*>(rstd), dx, pdw,
                  pdw + capacity * n, rows, n, capacity, stream};
  ROOFLINT_DISPATCH(dtype, T, {
    constexpr int kVec = Vec<T>::kSize;
    const bool vectors = n % kVec == 0 && aligned16(x) && aligned16(dy) && aligned16(dx) && aligned16(w);
    const long long programs = vectors ? launch_stage1<T, kVec>(p) : launch_stage1<T, 1>(p);
    const dim3 grid(blocks_for(n, 32), 2);
    sum_partials_kernel<T><<<grid, kSumWarps * 32, 0, stream>>>(p.pdw, p.pdb, static_cast<T*>(dw),
                                                               static_cast<T*>(db), programs, n);
  });
  return static_cast<int>(cudaGetLastError());
}
