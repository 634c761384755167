"""`fusecc profile`: per-kernel times, rates and roofline, then what is left unfused.

    fusecc profile model.{ir,onnx} [--target cpu|cuda|cuda-sim] [--gpu G] [--inputs in.npz]
                   [--trace trace.json] [--plot roofline.png] [--json] [--repeat N] [--warmup N]

The work is driver/profile.py's; this module parses flags and writes files.
"""

from __future__ import annotations

import json

from fusecc.compiler.diagnostics import DiagnosticEngine, UsageError
from fusecc.driver.pipelines import is_loop_level
from fusecc.tools import model_options
from fusecc.tools.common import ArgumentParser, phase, write_output
from fusecc.tools.target_options import add_target_options, resolve_target

PROFILE_TARGETS = ("cpu", "cuda", "cuda-sim")


def parser() -> ArgumentParser:
    p = ArgumentParser(prog="fusecc profile", description="Run the fused program, time every kernel, and list adjacent memory-bound kernels left unfused.")
    p.add_argument("input", help="the program (.ir or .onnx)")
    model_options.add_frontend_options(p)
    add_target_options(p, "where to run and time it: cpu (default), cuda (a GPU, CUDA events) or cuda-sim (the CUDA C on this CPU)", PROFILE_TARGETS)
    p.add_argument("--inputs", default=None, help=".npz with the arguments (default: seeded random inputs, as report --measure)")
    p.add_argument("--entry", default=None, help="function to profile (default @main, else the first)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
    p.add_argument("--warmup", type=int, default=2, help="untimed runs first (default 2)")
    p.add_argument("--repeat", type=int, default=10, help="timed runs at least (default 10; more until every kernel has 1 ms of timed runs)")
    p.add_argument("--threads", type=int, default=None, help="threads of the CPU runtime (default: every CPU this process may use)")
    p.add_argument("--trace", default=None, metavar="FILE", help="write a Chrome/Perfetto trace (JSON): one slice per kernel with its figures")
    p.add_argument("--plot", default=None, metavar="FILE", help="draw a roofline with one point per kernel (needs matplotlib: pip install 'fusecc[plot]')")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    return p


def main(argv: list[str], engine: DiagnosticEngine, load, entry_function, gather_inputs) -> int:
    """`load`, `entry_function` and `gather_inputs` are tools/fusecc.py's (passed in: the two modules must not import each other)."""
    from fusecc.driver import gpu_measure, measure, profile

    args = parser().parse_args(argv)
    choice = resolve_target(args, "fusecc profile", PROFILE_TARGETS, "cpu")
    for flag, value in (("--repeat", args.repeat), ("--warmup", args.warmup + 1)):
        if value < 1:
            raise UsageError(f"{flag} must be at least {1 if flag == '--repeat' else 0}")
    if args.threads is not None and (args.threads < 1 or choice.name != "cpu"):
        raise UsageError("--threads must be at least 1" if args.threads < 1 else f"--threads sets the CPU runtime's threads; it has no effect with --target {choice.name}")
    if args.plot is not None:
        try:
            import matplotlib  # noqa: F401  (checked before the long part)
        except ImportError:
            raise UsageError("--plot draws with matplotlib, which is not installed (pip install 'fusecc[plot]' or pip install matplotlib)") from None
    module = load(args.input, engine, args)
    if is_loop_level(module):
        raise UsageError("fusecc profile compiles a tensor program; this one is at the loop level already (its source ops are gone)")
    func = entry_function(module, args.entry)
    inputs = gather_inputs(func, args.inputs, False, args.seed) if args.inputs is not None else None
    try:
        measurer = gpu_measure.measurer_for(choice.name, choice.gpu, args.threads)
    except measure.MeasurementUnavailable as exc:
        raise UsageError(str(exc)) from None
    with phase("the profiled program"):
        run = profile.run_profile(module, func.sym_name, measurer, inputs, args.warmup, args.repeat, args.seed, engine)
    data = profile.profile_data(run)
    if args.trace is not None:
        try:
            profile.write_trace(data, args.trace)
        except OSError as exc:
            raise UsageError(f"cannot write the trace '{args.trace}': {exc.strerror or exc}") from None
    if args.plot is not None:
        try:
            profile.plot_roofline(data, args.plot)
        except OSError as exc:
            raise UsageError(f"cannot write the plot '{args.plot}': {exc.strerror or exc}") from None
    write_output(None, json.dumps(data, indent=2) + "\n" if args.json else profile.format_profile(data))
    return 0
