// fusecc_cuda.cuh: what generated CUDA C may rely on, the same under NVRTC
// and under the CPU harness (which force-includes cuda_cpu.h and so defines
// FUSECC_CPU_EMULATION). The emitter includes it, or pastes it verbatim at
// the top of a stand-alone kernels.cu. See docs/cuda-c-conventions.md.
#ifndef FUSECC_CUDA_PRELUDE
#define FUSECC_CUDA_PRELUDE

#ifndef FUSECC_CPU_EMULATION
// Dynamic shared memory, as a statement inside the kernel body; the launch
// gives its size in bytes. All such arrays of a kernel share one base.
#define FUSECC_EXTERN_SHARED(type, name) extern __shared__ __align__(16) type name[]
#endif

// NVRTC has no libc headers, so no INFINITY.
#define FUSECC_NEG_INF __uint_as_float(0xff800000u)
#define FUSECC_POS_INF __uint_as_float(0x7f800000u)

#endif  // FUSECC_CUDA_PRELUDE
