"""The numpy reference interpreter: the oracle the compiled targets are
checked against.

Each op's numbers are its own `evaluate` hook (`dialects/tensor`: numpy, floats
computed in float32 and rounded to their storage type); this module walks a
function, feeds each op its operands, and checks every result against the
op's declared type. It never uses the lowering. Ops with regions
(`fusion.group`) run their body through `run_block`.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from fusecc.compiler.diagnostics import InternalCompilerError, error
from fusecc.compiler.dims import evaluate_dim, is_static, is_unbound, runtime_checks
from fusecc.compiler.ir import Block, Operation, Value
from fusecc.compiler.traits import Terminator
from fusecc.compiler.types import TensorType, Type
from fusecc.dialects.tensor import DomainError, formulas
from fusecc.dialects.tensor.numerics import compute_view, erf, round_bf16, to_storage

__all__ = [
    "Interpreter",
    "InterpreterError",
    "ResultTypeMismatch",
    "attention",
    "check_argument",
    "compute_view",
    "erf",
    "evaluate",
    "gelu",
    "random_input",
    "round_bf16",
    "softmax",
    "to_storage",
]


class InterpreterError(Exception):
    """The program cannot be run as asked (missing inputs, wrong shapes, ...)."""


class ResultTypeMismatch(Exception):
    """An op computed a value that disagrees with its declared type: a bug in
    the op's evaluation or in a pass, never the user's."""


# Ops with regions: name -> fn(op, operands, interpreter, env) -> results.
RegionImpl = Callable[[Operation, list, "Interpreter", dict], list]
REGION_OPS: dict[str, RegionImpl] = {
    "fusion.group": lambda op, args, interpreter, env: interpreter.run_block(op.body, args),
}


# --------------------------------------------------------------------------- running


class Interpreter:
    """Evaluates functions of a module with numpy."""

    def __init__(self, module: Operation):
        self.module = module
        self._active: list[str] = []
        # Per active call: its dim symbols' sizes (compiler/dims.py).
        self._bindings: list[dict] = []
        self._checks: dict[str, list] = {}

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
        bindings = self.bind_dims(func, checked)
        self._active.append(name)
        self._bindings.append(bindings)
        try:
            return self.run_block(func.body, checked)
        finally:
            self._active.pop()
            self._bindings.pop()

    def bind_dims(self, func: Operation, args: Sequence[np.ndarray]) -> dict:
        """The sizes of the function's dim symbols in this call, after its
        runtime checks (each located at the op that needs it) pass."""
        inputs = func.function_type.inputs
        if all(not isinstance(t, TensorType) or t.is_static for t in inputs):
            return {}
        bindings: dict = {}
        first_seen: dict = {}
        for index, (array, t) in enumerate(zip(args, inputs)):
            if not isinstance(t, TensorType):
                continue
            for axis, (d, size) in enumerate(zip(t.shape, array.shape)):
                if is_static(d) or not d.is_Symbol:
                    continue
                where = f"dim {axis} of argument {index} ({func.body.args[index].name_hint or index})"
                if size == 0:
                    raise error(func.location, f"{where} is 0, but a dynamic dim ('{d}') must be at least 1 (docs/dynamic-shapes.md)")
                if d in bindings and bindings[d] != size:
                    raise error(func.location, f"dim '{d}' is {bindings[d]} in {first_seen[d]} but {size} in {where}")
                bindings.setdefault(d, size)
                first_seen.setdefault(d, where)
        name = func.sym_name
        if name not in self._checks:
            self._checks[name] = runtime_checks(func)
        for check in self._checks[name]:
            if not check.holds(bindings):
                raise error(check.location, check.describe(bindings))
        return bindings

    def run_block(self, block: Block, args: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Run a block's ops; returns the terminator's operand values."""
        env: dict[Value, np.ndarray] = dict(zip(block.args, args))
        return self.run_ops(block, env)

    def run_ops(self, block: Block, env: dict[Value, np.ndarray]) -> list[np.ndarray]:
        for op in block:
            operands = [env[v] for v in op.operands]
            if op.has_trait(Terminator):
                return operands
            results = self.run_op(op, operands, env)
            if len(results) != len(op.results):
                raise InternalCompilerError(f"the reference evaluation of '{op.name}'{at(op)}", ResultTypeMismatch(f"{len(results)} results for {len(op.results)} declared"))
            for value, result in zip(op.results, results):
                check_result(op, self.concrete(value.type), result)
                env[value] = result
        return []

    def concrete(self, t: Type) -> Type:
        """`t` with its dynamic dims at this call's sizes; `?` left unbound
        (a call's results) stays, and `check_result` skips it."""
        if not isinstance(t, TensorType) or t.is_static:
            return t
        bindings = self._bindings[-1] if self._bindings else {}
        return TensorType([d if is_static(d) or is_unbound(d) else evaluate_dim(d, bindings) for d in t.shape], t.element_type)

    def run_op(self, op: Operation, operands: list, env: dict) -> list[np.ndarray]:
        if op.name == "func.call":
            return self.call(op.callee, operands)
        if op.regions:
            impl = REGION_OPS.get(op.name)
            if impl is None:
                raise InterpreterError(f"the reference interpreter cannot run '{op.name}'")
            return impl(op, operands, self, env)
        if not hasattr(op, "evaluate"):
            raise InterpreterError(f"the reference interpreter cannot run '{op.name}'")
        try:
            with np.errstate(all="ignore"):  # NaN and inf are values like any other here
                if all(not isinstance(r.type, TensorType) or r.type.is_static for r in op.results):
                    return op.evaluate(operands)
                return op.evaluate_dynamic(operands, [self.concrete(r.type).shape for r in op.results])
        except DomainError as exc:
            raise error(op.location, f"'{op.name}' cannot run on these operands: {exc}") from None


def check_result(op: Operation, expected: Type, array) -> None:
    """Shape, rank and storage dtype of `array` against the declared type."""
    if not isinstance(expected, TensorType):
        return
    problem = None
    if not isinstance(array, np.ndarray):
        problem = f"a {type(array).__name__}, not an array"
    elif array.ndim != expected.rank:
        problem = f"rank {array.ndim} (shape {list(array.shape)})"
    elif not all(type(d) is not int or d == n for d, n in zip(expected.shape, array.shape)):
        problem = f"shape {list(array.shape)}"
    elif array.dtype != expected.element_type.numpy_dtype:
        problem = f"dtype {array.dtype}"
    if problem is not None:
        mismatch = ResultTypeMismatch(f"'{op.name}' computed {problem} for its declared type {expected}")
        raise InternalCompilerError(f"the reference evaluation of '{op.name}'{at(op)}", mismatch)


def at(op: Operation) -> str:
    position = op.location.file_line_col()
    return f" at {position.file}:{position.line}:{position.col}" if position else ""


def check_argument(array, expected: Type, what: str) -> np.ndarray:
    array = np.asarray(array)
    if isinstance(expected, TensorType):
        # A `?` dim takes any size here; the call binds and checks it.
        if array.ndim != expected.rank or not all(type(d) is not int or d == n for d, n in zip(expected.shape, array.shape)):
            raise InterpreterError(f"{what} has shape {list(array.shape)} but {expected} is expected")
        return to_storage(array, expected.element_type)
    return array


def evaluate(module: Operation, entry: str, args: Sequence[np.ndarray]) -> list[np.ndarray]:
    return Interpreter(module).call(entry, args)


def random_input(t: TensorType, rng: np.random.Generator) -> np.ndarray:
    """Seeded test data: normal floats, small integers, fair booleans."""
    element = t.element_type
    if element.is_bool:
        return rng.random(t.shape) < 0.5
    if element.is_float:
        return to_storage(rng.standard_normal(t.shape, dtype=np.float32), element)
    return rng.integers(-8, 9, size=t.shape).astype(element.numpy_dtype)


# --------------------------------------------------------------------------- the composite formulas on arrays
# The ops' own formulas (dialects/tensor/formulas.py) in float32 numpy, for
# tests and benchmarks that check a kernel against one op.


def gelu(x: np.ndarray, approximate: str = "none") -> np.ndarray:
    with np.errstate(all="ignore"):
        return np.asarray(formulas.gelu(formulas.NUMPY, compute_view(np.asarray(x, np.float32)), approximate))


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    x = compute_view(np.asarray(x, np.float32))
    with np.errstate(all="ignore"):
        return np.asarray(formulas.softmax(formulas.NUMPY, x, axis % x.ndim))


def attention(q, k, v, mask, scale: float, causal: bool) -> np.ndarray:
    q, k, v = (np.asarray(a, np.float32) for a in (q, k, v))
    mask = None if mask is None else np.asarray(mask, np.float32)
    rows, cols = q.shape[-2], k.shape[-2]
    rank = max(q.ndim, k.ndim, v.ndim)
    with np.errstate(all="ignore"):
        return np.asarray(formulas.attention(formulas.NUMPY, q, k, v, mask, scale, causal, rows, cols, rank - 1))
