"""Lower one hand-written fusion group with its kernel template, without the
lowering driver: the template's kernels plus a schedule that launches them
on the function's arguments. Then run both levels and compare."""

from __future__ import annotations

import numpy as np

from fusecc.compiler import attributes as A
from fusecc.compiler import parse_module, print_op, verify
from fusecc.compiler.builder import Builder, InsertionPoint
from fusecc.passes.backends.hardware import Hardware
from fusecc.compiler.ir import Block, Region
from fusecc.compiler.types import FunctionType, MemRefType, TensorType
from fusecc.dialects import builtin, func, fusion, loop
from fusecc.dialects.fusion import GroupOp
from fusecc.passes.lowering.interface import TEMPLATES, memref_for
from fusecc.runtime.loop_interpreter import run_schedule
from fusecc.runtime.reference import evaluate, random_input


def the_group(module) -> GroupOp:
    groups = [op for op in module.walk() if isinstance(op, GroupOp)]
    assert len(groups) == 1, f"expected one fusion.group, found {len(groups)}"
    return groups[0]


def group_module(kind: str, arg_types, body, attrs=None):
    """`@main(args)` whose body is one group over its arguments: `body(b, args)`
    builds the group's ops with `b` and returns the values it yields."""
    inner = Block(arg_types)
    b = Builder(InsertionPoint.at_end(inner))
    yielded = list(body(b, list(inner.args)))
    b.create(fusion.YieldOp, yielded)
    result_types = [v.type for v in yielded]
    main = func.FuncOp.build("main", FunctionType(arg_types, result_types))
    outer = Builder(InsertionPoint.at_end(main.body))
    group = outer.insert(GroupOp.create(list(main.body.args), {"kind": kind, **(attrs or {})}, result_types, [Region([inner])]))
    outer.create(func.ReturnOp, list(group.results))
    module = builtin.ModuleOp.build([main])
    verify(module)
    return parse_module(print_op(module))


def memrefs(module) -> list[MemRefType]:
    """Every buffer type in a lowered module: kernel arguments and allocations."""
    found = []
    for op in module.walk():
        found += [r.type for r in op.results if isinstance(r.type, MemRefType)]
        for region in op.regions:
            for block in region.blocks:
                found += [a.type for a in block.args if isinstance(a.type, MemRefType)]
    return found


def lower_group(module, hardware: Hardware):
    """The loop-level module for a `@main` whose body is one group on its arguments."""
    import fusecc.passes.lowering.attention  # noqa: F401  (registers the templates)
    import fusecc.passes.lowering.matmul  # noqa: F401

    func = module.lookup("main")
    group = the_group(module)
    lowered = TEMPLATES[group.attr("kind")](group, hardware)
    args = list(func.body.args)
    schedule = loop.ScheduleOp.build(
        "main",
        [memref_for(a.type) for a in args],
        [memref_for(r.type) for r in group.results],
        [f"arg{i}" for i in range(len(args))],
        [f"result{i}" for i in range(len(group.results))],
    )
    b = Builder(InsertionPoint.at_end(schedule.body))
    scratch, arena = [], 0  # template scratch buffers: arena views, one after another
    for t in lowered.scratch:
        scratch.append(b.insert(loop.ArenaViewOp([], [t], {"offset": A.IntegerAttr(arena)})).result)
        arena += -(-t.byte_size // 64) * 64
    schedule.attributes["arena_size"] = A.IntegerAttr(arena)
    for launch in lowered.launches:
        operands = []
        for ref in launch.args:
            if ref.source == "input":
                operands.append(schedule.input_args[args.index(group.operands[ref.index])])
            elif ref.source == "scratch":
                operands.append(scratch[ref.index])
            else:
                operands.append(schedule.output_args[ref.index])
        b.create(loop.LaunchOp, operands, {"kernel": A.SymbolRefAttr(launch.kernel.sym_name)})
    b.create(loop.ReturnOp)
    result = builtin.ModuleOp.build([launch.kernel for launch in lowered.launches] + [schedule])
    verify(result)
    return parse_module(print_op(result))  # and it round-trips


def assert_lowering_matches(source, hardware: Hardware, seed: int = 0, rtol: float = 1e-5, atol: float = 1e-5):
    """The lowered group gives the reference's numbers on seeded inputs."""
    module = parse_module(source) if isinstance(source, str) else source
    verify(module)
    lowered = lower_group(module, hardware)
    rng = np.random.default_rng(seed)
    inputs = [random_input(a.type, rng) for a in module.lookup("main").body.args]
    got = run_schedule(lowered, "main", inputs)
    expected = evaluate(module, "main", inputs)
    assert len(got) == len(expected)
    for g, e in zip(got, expected, strict=True):
        assert g.dtype == e.dtype and g.shape == e.shape
        np.testing.assert_allclose(g.astype(np.float64), e.astype(np.float64), rtol=rtol, atol=atol)
    return lowered
