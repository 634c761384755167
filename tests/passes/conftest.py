"""Shared by the CUDA emitter's tests."""

from __future__ import annotations

import pathlib

import pytest


@pytest.fixture(scope="session")
def cuda_cache_dir(tmp_path_factory) -> pathlib.Path:
    """CPU-harness libraries, built once per test run (shared by xdist workers; the cache locks)."""
    path = tmp_path_factory.getbasetemp().parent / "fusecc-cuda-cache"
    path.mkdir(exist_ok=True)
    return path
