"""Runs every golden test under tests/filecheck through lit, one pytest item each."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).parent / "filecheck"
GOLDEN = sorted(p for p in ROOT.rglob("*.ir") if "inputs" not in p.parts)


@pytest.mark.parametrize("path", GOLDEN, ids=[str(p.relative_to(ROOT)) for p in GOLDEN])
def test_golden(path: pathlib.Path):
    proc = subprocess.run(
        [sys.executable, "-c", "import sys, lit.main; sys.exit(lit.main.main())", "-v", "--no-progress-bar", str(path)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    # lit exits 0 for UNSUPPORTED too: only a PASS is a pass.
    assert f"PASS: fusecc :: {path.relative_to(ROOT)}" in proc.stdout, proc.stdout[-6000:]
