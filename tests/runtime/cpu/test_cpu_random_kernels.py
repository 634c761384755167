"""Random CPU kernels: a worker loop over rows, a vector loop over columns,
and a random expression over loads at lane-linear, uniform, reversed
(gathered) and guarded positions, lane-dependent selects and `loop.if`s,
integer casts and a per-lane partial-sum reduction. Without transcendentals
the compiled kernel must give the loop interpreter's numbers bit for bit,
for every vector width and remainder the shapes produce."""

from __future__ import annotations

import numpy as np
import pytest

from cpu_kernels import ScheduleWriter, Writer, memref
from cpu_tolerance import assert_exact
from fusecc.compiler.types import MemRefType, f32, i32
from fusecc.runtime.cpu import compile_program
from fusecc.runtime.loop_interpreter import run_schedule


def random_kernel(seed: int):
    rng = np.random.default_rng(seed)
    rows, cols = int(rng.integers(1, 4)), int(rng.choice([3, 8, 16, 17, 32, 40, 64, 70]))
    full, row_t, vec_t = memref(rows, cols, f32), memref(rows, f32), memref(cols, f32)
    w = Writer()
    with w.kernel("random", [full, full, vec_t, full, row_t]) as (a, b, v, out, sums):
        with w.parallel([rows], ["worker"]) as (r,):
            scratch = w.alloc(MemRefType((16,), f32, "local"))
            with w.parallel([cols], ["vector"]) as (c,):
                def leaf():
                    kind = rng.integers(6)
                    if kind == 0:
                        return w.load(a, r, c)
                    if kind == 1:
                        return w.load(b, r, w.sub(w.ix(cols - 1), c))  # reversed: a gather
                    if kind == 2:
                        return w.load(v, c)
                    if kind == 3:
                        return w.load(a, r, w.ix(int(rng.integers(cols))))  # one place: uniform
                    if kind == 4:
                        shifted = w.add(c, w.ix(1))
                        inside = w.cmp("lt", shifted, w.ix(cols))
                        return w.load(b, r, shifted, guard=inside, padding=float(rng.normal()))
                    return w.c(float(np.float32(rng.normal())))

                def expr(depth: int):
                    if depth == 0 or rng.random() < 0.2:
                        return leaf()
                    op = rng.integers(9)
                    x = expr(depth - 1)
                    if op == 0:
                        return w.add(x, expr(depth - 1))
                    if op == 1:
                        return w.sub(x, expr(depth - 1))
                    if op == 2:
                        return w.mul(x, expr(depth - 1))
                    if op == 3:
                        return w.div(x, w.add(w.unary("abs", expr(depth - 1)), w.c(0.5)))
                    if op == 4:
                        return w.max(x, expr(depth - 1)) if rng.random() < 0.5 else w.min(x, expr(depth - 1))
                    if op == 5:
                        return w.select(w.cmp(str(rng.choice(["lt", "ge", "ne"])), x, expr(depth - 1)), x, w.unary("neg", x))
                    if op == 6:
                        return w.cast(w.cast(w.mul(x, w.c(10.0)), i32), f32)
                    if op == 7:
                        return w.unary("sqrt", w.unary("abs", x))
                    y = expr(depth - 1)
                    return w.if_(w.cmp("gt", x, w.c(0.0)), lambda: [w.add(x, y)], lambda: [w.mul(x, w.c(0.5))], [f32])[0]

                w.store(expr(int(rng.integers(1, 5))), out, r, c)
            # per-lane partial sums of the row just written, then combined in lane order
            with w.parallel([16], ["vector"]) as (lane,):
                def step(j, acc):
                    column = w.add(j, lane)
                    inside = w.cmp("lt", column, w.ix(cols))
                    return [w.add(acc, w.load(out, r, column, guard=inside, padding=0.0))]

                (partial,) = w.for_(0, cols, 16, [w.c(0.0)], step)
                w.store(partial, scratch, lane)
            (total,) = w.for_(0, 16, 1, [w.c(0.0)], lambda k, acc: [w.add(acc, w.load(scratch, k))])
            w.store(total, sums, r)
    s = ScheduleWriter([("a", full), ("b", full), ("v", vec_t)], [("out", full), ("sums", row_t)])
    s.launch(w.ops[-1], *s.op.body.args)
    module = w.module(s.finish())
    inputs = [rng.standard_normal(t.shape).astype(np.float32) for t in (full, full, vec_t)]
    return module, inputs


@pytest.mark.parametrize("seed", range(24))
def test_random_kernel_matches_the_interpreter_bit_for_bit(seed):
    module, inputs = random_kernel(seed)
    got = compile_program(module).run(inputs)
    want = run_schedule(module, "main", inputs)
    for g, v in zip(got, want, strict=True):
        assert_exact(g, v)
