"""First contact with a GPU, checked without one (issue 13.6): the driver
against the CUDA wheels' majors, the shared-memory opt-in counting static
memory, a graph capture that keeps the launch's error, and the extras."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from fusecc.runtime.cuda.driver_check import (
    DEFAULT_SHARED_LIMIT,
    driver_mismatch,
    dynamic_shared_opt_in,
    split_driver_version,
    wheel_cuda_majors,
)

ROOT = Path(__file__).resolve().parents[3]


def test_driver_version_integer_splits_like_cuda():
    assert split_driver_version(12040) == (12, 4)
    assert split_driver_version(13000) == (13, 0)


def test_cuda13_wheels_on_an_r570_driver_name_the_branch_and_the_fix():
    message = driver_mismatch((12, 8), {"CuPy (cupy-cuda13x)": 13, "NVRTC 13.0": 13})
    assert message is not None
    assert "CUDA 12.8" in message and "R580" in message and "fusecc[cuda12]" in message
    assert "CuPy (cupy-cuda13x) (CUDA 13)" in message and "NVRTC 13.0 (CUDA 13)" in message


def test_matching_or_older_wheels_pass():
    assert driver_mismatch((13, 0), {"CuPy (cupy-cuda13x)": 13, "NVRTC 13.1": 13}) is None
    assert driver_mismatch((13, 0), {"CuPy (cupy-cuda12x)": 12, "NVRTC 12.8": 12}) is None  # newer drivers run older wheels
    assert driver_mismatch((12, 2), {"NVRTC 12.8": 12}) is None  # minor-version compatibility (cubins)
    assert driver_mismatch((12, 2), {}) is None


def test_only_the_too_new_wheel_is_blamed():
    message = driver_mismatch((12, 4), {"CuPy (cupy-cuda12x)": 12, "NVRTC 13.0": 13})
    assert "NVRTC 13.0" in message and "cupy-cuda12x" not in message


def test_installed_nvrtc_reports_its_major():
    pytest.importorskip("cuda.bindings.nvrtc", reason="cuda-bindings is a test extra")
    from fusecc.runtime.cuda.nvrtc import nvrtc_version

    major, minor = nvrtc_version()
    assert wheel_cuda_majors()[f"NVRTC {major}.{minor}"] == major


@pytest.mark.parametrize(
    "static, dynamic, allowed, expected",
    [
        (0, 40 * 1024, 48 * 1024, None),  # under 48 KB in all: nothing to do
        (16 * 1024, 40 * 1024, 32 * 1024, 40 * 1024),  # 56 KB in all: the opt-in, though 40 KB alone is under 48 KB
        (0, 66 * 1024, 48 * 1024, 66 * 1024),  # the attention kernel's case
        (8 * 1024, 60 * 1024, 64 * 1024, None),  # already allowed
    ],
)
def test_opt_in_counts_static_shared_memory(static, dynamic, allowed, expected):
    assert dynamic_shared_opt_in("k", static, dynamic, allowed, 227 * 1024) == expected


def test_more_shared_memory_than_the_device_has_is_an_error_naming_the_kernel():
    with pytest.raises(ValueError, match=r"kernel attn needs 235520 bytes .*\(16384 static \+ 219136 dynamic\).*232448"):
        dynamic_shared_opt_in("attn", 16 * 1024, 214 * 1024, DEFAULT_SHARED_LIMIT, 227 * 1024)


class _FailingLaunchStream:
    """A stream whose capture ends with its own error, as CUDA's does after a failed launch."""

    def __init__(self):
        self.ended = False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def begin_capture(self):
        pass

    def end_capture(self):
        self.ended = True
        raise RuntimeError("cudaErrorStreamCaptureInvalidated")


def _program_with(stream, launch_each):
    from fusecc.runtime.cuda.runtime import GpuProgram

    program = GpuProgram.__new__(GpuProgram)  # no device: only capture_graph's control flow is under test
    program.runtime = type("Runtime", (), {"device": _FailingLaunchStream(), "stream": stream})()
    program.graph = None
    program._launch_each = launch_each
    return program


def test_capture_reports_the_launch_error_not_the_capture_error():
    stream = _FailingLaunchStream()

    def launch_each():
        raise RuntimeError("cudaErrorInvalidValue: too much shared memory for fused_3_attention")

    program = _program_with(stream, launch_each)
    with pytest.raises(RuntimeError, match="fused_3_attention"):
        program.capture_graph()
    assert stream.ended and program.graph is None  # the capture was ended, not left open


def test_capture_error_alone_still_raises():
    stream = _FailingLaunchStream()
    with pytest.raises(RuntimeError, match="CaptureInvalidated"):
        _program_with(stream, lambda: None).capture_graph()


def test_extras_for_each_cuda_major():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert any(r.startswith("cupy-cuda12x") for r in extras["cuda12"]) and any(r.startswith("nvidia-cuda-nvrtc-cu12") for r in extras["cuda12"])
    assert any(r.startswith("cupy-cuda13x") for r in extras["cuda13"]) and any(r.startswith("cuda-bindings>=13") for r in extras["cuda13"])
    assert extras["cuda"] == ["fusecc[cuda12]"]
