"""benchmarks/gpu_check.py, the first-contact script: its dry run builds
every example and random programs for sm_90 and validates the plan on the
CPU; stages keep to their budgets and leave partial results."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))

import gpu_check  # noqa: E402


def test_dry_run_builds_everything_and_validates_the_plan(tmp_path, capsys):
    assert gpu_check.main(["--dry-run", "--random", "2", "--out", str(tmp_path)]) == 0
    plan = json.loads((tmp_path / "plan.json").read_text())
    examples = sorted(p.name for p in gpu_check.EXAMPLES.glob("*.ir"))
    assert plan["programs"] == examples + ["fuzz-0", "fuzz-1"]
    assert sum(plan["stages"].values()) <= gpu_check.TOTAL_BUDGET_S <= 8 * 60
    built = json.loads((tmp_path / "build.json").read_text())
    assert not built["problems"]
    attention = next(p for p in built["programs"] if p["program"] == "attention.ir")
    assert any(launch["opt_in"] for launch in attention["launches"])  # flash attention's 66 KB
    assert json.loads((tmp_path / "environment.json").read_text())["gpu_unavailable_reason"] is not None
    summary = (tmp_path / "summary.md").read_text()
    assert "**plan**: 7 stages" in summary and summary in capsys.readouterr().out


def test_a_plan_over_eight_minutes_fails_the_dry_run(tmp_path, monkeypatch):
    monkeypatch.setitem(gpu_check.STAGE_BUDGETS_S, "correctness", 400.0)
    assert gpu_check.main(["--dry-run", "--random", "0", "--out", str(tmp_path)]) == 1
    assert "FAILED: the stage budgets add up to" in (tmp_path / "summary.md").read_text()


def test_a_failing_stage_leaves_its_error_and_the_next_stage_runs(tmp_path, monkeypatch):
    def broken(check, deadline):
        raise RuntimeError("device lost")

    monkeypatch.setitem(gpu_check.STAGES, "gemm", broken)
    check = gpu_check.Check(tmp_path, "sm_90", 0, dry_run=True)
    assert not gpu_check.run_stage(check, "gemm")
    assert gpu_check.run_stage(check, "sanitizer") or "compute-sanitizer" in check.summary["sanitizer"]
    summary = (tmp_path / "summary.md").read_text()
    assert "**gemm**: ERROR: RuntimeError: device lost" in summary and "**sanitizer**" in summary
    assert "device lost" in (tmp_path / "gemm.traceback.txt").read_text()


def test_a_stage_past_its_deadline_stops_between_programs(tmp_path):
    check = gpu_check.Check(tmp_path, "sm_90", 2, dry_run=True)
    with pytest.raises(gpu_check.StageFailed, match="not built, over the stage budget"):
        gpu_check.build(check, deadline=0.0)
    assert "over the stage budget" in (tmp_path / "build.json").read_text()


@pytest.mark.parametrize(
    "got, expected, error",
    [([1.0, 2.0], [1.0, 2.0], 0.0), ([1.0, 2.5], [1.0, 2.0], 0.25), ([float("nan")], [1.0], float("inf")), ([float("inf")], [float("inf")], 0.0)],
)
def test_normwise_error(got, expected, error):
    assert gpu_check.normwise_error(got, expected) == error
