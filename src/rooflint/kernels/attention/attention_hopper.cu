// Prefill attention for Hopper (sm_90a) in the FlashAttention-3 style: O = softmax(Q K^T * scale
// [+ causal mask]) V over dense [B*H, N, D] tensors, D = 64 or 128, fp16/bf16 in, fp32 accumulate.
// attention.cu (mma.sync) stays the sm_80 path; the launcher refuses any GPU but sm_90.
//
// Why this shape of kernel:
// - wgmma, not mma.sync: a warpgroup's m64nNk16 reads both operands of S = Q K^T straight from
//   shared memory and runs asynchronously, so no ldmatrix or fragment registers sit between the
//   tiles and the tensor cores (attention.cu's mma.sync path tops out near half of cuDNN).
// - Warp specialization: warpgroup 0 is the producer. One of its threads issues TMA copies of the
//   Q tile and a ring of K/V tiles, with mbarriers counting the bytes; it keeps 40 registers and
//   gives the rest to the two consumer warpgroups (setmaxnreg), which hold 64x128 fp32 scores,
//   a 64xD fp32 output and the bf16 probabilities each.
// - Each consumer owns 64 query rows of the block, so one K/V tile feeds all of them. D=128 runs
//   two consumers (128 rows, 232 registers each). D=64 runs three (192 rows at 160 registers, the
//   producer at 32: 128*32 + 384*160 = 64K): at D=64 a score costs half the tensor work of D=128
//   against the same exp2, so two consumers leave the tensor cores idle whenever both are in their
//   softmax; a third keeps one warpgroup's GEMMs in flight (FlashAttention-3's D=64 tile).
// - Ping-pong: the consumers take turns issuing their GEMMs in a ring (named barrier 1 + c is
//   consumer c's turn), so one warpgroup's softmax (exp2 on the MUFU pipe, max/sum shuffles) runs
//   while another's wgmmas keep the tensor cores busy.
// - Inside a warpgroup, O += P_{j-1} V_{j-1} is issued together with S_j = Q K_j^T and finishes
//   while the softmax of S_j runs; O is rescaled after both (the online softmax's alpha).
// - P goes from the S accumulators to wgmma's register A operand: the fp32 layout of two adjacent
//   n8 column blocks is the A fragment of one k16 step. V is read MN-major (imm-trans-b).
// - Causal: only tiles that cross a consumer's diagonal are masked (the last one at D=128; with
//   192-row blocks and 128-key tiles, up to two at D=64), tiles right of it are never loaded, and the grid runs
//   the longest query blocks first. Consecutive blocks share a head, so a head's K/V (2 MB at
//   N=4096, D=128) is read from HBM once and from L2 by the other blocks in flight.
#include <type_traits>

#include "rooflint/common.cuh"
#include "rooflint/hopper.cuh"

namespace {

[[maybe_unused]] constexpr int kBlockN = 128;  // keys per K/V tile
constexpr int kBoxCols = 64;                      // one 128-byte swizzle row of 16-bit elements
constexpr int kBoxBytes = 128 * kBoxCols * 2;     // a [128 rows x 64 cols] K or V TMA box: 16 KB
constexpr int kQBoxRows = 64;                     // Q comes in [64 rows x 64 cols] boxes, one per consumer
[[maybe_unused]] constexpr int kTurnBarrier = 1;  // named barriers 1..kConsumers: consumer c's turn is 1 + c

// Consumer warpgroups per block (-D overrides the D=64 count for an A/B against two).
#ifndef ROOFLINT_FA3_CONSUMERS_D64
#define ROOFLINT_FA3_CONSUMERS_D64 3
#endif

// K/V tiles in flight (-D overrides them for a sweep). With K and V released separately, two stages
// already hide the loads: a third (224 of the 227 KB) adds shared memory and no overlap.
// The warpgroup index broadcast so nvcc knows it warp-uniform (-D 0 for an A/B against the plain one).
#ifndef ROOFLINT_FA3_UNIFORM_WARPGROUP
#define ROOFLINT_FA3_UNIFORM_WARPGROUP 1
#endif

#ifndef ROOFLINT_FA3_STAGES_D128
#define ROOFLINT_FA3_STAGES_D128 2
#endif
#ifndef ROOFLINT_FA3_STAGES_D64
#define ROOFLINT_FA3_STAGES_D64 4
#endif

template <int D>
struct Layout {
  static_assert(D == 64 || D == 128, "head dims 64 and 128");
  static constexpr int kConsumers = D == 64 ? ROOFLINT_FA3_CONSUMERS_D64 : 2;  // 64 query rows each
  static_assert(kConsumers == 2 || kConsumers == 3, "two or three consumer warpgroups");
  static constexpr int kThreads = 128 * (1 + kConsumers);  // + the producer warpgroup
  static constexpr int kBlockM = 64 * kConsumers;          // query rows per block
  // The register file split by setmaxnreg (64K per SM, one block an SM): 128*40 + 256*232 with two
  // consumers, 128*32 + 384*160 with three.
  static constexpr int kProducerRegisters = kConsumers == 2 ? 40 : 32;
  static constexpr int kConsumerRegisters = kConsumers == 2 ? 232 : 160;
  static_assert(128 * (kProducerRegisters + kConsumers * kConsumerRegisters) <= 65536, "register file");
  static constexpr int kBoxes = D / kBoxCols;  // boxes across a row of Q, K or V
  static constexpr int kTileBytes = kBoxes * kBoxBytes;  // a 128-row tile of K or V
  // Q: kBoxes column boxes of kBlockM rows each; consumer c's rows start c * 64 rows into each.
  static constexpr int kQBoxBytes = kBlockM * kBoxCols * 2;
  static constexpr int kQBytes = kBoxes * kQBoxBytes;
  static constexpr int kStages = D == 64 ? ROOFLINT_FA3_STAGES_D64 : ROOFLINT_FA3_STAGES_D128;
  static constexpr int kK = kQBytes;  // Q at 0; stage s of K at kK + s * 2 * kTileBytes, V just after
  static constexpr int kBarriers = kK + kStages * 2 * kTileBytes;
  static constexpr int kBytes = kBarriers + (1 + 4 * kStages) * 8;
  static constexpr int kSmem = kBytes + 1024;  // the dynamic base is aligned up to 1024 B by hand
};

#ifdef ROOFLINT_SM90A
using namespace rooflint_hopper;

// S (64 x 128, fp32) = Q (shared, K-major) x K^T (shared, K-major); accumulate 0 overwrites S.
#define ROOFLINT_FA3_QK(TYPE)                                                                          \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"                                             \
               "wgmma.mma_async.sync.aligned.m64n128k16.f32." TYPE "." TYPE " {" ROOFLINT_WGMMA_REGS64 \
               "}, %64, %65, p, 1, 1, 0, 0;\n}\n"                                                     \
               : ROOFLINT_WGMMA_ACC64(s)                                                                \
               : "l"(a), "l"(b), "r"(accumulate))
template <typename T>
__device__ __forceinline__ void mma_qk(float (&s)[64], uint64_t a, uint64_t b, int accumulate) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    ROOFLINT_FA3_QK("bf16");
  } else {
    ROOFLINT_FA3_QK("f16");
  }
}

// O (64 x D, fp32) += P (registers, 64 x 16) x V (shared, 16 x D, MN-major: imm-trans-b 1).
#define ROOFLINT_FA3_PV128(TYPE)                                                                       \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"                                             \
               "wgmma.mma_async.sync.aligned.m64n128k16.f32." TYPE "." TYPE " {" ROOFLINT_WGMMA_REGS64 \
               "}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"                                       \
               : ROOFLINT_WGMMA_ACC64(o)                                                                \
               : "r"(p[0]), "r"(p[1]), "r"(p[2]), "r"(p[3]), "l"(b), "r"(1))
#define ROOFLINT_FA3_PV64(TYPE)                                                                       \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"                                            \
               "wgmma.mma_async.sync.aligned.m64n64k16.f32." TYPE "." TYPE " {" ROOFLINT_WGMMA_REGS32 \
               "}, {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"                                      \
               : ROOFLINT_WGMMA_ACC32(o)                                                            \
               : "r"(p[0]), "r"(p[1]), "r"(p[2]), "r"(p[3]), "l"(b), "r"(1))
template <typename T, int D>
__device__ __forceinline__ void mma_pv(float (&o)[D / 2], const uint32_t (&p)[4], uint64_t b) {
  constexpr bool bf16 = std::is_same_v<T, __nv_bfloat16>;
  if constexpr (D == 128 && bf16) {
    ROOFLINT_FA3_PV128("bf16");
  } else if constexpr (D == 128) {
    ROOFLINT_FA3_PV128("f16");
  } else if constexpr (bf16) {
    ROOFLINT_FA3_PV64("bf16");
  } else {
    ROOFLINT_FA3_PV64("f16");
  }
}

#endif  // ROOFLINT_SM90A

template <typename T, int D>
__global__ void __launch_bounds__(Layout<D>::kThreads, 1)
    attention_hopper_kernel(const __grid_constant__ CUtensorMap q_map, const __grid_constant__ CUtensorMap k_map,
                            const __grid_constant__ CUtensorMap v_map, T* __restrict__ out, int n, int causal,
                            float scale_log2) {
#ifdef ROOFLINT_SM90A
  using L = Layout<D>;
  constexpr int kConsumers = L::kConsumers, kBlockM = L::kBlockM;
  extern __shared__ unsigned char smem_raw[];
  // 128-byte swizzle is defined on 1024-byte-aligned addresses (the XOR takes row bits 7-9).
  const uint32_t base = (smem_addr(smem_raw) + 1023u) & ~1023u;
  const uint32_t q_full = base + L::kBarriers;
  auto k_full = [&](int s) { return q_full + 8u * (1 + s); };
  auto v_full = [&](int s) { return q_full + 8u * (1 + L::kStages + s); };
  // K and V of a stage are released separately: K as soon as S = Q K^T is done, V after P V, so
  // the next K load does not wait for the P V that trails it by half an iteration.
  auto k_empty = [&](int s) { return q_full + 8u * (1 + 2 * L::kStages + s); };
  auto v_empty = [&](int s) { return q_full + 8u * (1 + 3 * L::kStages + s); };
  auto k_tile = [&](int s) { return base + L::kK + s * 2u * L::kTileBytes; };
  auto v_tile = [&](int s) { return k_tile(s) + L::kTileBytes; };

  const int m_block = causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x;  // longest rows first
  const int head = blockIdx.y;
  const int m0 = m_block * kBlockM;
  const int key_end = causal ? min(n, m0 + kBlockM) : n;
  const int tiles = (key_end + kBlockN - 1) / kBlockN;
  // Broadcast from lane 0 (CUTLASS's canonical_warp_group_idx): the same value, but one nvcc can prove
  // warp-uniform, so what derives from it (the consumer's Q rows, its wgmma descriptors) lives in
  // uniform registers instead of being moved there (two R2UR) before every wgmma.
#if ROOFLINT_FA3_UNIFORM_WARPGROUP
  const int warpgroup = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x / 128), 0);
#else
  const int warpgroup = threadIdx.x / 128;
#endif

  if (threadIdx.x == 0) {
    mbar_init(q_full, 1);
    for (int s = 0; s < L::kStages; ++s) {
      mbar_init(k_full(s), 1);
      mbar_init(v_full(s), 1);
      mbar_init(k_empty(s), kConsumers);  // one elected thread per consumer warpgroup
      mbar_init(v_empty(s), kConsumers);
    }
    mbar_init_fence();
  }
  __syncthreads();

  if (warpgroup == 0) {  // ---- producer
    release_registers<L::kProducerRegisters>();
    if (threadIdx.x == 0) {
      tma_prefetch_map(&q_map);
      tma_prefetch_map(&k_map);
      tma_prefetch_map(&v_map);
      mbar_arrive_expect_tx(q_full, L::kQBytes);
      for (int b = 0; b < L::kBoxes; ++b)
        for (int c = 0; c < kConsumers; ++c)
          tma_load_3d(base + b * L::kQBoxBytes + c * kQBoxRows * 128, &q_map, q_full, b * kBoxCols, m0 + c * kQBoxRows, head);
      for (int j = 0; j < tiles; ++j) {
        const int s = j % L::kStages;
        // The stage's previous tile (j - kStages) must be released by both consumers.
        const uint32_t released = ((j / L::kStages) - 1) & 1;
        if (j >= L::kStages) mbar_wait(k_empty(s), released);
        mbar_arrive_expect_tx(k_full(s), L::kTileBytes);
        for (int b = 0; b < L::kBoxes; ++b) tma_load_3d(k_tile(s) + b * kBoxBytes, &k_map, k_full(s), b * kBoxCols, j * kBlockN, head);
        if (j >= L::kStages) mbar_wait(v_empty(s), released);
        mbar_arrive_expect_tx(v_full(s), L::kTileBytes);
        for (int b = 0; b < L::kBoxes; ++b) tma_load_3d(v_tile(s) + b * kBoxBytes, &v_map, v_full(s), b * kBoxCols, j * kBlockN, head);
      }
    }
    return;
  }

  // ---- consumers
  claim_registers<L::kConsumerRegisters>();
  const int consumer = warpgroup - 1;
  const int lane = threadIdx.x % 32, warp = (threadIdx.x / 32) % 4;
  const int g = lane / 4, t = lane % 4;  // accumulator fragment: row group and column pair
  const int row = m0 + consumer * 64 + warp * 16 + g;  // this thread's rows: row and row + 8
  const bool elected = threadIdx.x % 128 == 0;

  float s[64], o[D / 2];
  uint32_t p[kBlockN / 16][4];
#pragma unroll
  for (int i = 0; i < 64; ++i) s[i] = 0.0f;
#pragma unroll
  for (int i = 0; i < D / 2; ++i) o[i] = 0.0f;
#pragma unroll
  for (int i = 0; i < kBlockN / 16; ++i) p[i][0] = p[i][1] = p[i][2] = p[i][3] = 0u;
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.0f, 0.0f};

  // This warpgroup's 64 query rows start 64 rows (8 KB) into each Q column box.
  const uint32_t q_rows = base + consumer * 64 * 128;
  // Each wgmma's descriptors: a tile's base descriptor advanced by the byte offset, not one built
  // whole per wgmma (a mask, shifts and ORs on the uniform datapath, ~70 instructions a warp a tile
  // at D=64, where FlashAttention-4 issues a fifth as many).
  const uint64_t q_desc = desc_k_major(q_rows);
  auto issue_pv = [&](int stage) {
    const uint64_t v_desc = desc_mn_major(v_tile(stage), kBoxBytes);
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk)  // keys 16kk..16kk+15 are rows 16kk.. of every V box
      mma_pv<T, D>(o, p[kk], desc_advance(v_desc, kk * 16 * 128));
  };

  auto issue_qk = [&](int stage) {
    const uint64_t k_desc = desc_k_major(k_tile(stage));
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const uint32_t along = (kk % 4) * 32;  // k16 steps: 32 B along a swizzled row
      mma_qk<T>(s, desc_advance(q_desc, (kk / 4) * L::kQBoxBytes + along),
                desc_advance(k_desc, (kk / 4) * kBoxBytes + along), kk > 0);
    }
  };
  // Online softmax of S_j in place (S becomes P), in the log2 domain; returns each row's rescale
  // factor for O. Only tiles whose last key lies past this consumer's first row (causal) and a
  // ragged last tile pay for the mask.
  const int first_row = m0 + consumer * 64;
  auto softmax = [&](int j, float (&alpha)[2]) {
    const int k0 = j * kBlockN;
    if ((causal && k0 + kBlockN - 1 > first_row) || k0 + kBlockN > n) {
#pragma unroll
      for (int i = 0; i < 64; ++i) {
        const int col = k0 + 8 * (i / 4) + 2 * t + (i & 1);
        const int r = row + ((i & 2) ? 8 : 0);
        if (col >= n || (causal && col > r)) s[i] = -INFINITY;
      }
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float tile_max = -INFINITY;
#pragma unroll
      for (int i = 0; i < 64; ++i)
        if (((i >> 1) & 1) == h) tile_max = fmaxf(tile_max, s[i]);
      tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
      tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 2));
      const float new_max = fmaxf(row_max[h], tile_max * scale_log2);
      const float base_max = new_max == -INFINITY ? 0.0f : new_max;  // a row with no key yet
      alpha[h] = fast_exp2(row_max[h] - base_max);
      row_max[h] = new_max;
      float partial = 0.0f;
#pragma unroll
      for (int i = 0; i < 64; ++i)
        if (((i >> 1) & 1) == h) {
          s[i] = fast_exp2(fmaf(s[i], scale_log2, -base_max));
          partial += s[i];
        }
      row_sum[h] = row_sum[h] * alpha[h] + partial;  // a quad's partial sums; reduced at the end
    }
  };
  auto pack_p = [&] {
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk) {
      p[kk][0] = pack2<T>(s[8 * kk + 0], s[8 * kk + 1]);
      p[kk][1] = pack2<T>(s[8 * kk + 2], s[8 * kk + 3]);
      p[kk][2] = pack2<T>(s[8 * kk + 4], s[8 * kk + 5]);
      p[kk][3] = pack2<T>(s[8 * kk + 6], s[8 * kk + 7]);
    }
  };
  // Ping-pong: a consumer waits for its turn at the tensor cores (consumer 0 goes first), issues
  // its GEMMs and hands the turn to the next in the ring; all run the same number of tiles, so the
  // last consumer's last hand-over (back to consumer 0, which has finished) is skipped and no
  // barrier is left with a pending arrival. Each barrier counts its waiter's and its giver's 128.
  auto take_turn = [&](int j) {
    if (consumer > 0 || j > 0) named_sync(kTurnBarrier + consumer, 256);
  };
  auto pass_turn = [&](int j) {
    if (consumer < kConsumers - 1 || j < tiles - 1) named_arrive(kTurnBarrier + (consumer + 1) % kConsumers, 256);
  };

  // Tile 0 is peeled: it has no P V before it, so the loop below issues both GEMMs and waits the
  // same way every time (ptxas keeps wgmma pipelines asynchronous only across straight-line code).
  float alpha[2];
  mbar_wait(q_full, 0);
  mbar_wait(k_full(0), 0);
  take_turn(0);
  pin(s);
  wgmma_fence();
  issue_qk(0);
  wgmma_commit();
  pass_turn(0);
  wgmma_wait<0>();
  pin(s);
  if (elected) mbar_arrive(k_empty(0));
  softmax(0, alpha);
  pack_p();

  for (int j = 1; j < tiles; ++j) {
    const int stage = j % L::kStages;
    const int previous = (j - 1) % L::kStages;
    mbar_wait(k_full(stage), (j / L::kStages) & 1);
    mbar_wait(v_full(previous), ((j - 1) / L::kStages) & 1);
    take_turn(j);
    // O was rescaled and P rewritten by ordinary instructions: finish them before the fence, or
    // ptxas serializes the wgmmas around registers defined inside their pipeline stage.
    pin(s);
    pin(o);
    pin(p);
    wgmma_fence();
    issue_qk(stage);
    wgmma_commit();
    issue_pv(previous);  // O += P_{j-1} V_{j-1}, finishing while the softmax of S_j runs
    wgmma_commit();
    pass_turn(j);
    wgmma_wait<1>();  // S_j is done (K_j may be refilled); P_{j-1} V_{j-1} may still run
    pin(s);
    if (elected) mbar_arrive(k_empty(stage));
    softmax(j, alpha);
    wgmma_wait<0>();  // P_{j-1} V_{j-1} is in O: its stage may be refilled, P rewritten
    pin(o);
    pin(p);
    if (elected) mbar_arrive(v_empty(previous));
#pragma unroll
    for (int i = 0; i < D / 2; ++i) o[i] *= alpha[(i >> 1) & 1];
    pack_p();
  }
  // The last tile's P V.
  const int last = (tiles - 1) % L::kStages;
  mbar_wait(v_full(last), ((tiles - 1) / L::kStages) & 1);
  pin(o);
  pin(p);
  wgmma_fence();
  issue_pv(last);
  wgmma_commit();
  wgmma_wait<0>();
  pin(o);
  pin(p);
  if (elected) mbar_arrive(v_empty(last));

  // Normalise by the row sums (reduced over the quad that shares a row) and store rows < n. Each
  // thread writes 4-byte column pairs; O is 1/(2N/D) of the FLOPs' worth of traffic, so plain
  // stores are enough.
  T* o_head = out + static_cast<long long>(head) * n * D;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float sum = row_sum[h];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    const float inverse = sum > 0.0f ? 1.0f / sum : 0.0f;
    const int r = row + 8 * h;
    if (r < n) {
      T* o_row = o_head + static_cast<long long>(r) * D + 2 * t;
#pragma unroll
      for (int c = 0; c < D / 8; ++c)
        *reinterpret_cast<uint32_t*>(o_row + 8 * c) = pack2<T>(o[4 * c + 2 * h] * inverse, o[4 * c + 2 * h + 1] * inverse);
    }
  }
#else
  (void)q_map;
  (void)k_map;
  (void)v_map;
  (void)out;
  (void)n;
  (void)causal;
  (void)scale_log2;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  __trap();  // a plain sm_90 build has no wgmma: fail the launch rather than return garbage
#endif
#endif
}

template <typename T, int D>
int launch(const void* q, const void* k, const void* v, void* o, long long heads, long long n, bool causal,
           float scale, cudaStream_t stream) {
  // [heads, n, D] with [rows x 64 cols] boxes (Q 64 rows, K and V 128): a box past row n of a head
  // reads zeros, so a ragged tile never touches the next head.
  CUtensorMap maps[3];
  const void* tensors[3] = {q, k, v};
  for (int i = 0; i < 3; ++i) {
    const cudaError_t made = rooflint_tensor_map_rows<T>(&maps[i], tensors[i], heads, n, D, i == 0 ? kQBoxRows : 128);
    if (made != cudaSuccess) return static_cast<int>(made);
  }
  auto kernel = attention_hopper_kernel<T, D>;
  constexpr int kSmem = Layout<D>::kSmem;
  cudaError_t status = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  if (status != cudaSuccess) return static_cast<int>(status);
  constexpr int kBlockM = Layout<D>::kBlockM;
  const dim3 grid(static_cast<unsigned>((n + kBlockM - 1) / kBlockM), static_cast<unsigned>(heads));
  constexpr float kLog2e = 1.4426950408889634f;
  kernel<<<grid, Layout<D>::kThreads, kSmem, stream>>>(maps[0], maps[1], maps[2], static_cast<T*>(o), static_cast<int>(n),
                                             causal ? 1 : 0, scale * kLog2e);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace

// q, k, v, o: contiguous [batch * heads, n, head_dim]; dtype 1 (fp16) or 2 (bf16); head_dim 64 or 128.
// Returns cudaErrorNotSupported on any GPU but sm_90 (wgmma, TMA and setmaxnreg are Hopper's).
extern "C" int rooflint_attention_hopper(const void* q, const void* k, const void* v, void* o, long long heads,
                                         long long n, long long head_dim, long long causal, long long dtype,
                                         float scale, cudaStream_t stream) {
  // sm_90 only: wgmma, TMA and setmaxnreg are Hopper's.
  if (const int refused = attention_launch_check(9, 9, q, k, v, o, heads, n)) return refused;
  const bool is_causal = causal != 0;
  return with_half_dtype(dtype, [&](auto t) {
    return with_choice<64, 128>(head_dim, [&](auto d) {
      return launch<decltype(t), decltype(d)::value>(q, k, v, o, heads, n, is_causal, scale, stream);
    });
  });
}
