"""Each construct of the LLVM emitter, compiled and run on the CPU, gives
the loop interpreter's numbers: bit for bit unless a transcendental is
involved (see cpu_tolerance.py)."""

from __future__ import annotations

import numpy as np
import pytest

from cpu_kernels import ScheduleWriter, Writer, memref
from cpu_tolerance import ULP_TOLERANCE, assert_exact, assert_kernel_close, assert_within_ulp
from fusecc.compiler.types import MemRefType, bf16, f16, f32, f64, i1, i32, i64
from fusecc.runtime.cpu import compile_program
from fusecc.runtime.loop_interpreter import run_schedule


def build(w: Writer, inputs, outputs, kernels=None):
    s = ScheduleWriter(inputs, outputs)
    for kernel in kernels or [w.ops[-1]]:
        s.launch(kernel, *s.op.body.args)
    return w.module(s.finish())


def check(module, inputs, exact=True, vectorize="explicit"):
    got = compile_program(module, vectorize).run(inputs)
    want = run_schedule(module, "main", inputs)
    for g, v in zip(got, want, strict=True):
        (assert_exact if exact else assert_kernel_close)(g, v)
    return got, compile_program(module, vectorize).llvm.text


# --------------------------------------------------------------------------- index analysis


def flat_broadcast(shape, block):
    """out[a,b,c] = x[a,b,c] + y[b] * z[c] over the flattened index, split in
    blocks of `block` lanes: the indices come from div/rem of the flat index."""
    A, B, C = shape
    n = A * B * C
    x_t, y_t, z_t = memref(A, B, C, f32), memref(B, f32), memref(C, f32)
    w = Writer()
    with w.kernel("flat", [x_t, y_t, z_t, x_t]) as (x, y, z, out):
        with w.parallel([n // block], ["worker"]) as (blk,):
            with w.parallel([block], ["vector"]) as (v,):
                flat = w.add(w.mul(blk, w.ix(block)), v)
                a, rest = w.div(flat, w.ix(B * C)), w.rem(flat, w.ix(B * C))
                b, c = w.div(rest, w.ix(C)), w.rem(rest, w.ix(C))
                value = w.add(w.load(x, a, b, c), w.mul(w.load(y, b), w.load(z, c)))
                w.store(value, out, a, b, c)
    return build(w, [("x", x_t), ("y", y_t), ("z", z_t)], [("out", x_t)])


def test_flat_index_div_rem_stays_contiguous_when_blocks_align(rng):
    module = flat_broadcast((2, 3, 64), 32)
    inputs = [rng.standard_normal(s, dtype=np.float32) for s in ((2, 3, 64), (3,), (64,))]
    _, text = check(module, inputs)
    # c = flat % 64 is lane-linear and b uniform per block: plain vector loads, no gathers
    assert "masked.gather" not in text and "load <32 x float>" in text


def test_flat_index_div_rem_crossing_rows_gathers(rng):
    module = flat_broadcast((2, 3, 40), 16)
    inputs = [rng.standard_normal(s, dtype=np.float32) for s in ((2, 3, 40), (3,), (40,))]
    _, text = check(module, inputs)
    assert "masked.gather" in text


@pytest.mark.parametrize("extent", [4, 8, 12, 16, 48, 100])
def test_vector_widths_and_remainders(rng, extent):
    t = memref(3, extent, f32)
    w = Writer()
    with w.kernel("scale", [t, t]) as (x, out):
        with w.parallel([3], ["worker"]) as (r,):
            with w.parallel([extent], ["vector"]) as (c,):
                w.store(w.mul(w.load(x, r, c), w.cast(w.cast(c, i32), f32)), out, r, c)
    check(build(w, [("x", t)], [("out", t)]), [rng.standard_normal((3, extent), dtype=np.float32)])


# --------------------------------------------------------------------------- guards, masks, control flow


def test_guarded_loads_and_stores(rng):
    """Shift right by one with padding 7, storing only positive results; the
    guards are lane-dependent (masked vector loads/stores)."""
    t = memref(2, 37, f32)
    w = Writer()
    with w.kernel("shift", [t, t]) as (x, out):
        with w.parallel([2], ["worker"]) as (r,):
            with w.parallel([37], ["vector"]) as (c,):
                has_left = w.cmp("ge", c, w.ix(1))
                left = w.load(x, r, w.sub(c, w.ix(1)), guard=has_left, padding=7.0)
                w.store(w.c(0.0), out, r, c)  # outputs start unspecified on the CPU
                w.store(left, out, r, c, guard=w.cmp("gt", left, w.c(0.0)))
    module = build(w, [("x", t)], [("out", t)])
    x = rng.standard_normal((2, 37), dtype=np.float32)
    (got,), text = check(module, [x])
    assert "llvm.masked.load" in text and "llvm.masked.store" in text


def test_uniform_guard_in_a_vector_loop(rng):
    """A guard that does not depend on the lane (the row), on a gathered and
    on a contiguous load."""
    t = memref(4, 20, f32)
    w = Writer()
    with w.kernel("rows", [t, t]) as (x, out):
        with w.parallel([4], ["worker"]) as (r,):
            even = w.cmp("eq", w.rem(r, w.ix(2)), w.ix(0))
            with w.parallel([20], ["vector"]) as (c,):
                a = w.load(x, r, c, guard=even, padding=-1.0)
                b = w.load(x, w.sub(w.ix(3), r), w.sub(w.ix(19), c), guard=even, padding=2.0)
                w.store(w.add(a, b), out, r, c)
    check(build(w, [("x", t)], [("out", t)]), [rng.standard_normal((4, 20), dtype=np.float32)])


def test_lane_dependent_if_is_if_converted(rng):
    """loop.if on a lane-dependent condition with results, a store in one
    branch, and a loop over a uniform range inside."""
    t = memref(2, 40, f32)
    w = Writer()
    with w.kernel("branches", [t, t, t]) as (x, out, side):
        with w.parallel([2], ["worker"]) as (r,):
            with w.parallel([40], ["vector"]) as (c,):
                v = w.load(x, r, c)
                positive = w.cmp("gt", v, w.c(0.0))

                w.store(w.c(0.0), side, r, c)

                def then():
                    w.store(w.mul(v, w.c(2.0)), side, r, c)
                    (total,) = w.for_(0, 3, 1, [v], lambda k, acc: [w.add(acc, w.cast(w.cast(k, i32), f32))])
                    return [total]

                def otherwise():
                    inner = w.if_(w.cmp("eq", r, w.ix(0)), lambda: [w.c(-1.0)], lambda: [w.unary("neg", v)], [f32])
                    return inner

                (result,) = w.if_(positive, then, otherwise, [f32])
                w.store(result, out, r, c)
    module = build(w, [("x", t)], [("out", t), ("side", t)])
    x = rng.standard_normal((2, 40), dtype=np.float32)
    (got, side), text = check(module, [x])
    assert "select <16 x i1>" in text


def test_store_to_one_place_from_a_vector_loop_keeps_the_last_lane(rng):
    t, one = memref(3, 20, f32), memref(3, f32)
    w = Writer()
    with w.kernel("last", [t, one, one]) as (x, out, masked_out):
        with w.parallel([3], ["worker"]) as (r,):
            with w.parallel([20], ["vector"]) as (c,):
                v = w.load(x, r, c)
                w.store(v, out, r)
                w.store(v, masked_out, r, guard=w.cmp("lt", v, w.c(0.0)))  # x[r, 0] < 0: always written
    x = rng.standard_normal((3, 20), dtype=np.float32)
    x[:, 0] = -1.0  # every row has a negative value
    check(build(w, [("x", t)], [("out", one), ("masked", one)]), [x])


def test_transposed_store_scatters(rng):
    a_t, b_t = memref(5, 33, f32), memref(33, 5, f32)
    w = Writer()
    with w.kernel("transpose", [a_t, b_t]) as (x, out):
        with w.parallel([5], ["worker"]) as (i,):
            with w.parallel([33], ["vector"]) as (j,):
                w.store(w.load(x, i, j), out, j, i)
    _, text = check(build(w, [("x", a_t)], [("out", b_t)]), [rng.standard_normal((5, 33), dtype=np.float32)])
    assert "llvm.masked.scatter" in text


def test_lane_dependent_loop_bounds_fall_back_to_a_scalar_loop(rng):
    """Row prefix sums: lane c loops over [0, c], which no SIMD chunk can share."""
    t = memref(2, 24, f32)
    w = Writer()
    with w.kernel("prefix", [t, t]) as (x, out):
        with w.parallel([2], ["worker"]) as (r,):
            with w.parallel([24], ["vector"]) as (c,):
                (total,) = w.for_(0, w.add(c, w.ix(1)), 1, [w.c(0.0)], lambda k, acc: [w.add(acc, w.load(x, r, k))])
                w.store(total, out, r, c)
    _, text = check(build(w, [("x", t)], [("out", t)]), [rng.standard_normal((2, 24), dtype=np.float32)])
    assert "llvm.loop.vectorize.enable" in text


def test_unroll_hint_becomes_loop_metadata(rng):
    t, one = memref(32, f32), memref(1, f32)
    w = Writer()
    with w.kernel("dot", [t, t, one]) as (x, y, out):
        (total,) = w.for_(0, 32, 1, [w.c(0.0)], lambda k, acc: [w.add(acc, w.mul(w.load(x, k), w.load(y, k)))], unroll=4)
        w.store(total, out, w.ix(0))
    _, text = check(build(w, [("x", t), ("y", t)], [("out", one)]), [rng.standard_normal(32, dtype=np.float32) for _ in range(2)])
    assert '!{!"llvm.loop.unroll.count", i32 4}' in text


def test_sequential_accumulation_is_not_reassociated():
    """1e8 + 1 - 1e8 + 1 ... in program order is not the exact sum; a
    reassociating compiler would give a different answer."""
    n = 64
    t, one = memref(n, f32), memref(1, f32)
    w = Writer()
    with w.kernel("sum", [t, one]) as (x, out):
        (total,) = w.for_(0, n, 1, [w.c(0.0)], lambda k, acc: [w.add(acc, w.load(x, k))])
        w.store(total, out, w.ix(0))
    x = np.tile(np.array([1e8, 1.0, -1e8, 1.0], dtype=np.float32), n // 4)
    (got,), _ = check(build(w, [("x", t)], [("out", one)]), [x])
    assert got[0] != np.float64(x.astype(np.float64).sum())


# --------------------------------------------------------------------------- types


def test_integer_arithmetic_and_casts(rng):
    n = 40
    t = memref(n, i32)
    w = Writer()
    with w.kernel("ints", [t, t, memref(n, f32)] + [t] * 6 + [memref(n, i64), memref(n, f32), memref(n, i1)]) as args:
        a, b, fx, q, r_, mx, bits, trunc, ab, wide, back, flag = args
        with w.parallel([n], ["vector"]) as (i,):
            x, y, f = w.load(a, i), w.load(b, i), w.load(fx, i)
            w.store(w.div(x, y), q, i)
            w.store(w.rem(x, y), r_, i)
            w.store(w.max(w.min(x, y), w.c(-3, i32)), mx, i)
            w.store(w.binary("xor", w.binary("and", x, y), w.c(5, i32)), bits, i)
            w.store(w.cast(f, i32), trunc, i)
            w.store(w.unary("neg", x), ab, i)
            w.store(w.cast(x, i64), wide, i)
            w.store(w.cast(w.cast(w.cast(x, i64), i32), f32), back, i)
            w.store(w.cast(x, i1), flag, i)
    ins = [("a", t), ("b", t), ("f", memref(n, f32))]
    outs = [("q", t), ("r", t), ("mx", t), ("bits", t), ("trunc", t), ("neg", t), ("wide", memref(n, i64)), ("back", memref(n, f32)), ("flag", memref(n, i1))]
    module = build(w, ins, outs)
    a = rng.integers(-100, 100, n).astype(np.int32)
    b = rng.integers(1, 9, n).astype(np.int32) * rng.choice([-1, 1], n).astype(np.int32)
    b[:3] = [-1, 1, 7]
    f = (rng.standard_normal(n) * 50).astype(np.float32)
    f[:4] = [np.nan, np.inf, -np.inf, -2.75]
    check(module, [a, b, f])


def test_f16_bf16_and_i1_buffers(rng):
    n = 37
    w = Writer()
    types = [memref(n, f16), memref(n, bf16), memref(n, i1), memref(n, f16), memref(n, bf16), memref(n, f32)]
    with w.kernel("narrow", types) as (h, bfl, mask, h_out, bf_out, f_out):
        with w.parallel([n], ["vector"]) as (i,):
            hv, bv = w.load(h, i), w.load(bfl, i)
            # f16 arithmetic rounds per op; bf16 values are f32 rounded to bf16 after each op
            w.store(w.mul(w.add(hv, hv), w.c(1.5, f16)), h_out, i)
            w.store(w.add(w.mul(bv, w.c(3.0, bf16)), w.c(0.1, bf16)), bf_out, i)
            wide = w.add(w.cast(hv, f32), w.cast(bv, f32))
            w.store(w.select(w.load(mask, i), wide, w.cast(w.cast(wide, bf16), f32)), f_out, i)
    ins = [("h", types[0]), ("b", types[1]), ("m", types[2])]
    outs = [("ho", types[3]), ("bo", types[4]), ("fo", types[5])]
    module = build(w, ins, outs)
    x = rng.standard_normal(n).astype(np.float32) * 10
    check(module, [x.astype(np.float16), x * 1.37, rng.random(n) < 0.5])


@pytest.mark.parametrize("name", ["exp", "log", "tanh", "erf", "sqrt", "rsqrt", "abs"])
@pytest.mark.parametrize("t", [f32, f16, bf16])
def test_math_functions_per_type(rng, name, t):
    n = 48
    buf = memref(n, t)
    w = Writer()
    with w.kernel("math", [buf, buf]) as (x, out):
        with w.parallel([n], ["vector"]) as (i,):
            w.store(w.unary(name, w.load(x, i)), out, i)
    module = build(w, [("x", buf)], [("y", buf)])
    x = np.abs(rng.standard_normal(n).astype(np.float32)) * 3 if name in ("log", "sqrt", "rsqrt") else rng.standard_normal(n).astype(np.float32) * 3
    (got,) = compile_program(module).run([x])
    (want,) = run_schedule(module, "main", [x])
    if name in ULP_TOLERANCE and t is f32:
        assert_within_ulp(got, want, ULP_TOLERANCE[name])
    elif name in ULP_TOLERANCE:  # rounded to 8 (bf16) or 11 (f16) bits: at most one step apart
        np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=2 ** -7 if t is bf16 else 2 ** -10)
    else:
        assert_exact(got, want)


def test_pow_and_f64_math(rng):
    n = 20
    a, d = memref(n, f32), memref(n, f64)
    w = Writer()
    with w.kernel("mixed", [a, a, d, a, d]) as (x, y, z, p_out, e_out):
        with w.parallel([n], ["vector"]) as (i,):
            w.store(w.binary("pow", w.load(x, i), w.load(y, i)), p_out, i)
            w.store(w.unary("exp", w.load(z, i)), e_out, i)
    module = build(w, [("x", a), ("y", a), ("z", d)], [("p", a), ("e", d)])
    x = np.abs(rng.standard_normal(n).astype(np.float32)) * 4
    y = rng.standard_normal(n).astype(np.float32)
    z = rng.standard_normal(n) * 5
    (p, e) = compile_program(module).run([x, y, z])
    (pw, ew) = run_schedule(module, "main", [x, y, z])
    assert_within_ulp(p, pw, ULP_TOLERANCE["pow"])
    np.testing.assert_allclose(e, ew, rtol=1e-15)


# --------------------------------------------------------------------------- buffers


def test_constant_buffers_views_and_zeroed_local_buffers(rng):
    from fusecc.compiler import attributes as A
    from fusecc.compiler.types import TensorType
    from fusecc.dialects import loop

    table = np.arange(12, dtype=np.float32).reshape(3, 4) / 3
    t, flat_t = memref(3, 4, f32), memref(12, f32)
    w = Writer()
    with w.kernel("tables", [t, t]) as (x, out):
        const = w.b.insert(loop.ConstantOp.create([], {"value": A.dense(table, TensorType((3, 4), f32))})).result
        halves = w.b.insert(loop.ConstantOp.create([], {"value": A.dense(np.full((2,), 0.5, np.float32), TensorType((2,), bf16))})).result
        flat = w.b.insert(loop.ViewOp([x], [flat_t], {"offset": A.IntegerAttr(0)})).result
        scratch = w.alloc(MemRefType((4,), f32, "local"))
        with w.parallel([3], ["worker"]) as (r,):
            with w.parallel([4], ["vector"]) as (c,):
                k = w.add(w.mul(r, w.ix(4)), c)
                value = w.add(w.mul(w.load(flat, k), w.load(const, r, c)), w.cast(w.load(halves, w.ix(1)), f32))
                w.store(w.add(value, w.load(scratch, c)), out, r, c)
    check(build(w, [("x", t)], [("out", t)]), [rng.standard_normal((3, 4), dtype=np.float32)])


def test_kernel_with_two_worker_loops_runs_whole(rng):
    """The second worker loop reads what the first wrote: the kernel is not
    split over threads (extent 1), so the dependence is kept."""
    t = memref(64, f32)
    w = Writer()
    with w.kernel("two_phases", [t, t]) as (x, out):
        with w.parallel([64], ["worker"]) as (i,):
            w.store(w.mul(w.load(x, i), w.c(2.0)), out, i)
        with w.parallel([64], ["worker"]) as (i,):
            w.store(w.add(w.load(out, i), w.load(out, w.sub(w.ix(63), i))), out, i)
    module = build(w, [("x", t)], [("out", t)])
    assert compile_program(module).kernels["two_phases"].abi.worker_extent == 1
    check(module, [rng.standard_normal(64, dtype=np.float32)])


def test_schedule_arena_views_and_copies(rng):
    from fusecc.compiler import attributes as A
    from fusecc.dialects import loop

    t, flat_t = memref(4, 8, f32), memref(32, f32)
    w = Writer()
    with w.kernel("double", [flat_t, flat_t]) as (x, out):
        with w.parallel([2], ["worker"]) as (blk,):
            with w.parallel([16], ["vector"]) as (v,):
                i = w.add(w.mul(blk, w.ix(16)), v)
                w.store(w.add(w.load(x, i), w.load(x, i)), out, i)
    kernel = w.ops[-1]
    s = ScheduleWriter([("x", t)], [("y", t), ("z", t)])
    x, y, z = s.op.body.args
    tmp = s.scratch(flat_t)
    x_flat = s.b.insert(loop.ViewOp([x], [flat_t], {"offset": A.IntegerAttr(0)})).result
    y_flat = s.b.insert(loop.ViewOp([y], [flat_t], {"offset": A.IntegerAttr(0)})).result
    s.launch(kernel, x_flat, tmp)
    s.launch(kernel, tmp, y_flat)
    s.b.insert(loop.CopyOp([tmp, z], [], {}))
    module = w.module(s.finish())
    x = rng.standard_normal((4, 8), dtype=np.float32)
    (y, z), _ = check(module, [x])
    assert_exact(y, 4 * x)


def test_schedule_constants_feed_kernels_and_outputs():
    """A loop.constant in the schedule (a constant the program returns or a
    kernel reads) gets its own buffer."""
    from fusecc.compiler import attributes as A
    from fusecc.compiler.types import TensorType
    from fusecc.dialects import loop

    t = memref(32, f32)
    w = Writer()
    with w.kernel("double", [t, t]) as (x, out):
        with w.parallel([32], ["vector"]) as (i,):
            w.store(w.add(w.load(x, i), w.load(x, i)), out, i)
    kernel = w.ops[-1]
    s = ScheduleWriter([], [("y", t), ("z", t)])
    y, z = s.op.body.args
    values = np.arange(32, dtype=np.float32) / 4
    const = s.b.insert(loop.ConstantOp.create([], {"value": A.dense(values, TensorType((32,), f32))})).result
    s.launch(kernel, const, y)
    s.b.insert(loop.CopyOp([const, z], [], {}))
    (got_y, got_z), _ = check(w.module(s.finish()), [])
    assert_exact(got_y, 2 * values)
    assert_exact(got_z, values)


@pytest.mark.parametrize("vectorize", ["explicit", "llvm"])
def test_llvm_vectoriser_mode_gives_the_same_numbers(rng, vectorize):
    import cpu_kernels as K

    x, gamma, beta = (rng.standard_normal(s, dtype=np.float32) for s in ((2, 48), (48,), (48,)))
    module = K.layernorm_gelu(2, 48, partials=16)
    explicit = compile_program(module, "explicit").run([x, gamma, beta])[0]
    other = compile_program(module, vectorize).run([x, gamma, beta])[0]
    assert_exact(other, explicit) if vectorize == "explicit" else assert_kernel_close(other, explicit)


def test_gpu_kernels_are_rejected():
    from fusecc.compiler import DiagnosticError
    from fusecc.passes.backends.llvm.emit import emit_llvm

    t = memref(32, f32)
    w = Writer()
    with w.kernel("gpu", [t]) as (x,):
        with w.parallel([1], ["block.x"]) as (b,):
            with w.parallel([32], ["thread.x"]) as (th,):
                w.store(w.c(1.0), x, th)
    with pytest.raises(DiagnosticError, match="GPU mappings"):
        emit_llvm(w.module())
