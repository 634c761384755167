"""The tiling level's geometry agrees with the lowering it predicts.

`geometry.row_analysis` gives the shapes and levels of the statistics a row
computation reduces, without the lowering's formulas (the tiler and the
cost model may not import the lowering); the lowering's
`reduction_analysis.analyse_ops` is the one that builds them. They must
agree on every program, or the tiles would be chosen for a kernel other
than the one the lowering builds.
"""

from __future__ import annotations

import pathlib

import pytest
from program_gen import random_program

from fusecc.compiler.parser import parse_module
from fusecc.compiler.printer import print_op
from fusecc.compiler.pass_manager import PassContext, parse_pipeline, run_pipeline
from fusecc.dialects.fusion import GroupOp
from fusecc.passes.lowering.reduction_analysis import analyse_ops
from fusecc.passes.lowering.scalar_emitter import LoweringError
from fusecc.passes.tiling.geometry import STAT_SHAPES, row_analysis

EXAMPLES = sorted((pathlib.Path(__file__).parents[3] / "examples").glob("*.ir"))


def shapes_by_level(analysis) -> list[list[tuple[tuple[int, ...], tuple[int, ...]]]] | None:
    if analysis is None:
        return None
    return [[(tuple(s.kept_shape), tuple(s.reduced_shape)) for s in level] for level in analysis.levels]


def lowering_view(ops):
    try:
        return shapes_by_level(analyse_ops(ops))
    except LoweringError:
        return None


def bodies(module):
    """Every fusion group's body, and every function body without its return."""
    for op in module.walk():
        if isinstance(op, GroupOp):
            yield op.body_ops()
        elif op.name == "func.func":
            yield [o for o in op.body if o.name != "func.return"]


def check_module(module) -> int:
    checked = 0
    for ops in bodies(module):
        assert shapes_by_level(row_analysis(ops)) == lowering_view(ops), [o.name for o in ops]
        checked += any(o.name in STAT_SHAPES for o in ops)
    return checked


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_row_geometry_matches_the_lowering_on_the_examples(path):
    module = parse_module(path.read_text(), str(path))
    run_pipeline(parse_pipeline("inline,canonicalize,cse,fuse{target=h200}"), module, PassContext(target="h200"))
    check_module(module)


def test_row_geometry_matches_the_lowering_on_random_programs():
    checked = 0
    for seed in range(40):
        program = random_program(seed, num_ops=30, return_all=True)
        checked += check_module(program.module)
        module = parse_module(print_op(program.module))
        run_pipeline(parse_pipeline("fuse{target=cpu}"), module, PassContext(target="cpu"))
        checked += check_module(module)
    assert checked >= 40  # the programs do hold reductions, composites and matmuls


def test_a_body_outside_the_tensor_dialect_is_no_row_computation():
    module = parse_module(EXAMPLES[0].read_text())
    func = next(op for op in module.walk() if op.name == "func.func")
    assert row_analysis(list(func.body)) is None  # func.return
    assert lowering_view(list(func.body)) is None
