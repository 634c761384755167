"""cp.async under the harness (cpu_harness/cuda_cpu_vector.h): the groups'
semantics, and the sanitizer on deliberately broken uses (issue 13.3: the
double-buffered matmul stays checked). The kernels call the prelude's
helpers as generated code does (passes/backends/cuda/vector_memory.py)."""

from __future__ import annotations

import numpy as np
import pytest

from fusecc.runtime.cuda.cpu_harness.sanitizer import Sanitizer

SOURCE = r"""
// Correct: copy, commit, wait, barrier, then read a neighbour's element.
extern "C" __global__ void waited(const float* __restrict__ x, float* __restrict__ y) {
  __shared__ __align__(16) float tile[64];
  const int t = threadIdx.x;
  fusecc_cp_async<4>(&tile[t], &x[t], true);
  fusecc_cp_async<4>(&tile[t + 32], x, false);  // guarded off: zero fill, nothing read
  fusecc_cp_async_commit();
  fusecc_cp_async_wait<0>();
  __syncthreads();
  y[t] = tile[(t + 1) % 32] + tile[t + 32];
}

// Two groups in flight; wait<1> lands only the older one.
extern "C" __global__ void groups(const float* __restrict__ x, float* __restrict__ y) {
  __shared__ __align__(16) float tile[64];
  const int t = threadIdx.x;
  fusecc_cp_async<4>(&tile[t], &x[t], true);
  fusecc_cp_async_commit();
  fusecc_cp_async<4>(&tile[t + 32], &x[t + 32], true);
  fusecc_cp_async_commit();
  fusecc_cp_async_wait<1>();
  y[t] = tile[t];       // landed
  y[t + 32] = tile[t + 32];  // still in flight: not the data
  fusecc_cp_async_wait<0>();
}

// The wait after the barrier: a neighbour reads before the copy landed.
extern "C" __global__ void wait_after_barrier(const float* __restrict__ x, float* __restrict__ y) {
  __shared__ __align__(16) float tile[32];
  const int t = threadIdx.x;
  fusecc_cp_async<4>(&tile[t], &x[t], true);
  fusecc_cp_async_commit();
  __syncthreads();
  y[t] = tile[(t + 1) % 32];  // BUG: wait_after_barrier
  fusecc_cp_async_wait<0>();
}

// A prefetch into the stage others still read: no barrier between.
extern "C" __global__ void overwrite_while_read(const float* __restrict__ x, float* __restrict__ y) {
  __shared__ __align__(16) float tile[32];
  const int t = threadIdx.x;
  tile[t] = x[t];
  __syncthreads();
  const float v = tile[(t + 1) % 32];
  fusecc_cp_async<4>(&tile[t], &x[t + 32], true);  // BUG: overwrite_while_read
  fusecc_cp_async_commit();
  fusecc_cp_async_wait<0>();
  y[t] = v;
}

// A float4 load off its 16-byte boundary traps, as it faults on a GPU.
extern "C" __global__ void misaligned_vector(const float* __restrict__ x, float* __restrict__ y) {
  __shared__ __align__(16) float tile[40];
  const int t = threadIdx.x;
  tile[t] = x[t];
  __syncthreads();
  const float4 v = fusecc_load_vector<float4>(&tile[t % 4 + 1]);
  y[t] = v.x;
}
"""


@pytest.fixture(scope="module")
def sanitizer(cuda_cache_dir):
    return Sanitizer(SOURCE, "async_copy.cu", cache_dir=cuda_cache_dir)


def bug_line(kernel: str) -> int:
    return next(n for n, line in enumerate(SOURCE.splitlines(), 1) if line.rstrip().endswith(f"// BUG: {kernel}"))


def run(sanitizer, kernel, x, y):
    sanitizer.findings = []
    sanitizer.launch(kernel, 1, 32, [x, y])
    return sanitizer.findings


def test_waited_copies_are_clean_and_zero_fill_when_guarded_off(sanitizer):
    x, y = np.arange(64, dtype=np.float32), np.zeros(32, np.float32)
    assert run(sanitizer, "waited", x, y) == []
    np.testing.assert_array_equal(y, (np.arange(32) + 1) % 32)


def test_wait_lands_all_but_the_newest_groups(sanitizer):
    x, y = np.arange(64, dtype=np.float32), np.zeros(64, np.float32)
    assert run(sanitizer, "groups", x, y) == []
    np.testing.assert_array_equal(y[:32], np.arange(32))
    assert np.isnan(y[32:]).all()  # in flight: the harness's poison, not x


def test_reading_before_the_wait_is_a_race(sanitizer):
    findings = run(sanitizer, "wait_after_barrier", np.arange(32, dtype=np.float32), np.zeros(32, np.float32))
    kinds = {f.kind for f in findings if f.line == bug_line("wait_after_barrier")}
    assert kinds & {"race-raw", "race-war"}, findings


def test_a_prefetch_over_a_tile_still_read_is_a_race(sanitizer):
    findings = run(sanitizer, "overwrite_while_read", np.arange(64, dtype=np.float32), np.zeros(32, np.float32))
    assert "race-war" in {f.kind for f in findings if f.line == bug_line("overwrite_while_read")}, findings


def test_a_misaligned_vector_load_traps(sanitizer):
    with pytest.raises(Exception, match="misaligned vector load"):
        run(sanitizer, "misaligned_vector", np.arange(32, dtype=np.float32), np.zeros(32, np.float32))
