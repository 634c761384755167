"""`fusecc run`: compile a program for a target and run its entry on inputs
from an .npz (or seeded random data), writing the results to an .npz or
printing a summary.

    fusecc run model.{ir,onnx} [--inputs in.npz] [-o out.npz] [--target reference|cpu|cuda|cuda-sim]
               [--entry NAME] [--random-inputs] [--seed N] [--dims B=3,S=7] [--threads N]

An ONNX model run on the CPU goes through fusecc.compile, so a second run
of the same file loads its compiled program from the disk cache
(driver/program_cache.py: no import of the model, no pass); anything else
is loaded and compiled here, with the LLVM objects cached.
"""

from __future__ import annotations

import argparse
import os
import sys

from fusecc.compiler.diagnostics import DiagnosticEngine, UsageError
from fusecc.driver import frontend, targets
from fusecc.driver.pipelines import is_loop_level
from fusecc.tools import model_options, run_io
from fusecc.tools.common import EXIT_USER_ERROR, ArgumentParser, phase
from fusecc.tools.program_inputs import entry_function, gather_inputs, gather_parameters, load, signature_parameters
from fusecc.tools.target_options import add_target_options, resolve_target


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


def set_threads(args) -> None:
    if args.threads is not None:
        if args.threads < 1:
            raise UsageError("--threads must be at least 1")
        os.environ["FUSECC_CPU_WORKERS"] = str(args.threads)


def run_main(argv: list[str], engine: DiagnosticEngine) -> int:
    from fusecc.runtime.cuda.cpu_harness.sanitizer import SanitizerFindings
    from fusecc.runtime.reference import InterpreterError

    args = run_parser().parse_args(argv)
    if frontend.is_onnx(args.input) and args.memory_budget is None and args.target in (None, "cpu"):
        set_threads(args)
        if run_target(args, False).name == "cpu":
            return run_compiled(args)
    module = load(args.input, engine, args)
    func = entry_function(module, args.entry)
    from fusecc.runtime import cache

    set_threads(args)
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
    return finish(args, timing, list(zip(frontend.result_keys(func, len(results)), results)))


def run_compiled(args) -> int:
    """An ONNX model on the CPU, through fusecc.compile and its disk cache of
    compiled programs: a warm run neither imports the model nor runs a pass."""
    from fusecc.driver.input_check import InputError
    from fusecc.driver.program import CompileError, Program
    from fusecc.runtime import cache

    timing = run_io.Timing("cpu")
    hits, builds = cache.counts.hits, cache.counts.builds
    with phase("the 'cpu' target"):
        try:
            with run_io.Stopwatch() as compiling:
                program = Program(args.input, "cpu", model_options.frontend_options(args)["shapes"], {"entry": args.entry} if args.entry else None)
        except CompileError as exc:  # rendered by the program (its own sources)
            print(exc, file=sys.stderr)
            return EXIT_USER_ERROR
        inputs = gather_parameters(program.entry, signature_parameters(program.inputs), args.inputs, args.random_inputs, args.seed, args.dims)
        try:
            with run_io.Stopwatch() as running:
                results = program(*inputs)
        except InputError as exc:
            raise UsageError(str(exc)) from None
    timing.compile_seconds, timing.run_seconds = compiling.seconds, running.seconds
    timing.cache_hits, timing.cache_builds = cache.counts.hits - hits, cache.counts.builds - builds
    return finish(args, timing, list(results.items()))


def finish(args, timing: run_io.Timing, named: list) -> int:
    if not args.quiet:
        print(f"fusecc run: {timing.line()}", file=sys.stderr)
    if args.output:
        run_io.write_npz(args.output, dict(named))
    else:
        run_io.write_stdout(run_io.summary(named))
    return 0
