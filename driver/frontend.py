"""Loading a program from a file: the one place that picks the front end.

`.onnx` files go through the ONNX importer (`fusecc.frontends.onnx`); every
other file is tensor IR text, parsed and verified. The tools call
`load_program` wherever they accept a program, so an ONNX model stands
wherever an `.ir` does.
"""

from __future__ import annotations

import contextlib
import sys
from typing import Callable, ContextManager

from fusecc.compiler.diagnostics import DiagnosticEngine, UsageError
from fusecc.compiler.ir import Operation

ONNX_SUFFIXES = (".onnx",)
TORCH_EXPORT_SUFFIXES = (".pt2",)


def is_onnx(path: str) -> bool:
    return path.lower().endswith(ONNX_SUFFIXES)


def is_torch_export(path: str) -> bool:
    return path.lower().endswith(TORCH_EXPORT_SUFFIXES)


def import_torch_export(path: str) -> Operation:
    """A `torch.export.save`d program (.pt2) as a module; weights become
    named constants (fusecc.frontends.torch, docs/torch.md)."""
    try:
        import torch
    except ImportError:
        raise UsageError(f"'{path}' is a torch.export program; reading it needs PyTorch: pip install 'fusecc[torch]'") from None
    from fusecc.frontends.torch import import_exported

    try:
        program = torch.export.load(path)
    except FileNotFoundError:
        raise UsageError(f"could not open input file '{path}': no such file") from None
    except Exception as exc:  # torch raises many kinds for a file that is not a .pt2
        raise UsageError(f"'{path}' is not a torch.export program ({type(exc).__name__}: {exc})") from None
    return import_exported(program).module


def read_source(path: str) -> tuple[str, str]:
    """(text, display name) of a file, or of stdin for '-'."""
    if path == "-":
        return sys.stdin.read(), "<stdin>"
    try:
        with open(path, encoding="utf-8") as f:
            return f.read(), path
    except FileNotFoundError:
        raise UsageError(f"could not open input file '{path}': no such file") from None
    except IsADirectoryError:
        raise UsageError(f"could not open input file '{path}': it is a directory") from None
    except UnicodeDecodeError as exc:
        raise UsageError(f"input file '{path}' is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise UsageError(f"could not open input file '{path}': {exc.strerror}") from None


def _no_phase(name: str) -> ContextManager:
    return contextlib.nullcontext()


def import_onnx(path: str, shapes: dict[str, tuple[int, ...]] | None = None, memory_budget: int | None = None):
    """The ONNX importer's result (module, input and output names, timings)."""
    from fusecc.frontends.onnx import import_onnx as run_importer

    return run_importer(path, shapes, memory_budget)


def load_program(
    path: str,
    engine: DiagnosticEngine,
    shapes: dict[str, tuple[int, ...]] | None = None,
    memory_budget: int | None = None,
    phase: Callable[[str], ContextManager] = _no_phase,
) -> Operation:
    """A verified module from an `.ir` text file or an `.onnx` model.
    `phase(name)` wraps each step (the tools turn crashes inside it into
    internal errors naming the step)."""
    if is_onnx(path):
        with phase("the ONNX importer"):
            return import_onnx(path, shapes, memory_budget).module
    from fusecc.compiler.parser import parse_module
    from fusecc.compiler.verifier import verify

    text, filename = read_source(path)
    engine.sources.add(filename, text)
    with phase("the parser"):
        module = parse_module(text, filename)
    with phase("the verifier"):
        verify(module)
    if shapes:  # the `?` dims of a .ir program at fixed sizes (driver/specialise.py)
        from fusecc.driver.specialise import dims_of_shapes, specialise

        specialise(module, dims_of_shapes(module, shapes))
        with phase("the verifier"):
            verify(module)
    return module


def parse_shapes(specs: list[str] | None) -> dict[str, tuple[int, ...]]:
    """`--shape NAME=DIMS` options (dims as 1x128 or 1,128) as a dict."""
    shapes: dict[str, tuple[int, ...]] = {}
    for spec in specs or ():
        name, sep, dims = spec.partition("=")
        try:
            values = tuple(int(d) for d in dims.replace(",", "x").split("x") if d.strip() != "") if sep else None
        except ValueError:
            values = None
        if not name or values is None or any(v < 0 for v in values):
            raise UsageError(f"--shape '{spec}' is not NAME=DIMS (for example --shape input_ids=1x128)")
        shapes[name] = values
    return shapes


# --------------------------------------------------------------------------- names of an imported model's inputs and outputs

INPUT_NAMES_ATTR = "onnx.inputs"  # the importer's names (fusecc.frontends.onnx.importer)
OUTPUT_NAMES_ATTR = "onnx.outputs"
TORCH_INPUT_NAMES_ATTR = "torch.inputs"  # fusecc.frontends.torch.importer: the FX graph's names
TORCH_OUTPUT_NAMES_ATTR = "torch.outputs"


def _names(func: Operation, attr: str, count: int) -> list[str] | None:
    found = func.attributes.get(attr)
    if found is None or func.name != "func.func":
        return None
    names = found.value if isinstance(found.value, list) else None
    if names is None or not all(isinstance(n, str) for n in names):
        return None
    return names if len(names) == count else None


def input_keys(func: Operation, count: int) -> list[str | None]:
    """Per argument, the graph input name it came from (None for .ir programs)."""
    return _names(func, INPUT_NAMES_ATTR, count) or _names(func, TORCH_INPUT_NAMES_ATTR, count) or [None] * count


def result_keys(func: Operation, count: int) -> list[str]:
    """The npz keys of the results: graph output names, else result0, result1, ..."""
    return _names(func, OUTPUT_NAMES_ATTR, count) or _names(func, TORCH_OUTPUT_NAMES_ATTR, count) or [f"result{i}" for i in range(count)]


def save_imported(module: Operation, path: str, weights: str | None = None, inline: bool = False) -> None:
    """Write an imported module as .ir text; constants over 1 KiB go to a
    safetensors file (`dense_resource`), unless `inline`."""
    from fusecc.compiler.resources import save_module

    try:
        # With locations: the .ir keeps each op's ONNX node name.
        save_module(module, path, weights, externalize_bytes=None if inline else 1024, debuginfo=True)
    except OSError as exc:
        raise UsageError(f"could not write '{exc.filename or path}': {exc.strerror}") from None
