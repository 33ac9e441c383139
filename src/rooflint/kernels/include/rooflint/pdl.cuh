// Programmatic dependent launch (sm_90): a kernel of a decode step lets the next kernel's blocks in
// early and waits for the previous kernel's writes only where it first reads them. Below sm_90 both
// are no-ops and the launch carries no PDL attribute.
#pragma once
#include <cuda_runtime.h>

__device__ __forceinline__ void launch_dependents() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
__device__ __forceinline__ void wait_for_previous() {
  // The "memory" clobber keeps every load of the previous kernel's output after the wait.
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Launch `kernel(params)` on `blocks` blocks of `warps` warps, allowed to start while the previous
// kernel on the stream still runs (it must then wait_for_previous before reading that kernel's
// output) where `pdl` is set; a plain launch otherwise. `shared_bytes` of dynamic shared memory a
// block: the kernel's limit is raised to it first, since with the kernel's static shared memory even
// less than the default 48 KB can be over it.
template <typename Kernel, typename Params>
cudaError_t launch_with_pdl(Kernel kernel, const Params& params, long long blocks, int warps, bool pdl,
                            cudaStream_t stream, size_t shared_bytes = 0) {
  if (shared_bytes > 0) {
    const cudaError_t raised = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                    static_cast<int>(shared_bytes));
    if (raised != cudaSuccess) return raised;
  }
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned int>(blocks));
  config.blockDim = dim3(static_cast<unsigned int>(warps * 32));
  config.dynamicSmemBytes = shared_bytes;
  config.stream = stream;
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attribute;
  config.numAttrs = pdl ? 1 : 0;
  return cudaLaunchKernelEx(&config, kernel, params);
}
