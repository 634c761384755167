"""Run CUDA C kernels on the CPU: the same .cu file, compiled with the host
C++ compiler and cuda_cpu.h. See loader.py for the API."""

from fusecc.runtime.cuda.cpu_harness.loader import CpuCompileError, CpuLaunchError, CpuModule, HostCompilerMissing, bf16_bits, default_workers

__all__ = ["CpuCompileError", "CpuLaunchError", "CpuModule", "HostCompilerMissing", "bf16_bits", "default_workers"]
