"""The CPU harness runs the fixture kernels, unchanged, and matches numpy."""

from __future__ import annotations

import math
import uuid

import numpy as np
import pytest

from fusecc.runtime.cuda.cpu_harness import CpuCompileError, CpuLaunchError, CpuModule
from fusecc.runtime.reference import round_bf16

rng = np.random.default_rng(5)


def erf(x: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf)(x.astype(np.float64))


def test_elementwise_kernels_respect_their_guards(cpu_module):
    module = cpu_module("elementwise.cu")
    rows, cols = 37, 53  # neither a multiple of the 16x16 block
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    bias = rng.standard_normal(cols).astype(np.float32)
    y = np.full((rows + 1, cols), 7.0, np.float32)  # one row past the end must stay untouched
    module.launch("bias_gelu_2d", grid=(4, 3), block=(16, 16), args=[x, bias, y, rows, cols])
    v = x.astype(np.float64) + bias
    np.testing.assert_allclose(y[:rows], 0.5 * v * (1 + erf(v / math.sqrt(2))), rtol=1e-6, atol=1e-6)
    assert (y[rows] == 7.0).all()

    n = 1000
    x = rng.standard_normal(n + 24).astype(np.float32)
    out = np.full(n + 24, 7.0, np.float32)
    module.launch("silu_tanh_rsqrt", grid=4, block=256, args=[x, out, n])
    v = x[:n].astype(np.float64)
    expected = np.maximum(v / (1 + np.exp(-v)) + np.tanh(v) / np.sqrt(v * v + 1), 0)
    np.testing.assert_allclose(out[:n], expected, rtol=1e-5, atol=1e-6)
    assert (out[n:] == 7.0).all()

    y = rng.standard_normal(n).astype(np.float32)
    out = np.zeros(n, np.float32)
    module.launch("axpby", grid=3, block=64, args=[x[:n].copy(), y, out, 2.0, -0.5, n])  # a grid-stride loop
    np.testing.assert_allclose(out, 2 * x[:n] - 0.5 * y, rtol=1e-6)


def test_tiled_matmul_with_sizes_that_do_not_divide_the_tile(cpu_module):
    M, N, K = 37, 29, 45
    a = rng.standard_normal((M, K)).astype(np.float32)
    b = rng.standard_normal((K, N)).astype(np.float32)
    c = np.zeros((M, N), np.float32)
    cpu_module("matmul_tiled.cu").launch("matmul_tiled", grid=(2, 3), block=(16, 16), args=[a, b, c, M, N, K])
    np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("block", [64, 256])
def test_block_reductions_with_shuffles_and_barriers(cpu_module, block):
    module = cpu_module("block_reduce.cu")
    x = rng.standard_normal((7, 1000)).astype(np.float32)
    out = np.zeros(7, np.float32)
    module.launch("row_sum", grid=7, block=block, args=[x, out, 1000])
    np.testing.assert_allclose(out, x.sum(axis=1, dtype=np.float64), rtol=1e-5, atol=1e-4)

    total = np.zeros(1, np.float32)
    module.launch("total_sum", grid=16, block=block, args=[x.reshape(-1), total, x.size])  # atomicAdd across workers
    np.testing.assert_allclose(total[0], x.sum(dtype=np.float64), rtol=1e-5, atol=1e-3)


def test_portable_fiber_switch_gives_the_same_sums(cpu_module):
    x = rng.standard_normal((3, 500)).astype(np.float32)
    out = np.zeros(3, np.float32)
    cpu_module("block_reduce.cu", ("FUSECC_CPU_UCONTEXT",)).launch("row_sum", grid=3, block=128, args=[x, out, 500])
    np.testing.assert_allclose(out, x.sum(axis=1, dtype=np.float64), rtol=1e-5, atol=1e-4)


def test_softmax_rows_with_dynamic_shared_memory(cpu_module):
    rows, cols, block = 5, 300, 128
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    x[1] += 80.0  # exp would overflow without the max subtracted
    y = np.zeros_like(x)
    cpu_module("softmax_rows.cu").launch("softmax_rows", grid=rows, block=block, args=[x, y, cols], shared_bytes=block // 32 * 4)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(y, e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-7)


def test_f16_and_bf16_storage(cpu_module):
    module = cpu_module("half_precision.cu")
    n = 1000
    x = (rng.standard_normal(n) * 100).astype(np.float16)
    y = np.zeros(n, np.uint16)  # bf16 travels as its bits
    module.launch("scale_relu_f16_to_bf16", grid=4, block=256, args=[x, y, 3.0, n])
    got = (y.astype(np.uint32) << 16).view(np.float32)
    assert np.array_equal(got, round_bf16(np.maximum(x.astype(np.float32), 0) * np.float32(3.0)))

    back = np.zeros(n, np.float16)
    module.launch("bf16_plus_one_to_f16", grid=4, block=256, args=[y, back, n])
    assert np.array_equal(back, (got + np.float32(1.0)).astype(np.float16))


def test_deadlock_and_trap_are_reported_not_hung(cpu_module):
    module = cpu_module("faults.cu")
    out = np.zeros(4 * 64, np.float32)
    with pytest.raises(CpuLaunchError, match=r"divergent_barrier.*deadlock in block \(0,0,0\).*63 thread\(s\) wait at __syncthreads\(\), 1 at a warp operation"):
        module.launch("divergent_barrier", grid=1, block=64, args=[out])
    with pytest.raises(CpuLaunchError, match=r"__trap\(\) in block \(2,0,0\).*thread \(5,0,0\)"):
        module.launch("trap_in_block_two", grid=4, block=64, args=[out])


def test_arguments_are_checked_against_the_kernel_signature(cpu_module):
    module = cpu_module("softmax_rows.cu")
    x = np.zeros((2, 64), np.float32)
    assert [str(p) for p in module.kernels["softmax_rows"].params] == ["pointer to float32", "pointer to float32", "int32"]
    with pytest.raises(TypeError, match="argument 0 of kernel softmax_rows: expects a float32 array.*got float64"):
        module.launch("softmax_rows", 2, 64, [x.astype(np.float64), x, 64], shared_bytes=8)
    with pytest.raises(TypeError, match="argument 1 of kernel softmax_rows: expects a C-contiguous array"):
        module.launch("softmax_rows", 2, 64, [x, x.T, 64], shared_bytes=8)
    with pytest.raises(TypeError, match="argument 2 of kernel softmax_rows: expects an integer"):
        module.launch("softmax_rows", 2, 64, [x, x, 64.0], shared_bytes=8)
    with pytest.raises(TypeError, match="takes 3 arguments, got 2"):
        module.launch("softmax_rows", 2, 64, [x, x])
    with pytest.raises(KeyError, match="no kernel 'softmax' in softmax_rows.cu"):
        module.launch("softmax", 2, 64, [x, x, 64])
    with pytest.raises(ValueError, match="more than 1024 threads"):
        module.launch("softmax_rows", 2, (64, 32), [x, x, 64])


def test_compile_errors_name_the_file_and_kernel_and_builds_are_cached(cuda_cache_dir):
    broken = 'extern "C" __global__ void broken_kernel(float* y) {\n  y[0] = undefined_name;\n}\n'
    with pytest.raises(CpuCompileError) as info:
        CpuModule.compile(broken, "broken.cu", cache_dir=cuda_cache_dir)
    assert str(info.value).startswith("g++ failed to compile broken.cu (kernels: broken_kernel):")
    assert "broken.cu:2:10: error: 'undefined_name' was not declared" in str(info.value)

    fixed = broken.replace("undefined_name", "1.5f") + f"// {uuid.uuid4()}: new to the cache\n"
    first = CpuModule.compile(fixed, "fixed.cu", cache_dir=cuda_cache_dir)
    again = CpuModule.compile(fixed, "fixed.cu", cache_dir=cuda_cache_dir)
    assert first.compiled and not again.compiled and first.library == again.library
    y = np.zeros(1, np.float32)
    again.launch("broken_kernel", 1, 1, [y])
    assert y[0] == 1.5


def _mappings() -> int:
    with open("/proc/self/maps") as maps:
        return sum(1 for _ in maps)


@pytest.mark.skipif(not __import__("os").path.exists("/proc/self/maps"), reason="needs /proc/self/maps (Linux)")
def test_launches_leave_no_fiber_stacks_mapped(cuda_cache_dir):
    """Each module has its own per-thread worker; its fiber stacks (a stack and
    a guard page per thread: two mappings each) are unmapped when a launch
    ends, so a process running many modules does not pile them up (the fuzzer
    ran out of mappings after ~300 modules when they were kept)."""
    template = """
    extern "C" __global__ void scale_{tag}(float* x, int n) {{
      int i = blockIdx.x * blockDim.x + threadIdx.x;
      if (i < n) x[i] = x[i] * {factor}.0f;
    }}
    """
    modules = [CpuModule.compile(template.format(tag=i, factor=i + 2), f"scale{i}.cu", cache_dir=cuda_cache_dir) for i in range(4)]
    x = np.ones(1024, np.float32)
    before = _mappings()
    for i, module in enumerate(modules):
        module.launch(f"scale_{i}", grid=1, block=1024, args=[x, x.size])
    assert _mappings() - before < 64  # kept stacks: 2 x 1024 per module and pool thread
    np.testing.assert_array_equal(x, np.full(1024, 2 * 3 * 4 * 5, np.float32))
