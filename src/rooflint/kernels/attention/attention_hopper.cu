// Prefill attention for Hopper (sm_90a) in the FlashAttention-3 style: O = softmax(Q K^T * scale
// [+ causal mask]) V over dense [B*H, N, D] tensors, D = 64, 128 or 256, fp16/bf16 in, fp32
// accumulate.
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
//   192-row blocks and 128-key tiles, up to two at D=64) and tiles right of it are never loaded.
// - Persistent: one CTA an SM walks the (query block, head) tiles, so a tile's start (Q and the
//   first K/V in flight, the barriers set up) overlaps the previous tile's last P V and its store of
//   O instead of waiting for a new CTA. The tiles in flight share a few heads' K/V (2 MB a head at
//   N=4096, D=128), read from HBM once and from L2 by the rest. Causal tiles differ in length: the
//   CTAs claim them from a counter, longest first within groups of heads that fit L2.
#include <algorithm>
#include <climits>
#include <type_traits>

#include "rooflint/common.cuh"
#include "rooflint/hopper.cuh"

namespace {

constexpr int kBoxCols = 64;                      // one 128-byte swizzle row of 16-bit elements
constexpr int kQBoxRows = 64;                     // Q comes in [64 rows x 64 cols] boxes, one per consumer
[[maybe_unused]] constexpr int kTurnBarrier = 1;  // named barriers 1..kConsumers: consumer c's turn is 1 + c

// Every lambda of the kernel is inlined even at -O0 (the compile check's level): there, cicc would
// make each a called function, and ptxas (CUDA 13) crashes on the persistent kernel's wgmma pipelines
// running across those calls.
#define ROOFLINT_LAMBDA_INLINE __attribute__((always_inline))

// Consumer warpgroups per block (-D overrides the D=64 count for an A/B against two).
#ifndef ROOFLINT_FA3_CONSUMERS_D64
#define ROOFLINT_FA3_CONSUMERS_D64 3
#endif

// The warpgroup index broadcast so nvcc knows it warp-uniform (-D 0 for an A/B against the plain one).
#ifndef ROOFLINT_FA3_UNIFORM_WARPGROUP
#define ROOFLINT_FA3_UNIFORM_WARPGROUP 1
#endif

// One CTA an SM that walks (non-causal) or claims (causal) its share of the (query block, head) tiles
// (-D 0 for an A/B against one CTA a tile). A CTA's next Q tile and first K/V tiles then load while
// its consumers finish the last P V and store O, instead of after a new CTA has started, set up its
// barriers and found its first tile missing.
#ifndef ROOFLINT_FA3_PERSISTENT
#define ROOFLINT_FA3_PERSISTENT 1
#endif

// Whether consumers take turns at the tensor cores: 1 always, 0 never (each issues as soon as its
// data is in), 2 all but causal D=128. There the diagonal tile's mask makes one consumer's softmax
// longer than the other's, and a fixed order makes the other wait for it.
#ifndef ROOFLINT_FA3_PINGPONG
#define ROOFLINT_FA3_PINGPONG 2
#endif

// Independent chains in a row's max (1, 2, 4 or 8; -D for an A/B). At D=128 and 256 a row's max is
// on the path to the first exp2 of a softmax that the other consumer's GEMMs must cover, and four
// chains shorten it; at D=64 three consumers at 160 registers already hide it, and the chains' extra
// registers and folds cost more than they save.
#ifndef ROOFLINT_FA3_MAX_CHAINS_D64
#define ROOFLINT_FA3_MAX_CHAINS_D64 1
#endif
#ifndef ROOFLINT_FA3_MAX_CHAINS
#define ROOFLINT_FA3_MAX_CHAINS 4
#endif
#define ROOFLINT_FA3_CHAINS_OK(c) ((c) >= 1 && (c) <= 8 && ((c) & ((c) - 1)) == 0)
static_assert(ROOFLINT_FA3_CHAINS_OK(ROOFLINT_FA3_MAX_CHAINS) && ROOFLINT_FA3_CHAINS_OK(ROOFLINT_FA3_MAX_CHAINS_D64),
              "ROOFLINT_FA3_MAX_CHAINS(_D64): 1, 2, 4 or 8");

// Where a consumer waits for V_{j-1}: 0 with K_j, before its turn; 1 after issuing S_j = Q K_j^T
// (FlashAttention-4's order), so S_j need not wait for a V it does not read and the tensor cores
// start on it while V_{j-1} is still landing.
#ifndef ROOFLINT_FA3_V_WAIT_LATE
#define ROOFLINT_FA3_V_WAIT_LATE 1
#endif

// ptxas schedules a wgmma wait (WARPGROUP.DEPBAR) freely against register-only arithmetic: left to
// itself it hoists the wait for P_{j-1} V_{j-1} from after the softmax of S_j to its first max, so
// the softmax no longer runs under that P V. The fence stores each warp's two row sums to shared
// memory just before the wait: a store stays ordered with the wait, and the sums depend on every
// exp2, so the softmax stays ahead of it. 0 never, 1 always, 2 at D=128 only, the head dim where it
// gains (at D=64 three consumers already cover the softmax; at D=256 it loses slightly).
#ifndef ROOFLINT_FA3_SOFTMAX_FENCE
#define ROOFLINT_FA3_SOFTMAX_FENCE 2
#endif

// The producer's order: 1 issues V_{j-1} after K_j, 0 K_j and V_j together (-D for an A/B).
#ifndef ROOFLINT_FA3_V_LAG
#define ROOFLINT_FA3_V_LAG 1
#endif

// K/V tiles in flight (-D overrides them for a sweep). With K and V released separately, two stages
// already hide the loads at D=128: a third of both (224 of the 227 KB, one Q buffer left) and a third
// of K alone (both Q buffers kept) were no faster (docs/perf-notes/attention.md).
#ifndef ROOFLINT_FA3_STAGES_D128
#define ROOFLINT_FA3_STAGES_D128 2
#endif
#ifndef ROOFLINT_FA3_STAGES_D64
#define ROOFLINT_FA3_STAGES_D64 4
#endif

// D=256 (-D 0 leaves it out of the build): FlashAttention-3's and -4's tile, two consumers over
// 64 x 80 scores, so that O's 64 x 256 fp32 (128 registers a thread) and S's 40 fit the 240
// registers a consumer gets with the producer at 24.
#ifndef ROOFLINT_FA3_D256
#define ROOFLINT_FA3_D256 1
#endif
#ifndef ROOFLINT_FA3_STAGES_D256
#define ROOFLINT_FA3_STAGES_D256 2
#endif

template <int D>
struct Layout {
  static_assert(D == 64 || D == 128 || D == 256, "head dims 64, 128 and 256");
  static constexpr int kConsumers = D == 64 ? ROOFLINT_FA3_CONSUMERS_D64 : 2;  // 64 query rows each
  static_assert(kConsumers == 2 || kConsumers == 3, "two or three consumer warpgroups");
  static constexpr int kThreads = 128 * (1 + kConsumers);  // + the producer warpgroup
  static constexpr int kBlockM = 64 * kConsumers;          // query rows per block
  // The register file split by setmaxnreg (64K per SM, one block an SM): 128*40 + 256*232 with two
  // consumers, 128*32 + 384*160 with three, 128*24 + 256*240 at D=256.
  static constexpr int kProducerRegisters = D == 256 ? 24 : kConsumers == 2 ? 40 : 32;
  static constexpr int kConsumerRegisters = D == 256 ? 240 : kConsumers == 2 ? 232 : 160;
  static_assert(128 * (kProducerRegisters + kConsumers * kConsumerRegisters) <= 65536, "register file");
  static constexpr int kBlockN = D == 256 ? 80 : 128;  // keys per K/V tile
  static constexpr int kBoxes = D / kBoxCols;  // boxes across a row of Q, K or V
  static constexpr int kKVBoxBytes = kBlockN * kBoxCols * 2;  // a [kBlockN rows x 64 cols] K or V TMA box
  static constexpr int kTileBytes = kBoxes * kKVBoxBytes;      // a tile of K or V
  // Q: kBoxes column boxes of kBlockM rows each; consumer c's rows start c * 64 rows into each.
  static constexpr int kQBoxBytes = kBlockM * kBoxCols * 2;
  static constexpr int kQBytes = kBoxes * kQBoxBytes;
  static constexpr int kStages = D == 64    ? ROOFLINT_FA3_STAGES_D64
                                  : D == 128 ? ROOFLINT_FA3_STAGES_D128
                                             : ROOFLINT_FA3_STAGES_D256;
  static constexpr int kRingBytes = kStages * 2 * kTileBytes;
  // Two Q buffers where shared memory allows (a persistent CTA loads the next tile's Q while this
  // one's is still read), else one, released after the tile's last Q K^T.
  static constexpr int kQBuffers = 2 * kQBytes + kRingBytes + 2048 <= 227 * 1024 ? 2 : 1;
  static constexpr int kK = kQBuffers * kQBytes;  // Q at 0; stage s of K at kK + s * 2 * kTileBytes, V just after
  static constexpr int kBarriers = kK + kRingBytes;
  static constexpr int kSlots = kBarriers + (2 * kQBuffers + 4 * kStages) * 8;  // each Q buffer's tile: 2 ints
  static constexpr int kScratch = kSlots + kQBuffers * 8;  // 8 bytes a consumer warp (SOFTMAX_FENCE)
  static constexpr int kBytes = kScratch + kConsumers * 4 * 8;
  static constexpr int kSmem = kBytes + 1024;  // the dynamic base is aligned up to 1024 B by hand
  static_assert(kSmem <= 227 * 1024, "shared memory");
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
// The same over an 80-key tile (D=256): S is 64 x 80, 40 registers.
#define ROOFLINT_FA3_QK80(TYPE)                                                                       \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %42, 0;\n"                                            \
               "wgmma.mma_async.sync.aligned.m64n80k16.f32." TYPE "." TYPE " {" ROOFLINT_WGMMA_REGS40 \
               "}, %40, %41, p, 1, 1, 0, 0;\n}\n"                                                    \
               : ROOFLINT_WGMMA_ACC40(s)                                                               \
               : "l"(a), "l"(b), "r"(accumulate))
template <typename T, int N>
__device__ __forceinline__ void mma_qk(float (&s)[N], uint64_t a, uint64_t b, int accumulate) {
  static_assert(N == 64 || N == 40, "128- or 80-key tiles");
  constexpr bool bf16 = std::is_same_v<T, __nv_bfloat16>;
  if constexpr (N == 64 && bf16) {
    ROOFLINT_FA3_QK("bf16");
  } else if constexpr (N == 64) {
    ROOFLINT_FA3_QK("f16");
  } else if constexpr (bf16) {
    ROOFLINT_FA3_QK80("bf16");
  } else {
    ROOFLINT_FA3_QK80("f16");
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
#define ROOFLINT_FA3_PV256(TYPE)                                                                        \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"                                             \
               "wgmma.mma_async.sync.aligned.m64n256k16.f32." TYPE "." TYPE " {" ROOFLINT_WGMMA_REGS128 \
               "}, {%128, %129, %130, %131}, %132, p, 1, 1, 1;\n}\n"                                    \
               : ROOFLINT_WGMMA_ACC128(o)                                                                \
               : "r"(p[0]), "r"(p[1]), "r"(p[2]), "r"(p[3]), "l"(b), "r"(1))
template <typename T, int D>
__device__ __forceinline__ void mma_pv(float (&o)[D / 2], const uint32_t (&p)[4], uint64_t b) {
  constexpr bool bf16 = std::is_same_v<T, __nv_bfloat16>;
  if constexpr (D == 256 && bf16) {
    ROOFLINT_FA3_PV256("bf16");
  } else if constexpr (D == 256) {
    ROOFLINT_FA3_PV256("f16");
  } else if constexpr (D == 128 && bf16) {
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

// Causal is a template parameter: its masks, its grid order and whether consumers take turns are
// then fixed at compile time (ptxas schedules the turn-less causal D=128 loop differently from one
// whose named barriers are skipped at run time, and only the former gained).
template <typename T, int D, bool causal>
__global__ void __launch_bounds__(Layout<D>::kThreads, 1)
    attention_hopper_kernel(const __grid_constant__ CUtensorMap q_map, const __grid_constant__ CUtensorMap k_map,
                            const __grid_constant__ CUtensorMap v_map, T* __restrict__ out, int n, int heads,
                            int head_group, int* __restrict__ schedule, float scale_log2) {
#ifdef ROOFLINT_SM90A
  using L = Layout<D>;
  constexpr int kConsumers = L::kConsumers, kBlockM = L::kBlockM;
  extern __shared__ unsigned char smem_raw[];
  // 128-byte swizzle is defined on 1024-byte-aligned addresses (the XOR takes row bits 7-9).
  const uint32_t base = (smem_addr(smem_raw) + 1023u) & ~1023u;
  // Barriers: Q full and empty per Q buffer, then K/V full and empty per ring stage.
  auto q_full = [&](unsigned b) ROOFLINT_LAMBDA_INLINE { return base + L::kBarriers + 8u * b; };
  auto q_empty = [&](unsigned b) ROOFLINT_LAMBDA_INLINE { return base + L::kBarriers + 8u * (L::kQBuffers + b); };
  const uint32_t ring_bars = base + L::kBarriers + 16u * L::kQBuffers;
  auto k_full = [&](unsigned s) ROOFLINT_LAMBDA_INLINE { return ring_bars + 8u * s; };
  auto v_full = [&](unsigned s) ROOFLINT_LAMBDA_INLINE { return ring_bars + 8u * (L::kStages + s); };
  // K and V of a stage are released separately: K as soon as S = Q K^T is done, V after P V, so
  // the next K load does not wait for the P V that trails it by half an iteration.
  auto k_empty = [&](unsigned s) ROOFLINT_LAMBDA_INLINE { return ring_bars + 8u * (2 * L::kStages + s); };
  auto v_empty = [&](unsigned s) ROOFLINT_LAMBDA_INLINE { return ring_bars + 8u * (3 * L::kStages + s); };
  auto q_tile = [&](unsigned b) ROOFLINT_LAMBDA_INLINE { return base + b * L::kQBytes; };
  auto k_tile = [&](unsigned s) ROOFLINT_LAMBDA_INLINE { return base + L::kK + s * 2u * L::kTileBytes; };
  auto v_tile = [&](unsigned s) ROOFLINT_LAMBDA_INLINE { return k_tile(s) + L::kTileBytes; };

  // The work: (query block, head) tiles, numbered so that the CTAs in flight share a few heads' K/V
  // in L2. Non-causal: a head's blocks in a row. Causal: heads in groups of head_group (as many as
  // L2 holds the K/V of), each group's blocks longest first across its heads, so the short diagonal
  // blocks come last and fill the tail. A non-causal persistent CTA takes every gridDim.x-th tile;
  // a causal one the next unclaimed (an atomic counter, as the tiles differ in length); otherwise
  // there is one CTA a tile and the loops below run once.
  const int m_blocks = (n + kBlockM - 1) / kBlockM;
  const int items = m_blocks * heads;
  struct Tile {
    int m0, head, tiles;
  };
  auto tile_of = [&](int item) ROOFLINT_LAMBDA_INLINE {
    int block, head;
    if constexpr (causal) {
      const int group = item / (head_group * m_blocks);
      const int first = group * head_group;
      const int size = min(head_group, heads - first);
      const int rest = item - first * m_blocks;
      block = m_blocks - 1 - rest / size;
      head = first + rest % size;
    } else {
      block = item % m_blocks;
      head = item / m_blocks;
    }
    const int m0 = block * kBlockM;
    const int key_end = causal ? min(n, m0 + kBlockM) : n;
    return Tile{m0, head, (key_end + L::kBlockN - 1) / L::kBlockN};
  };
  // The tile a Q buffer holds and whether it is this CTA's last, written by the producer before it
  // arrives on the buffer's full barrier (a release the consumers' wait acquires).
  auto slot = [&](unsigned b) ROOFLINT_LAMBDA_INLINE {
    return reinterpret_cast<volatile int*>(smem_raw + (base - smem_addr(smem_raw)) + L::kSlots + 8 * b);
  };
  // Broadcast from lane 0 (CUTLASS's canonical_warp_group_idx): the same value, but one nvcc can prove
  // warp-uniform, so what derives from it (the consumer's Q rows, its wgmma descriptors) lives in
  // uniform registers instead of being moved there (two R2UR) before every wgmma.
#if ROOFLINT_FA3_UNIFORM_WARPGROUP
  const int warpgroup = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x / 128), 0);
#else
  const int warpgroup = threadIdx.x / 128;
#endif

  if (threadIdx.x == 0) {
    for (int b = 0; b < L::kQBuffers; ++b) {
      mbar_init(q_full(b), 1);
      mbar_init(q_empty(b), kConsumers);  // one elected thread per consumer warpgroup
    }
    for (int s = 0; s < L::kStages; ++s) {
      mbar_init(k_full(s), 1);
      mbar_init(v_full(s), 1);
      mbar_init(k_empty(s), kConsumers);
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
      unsigned g = 0;  // K/V tiles issued so far by this CTA: the ring's position runs on across its tiles
      // The next tile is claimed when this one starts, so the consumers know which tile is their last.
      const bool claims = causal && gridDim.x < static_cast<unsigned>(items);
      auto next_after = [&](int item) ROOFLINT_LAMBDA_INLINE {
        return claims ? atomicAdd(schedule, 1) + static_cast<int>(gridDim.x) : item + static_cast<int>(gridDim.x);
      };
      int next = 0;
      for (int item = blockIdx.x, it = 0; item < items; item = next, ++it) {
        next = next_after(item);
        const Tile w = tile_of(item);
        const int qb = it % L::kQBuffers;
        // The buffer's previous Q (kQBuffers tiles back) must be released by every consumer.
        if (it >= L::kQBuffers) mbar_wait(q_empty(qb), ((it / L::kQBuffers) - 1) & 1);
        slot(qb)[0] = item;
        slot(qb)[1] = next >= items;
        mbar_arrive_expect_tx(q_full(qb), L::kQBytes);
        for (int b = 0; b < L::kBoxes; ++b)
          for (int c = 0; c < kConsumers; ++c)
            tma_load_3d(q_tile(qb) + b * L::kQBoxBytes + c * kQBoxRows * 128, &q_map, q_full(qb), b * kBoxCols,
                        w.m0 + c * kQBoxRows, w.head);
        // Tile j of K (is_v false) or V into ring position gj, once the stage's previous tile
        // (gj - kStages) is released by every consumer.
        auto load = [&](unsigned gj, int j, bool is_v) ROOFLINT_LAMBDA_INLINE {
          const unsigned s = gj % L::kStages;
          if (gj >= L::kStages) mbar_wait(is_v ? v_empty(s) : k_empty(s), ((gj / L::kStages) - 1) & 1u);
          const uint32_t full = is_v ? v_full(s) : k_full(s);
          mbar_arrive_expect_tx(full, L::kTileBytes);
          for (int b = 0; b < L::kBoxes; ++b)
            tma_load_3d((is_v ? v_tile(s) : k_tile(s)) + b * L::kKVBoxBytes, is_v ? &v_map : &k_map, full, b * kBoxCols,
                        j * L::kBlockN, w.head);
        };
        // K_j is read at iteration j and V_j one iteration later (P_j V_j is issued with S_{j+1}), so
        // V_j goes out after K_{j+1}: the wait for V's stage (the P V two tiles back) then never
        // holds back the next K.
        for (int j = 0; j < w.tiles; ++j) {
          load(g + j, j, false);
          if (ROOFLINT_FA3_V_LAG && j > 0) load(g + j - 1, j - 1, true);
          if (!ROOFLINT_FA3_V_LAG) load(g + j, j, true);
        }
        if (ROOFLINT_FA3_V_LAG) load(g + w.tiles - 1, w.tiles - 1, true);
        g += w.tiles;
      }
      // The counter is left at zero for the next launch by the last CTA to stop claiming: after it,
      // no CTA of this launch touches it. The fences order each CTA's last claim before its count
      // and the last count before the reset, as seen from other SMs.
      if (claims) {
        __threadfence();
        if (atomicAdd(schedule + 1, 1) == static_cast<int>(gridDim.x) - 1) {
          __threadfence();
          schedule[0] = 0;
          schedule[1] = 0;
        }
      }
    }
    return;
  }

  // ---- consumers
  claim_registers<L::kConsumerRegisters>();
  const int consumer = warpgroup - 1;
  const int lane = threadIdx.x % 32, warp = (threadIdx.x / 32) % 4;
  const int g_row = lane / 4, t = lane % 4;  // accumulator fragment: row group and column pair
  const bool elected = threadIdx.x % 128 == 0;
  // This warp's word pair of the SOFTMAX_FENCE scratch (every lane stores to it; nothing reads it).
  const uint32_t fence_word = base + L::kScratch + 8u * (threadIdx.x / 32 - 4);

  constexpr int kScores = L::kBlockN / 2;  // S_j: this thread's share of 64 x kBlockN fp32
  constexpr int kChains = D == 64 ? ROOFLINT_FA3_MAX_CHAINS_D64 : ROOFLINT_FA3_MAX_CHAINS;
  float s[kScores], o[D / 2];
  uint32_t p[L::kBlockN / 16][4];
#pragma unroll
  for (int i = 0; i < kScores; ++i) s[i] = 0.0f;
#pragma unroll
  for (int i = 0; i < L::kBlockN / 16; ++i) p[i][0] = p[i][1] = p[i][2] = p[i][3] = 0u;
  float row_max[2], row_sum[2];

  constexpr bool turns = ROOFLINT_FA3_PINGPONG == 1 || (ROOFLINT_FA3_PINGPONG == 2 && !(causal && D == 128));
  // Each wgmma's descriptors: the first stage's (and this consumer's rows of the first Q buffer)
  // built once, advanced by byte offsets. Built whole per wgmma, they cost a mask, shifts and ORs on
  // the uniform datapath, ~70 instructions a warp a tile at D=64, where FlashAttention-4 issues a
  // fifth as many. This warpgroup's 64 query rows start 64 rows (8 KB) into each Q column box.
  const uint64_t q_desc0 = desc_k_major(q_tile(0) + consumer * 64 * 128);
  const uint64_t k_desc0 = desc_k_major(k_tile(0));
  const uint64_t v_desc0 = desc_mn_major(v_tile(0), L::kKVBoxBytes);
  // Unsigned, so that stage and phase are a mask and a shift.
  unsigned g = 0;  // K/V tiles consumed so far: the ring position, as the producer counts it
  for (int it = 0;; ++it) {
    const unsigned qb = static_cast<unsigned>(it) % L::kQBuffers;
    mbar_wait(q_full(qb), (it / L::kQBuffers) & 1);
    const int item = slot(qb)[0];
    const bool last_item = slot(qb)[1] != 0;
    const Tile w = tile_of(item);
    const int tiles = w.tiles;
    const int row = w.m0 + consumer * 64 + warp * 16 + g_row;  // this thread's rows: row and row + 8
#pragma unroll
    for (int i = 0; i < D / 2; ++i) o[i] = 0.0f;
    row_max[0] = row_max[1] = -INFINITY;
    row_sum[0] = row_sum[1] = 0.0f;

    const uint64_t q_desc = desc_advance(q_desc0, qb * L::kQBytes);
    auto issue_pv = [&](unsigned stage) ROOFLINT_LAMBDA_INLINE {
      const uint64_t v_desc = desc_advance(v_desc0, stage * 2 * L::kTileBytes);
#pragma unroll
      for (int kk = 0; kk < L::kBlockN / 16; ++kk)  // keys 16kk..16kk+15 are rows 16kk.. of every V box
        mma_pv<T, D>(o, p[kk], desc_advance(v_desc, kk * 16 * 128));
    };

    auto issue_qk = [&](unsigned stage) ROOFLINT_LAMBDA_INLINE {
      const uint64_t k_desc = desc_advance(k_desc0, stage * 2 * L::kTileBytes);
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        const uint32_t along = (kk % 4) * 32;  // k16 steps: 32 B along a swizzled row
        mma_qk<T, kScores>(s, desc_advance(q_desc, (kk / 4) * L::kQBoxBytes + along),
                  desc_advance(k_desc, (kk / 4) * L::kKVBoxBytes + along), kk > 0);
      }
    };
    // Online softmax of S_j in place (S becomes P), in the log2 domain; returns each row's rescale
    // factor for O. Only tiles whose last key lies past this consumer's first row (causal) and a
    // ragged last tile pay for the mask.
    const int first_row = w.m0 + consumer * 64;
    auto softmax = [&](int j, float (&alpha)[2]) ROOFLINT_LAMBDA_INLINE {
      const int k0 = j * L::kBlockN;
      if ((causal && k0 + L::kBlockN - 1 > first_row) || k0 + L::kBlockN > n) {
#pragma unroll
        for (int i = 0; i < kScores; ++i) {
          const int col = k0 + 8 * (i / 4) + 2 * t + (i & 1);
          const int r = row + ((i & 2) ? 8 : 0);
          if (col >= n || (causal && col > r)) s[i] = -INFINITY;
        }
      }
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        // The row's kScores / 2 scores in this thread, maxed in kChains independent chains: one chain
        // is 32 dependent FMNMX (~4 cycles each) at D=128 before the first exp2 may start; the max of
        // a set does not depend on the order, so the bits are the same.
        float chain[kChains];
#pragma unroll
        for (int c = 0; c < kChains; ++c) chain[c] = -INFINITY;
#pragma unroll
        for (int i = 0, k = 0; i < kScores; ++i)
          if (((i >> 1) & 1) == h) {
            chain[k % kChains] = fmaxf(chain[k % kChains], s[i]);
            ++k;
          }
#pragma unroll
        for (int width = kChains / 2; width > 0; width /= 2)
#pragma unroll
          for (int c = 0; c < width; ++c) chain[c] = fmaxf(chain[c], chain[c + width]);
        float tile_max = chain[0];
        tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
        tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 2));
        const float new_max = fmaxf(row_max[h], tile_max * scale_log2);
        const float base_max = new_max == -INFINITY ? 0.0f : new_max;  // a row with no key yet
        alpha[h] = fast_exp2(row_max[h] - base_max);
        row_max[h] = new_max;
        float partial = 0.0f;
#pragma unroll
        for (int i = 0; i < kScores; ++i)
          if (((i >> 1) & 1) == h) {
            s[i] = fast_exp2(fmaf(s[i], scale_log2, -base_max));
            partial += s[i];
          }
        row_sum[h] = row_sum[h] * alpha[h] + partial;  // a quad's partial sums; reduced at the end
      }
    };
    auto rescale_o = [&](const float (&a)[2]) ROOFLINT_LAMBDA_INLINE {
#pragma unroll
      for (int i = 0; i < D / 2; ++i) o[i] *= a[(i >> 1) & 1];
    };
    auto pack_p = [&]() ROOFLINT_LAMBDA_INLINE {
#pragma unroll
      for (int kk = 0; kk < L::kBlockN / 16; ++kk) {
        p[kk][0] = pack2<T>(s[8 * kk + 0], s[8 * kk + 1]);
        p[kk][1] = pack2<T>(s[8 * kk + 2], s[8 * kk + 3]);
        p[kk][2] = pack2<T>(s[8 * kk + 4], s[8 * kk + 5]);
        p[kk][3] = pack2<T>(s[8 * kk + 6], s[8 * kk + 7]);
      }
    };
    // Ping-pong: a consumer waits for its turn at the tensor cores (consumer 0 goes first), issues
    // its GEMMs and hands the turn to the next in the ring; the ring runs on across a persistent
    // CTA's tiles, and all consumers run the same number of turns, so only the very first wait
    // (consumer 0's) and the very last hand-over (the last consumer's, back to consumer 0, which
    // has finished) are skipped, and no barrier is left with a pending arrival. Each barrier counts
    // its waiter's and its giver's 128.
    auto take_turn = [&](int j) ROOFLINT_LAMBDA_INLINE {
      if (turns && (consumer > 0 || j > 0 || it > 0)) named_sync(kTurnBarrier + consumer, 256);
    };
    auto pass_turn = [&](int j) ROOFLINT_LAMBDA_INLINE {
      if (turns && (consumer < kConsumers - 1 || j < tiles - 1 || !last_item))
        named_arrive(kTurnBarrier + (consumer + 1) % kConsumers, 256);
    };

    // Tile 0 is peeled: it has no P V before it, so the loop below issues both GEMMs and waits the
    // same way every time (ptxas keeps wgmma pipelines asynchronous only across straight-line code).
    float alpha[2];
    mbar_wait(k_full(g % L::kStages), (g / L::kStages) & 1u);
    take_turn(0);
    pin(s);
    wgmma_fence();
    issue_qk(g % L::kStages);
    wgmma_commit();
    pass_turn(0);
    wgmma_wait<0>();
    pin(s);
    if (elected) mbar_arrive(k_empty(g % L::kStages));
    softmax(0, alpha);
    pack_p();

    for (int j = 1; j < tiles; ++j) {
      const unsigned gj = g + j;
      const unsigned stage = gj % L::kStages;
      const unsigned previous = (gj - 1) % L::kStages;
      mbar_wait(k_full(stage), (gj / L::kStages) & 1u);
      if (!ROOFLINT_FA3_V_WAIT_LATE) mbar_wait(v_full(previous), ((gj - 1) / L::kStages) & 1u);
      take_turn(j);
      // O was rescaled and P rewritten by ordinary instructions: finish them before the fence, or
      // ptxas serializes the wgmmas around registers defined inside their pipeline stage.
      pin(s);
      pin(o);
      pin(p);
      wgmma_fence();
      issue_qk(stage);
      wgmma_commit();
      if (ROOFLINT_FA3_V_WAIT_LATE) {
        // The wait's loop is a branch between the two GEMMs: P V opens a wgmma group of its own.
        mbar_wait(v_full(previous), ((gj - 1) / L::kStages) & 1u);
        wgmma_fence();
      }
      issue_pv(previous);  // O += P_{j-1} V_{j-1}, finishing while the softmax of S_j runs
      wgmma_commit();
      pass_turn(j);
      wgmma_wait<1>();  // S_j is done (K_j may be refilled); P_{j-1} V_{j-1} may still run
      pin(s);
      if (elected) mbar_arrive(k_empty(stage));
      softmax(j, alpha);
      if (ROOFLINT_FA3_SOFTMAX_FENCE == 1 || (ROOFLINT_FA3_SOFTMAX_FENCE == 2 && D == 128))
        st_shared_v2(fence_word, row_sum[0], row_sum[1]);
      wgmma_wait<0>();  // P_{j-1} V_{j-1} is in O: its stage may be refilled, P rewritten
      pin(o);
      pin(p);
      if (elected) mbar_arrive(v_empty(previous));
      rescale_o(alpha);
      pack_p();
    }
    // Every Q K^T of this tile has retired: its Q buffer may be refilled.
    if (elected) mbar_arrive(q_empty(qb));
    // The last tile's P V.
    const unsigned last = (g + tiles - 1) % L::kStages;
    mbar_wait(v_full(last), ((g + tiles - 1) / L::kStages) & 1u);
    pin(o);
    pin(p);
    wgmma_fence();
    issue_pv(last);
    wgmma_commit();
    wgmma_wait<0>();
    pin(o);
    pin(p);
    if (elected) mbar_arrive(v_empty(last));
    g += tiles;

    // Normalise by the row sums (reduced over the quad that shares a row) and store rows < n. Each
    // thread writes 4-byte column pairs; O is 1/(2N/D) of the FLOPs' worth of traffic, so plain
    // stores are enough.
    T* o_head = out + static_cast<long long>(w.head) * n * D;
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
          *reinterpret_cast<uint32_t*>(o_row + 8 * c) =
              pack2<T>(o[4 * c + 2 * h] * inverse, o[4 * c + 2 * h + 1] * inverse);
      }
    }
    if (last_item) break;
  }
#else
  (void)q_map;
  (void)k_map;
  (void)v_map;
  (void)out;
  (void)n;
  (void)heads;
  (void)head_group;
  (void)schedule;
  (void)scale_log2;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  __trap();  // a plain sm_90 build has no wgmma: fail the launch rather than return garbage
#endif
#endif
}

template <typename T, int D, bool causal>
int launch(const void* q, const void* k, const void* v, void* o, int* schedule, long long heads, long long n,
           float scale, cudaStream_t stream) {
  // [heads, n, D] with [rows x 64 cols] boxes (Q 64 rows, K and V kBlockN): a box past row n of a
  // head reads zeros, so a ragged tile never touches the next head.
  CUtensorMap maps[3];
  const void* tensors[3] = {q, k, v};
  for (int i = 0; i < 3; ++i) {
    const int box_rows = i == 0 ? kQBoxRows : Layout<D>::kBlockN;
    const cudaError_t made = rooflint_tensor_map_rows<T>(&maps[i], tensors[i], heads, n, D, box_rows);
    if (made != cudaSuccess) return static_cast<int>(made);
  }
  auto kernel = attention_hopper_kernel<T, D, causal>;
  constexpr int kSmem = Layout<D>::kSmem;
  cudaError_t status = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  if (status != cudaSuccess) return static_cast<int>(status);
  constexpr int kBlockM = Layout<D>::kBlockM;
  // One CTA a (query block, head) tile, or (persistent) one an SM walking the tiles.
  const long long items = (n + kBlockM - 1) / kBlockM * heads;
  if (items > INT_MAX) return static_cast<int>(cudaErrorInvalidValue);
  int device = 0, sms = 0, l2_bytes = 0;
  status = cudaGetDevice(&device);
  if (status == cudaSuccess) status = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (status == cudaSuccess) status = cudaDeviceGetAttribute(&l2_bytes, cudaDevAttrL2CacheSize, device);
  if (status != cudaSuccess) return static_cast<int>(status);
  // A causal persistent CTA claims its tiles through schedule[0..1] (zero between launches).
  if (ROOFLINT_FA3_PERSISTENT && causal && schedule == nullptr) return static_cast<int>(cudaErrorInvalidValue);
  const long long ctas = ROOFLINT_FA3_PERSISTENT ? std::min<long long>(items, sms) : items;
  // Causal heads go in groups whose K and V fill half of L2 (the rest holds the Q and O streams).
  const long long head_kv_bytes = 2 * n * D * static_cast<long long>(sizeof(T));
  const long long head_group = std::max(1ll, std::min(heads, l2_bytes / 2 / head_kv_bytes));
  constexpr float kLog2e = 1.4426950408889634f;
  kernel<<<static_cast<unsigned>(ctas), Layout<D>::kThreads, kSmem, stream>>>(
      maps[0], maps[1], maps[2], static_cast<T*>(o), static_cast<int>(n), static_cast<int>(heads),
      static_cast<int>(head_group), schedule, scale * kLog2e);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace

// q, k, v, o: contiguous [batch * heads, n, head_dim]; dtype 1 (fp16) or 2 (bf16); head_dim 64, 128
// or 256.
// schedule: two ints, zero before the first launch, which a causal launch leaves at zero again (its
// CTAs claim tiles through it); one launch at a time may use it. Non-causal launches ignore it.
// Returns cudaErrorNotSupported on any GPU but sm_90 (wgmma, TMA and setmaxnreg are Hopper's).
extern "C" int rooflint_attention_hopper(const void* q, const void* k, const void* v, void* o, int* schedule,
                                         long long heads, long long n, long long head_dim, long long causal,
                                         long long dtype, float scale, cudaStream_t stream) {
  // sm_90 only: wgmma, TMA and setmaxnreg are Hopper's.
  if (const int refused = attention_launch_check(9, 9, q, k, v, o, heads, n)) return refused;
  return with_half_dtype(dtype, [&](auto t) {
    // -DROOFLINT_FA3_D256=0 leaves D=256 out (a build a third faster, for a sweep at D=64 or 128).
#if ROOFLINT_FA3_D256
    return with_choice<64, 128, 256>(head_dim, [&](auto d) {
#else
    return with_choice<64, 128>(head_dim, [&](auto d) {
#endif
      constexpr int kD = decltype(d)::value;
      return causal != 0 ? launch<decltype(t), kD, true>(q, k, v, o, schedule, heads, n, scale, stream)
                         : launch<decltype(t), kD, false>(q, k, v, o, schedule, heads, n, scale, stream);
    });
  });
}
