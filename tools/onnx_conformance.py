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

MIN_OPSET, MAX_OPSET = 13, 21

# Cases we do not run, with why: "case" on every target, "case@target" on
# one. Every other case of a supported op runs.
KNOWN_SKIPS: dict[str, str] = {}


def known_skip(case: str, target: str) -> str | None:
    return KNOWN_SKIPS.get(case) or KNOWN_SKIPS.get(f"{case}@{target}")


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


_CASES_OF_MODULE: dict[str, list] = {}


def load_cases(modules: list[str] | None = None):
    """The node test cases: all (collect_testcases), or those of a few of
    the onnx test modules (`softmax`, `add`, ...) for a quick run. The
    modules make their cases when first imported."""
    import sys

    warnings.simplefilter("ignore")
    import onnx.backend.test.case.node as node_cases

    if modules is None:
        return list(node_cases.collect_testcases())
    for name in modules:
        qualified = f"onnx.backend.test.case.node.{name}"
        if name in _CASES_OF_MODULE:
            continue
        if qualified in sys.modules:  # imported by collect_testcases: find its cases by op type
            _CASES_OF_MODULE[name] = [c for c in node_cases._NodeTestCases if case_op(c).lower() == name.replace("_", "")]
            continue
        before = len(node_cases._NodeTestCases)
        importlib.import_module(qualified)
        _CASES_OF_MODULE[name] = list(node_cases._NodeTestCases[before:])
    return [case for name in modules for case in _CASES_OF_MODULE[name]]


def case_op(case) -> str:
    ops = [n.op_type for n in case.model.graph.node]
    return ops[0] if len(ops) == 1 else "(graphs of several nodes)"


def in_scope(case, ops: set[str]) -> bool:
    return all(n.op_type in ops and n.domain in ("", "ai.onnx") for n in case.model.graph.node)


def at_supported_opset(case):
    """The case's model, declared at an opset fusecc imports when it was
    written for another: at 13 if every op's schema is the same at 13 as at
    the case's opset; at 21 if the ONNX checker accepts it there (later
    opsets add element types, not meanings). Or a reason to skip it."""
    import onnx

    model = case.model
    version = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
    if version is None or MIN_OPSET <= version <= MAX_OPSET:
        return model, None
    target = MIN_OPSET if version < MIN_OPSET else MAX_OPSET
    if version < MIN_OPSET:
        for node in model.graph.node:
            then, now = (onnx.defs.get_schema(node.op_type, v).since_version for v in (version, MIN_OPSET))
            if then != now:
                return None, f"written for opset {version}; {node.op_type} changed at opset {now}"
    retargeted = onnx.ModelProto()
    retargeted.CopyFrom(model)
    for entry in retargeted.opset_import:
        if entry.domain in ("", "ai.onnx"):
            entry.version = target
    retargeted.ir_version = min(max(retargeted.ir_version, 7), 10)
    try:
        onnx.checker.check_model(retargeted, full_check=True)
    except Exception as exc:  # the checker's errors have no common base
        return None, f"written for opset {version}; not a valid opset-{target} model ({str(exc).splitlines()[0][:120]})"
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
    skipped = [Outcome(case.name, op, t, "skipped", known_skip(case.name, t)) for t in targets if known_skip(case.name, t)]
    targets = [t for t in targets if not known_skip(case.name, t)]
    if not targets:
        return skipped
    model, reason = at_supported_opset(case)
    if model is None:
        return skipped + [Outcome(case.name, op, t, "skipped", reason) for t in targets]
    model, kept_outputs = without_layernorm_statistics(model)
    path = os.path.join(folder, case.name + ".onnx")
    onnx.save(model, path)
    outcomes = []
    graph_inputs = [i.name for i in model.graph.input if i.name not in {t.name for t in model.graph.initializer}]
    frozen = import_time_inputs(model)
    for index, (inputs, expected) in enumerate(case.data_sets):
        named = dict(zip(graph_inputs, (as_array(x) for x in inputs)))
        bind = {name: x for name, x in named.items() if name in frozen}
        inputs = [x for name, x in named.items() if name not in frozen]
        shapes = {name: x.shape for name, x in named.items() if name not in frozen}
        if kept_outputs is not None:
            expected = [expected[i] for i in kept_outputs]
        expected = [as_array(x) for x in expected]
        try:
            module = import_onnx(path, shapes, bind=bind).module
        except UsageError as exc:
            message = str(exc).replace(path + ": ", "").replace(path, "model")
            return skipped + [Outcome(case.name, op, t, "refused", message) for t in targets]
        for target in targets:
            try:
                runner = target_registry.get(target)
                results = runner.run(module, "main", inputs, DiagnosticEngine())
                problem = compare(results, expected, case.rtol, case.atol)
            except Exception as exc:  # a crash is a failure of this case, reported, not raised
                problem = f"{type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}"
            outcomes.append(Outcome(case.name, op, target, "fail" if problem else "pass", problem or ""))
    return skipped + merge_data_sets(outcomes)


def merge_data_sets(outcomes: list[Outcome]) -> list[Outcome]:
    """One outcome per target: the first failure, else a pass."""
    by_target: dict[str, Outcome] = {}
    for o in outcomes:
        if o.target not in by_target or (o.status == "fail" and by_target[o.target].status == "pass"):
            by_target[o.target] = o
    return list(by_target.values())


def as_array(value) -> np.ndarray:
    """A data-set value as numpy (some cases store TensorProtos); bfloat16
    arrays become float32, fusecc's storage of bf16."""
    import onnx

    array = onnx.numpy_helper.to_array(value) if isinstance(value, onnx.TensorProto) else np.asarray(value)
    return array.astype(np.float32) if array.dtype.name == "bfloat16" else array


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
        "## Conformance",
        "",
        f"The node tests of onnx {onnx.__version__} (`collect_testcases()`) for every op the importer",
        f"translates, on the targets {', '.join(targets)}; {seconds:.0f} s. A case written for an opset above {MAX_OPSET}",
        f"is declared at opset {MAX_OPSET} when the ONNX checker accepts it there. *Refused* cases use an element",
        "type or attribute fusecc does not have (the importer's message is listed); *skipped* ones are in",
        "`KNOWN_SKIPS` of tools/onnx_conformance.py (the one list of skips, with reasons) or are invalid at the",
        "opsets fusecc imports. LayerNormalization cases are compared on Y only (the importer refuses Mean and",
        "InvStdDev outputs); inputs that feed an operand needed at import time (axes, shapes) are bound to their",
        "values, as exported models hold constants there. Pass rates count the cases run.",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    totals = collections.Counter()
    for op in sorted(rows):
        counts = rows[op]
        cells = [op]
        for t in targets:
            passed, run = counts[(t, "pass")], counts[(t, "pass")] + counts[(t, "fail")]
            cells.append(f"{passed}/{run}" + (f" ({100 * passed / run:.0f}%)" if run else ""))
            totals[(t, "pass")] += passed
            totals[(t, "run")] += run
        cases = len({o.case for o in outcomes if o.op == op})
        refused = len({o.case for o in outcomes if o.op == op and o.status == "refused"})
        skipped = len({o.case for o in outcomes if o.op == op and o.status == "skipped"})
        totals["cases"] += cases
        totals["refused"] += refused
        totals["skipped"] += skipped
        cells += [str(cases), str(refused), str(skipped)]
        lines.append("| " + " | ".join(cells) + " |")
    total_cells = ["**all**"] + [f"{totals[(t, 'pass')]}/{totals[(t, 'run')]}" for t in targets]
    total_cells += [str(totals["cases"]), str(totals["refused"]), str(totals["skipped"])]
    lines.append("| " + " | ".join(total_cells) + " |")
    for status, title in (("fail", "Failures"), ("refused", "Refused by the importer"), ("skipped", "Skipped")):
        found = sorted({(o.case, o.target if status == "fail" or f"{o.case}@{o.target}" in KNOWN_SKIPS else "", o.detail) for o in outcomes if o.status == status})
        lines += ["", f"## {title} ({len({c for c, _, _ in found})} cases)", ""]
        lines += [f"- `{case}`{' on ' + target if target else ''}: {detail}" for case, target, detail in found] or ["None."]
    return "\n".join(lines) + "\n"


MARKER = "<!-- Everything below is generated by python -m fusecc.tools.onnx_conformance --write docs/onnx.md -->"


def write_below_marker(path: str, generated: str) -> None:
    """Replace what follows MARKER in `path` (the hand-written part above it stays)."""
    try:
        with open(path, encoding="utf-8") as f:
            head = f.read().split(MARKER)[0]
    except FileNotFoundError:
        head = ""
    with open(path, "w", encoding="utf-8") as f:
        f.write(head + MARKER + "\n\n" + generated)


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
        write_below_marker(args.write, text)
    else:
        sys.stdout.write(text)
    failures = [o for o in outcomes if o.status == "fail"]
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
