"""One rule for pass options: a pass's option wins, else the context's value
(`fusecc-opt --target`), and every pass resolves `target` that way."""

from __future__ import annotations

import pathlib

import pytest

from fusecc.compiler.parser import parse_module
from fusecc.compiler.pass_manager import PassContext, PipelineError, parse_pipeline, run_pipeline
from fusecc.compiler.printer import print_op
from fusecc.tools import opt

MLP = pathlib.Path(__file__).parents[2] / "examples" / "mlp.ir"
GPU_AXES = ("block.x", "thread.x")


def opt_output(argv, capsys) -> str:
    assert opt.main(argv) == 0
    return capsys.readouterr().out


def test_target_cpu_lowers_to_worker_loops(capsys):
    """Issue 9: `tile` and `lower-to-loops` once defaulted to h200 and
    ignored --target, so this pipeline emitted GPU kernels."""
    text = opt_output([str(MLP), "--target", "cpu", "-p", "inline,fuse,tile,lower-to-loops"], capsys)
    assert '"worker"' in text
    assert not any(axis in text for axis in GPU_AXES)


def test_the_default_gpu_target_still_lowers_to_blocks_and_threads(capsys):
    text = opt_output([str(MLP), "-p", "inline,fuse,tile,lower-to-loops"], capsys)
    assert all(axis in text for axis in GPU_AXES) and '"worker"' not in text


def lowered(pipeline: str, context_target: str) -> str:
    module = parse_module(MLP.read_text())
    run_pipeline(parse_pipeline(pipeline), module, PassContext(target=context_target))
    return print_op(module)


def test_a_pass_option_wins_over_the_context():
    assert any(axis in lowered("inline,fuse,tile,lower-to-loops{target=h200}", "cpu") for axis in GPU_AXES)
    assert '"worker"' in lowered("inline,fuse,tile,lower-to-loops{target=cpu}", "h200")
    assert "tile.threads" in lowered("inline,fuse,tile{target=h200}", "cpu")  # GPU tiles have threads
    assert "tile.threads" not in lowered("inline,fuse,tile", "cpu")


@pytest.mark.parametrize("pass_name", ["fuse", "tile", "lower-to-loops"])
def test_every_pass_resolves_target_by_the_same_rule(pass_name):
    before = {"fuse": "inline", "tile": "inline,fuse{target=cpu}", "lower-to-loops": "inline,fuse{target=cpu},tile{target=cpu}"}[pass_name]
    with pytest.raises(Exception, match=f"pass '{pass_name}': unknown hardware 'tpu'"):
        lowered(f"{before},{pass_name}{{target=tpu}}", "cpu")  # the option is read...
    with pytest.raises(Exception, match=f"pass '{pass_name}': unknown hardware 'tpu'"):
        lowered(f"{before},{pass_name}", "tpu")  # ...and without it, the context's value
    lowered(f"{before},{pass_name}{{target=cpu}}", "tpu")  # the option wins over a bad context


def test_fuse_only_runs_the_listed_phases():
    def groups(pipeline: str) -> list[str]:
        module = parse_module(MLP.read_text())
        run_pipeline(parse_pipeline(pipeline), module, PassContext(target="h200"))
        return [op.attr("kind") for op in module.walk() if op.name == "fusion.group"]

    assert groups("inline,fuse{only=matmul}") == ["matmul", "matmul"]  # epilogues join; nothing else is grouped
    assert groups("inline,fuse{only=elementwise}") == ["elementwise"]  # bias+gelu; the lone last bias add stays bare
    assert groups("inline,fuse{only=matmul,elementwise}") == groups("inline,fuse{only=matmul},fuse{only=elementwise}")
    with pytest.raises(PipelineError, match="unknown phase 'fusion'"):
        parse_pipeline("fuse{only=fusion}")
