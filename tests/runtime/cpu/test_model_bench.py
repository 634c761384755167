"""benchmarks/model_bench.py's dry run: MiniLM-L3 through the ONNX front end
and the BERT-base-shaped encoder (torch -> ONNX) built for fusecc,
onnxruntime (spinning off and on) and torch eager on a tiny shape, every
contender checked against onnxruntime; nothing timed, no JSON written.
The table itself (benchmarks/results/model_bench.json) is never asserted."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("torch")

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))

import model_bench  # noqa: E402


def test_quick_dry_run_builds_every_contender_and_they_agree(tmp_path, capsys):
    out = tmp_path / "bench.json"
    assert model_bench.main(["--quick", "--dry-run", "--bert-layers", "1", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "minilm-l3 B=1 S=16 threads=1" in text and "bert-base-L1 B=1 S=16 threads=1" in text
    assert "torch" in text.split("bert-base-L1", 1)[1]  # torch eager runs the encoder
    assert "dry run: 2 models built" in text and not out.exists()


def test_summary_takes_the_better_onnxruntime_setting_and_per_round_ratios():
    times = {"fusecc": [2.0, 3.0, 4.0], "ort-spinoff": [1.0, 1.0, 1.0], "ort-spinon": [2.0, 2.0, 2.0], "torch": [4.0, 3.0, 2.0]}
    row = model_bench.summarise(times)
    assert row["ort_counted"] == "ort-spinoff"
    assert row["ratios"]["ort"] == {"median": 3.0, "min": 2.0, "max": 4.0}
    assert row["ratios"]["torch"] == {"median": 1.0, "min": 0.5, "max": 2.0}
    assert "cpu_ratios" not in row


def test_summary_gives_cpu_time_ratios_when_recorded():
    times = {"fusecc": [2.0, 3.0, 4.0], "ort-spinoff": [1.0, 1.0, 1.0], "ort-spinon": [2.0, 2.0, 2.0]}
    cpu = {"fusecc": [1.0, 1.0, 2.0], "ort-spinoff": [2.0, 2.0, 2.0], "ort-spinon": [1.0, 1.0, 1.0]}
    row = model_bench.summarise(times, cpu)
    assert row["ort_counted"] == "ort-spinoff" and row["cpu_ms"]["fusecc"] == 1000.0
    assert row["cpu_ratios"]["ort"] == {"median": 1.0, "min": 1.0, "max": 2.0}  # against the setting with less CPU time
    assert "| 1.00× (1.00–2.00) |" in model_bench.table([{**row, "model": "m", "batch": 1, "seq": 8, "threads": 1, "kernels": 3}])


def test_matmul_bench_programs_compile_and_run_with_and_without_the_epilogue():
    import matmul_bench

    for epilogue in (False, True):
        seconds, kernels = matmul_bench.fusecc_seconds(3, 17, 5, epilogue, threads=1, reps=1)
        assert len(seconds) == 1 and any("matmul" in k for k in kernels)


def test_summary_of_trees_compares_each_tree_with_the_first_per_round():
    times = {"fusecc[old]": [2.0, 4.0, 3.0], "fusecc[new]": [1.0, 4.0, 1.5], "ort-spinoff": [1.0, 1.0, 1.0], "ort-spinon": [2.0, 2.0, 2.0]}
    row = model_bench.summarise(times, None, ["old", "new"])
    assert row["ratios"]["ort"] == {"median": 3.0, "min": 2.0, "max": 4.0}  # the first tree is the table's fusecc
    assert row["trees"]["new"] == {"median": 0.5, "min": 0.5, "max": 1.0} and row["trees"]["old"]["median"] == 1.0
    text = model_bench.tree_table([{**row, "model": "m", "batch": 1, "seq": 8, "threads": 2}])
    assert "| m | 1 | 8 | 2 | new | 1500.0 | 0.50× (0.50–1.00) | — |" in text


def test_trees_run_in_child_processes_and_agree(tmp_path, capsys):
    """--trees: fusecc built from a tree (here this one) in child processes,
    one per label, checked against onnxruntime like the others."""
    import subprocess

    root = Path(__file__).resolve().parents[3]
    lib = tmp_path / "lib"
    subprocess.run([sys.executable, "-c", "import setuptools; setuptools.setup()", "-q", "build_py", "--build-lib", str(lib)],
                   cwd=root, check=True, capture_output=True)
    argv = ["--dry-run", "--models", "minilm-l3", "--threads", "2", "--trees", f"a={lib},b={lib}", "--json", str(tmp_path / "b.json")]
    assert model_bench.main(argv) == 0
    text = capsys.readouterr().out
    assert "fusecc[a]" in text and "fusecc[b]" in text and "dry run: 1 models built" in text


def test_thread_split_finds_the_split_launches_and_their_critical_path():
    """benchmarks/thread_split.py: at 2 threads MiniLM-L3's matmuls and
    attention are split (the critical path counts their busiest pieces);
    at 1 thread nothing is split and the critical path is the caller's CPU time."""
    import thread_split

    two = thread_split.measure("minilm-l3", "1x128", 2, 2)
    one = thread_split.measure("minilm-l3", "1x128", 1, 2)
    assert two["split launches"] >= 15 and one["split launches"] == 0
    assert one["critical CPU"] == one["caller CPU"] > 0 and two["critical CPU"] > 0
