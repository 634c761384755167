"""Shared by the CUDA tests: fixture sources, compiled once per session."""

from __future__ import annotations

from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"


def pytest_runtest_setup(item):
    if item.get_closest_marker("cuda"):
        from fusecc.runtime.cuda.runtime import gpu_unavailable_reason

        reason = gpu_unavailable_reason()
        if reason is not None:
            pytest.skip(f"needs a CUDA GPU: {reason}")


@pytest.fixture(scope="session")
def cuda_source():
    def read(name: str) -> str:
        return (FIXTURES / name).read_text()

    return read


@pytest.fixture(scope="session")
def cuda_cache_dir(tmp_path_factory) -> Path:
    # The parent of the base temp dir is shared by pytest-xdist's workers, so
    # each library is built once per run (the cache locks against races).
    path = tmp_path_factory.getbasetemp().parent / "fusecc-cuda-cache"
    path.mkdir(exist_ok=True)
    return path


@pytest.fixture(scope="session")
def cpu_module(cuda_source, cuda_cache_dir):
    """cpu_module("softmax_rows.cu") -> the fixture compiled for the CPU harness."""
    from fusecc.runtime.cuda.cpu_harness import CpuModule

    modules = {}

    def get(name: str, defines: tuple[str, ...] = ()):
        if (name, defines) not in modules:
            modules[name, defines] = CpuModule.compile(cuda_source(name), name, cache_dir=cuda_cache_dir, defines=defines)
        return modules[name, defines]

    return get
