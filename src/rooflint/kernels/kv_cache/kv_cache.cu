// Paged KV-cache append (scatter rows into slots) and read (gather pages into contiguous rows).
// Pure data movement, so the kernel is a copy with one indirection per token row: a block owns a
// row (heads * head_dim elements, 8 KB at [32, 128] bf16), looks its mapping up once, and streams
// K's and V's rows with 16-byte loads and stores. Rows are whole DRAM pages' worth of contiguous
// bytes, so the scatter costs no coalescing; what it can cost is in-flight bytes, hence K and V
// loads are issued together before either store.
#include "rooflint/common.cuh"

template <typename T, int V, bool kScatter>
__global__ void kv_copy_kernel(const T* __restrict__ k_src, const T* __restrict__ v_src, T* __restrict__ k_dst,
                               T* __restrict__ v_dst, const void* __restrict__ index, long long rows,
                               long long row_elems, long long page) {
  const long long row_vecs = row_elems / V;
  for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
    long long src_row, dst_row;
    if constexpr (kScatter) {  // append: new row -> slot_mapping[row] (int64)
      src_row = row;
      dst_row = static_cast<const long long*>(index)[row];
    } else {  // read: output row -> block_table[row / page] * page + row % page (int32 table)
      src_row = static_cast<long long>(static_cast<const int*>(index)[row / page]) * page + row % page;
      dst_row = row;
    }
    const T* ks = k_src + src_row * row_elems;
    const T* vs = v_src + src_row * row_elems;
    T* kd = k_dst + dst_row * row_elems;
    T* vd = v_dst + dst_row * row_elems;
#pragma unroll 2
    for (long long i = threadIdx.x; i < row_vecs; i += blockDim.x) {
      if constexpr (V == Vec<T>::kSize) {
        const AlignedVec<T> kv = load_vec(ks + i * V), vv = load_vec(vs + i * V);
        store_vec(kd + i * V, kv);
        store_vec(vd + i * V, vv);
      } else {
        const T kv = ks[i], vv = vs[i];
        kd[i] = kv;
        vd[i] = vv;
      }
    }
  }
}

template <typename T, bool kScatter>
static void launch_kv_copy(const void* k_src, const void* v_src, void* k_dst, void* v_dst, const void* index,
                           long long rows, long long row_elems, long long page, cudaStream_t stream) {
  constexpr int kVec = Vec<T>::kSize;
  // Rows of 16-byte multiples on 16-byte-aligned bases take the vector path; any other shape
  // (odd heads * head_dim) falls back to element copies rather than faulting.
  const bool vector = row_elems % kVec == 0 && aligned16(k_src) && aligned16(v_src) && aligned16(k_dst) &&
                      aligned16(v_dst);
  const long long work = vector ? row_elems / kVec : row_elems;
  // 256 threads cover an 8 KB bf16 row in two 16-byte steps; smaller rows get a smaller block.
  const int threads = static_cast<int>(work >= 256 ? 256 : ((work + 31) / 32) * 32);
  const unsigned int blocks = blocks_for(rows, 1);
  auto ks = static_cast<const T*>(k_src);
  auto vs = static_cast<const T*>(v_src);
  auto kd = static_cast<T*>(k_dst);
  auto vd = static_cast<T*>(v_dst);
  if (vector) {
    kv_copy_kernel<T, kVec, kScatter><<<blocks, threads, 0, stream>>>(ks, vs, kd, vd, index, rows, row_elems, page);
  } else {
    kv_copy_kernel<T, 1, kScatter><<<blocks, threads, 0, stream>>>(ks, vs, kd, vd, index, rows, row_elems, page);
  }
}

// scatter = 1: append (index = int64 slot per source row); 0: read (index = int32 block table).
extern "C" int rooflint_kv_copy(const void* k_src, const void* v_src, void* k_dst, void* v_dst, const void* index,
                                long long rows, long long row_elems, long long scatter, long long page,
                                long long dtype, cudaStream_t stream) {
  if (rows < 1 || row_elems < 1 || page < 1) return static_cast<int>(cudaErrorInvalidValue);
  ROOFLINT_DISPATCH(dtype, T, {
    if (scatter) {
      launch_kv_copy<T, true>(k_src, v_src, k_dst, v_dst, index, rows, row_elems, page, stream);
    } else {
      launch_kv_copy<T, false>(k_src, v_src, k_dst, v_dst, index, rows, row_elems, page, stream);
    }
  });
  return static_cast<int>(cudaGetLastError());
}
