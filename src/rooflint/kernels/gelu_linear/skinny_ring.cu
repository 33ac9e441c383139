// Y = X W^T (+ b) (+ R), or silu(gate) * up, for a few rows of X (M <= 8) on sm_90: W streamed
// through a ring of shared-memory stages by bulk copies, one block an SM, the work split evenly.
//
// Why a ring: the held kernel (skinny_pdl.cu) loads a block's whole share of W, then waits for all of
// it, then sums and stores; an SM's stream of W pauses at every block's end until the next block's
// loads are out. Here a producer warp keeps every stage of the ring (16 rows x CHUNK columns; up to
// 12 stages, as many as fit beside X) in flight and reissues a stage as soon as the consumers have
// read it, so an SM's stream runs from its first stage to its last, and its first stages go out
// before the PDL wait. Each bulk copy is CHUNK columns of one row, 1-4 KB read in whole DRAM bursts.
//
// Work: the W rows in tiles of 16 (SwiGLU: 8 gate rows and their 8 up rows, so a thread's MMA
// accumulators hold both halves of its outputs), each tile's K in chunks of CHUNK; unit u is (tile
// u / chunks, chunk u % chunks). Block b takes units [U b / G, U (b + 1) / G): every block streams the
// same bytes to within one stage, however the tiles fall (a Llama-3.1-8B down projection is 256 tiles
// on 132 SMs). A tile whose units span blocks is finished by the last of them to arrive: each writes
// its fp32 partial tile to a workspace and counts itself in; the last adds the partials in block order
// (so the result does not depend on timing), runs the epilogue and sets the count back to zero.
//
// Consumers: 8 warps split each stage's columns, as mma.m16n8k16 A fragments read from shared memory
// (16 bytes of a row a thread; the MMA's K order within 32 columns a permutation of memory order, the
// same for X, as in skinny_pdl.cu). X's rows sit in shared memory whole, copied in once after the
// wait. A tile's end sums the 8 warps' partial tiles through shared memory.
#include "rooflint/common.cuh"
#include "rooflint/hopper.cuh"
#include "rooflint/mma.cuh"  // mma16816
#include "rooflint/pdl.cuh"

namespace {

constexpr int kRows = 16;         // W rows a tile: the MMA's M
constexpr int kConsumers = 8;     // warps reading the stages, an eighth of a stage's columns each
constexpr int kThreads = (kConsumers + 1) * 32;
constexpr int kMaxStages = 12;
// A stage's row stride: 64 bytes past its CHUNK columns, so that the 8 threads of a quarter warp (two
// rows, four 16-byte columns) read 8 distinct 16-byte bank groups. X's rows are padded the same way.
__host__ __device__ constexpr int row_bytes_of(int chunk) { return chunk * 2 + 64; }
__host__ __device__ constexpr int stage_bytes_of(int chunk) { return kRows * row_bytes_of(chunk); }
constexpr int kBarrierBytes = 256;  // full[kMaxStages], empty[kMaxStages], x_ready

struct RingParams {
  const void* x;
  const void* w;
  const void* bias;      // [N] (SwiGLU: [2 ffn]) or null
  const void* residual;  // [M, N] (row stride r_row) or null
  void* y;               // [M, N] (row stride y_row)
  float* partials;       // [grid, 2, 128]: a block's first and last tile where others share them
  int* counts;           // [tiles], zero between launches
  long long m, n, k, x_row, r_row, y_row;
  long long ffn;  // SwiGLU: W [2 ffn, K], the outputs n < ffn; 0 without
  int stages, pdl;
};

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
using namespace rooflint_hopper;

constexpr int kXPiece = 4096;  // X is copied in pieces of at most 4 KB

// The block that streams unit u: the last b with U b / G <= u.
__device__ __forceinline__ long long owner(long long u, long long units, long long grid) {
  return ((u + 1) * grid + units - 1) / units - 1;
}

// W's row of a tile's row r: 16 consecutive rows, or (SwiGLU) 8 gate rows and the same 8 up rows.
__device__ __forceinline__ long long w_row(const RingParams& p, long long tile, int r, bool& valid) {
  if (p.ffn > 0) {
    const long long out = tile * 8 + (r & 7);
    valid = out < p.ffn;
    return out + (r >= 8 ? p.ffn : 0);
  }
  const long long row = tile * kRows + r;
  valid = row < p.n;
  return row;
}

// The producer warp: lane r < 16 copies its stage row r, each stage once the consumers have read its
// last contents. The loop keeps its tile, chunk, stage and phase as counters: a single warp issues
// every copy of the SM, so each instruction of its loop is on the stream's critical path (64-bit
// divisions a stage held one producer thread to ~1.2 TB/s on an H200).
template <int CHUNK>
__device__ __forceinline__ void produce(const RingParams& p, unsigned char* ring, const uint64_t* full,
                                        const uint64_t* empty, long long begin, long long end, long long chunks,
                                        int lane, int bytes_per_element) {
  const unsigned char* w = static_cast<const unsigned char*>(p.w);
  const int r = lane & (kRows - 1);
  const uint32_t row_bytes = CHUNK * bytes_per_element;
  const uint32_t stage_row = smem_addr(ring + r * row_bytes_of(CHUNK));
  long long tile = begin / chunks, chunk = begin % chunks;
  bool valid;
  const unsigned char* src = w + w_row(p, tile, r, valid) * p.k * bytes_per_element;
  valid = valid && lane < kRows;
  uint32_t bytes = __popc(__ballot_sync(0xffffffffu, valid)) * row_bytes;
  int s = 0;
  uint32_t phase = 0;
  for (long long u = begin; u < end; ++u) {
    mbar_wait(smem_addr(&empty[s]), phase ^ 1);
    const uint32_t bar = smem_addr(&full[s]);
    if (lane == 0) mbar_arrive_expect_tx(bar, bytes);
    __syncwarp();
    // a row past N keeps stale words: they reach only that row's outputs, which are never stored
    if (valid) bulk_load(stage_row + s * stage_bytes_of(CHUNK), src + chunk * row_bytes, row_bytes, bar);
    if (++chunk == chunks) {
      chunk = 0, ++tile;
      src = w + w_row(p, tile, r, valid) * p.k * bytes_per_element;
      valid = valid && lane < kRows;
      bytes = __popc(__ballot_sync(0xffffffffu, valid)) * row_bytes;
    }
    if (++s == p.stages) s = 0, phase ^= 1;
  }
}

// One output of a finished tile, row r at X row m, from its fp32 sum z (SwiGLU: r is a gate row and up
// the sum of its up row r + 8): bias, SwiGLU or residual, the store.
template <typename T>
__device__ __forceinline__ void epilogue(const RingParams& p, long long tile, int r, int m, float z, float up) {
  if (p.ffn > 0) {
    const long long n = tile * 8 + r;
    if (n >= p.ffn || m >= p.m) return;
    const T* bias = static_cast<const T*>(p.bias);
    // gate and up rounded to T first, as the unfused GEMM's output is; the product in fp32, rounded once
    const float g = to_float(from_float<T>(z + (bias != nullptr ? to_float(bias[n]) : 0.0f)));
    const float u = to_float(from_float<T>(up + (bias != nullptr ? to_float(bias[p.ffn + n]) : 0.0f)));
    static_cast<T*>(p.y)[m * p.y_row + n] = from_float<T>(g / (1.0f + __expf(-g)) * u);
    return;
  }
  const long long n = tile * kRows + r;
  if (n >= p.n || m >= p.m) return;
  if (p.bias != nullptr) z += to_float(static_cast<const T*>(p.bias)[n]);
  if (p.residual != nullptr) z += to_float(static_cast<const T*>(p.residual)[m * p.r_row + n]);
  static_cast<T*>(p.y)[m * p.y_row + n] = from_float<T>(z);
}
#endif

template <typename T, int CHUNK>
__global__ void __launch_bounds__(kThreads, 1) skinny_ring_kernel(const RingParams p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ float partial[2][kConsumers][kRows][8];  // by tile parity: one barrier a tile suffices
  __shared__ int last[2];
  uint64_t* full = reinterpret_cast<uint64_t*>(smem);
  uint64_t* empty = full + kMaxStages;
  uint64_t* x_ready = empty + kMaxStages;
  const long long x_bytes = p.k * static_cast<long long>(sizeof(T)) + 64;
  unsigned char* xs = smem + kBarrierBytes;
  unsigned char* ring = xs + p.m * x_bytes;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const long long tiles = p.ffn > 0 ? (p.ffn + 7) / 8 : (p.n + kRows - 1) / kRows;
  const long long chunks = p.k / CHUNK;
  const long long units = tiles * chunks, grid = gridDim.x;
  const long long begin = units * blockIdx.x / grid, end = units * (blockIdx.x + 1) / grid;
  if (threadIdx.x == 0) {
    for (int s = 0; s < p.stages; ++s) mbar_init(smem_addr(&full[s]), 1), mbar_init(smem_addr(&empty[s]), kConsumers);
    mbar_init(smem_addr(x_ready), 1);
    mbar_init_fence();
  }
  __syncthreads();
  if (p.pdl) launch_dependents();
  if (warp == kConsumers) {  // W is no kernel's output: the producer never waits for the previous one
    produce<CHUNK>(p, ring, full, empty, begin, end, chunks, lane, sizeof(T));
    return;
  }

  if (p.pdl) wait_for_previous();
  if (threadIdx.x == 0) {  // X, whole, once: the previous kernel's output
    mbar_arrive_expect_tx(smem_addr(x_ready), static_cast<uint32_t>(p.m * p.k * sizeof(T)));
    const unsigned char* x = static_cast<const unsigned char*>(p.x);
    const long long row_bytes = p.k * static_cast<long long>(sizeof(T));
    for (long long m = 0; m < p.m; ++m) {
      for (long long at = 0; at < row_bytes; at += kXPiece) {
        const long long piece = row_bytes - at < kXPiece ? row_bytes - at : kXPiece;
        bulk_load(smem_addr(xs + m * x_bytes + at), x + m * p.x_row * static_cast<long long>(sizeof(T)) + at,
                  static_cast<uint32_t>(piece), smem_addr(x_ready));
      }
    }
  }
  const int g = lane / 4, t = lane % 4;
  const bool x_row_ok = g < p.m;  // the MMA's N side: X rows g < M, zeros beyond
  mbar_wait(smem_addr(x_ready), 0);
  float acc[4] = {};
  int parity = 0;  // of the tiles this block finished: which partial buffer
  long long tile = begin / chunks, chunk = begin % chunks - 1;  // counters, as the producer's
  int s = p.stages - 1;
  uint32_t phase = 1;
  for (long long u = begin; u < end; ++u) {
    if (++chunk == chunks) chunk = 0, ++tile;
    if (++s == p.stages) s = 0, phase ^= 1;
    mbar_wait(smem_addr(&full[s]), phase);
    const unsigned char* stage = ring + s * stage_bytes_of(CHUNK);
#pragma unroll
    for (int c = 0; c < CHUNK / (32 * kConsumers); ++c) {
      // this thread's 8 elements of the stage's columns
      const int column = warp * (CHUNK / kConsumers) + c * 32 + 8 * t;
      const uint4 lo = *reinterpret_cast<const uint4*>(stage + g * row_bytes_of(CHUNK) + column * sizeof(T));
      const uint4 hi = *reinterpret_cast<const uint4*>(stage + (g + 8) * row_bytes_of(CHUNK) + column * sizeof(T));
      const uint4 xv = x_row_ok ? *reinterpret_cast<const uint4*>(xs + g * x_bytes + (chunk * CHUNK + column) *
                                                                                        sizeof(T))
                                : make_uint4(0, 0, 0, 0);
      const uint32_t a0[4] = {lo.x, hi.x, lo.y, hi.y};
      const uint32_t a1[4] = {lo.z, hi.z, lo.w, hi.w};
      mma16816<T>(acc, a0, xv.x, xv.y);
      mma16816<T>(acc, a1, xv.z, xv.w);
    }
    __syncwarp();  // every lane's reads of the stage are done before it is handed back
    if (lane == 0) mbar_arrive(smem_addr(&empty[s]));
    if (chunk != chunks - 1 && u != end - 1) continue;

    // The tile's end here: the warps' partial tiles (W rows g, g + 8; X rows 2t, 2t + 1) summed in warp
    // order; one thread an output (SwiGLU: a gate row's thread takes its up row too).
    partial[parity][warp][g][2 * t] = acc[0];
    partial[parity][warp][g][2 * t + 1] = acc[1];
    partial[parity][warp][g + 8][2 * t] = acc[2];
    partial[parity][warp][g + 8][2 * t + 1] = acc[3];
    acc[0] = acc[1] = acc[2] = acc[3] = 0.0f;
    named_sync(1, kConsumers * 32);
    const int outputs = p.ffn > 0 ? 64 : 128;
    const bool mine = threadIdx.x < outputs;
    const int r = threadIdx.x / 8, m = threadIdx.x % 8;
    float first = 0.0f, second = 0.0f;  // row r's sum, and (SwiGLU) row r + 8's
    if (mine) {
      for (int v = 0; v < kConsumers; ++v) first += partial[parity][v][r][m];
      if (p.ffn > 0) {
        for (int v = 0; v < kConsumers; ++v) second += partial[parity][v][r + 8][m];
      }
    }
    const long long tile_first = owner(tile * chunks, units, grid);
    const long long tile_last = owner(tile * chunks + chunks - 1, units, grid);
    if (tile_first != tile_last) {  // shared with other blocks: the last one in finishes it
      const bool first_tile = tile == begin / chunks;
      float* mine_out = p.partials + (blockIdx.x * 2 + (first_tile ? 0 : 1)) * 128;
      if (mine) {
        mine_out[r * 8 + m] = first;
        if (p.ffn > 0) mine_out[(r + 8) * 8 + m] = second;
      }
      __threadfence();
      named_sync(1, kConsumers * 32);
      if (threadIdx.x == 0) {
        const int arrived = atomicAdd(&p.counts[tile], 1);
        last[parity] = arrived == static_cast<int>(tile_last - tile_first);
        if (last[parity]) p.counts[tile] = 0;  // for the next launch: every block of this one has counted
      }
      named_sync(1, kConsumers * 32);
      if (!last[parity]) {
        parity ^= 1;
        continue;
      }
      __threadfence();
      if (mine) {
        first = 0.0f, second = 0.0f;
        for (long long b = tile_first; b <= tile_last; ++b) {
          const bool its_first = tile == units * b / grid / chunks;
          const float* part = p.partials + (b * 2 + (its_first ? 0 : 1)) * 128;
          first += __ldcg(part + r * 8 + m);
          if (p.ffn > 0) second += __ldcg(part + (r + 8) * 8 + m);
        }
      }
    }
    if (mine) epilogue<T>(p, tile, r, m, first, second);
    parity ^= 1;
  }
#endif
}

// The dynamic shared memory a block takes (skinny_ring.py's shared_bytes): the barriers, X's M rows of
// 16-bit K (each padded by 64 bytes) and the stages.
long long shared_bytes(long long m, long long k, long long stages, int chunk) {
  return kBarrierBytes + m * (k * 2 + 64) + stages * stage_bytes_of(chunk);
}

template <typename T, int CHUNK>
cudaError_t launch(const RingParams& p, long long grid, cudaStream_t stream) {
  const size_t bytes = static_cast<size_t>(shared_bytes(p.m, p.k, p.stages, CHUNK));
  return launch_with_pdl(skinny_ring_kernel<T, CHUNK>, p, grid, kConsumers + 1, p.pdl != 0, stream, bytes);
}

template <typename T>
cudaError_t launch(const RingParams& p, long long chunk, long long grid, cudaStream_t stream) {
  switch (chunk) {
    case 512: return launch<T, 512>(p, grid, stream);
    case 1024: return launch<T, 1024>(p, grid, stream);
    case 2048: return launch<T, 2048>(p, grid, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace

// x [M, K] (row stride x_row, a multiple of 8), w [N, K] contiguous (SwiGLU, ffn > 0: [2 ffn, K], gate
// rows then up rows, n = ffn), both 16-byte aligned; 1 <= M <= 8, K a multiple of chunk (512, 1024 or
// 2048 columns a stage); fp16 or bf16. bias [N] ([2 ffn]) or null; residual [M, N] or null (not with
// SwiGLU). grid blocks of one an SM, at most the units (tiles x K / chunk); stages 2-12 within the
// device's shared memory (the host's choice: skinny_ring.py); partials [grid, 2, 128] fp32 and counts
// [tiles] int32, zero, for tiles shared by blocks.
extern "C" int rooflint_skinny_ring(const void* x, const void* w, const void* bias, const void* residual, void* y,
                                    void* partials, void* counts, long long m, long long n, long long k,
                                    long long x_row, long long r_row, long long y_row, long long ffn, long long chunk,
                                    long long stages, long long grid, long long pdl, long long dtype,
                                    cudaStream_t stream) {
  const long long tiles = ffn > 0 ? (ffn + 7) / 8 : (n + kRows - 1) / kRows;
  bool ok = m >= 1 && m <= 8 && n >= 1 && chunk > 0 && k >= chunk && k % chunk == 0 && x_row % 8 == 0 &&
            aligned16(x) && aligned16(w) && stages >= 2 && stages <= kMaxStages && grid >= 1 &&
            grid <= tiles * (k / chunk) && partials != nullptr && counts != nullptr;
  if (ffn > 0) ok = ok && n == ffn && residual == nullptr;
  if (!ok) return static_cast<int>(cudaErrorInvalidValue);
  RingParams p{x, w, bias, residual, y, static_cast<float*>(partials), static_cast<int*>(counts), m, n, k, x_row,
               r_row, y_row, ffn > 0 ? ffn : 0, static_cast<int>(stages), static_cast<int>(pdl)};
  cudaError_t status;
  switch (dtype) {
    case kFloat16: status = launch<__half>(p, chunk, grid, stream); break;
    case kBFloat16: status = launch<__nv_bfloat16>(p, chunk, grid, stream); break;
    default: return static_cast<int>(cudaErrorInvalidValue);
  }
  return static_cast<int>(status != cudaSuccess ? status : cudaGetLastError());
}
