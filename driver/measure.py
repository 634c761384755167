"""`fusecc report --measure`: the seed's table 1.3, measured on this machine.

The program is compiled twice for the target, through the same pipeline
as `fusecc run`: once unfused (`fuse` with every kind switched off, so each
op is a singleton group and its own kernel) and once fused. Both run on the
same seeded inputs: each runs once to check its results against the
reference interpreter (which also warms it up), then `repeat` timed runs
alternate between the two (unfused first on even rounds, fused first on
odd ones), so that drifts in machine load hit both alike; figures are
medians.

What each figure is:

* launches, copies: steps of the compiled schedule;
* bytes moved: per launch, every buffer the kernel loads from plus every
  buffer it stores to, once each (its compulsory traffic, from the loop
  IR's loads and stores; nothing here reads hardware counters, and cache
  re-reads inside a kernel are not counted); copies count source and target;
* intermediate memory: the memory plan's naive size (every intermediate
  and scratch buffer its own bytes) and its arena (what the program
  allocates, bytes shared by liveness);
* time: the median wall time of a whole run (inputs in, outputs out), and
  per step the median of the runtime's per-launch profile;
* achieved GB/s: bytes moved / step time;
* achieved GFLOP/s: the group's FLOPs (the cost model's) credited to the
  launches that execute them (`measured_variants.credit_flops`: one piece's
  per launch of a horizontal group), / step time; pack kernels and copies
  compute nothing and show no rate.

The modelled figures beside them are `driver/reporting.py`'s, from the cost
model of the same target, on the very groups that were compiled.

Targets: measuring needs a runtime that can time each launch. Only the CPU
has one here (`MEASURERS`); a GPU measurer (timing each launch of
`runtime/cuda`'s `GpuProgram` with CUDA events) registers under the GPU's
hardware name with `register_measurer`.

The parts: `measurers.py` (who times a target), `measured_call.py` (the
seeded inputs and the check against the reference), `measured_variants.py`
(the two compiled programs and their steps); this module times them and
writes the report.
"""

from __future__ import annotations

import gc
import statistics
import time
from typing import Sequence

import numpy as np

from fusecc.compiler.diagnostics import DiagnosticEngine
from fusecc.compiler.ir import Operation
from fusecc.driver import reporting
from fusecc.driver.measured_call import PROGRAM_RTOL, compare, describe_call_dims, input_dims, model_inputs
from fusecc.driver.measured_variants import Variant, compile_variant
from fusecc.driver.measurers import MeasurementUnavailable, measurer_for
from fusecc.passes.fusion import cost_model as cm
from fusecc.runtime.reference import evaluate


def time_variants(variants: Sequence[Variant], inputs, entry: str, repeat: int) -> None:
    """`repeat` timed runs of each variant, interleaved, order alternating."""
    collect = gc.isenabled()
    gc.collect()
    gc.disable()  # a collection inside one run would count against it alone
    try:
        for round_ in range(repeat):
            for variant in variants if round_ % 2 == 0 else variants[::-1]:
                profile: list = []
                start = time.perf_counter()
                variant.program.run(inputs, entry, profile=profile)
                variant.run_seconds.append(time.perf_counter() - start)
                names = [name for name, _ in profile]
                if names != [s.name for s in variant.steps]:
                    raise RuntimeError(f"the {variant.label} program ran steps {names}, its schedule has {[s.name for s in variant.steps]}")
                for step, (_, seconds) in zip(variant.steps, profile, strict=True):
                    step.seconds.append(seconds)
    finally:
        if collect:
            gc.enable()


def measure(program: Operation, entry: str, target: str = "cpu", repeat: int = 10, seed: int = 0, threads: int | None = None, engine: DiagnosticEngine | None = None) -> dict:
    """The measured report of a verified tensor program's `entry` function
    (see the module doc); `program` itself is left as it is."""
    engine = engine or DiagnosticEngine()
    measurer = measurer_for(target, threads)
    func = program.lookup(entry)
    inputs = model_inputs(func, seed)
    shapes = [np.shape(a) for a in inputs]
    variants = [compile_variant(program, entry, measurer, fused, engine, shapes) for fused in (False, True)]
    with np.errstate(all="ignore"):
        want = evaluate(program, entry, inputs)
    for variant in variants:
        variant.results = variant.program.run(inputs, entry)  # also the warm-up
    time_variants(variants, inputs, entry, repeat)
    unfused, fused = variants
    return {
        "target": fused.model["target"],
        "arch": fused.model["arch"],
        "machine": measurer.describe(),
        "entry": entry,
        "repeat": repeat,
        "seed": seed,
        # the `?` dims of the measured call (and of the modelled figures): the --shape-hint sizes
        "dims": input_dims(func, shapes),
        "dims_described": describe_call_dims(input_dims(func, shapes), False),
        "tolerance": PROGRAM_RTOL,
        "model": {"before": fused.model["before"], "after": fused.model["after"]},
        "measured": {v.label: variant_data(v, compare(v.results, want)) for v in variants},
        "unfused": fused.model["unfused"],
    }


def variant_data(variant: Variant, error: float) -> dict:
    medians = [statistics.median(s.seconds) if s.seconds else 0.0 for s in variant.steps]
    in_steps = sum(medians)
    groups = {g["id"]: g for g in variant.model["groups"]}
    kernels, modelled = [], set()
    for step, seconds in zip(variant.steps, medians, strict=True):
        flops = step.flops  # what this launch computes (measured_variants.credit_flops)
        group = groups.get(step.group)
        first_of_group = group is not None and step.group not in modelled
        modelled.add(step.group)
        kernels.append(
            {
                "name": step.name,
                "kind": step.kind,
                "group": step.group,
                "seconds": seconds,
                "share": seconds / in_steps if in_steps else 0.0,
                "bytes_read": step.bytes_read,
                "bytes_written": step.bytes_written,
                "gb_per_second": step.bytes_moved / seconds / 1e9 if seconds else 0.0,
                # the group's FLOPs credited to the launches that execute them (measured_variants.credit_flops):
                # a pack kernel or a copy has none
                "flops": flops,
                "executed_flops": step.executed_flops,
                "gflop_per_second": flops / seconds / 1e9 if flops and seconds else None,
                # the cost model's figures for the group, on its first launch
                "modelled_seconds": group["time_seconds"] if first_of_group else None,
                "modelled_bytes": group["bytes_moved"] if first_of_group else None,
                "modelled_flops": group["flops"] if first_of_group else None,
                "ops": group["ops"] if group else [],
                "names": group["names"] if group else [],
            }
        )
    return {
        "launches": sum(s.name != "copy" for s in variant.steps),
        "copies": sum(s.name == "copy" for s in variant.steps),
        "groups": len(variant.model["groups"]),
        "bytes_moved": sum(s.bytes_moved for s in variant.steps),
        "naive_bytes": variant.naive_bytes,
        "arena_bytes": variant.arena_bytes,
        "in_place": variant.in_place,
        "time_seconds": statistics.median(variant.run_seconds) if variant.run_seconds else 0.0,
        "run_seconds": variant.run_seconds,
        "step_seconds": in_steps,
        "compile_seconds": variant.compile_seconds,
        "max_error": error,
        "agrees": error <= PROGRAM_RTOL,
        "kernels": kernels,
    }


# --------------------------------------------------------------------------- text


def _change(before: float, after: float, better: str, worse: str) -> str:
    return "same" if before == after else reporting.ratio(before, after, better, worse)


def _row(label: str, cells: Sequence[str], change: str = "") -> str:
    return f"  {label:<22}" + "".join(f"{c:>11}" for c in cells) + f"   {change}".rstrip()


def format_measured_report(data: dict, all_kernels: bool = False) -> str:
    mb, ma = data["model"]["before"], data["model"]["after"]
    u, f = data["measured"]["unfused"], data["measured"]["fused"]
    B, T = cm.format_bytes, cm.format_time
    lines = [
        f"fusion report for {data['target']} ({data['arch']}): the cost model, and the compiled program measured on {data['machine']}",
        f"median of {data['repeat']} interleaved runs of @{data['entry']} on seeded inputs (seed {data['seed']})"
        + (f", dynamic dims at {data['dims_described']}" if data.get("dims_described") else ""),
        "",
        f"  {'':<22}{'cost model':>22}{'measured':>22}",
        _row("", ["unfused", "fused", "unfused", "fused"], "change (measured)"),
        _row("kernel launches", [str(mb["kernels"]), str(ma["kernels"]), str(u["launches"]), str(f["launches"])], _change(u["launches"], f["launches"], "fewer", "more")),
        _row("bytes moved", [B(mb["bytes_moved"]), B(ma["bytes_moved"]), B(u["bytes_moved"]), B(f["bytes_moved"])], _change(u["bytes_moved"], f["bytes_moved"], "less", "more")),
        _row("intermediate memory", [B(mb["intermediate_bytes"]), B(ma["intermediate_bytes"]), B(u["naive_bytes"]), B(f["naive_bytes"])], _change(u["naive_bytes"], f["naive_bytes"], "less", "more")),
        _row("  planned arena", ["", "", B(u["arena_bytes"]), B(f["arena_bytes"])], _change(u["arena_bytes"], f["arena_bytes"], "less", "more")),
        _row("time", [T(mb["time_seconds"]), T(ma["time_seconds"]), T(u["time_seconds"]), T(f["time_seconds"])], _change(u["time_seconds"], f["time_seconds"], "faster", "slower")),
        _row("  in kernels", ["", "", T(u["step_seconds"]), T(f["step_seconds"])]),
    ]
    if u["copies"] or f["copies"]:
        lines.insert(6, _row("  copies", ["", "", str(u["copies"]), str(f["copies"])]))
    lines += [
        "",
        "  bytes moved: modelled from the fusion groups by the cost model; measured column from the loop kernels:",
        "    each buffer a launch loads from or stores to, once (compulsory traffic, not hardware counters)",
        "  intermediate memory: modelled, intermediate tensors written to memory; measured, the naive plan",
        "    (each intermediate and scratch buffer its own bytes) and the planned arena the program allocates",
        "",
    ]
    tolerance = data["tolerance"]
    lines.append(
        f"numerics: max |{data['target']} - reference| / max |reference| = {u['max_error']:.1e} unfused, {f['max_error']:.1e} fused "
        f"(tolerance {tolerance:.0e}): {'both agree' if u['agrees'] and f['agrees'] else 'DISAGREE'}"
    )
    lines.append(f"compile: {u['compile_seconds']:.2f} s unfused, {f['compile_seconds']:.2f} s fused (passes and backend; cached kernels load faster)")
    lines += ["", *_kernel_table("kernels (fused)", f)]
    if all_kernels:
        lines += ["", *_kernel_table("kernels (unfused)", u)]
    lines += ["", *reporting.format_unfused_chains(data["unfused"])]
    return "\n".join(lines) + "\n"


def _kernel_table(title: str, variant: dict) -> list[str]:
    lines = [f"{title}:", f"  {'kernel':<22}{'kind':<12}{'time':>10}{'share':>8}{'model':>10}{'bytes':>10}{'GB/s':>7}{'GFLOP/s':>9}  ops"]
    for k in variant["kernels"]:
        model = cm.format_time(k["modelled_seconds"]) if k["modelled_seconds"] is not None else ""
        gflops = f"{k['gflop_per_second']:.1f}" if k["gflop_per_second"] is not None else ""
        ops = reporting.describe_ops(k) if k["ops"] else ""
        lines.append(
            f"  {k['name']:<22}{k['kind']:<12}{cm.format_time(k['seconds']):>10}{k['share'] * 100:>7.1f}%{model:>10}"
            f"{cm.format_bytes(k['bytes_read'] + k['bytes_written']):>10}{k['gb_per_second']:>7.1f}{gflops:>9}  {ops}"
        )
    return lines


# MeasurementUnavailable is what measure() raises when the target cannot be timed here.
__all__ = ["MeasurementUnavailable", "format_measured_report", "measure", "time_variants", "variant_data"]
