"""The numpy reference interpreter: the definition of every op's numbers.

Float tensors are computed in float32, as the spec's table says (f16/bf16
values are widened to f32, computed, and rounded back to their storage
precision). Other dialects register their ops with `@implements`; ops with
regions evaluate them through `run_block`. Constant folding reuses the same
functions, so there is one definition of each op's semantics.
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np

from fusecc.compiler.ir import Block, Operation, Value
from fusecc.compiler.types import ScalarType, TensorType, Type, bf16, round_to_bf16

Impl = Callable[[Operation, list], list]
IMPLEMENTATIONS: dict[str, Impl] = {}


class InterpreterError(Exception):
    """The program cannot be run as asked (missing inputs, wrong shapes, ...)."""


def implements(*names: str):
    def register(fn: Impl) -> Impl:
        for name in names:
            IMPLEMENTATIONS[name] = fn
        return fn

    return register


# --------------------------------------------------------------------------- storage


round_bf16 = round_to_bf16


def to_storage(array, element: ScalarType) -> np.ndarray:
    """Convert a computed array to the storage dtype of `element`."""
    array = np.asarray(array)
    # Overflow to inf (f16) and NaN-to-integer casts are the defined results, not warnings.
    with np.errstate(over="ignore", invalid="ignore"):
        # copy=False: results computed in float32 are stored as they are.
        if element.is_float:
            as32 = array.astype(np.float32, copy=False)
            if element is bf16:
                return round_bf16(as32)
            return as32.astype(element.numpy_dtype, copy=False)
        if element.is_bool:
            return array.astype(np.bool_, copy=False)
        if array.dtype.kind == "f":
            array = np.trunc(array)
        return array.astype(element.numpy_dtype, copy=False)


def compute_view(array: np.ndarray) -> np.ndarray:
    """Floats are computed in float32 whatever their storage."""
    return array.astype(np.float32) if array.dtype.kind == "f" and array.dtype != np.float32 else array


def erf(x: np.ndarray) -> np.ndarray:
    """erf in float64 to ~1e-13, then the caller rounds: numpy has none.

    Maclaurin series for |x| < 2.5 and a continued fraction for erfc above;
    both converge fast in those ranges.
    """
    x64 = np.asarray(x, dtype=np.float64)
    a = np.abs(x64)
    small = a < 2.5
    out = np.empty_like(x64)
    s = a[small]
    term = s.copy()
    total = s.copy()
    s2 = s * s
    for n in range(1, 60):
        term = term * (-s2) / n
        total = total + term / (2 * n + 1)
    out[small] = 2.0 / math.sqrt(math.pi) * total
    big = a[~small]
    # Lentz's continued fraction for erfc(z) = exp(-z²)/√π · 1/(z + 1/2/(z + 1/(z + 3/2/(z + ...))))
    frac = np.zeros_like(big)
    for k in range(60, 0, -1):
        frac = (k / 2.0) / (big + frac)
    erfc = np.exp(-big * big) / math.sqrt(math.pi) / (big + frac)
    out[~small] = 1.0 - erfc
    return np.sign(x64) * out


def _f32(fn):
    """Wrap a float unary function to compute in float32."""
    return lambda x: fn(x.astype(np.float32))


GELU_TANH_COEFF = math.sqrt(2.0 / math.pi)


def gelu(x: np.ndarray, approximate: str) -> np.ndarray:
    x = x.astype(np.float32)
    if approximate == "tanh":
        inner = np.float32(GELU_TANH_COEFF) * (x + np.float32(0.044715) * x * x * x)
        return np.float32(0.5) * x * (np.float32(1.0) + np.tanh(inner))
    return (np.float32(0.5) * x * (np.float32(1.0) + erf(x / np.float32(math.sqrt(2.0))).astype(np.float32))).astype(np.float32)


def sigmoid(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float32)
    with np.errstate(over="ignore"):
        return np.float32(1.0) / (np.float32(1.0) + np.exp(-x))


UNARY: dict[str, Callable[..., np.ndarray]] = {
    "tensor.neg": np.negative,
    "tensor.abs": np.abs,
    "tensor.exp": np.exp,
    "tensor.log": np.log,
    "tensor.sqrt": np.sqrt,
    "tensor.rsqrt": lambda x: np.float32(1.0) / np.sqrt(x),
    "tensor.tanh": np.tanh,
    "tensor.erf": lambda x: erf(x).astype(np.float32),
    "tensor.reciprocal": lambda x: np.float32(1.0) / x,
    "tensor.relu": lambda x: np.maximum(x, np.zeros((), x.dtype)),
    "tensor.sigmoid": sigmoid,
    "tensor.silu": lambda x: x * sigmoid(x),
}


def divide(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind in "iub":
        # C semantics (truncation toward zero); x/0 gives 0 rather than a trap.
        safe = np.where(b == 0, 1, b)
        q = np.floor_divide(a, safe)
        q = q + ((q < 0) & (q * safe != a))  # floor -> trunc for negative, inexact quotients
        return np.where(b == 0, 0, q).astype(np.result_type(a, b))
    return a / b


def power(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind in "iu":
        # numpy refuses negative integer exponents; C-like a**-n = trunc(1/a**n).
        negative = b < 0
        result = np.power(a, np.where(negative, 0, b))
        inverse = np.where(a == 1, 1, np.where(a == -1, np.where(b % 2 == 0, 1, -1), 0))
        return np.where(negative, inverse, result).astype(result.dtype)
    return np.power(a, b)


BINARY: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "tensor.add": np.add,
    "tensor.sub": np.subtract,
    "tensor.mul": np.multiply,
    "tensor.div": divide,
    "tensor.max": np.maximum,
    "tensor.min": np.minimum,
    "tensor.pow": power,
}

COMPARE = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal}


def result_element(op: Operation, index: int = 0) -> ScalarType:
    return op.results[index].type.element_type


@implements(*UNARY)
def _unary(op, args):
    with np.errstate(all="ignore"):
        return [to_storage(UNARY[op.name](compute_view(args[0])), result_element(op))]


@implements("tensor.gelu")
def _gelu(op, args):
    return [to_storage(gelu(compute_view(args[0]), op.attr("approximate")), result_element(op))]


@implements(*BINARY)
def _binary(op, args):
    with np.errstate(all="ignore"):
        return [to_storage(BINARY[op.name](compute_view(args[0]), compute_view(args[1])), result_element(op))]


@implements("tensor.cmp")
def _cmp(op, args):
    return [COMPARE[op.attr("predicate")](compute_view(args[0]), compute_view(args[1]))]


@implements("tensor.select")
def _select(op, args):
    return [to_storage(np.where(args[0], args[1], args[2]), result_element(op))]


@implements("tensor.cast")
def _cast(op, args):
    return [to_storage(args[0], result_element(op))]


@implements("tensor.constant")
def _constant(op, args):
    return [op.attr("value").array]


def _reduce(fn):
    def impl(op, args):
        axes = tuple(op.normalized_axes)
        x = compute_view(args[0])
        with np.errstate(all="ignore"):
            out = fn(x, axis=axes, keepdims=op.attr("keepdims"))
        return [to_storage(np.asarray(out, dtype=x.dtype) if x.dtype.kind == "f" else out, result_element(op))]

    return impl


implements("tensor.reduce_sum")(_reduce(np.sum))
implements("tensor.reduce_max")(_reduce(np.max))
implements("tensor.reduce_min")(_reduce(np.min))
implements("tensor.reduce_mean")(_reduce(np.mean))


def softmax(x: np.ndarray, axis: int) -> np.ndarray:
    x = x.astype(np.float32)
    shifted = x - np.max(x, axis=axis, keepdims=True)
    e = np.exp(shifted)
    return e / np.sum(e, axis=axis, keepdims=True)


@implements("tensor.softmax")
def _softmax(op, args):
    with np.errstate(all="ignore"):
        return [to_storage(softmax(args[0], op.attr("axis")), result_element(op))]


@implements("tensor.layernorm")
def _layernorm(op, args):
    x, gamma, beta = (a.astype(np.float32) for a in args)
    mean = np.mean(x, axis=-1, keepdims=True)
    var = np.mean(np.square(x - mean), axis=-1, keepdims=True)
    out = (x - mean) / np.sqrt(var + np.float32(op.attr("epsilon"))) * gamma + beta
    return [to_storage(out, result_element(op))]


@implements("tensor.rmsnorm")
def _rmsnorm(op, args):
    x, gamma = (a.astype(np.float32) for a in args)
    out = x / np.sqrt(np.mean(np.square(x), axis=-1, keepdims=True) + np.float32(op.attr("epsilon"))) * gamma
    return [to_storage(out, result_element(op))]


def swap_last(x: np.ndarray) -> np.ndarray:
    return np.swapaxes(x, -1, -2)


@implements("tensor.matmul")
def _matmul(op, args):
    a, b = (compute_view(x) for x in args)
    if op.attr("transpose_a"):
        a = swap_last(a)
    if op.attr("transpose_b"):
        b = swap_last(b)
    return [to_storage(np.matmul(a, b), result_element(op))]


def attention(q, k, v, mask, scale: float, causal: bool) -> np.ndarray:
    q, k, v = (x.astype(np.float32) for x in (q, k, v))
    scores = np.matmul(q, swap_last(k)) * np.float32(scale)
    if mask is not None:
        scores = scores + mask.astype(np.float32)
    if causal:
        s, t = scores.shape[-2:]
        scores = np.where(np.triu(np.ones((s, t), bool), k=1), np.float32(-np.inf), scores)
    return np.matmul(softmax(scores, -1), v)


@implements("tensor.attention")
def _attention(op, args):
    mask = args[3] if len(args) > 3 else None
    with np.errstate(all="ignore"):
        out = attention(args[0], args[1], args[2], mask, op.effective_scale(), op.attr("causal"))
    return [to_storage(out, result_element(op))]


@implements("tensor.reshape")
def _reshape(op, args):
    return [args[0].reshape(op.result.type.shape)]


# Layout results are made C-contiguous with np.asarray(order="C"), not
# np.ascontiguousarray, which turns a rank-0 array into shape (1,).


@implements("tensor.transpose")
def _transpose(op, args):
    return [np.asarray(np.transpose(args[0], op.attr("perm")), order="C")]


@implements("tensor.broadcast_to")
def _broadcast_to(op, args):
    return [np.asarray(np.broadcast_to(args[0], op.result.type.shape), order="C")]


@implements("tensor.slice")
def _slice(op, args):
    index = tuple(slice(lo, hi, st) for lo, hi, st, _ in op.bounds())
    return [np.asarray(args[0][index], order="C")]


@implements("tensor.concat")
def _concat(op, args):
    return [np.concatenate(args, axis=op.attr("axis"))]


@implements("fusion.group")
def _group(op, args, interpreter, env):
    return interpreter.run_block(op.body, args)


# --------------------------------------------------------------------------- running


class Interpreter:
    """Evaluates functions of a module with numpy."""

    def __init__(self, module: Operation):
        self.module = module
        self._active: list[str] = []

    def function(self, name: str) -> Operation:
        found = self.module.lookup(name)
        if found is None or found.name != "func.func":
            raise InterpreterError(f"no function @{name} in the module")
        return found

    def call(self, name: str, args: Sequence[np.ndarray]) -> list[np.ndarray]:
        func = self.function(name)
        inputs = func.function_type.inputs
        if len(args) != len(inputs):
            raise InterpreterError(f"@{name} takes {len(inputs)} arguments, got {len(args)}")
        checked = [check_argument(a, t, f"argument {i} of @{name}") for i, (a, t) in enumerate(zip(args, inputs))]
        if name in self._active:
            # Without control flow a recursive call never ends.
            raise InterpreterError(f"@{name} calls itself (through {' -> '.join('@' + n for n in self._active)}); recursion cannot terminate")
        self._active.append(name)
        try:
            return self.run_block(func.body, checked)
        finally:
            self._active.pop()

    def run_block(self, block: Block, args: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Run a block's ops; returns the terminator's operand values."""
        env: dict[Value, np.ndarray] = dict(zip(block.args, args))
        return self.run_ops(block, env)

    def run_ops(self, block: Block, env: dict[Value, np.ndarray]) -> list[np.ndarray]:
        for op in block:
            operands = [env[v] for v in op.operands]
            if op.has_trait(_terminator()):
                return operands
            if op.name == "func.call":
                results = self.call(op.callee, operands)
            else:
                impl = IMPLEMENTATIONS.get(op.name)
                if impl is None:
                    raise InterpreterError(f"the reference interpreter cannot run '{op.name}'")
                results = impl(op, operands) if not op.regions else impl(op, operands, self, env)
            for value, result in zip(op.results, results):
                env[value] = result
        return []


def _terminator():
    from fusecc.compiler.traits import Terminator

    return Terminator


def check_argument(array, expected: Type, what: str) -> np.ndarray:
    array = np.asarray(array)
    if isinstance(expected, TensorType):
        if tuple(array.shape) != tuple(expected.shape):
            raise InterpreterError(f"{what} has shape {list(array.shape)} but {expected} is expected")
        return to_storage(array, expected.element_type)
    return array


def random_input(t: TensorType, rng: np.random.Generator) -> np.ndarray:
    """Seeded test data: normal floats, small integers, fair booleans."""
    element = t.element_type
    if element.is_bool:
        return rng.random(t.shape) < 0.5
    if element.is_float:
        return to_storage(rng.standard_normal(t.shape, dtype=np.float32), element)
    return rng.integers(-8, 9, size=t.shape).astype(element.numpy_dtype)


def random_model_input(t: TensorType, rng: np.random.Generator) -> np.ndarray:
    """`random_input`, with float matrices of at least 64 rows (weights)
    scaled by 1/sqrt(rows) as weights are initialised, so that deep programs
    keep their values near 1 (unscaled, a transformer block's reach 1e5 and
    summation-order differences grow with them)."""
    element = t.element_type
    if not (element.is_float and len(t.shape) == 2 and t.shape[0] >= 64):
        return random_input(t, rng)
    return to_storage(rng.standard_normal(t.shape, dtype=np.float32) / np.float32(np.sqrt(t.shape[0])), element)


def evaluate(module: Operation, entry: str, args: Sequence[np.ndarray]) -> list[np.ndarray]:
    return Interpreter(module).call(entry, args)
