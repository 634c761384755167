"""Issue 14.8: the README's fusion figures come from benchmarks/readme_figures.py.
Its deterministic figures (launches, bytes, intermediates, arena, the cost
model's report) must match what the compiler gives today; timings are not
compared. A README with one launch count changed is caught."""

from __future__ import annotations

import importlib.util
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def figures():
    spec = importlib.util.spec_from_file_location("readme_figures", ROOT / "benchmarks" / "readme_figures.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_the_readme_figures_are_the_scripts(capsys):
    assert figures().main(["--check"]) == 0, capsys.readouterr().err


def test_a_stale_figure_or_model_time_is_caught_but_a_different_measured_time_is_not(tmp_path, capsys):
    script = figures()
    text = (ROOT / "README.md").read_text()
    body = next(m for m in script.BLOCK.finditer(text) if m.group("name") == "measured-encoder").group(0)
    launches = next(line for line in body.split("\n") if line.startswith("| kernel launches |"))
    time_row = next(line for line in body.split("\n") if line.startswith(script.TIME_ROW))
    retimed = tmp_path / "retimed.md"
    cells = time_row.split("|")
    retimed.write_text(text.replace(time_row, "|".join(cells[:4]) + "| 1.00 ms | 1.00 ms |"))
    assert script.main(["--check", "--readme", str(retimed)]) == 0  # a CPU measured time is the last run's
    remodelled = tmp_path / "remodelled.md"
    remodelled.write_text(text.replace(time_row, "| time | 1.0 us | 1.0 us |" + "|".join(cells[4:])))
    assert script.main(["--check", "--readme", str(remodelled)]) == 1  # the H200 model's time is the compiler's
    stale = tmp_path / "stale.md"
    first = launches.split("|")[2]  # the unfused model's launch count
    stale.write_text(text.replace(launches, launches.replace(f"|{first}|", f"| {int(first) + 1} |", 1)))
    assert stale.read_text() != text
    assert script.main(["--check", "--readme", str(stale)]) == 1
    assert "stale figures in measured-encoder" in capsys.readouterr().err
