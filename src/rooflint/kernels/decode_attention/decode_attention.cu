// Flash-decoding for one query token against a [B, H_kv, C, D] KV cache, grouped-query heads, in
// two split kernels: on tensor cores (mma.sync, sm_80+, below) and, for sm_75, on CUDA cores (next).
//
// Decode does ~G FLOPs per cached byte, so it is a streaming problem: the kernel's job is to keep
// enough 16-byte loads of K and V in flight to cover HBM latency, and to read each cache line once.
//   * block = (kv head, chunk of the cache); it serves all G query heads of that kv head, so K and
//     V are read once, not G times;
//   * D/8 threads share one cache row, each holding 8 dims (one 16-byte chunk of K, one of V); a
//     128-thread block covers 128/(D/8) rows per pass and each thread takes kUnroll rows a step;
//   * the chunks go through a kStages-deep cp.async ring in shared memory: a thread copies exactly
//     the chunks it will later read, so neither the copies nor the ring's reuse need a barrier,
//     and the next kStages - 1 steps stream in while this one is computed. (The first version
//     loaded into registers: a step's loads were all in flight, then none while its G dot
//     products and softmax ran. ncu on the H200 at G=4: 155 registers, 18% occupancy, stalls
//     long_scoreboard 35% and wait 25%, 0.70 of the read stream. The ring holds the bytes in
//     flight in shared memory instead of registers, and keeps them in flight during the math.)
//   * q.k is a per-thread 8-term dot product finished by a shuffle butterfly over the row's
//     threads; each thread then keeps its own online softmax (m, l, acc[8]) per query head, in the
//     log2 domain (the scale folds in log2(e), so exp is one ex2 instruction);
//   * the block merges its threads' states (shuffles, then shared memory across warps) into one
//     fp32 partial per (query head, chunk); a second kernel merges the chunks' partials.
// The CUDA-core kernel's dot products run as FMAs: at 1-8 FLOP per byte that is far below the fp32
// peak, but the work around them (shuffles, per-thread softmax, unpacking) is what bounds it on a
// Hopper's bandwidth per SM; the tensor-core kernel below leaves that work to mma.sync.
#include "rooflint/mma.cuh"  // common.cuh, swizzle, ldmatrix, mma16816

namespace decode_detail {

inline constexpr int kThreads = 128;
inline constexpr int kWarps = kThreads / 32;
inline constexpr int kUnroll = 4;  // cache rows per thread per step: 128 bytes of K and V
#ifndef ROOFLINT_DECODE_STAGES
#define ROOFLINT_DECODE_STAGES 3
#endif
// Steps in the ring: kStages - 1 in flight while one is computed. 3 steps of 16 KB a block: at
// G = 4 (128 registers) four blocks fit an SM's registers and its 227 KB of shared memory (sm_90),
// 128 KB of K and V in flight, over the ~30 KB the H200's 4.8 TB/s needs per SM at ~1 us latency.
inline constexpr int kStages = ROOFLINT_DECODE_STAGES;
inline constexpr int kRingBytes = kStages * kUnroll * 2 * kThreads * 16;

// One 16-byte chunk into this thread's ring slot; invalid rows are zero-filled so 0 * chunk stays 0.
// sm_75 has no cp.async: a synchronous copy gives the same values.
__device__ __forceinline__ void copy_chunk(uint4* slot, const void* src, bool valid) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  cp_async16(static_cast<uint32_t>(__cvta_generic_to_shared(slot)), src, valid);
#else
  *slot = valid ? __ldcs(static_cast<const uint4*>(src)) : uint4{};
#endif
}

// exp2(m - M) that is 0, not NaN, when this part saw no token (m = -inf), even if M is -inf too.
__device__ __forceinline__ float rescale(float m, float M) { return m == -INFINITY ? 0.0f : exp2f(m - M); }

__device__ __forceinline__ void unpack8(const uint4& raw, float* out, const __half*) {
  const __half2* h = reinterpret_cast<const __half2*>(&raw);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __half22float2(h[i]);
    out[2 * i] = f.x;
    out[2 * i + 1] = f.y;
  }
}
__device__ __forceinline__ void unpack8(const uint4& raw, float* out, const __nv_bfloat16*) {
  // bf16 -> fp32 is a 16-bit shift: done on the raw words, no conversion instruction needed.
  const uint32_t* w = reinterpret_cast<const uint32_t*>(&raw);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    out[2 * i] = __uint_as_float(w[i] << 16);
    out[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
}

// Each warp's online-softmax state (running max, sum and acc per query head), merged across the
// block's warps into one fp32 partial per (query head, split) by store_partials.
template <int G, int D>
struct MergeBuffers {
  float m[kWarps][G], l[kWarps][G], acc[kWarps][G][D];
};

template <int G, int D>
__device__ __forceinline__ void store_partials(const MergeBuffers<G, D>& merge, float* __restrict__ part_acc,
                                               float* __restrict__ part_ml, long long bh, int split, int splits) {
  for (int idx = threadIdx.x; idx < G * D; idx += kThreads) {
    const int g = idx / D, dim = idx % D;
    float M = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) M = fmaxf(M, merge.m[w][g]);
    float L = 0.0f, A = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float c = rescale(merge.m[w][g], M);
      L += merge.l[w][g] * c;
      A += merge.acc[w][g][dim] * c;
    }
    const long long part = (bh * G + g) * splits + split;
    part_acc[part * D + dim] = A;
    if (dim == 0) {
      part_ml[part * 2] = M;
      part_ml[part * 2 + 1] = L;
    }
  }
}

template <typename T, int D, int G>
__global__ void __launch_bounds__(kThreads) decode_split_kernel(const T* __restrict__ q, const T* __restrict__ k,
                                                                  const T* __restrict__ v,
                                                                  float* __restrict__ part_acc,
                                                                  float* __restrict__ part_ml, int C, int chunk,
                                                                  int splits, float qk_scale, int H_kv,
                                                                  long long kv_rows, long long q_batch_stride) {
  constexpr int kRowThreads = D / 8;                // threads sharing one cache row
  constexpr int kRowsPerPass = kThreads / kRowThreads;
  const int split = blockIdx.x;
  const long long bh = blockIdx.y;  // b * H_kv + kv head
  // q may be a strided view (a model's fused QKV output): sequence b starts q_batch_stride
  // elements after b-1, and its heads are D apart. Each (b, kv head) owns kv_rows cache rows, of
  // which the first C are read: a cache allocated for its final length is read in place.
  const T* q_seq = q + (bh / H_kv) * q_batch_stride + (bh % H_kv) * G * D;
  const int sub = threadIdx.x % kRowThreads, row = threadIdx.x / kRowThreads;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;

  float qf[G][8];
#pragma unroll
  for (int g = 0; g < G; ++g) {
    const uint4 raw = *reinterpret_cast<const uint4*>(q_seq + g * D + sub * 8);
    unpack8(raw, qf[g], q);
#pragma unroll
    for (int j = 0; j < 8; ++j) qf[g][j] *= qk_scale;
  }
  float m[G], l[G], acc[G][8];
#pragma unroll
  for (int g = 0; g < G; ++g) {
    m[g] = -INFINITY;
    l[g] = 0.0f;
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[g][j] = 0.0f;
  }

  const T* k_head = k + bh * kv_rows * D + sub * 8;
  const T* v_head = v + bh * kv_rows * D + sub * 8;
  const int start = split * chunk, end = min(start + chunk, C);
  constexpr int kStepRows = kRowsPerPass * kUnroll;
  // The step count is uniform over the block so every lane reaches every shuffle.
  const int steps = (end - start + kStepRows - 1) / kStepRows;
  // Ring slot (stage, u, K or V) of this thread: a warp's 32 slots are 512 contiguous bytes, so
  // both the copies and the reads are conflict-free.
  extern __shared__ uint4 ring[];
  auto slot = [&](int stage, int u, int is_v) { return ring + ((stage * kUnroll + u) * 2 + is_v) * kThreads + threadIdx.x; };
  auto issue = [&](int step) {
    if (step < steps) {
      const int base = start + step * kStepRows;
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int t = base + u * kRowsPerPass + row;
        const bool valid = t < end;
        const long long offset = static_cast<long long>(valid ? t : start) * D;
        copy_chunk(slot(step % kStages, u, 0), k_head + offset, valid);
        copy_chunk(slot(step % kStages, u, 1), v_head + offset, valid);
      }
    }
    cp_async_commit();  // empty groups at the tail keep the wait count uniform
  };
#pragma unroll
  for (int step = 0; step < kStages - 1; ++step) issue(step);

  for (int step = 0; step < steps; ++step) {
    // This thread's slots of step - 1 were read last step, in program order: refill them now.
    issue(step + kStages - 1);
    cp_async_wait<kStages - 1>();  // this thread's copies of `step` have landed
    const int base = start + step * kStepRows;
    uint4 kr[kUnroll], vr[kUnroll];
    bool valid[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      valid[u] = base + u * kRowsPerPass + row < end;
      kr[u] = *slot(step % kStages, u, 0);
      vr[u] = *slot(step % kStages, u, 1);
    }
    // Scores of the kUnroll rows first, so the running max and the rescale of acc happen once
    // per kUnroll rows instead of once per row.
    float s[kUnroll][G];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      float kf[8];
      unpack8(kr[u], kf, k);
#pragma unroll
      for (int g = 0; g < G; ++g) {
        float dot = 0.0f;
#pragma unroll
        for (int j = 0; j < 8; ++j) dot = fmaf(qf[g][j], kf[j], dot);
#pragma unroll
        for (int offset = kRowThreads / 2; offset > 0; offset >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, offset);
        s[u][g] = valid[u] ? dot : -INFINITY;
      }
    }
#pragma unroll
    for (int g = 0; g < G; ++g) {
      float m_new = m[g];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) m_new = fmaxf(m_new, s[u][g]);
      const float correction = rescale(m[g], m_new);
      l[g] *= correction;
#pragma unroll
      for (int j = 0; j < 8; ++j) acc[g][j] *= correction;
      m[g] = m_new;
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      float vf[8];
      unpack8(vr[u], vf, v);
#pragma unroll
      for (int g = 0; g < G; ++g) {
        const float p = valid[u] ? exp2f(s[u][g] - m[g]) : 0.0f;  // valid: both finite
        l[g] += p;
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[g][j] = fmaf(p, vf[j], acc[g][j]);
      }
    }
  }

  // Merge the row groups of a warp: lanes `offset` apart hold the same dims of different rows.
#pragma unroll
  for (int offset = kRowThreads; offset < 32; offset <<= 1) {
#pragma unroll
    for (int g = 0; g < G; ++g) {
      const float m_other = __shfl_xor_sync(0xffffffffu, m[g], offset);
      const float l_other = __shfl_xor_sync(0xffffffffu, l[g], offset);
      const float M = fmaxf(m[g], m_other);
      const float mine = rescale(m[g], M), theirs = rescale(m_other, M);
      l[g] = l[g] * mine + l_other * theirs;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const float a_other = __shfl_xor_sync(0xffffffffu, acc[g][j], offset);
        acc[g][j] = acc[g][j] * mine + a_other * theirs;
      }
      m[g] = M;
    }
  }

  // Then the warps, through shared memory: lanes 0..D/8-1 of each warp hold all D dims.
  __shared__ MergeBuffers<G, D> merge;
  if (lane < kRowThreads) {
#pragma unroll
    for (int g = 0; g < G; ++g) {
      if (lane == 0) {
        merge.m[warp][g] = m[g];
        merge.l[warp][g] = l[g];
      }
#pragma unroll
      for (int j = 0; j < 8; ++j) merge.acc[warp][g][sub * 8 + j] = acc[g][j];
    }
  }
  __syncthreads();
  store_partials(merge, part_acc, part_ml, bh, split, splits);
}

// ---- The tensor-core split kernel (sm_80+) ----
// The path on sm_80+ for every G. At G = 4 the CUDA-core kernel above issues ~70 warp instructions
// per cache row: its 16 threads of a row each run a 4-step shuffle butterfly and their own online
// softmax per query head, and unpack bf16 by hand. At the H200's 4.8 TB/s an SM receives a 512-byte
// row of K and V every ~30 cycles, time for ~120 issues: that kernel is issue-bound (ncu: warps not
// selected, the ALU pipe busy), short of the read ceiling. Here each warp streams its
// own 16-row tiles and lets mma.sync do the math, as FlashAttention-2 does for prefill but with the
// G query heads as the 16 rows of the A operand (rows G..15 are zero: even at 16 padded rows decode
// asks the tensor cores for a fraction of their throughput): S = Q K^T is D/8 mma per 16 rows,
// O += P V another D/8, and the softmax runs once per (head, row) on the accumulators, ~10 issues
// per cache row in all. A warp's tiles go through its own cp.async ring, written and read by its
// own lanes, so the steady state needs __syncwarp only; the block meets once, to merge its warps'
// states. It is memory-bound where the kernel above was issue-bound: under ncu DRAM is busy, the
// issue slots mostly idle, and the warps' stalls are waits on their loads.
inline constexpr int kTileRows = 16;  // cache rows per warp per step: one k16 step of P V
#ifndef ROOFLINT_DECODE_MMA_STAGES
#define ROOFLINT_DECODE_MMA_STAGES 3
#endif
// 3 steps of a 16-row K and V tile per warp: 96 KB a block at D = 128, so two blocks share an SM's
// 228 KB, and with each warp 2 steps ahead an SM has 2 x 4 x 2 x 8 KB = 128 KB in flight, four times
// the ~30 KB an H200 SM needs at ~1 us of latency.
inline constexpr int kMmaStages = ROOFLINT_DECODE_MMA_STAGES;
template <typename T, int D>
inline constexpr int kMmaRingBytes = kMmaStages * kWarps * 2 * kTileRows * D * static_cast<int>(sizeof(T));

template <typename T, int D, int G>
__global__ void __launch_bounds__(kThreads) decode_split_mma_kernel(const T* __restrict__ q, const T* __restrict__ k,
                                                                      const T* __restrict__ v,
                                                                      float* __restrict__ part_acc,
                                                                      float* __restrict__ part_ml, int C, int chunk,
                                                                      int splits, float qk_scale, int H_kv,
                                                                      long long kv_rows, long long q_batch_stride) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  static_assert(G <= 8, "the query heads of a group are the A operand's first 8 rows");
  constexpr int kChunks = D / 8;                   // 16-byte chunks in a cache row
  constexpr int kTileElems = kTileRows * D;        // one K (or V) tile
  constexpr int kCopies = kTileRows * kChunks / 32;  // 16-byte copies per lane per tile
  const int split = blockIdx.x;
  const long long bh = blockIdx.y;  // b * H_kv + kv head
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int group = lane >> 2, pair = lane & 3;  // fragment coordinates: row (query head) and column pair
  const T* q_seq = q + (bh / H_kv) * q_batch_stride + (bh % H_kv) * G * D;
  const T* k_head = k + bh * kv_rows * D;
  const T* v_head = v + bh * kv_rows * D;

  // Q as D/16 A fragments: rows are query heads, so only rows < G are loaded and rows 8..15 are zero.
  unsigned qa[D / 16][4];
#pragma unroll
  for (int ks = 0; ks < D / 16; ++ks) {
    const T* row = q_seq + group * D + ks * 16 + pair * 2;
    qa[ks][0] = group < G ? *reinterpret_cast<const unsigned*>(row) : 0u;
    qa[ks][2] = group < G ? *reinterpret_cast<const unsigned*>(row + 8) : 0u;
    qa[ks][1] = qa[ks][3] = 0u;
  }
  // This lane's head `group`: running max (log2 domain, scaled), its share of the sum, O's columns
  // 8n + 2 pair and 8n + 2 pair + 1 (o[n][2..3] belong to the zero rows and stay zero).
  float m = -INFINITY, l = 0.0f, o[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;

  const int start = split * chunk, end = min(start + chunk, C);
  // Warp w takes tiles w, w + kWarps, ... of the split: the block reads kWarps tiles side by side.
  const int first = start + warp * kTileRows, stride = kWarps * kTileRows;
  const int steps = first < end ? (end - first + stride - 1) / stride : 0;
  extern __shared__ __align__(16) unsigned char ring_raw[];
  T* ring = reinterpret_cast<T*>(ring_raw) + warp * kMmaStages * 2 * kTileElems;
  auto k_tile = [&](int step) { return ring + (step % kMmaStages) * 2 * kTileElems; };
  auto v_tile = [&](int step) { return k_tile(step) + kTileElems; };
  auto issue = [&](int step) {
    if (step < steps) {
      const int t0 = first + step * stride;
#pragma unroll
      for (int i = 0; i < kCopies; ++i) {
        const int idx = lane + 32 * i, row = idx / kChunks, col = (idx % kChunks) * 8;
        const bool valid = t0 + row < end;
        const long long offset = static_cast<long long>(valid ? t0 + row : start) * D + col;
        const int at = swizzle<D>(row, col);
        cp_async16(static_cast<uint32_t>(__cvta_generic_to_shared(k_tile(step) + at)), k_head + offset, valid);
        cp_async16(static_cast<uint32_t>(__cvta_generic_to_shared(v_tile(step) + at)), v_head + offset, valid);
      }
    }
    cp_async_commit();  // empty groups at the tail keep the wait count uniform
  };
#pragma unroll
  for (int step = 0; step < kMmaStages - 1; ++step) issue(step);

  for (int step = 0; step < steps; ++step) {
    __syncwarp();  // every lane's ldmatrix of step - 1 is done before its slot is refilled
    issue(step + kMmaStages - 1);
    cp_async_wait<kMmaStages - 1>();
    __syncwarp();  // ... and every lane's copies of `step` have landed and are visible to the warp
    const T* kt = k_tile(step);
    const T* vt = v_tile(step);
    // S = Q K^T, 16 heads x 16 rows as two n8 tiles. One ldmatrix.x4 brings 4 chunks (two k16
    // steps) of 8 K rows; K rows are B's columns, so no transpose.
    float s[2][4] = {};
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
      for (int kc = 0; kc < D / 32; ++kc) {
        unsigned b[4];
        ldmatrix_x4(b, kt + swizzle<D>(nt * 8 + (lane & 7), (kc * 4 + (lane >> 3)) * 8));
        mma16816<T>(s[nt], qa[2 * kc], b[0], b[1]);
        mma16816<T>(s[nt], qa[2 * kc + 1], b[2], b[3]);
      }
    }
    // Online softmax on the accumulators: this lane holds head `group` at rows 2 pair, 2 pair + 1 of
    // each n8 tile; the quad of lanes sharing `group` holds all 16.
    const int t0 = first + step * stride;
    const bool partial = t0 + kTileRows > end;  // warp-uniform: only a split's last tile
    float tile_max = -INFINITY;
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        s[nt][j] *= qk_scale;
        if (partial && t0 + nt * 8 + pair * 2 + j >= end) s[nt][j] = -INFINITY;
        tile_max = fmaxf(tile_max, s[nt][j]);
      }
    }
    tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
    tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 2));
    // A tile holds at least one valid row, so m_new is finite and exp2(s - m_new) is 0 for masked rows.
    const float m_new = fmaxf(m, tile_max);
    const float correction = fast_exp2(m - m_new);  // m = -inf on the first tile: 0, and l, o are 0
    m = m_new;
    float p[2][2];
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
      for (int j = 0; j < 2; ++j) p[nt][j] = fast_exp2(s[nt][j] - m_new);
    }
    l = l * correction + (p[0][0] + p[0][1]) + (p[1][0] + p[1][1]);
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      o[n][0] *= correction;
      o[n][1] *= correction;
    }
    // O += P V: the two n8 tiles of P are one k16 A fragment (rows 8..15 zero); V arrives transposed
    // by ldmatrix.trans, two n8 tiles of O's columns per x4.
    const unsigned pa[4] = {pack2<T>(p[0][0], p[0][1]), 0u, pack2<T>(p[1][0], p[1][1]), 0u};
#pragma unroll
    for (int c = 0; c < kChunks; c += 2) {
      unsigned b[4];
      ldmatrix_x4_trans(b, vt + swizzle<D>(((lane >> 3) & 1) * 8 + (lane & 7), (c + (lane >> 4)) * 8));
      mma16816<T>(o[c], pa, b[0], b[1]);
      mma16816<T>(o[c + 1], pa, b[2], b[3]);
    }
  }
  cp_async_wait<0>();  // only empty groups are left, but the ring is about to be reused

  // The quad's four shares of the sum, then the warps' states through shared memory (the ring's).
  l += __shfl_xor_sync(0xffffffffu, l, 1);
  l += __shfl_xor_sync(0xffffffffu, l, 2);
  __syncthreads();  // every warp is done with its ring
  auto& merge = *reinterpret_cast<MergeBuffers<G, D>*>(ring_raw);
  if (group < G) {
    if (pair == 0) {
      merge.m[warp][group] = m;
      merge.l[warp][group] = l;
    }
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      merge.acc[warp][group][n * 8 + pair * 2] = o[n][0];
      merge.acc[warp][group][n * 8 + pair * 2 + 1] = o[n][1];
    }
  }
  __syncthreads();
  store_partials(merge, part_acc, part_ml, bh, split, splits);
#endif
}

// One block per (b, query head), one thread per dim: o = sum_i c_i acc_i / sum_i c_i l_i.
template <typename T>
__global__ void decode_combine_kernel(const float* __restrict__ part_acc, const float* __restrict__ part_ml,
                                      T* __restrict__ out, int splits, int D) {
  const long long row = blockIdx.x;
  const float* ml = part_ml + row * splits * 2;
  float M = -INFINITY;
  for (int s = 0; s < splits; ++s) M = fmaxf(M, ml[2 * s]);
  float L = 0.0f, A = 0.0f;
  for (int s = 0; s < splits; ++s) {
    const float c = rescale(ml[2 * s], M);
    L += ml[2 * s + 1] * c;
    A += part_acc[(row * splits + s) * D + threadIdx.x] * c;
  }
  out[row * D + threadIdx.x] = from_float<T>(A / L);
}

// Where q and the cache rows live (element strides), beyond the dense [B, H, 1, D] / [B, H_kv, C, D].
struct Layout {
  long long kv_rows;         // cache rows each (b, kv head) owns: C when dense, the capacity when not
  long long q_batch_stride;  // elements from one sequence's q to the next: H * D when dense
};

// Which split kernel runs (the `path` argument): kAuto picks the tensor-core kernel on sm_80+ and the
// CUDA-core kernel below (no bf16 mma.sync, no cp.async). The tensor-core kernel is also the one for
// one query head a row (MHA, G = 1): it does without the shuffle butterflies and the per-thread
// unpacking whatever G is.
enum DecodePath { kAuto = 0, kCudaCores = 1, kTensorCores = 2 };

// The path for this GPU, or -1 where the asked one cannot run (tensor cores below sm_80).
inline int resolve_path(long long path) {
  int device = 0, major = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess) {
    return -1;
  }
  if (path == kAuto) return major >= 8 ? kTensorCores : kCudaCores;
  if (path == kTensorCores) return major >= 8 ? kTensorCores : -1;
  return path == kCudaCores ? kCudaCores : -1;
}

// A path's split kernel and its dynamic shared memory (the ring). The ring passes the 48 KB a launch
// gets by default, so each kernel opts in once (a thread-safe static init), and only the kernel that
// runs: a failed opt-in of the other would linger as the thread's last CUDA error.
template <typename T, int D, int G>
struct SplitKernel {
  decltype(&decode_split_kernel<T, D, G>) kernel;  // both kernels take the same arguments
  int ring_bytes;
  cudaError_t opted;
};
template <typename T, int D, int G>
SplitKernel<T, D, G> split_kernel_for(int path) {
  if (path == kTensorCores) {
    static const cudaError_t opted = cudaFuncSetAttribute(
        decode_split_mma_kernel<T, D, G>, cudaFuncAttributeMaxDynamicSharedMemorySize, kMmaRingBytes<T, D>);
    return {decode_split_mma_kernel<T, D, G>, kMmaRingBytes<T, D>, opted};
  }
  static const cudaError_t opted =
      cudaFuncSetAttribute(decode_split_kernel<T, D, G>, cudaFuncAttributeMaxDynamicSharedMemorySize, kRingBytes);
  return {decode_split_kernel<T, D, G>, kRingBytes, opted};
}

template <typename T, int D, int G>
int launch(const void* q, const void* k, const void* v, float* part_acc, float* part_ml, void* out, int B, int H,
           int H_kv, int C, int chunk, int splits, float qk_scale, const Layout& layout, int path,
           cudaStream_t stream) {
  const SplitKernel<T, D, G> split = split_kernel_for<T, D, G>(path);
  if (split.opted != cudaSuccess) return static_cast<int>(split.opted);
  split.kernel<<<dim3(splits, B * H_kv), kThreads, split.ring_bytes, stream>>>(
      static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v), part_acc, part_ml, C, chunk,
      splits, qk_scale, H_kv, layout.kv_rows, layout.q_batch_stride);
  decode_combine_kernel<T><<<B * H, D, 0, stream>>>(part_acc, part_ml, static_cast<T*>(out), splits, D);
  return static_cast<int>(cudaGetLastError());
}

// The kernel instantiated for this dtype, head dim and query-head group, as f(T{}, D, G) with D and G
// std::integral_constants: the launcher and the occupancy query share this one table of cases.
template <typename F>
int with_kernel_config(long long dtype, long long d, long long g, F&& f) {
  return with_half_dtype(dtype, [&](auto t) {
    return with_choice<64, 128>(d, [&](auto dim) {
      return with_choice<1, 2, 4, 8>(g, [&](auto group) { return f(t, dim, group); });
    });
  });
}

}  // namespace decode_detail
using namespace decode_detail;

// part_acc is fp32 [B*H, splits, D], part_ml fp32 [B*H, splits, 2]; chunk * splits >= C and
// every split holds at least one token (decode_attention.split_plan guarantees both).
// kv_rows (>= c) is the rows each (b, kv head) owns in k and v, and q_batch_stride (>= h * d) the
// elements between sequences in q: c and h * d for dense inputs, more for views of a larger buffer.
extern "C" int rooflint_decode_attention(const void* q, const void* k, const void* v, void* part_acc, void* part_ml,
                                         void* out, long long b, long long h, long long h_kv, long long c,
                                         long long d, long long chunk, long long splits, long long dtype,
                                         float qk_scale, long long kv_rows, long long q_batch_stride,
                                         long long path, cudaStream_t stream) {
  if (h_kv < 1 || h % h_kv != 0 || (splits - 1) * chunk >= c || splits * chunk < c) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  // 16-byte loads of q rows and cache rows need the strides to keep 8-element alignment too.
  if (kv_rows < c || q_batch_stride < h * d || q_batch_stride % 8 != 0) return static_cast<int>(cudaErrorInvalidValue);
  if (!aligned16(q) || !aligned16(k) || !aligned16(v)) return static_cast<int>(cudaErrorMisalignedAddress);
  float* acc = static_cast<float*>(part_acc);
  float* ml = static_cast<float*>(part_ml);
  const int B = static_cast<int>(b), H = static_cast<int>(h), Hkv = static_cast<int>(h_kv);
  const int C = static_cast<int>(c), Ch = static_cast<int>(chunk), S = static_cast<int>(splits);
  const Layout layout{kv_rows, q_batch_stride};
  const int chosen = resolve_path(path);
  if (chosen < 0) return static_cast<int>(cudaErrorNotSupported);
  return with_kernel_config(dtype, d, h / h_kv, [&](auto t, auto dim, auto group) {
    return launch<decltype(t), decltype(dim)::value, decltype(group)::value>(q, k, v, acc, ml, out, B, H, Hkv, C, Ch, S,
                                                                               qk_scale, layout, chosen, stream);
  });
}

// Split-kernel blocks one SM holds at once for this head dim, group and dtype (registers, the ring
// and the merge buffers decide it), or minus a CUDA error code. The Python side sizes the grid in
// whole waves of it: a last wave a quarter full streams at a fraction of the bandwidth.
extern "C" int rooflint_decode_blocks_per_sm(long long d, long long g, long long dtype, long long path) {
  const int chosen = resolve_path(path);
  if (chosen < 0) return -static_cast<int>(cudaErrorNotSupported);
  int blocks = 0;
  const int status = with_kernel_config(dtype, d, g, [&](auto t, auto dim, auto group) {
    using T = decltype(t);
    constexpr int D = decltype(dim)::value, G = decltype(group)::value;
    const SplitKernel<T, D, G> split = split_kernel_for<T, D, G>(chosen);
    cudaError_t status = split.opted;
    if (status == cudaSuccess)
      status = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, split.kernel, kThreads, split.ring_bytes);
    return static_cast<int>(status);
  });
  return status == 0 ? blocks : -status;
}
