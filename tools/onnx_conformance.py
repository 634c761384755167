"""ONNX backend node tests (shipped inside the `onnx` wheel) on fusecc.

    python -m fusecc.tools.onnx_conformance [--targets reference,cpu] [--write docs/onnx.md] [--ops Add,Softmax]

Every case of `onnx.backend.test.case.node.collect_testcases()` whose nodes
are all ops the importer translates is imported and run on each target,
and compared with the case's expected outputs at the case's tolerances.
Cases written for an opset above 21 are declared at opset 21 when the ONNX
checker accepts them there (the op's schema is unchanged for their types);
otherwise they are skipped with that reason.

Outcomes: pass; refused (the importer says why: an element type or
attribute fusecc does not have); skipped (listed in KNOWN_SKIPS below with
its reason: the one place where skips live); fail (wrong values or an
error: a bug). `--write` regenerates docs/onnx.md from a run.
"""

from __future__ import annotations

import argparse
import collections
import importlib
import os
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass

import numpy as np

MAX_OPSET = 21

# Cases we do not run, with why. Every other case of a supported op runs.
KNOWN_SKIPS: dict[str, str] = {}


@dataclass
class Outcome:
    case: str
    op: str
    target: str
    status: str  # pass | refused | skipped | fail
    detail: str = ""


def supported_ops() -> set[str]:
    from fusecc.frontends.onnx.table import TABLE
    import fusecc.frontends.onnx  # noqa: F401  (fills the table)

    return set(TABLE)


def load_cases(modules: list[str] | None = None):
    """The node test cases: all (collect_testcases), or those of a few of
    the onnx test modules (`softmax`, `add`, ...) for a quick run."""
    warnings.simplefilter("ignore")
    import onnx.backend.test.case.node as node_cases

    if modules is None:
        return list(node_cases.collect_testcases())
    before = len(node_cases._NodeTestCases)
    for name in modules:
        importlib.import_module(f"onnx.backend.test.case.node.{name}")
    return list(node_cases._NodeTestCases[before:])


def case_op(case) -> str:
    ops = [n.op_type for n in case.model.graph.node]
    return ops[0] if len(ops) == 1 else "(graphs of several nodes)"


def in_scope(case, ops: set[str]) -> bool:
    return all(n.op_type in ops and n.domain in ("", "ai.onnx") for n in case.model.graph.node)


def at_supported_opset(case):
    """The case's model, declared at opset 21 if it was written for a later
    one and is valid there; or a reason to skip it."""
    import onnx

    model = case.model
    version = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
    if version is None or version <= MAX_OPSET:
        return model, None
    retargeted = onnx.ModelProto()
    retargeted.CopyFrom(model)
    for entry in retargeted.opset_import:
        if entry.domain in ("", "ai.onnx"):
            entry.version = MAX_OPSET
    retargeted.ir_version = min(retargeted.ir_version, 10)
    try:
        onnx.checker.check_model(retargeted, full_check=True)
    except Exception as exc:  # the checker's errors have no common base
        return None, f"written for opset {version}; not a valid opset-{MAX_OPSET} model ({str(exc).splitlines()[0][:120]})"
    return retargeted, None


def import_time_inputs(model) -> set[str]:
    """Graph inputs that feed an operand which must be known at import time
    (axes, target shapes, slice bounds): exported models hold constants
    there, the test cases hold inputs; the runner binds them to their values."""
    from fusecc.frontends.onnx.table import TABLE

    names = set()
    for node in model.graph.node:
        for index, name in enumerate(node.input):
            if TABLE[node.op_type].needs_constant(index):
                names.add(name)
    return names


def without_layernorm_statistics(model):
    """LayerNormalization cases return Mean and InvStdDev too, which the
    importer refuses (issue 10); the case is run on its first output only.
    Returns the model and the indices of the graph outputs kept."""
    import onnx

    dropped = set()
    for node in model.graph.node:
        if node.op_type == "LayerNormalization":
            dropped |= {name for name in node.output[1:] if name}
    if not dropped:
        return model, None
    trimmed = onnx.ModelProto()
    trimmed.CopyFrom(model)
    for node in trimmed.graph.node:
        if node.op_type == "LayerNormalization":
            del node.output[1:]
    kept = [i for i, o in enumerate(model.graph.output) if o.name not in dropped]
    outputs = [trimmed.graph.output[i] for i in kept]
    del trimmed.graph.output[:]
    trimmed.graph.output.extend(outputs)
    return trimmed, kept


def run_case(case, targets: list[str], folder: str) -> list[Outcome]:
    import onnx

    from fusecc.compiler.diagnostics import DiagnosticEngine, UsageError
    from fusecc.driver import targets as target_registry
    from fusecc.frontends.onnx import import_onnx

    op = case_op(case)
    if case.name in KNOWN_SKIPS:
        return [Outcome(case.name, op, t, "skipped", KNOWN_SKIPS[case.name]) for t in targets]
    model, reason = at_supported_opset(case)
    if model is None:
        return [Outcome(case.name, op, t, "skipped", reason) for t in targets]
    model, kept_outputs = without_layernorm_statistics(model)
    path = os.path.join(folder, case.name + ".onnx")
    onnx.save(model, path)
    outcomes = []
    graph_inputs = [i.name for i in model.graph.input if i.name not in {t.name for t in model.graph.initializer}]
    frozen = import_time_inputs(model)
    for index, (inputs, expected) in enumerate(case.data_sets):
        named = dict(zip(graph_inputs, (np.asarray(x) for x in inputs)))
        bind = {name: x for name, x in named.items() if name in frozen}
        inputs = [x for name, x in named.items() if name not in frozen]
        shapes = {name: x.shape for name, x in named.items() if name not in frozen}
        if kept_outputs is not None:
            expected = [expected[i] for i in kept_outputs]
        try:
            module = import_onnx(path, shapes, bind=bind).module
        except UsageError as exc:
            message = str(exc).replace(path + ": ", "").replace(path, "model")
            return [Outcome(case.name, op, t, "refused", message) for t in targets]
        for target in targets:
            try:
                runner = target_registry.get(target)
                results = runner.run(module, "main", inputs, DiagnosticEngine())
                problem = compare(results, expected, case.rtol, case.atol)
            except Exception as exc:  # a crash is a failure of this case, reported, not raised
                problem = f"{type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}"
            outcomes.append(Outcome(case.name, op, target, "fail" if problem else "pass", problem or ""))
    return merge_data_sets(outcomes)


def merge_data_sets(outcomes: list[Outcome]) -> list[Outcome]:
    """One outcome per target: the first failure, else a pass."""
    by_target: dict[str, Outcome] = {}
    for o in outcomes:
        if o.target not in by_target or (o.status == "fail" and by_target[o.target].status == "pass"):
            by_target[o.target] = o
    return list(by_target.values())


def compare(results, expected, rtol: float, atol: float) -> str | None:
    if len(results) != len(expected):
        return f"{len(results)} outputs, expected {len(expected)}"
    for i, (got, want) in enumerate(zip(results, expected)):
        got, want = np.asarray(got), np.asarray(want)
        if got.shape != want.shape:
            return f"output {i} has shape {list(got.shape)}, expected {list(want.shape)}"
        if got.dtype != want.dtype:
            return f"output {i} has dtype {got.dtype}, expected {want.dtype}"
        if want.dtype.kind in "biu":
            if not np.array_equal(got, want):
                return f"output {i} differs in {int(np.sum(got != want))} of {want.size} elements"
        elif not np.allclose(got, want, rtol=max(rtol, 1e-5), atol=max(atol, 1e-6), equal_nan=True):
            error = np.nanmax(np.abs(got.astype(np.float64) - want)) if want.size else 0.0
            return f"output {i} differs by up to {error:.3g}"
    return None


def run_conformance(targets: list[str], cases, ops: set[str] | None = None) -> list[Outcome]:
    ops = ops or supported_ops()
    outcomes: list[Outcome] = []
    with tempfile.TemporaryDirectory(prefix="fusecc-onnx-") as folder:
        for case in cases:
            if in_scope(case, ops):
                outcomes.extend(run_case(case, targets, folder))
    return outcomes


def markdown(outcomes: list[Outcome], targets: list[str], seconds: float) -> str:
    import onnx

    rows = collections.defaultdict(lambda: collections.Counter())
    for o in outcomes:
        rows[o.op][(o.target, o.status)] += 1
    head = ["op", *[f"{t} pass" for t in targets], "cases", "refused", "skipped"]
    lines = [
        "# ONNX conformance",
        "",
        "Generated by `python -m fusecc.tools.onnx_conformance --write docs/onnx.md` (do not edit by hand):",
        f"the node tests of onnx {onnx.__version__} (`collect_testcases()`) for every op the importer",
        f"translates, on the targets {', '.join(targets)}; {seconds:.0f} s. A case written for an opset above {MAX_OPSET}",
        f"is declared at opset {MAX_OPSET} when the ONNX checker accepts it there. *Refused* cases use an element",
        "type or attribute fusecc does not have (the importer's message is listed); *skipped* ones are in",
        "`KNOWN_SKIPS` of tools/onnx_conformance.py or invalid at opset 21. Pass rates count the cases run.",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    totals = collections.Counter()
    for op in sorted(rows):
        counts = rows[op]
        first = targets[0]
        cases = sum(v for (t, s), v in counts.items() if t == first)
        run = sum(v for (t, s), v in counts.items() if t == first and s in ("pass", "fail"))
        cells = [op]
        for t in targets:
            passed = counts[(t, "pass")]
            cells.append(f"{passed}/{run}" + (f" ({100 * passed / run:.0f}%)" if run else ""))
            totals[(t, "pass")] += passed
        totals["run"] += run
        totals["cases"] += cases
        totals["refused"] += counts[(first, "refused")]
        totals["skipped"] += counts[(first, "skipped")]
        cells += [str(cases), str(counts[(first, "refused")]), str(counts[(first, "skipped")])]
        lines.append("| " + " | ".join(cells) + " |")
    total_cells = ["**all**"] + [f"{totals[(t, 'pass')]}/{totals['run']}" for t in targets]
    total_cells += [str(totals["cases"]), str(totals["refused"]), str(totals["skipped"])]
    lines.append("| " + " | ".join(total_cells) + " |")
    for status, title in (("fail", "Failures"), ("refused", "Refused by the importer"), ("skipped", "Skipped")):
        found = sorted({(o.case, o.target if status == "fail" else "", o.detail) for o in outcomes if o.status == status})
        lines += ["", f"## {title} ({len({c for c, _, _ in found})} cases)", ""]
        lines += [f"- `{case}`{' on ' + target if target else ''}: {detail}" for case, target, detail in found] or ["None."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="onnx_conformance", description=__doc__.split("\n\n")[0])
    p.add_argument("--targets", default="reference,cpu")
    p.add_argument("--ops", default=None, help="only cases of these op types (comma-separated)")
    p.add_argument("--write", default=None, help="write the markdown table to this file")
    args = p.parse_args(argv)
    targets = args.targets.split(",")
    start = time.perf_counter()
    cases = load_cases()
    ops = supported_ops() if args.ops is None else set(args.ops.split(",")) & supported_ops()
    outcomes = run_conformance(targets, cases, ops)
    text = markdown(outcomes, targets, time.perf_counter() - start)
    if args.write:
        with open(args.write, "w", encoding="utf-8") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    failures = [o for o in outcomes if o.status == "fail"]
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
