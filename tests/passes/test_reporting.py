"""`fusecc report` and `fusecc explain`: the seed's table 1.3 for a program,
from the cost model, and every decision as a remark."""

from __future__ import annotations

import json
import pathlib

from fusecc.compiler.diagnostics import DiagnosticEngine
from fusecc.compiler.parser import parse_module
from fusecc.driver import reporting
from fusecc.tools import fusecc

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"


def module_of(name: str):
    return parse_module((EXAMPLES / name).read_text(), name)


def test_report_data_for_the_encoder_block():
    data = reporting.report_data(module_of("encoder_block.ir"), "h200", DiagnosticEngine())
    before, after = data["before"], data["after"]
    assert before["kernels"] == 30  # one per tensor op
    assert after["kernels"] == len(data["groups"]) == 7
    assert after["bytes_moved"] < before["bytes_moved"]
    assert after["intermediate_bytes"] < before["intermediate_bytes"]
    assert after["time_seconds"] < before["time_seconds"]
    assert [g["kind"] for g in data["groups"]] == ["matmul", "attention", "matmul", "reduction", "matmul", "matmul", "reduction"]
    assert data["groups"][2]["names"] == ["%o_proj", "%o_bias", "%residual1"]
    assert data["unfused"] == []


def test_an_unfused_chain_is_listed_with_its_reason():
    data = reporting.report_data(module_of("llama_mlp.ir"), "h200", DiagnosticEngine())
    assert data["unfused"] == [
        {
            "producer": "%gated",
            "producer_group": 2,
            "consumer": "%down",
            "consumer_group": 3,
            "reason": "tensor.sigmoid is too expensive to recompute per tile",
        }
    ]


def test_the_cost_model_target_changes_the_figures():
    h200 = reporting.report_data(module_of("mlp.ir"), "h200", DiagnosticEngine())
    cpu = reporting.report_data(module_of("mlp.ir"), "cpu", DiagnosticEngine())
    assert h200["after"]["bytes_moved"] == cpu["after"]["bytes_moved"]
    assert cpu["after"]["time_seconds"] > 10 * h200["after"]["time_seconds"]


def test_the_text_report_has_the_table_the_groups_and_the_chains(capsys):
    assert fusecc.main(["report", str(EXAMPLES / "attention.ir")]) == 0
    out = capsys.readouterr().out
    assert "kernel launches                   10           2   5.0x fewer" in out
    assert "intermediate memory" in out and "all gone" in out
    assert "attention" in out and "unfused chains:" in out


def test_the_json_report_round_trips(capsys):
    assert fusecc.main(["report", str(EXAMPLES / "layernorm4.ir"), "--json", "--gpu", "a100"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["target"] == "a100" and data["arch"] == "sm_80"
    assert data["before"]["kernels"] == 4 and data["after"]["kernels"] == 1
    assert data["groups"][0]["kind"] == "horizontal"


def test_explain_prints_a_remark_per_decision_and_a_summary(capsys):
    assert fusecc.main(["explain", str(EXAMPLES / "mlp.ir")]) == 0
    out = capsys.readouterr().out
    assert out.count("remark: fused into group 0 (matmul)") == 3
    assert out.count("remark: fused into group 1 (matmul)") == 2
    assert out.rstrip().endswith("5 ops in 2 groups on h200")


def test_explain_of_a_missing_file_is_a_usage_error(capsys):
    assert fusecc.main(["explain", "no/such/file.ir"]) == 1
    assert "no such file" in capsys.readouterr().err


def test_the_readme_shows_the_current_report():
    readme = (EXAMPLES.parent / "README.md").read_text()
    block = readme.split("\n## Fusion\n", 1)[1].split("```\n", 2)[2].split("```", 1)[0]
    expected = reporting.report(module_of("encoder_block_ops.ir"), "h200")
    assert block == expected, "regenerate the README block with: fusecc report examples/encoder_block_ops.ir"


def test_show_source_prints_one_kernel_or_one_group(capsys):
    mlp = str(EXAMPLES / "mlp.ir")
    assert fusecc.main(["report", mlp, "--show-source", "fused_1_matmul", "--level", "loop"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("loop.kernel @fused_1_matmul {kind = \"matmul\", group = 1, tile.registers =") and out.count("loop.kernel") == 1
    assert fusecc.main(["report", mlp, "--show-source", "0", "--level", "loop", "--target", "cpu"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("loop.kernel @fused_0_matmul") and out.count("loop.kernel") == 1


def test_show_source_says_what_is_wrong(capsys):
    mlp = str(EXAMPLES / "mlp.ir")
    cases = [
        (["--show-source", "fused_9_matmul"], "no kernel 'fused_9_matmul' in the fused program for h200 (kernels: fused_0_matmul, fused_1_matmul, fused_1_matmul_reduce; or give a group id)"),
        (["--show-source", "0", "--level", "llvm", "--target", "cuda", "--gpu", "a100"], "LLVM IR is generated for the CPU; use --target cpu (not a100)"),
        (["--show-source", "0", "--level", "cuda", "--target", "cpu"], "CUDA C is generated for a GPU; use --target cuda (tuned with --gpu h200 or a100)"),
        (["--show-source", "0", "--measure"], "--show-source prints one kernel's source; run it without --measure and --json"),
    ]
    for options, message in cases:
        assert fusecc.main(["report", mlp, *options]) == 1
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err


def test_the_unfused_report_has_one_group_per_op():
    data = reporting.report_data(module_of("encoder_block.ir"), "h200", DiagnosticEngine(), enabled=())
    assert data["after"]["kernels"] == data["before"]["kernels"] == 30
    assert all(len(g["ops"]) == 1 for g in data["groups"])
    assert data["after"]["bytes_moved"] == data["before"]["bytes_moved"]
