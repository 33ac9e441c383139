// Shared helpers for rooflint's CUDA sources: dtype dispatch, fp32 conversion, 16-byte vectors.
// Every launcher is extern "C", takes device pointers, long long sizes and the caller's stream,
// and returns the cudaError_t of its launch (0 on success), which rooflint checks.
#pragma once
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <stdint.h>

#include <type_traits>

// dtype codes passed from Python: 0 fp32, 1 fp16, 2 bf16 (rooflint.kernels.cuda_dtype).
enum RooflintDtype { kFloat32 = 0, kFloat16 = 1, kBFloat16 = 2 };

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T> __device__ __forceinline__ T from_float(float v);
template <> __device__ __forceinline__ float from_float<float>(float v) { return v; }
template <> __device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

// One 16-byte memory transaction's worth of elements: the widest load a thread can issue,
// which keeps the number of memory instructions per byte at its minimum.
template <typename T> struct Vec {
  static constexpr int kSize = 16 / sizeof(T);
  T v[kSize];
};
template <typename T> struct alignas(16) AlignedVec : Vec<T> {};

template <typename T>
__device__ __forceinline__ AlignedVec<T> load_vec(const T* p) {
  AlignedVec<T> out;
  *reinterpret_cast<uint4*>(&out) = __ldg(reinterpret_cast<const uint4*>(p));
  return out;
}
template <typename T>
__device__ __forceinline__ void store_vec(T* p, const AlignedVec<T>& value) {
  *reinterpret_cast<uint4*>(p) = *reinterpret_cast<const uint4*>(&value);
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// Dispatch a templated launch on the runtime dtype code; unknown codes are an invalid value.
#define ROOFLINT_DISPATCH(dtype_code, T, ...)                 \
  switch (dtype_code) {                                     \
    case kFloat32: { using T = float; __VA_ARGS__; break; }  \
    case kFloat16: { using T = __half; __VA_ARGS__; break; } \
    case kBFloat16: { using T = __nv_bfloat16; __VA_ARGS__; break; } \
    default: return static_cast<int>(cudaErrorInvalidValue); \
  }

// Compile-time choices from runtime codes, for launchers whose kernels are templates over a 16-bit
// dtype and a few integer parameters: with_half_dtype(code, f) calls f(__half{}) or
// f(__nv_bfloat16{}); with_choice<64, 128>(value, f) calls f(std::integral_constant<int, 64>{}) etc.
// Anything else is cudaErrorInvalidValue. One table per launcher, where each entry point used to
// repeat its own if/switch ladder (a launcher and its occupancy query must agree on the cases).
template <typename F>
int with_half_dtype(long long code, F&& f) {
  if (code == kFloat16) return f(__half{});
  if (code == kBFloat16) return f(__nv_bfloat16{});
  return static_cast<int>(cudaErrorInvalidValue);
}
template <int First, int... Rest, typename F>
int with_choice(long long value, F&& f) {
  if (value == First) return f(std::integral_constant<int, First>{});
  if constexpr (sizeof...(Rest) > 0) {
    return with_choice<Rest...>(value, static_cast<F&&>(f));
  } else {
    return static_cast<int>(cudaErrorInvalidValue);
  }
}

// Two fp32 -> one register of two 16-bit values, the lower column in the low half: the order of an
// mma.sync / wgmma fragment register. T is __half or __nv_bfloat16.
template <typename T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  } else {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  }
}

// ex2.approx is one MUFU op; exp2f adds range fix-ups that cost issue slots in an inner loop.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// tanh GELU, 0.5 z (1 + tanh(u)) with u = sqrt(2/pi) (z + 0.044715 z^3), in two forms. Both are a
// few FMAs around the MUFU, the SM's 16-lane special-function unit, which is what a GELU epilogue
// spends: on the H200 (4.8 TB/s over the H100's 132 SMs) the elementwise GELU kernels kept it ~50%
// busy (ncu at 85145dc).
// - sigmoid: z * sigmoid(2u) = z / (1 + 2^(z (c1 + c3 z^2))), log2(e) folded into the constants:
//   MUFU ex2 + MUFU rcp. Exact in real arithmetic; for z << 0 ex2 overflows to inf and the
//   approximate divide gives -0, the limit. The fp32 form.
// - mufu: tanh.approx.f32 (sm_75+), ONE MUFU op. Its relative error (2^-10.99) is below bf16's
//   rounding and inside fp16's tolerance, not fp32's; for z << 0 it returns -1 and GELU 0.
__device__ __forceinline__ float gelu_tanh_sigmoid(float z) {
  constexpr float c1 = -2.0f * 0.7978845608028654f * 1.4426950408889634f;  // -2 sqrt(2/pi) log2(e)
  constexpr float c3 = c1 * 0.044715f;
  return __fdividef(z, 1.0f + exp2f(z * fmaf(c3, z * z, c1)));
}
__device__ __forceinline__ float gelu_tanh_mufu(float z) {
  constexpr float k0 = 0.7978845608028654f, k1 = 0.7978845608028654f * 0.044715f;
  float t;
  asm("tanh.approx.f32 %0, %1;\n" : "=f"(t) : "f"(z * fmaf(k1, z * z, k0)));
  const float half = 0.5f * z;
  return fmaf(half, t, half);
}
// The form for data of type T: one MUFU op for 16-bit data, the exact-in-real-arithmetic form for fp32.
template <typename T>
__device__ __forceinline__ float gelu_tanh(float z) {
  if constexpr (sizeof(T) == 2) {
    return gelu_tanh_mufu(z);
  } else {
    return gelu_tanh_sigmoid(z);
  }
}

// 16-byte async copy (cp.async, sm_80+; nothing below, where callers keep a synchronous path); a false `valid` copies zero bytes and zero-fills, which pads the edge tiles.
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool valid) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0));
#endif
}
__device__ __forceinline__ void cp_async_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}

// 16-byte vector paths need 16-byte aligned pointers; launchers refuse others rather than fault.
static inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

static inline unsigned int blocks_for(long long work, int per_block, int max_blocks = 65535 * 16) {
  long long blocks = (work + per_block - 1) / per_block;
  if (blocks < 1) blocks = 1;
  if (blocks > max_blocks) blocks = max_blocks;
  return static_cast<unsigned int>(blocks);
}

// What both attention entry points check before a launch: the GPU generation the kernel was built
// for (major in [min_major, max_major]), the grid's limits and 16-byte alignment. 0 when it may go.
inline int attention_launch_check(int min_major, int max_major, const void* q, const void* k, const void* v,
                                  const void* o, long long heads, long long n) {
  int device = 0, major = 0;
  cudaError_t status = cudaGetDevice(&device);
  if (status == cudaSuccess) status = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  if (status != cudaSuccess) return static_cast<int>(status);
  if (major < min_major || major > max_major) return static_cast<int>(cudaErrorNotSupported);
  if (n < 1 || n > (1 << 30) || heads < 1 || heads > 65535) return static_cast<int>(cudaErrorInvalidValue);
  if (!aligned16(q) || !aligned16(k) || !aligned16(v) || !aligned16(o))
    return static_cast<int>(cudaErrorMisalignedAddress);
  return 0;
}

// A 16-byte vector's elements as fp32, in memory order, each exactly to_float of that element.
// 16-bit types convert a 32-bit word at a time: bf16's widening is a shift for the low half and a
// mask for the high one, one integer op an element, where converting element by element first
// moves the high half down (PRMT + shift). fp16 widens with one HADD2.F32 an element either way.
template <typename T>
__device__ __forceinline__ void vec_to_float(const uint4& v, float (&out)[16 / sizeof(T)]) {
  const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if constexpr (std::is_same_v<T, float>) {
      out[i] = __uint_as_float(words[i]);
    } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
      out[2 * i] = __uint_as_float(words[i] << 16);
      out[2 * i + 1] = __uint_as_float(words[i] & 0xffff0000u);
    } else {
      const float2 pair = __half22float2(*reinterpret_cast<const __half2*>(&words[i]));
      out[2 * i] = pair.x;
      out[2 * i + 1] = pair.y;
    }
  }
}

// fp32 values -> one 16-byte vector of T, each rounded as from_float<T> rounds it; 16-bit types
// round two values with one instruction (F2FP), the pack2 order: the lower element in the low half.
template <typename T>
__device__ __forceinline__ uint4 vec_from_float(const float (&in)[16 / sizeof(T)]) {
  uint32_t words[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if constexpr (std::is_same_v<T, float>) {
      words[i] = __float_as_uint(in[i]);
    } else {
      words[i] = pack2<T>(in[2 * i], in[2 * i + 1]);
    }
  }
  return make_uint4(words[0], words[1], words[2], words[3]);
}
