"""The CPU benchmarks run and report what they promise, on small inputs:
cpu_bench.py gives every contender's times, checked against numpy, and the
cold compile time of fusecc's contenders; compare_revisions.py measures
parse and compile in fresh processes and tabulates both checkouts.
parse_scaling.py measures each run in a fresh process. Timings are never
asserted, only that they are there."""

from __future__ import annotations

import math
import re
import sys

import numpy as np

import compare_revisions
import cpu_bench
import cpu_kernels as K
import fma_peak
import parse_scaling


def test_cpu_bench_reports_run_and_cold_compile_times():
    rows_, cols = 8, 256
    x = np.random.default_rng(0).standard_normal((rows_, cols), dtype=np.float32)
    t = f"tensor<{rows_}x{cols}xf32>"
    pattern = cpu_bench.Pattern(
        "softmax", f"[{rows_},{cols}]", [x], lambda: cpu_bench.np_softmax(x),
        lambda: (K.softmax(rows_, cols, partials=32), [x]),
        cpu_bench.tensor_ir(f"%x: {t}", f"  %y = tensor.softmax %x : ({t}) -> {t}\n  func.return %y : {t}", t),
        bytes=2 * x.nbytes,
    )
    rows = cpu_bench.bench(pattern, reps=2)
    by_name = {name: (wall, cpu, compile_s) for name, wall, cpu, compile_s, _ in rows}
    assert {"fusecc loops", "fusecc", "numpy"} <= set(by_name)
    assert all(wall > 0 for wall, _, _ in by_name.values())
    assert by_name["fusecc"][2] > 0 and by_name["fusecc loops"][2] > 0  # cold compiles take time
    assert math.isnan(by_name["numpy"][2])
    table = cpu_bench.report(pattern, rows)
    (fusecc_line,) = [line for line in table.splitlines() if "| fusecc |" in line]
    assert re.search(r"\| \d+ \| [\d.]+× \|", fusecc_line), fusecc_line  # compile ms, then numpy/this


def test_compare_revisions_tabulates_parse_and_compile_of_both_checkouts(capsys):
    assert compare_revisions.main(["--before", sys.executable, "--rounds", "1", "--what", "parse,compile", "--parse-ops", "200"]) == 0
    out = capsys.readouterr().out
    rows = {line.split(" | ")[0].strip("| "): line for line in out.splitlines() if line.startswith("| ") and "---" not in line}
    for key in ("parse", "parse+verify+print", "compile total", "compile passes", "compile LLVM"):
        assert re.fullmatch(rf"\| {re.escape(key)} \| +[\d.]+ \[[\d.]+-[\d.]+\] \| +[\d.]+ \[[\d.]+-[\d.]+\] \| [\d.]+ \|", rows[key]), rows[key]


def test_parse_scaling_measures_in_a_fresh_process(tmp_path):
    path = tmp_path / "program.ir"
    path.write_text(parse_scaling.program(200))
    measured = parse_scaling.measure_cold(str(path))
    assert measured["ops"] > 150 and measured["parse"] > 0


def test_fma_peak_counts_two_flops_per_lane_of_each_fma(capsys):
    lanes, rates = fma_peak.measure(chains=4, repeats=2, iterations=20_000)
    assert lanes in (8, 16) and len(rates) == 2 and all(r > 0 for r in rates)
    text = fma_peak.kernel_text(lanes, 4)
    assert text.count("@llvm.fma.") == 4 + 1  # four chains and the declaration
    assert fma_peak.main(["--chains", "4", "--repeats", "1", "--iterations", "1000"]) == 0
    assert "GFLOP/s" in capsys.readouterr().out
