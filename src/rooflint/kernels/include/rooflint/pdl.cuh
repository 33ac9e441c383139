// Programmatic dependent launch (sm_90): a kernel of a decode step lets the next kernel's blocks in
// early and waits for the previous kernel's writes only where it first reads them. Below sm_90 both
// are no-ops and the launch carries no PDL attribute.
#pragma once

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
