"""plan-memory on schedules with `?` sizes (passes/memory/symbolic.py): offsets
and the arena are expressions of the dims; the independent checker proves
each plan at several sizes, and the planned program computes what the
unplanned one does at each of them."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fusecc.compiler import attributes as A
from fusecc.compiler import parse_module, print_op, verify
from fusecc.compiler.pass_manager import parse_pipeline, run_pipeline
from fusecc.compiler.shape_expr import parse_shape_expr
from fusecc.dialects import loop
from fusecc.passes.memory.check import check_plan
from fusecc.runtime.loop_interpreter import run_schedule

# Buffer kinds: (size expression, input name); one static kind mixes
# integer-offset slots in.
KINDS = {"n": "N", "nm": "N*M", "s": "24"}
BINDINGS = [{"N": 1, "M": 1}, {"N": 3, "M": 2}, {"N": 7, "M": 5}, {"N": 2, "M": 13}]


def memref(kind: str) -> str:
    return "memref<24xf32>" if kind == "s" else "memref<?xf32>"


def kernels() -> str:
    out = []
    for kind in KINDS:
        t = memref(kind)
        out.append(
            f"""
loop.kernel @add_{kind} {{
^bb0(%a: {t}, %b: {t}):
  %n = loop.dim %a {{axis = 0}} : ({t}) -> index
  %one = arith.constant {{value = 1.0}} : () -> f32
  loop.parallel %n {{upper = [-1], mapping = ["worker"]}} : index {{
  ^bb0(%i: index):
    %v = loop.load %a, %i : ({t}, index) -> f32
    %w = arith.add %v, %one : (f32, f32) -> f32
    loop.store %w, %b, %i : f32, {t}, index
    loop.yield
  }}
  loop.return
}}
loop.kernel @rev_{kind} {{
^bb0(%a: {t}, %b: {t}):
  %n = loop.dim %a {{axis = 0}} : ({t}) -> index
  %c1 = arith.constant {{value = 1 : index}} : () -> index
  %last = arith.sub %n, %c1 : (index, index) -> index
  loop.parallel %n {{upper = [-1], mapping = ["worker"]}} : index {{
  ^bb0(%i: index):
    %j = arith.sub %last, %i : (index, index) -> index
    %v = loop.load %a, %j : ({t}, index) -> f32
    loop.store %v, %b, %i : f32, {t}, index
    loop.yield
  }}
  loop.return
}}
loop.kernel @mul_{kind} {{
^bb0(%a: {t}, %b: {t}, %c: {t}):
  %n = loop.dim %a {{axis = 0}} : ({t}) -> index
  loop.parallel %n {{upper = [-1], mapping = ["worker"]}} : index {{
  ^bb0(%i: index):
    %v = loop.load %a, %i : ({t}, index) -> f32
    %w = loop.load %b, %i : ({t}, index) -> f32
    %s = arith.mul %v, %w : (f32, f32) -> f32
    loop.store %s, %c, %i : f32, {t}, index
    loop.yield
  }}
  loop.return
}}"""
        )
    return "\n".join(out)


LIBRARY = kernels()


@st.composite
def schedules(draw):
    """A random DAG of launches over `?`-sized and static intermediates, each
    buffer its own bytes (offsets summed symbolically); returns IR text."""
    values = {kind: [f"%x_{kind}"] for kind in KINDS}
    lines, offsets = [], []
    for step in range(draw(st.integers(1, 12))):
        kind = draw(st.sampled_from(list(KINDS)))
        op = draw(st.sampled_from(["add", "rev", "mul"]))
        pool = values[kind][-4:]
        args = [draw(st.sampled_from(pool)) for _ in range(2 if op == "mul" else 1)]
        name = f"%t{step}"
        sizes = "" if kind == "s" else f', sizes = ["{KINDS[kind]}"]'
        offset = " + ".join(offsets) or "0"
        lines.append(f'  {name} = loop.arena_view {{offset = "{offset}"{sizes}}} : () -> {memref(kind)}')
        offsets.append(f"(4*{KINDS[kind]} + 63)//64*64")
        types = ", ".join([memref(kind)] * (len(args) + 1))
        lines.append(f"  loop.launch @{op}_{kind}({', '.join(args + [name])}) : {types}")
        values[kind].append(name)
    outputs = [(kind, draw(st.sampled_from(values[kind]))) for kind in KINDS if kind == "n" or draw(st.booleans())]
    head = [f"%x_{kind}: {memref(kind)}" for kind in KINDS] + [f"%y{i}: {memref(kind)}" for i, (kind, _) in enumerate(outputs)]
    copies = [f"  loop.copy {src}, %y{i} : {memref(kind)}, {memref(kind)}" for i, (kind, src) in enumerate(outputs)]
    sizes = [["N"], ["N*M"], []] + [[KINDS[kind]] if kind != "s" else [] for kind, _ in outputs]
    # M is not an input size on its own: give the schedule an input of M elements.
    head.insert(3, "%m: memref<?xf32>")
    sizes.insert(3, ["M"])
    inputs = ", ".join(f'"{n}"' for n in ["x_n", "x_nm", "x_s", "m"])
    names = ", ".join(f'"y{i}"' for i in range(len(outputs)))
    arena = " + ".join(offsets)
    sizes_text = "[" + ", ".join("[" + ", ".join(f'"{s}"' for s in entry) + "]" for entry in sizes) + "]"
    return (
        LIBRARY
        + f"""
loop.schedule @main {{arena_size = "{arena}", inputs = [{inputs}], outputs = [{names}], arg_sizes = {sizes_text}}} {{
^bb0({", ".join(head)}):
"""
        + "\n".join(lines + copies)
        + "\n  loop.return\n}\n"
    )


def call_inputs(dims, rng):
    n, m = dims["N"], dims["M"]
    return [rng.standard_normal(size).astype(np.float32) for size in (n, n * m, 24, m)]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schedules())
def test_symbolic_plans_are_sound_and_compute_the_same_at_every_size(text):
    naive = parse_module(text)
    verify(naive)
    module = parse_module(text)
    run_pipeline(parse_pipeline("plan-memory{alignment=64}"), module)
    schedule = module.lookup("main")
    planned = parse_module(print_op(module))  # the plan survives printing
    verify(planned)
    rng = np.random.default_rng(0)
    for dims in BINDINGS:
        assert check_plan(schedule, 64, dims) == [], (dims, print_op(schedule))
        naive_bytes = parse_shape_expr(naive.lookup("main").arena_size).evaluate(dims)
        assert loop.evaluate_size(schedule.arena_size, dims) <= naive_bytes
        inputs = call_inputs(dims, rng)
        for a, b in zip(run_schedule(planned, "main", inputs), run_schedule(naive, "main", inputs), strict=True):
            np.testing.assert_array_equal(a, b)


CHAIN = LIBRARY + """
loop.schedule @main {inputs = ["x_n", "x_nm", "x_s", "m"], outputs = ["y"], arg_sizes = [["N"], ["N*M"], [], ["M"], ["N*M"]]} {
^bb0(%x_n: memref<?xf32>, %x_nm: memref<?xf32>, %x_s: memref<24xf32>, %m: memref<?xf32>, %y: memref<?xf32>):
  %s0 = loop.arena_view {offset = 0} : () -> memref<24xf32>
  loop.launch @add_s(%x_s, %s0) : memref<24xf32>, memref<24xf32>
  %t0 = loop.arena_view {offset = 0, sizes = ["N*M"]} : () -> memref<?xf32>
  loop.launch @add_nm(%x_nm, %t0) : memref<?xf32>, memref<?xf32>
  %t1 = loop.arena_view {offset = 0, sizes = ["N*M"]} : () -> memref<?xf32>
  loop.launch @add_nm(%t0, %t1) : memref<?xf32>, memref<?xf32>
  %t2 = loop.arena_view {offset = 0, sizes = ["N*M"]} : () -> memref<?xf32>
  loop.launch @rev_nm(%t1, %t2) : memref<?xf32>, memref<?xf32>
  %t3 = loop.arena_view {offset = 0, sizes = ["N*M"]} : () -> memref<?xf32>
  loop.launch @mul_nm(%t2, %t1, %t3) : memref<?xf32>, memref<?xf32>, memref<?xf32>
  loop.copy %t3, %y : memref<?xf32>, memref<?xf32>
  loop.return
}
"""


def test_a_chain_reuses_slots_in_place_and_by_size_with_static_slots_first():
    module = parse_module(CHAIN)
    run_pipeline(parse_pipeline("plan-memory{alignment=64}"), module)
    schedule = module.lookup("main")
    views = [op for op in schedule.body if isinstance(op, loop.ArenaViewOp)]
    # s0: a static slot at 0; t1 in place of t0 (same index, t0 dies); t2
    # a new slot (t1 lives on, and rev reads t1 elsewhere than it writes);
    # t3 in place of t2, its first operand, which dies at that launch.
    slot = "(4*(N*M) + 63)//64*64"
    assert [v.offset for v in views] == [0, 128, 128, f"{slot} + 128", f"{slot} + 128"]
    assert schedule.arena_size == f"{slot} + {slot} + 128"
    assert schedule.attr("plan.in_place") == 2
    for dims in BINDINGS:
        assert check_plan(schedule, 64, dims) == []


def test_the_checker_finds_overlaps_that_only_some_sizes_have():
    module = parse_module(CHAIN)
    run_pipeline(parse_pipeline("plan-memory{alignment=64}"), module)
    schedule = module.lookup("main")
    views = [op for op in schedule.body if isinstance(op, loop.ArenaViewOp)]
    # t2 placed after 16 elements of t1: right while N*M <= 16, wrong above.
    views[3].attributes["offset"] = A.StringAttr("128 + 64")
    assert check_plan(schedule, 64, {"N": 2, "M": 8}) == []
    problems = check_plan(schedule, 64, {"N": 3, "M": 7})
    assert any("overlap while both are live" in p for p in problems), problems


def test_static_schedules_keep_the_static_planner():
    from fusecc.passes.memory.symbolic import is_symbolic

    static = parse_module(
        LIBRARY.replace("memref<?xf32>", "memref<24xf32>")
        + """
loop.schedule @main {inputs = ["x"], outputs = ["y"]} {
^bb0(%x: memref<24xf32>, %y: memref<24xf32>):
  %t = loop.arena_view {offset = 0} : () -> memref<24xf32>
  loop.launch @add_s(%x, %t) : memref<24xf32>, memref<24xf32>
  loop.launch @add_s(%t, %y) : memref<24xf32>, memref<24xf32>
  loop.return
}
"""
    )
    assert not is_symbolic(static.lookup("main"))
    run_pipeline(parse_pipeline("plan-memory{alignment=64}"), static)
    assert static.lookup("main").arena_size == 128
    assert "plan.naive_bytes" in static.lookup("main").attributes


@pytest.mark.parametrize("dims", BINDINGS)
def test_the_cpu_runs_a_symbolic_plan(dims):
    from fusecc.runtime.cpu import CompiledProgram

    module = parse_module(CHAIN)
    run_pipeline(parse_pipeline("plan-memory{alignment=64}"), module)
    rng = np.random.default_rng(1)
    inputs = call_inputs(dims, rng)
    t1 = inputs[1] + np.float32(1) + np.float32(1)
    expected = t1[::-1] * t1
    (interpreted,) = run_schedule(module, "main", inputs)
    (got,) = CompiledProgram(module).run(inputs)
    np.testing.assert_array_equal(interpreted, expected)
    np.testing.assert_array_equal(got, expected)
