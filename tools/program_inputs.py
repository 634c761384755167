"""A command's program and the inputs it runs on: loading an .ir or ONNX
file, picking its entry, and gathering the entry's arguments from an .npz
(by name or position) or seeded random data. Shared by `fusecc run`,
`profile` and `bisect`; the inputs of a compiled program loaded from the
cache (which has no module) are gathered the same way, from its signature."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from fusecc.compiler.diagnostics import DiagnosticEngine, UsageError
from fusecc.compiler.ir import Operation
from fusecc.driver import frontend
from fusecc.driver.pipelines import is_loop_level
from fusecc.driver.program import entry_function as function_by_name
from fusecc.tools import model_options, run_io
from fusecc.tools.common import phase


def load(path: str, engine: DiagnosticEngine, args=None) -> Operation:
    """A program from an .ir file or an ONNX model (driver/frontend.py picks the front end)."""
    return frontend.load_program(path, engine, phase=phase, **model_options.frontend_options(args))


def entry_function(module: Operation, requested: str | None) -> Operation:
    """The function to run, or for a loop-level module its `loop.schedule`."""
    if is_loop_level(module):
        schedules = [op for op in module.body if op.name == "loop.schedule"]
        wanted = (requested or "main").lstrip("@")
        found = next((op for op in schedules if op.sym_name == wanted), None)
        if found is None and requested is None and schedules:
            found = schedules[0]
        if found is None:
            raise UsageError(f"no loop.schedule @{wanted} (schedules: {', '.join('@' + op.sym_name for op in schedules) or 'none'})")
        return found
    return function_by_name(module, requested)


@dataclass(frozen=True)
class Parameter:
    """One argument of the entry: the .npz keys that give it, in order (graph
    input name, the IR's `%name`, `argN`), how messages name it, its type."""

    keys: tuple[str, ...]
    label: str
    type: Any


def function_parameters(func: Operation) -> list[Parameter]:
    arguments = func.input_args if func.name == "loop.schedule" else func.arguments
    graph_names = frontend.input_keys(func, len(arguments))
    return [
        Parameter(tuple(k for k in (graph, arg.name_hint, f"arg{i}") if k), f"'{arg.name_hint}' (arg{i})" if arg.name_hint else f"'arg{i}'", arg.type)
        for i, (arg, graph) in enumerate(zip(arguments, graph_names))
    ]


def signature_parameters(inputs: dict[str, Any]) -> list[Parameter]:
    """The parameters of a compiled fusecc.Program (its inputs by name)."""
    return [Parameter((name, f"arg{i}"), f"'{name}' (arg{i})", t) for i, (name, t) in enumerate(inputs.items())]


def gather_inputs(func: Operation, path: str | None, random_inputs: bool, seed: int, dims: str | None = None) -> list[np.ndarray]:
    """The entry's arguments (gather_parameters)."""
    return gather_parameters(func.sym_name, function_parameters(func), path, random_inputs, seed, dims)


def gather_parameters(entry: str, parameters: Sequence[Parameter], path: str | None, random_inputs: bool, seed: int, dims: str | None = None) -> list[np.ndarray]:
    """The arguments of @entry: from the .npz by name (`x` for `%x`), else as
    `argN`, else (with --random-inputs) seeded random data; a dynamic dim of
    random data takes its size from --dims or from a given input."""
    from fusecc.runtime.reference import random_input

    provided = run_io.read_npz(path) if path is not None else {}
    rng = np.random.default_rng(seed)
    values, used, randomised = [], set(), []
    for parameter in parameters:
        for key in parameter.keys:
            if key in provided:
                values.append(check_input(provided[key], parameter.type, f"input {parameter.label} of @{entry}"))
                used.add(key)
                break
        else:
            if not random_inputs:
                held = f"; {run_io.describe_keys(path, provided)}" if path is not None else ""
                index = len(values)
                raise UsageError(f"missing input {parameter.label} ({parameter.type}){held}; give it in --inputs by name or position (arg{index}), or use --random-inputs")
            known = provided_sizes([p.type for p in parameters], values)
            values.append(random_input(sized(parameter.type, entry, known, dims, parameter.label), rng))
            randomised.append(parameter.label)
    for key in sorted(set(provided) - used):
        print(f"fusecc run: warning: '{key}' in '{path}' is not an argument of @{entry}; ignored", file=sys.stderr)
    if randomised:
        print(f"fusecc run: note: random data (seed {seed}) for {', '.join(randomised)}", file=sys.stderr)
    return values


def check_input(array: np.ndarray, t, what: str) -> np.ndarray:
    """The array converted to the argument's type (driver/input_check.py).
    A conversion that changes values (float64 -> f32, int64 beyond i32) is
    made with a warning that says how many values change and by how much;
    one that changes none (int64 ids that fit i32) is silent."""
    import warnings

    from fusecc.driver.input_check import LossyConversionWarning, check_input as checked

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", LossyConversionWarning)
        converted = checked(array, t, what, lossy="warn")
    for warning in caught:
        if issubclass(warning.category, LossyConversionWarning):
            print(f"fusecc run: warning: {warning.message}", file=sys.stderr)
        else:
            warnings.warn_explicit(warning.message, warning.category, warning.filename, warning.lineno)
    return converted


def provided_sizes(types, values) -> dict:
    """The dynamic dims' sizes the inputs given so far show."""
    sizes = {}
    for t, array in zip(types, values):
        for d, n in zip(getattr(t, "shape", ()), np.shape(array)):
            if type(d) is not int and d.is_Symbol:
                sizes.setdefault(d, n)
    return sizes


def sized(t, entry: str, known: dict, dims: str | None, label: str):
    """`t` with its dynamic dims at the sizes --dims (or another input) gives."""
    if getattr(t, "is_static", True):
        return t
    from fusecc.compiler.dims import dim_symbol, evaluate_shape, free_symbols, parse_hints

    try:
        given = {dim_symbol(k): v for k, v in parse_hints(dims or "").items()}
    except ValueError as exc:
        raise UsageError(f"--dims: {str(exc).replace('shape hint', 'dim size')}") from None
    sizes = {**known, **given}
    missing = sorted(str(s) for s in free_symbols(t.shape) if s not in sizes)
    if missing:
        raise UsageError(f"input {label} of @{entry} is {t} with dynamic dims; give their sizes for --random-inputs with --dims {','.join(f'{m}=N' for m in missing)}")
    return t.with_shape(evaluate_shape(t.shape, sizes))


__all__ = ["Parameter", "check_input", "entry_function", "function_parameters", "gather_inputs", "gather_parameters", "load", "signature_parameters"]
