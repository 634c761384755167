"""Running a case on each target and classing the outcome.

Classes of a valid program, per target:
  ok        every result meets the oracle (compare.py); for cuda-emit, the
            CUDA C and its manifest were emitted
  mismatch  a result differs (value, shape, dtype or count)
  crash     an internal compiler error (exit 2) or any other exception
  refused   a located error or usage error (exit 1) for a valid program
  sanitizer the harness's sanitizer (runtime/cuda/cpu_harness/sanitizer.py)
            found a race, an uninitialised or out-of-bounds access, a
            divergent barrier or a result that depends on the threads' order
Classes of a deliberately invalid program (a result type made wrong):
  rejected          a located error at the broken line (what the spec asks)
  rejected-elsewhere an error, but not located at the broken line
  accepted-invalid  no error at all
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
import traceback
import warnings
from dataclasses import dataclass, field

import numpy as np

from fusecc.tools.fuzz import oracle
from fusecc.tools.fuzz.compare import compare_results, stable_mask
from fusecc.tools.fuzz.generate import Case
from fusecc.tools.fuzz.program import RESOURCE_FILE, Program, infer_types, print_program, resource_arrays

TARGETS = ("reference", "cpu", "cuda-emit", "harness")
SOURCE = "fuzz.ir"


@dataclass
class Outcome:
    seed: int
    features: list[str]
    classes: dict[str, str] = field(default_factory=dict)  # target -> class
    details: dict[str, str] = field(default_factory=dict)

    def failed(self) -> list[str]:
        return [t for t, c in self.classes.items() if c not in ("ok", "rejected", "skipped")]


def _parse(text: str, source: str = SOURCE):
    from fusecc.compiler.parser import parse_module
    from fusecc.compiler.verifier import verify

    module = parse_module(text, source)
    verify(module)
    return module


@contextlib.contextmanager
def source_path(program: Program):
    """The path to parse the program's text as: with `dense_resource`
    constants, a file in a temporary folder beside the resource file the
    module names (docs/resources.md), as `fusecc run` would find it."""
    arrays = resource_arrays(program)
    if not arrays:
        yield SOURCE
        return
    with tempfile.TemporaryDirectory(prefix="fusecc-fuzz-") as folder:
        np.savez(os.path.join(folder, RESOURCE_FILE), **arrays)
        yield os.path.join(folder, SOURCE)


def run_reference(text: str, inputs: list[np.ndarray], source: str = SOURCE) -> list[np.ndarray]:
    from fusecc.runtime.reference import evaluate

    return evaluate(_parse(text, source), "main", inputs)


def run_cpu(text: str, inputs: list[np.ndarray], source: str = SOURCE) -> list[np.ndarray]:
    from fusecc.compiler.diagnostics import DiagnosticEngine
    from fusecc.driver import targets

    return targets.get("cpu").run(_parse(text, source), "main", inputs, DiagnosticEngine())


class SanitizerFinding(Exception):
    """The sanitized harness run reported a finding (its first, and how many)."""


def run_harness(text: str, inputs: list[np.ndarray], source: str = SOURCE) -> list[np.ndarray]:
    """The exact CUDA C the CUDA target emits, compiled by the host C++
    compiler and run on the CPU under the harness's sanitizer (what
    `fusecc run --target cuda-sim --sanitize` does): any finding fails."""
    from fusecc.compiler.diagnostics import DiagnosticEngine
    from fusecc.compiler.pass_manager import PassContext
    from fusecc.runtime.cuda.cpu_harness.sanitizer import run_sanitized

    try:
        from fusecc.driver.cuda_target import compile_program
    except ImportError:  # where it lived before the CUDA target's split
        from fusecc.driver.cuda_level import compile_program

    cuda_c, manifest = compile_program(_parse(text, source), "main", "sm_90", PassContext(diagnostics=DiagnosticEngine(), target="h200"))
    # -O0: a fuzz program is small and built once, so g++'s time is most of a
    # harness run, and -O0 halves it (the same bits: loader.CXX_FLAGS).
    outputs, findings = run_sanitized(manifest, cuda_c, inputs, opt_level="-O0")
    if findings:
        raise SanitizerFinding(f"{len(findings)} finding(s); first: {str(findings[0]).splitlines()[0][:250]}")
    return [outputs[spec.name] for spec in manifest.outputs]


def emit_cuda(text: str, inputs: list[np.ndarray], source: str = SOURCE) -> None:
    """The CUDA C and manifest `fusecc x.ir -o kernels.cu` writes, not run
    (50 ms a program, so every seed gets it; the harness runs a subset)."""
    from fusecc.compiler.diagnostics import DiagnosticEngine
    from fusecc.compiler.pass_manager import PassContext

    try:
        from fusecc.driver.cuda_target import compile_program
    except ImportError:
        from fusecc.driver.cuda_level import compile_program
    compile_program(_parse(text, source), "main", "sm_90", PassContext(diagnostics=DiagnosticEngine(), target="h200"))


RUNNERS = {"reference": run_reference, "cpu": run_cpu, "cuda-emit": emit_cuda, "harness": run_harness}


def classify_exception(exc: BaseException) -> tuple[str, str]:
    from fusecc.compiler.diagnostics import DiagnosticError, InternalCompilerError, UsageError

    if isinstance(exc, SanitizerFinding):
        return "sanitizer", str(exc)
    if isinstance(exc, InternalCompilerError):
        return "crash", str(exc).splitlines()[0][:300]
    if isinstance(exc, (DiagnosticError, UsageError)):
        return "refused", str(exc).splitlines()[0][:300]
    frame = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
    where = f" at {os.path.basename(frame.filename)}:{frame.lineno}" if frame else ""
    return "crash", f"{type(exc).__name__}: {str(exc).splitlines()[0][:250] if str(exc) else ''}{where}"


def expected_results(case: Case, p_rounding: bool = False):
    """(oracle results, stability masks, result dtypes); `p_rounding`: the
    masks also leave out what the GPU's rounding of attention
    probabilities may move (oracle.P_ROUNDING; for the harness)."""
    program = case.program
    types = infer_types(program)
    dtypes = [types["main", v].dtype for v in program.main.returns]
    expected = oracle.evaluate(program, case.inputs)
    # all up, all down (a last rounding near its boundary is caught whichever side it lies),
    # and at random (ops moved different ways)
    jittered = [oracle.evaluate(program, case.inputs, jitter=j, p_rounding=p_rounding) for j in (1.0, -1.0, np.random.default_rng(case.seed))]
    if p_rounding:  # and the rounding itself, as the template makes it
        jittered.append(oracle.evaluate(program, case.inputs, tensor_cores=True))
    masks = [stable_mask(e, [j[i] for j in jittered], d) for i, (e, d) in enumerate(zip(expected, dtypes))]
    return expected, masks, dtypes


def has_narrow_attention(case: Case) -> bool:
    types = infer_types(case.program)
    return any(op.kind == "attention" and types[f.name, op.results[0]].dtype in oracle.P_ROUNDING for f in case.program.functions for op in f.ops)


def run_case(case: Case, targets=("reference", "cpu"), invalid: bool = False) -> Outcome:
    outcome = Outcome(case.seed, case.features)
    text = print_program(case.program)
    expected, masks, dtypes = expected_results(case)
    for target in targets:
        try:
            with warnings.catch_warnings(), source_path(case.program) as source:
                warnings.simplefilter("ignore", RuntimeWarning)  # numpy's, on NaN and empty inputs
                got = RUNNERS[target](text, [x.copy() for x in case.inputs], source)
        except Exception as exc:  # noqa: BLE001 - every failure is a finding to class
            outcome.classes[target], outcome.details[target] = classify_exception(exc)
            continue
        if got is None:  # emitted, nothing to compare
            outcome.classes[target] = "ok"
            continue
        if target == "harness" and has_narrow_attention(case):  # the GPU's tensor-core attention (oracle.P_ROUNDING)
            gpu_expected, gpu_masks, _ = expected_results(case, p_rounding=True)
            verdict = compare_results(got, gpu_expected, gpu_masks, dtypes)
        else:
            verdict = compare_results(got, expected, masks, dtypes)
        outcome.classes[target] = "ok" if verdict.ok else "mismatch"
        if not verdict.ok:
            outcome.details[target] = verdict.detail
    if invalid:
        outcome.classes["invalid"], outcome.details["invalid"] = check_invalid_variant(case)
    return outcome


# --------------------------------------------------------------------------- invalid programs

_RESULT_TYPE = re.compile(r"-> tensor<([0-9x]*)(f32|f16|bf16|i32|i64|i1)>$")
_AXIS_ATTR = re.compile(r"\b(axis = -?\d+|axes = \[[-0-9, ]*\]|perm = \[[0-9, ]*\])")


def run_seed(seed: int, targets: list[str], invalid: bool, num_ops: int | None) -> Outcome:
    """One seed's case on `targets`, in a worker process (importable by name:
    the fuzzer's workers start from a fork server)."""
    from fusecc.tools.fuzz.generate import generate

    warnings.simplefilter("ignore")
    return run_case(generate(seed, num_ops), targets, invalid=invalid)


def invalid_variant(case: Case) -> tuple[str, int, bool] | None:
    """The program's text with one op made invalid, the line of that op, and
    whether the error must be reported at that very line: an axis out of
    range or a bad permutation (the op's own verifier), else a declared
    result type made wrong (its last dim grown by one, or its element type
    changed; the parser may report it where the value is used, whose
    declared type then disagrees)."""
    lines = print_program(case.program).splitlines()
    rng = np.random.default_rng(case.seed)
    with_axes = [i for i, line in enumerate(lines) if " = tensor." in line and _AXIS_ATTR.search(line)]
    if with_axes and rng.random() < 0.5:
        i = int(rng.choice(with_axes))
        match = _AXIS_ATTR.search(lines[i])
        wrong = {"axis": "axis = 9", "axes": "axes = [-9]", "perm": "perm = [0, 0]"}[match.group(1).split(" ")[0]]
        lines[i] = lines[i][: match.start()] + wrong + lines[i][match.end() :]
        return "\n".join(lines) + "\n", i + 1, True
    candidates = [i for i, line in enumerate(lines) if " = tensor." in line and "tensor.constant" not in line and _RESULT_TYPE.search(line)]
    casts = {i for i in candidates if "tensor.cast" in lines[i]}  # a cast's result element type is free
    # a broadcast_to may grow a dim of 1, and a reshape of nothing takes any empty shape: change their element type
    type_only = {i for i in candidates if "tensor.broadcast_to" in lines[i] or "tensor.reshape" in lines[i]}
    if not candidates:
        return None
    candidates = [i for i in candidates if i not in casts or _RESULT_TYPE.search(lines[i]).group(1)]
    if not candidates:
        return None
    i = int(rng.choice(candidates))
    match = _RESULT_TYPE.search(lines[i])
    dims, dtype = match.group(1), match.group(2)
    if dims and (rng.random() < 0.6 or i in casts) and i not in type_only:
        parts = dims.rstrip("x").split("x")
        parts[-1] = str(int(parts[-1]) + 1)
        wrong = f"-> tensor<{'x'.join(parts)}x{dtype}>"
    else:
        wrong = f"-> tensor<{dims}{'i32' if dtype != 'i32' else 'f32'}>"
    lines[i] = lines[i][: match.start()] + wrong
    return "\n".join(lines) + "\n", i + 1, False


def check_invalid_variant(case: Case) -> tuple[str, str]:
    from fusecc.compiler.diagnostics import DiagnosticError

    variant = invalid_variant(case)
    if variant is None:
        return "skipped", "no op to break"
    text, line, here = variant
    try:
        with source_path(case.program) as source:
            _parse(text, source)
    except DiagnosticError as exc:
        position = exc.diagnostic.location.file_line_col()
        if position is not None and (position.line == line or not here):
            return "rejected", f"line {line} broken; {position.line}:{position.col}: {exc.diagnostic.message[:200]}"
        return "rejected-elsewhere", f"line {line} broken, error at {position}: {exc.diagnostic.message[:200]}"
    except Exception as exc:  # noqa: BLE001
        return classify_exception(exc)
    return "accepted-invalid", f"line {line}: {text.splitlines()[line - 1].strip()[:200]}"
