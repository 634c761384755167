"""The fuzzer's own oracle: each op of the language reference evaluated in
float64 numpy, written from the spec (shared/spec/tensor-ir.md) and the
numerics page (docs/semantics.md), sharing no code with the dialect's
`evaluate` hooks, the reference interpreter or the compiler.

`evaluate(program, inputs)` rounds each op's result to its storage type
(f32, f16 and bf16 as the language says; integers wrap at their width), as
every target must. A target computes in f32 where the oracle computes in
float64 and may sum in another order, so `evaluate(..., jitter=...)` moves
every float result by up to 2^-16 of itself before it is rounded (all up
with jitter=1.0, all down with -1.0, at random with a numpy Generator): where
that moves an output past the tolerance (a comparison of near-equal
values, a cast near an integer, a cancellation), the program is
ill-conditioned there and no target is held to one value
(`compare.stable_mask`).
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np

from fusecc.tools.fuzz.program import BINARY, FLOATS, INTS, REDUCTIONS, Function, Program, normalize_axis, slice_lengths

BITS = {"i32": 32, "i64": 64}
_STORAGE = {"f32": np.float32, "f16": np.float16, "bf16": ml_dtypes.bfloat16}


class OracleDomainError(ValueError):
    """The spec gives the op no value here (max over an empty axis)."""


def wrap(x: np.ndarray, dtype: str) -> np.ndarray:
    """Two's-complement wrap-around at the width of `dtype`."""
    x = np.asarray(x, dtype=np.int64)
    if dtype == "i64":
        return x
    bits = BITS[dtype]
    return ((x + (1 << (bits - 1))) % (1 << bits)) - (1 << (bits - 1))


JITTER = 2.0**-16


def store(x, dtype: str, jitter: np.random.Generator | float | None = None) -> np.ndarray:
    """A computed value as the language stores it (floats as float64 holding
    the storage type's value, integers as int64, i1 as bool)."""
    with np.errstate(all="ignore"):
        if dtype in FLOATS:
            x = np.asarray(x, dtype=np.float64)
            if isinstance(jitter, float):  # every value moved the same way: +1.0 up, -1.0 down
                x = x * (1.0 + JITTER * jitter)
            elif jitter is not None:
                x = x * (1.0 + JITTER * jitter.uniform(-1.0, 1.0, x.shape))
            return x.astype(_STORAGE[dtype]).astype(np.float64)
        if dtype == "i1":
            return np.asarray(x).astype(bool)
        return wrap(x, dtype)


# The GPU's tensor-core attention (f16/bf16, sm_80+) rounds the probabilities
# P to the storage type for the P·V product, a rounding the language does
# not make (docs/cuda-tensor-cores.md): each output may move by up to
# u · max |v|. The jitter runs move narrow attention results that much, so
# an element that such a rounding can push out of tolerance is not judged.
P_ROUNDING = {"f16": 2.0**-11, "bf16": 2.0**-8}


TENSOR_CORE_KEY_TILE = 64  # the mma template's key tile (docs/cuda-tensor-cores.md)


def _attention_tensor_core(q, k, v, mask, scale, causal, dtype: str):
    """Attention as the tensor-core template computes it: keys in tiles of
    64, an online softmax (running row max m, running sum l of the unrounded
    P), and P rounded to `dtype` for P·V. Bounding this rounding's move
    (`_p_rounding_move`) leaves out a later mixed-sign sum that the bound's
    one-way or random moves cancel (fuzz seed 4323), so the masks also hold
    the rounding itself."""
    scores = _scores(q, k, mask, scale, causal)
    cols = scores.shape[-1]
    if cols == 0 or scores.size == 0:
        return _attention(q, k, v, mask, scale, causal)
    shape = scores.shape[:-1]
    m = np.full(shape + (1,), -np.inf)
    l = np.zeros(shape + (1,))
    acc = np.zeros(shape + (v.shape[-1],))
    for k0 in range(0, cols, TENSOR_CORE_KEY_TILE):
        tile = scores[..., k0 : k0 + TENSOR_CORE_KEY_TILE]
        new_m = np.maximum(m, np.max(tile, axis=-1, keepdims=True))
        safe_m = np.where(np.isneginf(new_m), 0.0, new_m)  # a row masked so far: P = 0, not NaN
        p = np.exp(tile - safe_m)
        alpha = np.exp(np.where(np.isneginf(m), -np.inf, m - safe_m))
        rounded = p.astype(_STORAGE[dtype]).astype(np.float64)
        acc = acc * alpha + np.matmul(rounded, v[..., k0 : k0 + TENSOR_CORE_KEY_TILE, :])
        l = l * alpha + np.sum(p, axis=-1, keepdims=True)
        m = new_m
    return acc / l


def _p_rounding_move(out: np.ndarray, v: np.ndarray, dtype: str, jitter) -> np.ndarray:
    finite = np.abs(v[np.isfinite(v)])
    bound = P_ROUNDING[dtype] * (float(finite.max()) if finite.size else 0.0)
    direction = jitter if isinstance(jitter, float) else jitter.uniform(-1.0, 1.0, np.shape(out))
    return direction * bound


def float_to_int(x: np.ndarray, dtype: str) -> np.ndarray:
    """Saturating: trunc toward 0, NaN -> 0, beyond the range -> max/min."""
    bits = BITS[dtype]
    hi, lo = (1 << (bits - 1)) - 1, -(1 << (bits - 1))
    out = np.zeros(x.shape, dtype=np.int64)
    for i, v in np.ndenumerate(x):
        out[i] = 0 if math.isnan(v) else hi if v >= 2.0 ** (bits - 1) else lo if v < -(2.0 ** (bits - 1)) else int(math.trunc(v))
    return out


def c99_pow(x: float, y: float) -> float:
    """C99 Annex F pow, via Python's math.pow plus the cases it raises on."""
    y_odd = float(y).is_integer() and abs(y) < 2**53 and int(y) % 2 == 1
    if x == 0.0 and y < 0:
        return math.copysign(math.inf, x) if y_odd else math.inf
    try:
        return math.pow(x, y)
    except ValueError:
        return math.nan
    except OverflowError:
        return -math.inf if x < 0 and y_odd else math.inf


def int_pow(a: np.ndarray, b: np.ndarray, dtype: str) -> np.ndarray:
    """a ** b wrapped at the type's width; b < 0 is trunc(1 / a**-b): 1 for
    a = 1, ±1 for a = -1, else 0 (docs/semantics.md)."""
    bits = BITS[dtype]
    a, b = np.broadcast_arrays(np.asarray(a, np.int64), np.asarray(b, np.int64))
    out = np.zeros(a.shape, dtype=np.int64)
    for i in np.ndindex(a.shape):
        x, y = int(a[i]), int(b[i])
        if y < 0:
            value = 1 if x == 1 else (1 if y % 2 == 0 else -1) if x == -1 else 0
        else:
            value = pow(x, y, 1 << bits)
        out[i] = ((value + (1 << (bits - 1))) % (1 << bits)) - (1 << (bits - 1))
    return out


def int_div(a: np.ndarray, b: np.ndarray, dtype: str) -> np.ndarray:
    a, b = np.broadcast_arrays(np.asarray(a, np.int64), np.asarray(b, np.int64))
    out = np.zeros(a.shape, dtype=object)
    for i in np.ndindex(a.shape):
        x, y = int(a[i]), int(b[i])
        out[i] = 0 if y == 0 else abs(x) // abs(y) * (1 if (x < 0) == (y < 0) else -1)
    return wrap(_wrap_object(out), dtype)


def _wrap_object(values) -> np.ndarray:
    values = np.asarray(values, dtype=object)
    flat = [((int(v) + 2**63) % 2**64) - 2**63 for v in values.ravel()]
    return np.array(flat, dtype=np.int64).reshape(values.shape)


def _binary(kind: str, a, b, dtype: str):
    if dtype == "i1":
        a, b = a.astype(bool), b.astype(bool)
        return {"add": a | b, "max": a | b, "mul": a & b, "min": a & b, "div": a & b, "sub": a ^ b}[kind]
    if dtype in INTS:
        if kind == "div":
            return int_div(a, b, dtype)
        if kind == "pow":
            return int_pow(a, b, dtype)
        if kind == "mul" and dtype == "i64":
            a, b = np.broadcast_arrays(a.astype(object), b.astype(object))
            return _wrap_object(a * b)
        return {"add": np.add, "sub": np.subtract, "mul": np.multiply, "max": np.maximum, "min": np.minimum}[kind](a, b)
    if kind in ("max", "min"):
        return ieee_extremum(kind, a, b)
    if kind == "pow":
        a, b = np.broadcast_arrays(a, b)
        return np.vectorize(c99_pow, otypes=[np.float64])(a, b) if a.size else np.zeros(a.shape)
    return {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide}[kind](a, b)


def ieee_extremum(kind: str, a, b) -> np.ndarray:
    """IEEE 754-2019 maximum/minimum (docs/semantics.md): NaN on either side
    gives NaN; -0.0 < +0.0; otherwise the larger/smaller."""
    a, b = np.broadcast_arrays(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64))
    a_first = (a > b) if kind == "max" else (a < b)
    b_first = (b > a) if kind == "max" else (b < a)
    negative_zero = (np.signbit(a) & np.signbit(b)) if kind == "max" else (np.signbit(a) | np.signbit(b))
    tie = np.where((a == 0) & (b == 0), np.where(negative_zero, -0.0, 0.0), a)
    chosen = np.where(a_first, a, np.where(b_first, b, tie))
    return np.where(np.isnan(a) | np.isnan(b), np.nan, chosen)


def _fold_extremum(kind: str, x: np.ndarray, axes, keep: bool) -> np.ndarray:
    """ieee_extremum folded element by element along `axes`."""
    rows = np.moveaxis(x, axes, list(range(x.ndim - len(axes), x.ndim)))
    rows = rows.reshape(rows.shape[: x.ndim - len(axes)] + (-1,))
    out = rows[..., 0]
    for i in range(1, rows.shape[-1]):
        out = ieee_extremum(kind, out, rows[..., i])
    return out.reshape(_kept(x.shape, axes, keep))


def _erf(x: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf, otypes=[np.float64])(x) if x.size else np.zeros(x.shape)


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


UNARY_FLOAT = {
    "exp": np.exp,
    "log": np.log,
    "sqrt": np.sqrt,
    "rsqrt": lambda x: 1.0 / np.sqrt(x),
    "tanh": np.tanh,
    "erf": _erf,
    "reciprocal": lambda x: 1.0 / x,
    "relu": lambda x: ieee_extremum("max", x, np.zeros_like(x)),  # relu(-0.0) = +0.0, relu(NaN) = NaN
    "sigmoid": _sigmoid,
    "silu": lambda x: x * _sigmoid(x),
}


def _gelu(x, approximate: str):
    if approximate == "tanh":
        return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def _cast(x: np.ndarray, source: str, target: str) -> np.ndarray:
    if target == "i1":
        return x != 0  # NaN is true
    if source == "i1":
        x = x.astype(np.int64)
    if target in INTS:
        return float_to_int(x, target) if source in FLOATS else x.astype(np.int64)
    return x.astype(np.float64)


def _softmax(x, axis):
    if x.size == 0:
        return x
    shifted = x - np.max(x, axis=axis, keepdims=True)
    e = np.exp(shifted)
    return e / np.sum(e, axis=axis, keepdims=True)


def _reduce(kind: str, x, axes, keep: bool, dtype: str):
    axes = tuple(axes)
    if kind in ("reduce_max", "reduce_min") and any(x.shape[a] == 0 for a in axes):
        raise OracleDomainError(f"{kind} over an empty axis")
    if dtype == "i1":
        x = x.astype(np.int64)
    if kind == "reduce_sum":
        if dtype == "i64":
            return _wrap_object(np.sum(x.astype(object), axis=axes, keepdims=keep) if x.size else np.zeros(_kept(x.shape, axes, keep), dtype=object))
        return np.sum(x, axis=axes, keepdims=keep)
    if kind == "reduce_mean":
        count = int(np.prod([x.shape[a] for a in axes]))
        return np.sum(x, axis=axes, keepdims=keep) / count if count else np.full(_kept(x.shape, axes, keep), np.nan)
    if x.size == 0:
        return np.zeros(_kept(x.shape, axes, keep), dtype=x.dtype)
    if dtype in FLOATS:
        return _fold_extremum("max" if kind == "reduce_max" else "min", x, axes, keep)
    return (np.max if kind == "reduce_max" else np.min)(x, axis=axes, keepdims=keep)


def _kept(shape, axes, keep):
    return tuple(1 if i in axes else d for i, d in enumerate(shape) if keep or i not in axes)


def _scores(q, k, mask, scale, causal):
    scores = np.matmul(q, np.swapaxes(k, -1, -2)) * scale
    if mask is not None:
        scores = scores + mask
    if causal:
        rows, cols = scores.shape[-2:]
        scores = np.where(np.triu(np.ones((rows, cols), bool), k=1), -np.inf, scores)
    return scores


def _attention(q, k, v, mask, scale, causal):
    return np.matmul(_softmax(_scores(q, k, mask, scale, causal), -1), v)


def evaluate_op(op, args: list[np.ndarray], dtypes: list[str], out_dtype: str, call, tensor_cores: bool = False) -> list[np.ndarray]:
    """`tensor_cores`: f16/bf16 attention as the GPU's tensor-core template
    computes it (`_attention_tensor_core`), not as the language does."""
    k, a = op.kind, op.attrs
    x = args[0] if args else None
    if k == "constant":
        return [np.asarray(a["value"], dtype=np.float64 if out_dtype in FLOATS else np.int64 if out_dtype in INTS else bool).reshape(a["shape"])]
    if k == "call":
        return call(a["callee"], args)
    if k in BINARY:
        return [_binary(k, args[0], args[1], dtypes[0])]
    if k == "cmp":
        p, q = args
        if dtypes[0] == "i1":
            p, q = p.astype(np.int64), q.astype(np.int64)
        return [{"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal}[a["predicate"]](p, q)]
    if k == "select":
        return [np.where(args[0], args[1], args[2])]
    if k in ("neg", "abs"):
        if dtypes[0] == "i1":
            return [x]
        return [-x if k == "neg" else np.abs(x)]
    if k == "relu" and dtypes[0] in INTS:
        return [np.where(x < 0, np.zeros_like(x), x)]
    if k in UNARY_FLOAT:
        return [UNARY_FLOAT[k](x)]
    if k == "gelu":
        return [_gelu(x, a.get("approximate", "none"))]
    if k == "cast":
        return [_cast(x, dtypes[0], a["to"])]
    if k in REDUCTIONS:
        axes = sorted(normalize_axis(ax, x.ndim) for ax in a["axes"])
        return [_reduce(k, x, axes, a.get("keepdims", False), dtypes[0])]
    if k == "softmax":
        return [_softmax(x, a.get("axis", -1))]
    if k == "layernorm":
        mean = x.mean(axis=-1, keepdims=True) if x.shape[-1] else np.full(x.shape[:-1] + (1,), np.nan)
        var = ((x - mean) ** 2).mean(axis=-1, keepdims=True) if x.shape[-1] else mean
        return [(x - mean) / np.sqrt(var + a.get("epsilon", 1e-5)) * args[1] + args[2]]
    if k == "rmsnorm":
        ms = (x * x).mean(axis=-1, keepdims=True) if x.shape[-1] else np.full(x.shape[:-1] + (1,), np.nan)
        return [x / np.sqrt(ms + a.get("epsilon", 1e-6)) * args[1]]
    if k == "matmul":
        p, q = args
        if a.get("transpose_a"):
            p = np.swapaxes(p, -1, -2)
        if a.get("transpose_b"):
            q = np.swapaxes(q, -1, -2)
        return [np.matmul(p, q)]
    if k == "attention":
        q, kk, v = args[:3]
        scale = a.get("scale", 1.0 / math.sqrt(q.shape[-1]) if q.shape[-1] else 1.0)
        mask, causal = args[3] if len(args) == 4 else None, a.get("causal", False)
        if tensor_cores and out_dtype in P_ROUNDING:
            return [_attention_tensor_core(q, kk, v, mask, scale, causal, out_dtype)]
        return [_attention(q, kk, v, mask, scale, causal)]
    if k == "reshape":
        return [x.reshape(a["shape"])]
    if k == "transpose":
        return [np.transpose(x, a["perm"])]
    if k == "broadcast_to":
        return [np.broadcast_to(x, a["shape"]).copy()]
    if k == "slice":
        index = tuple(np.arange(first, first + n * step, step) if n else np.zeros(0, dtype=np.int64) for first, step, n in slice_lengths(x.shape, a["start"], a["stop"], a["step"]))
        return [x[np.ix_(*index)] if x.ndim else x]
    if k == "concat":
        return [np.concatenate(args, axis=a["axis"])]
    if k == "gather":
        data, idx = args
        axis = normalize_axis(a.get("axis", 0), data.ndim)
        n = data.shape[axis]
        idx = np.clip(np.where(idx < 0, idx + n, idx), 0, max(n - 1, 0))
        return [np.take(data, idx, axis=axis)]
    raise ValueError(f"the oracle has no rule for {k}")


def evaluate(program: Program, inputs: list[np.ndarray], jitter: np.random.Generator | float | None = None, p_rounding: bool = False, tensor_cores: bool = False) -> list[np.ndarray]:
    """The results of @main on `inputs` (in argument order); `p_rounding`:
    the jitter runs also move narrow attention results as the GPU's
    tensor-core template may (`P_ROUNDING`); `tensor_cores`: narrow attention
    computed as that template does (`_attention_tensor_core`)."""
    env = evaluate_values(program, inputs, jitter, p_rounding, tensor_cores)
    return [env[v] for v in program.main.returns]


def evaluate_values(program: Program, inputs: list[np.ndarray], jitter: np.random.Generator | float | None = None, p_rounding: bool = False, tensor_cores: bool = False) -> dict[str, np.ndarray]:
    """Every value of @main on `inputs`, by name."""
    from fusecc.tools.fuzz.program import infer_types

    types = infer_types(program)
    functions = {f.name: f for f in program.functions}

    def run(f: Function, args: list[np.ndarray]) -> list[np.ndarray]:
        env = {name: store(value, t.dtype) for (name, t), value in zip(f.args, args)}
        for op in f.ops:
            operand_types = [types[f.name, v].dtype for v in op.operands]
            out_type = types[f.name, op.results[0]]
            with np.errstate(all="ignore"):
                values = evaluate_op(op, [env[v] for v in op.operands], operand_types, out_type.dtype, call, tensor_cores)
                if jitter is not None and not (isinstance(jitter, float) and jitter < 0) and op.kind == "cast" and out_type.dtype == "i1" and operand_types[0] in FLOATS:
                    # x != 0 of a value that cancelled to nearly 0 (1e-17 in float64, 0 in f32)
                    # depends on rounding: in these runs such a value counts as 0
                    x = env[op.operands[0]]
                    finite = np.abs(x[np.isfinite(x)])
                    scale = float(finite.max()) if finite.size else 0.0
                    values = [(x != 0) & ~(np.abs(x) <= JITTER * scale)]
                if p_rounding and jitter is not None and op.kind == "attention" and out_type.dtype in P_ROUNDING:
                    values = [values[0] + _p_rounding_move(values[0], env[op.operands[2]], out_type.dtype, jitter)]
            for name, value in zip(op.results, values):
                t = types[f.name, name]
                stored = store(value, t.dtype, jitter)
                env[name] = np.broadcast_to(stored, t.shape).copy() if stored.shape != t.shape else stored
        return env

    def call(name: str, args: list[np.ndarray]) -> list[np.ndarray]:
        env = run(functions[name], args)
        return [env[v] for v in functions[name].returns]

    return run(program.main, [np.asarray(x) for x in inputs])
