"""fusecc: the compiler driver.

    fusecc model.ir [-o kernels.cu] [--emit=LEVEL] [--target cuda|cpu] [--gpu h200|a100 | --arch sm_90|sm_80] ...
    fusecc run model.ir [--inputs in.npz] [-o out.npz] [--target reference|cpu|cuda|cuda-sim] [--entry NAME] [--random-inputs]
    fusecc explain model.ir [--target cuda|cpu] [--gpu G]
    fusecc report model.ir [--target cuda|cpu] [--gpu G] [--json]
    fusecc report model.ir --measure [--target cpu] [--repeat N] [--threads N] [--json]
    fusecc report model.ir --show-source KERNEL [--level loop|llvm|cuda] [--target T]
    fusecc import model.onnx -o model.ir
    fusecc cache info|clear

Each subcommand lives in its own module: run (tools/run_command.py), explain
and report (tools/report_command.py), profile, bisect, cache; loading a
program and gathering its inputs is tools/program_inputs.py's.

--target is where code runs (or which code generator compiles it), --gpu
and --arch what GPU code is tuned for: the same flags in every command
(tools/target_options.py). A flag that would be ignored is refused.
"""

from __future__ import annotations

import argparse
import difflib
import os
import sys

from fusecc.compiler.diagnostics import DiagnosticEngine, SourceManager, UsageError
from fusecc.compiler.pass_manager import PassContext, parse_pipeline, run_pipeline
from fusecc.compiler.printer import print_op
from fusecc.driver.pipelines import EMIT_LEVELS, EmitOptions, is_loop_level, pipeline_for_level
from fusecc.driver import frontend
from fusecc.tools import model_options
from fusecc.tools.common import EXIT_USER_ERROR, ArgumentParser, guarded_main, phase, write_output
from fusecc.tools.program_inputs import entry_function, gather_inputs, load
from fusecc.tools.report_command import explain_main, report_main
from fusecc.tools.run_command import run_main
from fusecc.tools.target_options import COMPILE_TARGETS, TargetChoice, add_target_options, resolve_target

SUBCOMMANDS = ("run", "explain", "report", "profile", "bisect", "cache", "import")


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
