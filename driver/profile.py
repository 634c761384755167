"""`fusecc profile`: measure the fused program kernel by kernel, and list what is left unfused.

The program is compiled once, fused, through the same path as `fusecc report
--measure` (`measured_variants.compile_variant`), run once against the reference
interpreter (the numbers must agree before times mean anything), warmed
up, then timed: every launch gets its own time from the runtime (the CPU
executor's per-launch profile, CUDA events on a GPU, the wall clock around
each harness launch for cuda-sim). Rounds continue past `repeat` until
every kernel has accumulated `MIN_KERNEL_SECONDS` of timed runs (a kernel
too short to time is repeated until it is not), up to `MAX_ROUNDS`; each
figure is the median over rounds.

Per kernel: time; bytes it moves (compulsory traffic of the buffers it
loads and stores) and the FLOPs of its group credited to it
(`measured_variants.credit_flops`: one piece's per launch of a horizontal
group, none for a pack kernel), hence achieved
GB/s and GFLOP/s; the share of the roofline of the hardware description
(`passes/backends/hardware.py`) that it reaches: max(GB/s / bandwidth,
GFLOP/s / peak), the tighter of the two roofs for its arithmetic
intensity; and the source ops its fusion group holds, with locations.

"Unfused patterns" are pairs of consecutive launches of different groups,
memory-bound together (their FLOPs over their bytes below the roofline's
ridge), where the second reads a buffer the first wrote: fusing
them would not write that buffer (unless the program returns it) and not
read it back. Each is ranked by the time it would save at the pair's
measured bandwidth, and carries the fuser's own reason for not fusing them
(`reporting.report_data`'s refusals) and what would force it.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from fusecc.compiler.diagnostics import DiagnosticEngine
from fusecc.compiler.progress import progress
from fusecc.compiler.ir import Operation
from fusecc.dialects import loop
from fusecc.driver import measure, measured_call, measured_variants
from fusecc.passes.backends.hardware import Hardware, hardware
from fusecc.passes.fusion import cost_model as cm
from fusecc.passes.memory.plan import kernels_by_name
from fusecc.runtime.reference import evaluate

MIN_KERNEL_SECONDS = 1e-3  # per kernel, summed over rounds: 10^6 ticks of perf_counter, far above its call overhead
MAX_ROUNDS = 1000

@dataclass
class ProfileRun:
    variant: measured_variants.Variant
    hardware: Hardware
    machine: str
    rounds: int
    max_error: float
    entry: str
    dims: str = ""  # the `?` dims of the profiled call, said (measured_call.describe_call_dims)


def time_steps(variant: measured_variants.Variant, inputs, entry: str, warmup: int, repeat: int, min_kernel_seconds: float = MIN_KERNEL_SECONDS) -> int:
    """Warm up, then time `repeat` rounds or more (see the module doc) with
    `measure.time_variants`, report --measure's timer; the per-launch times go
    to `variant.steps[i].seconds`. Returns the rounds run."""
    for _ in range(warmup):
        variant.program.run(inputs, entry)
    rounds = 0
    for _ in progress(range(repeat), "timing the kernels", total=repeat):
        measure.time_variants([variant], inputs, entry, 1)
        rounds += 1
    while rounds < MAX_ROUNDS and any(sum(s.seconds) < min_kernel_seconds for s in variant.steps):
        measure.time_variants([variant], inputs, entry, 1)
        rounds += 1
    return rounds


def run_profile(module: Operation, entry: str, measurer, inputs: Sequence[np.ndarray] | None = None, warmup: int = 2, repeat: int = 10, seed: int = 0, engine: DiagnosticEngine | None = None) -> ProfileRun:
    """Compile `module` (left as it is) fused for the measurer's target,
    check it against the reference and time it."""
    engine = engine or DiagnosticEngine()
    from_inputs = inputs is not None
    if inputs is None:
        inputs = measured_call.model_inputs(module.lookup(entry), seed)
    shapes = [np.shape(a) for a in inputs]
    # a program with `?` dims is compiled, modelled and counted at the sizes of this call
    variant = measured_variants.compile_variant(module, entry, measurer, True, engine, shapes)
    dims = measured_call.describe_call_dims(measured_call.input_dims(module.lookup(entry), shapes), from_inputs)
    with np.errstate(all="ignore"):
        want = evaluate(module, entry, inputs)
    error = measured_call.compare(variant.program.run(inputs, entry), want)
    rounds = time_steps(variant, inputs, entry, warmup, repeat)
    return ProfileRun(variant, hardware(measurer.target), measurer.describe(), rounds, error, entry, dims)


# --------------------------------------------------------------------------- figures


def kernel_rows(run: ProfileRun) -> list[dict]:
    hw = run.hardware
    groups = {g["id"]: g for g in run.variant.model["groups"]}
    rows = []
    for index, step in enumerate(run.variant.steps):
        flops = step.flops  # what this launch computes (measured_variants.credit_flops)
        seconds = statistics.median(step.seconds) if step.seconds else 0.0
        group = groups.get(step.group, {})
        gbps = step.bytes_moved / seconds / 1e9 if seconds else 0.0
        gflops = flops / seconds / 1e9 if seconds else 0.0
        intensity = flops / step.bytes_moved if step.bytes_moved else float("inf")
        ridge = hw.peak_flops / hw.memory_bandwidth
        rows.append(
            {
                "index": index,
                "name": step.name,
                "kind": step.kind,
                "group": step.group,
                "seconds": seconds,
                "bytes_read": step.bytes_read,
                "bytes_written": step.bytes_written,
                "bytes": step.bytes_moved,
                "flops": flops,
                "executed_flops": step.executed_flops,
                "gb_per_second": gbps,
                "gflop_per_second": gflops,
                "arithmetic_intensity": intensity if step.bytes_moved else None,
                "bound": "compute" if intensity >= ridge else "memory",
                "roofline_fraction": max(gbps * 1e9 / hw.memory_bandwidth, gflops * 1e9 / hw.peak_flops),
                "ops": group.get("ops", []),
                "names": group.get("names", []),
                "locations": group.get("locations", []),
            }
        )
    return rows


def _launch_buffers(schedule: loop.ScheduleOp) -> list[tuple[set, set, set]]:
    """Per step (launch or copy): (buffers read, buffers written, their roots
    that the schedule returns), buffers as the SSA values the schedule passes."""
    kernels = kernels_by_name(schedule)
    outputs = set(schedule.output_args)

    def returned(values: set) -> set:
        return {v for v in values if _root(v) in outputs}

    out = []
    for op in schedule.body:
        if isinstance(op, loop.LaunchOp):
            read_i, written_i = measured_variants.accessed_arguments(kernels[op.kernel_name])
            read = {op.operands[i] for i in read_i}
            written = {op.operands[i] for i in written_i}
            out.append((read, written, returned(written)))
        elif isinstance(op, loop.CopyOp):
            out.append(({op.source}, {op.target}, returned({op.target})))
    return out


def _root(value):
    while isinstance(value.defining_op, loop.ViewOp):
        value = value.defining_op.source
    return value


def unfused_patterns(run: ProfileRun, rows: list[dict]) -> list[dict]:
    """Adjacent memory-bound launches of different groups joined by a buffer,
    ranked by the time fusing them would save (see the module doc)."""
    schedule = run.variant.module.lookup(run.entry)
    buffers = _launch_buffers(schedule)
    byte_size = measured_variants.buffer_bytes(schedule, run.variant.dims or None)  # at the profiled call's dims
    declined = run.variant.model.get("declined", [])
    groups = {g["id"]: g for g in run.variant.model["groups"]}
    patterns = []
    for a, b in zip(rows, rows[1:]):
        if "copy" in (a["kind"], b["kind"]) or a["group"] == b["group"] or not _memory_bound_together(a, b, run.hardware):
            continue
        (_, written, returned), (read, _, _) = buffers[a["index"]], buffers[b["index"]]
        shared = written & read
        if not shared:
            continue
        saved = sum(byte_size.get(v, 0) * (1 if v in returned else 2) for v in shared)
        pair_bytes, pair_seconds = a["bytes"] + b["bytes"], a["seconds"] + b["seconds"]
        saved_seconds = pair_seconds * saved / pair_bytes if pair_bytes else 0.0
        refusals = [d for d in declined if d["producer_group"] == a["group"] and d["consumer_group"] == b["group"]]
        forbidden = [f for g in (a["group"], b["group"]) for f in groups.get(g, {}).get("forbidden", [])]
        patterns.append(
            {
                "producer": a["name"],
                "consumer": b["name"],
                "producer_group": a["group"],
                "consumer_group": b["group"],
                "bytes_saved": saved,
                "seconds": pair_seconds,
                "seconds_saved": saved_seconds,
                "reason": _reason(refusals, forbidden) or f"the fuser recorded no decision between a {a['kind']} group and a {b['kind']} group: no fusion rule pairs them",
                "force": _how_to_force(refusals, forbidden),
            }
        )
    patterns.sort(key=lambda p: -p["seconds_saved"])
    return patterns


def _memory_bound_together(a: dict, b: dict, hw: Hardware) -> bool:
    """The two kernels as one would sit left of the roofline's ridge: then
    the bytes fusion saves are time saved."""
    flops, moved = a["flops"] + b["flops"], a["bytes"] + b["bytes"]
    return moved > 0 and flops / moved < hw.peak_flops / hw.memory_bandwidth


def _at(name: str, where: str) -> str:
    return f"{name} at {where}" if where else name


def _reason(refusals: list[dict], forbidden: list) -> str:
    if refusals:
        return "; ".join(dict.fromkeys(r["reason"] for r in refusals))
    if forbidden:
        return "fusion.forbid is set on " + ", ".join(_at(*f) for f in forbidden)
    return ""


def _how_to_force(refusals: list[dict], forbidden: list) -> str:
    if forbidden:
        return "remove {fusion.forbid = true} from " + ", ".join(_at(*f) for f in forbidden)
    costly = [r for r in refusals if not r["structural"]]
    if costly:
        r = costly[0]
        where = f" at {r['consumer_location']}" if r["consumer_location"] else ""
        return f"add {{fusion.force = true}} to {r['consumer']} ({r['consumer_op']}){where}"
    if refusals:
        return "nothing forces it: fusing these kinds is not legal (fusion.force never overrides legality)"
    return "nothing: no fusion rule pairs these groups"


def profile_data(run: ProfileRun) -> dict:
    entry = run.entry
    rows = kernel_rows(run)
    hw = run.hardware
    total = sum(r["seconds"] for r in rows)
    return {
        "target": run.variant.model["target"],
        "machine": run.machine,
        "entry": entry,
        "dims": run.variant.dims,
        "dims_described": run.dims,
        "rounds": run.rounds,
        "hardware": {"name": hw.name, "memory_bandwidth": hw.memory_bandwidth, "peak_flops": hw.peak_flops, "bandwidth_ceiling": hw.bandwidth_ceiling, "flops_ceiling": hw.flops_ceiling},
        "time_seconds": statistics.median(run.variant.run_seconds) if run.variant.run_seconds else 0.0,
        "kernel_seconds": total,
        "max_error": run.max_error,
        "agrees": run.max_error <= measured_call.PROGRAM_RTOL,
        "tolerance": measured_call.PROGRAM_RTOL,
        "kernels": rows,
        "unfused_patterns": unfused_patterns(run, rows),
    }


# --------------------------------------------------------------------------- outputs


def chrome_trace(data: dict) -> dict:
    """Chrome/Perfetto trace events: one complete slice per launch, laid end
    to end at its median time (one round, as the runtime ran them)."""
    events = [{"name": "process_name", "ph": "M", "pid": 1, "args": {"name": f"fusecc profile ({data['target']}, {data['machine']})"}}]
    at = 0.0
    for k in data["kernels"]:
        micro = k["seconds"] * 1e6
        args = {key: k[key] for key in ("kind", "group", "bytes", "flops", "gb_per_second", "gflop_per_second", "roofline_fraction", "bound")}
        args["ops"] = ", ".join(f"{n} {o}" for o, n in zip(k["ops"], k["names"]))
        args["locations"] = k["locations"]
        events.append({"name": k["name"], "cat": k["kind"], "ph": "X", "ts": at, "dur": micro, "pid": 1, "tid": 1, "args": args})
        at += micro
    return {"traceEvents": events, "displayTimeUnit": "ns"}


def write_trace(data: dict, path: str) -> None:
    with open(path, "w") as f:
        json.dump(chrome_trace(data), f, indent=1)


class PlotUnavailable(Exception):
    pass


def plot_roofline(data: dict, path: str) -> None:
    """A roofline (log-log GFLOP/s over FLOP/byte) of the hardware
    description, one point per kernel that computes."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise PlotUnavailable("--plot draws with matplotlib, which is not installed (pip install 'fusecc[plot]')") from None
    hw = data["hardware"]
    points = [k for k in data["kernels"] if k["flops"] and k["seconds"]]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    lows = [k["arithmetic_intensity"] for k in points] or [1.0]
    xs = np.logspace(np.log10(min(lows + [0.01]) / 2), np.log10(max(lows + [hw["peak_flops"] / hw["memory_bandwidth"]]) * 4), 200)
    ax.plot(xs, np.minimum(hw["peak_flops"], xs * hw["memory_bandwidth"]) / 1e9, color="black", label=f"{hw['name']} roofline")
    for k in points:
        ax.scatter(k["arithmetic_intensity"], k["gflop_per_second"], s=20)
        ax.annotate(k["name"], (k["arithmetic_intensity"], k["gflop_per_second"]), fontsize=7, xytext=(3, 3), textcoords="offset points")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax.set_ylabel("GFLOP/s")
    ax.set_title(f"fusecc profile: @{data['entry']} on {data['machine']}")
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def format_profile(data: dict) -> str:
    T, B = cm.format_time, cm.format_bytes
    hw = data["hardware"]
    common = _source_file(data)
    lines = [
        f"profile of @{data['entry']} on {data['target']} ({data['machine']}): median of {data['rounds']} rounds"
        + (f", dynamic dims at {data['dims_described']}" if data.get("dims_described") else ""),
        f"  run {T(data['time_seconds'])}, in kernels {T(data['kernel_seconds'])}; numerics: max relative error {data['max_error']:.1e} "
        f"({'agrees with' if data['agrees'] else 'DISAGREES with'} the reference at {data['tolerance']:.0e})",
        f"  roofline of '{hw['name']}': {hw['memory_bandwidth'] / 1e9:.0f} GB/s, {hw['peak_flops'] / 1e9:.0f} GFLOP/s (passes/backends/hardware.py)",
        "",
        f"  {'kernel':<24}{'time':>10}{'share':>7}{'bytes':>10}{'GB/s':>8}{'GFLOP/s':>9}{'roof':>6}  {'bound':<8}source ops" + (f" (line:col of {common})" if common else ""),
    ]
    total = data["kernel_seconds"] or 1.0
    for k in data["kernels"]:
        gflops = f"{k['gflop_per_second']:.1f}" if k["flops"] else "-"
        lines.append(
            f"  {k['name']:<24}{T(k['seconds']):>10}{k['seconds'] / total * 100:>6.1f}%{B(k['bytes']):>10}{k['gb_per_second']:>8.1f}{gflops:>9}"
            f"{k['roofline_fraction'] * 100:>5.0f}%  {k['bound']:<8}{_sources(k, common)}"
        )
    over = [k for k in data["kernels"] if k["roofline_fraction"] > 1]
    if any(k["bound"] == "memory" for k in over):
        lines.append(f"  (roof above 100%, memory-bound: the kernel's data came from cache, faster than the {hw['memory_bandwidth'] / 1e9:.0f} GB/s of memory the roofline assumes)")
    if any(k["bound"] == "compute" for k in over):
        lines.append(
            f"  (roof above 100%, compute-bound: faster than the {hw['peak_flops'] / 1e9:.0f} GFLOP/s the hardware description models, "
            f"the rate its cost model assumes; the FMA ceiling of all its cores is {hw['flops_ceiling'] / 1e9:.0f} GFLOP/s)"
        )
    lines += ["", "unfused patterns (adjacent memory-bound kernels joined by a buffer; fusing them saves the bytes shown):"]
    if not data["unfused_patterns"]:
        lines.append("  none")
    for p in data["unfused_patterns"]:
        lines.append(f"  {p['producer']} -> {p['consumer']}: saves {B(p['bytes_saved'])}, about {T(p['seconds_saved'])} of {T(p['seconds'])}")
        lines.append(f"    declined: {p['reason']}")
        lines.append(f"    to force: {p['force']}")
    return "\n".join(lines) + "\n"


def _source_file(data: dict) -> str | None:
    """The one file every located op comes from, if there is one."""
    files = {where.rsplit(":", 2)[0] for k in data["kernels"] for where in k["locations"] if where.count(":") >= 2}
    return files.pop() if len(files) == 1 else None


def _sources(k: dict, common: str | None) -> str:
    parts = []
    for op, name, where in zip(k["ops"], k["names"], k["locations"]):
        text = f"{name} {op.removeprefix('tensor.')}" if name.startswith("%") else op.removeprefix("tensor.")
        if common and where.startswith(common + ":"):
            where = where[len(common) + 1 :]
        parts.append(f"{text} ({where})" if where else text)
    return ", ".join(parts)


__all__ = ["MIN_KERNEL_SECONDS", "PlotUnavailable", "ProfileRun", "chrome_trace", "format_profile", "kernel_rows", "plot_roofline", "profile_data", "run_profile", "time_steps", "unfused_patterns", "write_trace"]
