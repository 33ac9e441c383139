// LayerNorm backward: dx, dweight, dbias from x, dy, weight and the saved fp32 mean and rstd.
// Memory-bound (13 FLOPs per 6 bytes in bf16): the job is to read x and dy once and write dx once.
// Stage 1: each block owns the rows blockIdx.x, blockIdx.x + gridDim.x, ...; a thread keeps its
// columns of the row, of the weight, and of the fp32 dweight/dbias sums in registers, so the column
// sums cost no memory traffic until the block writes one partial row. Stage 2 adds the partial rows.
// Rows too wide for registers take a scalar two-pass kernel.
#include "common.cuh"

namespace {

// Sum kCount values over the block. `buffer` alternates between two halves row by row, so one
// __syncthreads per row suffices: a warp can only overwrite a half after every warp has passed
// the barrier of the row in between, i.e. after every warp has read that half.
template <int kWarps, int kCount>
__device__ __forceinline__ void block_sum(float (&v)[kCount], float (&buffer)[2][kCount][kWarps], int parity) {
#pragma unroll
  for (int k = 0; k < kCount; ++k) v[k] = warp_sum(v[k]);
  if (threadIdx.x % 32 == 0) {
#pragma unroll
    for (int k = 0; k < kCount; ++k) buffer[parity][k][threadIdx.x / 32] = v[k];
  }
  __syncthreads();
#pragma unroll
  for (int k = 0; k < kCount; ++k) {
    float total = 0.f;
#pragma unroll
    for (int i = 0; i < kWarps; ++i) total += buffer[parity][k][i];
    v[k] = total;
  }
}

// kVec elements (16 bytes, or 1 element for rows that break 16-byte alignment), zero outside the row:
// zeros add nothing to any sum, so the arithmetic needs no branch on the row's end.
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

// Launch shape of the rows kernel: threads per block, rows reduced together per barrier, and
// whether the next group of rows is loaded while this one is computed.
template <int kThreadsT, int kRowsT, bool kPrefetchT, int kMinBlocksT>
struct Plan {
  static constexpr int kThreads = kThreadsT, kWarps = kThreadsT / 32, kRows = kRowsT, kMinBlocks = kMinBlocksT;
  static constexpr bool kPrefetch = kPrefetchT;
};

// Blocks per SM the register allocation must allow: the plan's, for rows of up to 16 values per
// thread; wider rows take what they need.
template <typename P, int kVec, int kIters>
constexpr int min_blocks() {
  return kVec * kIters <= 16 ? P::kMinBlocks : 1;
}

template <int kThreads, int kVec>
__device__ __forceinline__ long long column(int i) {
  return (static_cast<long long>(i) * kThreads + threadIdx.x) * kVec;
}

// kRows rows of this thread's slice, with their statistics, kept as the raw input dtype until used.
template <typename T, int kIters, int kRows>
struct Stage {
  AlignedVec<T> x[kRows][kIters], dy[kRows][kIters];
  float mean[kRows], rstd[kRows];
};

// All of a stage's loads, the statistics included, are issued back to back before anything waits.
template <typename P, typename T, int kVec, int kIters>
__device__ __forceinline__ void load_stage(Stage<T, kIters, P::kRows>& s, const T* x, const T* dy,
                                           const float* mean, const float* rstd, long long row,
                                           long long stride, long long rows, long long n) {
#pragma unroll
  for (int r = 0; r < P::kRows; ++r) {
    const long long rr = row + r * stride;
    const bool live = rr < rows;
    s.mean[r] = live ? __ldg(mean + rr) : 0.f;
    s.rstd[r] = live ? __ldg(rstd + rr) : 0.f;
#pragma unroll
    for (int i = 0; i < kIters; ++i) {
      const long long col = column<P::kThreads, kVec>(i);
      s.x[r][i] = load_chunk<T, kVec>(x + rr * n + col, live && col < n);
      s.dy[r][i] = load_chunk<T, kVec>(dy + rr * n + col, live && col < n);
    }
  }
}

// Both row sums of every row in the stage (one barrier for all of them), then dx and the column sums.
template <typename P, typename T, int kVec, int kIters>
__device__ __forceinline__ void process_stage(const Stage<T, kIters, P::kRows>& s, const AlignedVec<T> (&w)[kIters],
                                              float (&dw)[kIters][kVec], float (&db)[kIters][kVec], T* dx,
                                              float (&buffer)[2][2 * P::kRows][P::kWarps], int parity,
                                              long long row, long long stride, long long rows, long long n,
                                              float inv_n) {
  float sums[2 * P::kRows];
#pragma unroll
  for (int r = 0; r < P::kRows; ++r) {
    float s1 = 0.f, s2 = 0.f;
#pragma unroll
    for (int i = 0; i < kIters; ++i) {
#pragma unroll
      for (int j = 0; j < kVec; ++j) {
        const float g = to_float(s.dy[r][i].v[j]) * to_float(w[i].v[j]);
        s1 += g;
        s2 += g * (to_float(s.x[r][i].v[j]) - s.mean[r]);
      }
    }
    sums[2 * r] = s1;
    sums[2 * r + 1] = s2 * s.rstd[r];
  }
  block_sum(sums, buffer, parity);
#pragma unroll
  for (int r = 0; r < P::kRows; ++r) {
    const long long rr = row + r * stride;
    const float mu = s.mean[r], rs = s.rstd[r], c1 = sums[2 * r] * inv_n, c2 = sums[2 * r + 1] * inv_n;
#pragma unroll
    for (int i = 0; i < kIters; ++i) {
      const long long col = column<P::kThreads, kVec>(i);
      AlignedVec<T> out;
#pragma unroll
      for (int j = 0; j < kVec; ++j) {
        const float d = to_float(s.dy[r][i].v[j]), xhat = (to_float(s.x[r][i].v[j]) - mu) * rs;
        // __fmul_rn: g must be the rounded product that c1 summed; an FMA-fused g - c1 would keep
        // the product's rounding error, times rstd (with n == 1, a nonzero dx where the exact one is 0).
        out.v[j] = from_float<T>((__fmul_rn(d, to_float(w[i].v[j])) - c1 - xhat * c2) * rs);
        dw[i][j] += d * xhat;  // rows past the end hold dy == 0: they add nothing
        db[i][j] += d;
      }
      if (rr < rows && col < n) {
        if constexpr (kVec > 1) {
          store_vec(dx + rr * n + col, out);
        } else {
          dx[rr * n + col] = out.v[0];
        }
      }
    }
  }
}

// A row of up to P::kThreads * kVec * kIters elements lives in registers, with the same columns of
// the weight (loaded once) and of the fp32 column sums.
template <typename P, typename T, int kVec, int kIters>
__global__ void __launch_bounds__(P::kThreads, (min_blocks<P, kVec, kIters>())) ln_bwd_rows_kernel(
    const T* __restrict__ x, const T* __restrict__ dy, const T* __restrict__ weight, const float* __restrict__ mean,
    const float* __restrict__ rstd, T* __restrict__ dx, float* __restrict__ part_dw, float* __restrict__ part_db,
    long long rows, long long n) {
  __shared__ float buffer[2][2 * P::kRows][P::kWarps];
  float dw[kIters][kVec], db[kIters][kVec];
  AlignedVec<T> w[kIters];
#pragma unroll
  for (int i = 0; i < kIters; ++i) {
    const long long col = column<P::kThreads, kVec>(i);
    w[i] = load_chunk<T, kVec>(weight + col, col < n);
#pragma unroll
    for (int j = 0; j < kVec; ++j) dw[i][j] = 0.f, db[i][j] = 0.f;
  }
  const float inv_n = 1.f / static_cast<float>(n);
  const long long stride = gridDim.x, step = stride * P::kRows;
  long long row = blockIdx.x;
  Stage<T, kIters, P::kRows> a;
  if constexpr (P::kPrefetch) {
    // Ping-pong between two stages: the next group's loads are in flight while this one computes,
    // and no register copy waits on them at the end of the iteration.
    Stage<T, kIters, P::kRows> b;
    load_stage<P, T, kVec, kIters>(a, x, dy, mean, rstd, row, stride, rows, n);
    while (row < rows) {
      load_stage<P, T, kVec, kIters>(b, x, dy, mean, rstd, row + step, stride, rows, n);
      process_stage<P, T, kVec, kIters>(a, w, dw, db, dx, buffer, 0, row, stride, rows, n, inv_n);
      row += step;
      if (row >= rows) break;
      load_stage<P, T, kVec, kIters>(a, x, dy, mean, rstd, row + step, stride, rows, n);
      process_stage<P, T, kVec, kIters>(b, w, dw, db, dx, buffer, 1, row, stride, rows, n, inv_n);
      row += step;
    }
  } else {
    for (int parity = 0; row < rows; row += step, parity ^= 1) {
      load_stage<P, T, kVec, kIters>(a, x, dy, mean, rstd, row, stride, rows, n);
      process_stage<P, T, kVec, kIters>(a, w, dw, db, dx, buffer, parity, row, stride, rows, n, inv_n);
    }
  }
  float* pdw = part_dw + blockIdx.x * n;
  float* pdb = part_db + blockIdx.x * n;
#pragma unroll
  for (int i = 0; i < kIters; ++i) {
    const long long col = column<P::kThreads, kVec>(i);
    if (col >= n) continue;
    if constexpr (kVec % 4 == 0) {
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

constexpr int kWideThreads = 256;

// Any width, scalar: pass 1 reduces c1 and c2 over the row, pass 2 recomputes, writes dx and adds
// into the block's own partial row. Each thread always owns the same columns, so the read-modify-
// write of the partial row needs no atomics; the second read of the row mostly hits L2.
template <typename T>
__global__ void __launch_bounds__(kWideThreads) ln_bwd_wide_kernel(
    const T* __restrict__ x, const T* __restrict__ dy, const T* __restrict__ w, const float* __restrict__ mean,
    const float* __restrict__ rstd, T* __restrict__ dx, float* __restrict__ part_dw, float* __restrict__ part_db,
    long long rows, long long n) {
  __shared__ float buffer[2][2][kWideThreads / 32];
  float* pdw = part_dw + blockIdx.x * n;
  float* pdb = part_db + blockIdx.x * n;
  for (long long col = threadIdx.x; col < n; col += kWideThreads) pdw[col] = 0.f, pdb[col] = 0.f;
  const float inv_n = 1.f / static_cast<float>(n);
  int parity = 0;
  for (long long row = blockIdx.x; row < rows; row += gridDim.x, parity ^= 1) {
    const T* xr = x + row * n;
    const T* dyr = dy + row * n;
    const float mu = mean[row], rs = rstd[row];
    float sums[2] = {0.f, 0.f};
    for (long long col = threadIdx.x; col < n; col += kWideThreads) {
      const float g = to_float(dyr[col]) * to_float(w[col]);
      sums[0] += g;
      sums[1] += g * (to_float(xr[col]) - mu) * rs;
    }
    block_sum(sums, buffer, parity);
    const float c1 = sums[0] * inv_n, c2 = sums[1] * inv_n;
    for (long long col = threadIdx.x; col < n; col += kWideThreads) {
      const float xh = (to_float(xr[col]) - mu) * rs, d = to_float(dyr[col]);
      dx[row * n + col] = from_float<T>((__fmul_rn(d, to_float(w[col])) - c1 - xh * c2) * rs);
      pdw[col] += d * xh;
      pdb[col] += d;
    }
  }
}

// Stage 2: out[c] = sum over blocks of part[b][c], dweight and dbias in separate blocks (blockIdx.y).
// 32 columns per block keep each warp's reads one 128-byte line; kWarps warps stride over the
// partial rows and meet in shared memory.
template <typename T, int kWarps>
__global__ void __launch_bounds__(kWarps * 32) sum_partials_kernel(const float* __restrict__ part_dw,
                                                                   const float* __restrict__ part_db,
                                                                   T* __restrict__ dw, T* __restrict__ db,
                                                                   long long programs, long long n) {
  __shared__ float sums[kWarps][33];  // +1 column: no bank conflicts on the transposed read
  const float* part = blockIdx.y == 0 ? part_dw : part_db;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const long long col = blockIdx.x * 32LL + lane;
  float a = 0.f;
  if (col < n) {
    // Unrolled so each thread has several independent loads in flight: this kernel is latency-bound.
#pragma unroll 8
    for (long long p = warp; p < programs; p += kWarps) a += part[p * n + col];
  }
  sums[warp][lane] = a;
  __syncthreads();
  if (warp == 0 && col < n) {
    float total = 0.f;
#pragma unroll
    for (int i = 0; i < kWarps; ++i) total += sums[i][lane];
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

// The grid is exactly the blocks that fit on the GPU at once (registers decide). One more block
// per SM would run as a second, partial wave with SMs idle at the end.
template <typename Kernel>
long long resident_blocks(Kernel kernel, int threads, const Problem& p) {
  int device = 0, sms = 1, per_sm = 1;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, 0);
  long long blocks = static_cast<long long>(per_sm > 0 ? per_sm : 1) * sms;
  if (blocks > p.rows) blocks = p.rows;
  return blocks < p.capacity ? blocks : p.capacity;
}

template <typename P, typename T, int kVec, int kIters>
long long launch_rows(const Problem& p) {
  const auto kernel = ln_bwd_rows_kernel<P, T, kVec, kIters>;
  const long long blocks = resident_blocks(kernel, P::kThreads, p);
  kernel<<<static_cast<unsigned int>(blocks), P::kThreads, 0, p.stream>>>(
      static_cast<const T*>(p.x), static_cast<const T*>(p.dy), static_cast<const T*>(p.w), p.mean, p.rstd,
      static_cast<T*>(p.dx), p.pdw, p.pdb, p.rows, p.n);
  return blocks;
}

// The smallest register footprint that holds the row, else the scalar wide kernel. Returns the
// number of partial rows written.
template <typename P, typename T, int kVec>
long long launch_stage1(const Problem& p) {
  const long long per_thread = (p.n + P::kThreads * kVec - 1) / (P::kThreads * kVec);
  if (per_thread <= 1) return launch_rows<P, T, kVec, 1>(p);
  if (per_thread <= 2) return launch_rows<P, T, kVec, 2>(p);
  if (per_thread <= 4) return launch_rows<P, T, kVec, 4>(p);
  if constexpr (kVec <= 4) {
    if (per_thread <= 8) return launch_rows<P, T, kVec, 8>(p);
  }
  const auto kernel = ln_bwd_wide_kernel<T>;
  const long long blocks = resident_blocks(kernel, kWideThreads, p);
  kernel<<<static_cast<unsigned int>(blocks), kWideThreads, 0, p.stream>>>(
      static_cast<const T*>(p.x), static_cast<const T*>(p.dy), static_cast<const T*>(p.w), p.mean, p.rstd,
      static_cast<T*>(p.dx), p.pdw, p.pdb, p.rows, p.n);
  return blocks;
}

template <typename P, int kSumWarps>
int run(const Problem& p, void* dw, void* db, long long dtype) {
  ROOFLINT_DISPATCH(dtype, T, {
    constexpr int kVec = Vec<T>::kSize;
    const bool vectors = p.n % kVec == 0 && aligned16(p.x) && aligned16(p.dy) && aligned16(p.dx) && aligned16(p.w);
    const long long programs = vectors ? launch_stage1<P, T, kVec>(p) : launch_stage1<P, T, 1>(p);
    const dim3 grid(blocks_for(p.n, 32), 2);
    sum_partials_kernel<T, kSumWarps><<<grid, kSumWarps * 32, 0, p.stream>>>(p.pdw, p.pdb, static_cast<T*>(dw),
                                                                            static_cast<T*>(db), programs, p.n);
  });
  return static_cast<int>(cudaGetLastError());
}

}  // namespace

namespace orig {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

// Sum two values over the block. `buffer` alternates between two halves row by row, so one
// __syncthreads per row suffices: a warp can only overwrite a half after every warp has passed
// the barrier of the row in between, i.e. after every warp has read that half.
__device__ __forceinline__ float2 block_sum2(float a, float b, float (*buffer)[kWarps], int parity) {
  a = warp_sum(a);
  b = warp_sum(b);
  const int warp = threadIdx.x / 32;
  if (threadIdx.x % 32 == 0) {
    buffer[2 * parity][warp] = a;
    buffer[2 * parity + 1][warp] = b;
  }
  __syncthreads();
  float2 total = make_float2(0.f, 0.f);
#pragma unroll
  for (int i = 0; i < kWarps; ++i) {
    total.x += buffer[2 * parity][i];
    total.y += buffer[2 * parity + 1][i];
  }
  return total;
}

// This thread's share of one row: kIters accesses of kVec elements (16 bytes, or 1 element for rows
// that break 16-byte alignment), kept as the raw input dtype until used.
template <typename T, int kVec, int kIters>
struct RowSlice {
  AlignedVec<T> x[kIters], dy[kIters];
};

template <typename T, int kVec>
__device__ __forceinline__ AlignedVec<T> load_chunk(const T* p) {
  AlignedVec<T> out;
  if constexpr (kVec > 1) {
    out = load_vec(p);
  } else {
    out.v[0] = p[0];
  }
  return out;
}

template <int kVec, int kThreadsPerRow>
__device__ __forceinline__ long long column(int i) {
  return (static_cast<long long>(i) * kThreadsPerRow + threadIdx.x) * kVec;
}

// All of a slice's loads are issued back to back, before anything waits on them.
template <typename T, int kVec, int kIters>
__device__ __forceinline__ void load_slice(RowSlice<T, kVec, kIters>& s, const T* x, const T* dy, long long base,
                                           long long n) {
#pragma unroll
  for (int i = 0; i < kIters; ++i) {
    const long long col = column<kVec, kThreads>(i);
    if (col < n) {
      s.x[i] = load_chunk<T, kVec>(x + base + col);
      s.dy[i] = load_chunk<T, kVec>(dy + base + col);
    }
  }
}

// A row of up to kThreads * kVec * kIters elements lives in registers. The next row's slice is
// loaded before this row's reduction and barrier, so two rows of loads are in flight per thread:
// one SM's 16 warps then keep ~64 KB of reads outstanding, which HBM3's latency needs at 3 TB/s.
template <typename T, int kVec, int kIters>
__global__ void __launch_bounds__(kThreads) ln_bwd_rows_kernel(
    const T* __restrict__ x, const T* __restrict__ dy, const T* __restrict__ w, const float* __restrict__ mean,
    const float* __restrict__ rstd, T* __restrict__ dx, float* __restrict__ part_dw, float* __restrict__ part_db,
    long long rows, long long n) {
  __shared__ float buffer[4][kWarps];
  float dw[kIters][kVec], db[kIters][kVec];
#pragma unroll
  for (int i = 0; i < kIters; ++i) {
#pragma unroll
    for (int j = 0; j < kVec; ++j) dw[i][j] = 0.f, db[i][j] = 0.f;
  }
  const float inv_n = 1.f / static_cast<float>(n);
  RowSlice<T, kVec, kIters> cur, next;
  long long row = blockIdx.x;
  if (row < rows) load_slice(cur, x, dy, row * n, n);
  for (int parity = 0; row < rows; row += gridDim.x, parity ^= 1) {
    if (row + gridDim.x < rows) load_slice(next, x, dy, (row + gridDim.x) * n, n);
    const float mu = mean[row], rs = rstd[row];
    float s1 = 0.f, s2 = 0.f;
#pragma unroll
    for (int i = 0; i < kIters; ++i) {
      const long long col = column<kVec, kThreads>(i);
      if (col >= n) continue;
      // weight is 8 KB for a 4096 row: after the first row it is an L1 hit, cheaper than registers.
      const AlignedVec<T> wv = load_chunk<T, kVec>(w + col);
#pragma unroll
      for (int j = 0; j < kVec; ++j) {
        const float g = to_float(cur.dy[i].v[j]) * to_float(wv.v[j]);
        s1 += g;
        s2 += g * (to_float(cur.x[i].v[j]) - mu) * rs;
      }
    }
    const float2 sums = block_sum2(s1, s2, buffer, parity);
    const float c1 = sums.x * inv_n, c2 = sums.y * inv_n;
#pragma unroll
    for (int i = 0; i < kIters; ++i) {
      const long long col = column<kVec, kThreads>(i);
      if (col >= n) continue;
      const AlignedVec<T> wv = load_chunk<T, kVec>(w + col);
      AlignedVec<T> out;
#pragma unroll
      for (int j = 0; j < kVec; ++j) {
        const float d = to_float(cur.dy[i].v[j]), xhat = (to_float(cur.x[i].v[j]) - mu) * rs;
        // __fmul_rn: g must be the rounded product that c1 summed; an FMA-fused g - c1 would keep
        // the product's rounding error, times rstd (with n == 1, a nonzero dx where the exact one is 0).
        out.v[j] = from_float<T>((__fmul_rn(d, to_float(wv.v[j])) - c1 - xhat * c2) * rs);
        dw[i][j] += d * xhat;
        db[i][j] += d;
      }
      if constexpr (kVec > 1) {
        store_vec(dx + row * n + col, out);
      } else {
        dx[row * n + col] = out.v[0];
      }
    }
    cur = next;
  }
  float* pdw = part_dw + blockIdx.x * n;
  float* pdb = part_db + blockIdx.x * n;
#pragma unroll
  for (int i = 0; i < kIters; ++i) {
    const long long col = column<kVec, kThreads>(i);
    if (col >= n) continue;
#pragma unroll
    for (int j = 0; j < kVec; ++j) pdw[col + j] = dw[i][j], pdb[col + j] = db[i][j];
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
  __shared__ float buffer[4][kWarps];
  float* pdw = part_dw + blockIdx.x * n;
  float* pdb = part_db + blockIdx.x * n;
  for (long long col = threadIdx.x; col < n; col += kThreads) pdw[col] = 0.f, pdb[col] = 0.f;
  const float inv_n = 1.f / static_cast<float>(n);
  int parity = 0;
  for (long long row = blockIdx.x; row < rows; row += gridDim.x, parity ^= 1) {
    const T* xr = x + row * n;
    const T* dyr = dy + row * n;
    const float mu = mean[row], rs = rstd[row];
    float s1 = 0.f, s2 = 0.f;
    for (long long col = threadIdx.x; col < n; col += kThreads) {
      const float g = to_float(dyr[col]) * to_float(w[col]);
      s1 += g;
      s2 += g * (to_float(xr[col]) - mu) * rs;
    }
    const float2 sums = block_sum2(s1, s2, buffer, parity);
    const float c1 = sums.x * inv_n, c2 = sums.y * inv_n;
    for (long long col = threadIdx.x; col < n; col += kThreads) {
      const float xh = (to_float(xr[col]) - mu) * rs, d = to_float(dyr[col]);
      dx[row * n + col] = from_float<T>((__fmul_rn(d, to_float(w[col])) - c1 - xh * c2) * rs);
      pdw[col] += d * xh;
      pdb[col] += d;
    }
  }
}

// Stage 2: dweight[c] = sum over blocks of part_dw[b][c]. 32 columns per block keep each warp's
// reads one 128-byte line; 8 warps stride over the partial rows and meet in shared memory.
template <typename T>
__global__ void __launch_bounds__(kThreads) sum_partials_kernel(const float* __restrict__ part_dw,
                                                                const float* __restrict__ part_db, T* __restrict__ dw,
                                                                T* __restrict__ db, long long programs, long long n) {
  __shared__ float sums[2][kWarps][33];  // +1 column: no bank conflicts on the transposed read
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const long long col = blockIdx.x * 32LL + lane;
  float a = 0.f, b = 0.f;
  if (col < n) {
    // Unrolled so each thread has several independent loads in flight: this kernel is latency-bound.
#pragma unroll 8
    for (long long p = warp; p < programs; p += kWarps) a += part_dw[p * n + col], b += part_db[p * n + col];
  }
  sums[0][warp][lane] = a;
  sums[1][warp][lane] = b;
  __syncthreads();
  if (warp < 2 && col < n) {
    float total = 0.f;
#pragma unroll
    for (int i = 0; i < kWarps; ++i) total += sums[warp][i][lane];
    (warp == 0 ? dw : db)[col] = from_float<T>(total);
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

// The smallest register footprint that holds the row (up to 32 fp32 values per array and thread,
// below spilling), else the scalar wide kernel. Returns the number of partial rows written.
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


int launch(const void* x, const void* dy, const void* w, const void* mean,
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
    sum_partials_kernel<T><<<blocks_for(n, 32), kThreads, 0, stream>>>(p.pdw, p.pdb, static_cast<T*>(dw),
                                                                       static_cast<T*>(db), programs, n);
  });
  return static_cast<int>(cudaGetLastError());
}
}  // namespace orig

// partial: fp32 [2, capacity, n] scratch for the per-block sums; capacity >= 1.
extern "C" int rooflint_layernorm_backward(const void* x, const void* dy, const void* w, const void* mean,
                                           const void* rstd, void* dx, void* dw, void* db, void* partial,
                                           long long rows, long long n, long long capacity, long long dtype,
                                           cudaStream_t stream) {
  if (rows < 1 || n < 1 || capacity < 1) return static_cast<int>(cudaErrorInvalidValue);
  float* pdw = static_cast<float*>(partial);
  const Problem p{x,   dy,  w, static_cast<const float*>(mean), static_cast<const float*>(rstd), dx, pdw,
                  pdw + capacity * n, rows, n, capacity, stream};
  return run<Plan<256, 1, false, 2>, 8>(p, dw, db, dtype);
}

// TUNING ONLY (removed after the device run): config = plan + 16 * stage-2 choice; plan 0 is the old code.
extern "C" int rooflint_layernorm_backward_tune(const void* x, const void* dy, const void* w, const void* mean,
                                                const void* rstd, void* dx, void* dw, void* db, void* partial,
                                                long long rows, long long n, long long capacity, long long dtype,
                                                long long config, cudaStream_t stream) {
  if (rows < 1 || n < 1 || capacity < 1) return static_cast<int>(cudaErrorInvalidValue);
  float* pdw = static_cast<float*>(partial);
  const Problem p{x,   dy,  w, static_cast<const float*>(mean), static_cast<const float*>(rstd), dx, pdw,
                  pdw + capacity * n, rows, n, capacity, stream};
  const long long plan = config % 16, sum = config / 16;
#define LNB_PLAN(I, THREADS, ROWS, PREFETCH, MINB)                                        \
  if (plan == I) {                                                                        \
    if (sum == 0) return run<Plan<THREADS, ROWS, PREFETCH, MINB>, 8>(p, dw, db, dtype);    \
    if (sum == 1) return run<Plan<THREADS, ROWS, PREFETCH, MINB>, 16>(p, dw, db, dtype);   \
    if (sum == 2) return run<Plan<THREADS, ROWS, PREFETCH, MINB>, 4>(p, dw, db, dtype);    \
  }
  LNB_PLAN(1, 256, 1, false, 2)
  LNB_PLAN(2, 256, 1, false, 3)
  LNB_PLAN(3, 256, 1, true, 2)
  LNB_PLAN(4, 256, 2, false, 2)
  LNB_PLAN(5, 512, 1, false, 2)
  LNB_PLAN(6, 512, 1, false, 3)
  LNB_PLAN(7, 512, 1, true, 2)
  LNB_PLAN(8, 512, 2, false, 2)
  LNB_PLAN(9, 256, 1, true, 3)
#undef LNB_PLAN
  if (plan == 0) return orig::launch(x, dy, w, mean, rstd, dx, dw, db, partial, rows, n, capacity, dtype, stream);
  return static_cast<int>(cudaErrorInvalidValue);
}
