// Flash-decoding for one query token against a [B, H_kv, C, D] KV cache, grouped-query heads.
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
// The dot products run as CUDA-core FMAs: at 1-8 FLOP per byte that is far below the fp32 peak.
#include "rooflint/common.cuh"

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
  __shared__ float sm_m[kWarps][G], sm_l[kWarps][G], sm_acc[kWarps][G][D];
  if (lane < kRowThreads) {
#pragma unroll
    for (int g = 0; g < G; ++g) {
      if (lane == 0) {
        sm_m[warp][g] = m[g];
        sm_l[warp][g] = l[g];
      }
#pragma unroll
      for (int j = 0; j < 8; ++j) sm_acc[warp][g][sub * 8 + j] = acc[g][j];
    }
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < G * D; idx += kThreads) {
    const int g = idx / D, dim = idx % D;
    float M = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) M = fmaxf(M, sm_m[w][g]);
    float L = 0.0f, A = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float c = rescale(sm_m[w][g], M);
      L += sm_l[w][g] * c;
      A += sm_acc[w][g][dim] * c;
    }
    const long long part = (bh * G + g) * splits + split;
    part_acc[part * D + dim] = A;
    if (dim == 0) {
      part_ml[part * 2] = M;
      part_ml[part * 2 + 1] = L;
    }
  }
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

// The ring is dynamic shared memory next to the kernel's static merge buffers; together they pass
// the 48 KB a launch gets by default, so each instance opts in once (thread-safe static init).
template <typename T, int D, int G>
cudaError_t opt_in() {
  static const cudaError_t status =
      cudaFuncSetAttribute(decode_split_kernel<T, D, G>, cudaFuncAttributeMaxDynamicSharedMemorySize, kRingBytes);
  return status;
}

template <typename T, int D, int G>
int launch(const void* q, const void* k, const void* v, float* part_acc, float* part_ml, void* out, int B, int H,
           int H_kv, int C, int chunk, int splits, float qk_scale, const Layout& layout, cudaStream_t stream) {
  auto split_kernel = decode_split_kernel<T, D, G>;
  if (const cudaError_t status = opt_in<T, D, G>(); status != cudaSuccess) return static_cast<int>(status);
  split_kernel<<<dim3(splits, B * H_kv), kThreads, kRingBytes, stream>>>(
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
                                         cudaStream_t stream) {
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
  return with_kernel_config(dtype, d, h / h_kv, [&](auto t, auto dim, auto group) {
    return launch<decltype(t), decltype(dim)::value, decltype(group)::value>(q, k, v, acc, ml, out, B, H, Hkv, C, Ch, S,
                                                                               qk_scale, layout, stream);
  });
}

// Split-kernel blocks one SM holds at once for this head dim, group and dtype (registers, the ring
// and the merge buffers decide it), or minus a CUDA error code. The Python side sizes the grid in
// whole waves of it: a last wave a quarter full streams at a fraction of the bandwidth.
extern "C" int rooflint_decode_blocks_per_sm(long long d, long long g, long long dtype) {
  int blocks = 0;
  const int status = with_kernel_config(dtype, d, g, [&](auto t, auto dim, auto group) {
    using T = decltype(t);
    constexpr int D = decltype(dim)::value, G = decltype(group)::value;
    cudaError_t opted = opt_in<T, D, G>();
    if (opted == cudaSuccess)
      opted = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, decode_split_kernel<T, D, G>, kThreads, kRingBytes);
    return static_cast<int>(opted);
  });
  return status == 0 ? blocks : -status;
}
