"""Shared by the CPU backend tests: the hand-written kernels of
benchmarks/cpu_kernels.py, a private object-file cache, and one compiled
program per module per session (compile_program caches in memory)."""

from __future__ import annotations

import pathlib
import sys

import numpy as np
import pytest

HERE = pathlib.Path(__file__).resolve().parent
for folder in (HERE, HERE.parents[2] / "benchmarks"):  # cpu_tolerance, cpu_kernels
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))


@pytest.fixture(scope="session", autouse=True)
def private_object_cache(tmp_path_factory):
    """Tests never read or fill the user's ~/.cache."""
    mp = pytest.MonkeyPatch()
    mp.setenv("FUSECC_CACHE_DIR", str(tmp_path_factory.mktemp("fusecc-cache")))
    yield
    mp.undo()


@pytest.fixture
def rng():
    return np.random.default_rng(20240611)
