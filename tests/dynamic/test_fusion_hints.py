"""Fusion on `?` dims: the groups do not depend on the hints (legality is
structural), the cost model's figures do, and `fusecc report` says which
sizes it assumed."""

from __future__ import annotations

from dynamic_programs import PROGRAMS, load

from fusecc.compiler.dims import DEFAULT_HINT, parse_hints, shape_hints
from fusecc.compiler.diagnostics import DiagnosticEngine
from fusecc.driver.reporting import report_data
from fusecc.tools.fusecc import main as fusecc_main


def groups_and_traffic(hints):
    module, _ = load("encoder")
    with shape_hints(hints):
        data = report_data(module, "cpu", DiagnosticEngine())
    return [(g["kind"], g["ops"]) for g in data["groups"]], data["after"]["bytes_moved"], data["shape_hints"]


def test_hints_change_the_costs_not_the_groups():
    small_groups, small_bytes, small_said = groups_and_traffic({"B": 1, "S": 8})
    large_groups, large_bytes, large_said = groups_and_traffic({"B": 8, "S": 512})
    assert small_groups == large_groups and len(small_groups) > 1
    assert large_bytes > small_bytes
    assert small_said == "B=1 (--shape-hint), S=8 (--shape-hint)"
    assert groups_and_traffic({})[2] == f"B={DEFAULT_HINT} (default), S={DEFAULT_HINT} (default)"


def test_fusecc_report_names_the_hints_it_used(capsys):
    assert fusecc_main(["report", str(PROGRAMS / "encoder.ir"), "--target", "cpu", "--shape-hint", "B=8,S=128"]) == 0
    assert "dynamic dims costed at: B=8 (--shape-hint), S=128 (--shape-hint)" in capsys.readouterr().out
    assert fusecc_main(["report", str(PROGRAMS / "encoder.ir"), "--target", "cpu", "--shape-hint", "B=0"]) == 1
    assert "--shape-hint: shape hint 'B=0' must read NAME=SIZE with a size of at least 1" in capsys.readouterr().err


def test_hint_text():
    assert parse_hints("B=8, S=128") == {"B": 8, "S": 128}
