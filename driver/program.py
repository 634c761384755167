"""Compile once, run many: the program behind `fusecc.compile`.

    prog = fusecc.compile("model.ir", target="cpu")
    out = prog(x=x, mask=mask)        # {"result0": array}; positional arguments work too
    prog.report(); prog.kernels; prog.source("llvm"); prog.stats.compilations

A `Program` holds the compiled form of one entry function: for the CPU the
JIT-compiled kernels and their schedule, for CUDA the prepared launches,
for the reference nothing (it interprets the tensor program per call).
Inputs are checked by name, shape and dtype (driver/input_check.py). Problems in
the model raise `CompileError`, whose text is the located diagnostic
(`model.ir:3:50: error: ...` with the source line); problems with a call
raise `InputError`.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from fusecc.compiler.diagnostics import DiagnosticEngine, DiagnosticError, SourceManager, UsageError, render
from fusecc.compiler.ir import Operation
from fusecc.driver.input_check import InputError, check_input

TARGETS = ("cpu", "cuda", "reference")


def verify_each() -> bool:
    """Verify the IR after every pass: with $FUSECC_VERIFY_EACH=1 (the test
    suite sets it; `fusecc-opt` verifies each pass by default). Off, a
    compile verifies the model when it is read and the lowered module once,
    after the pipeline: invalid IR is an internal error either way."""
    return os.environ.get("FUSECC_VERIFY_EACH", "") not in ("", "0")


class CompileError(DiagnosticError):
    """A problem in the model, at a source position (or an ONNX node): its
    str() is the rendered diagnostic, `file:line:col: error: message`."""

    def __init__(self, diagnostic, rendered: str):
        super().__init__(diagnostic)
        self.rendered = rendered

    def __str__(self) -> str:
        return self.rendered


@dataclass
class Stats:
    compilations: int = 0  # times the module was compiled to code (1: calls reuse it)
    kernels: int = 0  # kernels launched by a call (0 on the reference)
    functions: int = 0  # compiled functions: identical kernels share one
    calls: int = 0
    compile_seconds: float = 0.0
    phases: dict[str, float] = field(default_factory=dict)
    from_cache: bool = False  # the compiled program was loaded from the disk cache (driver/program_cache.py)


@dataclass
class _Signature:
    names: list[str]  # argument names, as accepted by keyword
    types: list[Any]
    result_names: list[str]


def _load(model, engine: DiagnosticEngine, shapes, resources) -> tuple[Operation, bool]:
    """The verified module, and whether it read files beside the model (ONNX external data)."""
    from fusecc.driver.frontend import import_onnx, is_onnx, load_program, read_source

    if isinstance(model, Operation):
        if shapes:
            raise UsageError("shapes= specialises an ONNX model's symbolic dims; a Module has static shapes")
        from fusecc.compiler.verifier import verify

        module = model.clone()
        verify(module)
        return module, False
    if not isinstance(model, (str, os.PathLike)):
        raise UsageError(f"fusecc.compile takes a path (.ir or .onnx) or a Module, not {type(model).__name__}")
    path = os.fspath(model)
    if is_onnx(path):
        imported = import_onnx(path, dict(shapes or {}))
        return imported.module, imported.external_data
    if resources is None:
        return load_program(path, engine, shapes=dict(shapes or {})), False
    from fusecc.compiler.parser import parse_module
    from fusecc.compiler.verifier import verify

    text, filename = read_source(path)
    engine.sources.add(filename, text)
    module = parse_module(text, filename, resource_file=os.fspath(resources))  # the caller's file: anywhere
    verify(module)
    return module, True


def entry_function(module: Operation, requested: str | None) -> Operation:
    """The function `requested` (with or without @), else @main, else the first."""
    functions = module.functions()
    if not functions:
        raise UsageError("the module has no functions")
    if requested is not None:
        found = module.lookup(requested.lstrip("@"))
        if found is None or found.name != "func.func":
            raise UsageError(f"no function @{requested.lstrip('@')} (functions: {', '.join('@' + f.sym_name for f in functions)})")
        return found
    return module.lookup("main") or functions[0]


def _signature(func: Operation) -> _Signature:
    from fusecc.driver.frontend import input_keys, result_keys

    arguments = func.arguments
    onnx_names = input_keys(func, len(arguments))
    names = [onnx or arg.name_hint or f"arg{i}" for i, (arg, onnx) in enumerate(zip(arguments, onnx_names))]
    results = func.attr("function_type").results
    return _Signature(names, [a.type for a in arguments], result_keys(func, len(results)))


class Program:
    """One entry function of a model, compiled for a target."""

    def __init__(self, model, target: str = "cpu", shapes: Mapping[str, tuple[int, ...]] | None = None, options: Mapping[str, Any] | None = None):
        options = dict(options or {})
        self.target = target
        self.entry: str = ""
        self.lossy: str = options.pop("lossy", "warn")
        self._threads = options.pop("threads", None)
        self._hardware = options.pop("hardware", None) or {"cpu": "cpu", "reference": "cpu"}.get(target, "h200")
        entry = options.pop("entry", None)
        resources = options.pop("resources", None)
        self._allow_tf32 = bool(options.pop("allow_tf32", False))  # CUDA code: f32 matmuls on TF32 tensor cores
        if options:
            raise UsageError(f"unknown option{'s' * (len(options) > 1)} {', '.join(sorted(options))}; known: entry, threads, hardware, lossy, resources, allow_tf32")
        if self._allow_tf32 and target == "reference":
            raise UsageError("allow_tf32 changes the CUDA code of f32 matmuls; the reference target compiles nothing")
        if target not in TARGETS:
            raise UsageError(f"unknown target '{target}'; choose one of {', '.join(TARGETS)}")
        self.stats = Stats()
        self._engine = DiagnosticEngine(SourceManager())
        self._compiled = None  # CPU: CompiledProgram; CUDA: the run function
        self._loop_module: Operation | None = None
        self._launches: list[str] | None = None  # kernels a call launches, when there is no loop module (a cached program)
        self._model, self._shapes, self._resources = model, shapes, resources
        self._module: Operation | None = None
        self._reads_other_files = False
        with self._located():
            if self._compile_cached(entry):
                return
            self._load_module()
            func = entry_function(self.module, entry)
            self.entry = func.sym_name
            self.signature = _signature(func)
            self._compile()

    @property
    def module(self) -> Operation:
        """The tensor-level program (read from the model on first use when
        the compiled program came from the disk cache)."""
        if self._module is None:
            with self._located():
                self._load_module()
        return self._module

    def _load_module(self) -> None:
        start = time.perf_counter()
        self._module, self._reads_other_files = _load(self._model, self._engine, self._shapes, self._resources)
        self.stats.phases["load"] = time.perf_counter() - start

    # --- errors --------------------------------------------------------------------
    def _located(self):
        program = self

        class _Located:
            def __enter__(self):
                return self

            def __exit__(self, kind, exc, tb):
                if isinstance(exc, DiagnosticError) and not isinstance(exc, CompileError):
                    raise CompileError(exc.diagnostic, render(exc.diagnostic, program._engine.sources)) from None
                return False

        return _Located()

    # --- compiling -------------------------------------------------------------------
    def _compile_cached(self, entry: str | None) -> bool:
        """Compile an ONNX model file for the CPU through the disk cache of
        compiled programs (driver/program_cache.py); False for everything else."""
        from fusecc.driver.frontend import is_onnx

        if self.target != "cpu" or not isinstance(self._model, (str, os.PathLike)) or not is_onnx(os.fspath(self._model)):
            return False
        from fusecc.driver import program_cache, targets

        targets.get("cpu")  # says plainly when llvmlite is missing
        start = time.perf_counter()
        path = os.fspath(self._model)
        options = {"target": self.target, "entry": entry, "hardware": self._hardware, "shapes": {k: list(v) for k, v in (self._shapes or {}).items()}}
        pool = None
        if self._threads is not None:
            from fusecc.runtime.cpu.executor import WorkerPool

            pool = WorkerPool(self._threads)

        def build():
            self._load_module()
            func = entry_function(self.module, entry)
            self.entry = func.sym_name
            self.signature = _signature(func)
            self._compile(pool)
            # Kept unless other files hold some of its bytes (not in the key); with `?` dims as its loop-level module.
            return self._compiled, (None if self._reads_other_files else self._meta())

        compiled, meta, hit = program_cache.compiled_model(path, options, build, pool)
        if not hit:  # the model's digest and the cache lookup (the image is written on a background thread)
            self.stats.phases["cache"] = time.perf_counter() - start - sum(self.stats.phases.values())
        else:
            from fusecc.compiler.types import parse_type_token

            self._compiled = compiled
            self.entry = meta["entry"]
            self.signature = _Signature(meta["inputs"], [parse_type_token(t) for t in meta["input_types"]], meta["results"])
            self._launches = meta["launches"]
            self._loop_module = compiled.module  # kept as its loop-level module (`?` dims); an image has none
            self.stats.from_cache = True
            self.stats.functions = len(compiled.kernels)
            self.stats.compilations += 1
            self.stats.compile_seconds = self.stats.phases["cache"] = time.perf_counter() - start
            self.stats.kernels = len(self.kernels)
        return True

    def _meta(self) -> dict:
        """What a Program needs besides the compiled program, kept with it in the cache."""
        return {
            "entry": self.entry,
            "inputs": self.signature.names,
            "input_types": [str(t) for t in self.signature.types],
            "results": self.signature.result_names,
            "launches": self.kernels,
        }

    def _compile(self, pool=None) -> None:
        if self.target == "reference":
            return
        from fusecc.driver import targets

        start = time.perf_counter()
        if self.target == "cpu":
            targets.get("cpu")  # says plainly when llvmlite is missing
            from fusecc.compiler.pass_manager import PassContext, parse_pipeline, run_pipeline, verify_after_pipeline
            from fusecc.driver.pipelines import pipeline_for_level
            from fusecc.runtime.cpu.executor import CompiledProgram, WorkerPool, compile_program

            module = self.module.clone()
            pipeline = parse_pipeline(pipeline_for_level("loop", target=self._hardware))
            checked_each = verify_each()
            run_pipeline(pipeline, module, PassContext(diagnostics=self._engine, target=self._hardware), verify_each=checked_each)
            if not checked_each:
                verify_after_pipeline(pipeline, module)
            lowered = time.perf_counter()
            self.stats.phases["lower"] = lowered - start
            if self._threads is None:
                self._compiled = compile_program(module)
            else:
                self._compiled = CompiledProgram(module, pool=pool or WorkerPool(self._threads))
            self._loop_module = self._compiled.module
            placed = time.perf_counter()
            self.stats.phases["LLVM IR + LLVM"] = placed - lowered  # LLVM: compiled, or the object read from the cache
            self._compiled.prepare(self.entry)  # constants placed and weights packed now, not on the first call
            self.stats.phases["place constants"] = time.perf_counter() - placed
            self.stats.functions = len(self._compiled.kernels)
        else:
            targets.get("cuda")  # says plainly when there is no GPU
            from fusecc.compiler.pass_manager import PassContext
            from fusecc.driver.cuda_target import ARCH_HARDWARE, compile_program
            from fusecc.runtime.cuda.runtime import CudaRuntime

            runtime = CudaRuntime()
            context = PassContext(diagnostics=self._engine, target=ARCH_HARDWARE.get(runtime.arch, "h200"), allow_tf32=self._allow_tf32)
            source, manifest = compile_program(self.module.clone(), self.entry, runtime.arch, context)
            launch = runtime.prepare(manifest, source)
            self._cuda_source, self._manifest = source, manifest

            def run(inputs, launch=launch, manifest=manifest):
                outputs = launch(inputs)
                return [outputs[spec.name] for spec in manifest.outputs]

            self._compiled = run
        self.stats.compilations += 1
        self.stats.compile_seconds = time.perf_counter() - start
        self.stats.kernels = len(self.kernels)

    # --- calling -------------------------------------------------------------------------
    def _arguments(self, args: tuple, kwargs: dict) -> list[np.ndarray]:
        names = self.signature.names
        if len(args) > len(names):
            raise InputError(f"@{self.entry} takes {len(names)} inputs ({', '.join(names)}), got {len(args)} positional")
        given: dict[str, Any] = dict(zip(names, args))
        for key, value in kwargs.items():
            if key not in names:
                raise InputError(f"@{self.entry} has no input '{key}' (inputs: {', '.join(names)})")
            if key in given:
                raise InputError(f"input '{key}' of @{self.entry} is given twice (by position and by name)")
            given[key] = value
        missing = [n for n in names if n not in given]
        if missing:
            raise InputError(f"missing input{'s' * (len(missing) > 1)} {', '.join(repr(m) for m in missing)} of @{self.entry}")
        return [check_input(given[n], t, f"input '{n}' of @{self.entry}", self.lossy) for n, t in zip(names, self.signature.types)]

    def __call__(self, *args, **kwargs) -> dict[str, np.ndarray]:
        """Run the program; inputs by position or by name. Returns its results by name."""
        from fusecc.runtime.reference import InterpreterError

        inputs = self._arguments(args, kwargs)
        try:
            if self.target == "reference":
                from fusecc.runtime.reference import evaluate

                results = evaluate(self.module, self.entry, inputs)
            elif self.target == "cpu":
                results = self._compiled.run(inputs, self.entry)
            else:
                results = self._compiled(inputs)
        except InterpreterError as exc:
            raise InputError(str(exc)) from None
        self.stats.calls += 1
        return dict(zip(self.signature.result_names, results))

    # --- looking inside ---------------------------------------------------------------
    @property
    def inputs(self) -> dict[str, Any]:
        """Input names and their tensor types, in order."""
        return dict(zip(self.signature.names, self.signature.types))

    @property
    def outputs(self) -> list[str]:
        return list(self.signature.result_names)

    @property
    def kernels(self) -> list[str]:
        """The kernels a call launches, in order (shared kernels repeat)."""
        if self.target == "cpu":
            from fusecc.dialects import loop

            if self._loop_module is None:
                return list(self._launches or [])
            schedule = self._loop_module.lookup(self.entry)
            return [op.kernel_name for op in schedule.body if isinstance(op, loop.LaunchOp)]
        if self.target == "cuda":
            return [launch.kernel for launch in self._manifest.launches]
        return []

    def report(self, as_json: bool = False) -> str:
        """The fusion report (kernels, bytes, modelled time before and after fusion)."""
        from fusecc.driver.reporting import report

        with self._located():
            return report(self.module.clone(), self._hardware, as_json=as_json, engine=self._engine)

    def source(self, level: str = "loop") -> str:
        """Generated code: "loop" (the loop dialect), "llvm" (the CPU's LLVM
        IR) or "cuda" (CUDA C, emitted for `hardware`, no GPU needed)."""
        from fusecc.compiler.pass_manager import PassContext, parse_pipeline, run_pipeline
        from fusecc.compiler.printer import print_op
        from fusecc.driver.pipelines import EMIT_LEVELS, EmitOptions, pipeline_for_level

        if level not in ("loop", "llvm", "cuda"):
            raise UsageError(f"source level '{level}' is not one of loop, llvm, cuda")
        if level == "llvm" and self.target == "cpu" and self._compiled.llvm is not None:
            return self._compiled.llvm.text
        if level == "cuda" and self.target == "cuda":
            return self._cuda_source
        if level == "loop" and self._loop_module is not None:
            return print_op(self._loop_module)
        hardware = "cpu" if level == "llvm" else ("h200" if self._hardware == "cpu" and level == "cuda" else self._hardware)
        module = self.module.clone()
        with self._located():
            run_pipeline(parse_pipeline(pipeline_for_level(level, target=hardware)), module, PassContext(diagnostics=self._engine, target=hardware, allow_tf32=self._allow_tf32))
            emitter = EMIT_LEVELS[level].emitter
            return emitter(module, EmitOptions()).text if emitter else print_op(module)

    def __repr__(self) -> str:
        inputs = ", ".join(f"{n}: {t}" for n, t in self.inputs.items())
        return f"<fusecc.Program @{self.entry}({inputs}) on {self.target}: {len(self.kernels)} kernel launches>"


def compile(model, target: str = "cpu", shapes: Mapping[str, tuple[int, ...]] | None = None, options: Mapping[str, Any] | None = None) -> Program:
    """Compile `model` (a path to .ir or .onnx, or a Module) for `target`
    ("cpu", "cuda" or "reference"). `shapes` fixes an ONNX model's symbolic
    input dims ({"input_ids": (1, 128)}). `options`: entry (function name),
    threads (CPU), hardware (the fusion cost model: cpu, h200, a100),
    allow_tf32 (CUDA code: f32 matmuls may use TF32 tensor cores, inputs
    rounded to a 10-bit mantissa; docs/cuda-tensor-cores.md),
    lossy ("warn", "error" or "allow": inputs whose conversion changes values),
    resources (the file behind a .ir's `dense_resource`s, instead of the one
    the module names; it may lie outside the model's folder)."""
    return Program(model, target, shapes, options)


__all__ = ["CompileError", "Program", "Stats", "TARGETS", "compile"]
