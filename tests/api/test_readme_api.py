"""The README's Python API example runs as printed (from the repository root)."""

from __future__ import annotations

import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_the_api_example_works_as_printed(monkeypatch, capsys):
    pytest.importorskip("llvmlite")
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    (example,) = [block for block in blocks if "fusecc.compile(" in block]
    monkeypatch.chdir(ROOT)
    exec(compile(example, "README.md", "exec"), {})
    printed = capsys.readouterr().out
    assert "fused_0_matmul" in printed and "kernel launches" in printed
