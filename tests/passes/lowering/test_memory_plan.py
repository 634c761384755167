"""plan-memory: liveness, best fit, in place, and the independent checker."""

from __future__ import annotations

import numpy as np
import pytest
from harness import check_lowering, lower, parse
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fusecc.compiler import parse_module, print_op, verify
from fusecc.compiler.pass_manager import parse_pipeline, run_pipeline
from fusecc.dialects import loop
from fusecc.passes.memory.check import check_plan
from fusecc.passes.memory.plan import FreeList, in_place_pairs, plan_schedule
from fusecc.runtime.loop_interpreter import run_schedule

# --------------------------------------------------------------------------- in place

KERNELS = """
loop.kernel @same_index {
^bb0(%a: memref<64xf32>, %b: memref<64xf32>):
  loop.parallel {upper = [64], mapping = ["worker"]} {
  ^bb0(%i: index):
    %v = loop.load %a, %i : (memref<64xf32>, index) -> f32
    %w = arith.add %v, %v : (f32, f32) -> f32
    loop.store %w, %b, %i : f32, memref<64xf32>, index
    loop.yield
  }
  loop.return
}
loop.kernel @reversed {
^bb0(%a: memref<64xf32>, %b: memref<64xf32>):
  %c63 = arith.constant {value = 63 : index} : () -> index
  loop.parallel {upper = [64], mapping = ["worker"]} {
  ^bb0(%i: index):
    %j = arith.sub %c63, %i : (index, index) -> index
    %v = loop.load %a, %j : (memref<64xf32>, index) -> f32
    loop.store %v, %b, %i : f32, memref<64xf32>, index
    loop.yield
  }
  loop.return
}
loop.kernel @store_first {
^bb0(%a: memref<64xf32>, %b: memref<64xf32>, %c: memref<64xf32>):
  loop.parallel {upper = [64], mapping = ["worker"]} {
  ^bb0(%i: index):
    %z = arith.constant {value = 0.0} : () -> f32
    loop.store %z, %b, %i : f32, memref<64xf32>, index
    %v = loop.load %a, %i : (memref<64xf32>, index) -> f32
    loop.store %v, %c, %i : f32, memref<64xf32>, index
    loop.yield
  }
  loop.return
}
loop.kernel @invariant_index {
^bb0(%a: memref<64xf32>, %b: memref<64xf32>):
  %c0 = arith.constant {value = 0 : index} : () -> index
  %c1 = arith.constant {value = 1 : index} : () -> index
  %c4 = arith.constant {value = 4 : index} : () -> index
  loop.for %c0, %c4, %c1 : index, index, index {
  ^bb0(%k: index):
    %v = loop.load %a, %c0 : (memref<64xf32>, index) -> f32
    %w = arith.add %v, %v : (f32, f32) -> f32
    loop.store %w, %b, %c0 : f32, memref<64xf32>, index
    loop.yield
  }
  loop.return
}
loop.kernel @other_shape {
^bb0(%a: memref<8x8xf32>, %b: memref<64xf32>):
  %c8 = arith.constant {value = 8 : index} : () -> index
  loop.parallel {upper = [64], mapping = ["worker"]} {
  ^bb0(%i: index):
    %r = arith.div %i, %c8 : (index, index) -> index
    %c = arith.rem %i, %c8 : (index, index) -> index
    %v = loop.load %a, %r, %c : (memref<8x8xf32>, index, index) -> f32
    loop.store %v, %b, %i : f32, memref<64xf32>, index
    loop.yield
  }
  loop.return
}
"""


def test_in_place_pairs():
    module = parse(KERNELS)
    found = {name: in_place_pairs(module.lookup(name)) for name in ("same_index", "reversed", "store_first", "invariant_index", "other_shape")}
    assert found == {
        "same_index": {(1, 0)},
        "reversed": set(),  # reads elements other iterations overwrite
        "store_first": {(2, 0)},  # b is written before a is read; c after
        "invariant_index": set(),  # every iteration rewrites the element it reads
        "other_shape": set(),
    }


def test_generated_elementwise_kernels_allow_in_place_and_row_kernels_do_not():
    module = parse(
        """
func.func @main(%x: tensor<8x48xf32>) -> tensor<8x48xf32> {
  %0 = tensor.exp %x : (tensor<8x48xf32>) -> tensor<8x48xf32>
  %1 = tensor.softmax %0 : (tensor<8x48xf32>) -> tensor<8x48xf32>
  %2 = tensor.neg %1 : (tensor<8x48xf32>) -> tensor<8x48xf32>
  func.return %2 : tensor<8x48xf32>
}
"""
    )
    for target in ("h200", "cpu"):
        lowered = lower(module, target, plan=False)
        pairs = {name: in_place_pairs(lowered.lookup(name)) for name in ("fused_0_elementwise", "fused_1_reduction", "fused_2_elementwise")}
        assert pairs == {"fused_0_elementwise": {(1, 0)}, "fused_1_reduction": set(), "fused_2_elementwise": {(1, 0)}}


# --------------------------------------------------------------------------- planning

CHAIN = """
func.func @main(%x: tensor<8x48xf32>, %b: tensor<48xf32>) -> tensor<8x48xf32> {
  %0 = tensor.add %x, %b : (tensor<8x48xf32>, tensor<48xf32>) -> tensor<8x48xf32>
  %1 = tensor.exp %0 : (tensor<8x48xf32>) -> tensor<8x48xf32>
  %2 = tensor.softmax %1 : (tensor<8x48xf32>) -> tensor<8x48xf32>
  %3 = tensor.mul %2, %0 : (tensor<8x48xf32>, tensor<8x48xf32>) -> tensor<8x48xf32>
  %4 = tensor.tanh %3 : (tensor<8x48xf32>) -> tensor<8x48xf32>
  %5 = tensor.reshape %4 : (tensor<8x48xf32>) -> tensor<384xf32>
  %6 = tensor.neg %5 : (tensor<384xf32>) -> tensor<384xf32>
  %7 = tensor.reshape %6 : (tensor<384xf32>) -> tensor<8x48xf32>
  %8 = tensor.reduce_sum %7 {axes = [0]} : (tensor<8x48xf32>) -> tensor<48xf32>
  %9 = tensor.add %7, %8 : (tensor<8x48xf32>, tensor<48xf32>) -> tensor<8x48xf32>
  func.return %9 : tensor<8x48xf32>
}
"""


@pytest.mark.parametrize("target, alignment", [("h200", 256), ("cpu", 64)])
def test_chain_reuses_bytes_and_works_in_place(target, alignment):
    lowered = check_lowering(parse(CHAIN), target)
    schedule = lowered.lookup("main")
    views = [op for op in schedule.body if isinstance(op, loop.ArenaViewOp)]
    assert all(v.offset % alignment == 0 for v in views)
    assert len(views) == 7
    # %0 lives until launch 3; at most two more buffers are live at once
    assert schedule.arena_size == 3 * 1536
    assert schedule.attributes["plan.naive_bytes"].value == 6 * 1536 + (256 if target == "h200" else 192)
    assert schedule.attributes["plan.in_place"].value == 3  # %3 into %2, %4 into %3, %6 into %5


def test_free_list_is_best_fit_and_coalesces():
    free = FreeList()
    a, b, c, d = (free.allocate(n) for n in (64, 128, 64, 256))
    assert (a, b, c, d) == (0, 64, 192, 256) and free.top == 512
    free.free(b, 128)
    free.free(d, 256)
    assert free.allocate(64) == 64  # the 128-byte gap fits best, not the 256 at the top
    free.free(a, 64)
    assert free.gaps == [(0, 64), (128, 64), (256, 256)]
    free.free(64, 64)
    assert free.gaps == [(0, 192), (256, 256)]
    assert free.allocate(512) == 256 and free.top == 768  # extends the top gap


# --------------------------------------------------------------------------- the checker catches bad plans


def planned(text: str):
    module = parse(text)
    run_pipeline(parse_pipeline("plan-memory"), module)
    return module, module.lookup("main")


SCHEDULE = KERNELS + """
loop.schedule @main {arena_size = 1280, inputs = ["x"], outputs = ["y"]} {
^bb0(%x: memref<64xf32>, %y: memref<64xf32>):
  %t0 = loop.arena_view {offset = 0} : () -> memref<64xf32>
  loop.launch @same_index(%x, %t0) : memref<64xf32>, memref<64xf32>
  %t1 = loop.arena_view {offset = 256} : () -> memref<64xf32>
  loop.launch @reversed(%t0, %t1) : memref<64xf32>, memref<64xf32>
  %t2 = loop.arena_view {offset = 512} : () -> memref<64xf32>
  loop.launch @same_index(%t1, %t2) : memref<64xf32>, memref<64xf32>
  %t3 = loop.arena_view {offset = 768} : () -> memref<64xf32>
  loop.launch @reversed(%t2, %t3) : memref<64xf32>, memref<64xf32>
  %v = loop.view %t3 : (memref<64xf32>) -> memref<8x8xf32>
  %t4 = loop.arena_view {offset = 1024} : () -> memref<64xf32>
  loop.launch @other_shape(%v, %t4) : memref<8x8xf32>, memref<64xf32>
  loop.launch @same_index(%t4, %y) : memref<64xf32>, memref<64xf32>
  loop.return
}
"""


def test_checker_accepts_the_plan_and_rejects_broken_ones():
    module, schedule = planned(SCHEDULE)
    assert check_plan(schedule, 64) == []
    views = [op for op in schedule.body if isinstance(op, loop.ArenaViewOp)]
    assert [v.offset for v in views] == [0, 256, 256, 0, 256]  # t2 in place of t1
    assert schedule.arena_size == 512
    x = np.arange(64, dtype=np.float32)
    (y,) = run_schedule(module, "main", [x])
    np.testing.assert_array_equal(y, ((x * 2)[::-1] * 2)[::-1] * 2)

    from fusecc.compiler import attributes as A

    views[1].attributes["offset"] = A.IntegerAttr(0)  # t1 over t0, which it reads
    assert any("overlap while both are live" in p for p in check_plan(schedule, 64))
    views[1].attributes["offset"] = A.IntegerAttr(256)
    views[3].attributes["offset"] = A.IntegerAttr(256)  # t3 in place of t2 through a reversing kernel
    assert any("overlap" in p for p in check_plan(schedule, 64))
    views[3].attributes["offset"] = A.IntegerAttr(32)
    assert any("not aligned" in p for p in check_plan(schedule, 64))
    views[3].attributes["offset"] = A.IntegerAttr(512)
    assert any("leaves the arena" in p for p in check_plan(schedule, 64))


# --------------------------------------------------------------------------- random schedules

SIZES = (16, 24, 40)


def kernel_library() -> str:
    out = []
    for n in SIZES:
        out.append(
            f"""
loop.kernel @add_{n} {{
^bb0(%a: memref<{n}xf32>, %b: memref<{n}xf32>):
  %one = arith.constant {{value = 1.0}} : () -> f32
  loop.parallel {{upper = [{n}], mapping = ["worker"]}} {{
  ^bb0(%i: index):
    %v = loop.load %a, %i : (memref<{n}xf32>, index) -> f32
    %w = arith.add %v, %one : (f32, f32) -> f32
    loop.store %w, %b, %i : f32, memref<{n}xf32>, index
    loop.yield
  }}
  loop.return
}}
loop.kernel @rev_{n} {{
^bb0(%a: memref<{n}xf32>, %b: memref<{n}xf32>):
  %last = arith.constant {{value = {n - 1} : index}} : () -> index
  loop.parallel {{upper = [{n}], mapping = ["worker"]}} {{
  ^bb0(%i: index):
    %j = arith.sub %last, %i : (index, index) -> index
    %v = loop.load %a, %j : (memref<{n}xf32>, index) -> f32
    loop.store %v, %b, %i : f32, memref<{n}xf32>, index
    loop.yield
  }}
  loop.return
}}
loop.kernel @sum_{n} {{
^bb0(%a: memref<{n}xf32>, %b: memref<{n}xf32>, %c: memref<{n}xf32>):
  loop.parallel {{upper = [{n}], mapping = ["worker"]}} {{
  ^bb0(%i: index):
    %v = loop.load %a, %i : (memref<{n}xf32>, index) -> f32
    %w = loop.load %b, %i : (memref<{n}xf32>, index) -> f32
    %s = arith.mul %v, %w : (f32, f32) -> f32
    loop.store %s, %c, %i : f32, memref<{n}xf32>, index
    loop.yield
  }}
  loop.return
}}"""
        )
    return "\n".join(out)


LIBRARY = kernel_library()


@st.composite
def schedules(draw):
    """A random DAG of launches over intermediates of three sizes; returns IR text."""
    values = {n: [f"%x{n}"] for n in SIZES}
    lines, offset = [], 0
    for step in range(draw(st.integers(1, 14))):
        n = draw(st.sampled_from(SIZES))
        kind = draw(st.sampled_from(["add", "rev", "sum"]))
        pool = values[n][-4:]  # recent values, so lifetimes end
        args = [draw(st.sampled_from(pool)) for _ in range(2 if kind == "sum" else 1)]
        name = f"%t{step}"
        lines.append(f"  {name} = loop.arena_view {{offset = {offset}}} : () -> memref<{n}xf32>")
        offset += -(-n * 4 // 64) * 64
        types = ", ".join([f"memref<{n}xf32>"] * (len(args) + 1))
        lines.append(f"  loop.launch @{kind}_{n}({', '.join(args + [name])}) : {types}")
        values[n].append(name)
    outputs = []
    for n in SIZES:
        if draw(st.booleans()) or n == SIZES[0]:
            source = draw(st.sampled_from(values[n]))
            outputs.append((n, source))
    head_types = ", ".join([f"%x{n}: memref<{n}xf32>" for n in SIZES] + [f"%y{i}: memref<{n}xf32>" for i, (n, _) in enumerate(outputs)])
    copies = [f"  loop.copy {src}, %y{i} : memref<{n}xf32>, memref<{n}xf32>" for i, (n, src) in enumerate(outputs)]
    names = ", ".join(f'"y{i}"' for i in range(len(outputs)))
    return (
        LIBRARY
        + f"""
loop.schedule @main {{arena_size = {offset}, inputs = ["x16", "x24", "x40"], outputs = [{names}]}} {{
^bb0({head_types}):
"""
        + "\n".join(lines + copies)
        + "\n  loop.return\n}\n"
    )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schedules())
def test_random_schedules_plan_soundly_and_compute_the_same(text):
    naive = parse_module(text)
    verify(naive)
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal(n).astype(np.float32) for n in SIZES]
    expected = run_schedule(naive, "main", inputs)
    module = parse_module(text)
    schedule = module.lookup("main")
    plan = plan_schedule(schedule, 64)
    run_pipeline(parse_pipeline("plan-memory{alignment=64}"), module)
    assert check_plan(schedule, 64) == [], print_op(schedule)
    assert schedule.arena_size == plan.arena_size <= plan.naive_size == naive.lookup("main").arena_size
    # the planned program computes the same, though buffers now share bytes
    for a, b in zip(run_schedule(parse_module(print_op(module)), "main", inputs), expected, strict=True):
        np.testing.assert_array_equal(a, b)
