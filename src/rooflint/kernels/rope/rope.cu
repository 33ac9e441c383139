// Rotary embedding of q and k, [batch, seq, heads, head_dim], non-interleaved "rotate half":
//   out[i] = x[i] * cos_i - x[i + D/2] * sin_i,   out[i + D/2] = x[i + D/2] * cos_i + x[i] * sin_i.
// 0.75 FLOP per byte: memory-bound, so the kernel is a streaming copy with a little math. A block
// owns one (batch, position) token: it stages that position's D/2 cos/sin values in shared memory
// once (loaded from the table, or computed with sincosf in the fused form), then every head of q
// and k reuses them, so the table (or the transcendental work) costs 1/heads per element.
#include "rooflint/common.cuh"

template <typename T, int V>
struct Chunk {
  T v[V];
};

// V contiguous elements: one 16-byte load when V fills a vector, else element loads.
template <typename T, int V>
__device__ __forceinline__ Chunk<T, V> load_chunk(const T* p) {
  Chunk<T, V> out;
  if constexpr (V == Vec<T>::kSize) {
    const AlignedVec<T> vec = load_vec(p);
#pragma unroll
    for (int j = 0; j < V; ++j) out.v[j] = vec.v[j];
  } else {
#pragma unroll
    for (int j = 0; j < V; ++j) out.v[j] = p[j];
  }
  return out;
}

template <typename T, int V>
__device__ __forceinline__ void store_chunk(T* p, const Chunk<T, V>& value) {
  if constexpr (V == Vec<T>::kSize) {
    AlignedVec<T> vec;
#pragma unroll
    for (int j = 0; j < V; ++j) vec.v[j] = value.v[j];
    store_vec(p, vec);
  } else {
#pragma unroll
    for (int j = 0; j < V; ++j) p[j] = value.v[j];
  }
}

template <typename T, int V>
__device__ __forceinline__ void rotate(const Chunk<T, V>& x1, const Chunk<T, V>& x2, const float* c, const float* s,
                                       T* out1, T* out2) {
  Chunk<T, V> o1, o2;
#pragma unroll
  for (int j = 0; j < V; ++j) {
    const float a = to_float(x1.v[j]), b = to_float(x2.v[j]);
    o1.v[j] = from_float<T>(a * c[j] - b * s[j]);
    o2.v[j] = from_float<T>(b * c[j] + a * s[j]);
  }
  store_chunk<T, V>(out1, o1);
  store_chunk<T, V>(out2, o2);
}

template <typename T, int V>
__global__ void rope_kernel(const T* __restrict__ q, const T* __restrict__ k, T* __restrict__ q_out,
                            T* __restrict__ k_out, const float* __restrict__ cos_table,
                            const float* __restrict__ sin_table, long long tokens, long long seq, int heads, int half,
                            bool fused, float neg_log2_theta_over_half) {
  extern __shared__ float trig[];  // [half] cos, then [half] sin
  float* cos_s = trig;
  float* sin_s = trig + half;
  const int chunks = half / V;
  const int items = heads * chunks;  // (head, chunk of V) pairs per token
  for (long long token = blockIdx.x; token < tokens; token += gridDim.x) {
    const long long pos = token % seq;
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
      if (fused) {
        // Accurate sincosf (not __sinf): angles reach seq radians, where the fast path's
        // range reduction loses all precision. exp2f is accurate to 2 ulp.
        const float angle = static_cast<float>(pos) * exp2f(static_cast<float>(i) * neg_log2_theta_over_half);
        sincosf(angle, &sin_s[i], &cos_s[i]);
      } else {
        cos_s[i] = cos_table[pos * half + i];
        sin_s[i] = sin_table[pos * half + i];
      }
    }
    __syncthreads();
    const long long base = token * heads * 2LL * half;
    for (int item = threadIdx.x; item < items; item += blockDim.x) {
      const int h = item / chunks;
      const int c = (item % chunks) * V;
      const long long off = base + static_cast<long long>(h) * 2 * half + c;
      // All four loads before any math or store, so 64 bytes per thread are in flight at once.
      const Chunk<T, V> q1 = load_chunk<T, V>(q + off), q2 = load_chunk<T, V>(q + off + half);
      const Chunk<T, V> k1 = load_chunk<T, V>(k + off), k2 = load_chunk<T, V>(k + off + half);
      rotate<T, V>(q1, q2, cos_s + c, sin_s + c, q_out + off, q_out + off + half);
      rotate<T, V>(k1, k2, cos_s + c, sin_s + c, k_out + off, k_out + off + half);
    }
    __syncthreads();  // the next token overwrites cos_s/sin_s
  }
}

template <typename T>
static void launch_rope(const void* q, const void* k, void* q_out, void* k_out, const float* cos_table,
                        const float* sin_table, long long tokens, long long seq, int heads, int half, bool fused,
                        float neg, cudaStream_t stream) {
  constexpr int kVec = Vec<T>::kSize;
  const bool vector =
      half % kVec == 0 && aligned16(q) && aligned16(k) && aligned16(q_out) && aligned16(k_out);
  const long long items = static_cast<long long>(heads) * (vector ? half / kVec : half);
  // 256 threads: at [32 heads, 128] bf16 that is one (head, 16-byte chunk) per thread, and 8 blocks
  // per SM keep ~128 KB of loads in flight per SM, well past what HBM3 latency needs.
  const int threads = static_cast<int>(items >= 256 ? 256 : ((items + 31) / 32) * 32);
  const unsigned int blocks = blocks_for(tokens, 1);
  const size_t smem = 2 * static_cast<size_t>(half) * sizeof(float);
  auto qp = static_cast<const T*>(q);
  auto kp = static_cast<const T*>(k);
  auto qo = static_cast<T*>(q_out);
  auto ko = static_cast<T*>(k_out);
  if (vector) {
    rope_kernel<T, kVec><<<blocks, threads, smem, stream>>>(qp, kp, qo, ko, cos_table, sin_table, tokens, seq, heads,
                                                            half, fused, neg);
  } else {
    rope_kernel<T, 1><<<blocks, threads, smem, stream>>>(qp, kp, qo, ko, cos_table, sin_table, tokens, seq, heads,
                                                         half, fused, neg);
  }
}

// tokens = batch * seq. fused = 1 computes cos/sin from (position, theta); 0 reads the [seq, D/2] tables.
extern "C" int rooflint_rope(const void* q, const void* k, void* q_out, void* k_out, const float* cos_table,
                             const float* sin_table, long long tokens, long long seq, long long heads,
                             long long head_dim, long long fused, long long dtype, float theta, cudaStream_t stream) {
  if (tokens < 1 || seq < 1 || heads < 1 || head_dim < 2 || head_dim % 2 || head_dim / 2 > 6144)
    return static_cast<int>(cudaErrorInvalidValue);  // smem holds 2 * D/2 floats, at most 48 KB
  const int half = static_cast<int>(head_dim / 2);
  const float neg = -log2f(theta) / static_cast<float>(half);
  ROOFLINT_DISPATCH(dtype, T, {
    launch_rope<T>(q, k, q_out, k_out, cos_table, sin_table, tokens, seq, static_cast<int>(heads), half, fused != 0,
                   neg, stream);
  });
  return static_cast<int>(cudaGetLastError());
}
