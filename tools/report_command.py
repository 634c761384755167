"""`fusecc explain` and `fusecc report`: what fusion decided and what it
costs (the cost model's figures, measured ones with --measure, offline
GPU counters with --counters) and the generated source of one kernel.

    fusecc explain model.ir [--target cuda|cpu] [--gpu G]
    fusecc report model.ir [--target cuda|cpu] [--gpu G] [--json]
    fusecc report model.ir --measure [--target cpu] [--repeat N] [--threads N] [--json]
    fusecc report model.ir --show-source KERNEL [--level loop|llvm|cuda] [--target T]
    fusecc report model.ir --counters [--gpu G | --arch A] [--json]
"""

from __future__ import annotations

import json
import sys

import numpy as np

from fusecc.compiler.diagnostics import DiagnosticEngine, UsageError
from fusecc.compiler.ir import Operation
from fusecc.compiler.pass_manager import PassContext
from fusecc.driver.pipelines import is_loop_level
from fusecc.tools import model_options
from fusecc.tools.common import EXIT_INTERNAL_ERROR, ArgumentParser, phase, write_output
from fusecc.tools.program_inputs import entry_function, load
from fusecc.tools.target_options import COMPILE_TARGETS, TargetChoice, add_target_options, resolve_target


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
