// Prefill attention, O = softmax(Q K^T * scale [+ causal mask]) V, FlashAttention-2 style on the
// tensor cores with mma.sync.m16n8k16 (fp16/bf16 in, fp32 accumulate).
//
// Why this shape of kernel:
// - The N x N scores never touch HBM: a block owns 128 query rows (8 warps x 16 rows), streams
//   64-key tiles of K and V through shared memory and keeps a running max and sum per row
//   (the online softmax), so HBM traffic is Q, K, V read once per block row and O written once.
// - Tensor cores, not scalar FMAs: H100 bf16 mma runs ~15x the CUDA-core FP32 rate. S = Q K^T and
//   O += P V are both m16n8k16 MMAs; P goes from the S accumulators straight into A fragments
//   (the fp32 C layout of two adjacent n8 tiles is the A layout of one k16 step), no smem trip.
// - ldmatrix feeds the fragments; K is read untransposed (K rows are B columns), V with .trans.
//   Tiles are XOR-swizzled in 16-byte chunks so the 8 row addresses of one ldmatrix hit 8
//   different bank groups (rows are 128 or 256 bytes apart, which would otherwise all collide).
// - cp.async double-buffers K/V: tile j+1 streams in from L2/HBM while tile j is computed.
// mma.sync bf16 and cp.async need sm_80. The sm_75 build compiles an empty kernel and the
// launcher refuses to run on a GPU below sm_80 with cudaErrorNotSupported.
#include "rooflint/mma.cuh"  // swizzle, ldmatrix, mma16816

namespace {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kBlockM = kWarps * 16;  // each warp owns 16 query rows: one m16 MMA tile
constexpr int kBlockN = 64;           // keys per tile: 8 n8 tiles of S per warp (32 fp32 registers)

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800

__device__ __forceinline__ unsigned smem_addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared, bypassing L1; src_bytes 0 zero-fills (rows past the sequence end).
__device__ __forceinline__ void cp_async16(void* dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }

// Copy rows [row0, row0 + rows) of a [n x D] matrix into a swizzled smem tile; rows >= n read as zero.
template <typename T, int D, int rows>
__device__ __forceinline__ void load_tile(T* tile, const T* src, int row0, int n) {
  constexpr int kChunks = rows * D / 8;  // 16-byte chunks
  static_assert(kChunks % kThreads == 0, "tile must split evenly over the block");
#pragma unroll
  for (int i = 0; i < kChunks / kThreads; ++i) {
    const int chunk = threadIdx.x + i * kThreads;
    const int row = chunk / (D / 8), col = (chunk % (D / 8)) * 8;
    const bool inside = row0 + row < n;
    const T* from = src + static_cast<long long>(inside ? row0 + row : 0) * D + col;
    cp_async16(tile + swizzle<D>(row, col), from, inside ? 16 : 0);
  }
}

#endif  // __CUDA_ARCH__ >= 800

template <typename T, int D>
__global__ void __launch_bounds__(kThreads, 1)
    attention_kernel(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v, T* __restrict__ o,
                     int n, bool causal, float scale_log2) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* q_tile = reinterpret_cast<T*>(smem_raw);
  T* k_tiles = q_tile + kBlockM * D;         // 2 stages of [kBlockN x D]
  T* v_tiles = k_tiles + 2 * kBlockN * D;    // 2 stages of [kBlockN x D]

  // Causal blocks differ in work (row block m sees m+1 diagonal-limited tiles); launch the
  // longest first so the short ones fill the tail of the grid.
  const int m_block = causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
  const long long head = static_cast<long long>(blockIdx.y) * n * D;
  q += head;
  k += head;
  v += head;
  o += head;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int row0 = m_block * kBlockM;
  const int warp_row0 = row0 + warp * 16;
  const int g = lane / 4, c = lane % 4;  // mma fragment coordinates: row group and column pair

  const int key_end = causal ? min(n, row0 + kBlockM) : n;
  const int tiles = (key_end + kBlockN - 1) / kBlockN;

  load_tile<T, D, kBlockM>(q_tile, q, row0, n);
  load_tile<T, D, kBlockN>(k_tiles, k, 0, n);
  load_tile<T, D, kBlockN>(v_tiles, v, 0, n);
  cp_async_commit();
  cp_async_wait_all();
  __syncthreads();

  // Q stays in registers for the whole key loop: D/16 A fragments per warp.
  unsigned qf[D / 16][4];
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    const int r = warp * 16 + (lane % 8) + 8 * ((lane / 8) % 2), col = kk * 16 + 8 * (lane / 16);
    ldmatrix_x4(qf[kk], q_tile + swizzle<D>(r, col));
  }

  float acc[D / 8][4];
#pragma unroll
  for (int i = 0; i < D / 8; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.f;
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.f, 0.f};  // rows g and g + 8

  for (int t = 0; t < tiles; ++t) {
    const int stage = t & 1;
    if (t + 1 < tiles) {  // prefetch the next tile into the other stage, freed by the last barrier
      load_tile<T, D, kBlockN>(k_tiles + (stage ^ 1) * kBlockN * D, k, (t + 1) * kBlockN, n);
      load_tile<T, D, kBlockN>(v_tiles + (stage ^ 1) * kBlockN * D, v, (t + 1) * kBlockN, n);
      cp_async_commit();
    }
    const T* kt = k_tiles + stage * kBlockN * D;
    const T* vt = v_tiles + stage * kBlockN * D;
    const int key0 = t * kBlockN;

    // A causal warp whose 16 rows all sit above this tile has nothing to add: skip its MMAs.
    if (!causal || key0 <= warp_row0 + 15) {
      // S = Q K^T for 16 rows x 64 keys: 8 n8 tiles, 4 fp32 each.
      float s[kBlockN / 8][4];
#pragma unroll
      for (int i = 0; i < kBlockN / 8; ++i) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.f;
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
#pragma unroll
        for (int np = 0; np < kBlockN / 16; ++np) {
          unsigned b[4];
          const int key = np * 16 + (lane % 8) + 8 * (lane / 16), col = kk * 16 + 8 * ((lane / 8) % 2);
          ldmatrix_x4(b, kt + swizzle<D>(key, col));
          mma16816<T>(s[2 * np], qf[kk], b[0], b[1]);
          mma16816<T>(s[2 * np + 1], qf[kk], b[2], b[3]);
        }
      }

      // Mask keys past the end and, on the diagonal, keys after the query. Warp-uniform branch.
      if (key0 + kBlockN > n || (causal && key0 + kBlockN - 1 > warp_row0)) {
#pragma unroll
        for (int i = 0; i < kBlockN / 8; ++i)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int key = key0 + i * 8 + 2 * c + (e & 1), row = warp_row0 + g + 8 * (e >> 1);
            if (key >= n || (causal && key > row)) s[i][e] = -INFINITY;
          }
      }

      // Online softmax in fp32, base 2 with the scale folded in: p = 2^(s*scale*log2e - max).
      float alpha[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float mx = -INFINITY;
#pragma unroll
        for (int i = 0; i < kBlockN / 8; ++i) mx = fmaxf(mx, fmaxf(s[i][2 * h], s[i][2 * h + 1]));
        // The 4 lanes of a quad hold one row's 64 columns between them.
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float new_max = fmaxf(row_max[h], mx * scale_log2);
        // A row with every key masked so far keeps max -inf; subtract 0 instead to avoid inf - inf.
        const float base = new_max == -INFINITY ? 0.f : new_max;
        alpha[h] = fast_exp2(row_max[h] - base);
        row_max[h] = new_max;
        float sum = 0.f;
#pragma unroll
        for (int i = 0; i < kBlockN / 8; ++i) {
          s[i][2 * h] = fast_exp2(fmaf(s[i][2 * h], scale_log2, -base));
          s[i][2 * h + 1] = fast_exp2(fmaf(s[i][2 * h + 1], scale_log2, -base));
          sum += s[i][2 * h] + s[i][2 * h + 1];
        }
        // Each lane keeps a partial sum of its own columns; the quad is summed once at the end.
        row_sum[h] = row_sum[h] * alpha[h] + sum;
      }
#pragma unroll
      for (int i = 0; i < D / 8; ++i) {
        acc[i][0] *= alpha[0];
        acc[i][1] *= alpha[0];
        acc[i][2] *= alpha[1];
        acc[i][3] *= alpha[1];
      }

      // O += P V: P's accumulators become A fragments in registers, V arrives transposed by ldmatrix.
#pragma unroll
      for (int kk = 0; kk < kBlockN / 16; ++kk) {
        const unsigned pa[4] = {pack2<T>(s[2 * kk][0], s[2 * kk][1]), pack2<T>(s[2 * kk][2], s[2 * kk][3]),
                                pack2<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                                pack2<T>(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
        for (int dp = 0; dp < D / 16; ++dp) {
          unsigned b[4];
          const int key = kk * 16 + (lane % 8) + 8 * ((lane / 8) % 2), col = dp * 16 + 8 * (lane / 16);
          ldmatrix_x4_trans(b, vt + swizzle<D>(key, col));
          mma16816<T>(acc[2 * dp], pa, b[0], b[1]);
          mma16816<T>(acc[2 * dp + 1], pa, b[2], b[3]);
        }
      }
    }
    cp_async_wait_all();  // tile t+1 has landed ...
    __syncthreads();      // ... for every warp, and nobody still reads stage t before it is refilled
  }

  // Finish the row sums across the quad and write O = acc / sum (rows past n are padding).
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float sum = row_sum[h];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    const float inv = 1.f / sum;
    const int row = warp_row0 + g + 8 * h;
    if (row < n) {
#pragma unroll
      for (int i = 0; i < D / 8; ++i)
        *reinterpret_cast<unsigned*>(o + static_cast<long long>(row) * D + i * 8 + 2 * c) =
            pack2<T>(acc[i][2 * h] * inv, acc[i][2 * h + 1] * inv);
    }
  }
#else
  // Below sm_80 there is no bf16 mma.sync or cp.async; the launcher never starts this.
  __trap();
#endif
}

template <typename T, int D>
int launch(const void* q, const void* k, const void* v, void* o, long long heads, long long n, bool causal,
           float scale, cudaStream_t stream) {
  constexpr int kSmem = (kBlockM + 4 * kBlockN) * D * static_cast<int>(sizeof(T));  // Q + 2 x (K, V)
  auto kernel = attention_kernel<T, D>;
  // More than the default 48 KB of dynamic shared memory must be opted into per kernel.
  cudaError_t status = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  if (status != cudaSuccess) return static_cast<int>(status);
  const dim3 grid(static_cast<unsigned>((n + kBlockM - 1) / kBlockM), static_cast<unsigned>(heads));
  constexpr float kLog2e = 1.4426950408889634f;
  kernel<<<grid, kThreads, kSmem, stream>>>(static_cast<const T*>(q), static_cast<const T*>(k),
                                            static_cast<const T*>(v), static_cast<T*>(o), static_cast<int>(n),
                                            causal, scale * kLog2e);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace

// q, k, v, o: contiguous [batch * heads, n, head_dim]; dtype 1 (fp16) or 2 (bf16); head_dim 64 or 128.
extern "C" int rooflint_attention(const void* q, const void* k, const void* v, void* o, long long heads,
                                  long long n, long long head_dim, long long causal, long long dtype, float scale,
                                  cudaStream_t stream) {
  // sm_80 and newer: mma.sync on bf16 and cp.async.
  if (const int refused = attention_launch_check(8, 99, q, k, v, o, heads, n)) return refused;
  const bool is_causal = causal != 0;
  return with_half_dtype(dtype, [&](auto t) {
    return with_choice<64, 128>(head_dim, [&](auto d) {
      return launch<decltype(t), decltype(d)::value>(q, k, v, o, heads, n, is_causal, scale, stream);
    });
  });
}
