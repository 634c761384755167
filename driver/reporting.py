"""`fusecc explain` and `fusecc report`: fusion made observable.

`explain` prints a remark for every fusion decision (the same remarks as
`fusecc-opt -p fuse --explain-fusion`). `report` prints the seed's table 1.3
for one program, before and after fusion, from the cost model of the
target: kernel launches, modelled memory traffic, intermediate memory (the
intermediate tensors that are written to memory), modelled time; then the
groups with their kind and ops, and every chain left unfused with the
reason the cost model gave.

Both first run the passes that precede `fuse` at the `fused` emit level
(`driver/pipelines.py`), so "unfused" means "one kernel per op of the
program as it reaches fusion".

`report --measure` (`driver/measure.py`) puts measured figures of the
compiled program beside these; `report --show-source KERNEL` prints the
generated source of one kernel (`kernel_source`).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from fusecc.compiler.dims import describe_hints, free_symbols
from fusecc.compiler.diagnostics import DiagnosticEngine
from fusecc.passes.backends.hardware import Hardware, hardware
from fusecc.compiler.ir import Operation
from fusecc.compiler.pass_manager import PassContext, PassManager, parse_pipeline, run_pipeline
from fusecc.compiler.printer import print_op
from fusecc.compiler.traits import Terminator
from fusecc.compiler.verifier import verify

from fusecc.passes.fusion import cost_model as cm
from fusecc.passes.fusion.fuse import PHASES, Fuse, FusionResult, fuse_module
from fusecc.passes.fusion.partition import FORBID, flag, is_fusable
from fusecc.driver.pipelines import pipeline_for_level


@dataclass
class Totals:
    kernels: int
    bytes_moved: int
    intermediate_bytes: int
    time_seconds: float


def split_at_fuse(level: str, target: str) -> tuple[PassManager, PassManager]:
    """The passes of an emit level's pipeline before `fuse` and after it."""
    manager = parse_pipeline(pipeline_for_level(level, target=target))
    at = next((i for i, entry in enumerate(manager.entries) if isinstance(entry, Fuse)), len(manager.entries))
    return PassManager(manager.anchor, manager.entries[:at]), PassManager(manager.anchor, manager.entries[at + 1 :])


def _prepare(module: Operation, target: str, engine: DiagnosticEngine) -> None:
    """Run what the `fused` level runs before `fuse` (canonicalize, cse)."""
    before_fuse, _ = split_at_fuse("fused", target)
    run_pipeline(before_fuse, module, PassContext(diagnostics=engine, target=target))


def _fuse(module: Operation, target: str, engine: DiagnosticEngine, enabled=PHASES, allow_tf32: bool = False) -> tuple[Hardware, Totals, FusionResult]:
    hw = hardware(target).with_tf32(allow_tf32)
    _prepare(module, target, engine)
    before = unfused_totals(module, hw)
    result = fuse_module(module, hw, enabled)
    verify(module)
    return hw, before, result


def _is_intermediate(value) -> bool:
    return not any(user.has_trait(Terminator) and user.parent_op is not None and user.parent_op.name == "func.func" for user in value.users)


def unfused_totals(module: Operation, hw: Hardware) -> Totals:
    """Every fusable op as its own kernel."""
    ops = [op for op in module.walk() if is_fusable(op)]
    costs = [cm.estimate_ops([op], hw) for op in ops]
    intermediate = sum(cm.byte_size(r) for op in ops for r in op.results if _is_intermediate(r))
    return Totals(len(ops), sum(c.bytes_moved for c in costs), intermediate, sum(c.time_seconds for c in costs))


def fused_totals(groups, hw: Hardware) -> tuple[Totals, list[cm.GroupCost]]:
    costs = [cm.estimate_group(g, hw) for g in groups]
    intermediate = sum(cm.byte_size(r) for g in groups for r in g.results if _is_intermediate(r))
    totals = Totals(len(groups), sum(c.bytes_moved for c in costs), intermediate, sum(c.time_seconds for c in costs))
    return totals, costs


def report_data(module: Operation, target: str, engine: DiagnosticEngine, enabled=PHASES, allow_tf32: bool = False) -> dict:
    """The report of `module`, which is left fused (with the fusion kinds
    `enabled`; none gives one group per op, the unfused program; f32
    matmuls on TF32 tensor cores where `allow_tf32`)."""
    hw, before, result = _fuse(module, target, engine, enabled, allow_tf32)
    after, costs = fused_totals(result.groups, hw)
    group_of = {op: g for g in result.groups for op in g.body_ops()}
    rows = []
    for group, cost in zip(result.groups, costs):
        log = next(log for log, groups in result.logs if group in groups)
        ops = [op for op in group.body_ops() if op.name != "tensor.constant"]
        rows.append(
            {
                "id": group.attr("id"),
                "kind": group.attr("kind"),
                "ops": [op.name for op in ops],
                "names": [log.name(op) for op in ops],
                "locations": [source_location(op.location) for op in ops],
                "forbidden": [[log.name(op), source_location(op.location)] for op in ops if flag(op, FORBID)],
                "bytes_moved": cost.bytes_moved,
                "flops": cost.flops,
                "registers_per_thread": cost.registers_per_thread,
                "shared_memory_bytes": cost.shared_memory_bytes,
                "time_seconds": cost.time_seconds,
                **gpu_columns(cost),
            }
        )
    unfused, declined = [], []
    for log, _ in result.logs:
        for refusal in log.refusals:
            mine, theirs = group_of.get(refusal.op), group_of.get(refusal.partner)
            if mine is not None and mine is theirs:
                continue  # fused in the end, by another route
            producer, consumer = (theirs, refusal.partner), (mine, refusal.op)
            if not refusal.partner_feeds_op:
                producer, consumer = consumer, producer
            entry = {
                "producer": log.name(producer[1]),
                "producer_group": producer[0].attr("id") if producer[0] is not None else None,
                "consumer": log.name(consumer[1]),
                "consumer_group": consumer[0].attr("id") if consumer[0] is not None else None,
                "reason": refusal.reason,
            }
            # every refusal, legality ones too, with where the consumer is (fusecc profile)
            declined.append({**entry, "structural": refusal.structural, "consumer_op": consumer[1].name, "consumer_location": source_location(consumer[1].location)})
            if not refusal.structural:
                unfused.append(entry)
    return {
        "target": hw.name,
        "arch": hw.arch,
        "before": asdict(before),
        "after": asdict(after),
        **({"roofline": roofline_totals(costs, hw)} if hw.is_gpu else {}),
        "groups": rows,
        "unfused": unfused,
        "declined": declined,
        **_shape_hints(module),
    }


def _shape_hints(module: Operation) -> dict:
    """The sizes the cost model assumed for dynamic dims (--shape-hint), if any."""
    symbols = set()
    for func in module.walk():
        if func.name == "func.func":
            for t in func.function_type.inputs:
                symbols |= free_symbols(getattr(t, "shape", ()))
    return {"shape_hints": describe_hints(symbols)} if symbols else {}


def gpu_columns(cost: cm.GroupCost) -> dict:
    """A GPU kernel's launch, the pipe that bounds it, and its modelled time
    beside the roofline bound of the same work: DRAM bytes at the full
    bandwidth or flops at the peak of the unit used (FMA pipes, tensor
    cores), whichever is longer. The ratio leaves the launch out."""
    if cost.gpu is None:
        return {}
    t, launch, work = cost.gpu, cost.launch, cost.work
    return {
        "kernel_seconds": t.kernel_seconds,
        "roofline_seconds": cost.roofline_seconds,
        "roofline_ratio": t.kernel_seconds / cost.roofline_seconds if cost.roofline_seconds else None,
        "bound": t.bound,
        "unit": work.tensor_unit if work.tensor_flops else "fma",
        "memory_seconds": t.memory_seconds,
        "compute_seconds": t.compute_seconds,
        "shared_seconds": t.shared_seconds,
        "blocks": launch.blocks,
        "threads_per_block": launch.threads,
        "theoretical_occupancy": t.occupancy,
        "waves": t.waves,
        "achieved_bandwidth": t.achieved_bandwidth,
        "shared_requests_per_fma": work.shared_requests * 32 / (work.fma_flops / 2) if work.fma_flops and work.shared_requests else None,
        "shared_wavefronts_per_block": work.shared_requests * work.conflict_ways / launch.blocks if launch.blocks else 0.0,
    }


def roofline_totals(costs: list[cm.GroupCost], hw: Hardware) -> dict:
    """The program's kernels against their roofline bounds, with and without launches."""
    kernels = sum(c.gpu.kernel_seconds for c in costs if c.gpu is not None)
    roofline = sum(c.roofline_seconds or 0.0 for c in costs)
    launches = sum(c.gpu.launch_seconds for c in costs if c.gpu is not None)
    return {
        "memory_bandwidth": hw.memory_bandwidth,
        "peak_flops": hw.peak_flops,
        "peak_tensor_flops": hw.peak_tensor_flops,
        "peak_tf32_flops": hw.peak_tf32_flops if hw.tf32_matmuls else None,  # --allow-tf32 only
        "kernel_seconds": kernels,
        "launch_seconds": launches,
        "roofline_seconds": roofline,
        "ratio": kernels / roofline if roofline else None,
        "ratio_with_launches": (kernels + launches) / roofline if roofline else None,
    }


def source_location(location) -> str:
    """`file:line:col` of a location, or its names (an imported model's nodes)."""
    from fusecc.compiler.diagnostics import FusedLoc, NameLoc

    found = location.file_line_col() if location is not None else None
    if found is not None:
        return f"{found.file}:{found.line}:{found.col}"
    if isinstance(location, NameLoc):
        return location.name
    if isinstance(location, FusedLoc):
        return ", ".join(filter(None, (source_location(l) for l in location.locations)))
    return ""


def ratio(before: float, after: float, better: str, worse: str = "worse") -> str:
    """`4.5x faster` (after is better), `1.2x worse`, `all gone`."""
    if after <= 0:
        return "all gone" if before > 0 else ""
    factor = before / after
    return f"{factor:.1f}x {better}" if factor >= 1 else f"{1 / factor:.1f}x {worse}"


def _describe(op: str, name: str) -> str:
    short = op.removeprefix("tensor.")
    return f"{name} {short}" if name.startswith("%") else short


def describe_ops(group: dict) -> str:
    """A group row's ops as `%o_proj matmul, %o_bias add`."""
    return ", ".join(_describe(op, name) for op, name in zip(group["ops"], group["names"]))


def format_unfused_chains(unfused: list[dict]) -> list[str]:
    lines = ["unfused chains:"]
    if not unfused:
        lines.append("  none: every candidate fusion was taken")
    for u in unfused:
        where = lambda name, gid: f"{name} (group {gid})" if gid is not None else name
        lines.append(f"  {where(u['producer'], u['producer_group'])} -> {where(u['consumer'], u['consumer_group'])}: {u['reason']}")
    return lines


def format_report(data: dict) -> str:
    b, a = data["before"], data["after"]
    lines = [f"fusion report for {data['target']} ({data['arch']}), from the cost model", ""]
    lines.append(f"  {'':<24}{'unfused':>12}{'fused':>12}   change")
    table = [
        ("kernel launches", str(b["kernels"]), str(a["kernels"]), ratio(b["kernels"], a["kernels"], "fewer")),
        ("memory traffic", cm.format_bytes(b["bytes_moved"]), cm.format_bytes(a["bytes_moved"]), ratio(b["bytes_moved"], a["bytes_moved"], "less")),
        ("intermediate memory", cm.format_bytes(b["intermediate_bytes"]), cm.format_bytes(a["intermediate_bytes"]), ratio(b["intermediate_bytes"], a["intermediate_bytes"], "less")),
        ("modelled time", cm.format_time(b["time_seconds"]), cm.format_time(a["time_seconds"]), ratio(b["time_seconds"], a["time_seconds"], "faster")),
    ]
    for label, before, after, change in table:
        lines.append(f"  {label:<24}{before:>12}{after:>12}   {change}")
    if "shape_hints" in data:
        lines.append(f"  dynamic dims costed at: {data['shape_hints']}")
    if "roofline" in data:
        lines += format_roofline(data)
    lines += ["", "groups:", f"  {'id':>3}  {'kind':<12}{'time':>10}{'traffic':>11}  ops"]
    for g in data["groups"]:
        lines.append(f"  {g['id']:>3}  {g['kind']:<12}{cm.format_time(g['time_seconds']):>10}{cm.format_bytes(g['bytes_moved']):>11}  {describe_ops(g)}")
    lines += ["", *format_unfused_chains(data["unfused"])]
    return "\n".join(lines) + "\n"


def format_roofline(data: dict) -> list[str]:
    """Per kernel: the modelled time (launch excluded), the roofline bound,
    their ratio, the pipe that bounds it, blocks, occupancy and waves."""
    r = data["roofline"]
    lines = [
        "",
        f"kernels against the roofline ({r['memory_bandwidth'] / 1e12:.1f} TB/s; FMA {r['peak_flops'] / 1e12:.0f}, tensor cores {r['peak_tensor_flops'] / 1e12:.0f}"
        + (f", TF32 {r['peak_tf32_flops'] / 1e12:.0f}" if r.get("peak_tf32_flops") else "")
        + " TFLOP/s):",
        f"  {'id':>3}  {'kind':<12}{'modelled':>10}{'roofline':>10}{'ratio':>7}  {'bound':<8}{'unit':<7}{'blocks':>7}{'occupancy':>10}{'waves':>7}",
    ]
    for g in data["groups"]:
        if "roofline_ratio" not in g:
            continue  # a dynamic group: no launch to model (docs/dynamic-shapes.md)
        ratio_ = "" if g["roofline_ratio"] is None else f"{g['roofline_ratio']:.1f}x"
        lines.append(
            f"  {g['id']:>3}  {g['kind']:<12}{cm.format_time(g['kernel_seconds']):>10}{cm.format_time(g['roofline_seconds']):>10}{ratio_:>7}  "
            f"{g['bound']:<8}{g['unit']:<7}{g['blocks']:>7}{g['theoretical_occupancy']:>10.0%}{g['waves']:>7.2f}"
        )
    if r["ratio"] is not None:
        lines.append(
            f"  all kernels {cm.format_time(r['kernel_seconds'])} modelled vs {cm.format_time(r['roofline_seconds'])} roofline: {r['ratio']:.1f}x "
            f"({r['ratio_with_launches']:.1f}x with {cm.format_time(r['launch_seconds'])} of launches)"
        )
    return lines


def report(module: Operation, target: str, as_json: bool = False, engine: DiagnosticEngine | None = None, allow_tf32: bool = False) -> str:
    data = report_data(module, target, engine or DiagnosticEngine(), allow_tf32=allow_tf32)
    return json.dumps(data, indent=2) + "\n" if as_json else format_report(data)


def explain(module: Operation, target: str, engine: DiagnosticEngine) -> str:
    """Report every fusion decision as a remark through `engine` (the tool
    points it at stdout); returns the summary line that follows them."""
    _, before, result = _fuse(module, target, engine)
    result.emit_remarks(engine)
    return f"{before.kernels} ops in {len(result.groups)} groups on {target}\n"


# --------------------------------------------------------------------------- generated source

SOURCE_LEVELS = ("loop", "llvm", "cuda")


def kernel_source(module: Operation, target: str, kernel: str, level: str, engine: DiagnosticEngine) -> str:
    """The generated source of one kernel of the fused program: the
    `loop.kernel` of that symbol (or every kernel of group N when `kernel`
    is a number), as loop IR, LLVM IR (the CPU's) or CUDA C (a GPU's), as
    `fusecc --emit=LEVEL` emits it."""
    from fusecc.dialects import loop
    from fusecc.compiler.diagnostics import UsageError

    hw = hardware(target)
    if level == "llvm" and hw.kind != "cpu":
        raise UsageError(f"LLVM IR is generated for the CPU; use --target cpu (not {target}) with --level llvm")
    if level == "cuda" and hw.kind == "cpu":
        raise UsageError("CUDA C is generated for a GPU; use --target cuda (tuned with --gpu h200 or a100) with --level cuda")
    pipeline = parse_pipeline(pipeline_for_level("loop", target=target))
    run_pipeline(pipeline, module, PassContext(diagnostics=engine, target=target))
    kernels = [op for op in module.body if isinstance(op, loop.KernelOp)]
    chosen = [k for k in kernels if k.sym_name == kernel or (kernel.isdigit() and k.attr("group") == int(kernel))]
    if not chosen:
        names = ", ".join(k.sym_name for k in kernels)
        raise UsageError(f"no kernel '{kernel}' in the fused program for {target} (kernels: {names}; or give a group id)")
    names = [k.sym_name for k in chosen]
    if level == "loop":
        return "".join(print_op(k) for k in chosen)
    if level == "llvm":
        from fusecc.passes.backends.llvm.emit import emit_llvm

        return emit_llvm(module, only=set(names)).text
    from fusecc.passes.backends.cuda.emit import emit_cuda

    cuda = emit_cuda(module)
    lines = cuda.text.split("\n")
    infos = [info for info in cuda.kernels if info.sym_name in names]
    return "\n".join("\n".join(lines[info.lines[0] - 1 : info.lines[1]]) for info in infos) + "\n"
