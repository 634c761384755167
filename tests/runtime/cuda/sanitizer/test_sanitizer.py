"""The harness's offline sanitizer (issue 13.1): deliberately broken
kernels are each caught, with the kernel, the line, the threads and the
address; a correct kernel is clean; `fusecc run --target cuda-sim
--sanitize` exits 1 on a finding and runs the examples clean."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from fusecc.runtime.cuda.cpu_harness.sanitizer import Sanitizer, register_static_shared

SOURCE = Path(__file__).with_name("broken_kernels.cu")


def bug_line(kernel: str) -> int:
    for number, line in enumerate(SOURCE.read_text().splitlines(), 1):
        if line.rstrip().endswith(f"// BUG: {kernel}"):
            return number
    raise AssertionError(f"no BUG marker for {kernel}")


@pytest.fixture(scope="module")
def sanitizer(cuda_cache_dir):
    return Sanitizer(SOURCE.read_text(), SOURCE.name, cache_dir=cuda_cache_dir)


def run(sanitizer, kernel, grid, block, args):
    sanitizer.findings = []
    sanitizer.launch(kernel, grid, block, args)
    return sanitizer.findings


def floats(n):
    return np.arange(n, dtype=np.float32)


def kinds_at(findings, line):
    return {f.kind for f in findings if f.line == line}


def test_missing_barrier_is_a_race_at_the_read(sanitizer):
    findings = run(sanitizer, "missing_barrier", 2, 64, [floats(128), np.zeros(128, np.float32)])
    line = bug_line("missing_barrier")
    assert "race-raw" in kinds_at(findings, line)
    raw = next(f for f in findings if f.kind == "race-raw")
    assert raw.kernel == "missing_barrier" and len(raw.threads) == 2 and raw.threads[0] != raw.threads[1]
    assert f"at line {line - 1}" in raw.message  # the other thread's store
    assert "thread-order" in {f.kind for f in findings}  # reverse order leaves other memory
    assert str(raw).startswith(f"broken_kernels.cu:{line}: error: shared-memory race (read after write) in kernel missing_barrier: thread (")


def test_broadcast_race_names_thread_zero_as_the_writer(sanitizer):
    findings = run(sanitizer, "broadcast_race", 2, 32, [floats(2), np.zeros(64, np.float32)])
    raw = next(f for f in findings if f.kind == "race-raw")
    assert raw.line == bug_line("broadcast_race") and raw.threads[1] == (0, 0, 0)
    assert "value + 0 (4 bytes" in raw.message


def test_out_of_bounds_global_read_names_the_buffer(sanitizer):
    x = floats(64)
    findings = run(sanitizer, "out_of_bounds_read", 2, 32, [x, np.zeros(64, np.float32), np.int32(64)])
    assert [f.kind for f in findings] == ["global-out-of-bounds"]
    (f,) = findings
    assert f.line == bug_line("out_of_bounds_read") and f.threads == ((31, 0, 0),) and f.block == (1, 0, 0)
    assert f.address == x.ctypes.data + x.nbytes
    assert "0 bytes past the end of argument 0 (256 bytes)" in f.message


def test_uninitialised_shared_read(sanitizer):
    findings = run(sanitizer, "uninitialised_shared", 2, 32, [floats(64), np.zeros(64, np.float32)])
    assert "uninitialized-shared" in kinds_at(findings, bug_line("uninitialised_shared"))


def test_full_mask_shuffle_in_a_partial_warp(sanitizer):
    findings = run(sanitizer, "partial_warp_shuffle", 1, 16, [floats(16), np.zeros(16, np.float32)])
    assert [(f.kind, f.line) for f in findings] == [("partial-warp", bug_line("partial_warp_shuffle"))]
    assert "only 16 of 32 lanes" in findings[0].message


def test_barriers_from_different_call_sites(sanitizer):
    findings = run(sanitizer, "divergent_barrier", 1, 32, [np.zeros(32, np.float32)])
    assert [f.kind for f in findings] == ["barrier-divergent"]
    assert {findings[0].line, int(re.search(r"at line (\d+)", findings[0].message).group(1))} == {bug_line("divergent_barrier"), bug_line("divergent_barrier") + 2}


def test_barrier_after_exited_threads(sanitizer):
    findings = run(sanitizer, "barrier_after_exit", 1, 32, [np.zeros(32, np.float32)])
    assert [(f.kind, f.line) for f in findings] == [("barrier-exited", bug_line("barrier_after_exit"))]
    assert "after 16 thread(s)" in findings[0].message


def test_static_shared_out_of_bounds_write(sanitizer):
    findings = run(sanitizer, "shared_out_of_bounds", 1, 32, [np.zeros(32, np.float32)])
    assert ("shared-out-of-bounds", bug_line("shared_out_of_bounds")) in {(f.kind, f.line) for f in findings}
    assert "tile + 128" in next(f for f in findings if f.kind == "shared-out-of-bounds").message


def test_correct_kernel_is_clean_and_gives_its_result(sanitizer):
    x, y = floats(128), np.zeros(128, np.float32)
    assert run(sanitizer, "correct", 2, 64, [x, y]) == []
    np.testing.assert_array_equal(y, x.reshape(2, 64)[:, ::-1].reshape(-1))


def test_static_shared_registration_keeps_line_numbers():
    text = "k() {\n  __shared__ float partials[8];  // 1x8\n  __shared__ __align__(16) float t[4][65];\n}\n"
    out = register_static_shared(text)
    assert out.count("\n") == text.count("\n")
    assert 'fusecc_cpu::san::shared_array(partials, sizeof(partials), partials__fusecc_redzone, 64, "partials");  // 1x8' in out
    assert "shared_array(t, sizeof(t)" in out
