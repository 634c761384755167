"""`fusecc bisect`: the first fusion group, then the first pass, at which a target leaves the reference.

    fusecc bisect model.ir --inputs in.npz [--target cpu|cuda-sim] [--gpu G] [--rtol R]
                  [-o reproducer.ir] [--insert-pass AFTER:PASS ...] [--json]

The work is driver/bisect.py's; this module parses flags and writes the
reproducer (.ir, and its inputs as .npz beside it).
"""

from __future__ import annotations

import json
import os
import sys

from fusecc.compiler.diagnostics import DiagnosticEngine, UsageError
from fusecc.compiler.pass_manager import PipelineError, parse_pipeline
from fusecc.driver.pipelines import is_loop_level
from fusecc.tools import model_options, run_io
from fusecc.tools.common import ArgumentParser, phase, write_output
from fusecc.tools.target_options import add_target_options, resolve_target

BISECT_TARGETS = ("cpu", "cuda-sim")


def parser() -> ArgumentParser:
    p = ArgumentParser(prog="fusecc bisect", description="When a target disagrees with the reference interpreter, find the first fusion group whose output diverges, the first pass at which its numbers change, and write a reproducer holding just that group.")
    p.add_argument("input", help="the program (.ir or .onnx)")
    model_options.add_frontend_options(p)
    add_target_options(p, "the target checked against the reference: cpu (default) or cuda-sim (the CUDA C on this CPU)", BISECT_TARGETS)
    p.add_argument("--inputs", default=None, help=".npz with the arguments, by name (x for %%x) or as arg0, arg1, ...")
    p.add_argument("--random-inputs", action="store_true", help="fill the inputs missing from --inputs with seeded random data")
    p.add_argument("--seed", type=int, default=0, help="seed for --random-inputs (default 0)")
    p.add_argument("--dims", default=None, metavar="B=3,S=7", help="sizes of dynamic ('?') dims for --random-inputs (docs/dynamic-shapes.md)")
    p.add_argument("--entry", default=None, help="function to check (default @main, else the first)")
    p.add_argument("--rtol", type=float, default=None, help="max |target - reference| / max |reference| that still agrees (default 1e-4, report --measure's)")
    p.add_argument("-o", dest="output", default=None, help="the reproducer .ir (default: NAME.reproducer.ir in this folder); its inputs go beside it as .npz")
    p.add_argument("--insert-pass", action="append", default=[], metavar="AFTER:PASS", help="run PASS after the pipeline's pass AFTER (repeatable), e.g. 'tile:test-inject-fault{group=1}'")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    return p


def parse_insertions(specs: list[str]) -> list[tuple[str, str]]:
    out = []
    for spec in specs:
        after, sep, pass_text = spec.partition(":")
        if not sep or not after or not pass_text:
            raise UsageError(f"--insert-pass '{spec}': write AFTER:PASS, e.g. 'tile:test-inject-fault{{group=1}}'")
        try:
            parse_pipeline(pass_text)
        except PipelineError as exc:
            raise UsageError(f"--insert-pass '{spec}': {exc}") from None
        out.append((after, pass_text))
    return out


def main(argv: list[str], engine: DiagnosticEngine, load, entry_function, gather_inputs) -> int:
    """`load`, `entry_function` and `gather_inputs` are tools/fusecc.py's (passed in: the two modules must not import each other)."""
    from fusecc.driver import bisect, measured_call

    args = parser().parse_args(argv)
    choice = resolve_target(args, "fusecc bisect", BISECT_TARGETS, "cpu")
    if args.inputs is None and not args.random_inputs:
        raise UsageError("fusecc bisect needs the inputs that show the disagreement: --inputs in.npz (or --random-inputs)")
    if args.rtol is not None and not args.rtol > 0:
        raise UsageError("--rtol must be positive")
    insert = parse_insertions(args.insert_pass)
    try:
        bisect.pipeline_entries(choice.name, choice.gpu, insert)
    except ValueError as exc:
        raise UsageError(f"--insert-pass: {exc}") from None
    module = load(args.input, engine, args)
    if is_loop_level(module):
        raise UsageError("fusecc bisect compares a tensor program with the reference; this one is at the loop level already")
    func = entry_function(module, args.entry)
    inputs = gather_inputs(func, args.inputs, args.random_inputs, args.seed, args.dims)
    log = (lambda text: print(f"fusecc bisect: {text}", file=sys.stderr)) if not args.json else (lambda text: None)
    with phase("the bisected program"):
        result = bisect.bisect(module, func.sym_name, inputs, choice.name, choice.gpu, args.rtol or measured_call.PROGRAM_RTOL, insert, engine, log)
    written = None
    if result.reproducer is not None:
        stem = os.path.splitext(os.path.basename(args.input))[0]
        path = args.output or f"{stem}.reproducer.ir"
        write_output(path, result.reproducer)
        npz = os.path.splitext(path)[0] + ".npz"
        run_io.write_npz(npz, result.reproducer_inputs)
        written = (path, npz)
    if args.json:
        data = {
            "target": result.target,
            "agrees": result.agrees,
            "error": result.error,
            "rtol": result.rtol,
            "groups": result.groups,
            "group": result.group,
            "stages": [vars(s) for s in result.stages],
            "culprit": result.culprit,
            "reproducer": written[0] if written else None,
            "reproducer_inputs": written[1] if written else None,
            "reproducer_fails": result.reproducer_fails,
            "summary": result.summary,
        }
        write_output(None, json.dumps(data, indent=2) + "\n")
    else:
        text = bisect.format_result(result)
        if written:
            text += f"  reproducer: {written[0]} (inputs {written[1]}): fusecc run {written[0]} --inputs {written[1]} --target {choice.name}\n"
        write_output(None, text)
    return 0
