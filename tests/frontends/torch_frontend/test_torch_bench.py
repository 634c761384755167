"""benchmarks/torch_bench.py: its dry run builds the contenders on a tiny
shape and checks them against eager (nothing timed); its table and the
docs block it writes. Times are never asserted."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="needs PyTorch: pip install 'fusecc[torch]'")

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))

import torch_bench  # noqa: E402

pytestmark = pytest.mark.torch


def test_dry_run_compiles_the_fusecc_contenders_and_they_agree_with_eager(capsys):
    assert torch_bench.main(["--dry-run", "--models", "encoder,mlp", "--contenders", "eager,fusecc,fusecc frozen"]) == 0
    err = capsys.readouterr().err
    assert "encoder layer h256 B1 S8: agree with eager" in err and "MLP 512-1024-256 B64: agree with eager" in err


def test_table_gives_medians_ranges_speed_ups_and_compile_times():
    row = {"description": "m", "times": {"eager": [0.002, 0.004, 0.003], "fusecc frozen": [0.001, 0.0015, 0.002]},
           "compile": {"fusecc frozen": 1.25}}
    text = torch_bench.table([row], threads=1, rounds=3, per_round=10, clock="cpu")
    assert "| m | 3.00 (2.00-4.00) | - | - | 1.50 (1.00-2.00) 2.00x | - / - / 1.2 |" in text
    assert "CPU time of the process" in text


def test_write_docs_replaces_only_its_own_block(tmp_path, monkeypatch):
    doc = tmp_path / "torch.md"
    doc.write_text("a\n<!-- torch_bench cpu: begin -->\nold\n<!-- torch_bench cpu: end -->\nb\n"
                   "<!-- torch_bench wall: begin -->\nkept\n<!-- torch_bench wall: end -->\n")
    monkeypatch.setattr(torch_bench, "DOC", doc)
    torch_bench.write_docs("new table", "cpu")
    text = doc.read_text()
    assert "new table" in text and "old" not in text and "kept" in text and text.startswith("a\n") and "\nb\n" in text


def test_breakdown_runs_every_layer_down_to_the_kernels_alone():
    with torch.no_grad():  # as main() runs it
        text = torch_bench.breakdown(rounds=1, calls=2)
    for row in ("| fusecc frozen, through torch.compile |", "| ... the runner's call by data pointers (SchedulePlan.call) |",
                "launches as one native call of the encoded steps) |", "| ... Program.__call__ |"):
        assert row in text
