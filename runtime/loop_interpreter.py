"""A Python interpreter for the loop level (`loop`, `arith`, `math`).

It defines what loop IR means, so lowering passes can be tested
differentially against the tensor-level reference, and both backends have
an oracle. It is slow (one Python step per scalar op), so tests use small
shapes.

GPU semantics are kept exactly: the iterations of a thread-mapped
`loop.parallel` run as coroutines that meet at `loop.barrier` and exchange
values at `loop.shuffle_xor`; every thread must reach the same sequence of
barriers and shuffles (uniform control flow), or the interpreter reports
divergence. Out-of-bounds loads and stores are errors, not wrap-arounds,
which catches lowering bugs that a compiled kernel would hide.
"""

from __future__ import annotations

import math
from typing import Any, Iterator, Sequence

import numpy as np

from fusecc.compiler.ir import Block, Operation, Value
from fusecc.compiler.types import MemRefType, ScalarType, bf16, i1
from fusecc.dialects.loop import ShapeMismatch, concrete_type, evaluate_size

from fusecc.dialects.nvgpu import WARP, mma_reference
from fusecc.dialects.tensor.numerics import power
from fusecc.runtime.reference import InterpreterError, erf as erf_array, round_bf16, to_storage


# --------------------------------------------------------------------------- scalars


def scalar(value, t: ScalarType):
    """A Python/numpy scalar of type `t`: np.float32 etc. for floats,
    int for integers and index (wrapped around at the type's width, two's
    complement), bool for i1. bf16 and f16 results round to nearest even
    here: the one place the loop level rounds to a narrow float."""
    if t.is_float:
        if t is bf16:
            return round_bf16(np.array([value], dtype=np.float32))[0]
        return t.numpy_dtype.type(value)
    if t is i1:
        return bool(value)
    return wrap(int(value), t.bitwidth)


def wrap(value: int, bits: int) -> int:
    half = 1 << (bits - 1)
    return (value + half) % (1 << bits) - half


def _cast(value, t: ScalarType):
    """docs/legalize.md, rules 1 and 4: float targets are reached through
    f32; float -> int truncates toward zero and saturates (NaN gives 0)."""
    if t.is_float:
        return scalar(np.float32(value) if not isinstance(value, bool) else float(value), t)
    if t is i1:
        return bool(value != 0)
    if isinstance(value, (float, np.floating)):
        if math.isnan(value):
            return 0
        limit = 1 << (t.bitwidth - 1)
        if value >= limit:
            return limit - 1
        if value < -limit:
            return -limit
        return int(value)  # truncates toward zero (np.float32 has no __trunc__)
    return scalar(value, t)


def _div(a, b):
    """Integers: truncating, x / 0 is 0 (INT_MIN / -1 wraps in `scalar`);
    i1: a and b (docs/legalize.md, rules 2 and 3)."""
    if isinstance(a, bool):
        return a and b
    if isinstance(a, int):
        if b == 0:
            return 0
        q = abs(a) // abs(b)
        return q if (a >= 0) == (b >= 0) else -q
    with np.errstate(all="ignore"):
        return a / b


def _rem(a, b):
    """The sign of the dividend; x % 0 is 0; i1: false."""
    if isinstance(a, bool) or b == 0:
        return 0
    return a - _div(a, b) * b


def _fmax(a, b):
    if isinstance(a, np.floating):
        return np.fmax(a, b)
    return max(a, b)


def _fmin(a, b):
    if isinstance(a, np.floating):
        return np.fmin(a, b)
    return min(a, b)


BINARY = {
    "arith.add": lambda a, b: a + b,
    "arith.sub": lambda a, b: a - b,
    "arith.mul": lambda a, b: a * b,
    "arith.div": _div,
    "arith.rem": _rem,
    "arith.max": _fmax,
    "arith.min": _fmin,
    "arith.and": lambda a, b: a & b,
    "arith.or": lambda a, b: a | b,
    "arith.xor": lambda a, b: a ^ b,
    "math.pow": lambda a, b: power(np.array([a]), np.array([b]))[0],  # C99 pow (docs/semantics.md)
}

UNARY = {
    "arith.neg": lambda x: -x,
    "math.exp": np.exp,
    "math.log": np.log,
    "math.sqrt": np.sqrt,
    "math.rsqrt": lambda x: type(x)(1) / np.sqrt(x),
    "math.tanh": np.tanh,
    "math.erf": lambda x: type(x)(erf_array(np.array([x]))[0]),
    "math.abs": np.abs,
}

def fma(a, b, c):
    """a·b + c rounded once, as C99 fma and the FMA instructions do.

    f32 (and narrower) operands: their product is exact in a double and the
    sum is rounded to odd (TwoSum gives the error of the double sum; an
    inexact sum with an even last bit moves one ulp towards the error), so
    the final rounding to f32 is the single rounding of the exact value.
    f64: exact rational arithmetic, rounded once by float(). Infinities and
    NaNs follow the double arithmetic (an intermediate product never
    overflows, as in a fused operation)."""
    result_type = type(a)
    x, y, z = float(a), float(b), float(c)
    product_is_exact = np.dtype(result_type).itemsize <= 4
    if not product_is_exact:
        if not (math.isfinite(x) and math.isfinite(y) and math.isfinite(z)) or x * y == 0 or z == 0:
            return result_type(x * y + z)  # specials and zero terms: IEEE rules (signs of zero) are exact here
        from fractions import Fraction

        exact = Fraction(x) * Fraction(y) + Fraction(z)
        return result_type(float(exact)) if exact != 0 else result_type(0.0)
    p = x * y
    s = p + z
    if not math.isfinite(s):
        return result_type(s)
    v = s - p
    error = (p - (s - v)) + (z - v)
    if error != 0 and not np.float64(s).view(np.int64) & 1:
        s = math.nextafter(s, math.inf if error > 0 else -math.inf)
    return result_type(s)


COMPARE = {
    "eq": lambda a, b: a == b,
    "ne": lambda a, b: a != b,
    "lt": lambda a, b: a < b,
    "le": lambda a, b: a <= b,
    "gt": lambda a, b: a > b,
    "ge": lambda a, b: a >= b,
}


# --------------------------------------------------------------------------- buffers


def storage_dtype(t: MemRefType) -> np.dtype:
    """bf16 buffers hold raw 16-bit patterns, so byte sizes are the real ones."""
    return np.dtype(np.uint16) if t.element_type is bf16 else t.element_type.numpy_dtype


def view_bytes(raw: np.ndarray, offset: int, t: MemRefType) -> np.ndarray:
    """A typed view of `t.byte_size` bytes of the uint8 array `raw` at `offset`."""
    end = offset + t.byte_size
    if offset < 0 or end > raw.size:
        raise InterpreterError(f"view of bytes [{offset}, {end}) exceeds a buffer of {raw.size} bytes")
    return raw[offset:end].view(storage_dtype(t)).reshape(t.shape)


def as_bytes(array: np.ndarray) -> np.ndarray:
    return array.reshape(-1).view(np.uint8)


def to_buffer(array: np.ndarray, t: MemRefType) -> np.ndarray:
    """A fresh buffer for `t` holding `array`'s values."""
    values = to_storage(np.asarray(array), t.element_type)
    if t.element_type is bf16:
        bits = np.asarray(values, dtype=np.float32).view(np.uint32) >> 16
        return np.ascontiguousarray(bits.astype(np.uint16)).reshape(t.shape)
    return np.array(values, dtype=storage_dtype(t), copy=True).reshape(t.shape)


def from_buffer(buffer: np.ndarray, t: MemRefType) -> np.ndarray:
    if t.element_type is bf16:
        return (buffer.astype(np.uint32) << 16).view(np.float32)
    return buffer.copy()


def _read(buffer: np.ndarray, indices, t: MemRefType):
    value = buffer[indices]
    if t.element_type is bf16:
        return np.array([int(value) << 16], dtype=np.uint32).view(np.float32)[0]
    return scalar(value, t.element_type)


def _write(buffer: np.ndarray, indices, value, t: MemRefType) -> None:
    if t.element_type is bf16:
        buffer[indices] = int(np.array([value], dtype=np.float32).view(np.uint32)[0]) >> 16
    else:
        buffer[indices] = value


def warp_mma(requests: dict[int, tuple], where: Operation) -> dict[int, list]:
    """The D fragments each lane gets from `nvgpu.mma_sync` (whole warps
    only: dialects/nvgpu.py gives the fragment tables and the numerics)."""
    out: dict[int, list] = {}
    for first in sorted({t - t % WARP for t in requests}):
        lanes = [requests.get(first + lane) for lane in range(WARP)]
        if any(r is None for r in lanes):
            raise InterpreterError(f"nvgpu.mma_sync at {where.location} reached by a partial warp (threads {first}..{first + WARP - 1})")
        mma = lanes[0][2]
        if any(r[2] is not mma for r in lanes):
            raise InterpreterError(f"the lanes of warp {first // WARP} wait at different nvgpu.mma_sync ops at {where.location}")
        f = mma.fragments_table
        values = np.array([[float(v) for v in r[1]] for r in lanes], dtype=np.float32)
        a, b, c = values[:, : f.a_count], values[:, f.a_count : f.a_count + f.b_count], values[:, f.a_count + f.b_count :]
        d = mma_reference(mma.attr("kind"), a, b, c)
        for lane in range(WARP):
            out[first + lane] = [np.float32(x) for x in d[lane]]
    return out


def _check_bounds(op: Operation, indices: tuple, shape: tuple) -> None:
    for axis, (i, d) in enumerate(zip(indices, shape)):
        if not 0 <= i < d:
            kind = "load" if op.name == "loop.load" else "store"
            raise InterpreterError(f"out-of-bounds {kind} at {op.location}: index {i} of axis {axis} not in [0, {d})")


# --------------------------------------------------------------------------- execution

BARRIER = ("barrier",)


class LoopInterpreter:
    """Runs `loop.schedule` ops and the kernels they launch."""

    def __init__(self, module: Operation):
        self.module = module

    # --- host side -------------------------------------------------------------
    def run_schedule(self, name: str, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        schedule = self.module.lookup(name)
        if schedule is None or schedule.name != "loop.schedule":
            raise InterpreterError(f"no loop.schedule @{name} in the module")
        inputs = list(inputs)
        if len(inputs) != len(schedule.inputs):
            raise InterpreterError(f"@{name} takes {len(schedule.inputs)} inputs, got {len(inputs)}")
        dims = {}
        if schedule.is_dynamic:
            try:
                dims = schedule.bind_dims([np.shape(a) for a in inputs])
            except ShapeMismatch as exc:
                raise InterpreterError(f"@{name}: {exc}") from None
        arena = np.zeros(evaluate_size(schedule.arena_size, dims), dtype=np.uint8)
        env: dict[Value, Any] = {}
        for arg, array in zip(schedule.input_args, inputs):
            if not schedule.is_dynamic and tuple(np.shape(array)) != arg.type.shape:
                raise InterpreterError(f"input {arg.name_hint} has shape {list(np.shape(array))}, expected {list(arg.type.shape)}")
            env[arg] = to_buffer(array, arg.type.with_sizes(np.shape(array)[axis] for axis in arg.type.dynamic_axes))
        for arg, sizes in zip(schedule.output_args, schedule.argument_sizes()[len(inputs):]):
            t = arg.type.with_sizes(evaluate_size(e, dims) for e in sizes)
            env[arg] = np.zeros(t.shape, dtype=storage_dtype(t))
        for op in schedule.body:
            if op.name == "loop.arena_view":
                env[op.result] = view_bytes(arena, evaluate_size(op.offset, dims), concrete_type(op, dims))
            elif op.name == "loop.view":
                env[op.result] = view_bytes(as_bytes(env[op.source]), evaluate_size(op.offset, dims), concrete_type(op, dims))
            elif op.name == "loop.launch":
                kernel = op.resolve()
                self.run_kernel(kernel, [env[v] for v in op.operands])
            elif op.name == "loop.copy":
                if env[op.target].nbytes != env[op.source].nbytes:
                    raise InterpreterError(f"loop.copy at {op.location} copies {env[op.source].nbytes} bytes into a {env[op.target].nbytes}-byte buffer")
                as_bytes(env[op.target])[:] = as_bytes(env[op.source])
            elif op.name == "loop.return":
                break
            else:
                self.run_plain(op, env)
        return [from_buffer(env[a], a.type) for a in schedule.output_args]

    def run_kernel(self, kernel: Operation, args: Sequence[Any]) -> None:
        env = dict(zip(kernel.body.args, args))
        self._drain(self.run_block(kernel.body, env), f"kernel @{kernel.sym_name}")

    @staticmethod
    def _drain(gen: Iterator, where: str):
        try:
            token = next(gen)
        except StopIteration as stop:
            return stop.value
        raise InterpreterError(f"'{token[0]}' outside a thread-mapped loop in {where}")

    # --- regions -----------------------------------------------------------------
    def run_block(self, block: Block, env: dict) -> Iterator:
        """Generator: yields barrier/shuffle requests; returns the yielded values."""
        for op in block:
            name = op.name
            if name in ("loop.yield", "loop.return"):
                return [env[v] for v in op.operands]
            if name == "loop.parallel":
                yield from self.run_parallel(op, env)
            elif name == "loop.for":
                results = yield from self.run_for(op, env)
                env.update(zip(op.results, results))
            elif name == "loop.if":
                region = 0 if env[op.condition] else 1
                results = yield from self.run_block(op.regions[region].block, env)
                env.update(zip(op.results, results))
            elif name == "loop.barrier":
                if _in_thread_loop(op):  # at block level, thread loops already ran one after another: nothing to wait for
                    yield BARRIER
            elif name == "loop.shuffle_xor":
                env[op.result] = yield ("shuffle", env[op.value], op.offset)
            elif name == "nvgpu.mma_sync":
                env.update(zip(op.results, (yield ("mma", [env[v] for v in op.operands], op))))
            else:
                self.run_plain(op, env)
        return []

    def run_for(self, op: Operation, env: dict) -> Iterator:
        lower, upper, step = (env[v] for v in op.operands[:3])
        if step <= 0:
            raise InterpreterError(f"loop.for at {op.location} has a non-positive step {step}")
        values = [env[v] for v in op.operands[3:]]
        body = op.body
        i = lower
        while i < upper:
            env[body.args[0]] = i
            env.update(zip(body.args[1:], values))
            values = yield from self.run_block(body, env)
            i += step
        return values

    def run_parallel(self, op: Operation, env: dict) -> Iterator:
        points = np.ndindex(*(u if isinstance(u, int) else env[u] for u in op.extents))
        args = op.body.args
        if not op.maps_threads:
            for point in points:
                env.update(zip(args, point))
                yield from self.run_block(op.body, env)
            return
        # Threads of a block run as coroutines, phase by phase. They are
        # numbered as CUDA does (x fastest), which decides warps and lanes.
        extents = {m: u for m, u in zip(op.mapping, op.upper)}
        bx, by = extents.get("thread.x", 1), extents.get("thread.y", 1)
        threads: dict[int, Iterator] = {}
        for point in points:
            coords = dict(zip(op.mapping, point))
            linear = coords.get("thread.x", 0) + bx * (coords.get("thread.y", 0) + by * coords.get("thread.z", 0))
            thread_env = dict(env)
            thread_env.update(zip(args, point))
            threads[linear] = self.run_block(op.body, thread_env)
        replies: dict[int, Any] = dict.fromkeys(threads)
        live = sorted(threads)
        while live:
            requests = {}
            finished = []
            for t in live:
                try:
                    requests[t] = threads[t].send(replies[t])
                except StopIteration:
                    finished.append(t)
            if finished and requests:
                raise InterpreterError(f"divergent barrier or shuffle in the thread loop at {op.location}: some threads finished while others wait")
            if not requests:
                return
            kinds = {r[0] for r in requests.values()}
            if len(kinds) != 1:
                raise InterpreterError(f"divergent control flow at {op.location}: threads wait at both a barrier and a shuffle")
            if kinds == {"mma"}:
                replies.update(warp_mma(requests, op))
            elif kinds == {"shuffle"}:
                offsets = {r[2] for r in requests.values()}
                if len(offsets) != 1:
                    raise InterpreterError(f"threads shuffle with different offsets at {op.location}")
                offset = offsets.pop()
                for t in requests:
                    partner = (t // 32) * 32 + ((t % 32) ^ offset)
                    replies[t] = requests[partner][1] if partner in requests else requests[t][1]
            else:
                for t in requests:
                    replies[t] = None
            live = sorted(requests)

    # --- ops without regions ---------------------------------------------------
    def run_plain(self, op: Operation, env: dict) -> None:
        name = op.name
        fn = BINARY.get(name)
        if fn is not None:
            with np.errstate(all="ignore"):
                env[op.result] = scalar(fn(env[op.operands[0]], env[op.operands[1]]), op.result.type)
            return
        if name == "math.fma":
            env[op.result] = scalar(fma(*(env[v] for v in op.operands)), op.result.type)
            return
        fn = UNARY.get(name)
        if fn is not None:
            with np.errstate(all="ignore"):
                env[op.result] = scalar(fn(env[op.operands[0]]), op.result.type)
            return
        if name == "loop.load":
            t = op.buffer.type
            guard = op.guard
            if guard is not None and not env[guard]:
                padding = op.attr("padding")
                env[op.result] = scalar(0 if padding is None else padding.value, t.element_type)
                return
            indices = tuple(env[v] for v in op.indices)
            _check_bounds(op, indices, env[op.buffer].shape)
            env[op.result] = _read(env[op.buffer], indices, t)
        elif name == "loop.store":
            t = op.buffer.type
            guard = op.guard
            if guard is not None and not env[guard]:
                return
            indices = tuple(env[v] for v in op.indices)
            _check_bounds(op, indices, env[op.buffer].shape)
            _write(env[op.buffer], indices, env[op.value], t)
        elif name == "loop.load_vector":  # width consecutive elements of the last axis (dialects/loop_vector.py)
            t = op.buffer.type
            indices = tuple(env[v] for v in op.indices)
            for lane, result in enumerate(op.results):
                at = (*indices[:-1], indices[-1] + lane)
                _check_bounds(op, at, env[op.buffer].shape)
                env[result] = _read(env[op.buffer], at, t)
        elif name == "loop.store_vector":
            t = op.buffer.type
            indices = tuple(env[v] for v in op.indices)
            for lane, value in enumerate(op.values):
                at = (*indices[:-1], indices[-1] + lane)
                _check_bounds(op, at, env[op.buffer].shape)
                _write(env[op.buffer], at, env[value], t)
        elif name == "loop.copy_async":  # lands at once: the interpreter is sequentially consistent
            t = op.buffer.type
            indices = tuple(env[v] for v in op.indices)
            _check_bounds(op, indices, env[op.buffer].shape)
            value = scalar(0, t.element_type)
            if op.guard is None or env[op.guard]:
                source = tuple(env[v] for v in op.source_indices)
                _check_bounds(op, source, env[op.source].shape)
                value = _read(env[op.source], source, op.source.type)
            _write(env[op.buffer], indices, value, t)
        elif name in ("loop.async_commit", "loop.async_wait", "loop.prefetch"):
            pass  # ordering and cache hints: no value changes
        elif name == "arith.constant":
            env[op.result] = scalar(op.attr("value").value, op.result.type)
        elif name == "arith.cmp":
            env[op.result] = bool(COMPARE[op.predicate](env[op.lhs], env[op.rhs]))
        elif name == "arith.select":
            env[op.result] = env[op.true_value] if env[op.condition] else env[op.false_value]
        elif name == "arith.cast":
            env[op.result] = _cast(env[op.input], op.result.type)
        elif name == "loop.alloc":
            t = op.result.type
            env[op.result] = np.zeros(t.shape, dtype=storage_dtype(t))
        elif name == "loop.dim":
            env[op.result] = int(env[op.source].shape[op.axis])
        elif name == "loop.constant":
            t = op.result.type
            env[op.result] = to_buffer(op.attr("value").array, t)
        elif name == "loop.view":
            env[op.result] = view_bytes(as_bytes(env[op.source]), op.offset, op.result.type)
        else:
            raise InterpreterError(f"the loop interpreter cannot run '{name}'")


def _in_thread_loop(op: Operation) -> bool:
    parent = op.parent_op
    while parent is not None and not (parent.name == "loop.parallel" and parent.maps_threads):
        parent = parent.parent_op
    return parent is not None


def run_schedule(module: Operation, name: str, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    return LoopInterpreter(module).run_schedule(name, inputs)
