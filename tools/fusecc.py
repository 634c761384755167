"""fusecc: the compiler driver.

    fusecc model.ir [-o kernels.cu] [--emit=LEVEL] [--target cuda|cpu] [--gpu h200|a100 | --arch sm_90|sm_80] ...
    fusecc run model.ir [--inputs in.npz] [-o out.npz] [--target reference|cpu|cuda|cuda-sim] [--entry NAME] [--random-inputs]
    fusecc explain model.ir [--target cuda|cpu] [--gpu G]
    fusecc report model.ir [--target cuda|cpu] [--gpu G] [--json]
    fusecc report model.ir --measure [--target cpu] [--repeat N] [--threads N] [--json]
    fusecc report model.ir --show-source KERNEL [--level loop|llvm|cuda] [--target T]
    fusecc import model.onnx -o model.ir
    fusecc cache info|clear

--target is where code runs (or which code generator compiles it), --gpu
and --arch what GPU code is tuned for: the same flags in every command
(tools/target_options.py). A flag that would be ignored is refused.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import sys

import numpy as np

from fusecc.compiler.diagnostics import DiagnosticEngine, SourceManager, UsageError
from fusecc.compiler.ir import Operation
from fusecc.compiler.parser import parse_module
from fusecc.compiler.pass_manager import PassContext, parse_pipeline, run_pipeline
from fusecc.compiler.printer import print_op
from fusecc.compiler.verifier import verify
from fusecc.driver.pipelines import EMIT_LEVELS, EmitOptions, is_loop_level, pipeline_for_level
from fusecc.driver import frontend, targets
from fusecc.driver.program import entry_function as function_by_name

from fusecc.tools import run_io
from fusecc.tools import model_options
from fusecc.tools.common import EXIT_INTERNAL_ERROR, EXIT_USER_ERROR, ArgumentParser, guarded_main, phase, read_source, write_output
from fusecc.tools.target_options import COMPILE_TARGETS, TargetChoice, add_target_options, resolve_target

SUBCOMMANDS = ("run", "explain", "report", "profile", "bisect", "cache", "import")


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


# --------------------------------------------------------------------------- compile


def compile_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(
        prog="fusecc",
        description=f"Compile a tensor program. Subcommands: {', '.join(SUBCOMMANDS)} (see 'fusecc run -h').",
    )
    p.add_argument("input", help="the program (.ir or .onnx), or - for stdin")
    model_options.add_frontend_options(p)
    p.add_argument("-o", dest="output", default=None, help="output file (default stdout; CUDA C's manifest is written only beside -o)")
    p.add_argument("--emit", choices=list(EMIT_LEVELS), default=None, help="print the program at this level (default: cuda, or llvm with --target cpu)")
    add_target_options(p, "the code generator: cuda (CUDA C, the default) or cpu (LLVM IR); cuda-sim compiles as cuda", COMPILE_TARGETS, tf32=True)
    p.add_argument("--print-debuginfo", "--mlir-print-debuginfo", action="store_true", help="print locations with an IR level of --emit")
    p.add_argument("--resource-usage", action="store_true", help="print registers and spills per CUDA kernel")
    return p


def compile_target(args, level: str | None) -> tuple[str, TargetChoice]:
    """(the --emit level, the target) of `fusecc FILE`; a usage error for a
    combination that makes no sense or a flag that would be ignored."""
    implied = "cpu" if level == "llvm" else "cuda"
    if level == "llvm" and args.target is None and (args.gpu or args.arch):
        raise UsageError(f"--emit=llvm generates code for the CPU; {'--gpu' if args.gpu else '--arch'} would be ignored (use --emit=cuda for a GPU)")
    if args.target == "reference":
        raise UsageError("the reference interpreter runs tensor programs as written; nothing is compiled for it (use 'fusecc run --target reference')")
    choice = resolve_target(args, "fusecc", COMPILE_TARGETS, implied)
    level = level or ("llvm" if choice.name == "cpu" else "cuda")
    if level == "llvm" and choice.is_gpu:
        flag = "--target " + args.target if args.target else ("--gpu" if args.gpu else "--arch")
        raise UsageError(f"--emit=llvm generates code for the CPU; {flag} would be ignored (use --emit=cuda for a GPU)")
    if level == "cuda" and not choice.is_gpu:
        raise UsageError("--emit=cuda generates CUDA C for a GPU; with --target cpu use --emit=llvm (or another level)")
    if args.resource_usage and level != "cuda":
        raise UsageError(f"--resource-usage reports CUDA kernels' registers; it has no effect with --emit={level}")
    suffix = os.path.splitext(args.output or "")[1]
    if (suffix == ".cu") != (level == "cuda") and suffix in (".cu", ".ll"):
        raise UsageError(f"'{args.output}' would hold {EMIT_LEVELS[level].summary} (--emit={level}); name the file accordingly or choose another --target/--emit")
    if args.print_debuginfo and EMIT_LEVELS[level].emitter is not None:
        raise UsageError(f"--print-debuginfo prints IR locations; --emit={level} prints no IR (use --emit=loop or an earlier level)")
    return level, choice


def compile_main(argv: list[str], engine: DiagnosticEngine) -> int:
    args = compile_parser().parse_args(argv)
    level, choice = compile_target(args, args.emit)
    module = load(args.input, engine, args)
    if not (EMIT_LEVELS[level].from_loops and is_loop_level(module)):
        pipeline = parse_pipeline(pipeline_for_level(level, target=choice.hardware, arch=choice.arch))
        run_pipeline(pipeline, module, PassContext(diagnostics=engine, target=choice.hardware, allow_tf32=choice.allow_tf32))
    emitter = EMIT_LEVELS[level].emitter
    if emitter is None:
        write_output(args.output, print_op(module, debuginfo=args.print_debuginfo))
        return 0
    source_name = os.path.basename(args.input) if args.input != "-" else None
    options = EmitOptions(arch=choice.arch, output=args.output, source_name=source_name, resource_usage=args.resource_usage)
    emitted = emitter(module, options)
    write_output(args.output, emitted.text)
    for path, extra in emitted.beside.items():
        write_output(path, extra)
    sys.stderr.write(emitted.notes)
    return 0


# --------------------------------------------------------------------------- run


def run_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(prog="fusecc run", description="Run a program's entry function.")
    p.add_argument("input", help="the program (.ir or .onnx)")
    model_options.add_frontend_options(p)
    p.add_argument("--inputs", default=None, help=".npz with the arguments, by name (x for %%x) or as arg0, arg1, ...")
    p.add_argument("-o", dest="output", default=None, help=".npz to write result0, result1, ... (default: print a summary)")
    add_target_options(p, "where to run: reference (the interpreter), cpu, cuda (a GPU), cuda-sim (the CUDA C on this CPU); default: cuda with a GPU, else cpu", tf32=True)
    p.add_argument("--entry", default=None, help="function to run (default @main, else the first)")
    p.add_argument("--random-inputs", action="store_true", help="fill the inputs missing from --inputs with seeded random data (says which)")
    p.add_argument("--seed", type=int, default=0, help="seed for --random-inputs (default 0)")
    p.add_argument("--dims", default=None, metavar="B=3,S=7", help="sizes of dynamic ('?') dims for --random-inputs (docs/dynamic-shapes.md)")
    p.add_argument("--threads", type=int, default=None, help="threads of the CPU runtimes (sets FUSECC_CPU_WORKERS; default: every CPU this process may use)")
    p.add_argument("-q", "--quiet", action="store_true", help="do not print the target and the compile and run times to stderr")
    p.add_argument("--sanitize", action="store_true", help="with --target cuda-sim: check shared memory races, uninitialised reads, out-of-bounds accesses, barriers and warp operations (a finding exits 1)")
    return p


def gather_inputs(func: Operation, path: str | None, random_inputs: bool, seed: int, dims: str | None = None) -> list[np.ndarray]:
    """The entry's arguments: from the .npz by name (`x` for `%x`), else as
    `argN`, else (with --random-inputs) seeded random data; a dynamic dim of
    random data takes its size from --dims or from a given input."""
    from fusecc.runtime.reference import random_input

    provided = run_io.read_npz(path) if path is not None else {}
    rng = np.random.default_rng(seed)
    values, used, randomised = [], set(), []
    arguments = func.input_args if func.name == "loop.schedule" else func.arguments
    graph_names = frontend.input_keys(func, len(arguments))
    for index, arg in enumerate(arguments):
        t = arg.type
        label = f"'{arg.name_hint}' (arg{index})" if arg.name_hint else f"'arg{index}'"
        for key in (graph_names[index], arg.name_hint, f"arg{index}"):
            if key and key in provided:
                values.append(check_input(provided[key], t, f"input {label} of @{func.sym_name}"))
                used.add(key)
                break
        else:
            if not random_inputs:
                held = f"; {run_io.describe_keys(path, provided)}" if path is not None else ""
                raise UsageError(f"missing input {label} ({t}){held}; give it in --inputs by name or position (arg{index}), or use --random-inputs")
            values.append(random_input(sized(t, func, provided_sizes(arguments, values), dims, label), rng))
            randomised.append(label)
    for key in sorted(set(provided) - used):
        print(f"fusecc run: warning: '{key}' in '{path}' is not an argument of @{func.sym_name}; ignored", file=sys.stderr)
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


def run_target(args, loop_level: bool):
    """The target of `fusecc run`: --gpu/--arch only where the code is tuned
    for a GPU other than the one it runs on (cuda-sim)."""
    choice = resolve_target(args, "fusecc run", None, None)
    if choice.name == "cuda" and (args.gpu or args.arch):
        raise UsageError("--target cuda compiles for the GPU it runs on; --gpu/--arch apply to cuda-sim and to compiling")
    if loop_level:
        if args.gpu or args.arch:
            raise UsageError("this program is at the loop level already, tuned when it was lowered; --gpu/--arch would be ignored")
        if choice.allow_tf32:
            raise UsageError("this program is at the loop level already, its matmuls lowered; --allow-tf32 would be ignored")
        return targets.get_loop_level(choice.name or None)
    if args.sanitize and choice.name != "cuda-sim":
        raise UsageError("--sanitize checks the CUDA C on the CPU harness: give --target cuda-sim")
    target = targets.get(choice.name or None)
    if choice.name == "cuda-sim":
        target.gpu = choice.gpu  # the CUDA C is tuned for this GPU, then run on the CPU
        target.sanitize = args.sanitize
    if choice.allow_tf32:
        target.allow_tf32 = True  # the GPU targets' PassContext (f32 matmuls on TF32 tensor cores)
    return target


def provided_sizes(arguments, values) -> dict:
    """The dynamic dims' sizes the inputs given so far show."""
    sizes = {}
    for arg, array in zip(arguments, values):
        for d, n in zip(getattr(arg.type, "shape", ()), np.shape(array)):
            if type(d) is not int and d.is_Symbol:
                sizes.setdefault(d, n)
    return sizes


def sized(t, func: Operation, known: dict, dims: str | None, label: str):
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
        raise UsageError(f"input {label} of @{func.sym_name} is {t} with dynamic dims; give their sizes for --random-inputs with --dims {','.join(f'{m}=N' for m in missing)}")
    return t.with_shape(evaluate_shape(t.shape, sizes))


def run_main(argv: list[str], engine: DiagnosticEngine) -> int:
    from fusecc.runtime.cuda.cpu_harness.sanitizer import SanitizerFindings
    from fusecc.runtime.reference import InterpreterError

    args = run_parser().parse_args(argv)
    module = load(args.input, engine, args)
    func = entry_function(module, args.entry)
    from fusecc.runtime import cache

    if args.threads is not None:
        if args.threads < 1:
            raise UsageError("--threads must be at least 1")
        os.environ["FUSECC_CPU_WORKERS"] = str(args.threads)
    target = run_target(args, is_loop_level(module))
    inputs = gather_inputs(func, args.inputs, args.random_inputs, args.seed, args.dims)
    timing = run_io.Timing(target.name)
    hits, builds = cache.counts.hits, cache.counts.builds
    with phase(f"the '{target.name}' target"):
        try:
            with run_io.Stopwatch() as compiling:
                program = target.prepare(module, func.sym_name, engine)
            with run_io.Stopwatch() as running:
                results = program(inputs)
        except InterpreterError as exc:
            raise UsageError(str(exc)) from None
        except SanitizerFindings as exc:
            for finding in exc.findings:
                print(finding, file=sys.stderr)
            print(f"fusecc run: {len(exc.findings)} sanitizer finding(s); the lines are those of kernels.cu as `fusecc {args.input} -o kernels.cu` writes it", file=sys.stderr)
            return 1
    timing.compile_seconds, timing.run_seconds = compiling.seconds, running.seconds
    timing.cache_hits, timing.cache_builds = cache.counts.hits - hits, cache.counts.builds - builds
    if not args.quiet:
        print(f"fusecc run: {timing.line()}", file=sys.stderr)
    named = list(zip(frontend.result_keys(func, len(results)), results))
    if args.output:
        run_io.write_npz(args.output, dict(named))
    else:
        run_io.write_stdout(run_io.summary(named))
    return 0


# --------------------------------------------------------------------------- explain / report


def tuning_target(args, tool: str, default: str = "cuda") -> TargetChoice:
    """The target of a command that compiles but does not run (explain, report):
    the reference interpreter compiles nothing, so it is refused."""
    if args.target == "reference":
        raise UsageError(f"the reference interpreter runs tensor programs as written, without fusion; {tool} needs --target cpu or cuda")
    return resolve_target(args, tool, COMPILE_TARGETS, default)


def explain_main(argv: list[str], engine: DiagnosticEngine) -> int:
    from fusecc.driver import reporting

    p = ArgumentParser(prog="fusecc explain", description="Explain every fusion decision as remarks.")
    p.add_argument("input")
    model_options.add_frontend_options(p)
    add_target_options(p, "the code generator whose fusion is explained: cuda (default; cuda-sim alike) or cpu", COMPILE_TARGETS)
    args = p.parse_args(argv)
    choice = tuning_target(args, "fusecc explain")
    module = load(args.input, engine, args)
    engine.stream = sys.stdout  # the remarks are this command's output
    write_output(None, reporting.explain(module, choice.hardware, engine))
    return 0


def _counters_report(args, engine: DiagnosticEngine) -> int:
    """`fusecc report --counters`: the CUDA kernels for --gpu/--arch, run on
    the CPU harness with seeded random inputs (runtime/cuda/counters.py)."""
    from fusecc.driver.cuda_level import build_manifest
    from fusecc.driver.cuda_target import lower_to_cuda
    from fusecc.runtime.cuda.counters import format_counters, kernel_counters
    from fusecc.compiler.dims import hinted_shape
    from fusecc.compiler.types import TensorType
    from fusecc.runtime.cuda.execute import for_call
    from fusecc.runtime.reference import random_input

    from fusecc.passes.backends.hardware import HARDWARE

    choice = tuning_target(args, "fusecc report")
    if not choice.is_gpu:
        raise UsageError("--counters measures CUDA kernels: give --target cuda (the default) with --gpu or --arch")
    hardware = HARDWARE[choice.hardware]
    module = load(args.input, engine, args)
    func = entry_function(module, None)
    rng = np.random.default_rng(0)
    # `?` dims run at their --shape-hint sizes (docs/dynamic-shapes.md)
    inputs = [random_input(t if t.is_static else TensorType(hinted_shape(t.shape), t.element_type), rng) for t in func.function_type.inputs]
    with phase("the code generator"):
        cuda = lower_to_cuda(module, choice.arch, PassContext(diagnostics=engine, target=choice.hardware, allow_tf32=choice.allow_tf32))
        manifest = for_call(build_manifest(module, cuda, "kernels.cu", choice.arch, func.sym_name), inputs)
    with phase("the counters"):
        rows = kernel_counters(cuda, manifest, inputs, hardware)
    if args.json:
        write_output(None, json.dumps([r.to_dict() for r in rows], indent=1) + "\n")
    else:
        write_output(None, format_counters(rows, hardware))
    return 0


def report_main(argv: list[str], engine: DiagnosticEngine) -> int:
    from fusecc.driver import reporting

    p = ArgumentParser(
        prog="fusecc report",
        description="Kernels, bytes, memory and time before and after fusion: from the cost model, "
        "measured on this machine (--measure), and the generated source of a kernel (--show-source).",
    )
    p.add_argument("input")
    model_options.add_frontend_options(p)
    add_target_options(p, "the code generator reported on: cuda (default; cuda-sim alike) or cpu (the default with --measure)", COMPILE_TARGETS, tf32=True)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    measured = p.add_argument_group("measuring (--measure)")
    measured.add_argument("--measure", action="store_true", help="compile unfused and fused, run both, and put measured figures beside the modelled ones")
    measured.add_argument("--repeat", type=int, default=None, help="timed runs of each program, interleaved (default 10)")
    measured.add_argument("--seed", type=int, default=None, help="seed of the random inputs (default 0)")
    measured.add_argument("--threads", type=int, default=None, help="threads of the CPU runtime (default: every CPU this process may use)")
    measured.add_argument("--entry", default=None, help="function to run (default @main, else the first)")
    measured.add_argument("--all-kernels", action="store_true", help="also list the unfused program's kernels")
    source = p.add_argument_group("generated code (--show-source)")
    source.add_argument("--show-source", metavar="KERNEL", default=None, help="print a kernel's source (a name such as fused_3_reduction, or a group id) instead of the report")
    source.add_argument("--level", choices=reporting.SOURCE_LEVELS, default=None, help="loop IR, LLVM IR or CUDA C (default: llvm for the cpu, cuda for a GPU)")
    p.add_argument("--counters", action="store_true", help="offline counters per CUDA kernel from its address stream on the CPU harness: bank-conflict ways, sector efficiency, registers, spills, occupancy, waves")
    args = p.parse_args(argv)
    if args.counters:
        if args.measure or args.show_source is not None:
            raise UsageError("--counters is a report of its own; run it without --measure and --show-source")
        return _counters_report(args, engine)
    if args.show_source is not None:
        if args.measure or args.json:
            raise UsageError("--show-source prints one kernel's source; run it without --measure and --json")
        choice = tuning_target(args, "fusecc report", "cpu" if args.level == "llvm" else "cuda")
        level = args.level or ("llvm" if choice.name == "cpu" else "cuda")
        module = load(args.input, engine, args)
        with phase("the code generator"):
            text = reporting.kernel_source(module, choice.hardware, args.show_source, level, engine)
        write_output(None, text)
        return 0
    if args.level is not None:
        raise UsageError("--level chooses the language of --show-source; it has no effect without it")
    measuring_only = [flag for flag, given in (("--repeat", args.repeat is not None), ("--seed", args.seed is not None), ("--threads", args.threads is not None), ("--entry", args.entry is not None), ("--all-kernels", args.all_kernels)) if given]
    if not args.measure:
        if measuring_only:
            raise UsageError(f"{', '.join(measuring_only)} {'applies' if len(measuring_only) == 1 else 'apply'} to --measure; add --measure or drop {'it' if len(measuring_only) == 1 else 'them'}")
        choice = tuning_target(args, "fusecc report")
        module = load(args.input, engine, args)
        write_output(None, reporting.report(module, choice.hardware, as_json=args.json, engine=engine, allow_tf32=choice.allow_tf32))
        return 0
    choice = tuning_target(args, "fusecc report", "cpu")
    module = load(args.input, engine, args)
    return _measured_report(args, choice, module, engine)


def _measured_report(args, choice: TargetChoice, module: Operation, engine: DiagnosticEngine) -> int:
    from fusecc.driver import measure

    args.repeat = 10 if args.repeat is None else args.repeat
    args.seed = 0 if args.seed is None else args.seed
    if args.repeat < 1:
        raise UsageError("--repeat must be at least 1")
    if args.threads is not None and args.threads < 1:
        raise UsageError("--threads must be at least 1")
    if is_loop_level(module):
        raise UsageError("--measure compiles a tensor program twice (unfused and fused); this one is at the loop level already (run it with 'fusecc run')")
    entry = entry_function(module, args.entry).sym_name
    try:
        data = measure.measure(module, entry, choice.hardware, args.repeat, args.seed, args.threads, engine)
    except measure.MeasurementUnavailable as exc:
        raise UsageError(str(exc)) from None
    write_output(None, json.dumps(data, indent=2) + "\n" if args.json else measure.format_measured_report(data, args.all_kernels))
    wrong = [label for label, v in data["measured"].items() if not v["agrees"]]
    if wrong:
        print(
            f"fusecc report: error: the {' and '.join(wrong)} program's results differ from the reference interpreter "
            f"beyond the tolerance ({data['tolerance']:.0e} of the largest magnitude); this is a bug in fusecc",
            file=sys.stderr,
        )
        return EXIT_INTERNAL_ERROR
    return 0


def cache_main(argv: list[str], engine: DiagnosticEngine) -> int:
    from fusecc.tools.cache_command import cache_main as run_cache_command

    return run_cache_command(argv, engine)


def import_main(argv: list[str], engine: DiagnosticEngine) -> int:
    p = ArgumentParser(prog="fusecc import", description="Import an ONNX model or a torch.export program as a tensor IR module (weights in a .safetensors file beside it).")
    p.add_argument("input", help="the model (.onnx, or .pt2 from torch.export.save)")
    p.add_argument("-o", dest="output", required=True, help="the .ir to write; weights go to the same name with .safetensors")
    p.add_argument("--weights", default=None, help="where to write the weights (default: beside -o, .safetensors)")
    p.add_argument("--inline-weights", action="store_true", help="keep every constant in the .ir text (no weights file)")
    p.add_argument("--timing", action="store_true", help="print the time of each step to stderr")
    model_options.add_frontend_options(p)
    args = p.parse_args(argv)
    if frontend.is_torch_export(args.input):
        if args.shape or args.memory_budget is not None:
            raise UsageError("--shape and --memory-budget apply to ONNX models; a .pt2 program keeps the shapes it was exported with")
        with phase("the torch.export importer"):
            module = frontend.import_torch_export(args.input)
        with phase("the printer"):
            frontend.save_imported(module, args.output, args.weights, inline=args.inline_weights)
        return 0
    if not frontend.is_onnx(args.input):
        raise UsageError(f"'{args.input}' is not an ONNX model (.onnx) or a torch.export program (.pt2)")
    with phase("the ONNX importer"):
        imported = frontend.import_onnx(args.input, **model_options.frontend_options(args))
    with phase("the printer"):
        frontend.save_imported(imported.module, args.output, args.weights, inline=args.inline_weights)
    if args.timing:
        steps = ", ".join(f"{k} {v * 1000:.0f} ms" for k, v in imported.timings.items())
        print(f"fusecc import: {imported.node_count} nodes: {steps}", file=sys.stderr)
    return 0


def profile_main(argv: list[str], engine: DiagnosticEngine) -> int:
    from fusecc.tools import profile_command  # tools/profile_command.py

    return profile_command.main(argv, engine, load, entry_function, gather_inputs)


def bisect_main(argv: list[str], engine: DiagnosticEngine) -> int:
    from fusecc.tools import bisect_command  # tools/bisect_command.py

    return bisect_command.main(argv, engine, load, entry_function, gather_inputs)


def misspelt_subcommand(argv: list[str]) -> str | None:
    """The subcommand a first argument that is no file seems to mean
    (`fusecc rnu x.ir`), or None."""
    word = argv[0] if argv else ""
    if not word or word.startswith("-") or os.path.exists(word) or os.sep in word or "." in word:
        return None
    close = difflib.get_close_matches(word, SUBCOMMANDS, n=1, cutoff=0.6)
    return close[0] if close else None


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--version"]:
        from fusecc import __version__

        print(f"fusecc {__version__}")
        return 0
    body = {"run": run_main, "explain": explain_main, "report": report_main, "profile": profile_main, "bisect": bisect_main, "cache": cache_main, "import": import_main}.get(argv[0] if argv else "", None)
    if body is not None:
        return guarded_main(f"fusecc {argv[0]}", lambda engine: body(argv[1:], engine), SourceManager())
    meant = misspelt_subcommand(argv)
    if meant is not None:
        print(f"fusecc: error: unknown command '{argv[0]}'; did you mean '{meant}'? (commands: {', '.join(SUBCOMMANDS)}; or give a program to compile)", file=sys.stderr)
        return EXIT_USER_ERROR
    return guarded_main("fusecc", lambda engine: compile_main(argv, engine), SourceManager())


if __name__ == "__main__":
    sys.exit(main())
