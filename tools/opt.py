"""fusecc-opt: run pass pipelines on IR files, like mlir-opt.

    fusecc-opt [FILE|-] [-p PIPELINE | --pass-pipeline=PIPELINE | --PASS[=OPTIONS] ...] [-o OUT]
               [--print-generic] [--print-debuginfo] [--split-input-file]
               [--verify-diagnostics] [--print-ir-after-all]
               [--print-ir-before=PASS] [--print-ir-after=PASS] [--verify-each=false]
               [--timing] [--list-passes] [--explain-fusion] [--target cpu|cuda] [--gpu h200|a100]

mlir-opt's spellings work too: --mlir-print-ir-after-all, --mlir-timing,
--mlir-print-debuginfo, --mlir-print-op-generic, and one flag per pass
(`--canonicalize --cse`, run in that order).
"""

from __future__ import annotations

import argparse
import contextlib
import sys

from fusecc.compiler.diagnostics import Diagnostic, DiagnosticEngine, DiagnosticError, SourceManager, UsageError, render
from fusecc.compiler.parser import parse_module, split_input
from fusecc.compiler.pass_manager import (
    IRPrinting,
    PassContext,
    PipelineError,
    Timing,
    list_passes,
    parse_pipeline,
    run_pipeline,
)
from fusecc.compiler.printer import print_op
from fusecc.compiler.verifier import verify

from fusecc.tools import verify_diagnostics
from fusecc.tools.common import EXIT_USER_ERROR, ArgumentParser, guarded_main, phase, read_source, write_output
from fusecc.tools.target_options import COMPILE_TARGETS, add_target_options, resolve_target, suggest

def _version() -> str:
    from fusecc import __version__

    return __version__


class _AppendPass(argparse.Action):
    """`--canonicalize --cse` (mlir-opt's pass flags): each appends its pass,
    in command-line order; `--fuse=only=elementwise` gives it options."""

    def __init__(self, *args, pass_name: str, **kwargs):
        super().__init__(*args, **kwargs)
        self.pass_name = pass_name

    def __call__(self, parser, namespace, value, option_string=None):
        name = self.pass_name
        getattr(namespace, self.dest).append(f"{name}{{{value}}}" if value else name)


def _verify_each_value(text: str) -> bool:
    lowered = text.lower()
    if lowered in ("true", "1", "on"):
        return True
    if lowered in ("false", "0", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, not '{text}'")


def registered_passes() -> list[str]:
    from fusecc.compiler.pass_manager import PASS_REGISTRY, pass_class

    pass_class("cse")  # loads the built-in registry
    return sorted(PASS_REGISTRY)


def build_arg_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(prog="fusecc-opt", description="Run fusecc pass pipelines on textual IR.")
    parser.add_argument("--version", action="version", version=f"fusecc-opt {_version()}")
    parser.add_argument("input", nargs="?", default="-", help="input file, or - for stdin (default)")
    parser.add_argument("-p", "--pass-pipeline", dest="pipeline", default="", help="passes to run, e.g. 'canonicalize,cse' or 'builtin.module(func.func(cse))'")
    parser.add_argument("-o", dest="output", default="-", help="output file (default stdout)")
    parser.add_argument("--print-generic", "--mlir-print-op-generic", dest="print_generic", action="store_true", help="print ops in the generic form")
    parser.add_argument("--print-debuginfo", "--mlir-print-debuginfo", dest="print_debuginfo", action="store_true", help="print locations")
    parser.add_argument("--split-input-file", action="store_true", help="treat '// -----' as separating independent inputs")
    parser.add_argument("--verify-diagnostics", action="store_true", help="check diagnostics against expected-* annotations")
    parser.add_argument("--print-ir-after-all", "--mlir-print-ir-after-all", dest="print_ir_after_all", action="store_true", help="print the IR after every pass (to stderr)")
    parser.add_argument("--print-ir-before-all", "--mlir-print-ir-before-all", dest="print_ir_before_all", action="store_true", help="print the IR before every pass (to stderr)")
    parser.add_argument("--print-ir-before", "--mlir-print-ir-before", dest="print_ir_before", action="append", default=[], metavar="PASS", help="print the IR before PASS")
    parser.add_argument("--print-ir-after", "--mlir-print-ir-after", dest="print_ir_after", action="append", default=[], metavar="PASS", help="print the IR after PASS")
    parser.add_argument("--timing", "--mlir-timing", dest="timing", action="store_true", help="print a per-pass timing report (to stderr)")
    parser.add_argument("--list-passes", nargs="?", const="default", default=None, choices=("default", "all"), help="list registered passes and their options (=all: test-only passes too, whose names start with test-)")
    parser.add_argument("--explain-fusion", action="store_true", help="emit a remark for every fusion decision")
    add_target_options(parser, "the code generator the passes tune for: cuda (default; cuda-sim alike) or cpu", COMPILE_TARGETS)
    parser.add_argument("--verify-each", type=_verify_each_value, nargs="?", const=True, default=True, metavar="BOOL", help="verify after each pass (default true; --verify-each=false skips it)")
    parser.add_argument("--no-verify-each", dest="verify_each", action="store_false", help="the same as --verify-each=false")
    passes = parser.add_argument_group("passes (mlir-opt style: run in the order given; --NAME=OPTIONS gives options, e.g. --fuse=only=elementwise)")
    for name in registered_passes():
        passes.add_argument(f"--{name}", dest="pass_flags", action=_AppendPass, pass_name=name, nargs="?", default=[], metavar="OPTIONS", help=argparse.SUPPRESS if name.startswith("test-") else None)
    return parser


def main(argv: list[str] | None = None) -> int:
    sources = SourceManager()
    return guarded_main("fusecc-opt", lambda engine: _run(build_arg_parser().parse_args(argv), engine), sources)


def pipeline_text(args) -> str:
    """-p's pipeline, or the pass flags' (mlir-opt refuses both at once)."""
    if args.pass_flags and args.pipeline:
        raise UsageError("give passes either with -p/--pass-pipeline or as flags (--canonicalize --cse), not both")
    return ",".join(args.pass_flags) if args.pass_flags else args.pipeline


def check_pass_names(args) -> None:
    """--print-ir-before/after name registered passes (a typo would print nothing)."""
    known = registered_passes()
    for flag, names in (("--print-ir-before", args.print_ir_before), ("--print-ir-after", args.print_ir_after)):
        for name in names:
            if name not in known:
                raise UsageError(f"{flag}={name}: unknown pass '{name}'{suggest(name, known)} (see --list-passes)")


def _run(args, engine: DiagnosticEngine) -> int:
    if args.list_passes:
        sys.stdout.write("Available passes:\n" + list_passes(include_test=args.list_passes == "all"))
        return 0
    context_target = resolve_target(args, "fusecc-opt", COMPILE_TARGETS, "cuda").hardware
    check_pass_names(args)
    try:
        pipeline = parse_pipeline(pipeline_text(args))
    except PipelineError as exc:
        raise UsageError(str(exc)) from None
    text, filename = read_source(args.input)
    engine.sources.add(filename, text)
    chunks = split_input(text) if args.split_input_file else [(text, 0)]
    timing = Timing() if args.timing else None
    outputs, failed = [], False
    for chunk, offset in chunks:
        output, ok = _process_chunk(args, engine, pipeline, chunk, filename, offset, timing, context_target)
        failed |= not ok
        if output is not None:
            outputs.append(output)
    write_output(args.output, "// -----\n".join(outputs))
    if timing is not None:
        print(timing.report(), file=sys.stderr)
    return EXIT_USER_ERROR if failed else 0


def _process_chunk(args, engine, pipeline, chunk, filename, offset, timing, context_target: str) -> tuple[str | None, bool]:
    """Returns (printed IR or None, whether the chunk succeeded)."""
    collected: list[Diagnostic] = []
    if args.verify_diagnostics:
        engine.handler = collected.append
    instrumentations = []
    if args.print_ir_after_all or args.print_ir_before_all or args.print_ir_after or args.print_ir_before:
        instrumentations.append(
            IRPrinting(
                before=frozenset(args.print_ir_before),
                after=frozenset(args.print_ir_after),
                after_all=args.print_ir_after_all,
                before_all=args.print_ir_before_all,
                generic=args.print_generic,
            )
        )
    if timing is not None:
        instrumentations.append(timing)
    context = PassContext(diagnostics=engine, target=context_target, explain=args.explain_fusion)
    errors_before = engine.error_count
    output = None
    try:
        with _timed(timing, "Parser"), phase("the parser"):
            module = parse_module(chunk, filename, offset)
        with _timed(timing, "Verifier"), phase("the verifier"):
            verify(module)
        try:
            run_pipeline(pipeline, module, context, instrumentations, verify_each=args.verify_each)
        except PipelineError as exc:
            raise UsageError(str(exc)) from None
        with _timed(timing, "Output"), phase("the printer"):
            output = print_op(module, generic=args.print_generic, debuginfo=args.print_debuginfo)
    except DiagnosticError as exc:
        if not args.verify_diagnostics:
            # Report and go on with the next chunk, as mlir-opt does.
            print(render(exc.diagnostic, engine.sources), file=sys.stderr)
            return None, False
        collected.append(exc.diagnostic)
    if not args.verify_diagnostics:
        # A pass may report errors without stopping; the chunk still failed.
        failed = engine.error_count > errors_before
        return (None, False) if failed else (output, True)
    expectations = verify_diagnostics.parse_expectations(chunk, offset)
    problems = verify_diagnostics.check(expectations, collected, filename)
    for problem in problems:
        print(problem, file=sys.stderr)
    return output, not problems


def _timed(timing: Timing | None, label: str):
    return timing.phase(label) if timing is not None else contextlib.nullcontext()


if __name__ == "__main__":
    sys.exit(main())
