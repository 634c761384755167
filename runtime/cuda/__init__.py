"""The CUDA side of fusecc's runtime, usable without a GPU where possible.

- nvrtc.py: CUDA C to PTX or cubin for a given architecture (NVRTC, no GPU).
- resources.py: registers, spills and shared memory per kernel (ptxas report).
- cpu_harness/: the same CUDA C compiled with g++ and run on the CPU.
- manifest.py: kernels.json, the launch sequence of a generated program.
- execute.py: runs a (manifest, source, inputs) triple on either backend.
- runtime.py: the GPU runtime (CuPy, imported lazily), kernel cache, graphs.
- target.py: `fusecc run --target cuda`.
Conventions for the CUDA C itself: docs/cuda-c-conventions.md.
"""
