"""Delta debugging over ops and shapes: shrink a failing case to a small
program that fails the same way (`python -m fusecc.tools.fuzz --reduce`).

A candidate is kept when it is still a valid program (`program.infer_types`)
and `still_fails(candidate)` holds. The passes, repeated until none helps:

  1. results: drop results of @main (one stays); calls: inline them;
  2. ops, ddmin style: cut chunks of ops (halves, quarters, ... single ops)
     from the end; a cut op's results become new arguments of @main holding
     the values the oracle computed for them, so the data stays as it was;
     dead ops and unused arguments go; then single ops are skipped (their
     users read an operand of the same type instead);
  3. shapes: each dimension size above 1 is replaced everywhere (argument
     types, reshape and broadcast_to shapes, constants) by 1, then 2;
  4. inputs: each argument tries all zeros, then all ones.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from fusecc.tools.fuzz import oracle
from fusecc.tools.fuzz.generate import Case, storage_array
from fusecc.tools.fuzz.program import Invalid, Op, Type, infer_types

Predicate = Callable[[Case], bool]


def _valid(case: Case) -> bool:
    try:
        types = infer_types(case.program)
    except Invalid:
        return False
    return all(np.shape(x) == types["main", name].shape for (name, _), x in zip(case.program.main.args, case.inputs))


def _prune(case: Case) -> Case:
    """Drop ops whose results nothing uses, then unused arguments of @main."""
    main = case.program.main
    used = set(main.returns)
    kept = []
    for op in reversed(main.ops):
        if any(r in used for r in op.results):
            kept.append(op)
            used.update(op.operands)
    main.ops = list(reversed(kept))
    pairs = [(arg, x) for arg, x in zip(main.args, case.inputs) if arg[0] in used]
    main.args = [a for a, _ in pairs]
    case.inputs = [x for _, x in pairs]
    called, reached = set(), [main]
    while reached:  # the functions @main calls, and those they call
        for op in reached.pop().ops:
            if op.kind == "call" and op.attrs["callee"] not in called:
                called.add(op.attrs["callee"])
                reached.append(next(f for f in case.program.functions if f.name == op.attrs["callee"]))
    case.program.functions = [f for f in case.program.functions if f is main or f.name in called]
    return case


def _copy(case: Case) -> Case:
    return Case(case.seed, case.program.clone(), [x.copy() for x in case.inputs], list(case.features))


def _cut(case: Case, indices: list[int]) -> Case | None:
    """Replace the ops at `indices` of @main by arguments holding their values."""
    try:
        values = oracle.evaluate_values(case.program, case.inputs)
        types = infer_types(case.program)
    except Exception:  # noqa: BLE001 - the oracle cannot evaluate this candidate
        return None
    out = _copy(case)
    main = out.program.main
    doomed = [main.ops[i] for i in indices]
    for op in doomed:
        for r in op.results:
            t = types["main", r]
            main.args.append((r, t))
            out.inputs.append(storage_array(values[r], t.dtype))
    main.ops = [op for i, op in enumerate(main.ops) if i not in set(indices)]
    return _prune(out)


def _inline(case: Case, index: int) -> Case:
    """@main with its call at `index` replaced by the callee's ops."""
    out = _copy(case)
    main = out.program.main
    call = main.ops[index]
    callee = next(f for f in out.program.functions if f.name == call.attrs["callee"])
    rename = {name: value for (name, _), value in zip(callee.args, call.operands)}
    body = []
    for op in callee.ops:
        for r in op.results:
            rename[r] = f"{callee.name}{index}_{r}"
        body.append(Op(op.kind, [rename[v] for v in op.operands], [rename[r] for r in op.results], dict(op.attrs)))
    results = {r: rename[v] for r, v in zip(call.results, callee.returns)}
    for op in main.ops[index + 1 :]:
        op.operands = [results.get(v, v) for v in op.operands]
    main.returns = [results.get(v, v) for v in main.returns]
    main.ops[index : index + 1] = body
    return _prune(out)


def _bypass(case: Case, index: int) -> Case | None:
    """@main with the op at `index` skipped: its users read its operand of the
    same type (an op that only @main returns: its first operand, of any type)."""
    types = infer_types(case.program)
    op = case.program.main.ops[index]
    if len(op.results) != 1:
        return None
    same = [v for v in op.operands if types["main", v] == types["main", op.results[0]]]
    only_returned = not any(op.results[0] in user.operands for user in case.program.main.ops[index + 1 :])
    if not same and only_returned and op.operands:
        same = op.operands[:1]
    if not same:
        return None
    out = _copy(case)
    main = out.program.main
    for user in main.ops[index + 1 :]:
        user.operands = [same[0] if v == op.results[0] else v for v in user.operands]
    main.returns = [same[0] if v == op.results[0] else v for v in main.returns]
    return _prune(out)


def _resize_dim(case: Case, old: int, new: int) -> Case:
    out = _copy(case)
    main = out.program.main

    def fix(shape):
        return [new if d == old else d for d in shape]

    resized = []
    for (name, t), x in zip(main.args, out.inputs):
        shape = tuple(fix(t.shape))
        resized.append(np.resize(x, shape) if x.size else np.zeros(shape, x.dtype))
    main.args = [(name, Type(tuple(fix(t.shape)), t.dtype)) for name, t in main.args]
    out.inputs = resized
    for op in main.ops:
        if op.kind in ("reshape", "broadcast_to"):
            op.attrs["shape"] = fix(op.attrs["shape"])
        if op.kind == "constant":
            shape = fix(op.attrs["shape"])
            value = np.asarray(op.attrs["value"], dtype=object)
            op.attrs["value"] = np.resize(value, shape).tolist() if value.size else np.zeros(shape).tolist()
            op.attrs["shape"] = shape
    return out


def reduce_case(case: Case, still_fails: Predicate, log: Callable[[str], None] = lambda s: None, budget: int = 400) -> Case:
    """The smallest case found that still fails, within `budget` checks."""
    checks = 0

    def attempt(candidate: Case | None) -> bool:
        nonlocal checks
        if candidate is None or checks >= budget or not _valid(candidate):
            return False
        checks += 1
        return still_fails(candidate)

    best = _prune(_copy(case))
    progress = True
    while progress and checks < budget:
        progress = False
        # 1. results
        for r in list(best.program.main.returns):
            if len(best.program.main.returns) > 1:
                candidate = _copy(best)
                candidate.program.main.returns.remove(r)
                if attempt(_prune(candidate)):
                    best, progress = candidate, True
        # calls: the callee's ops take the call's place
        calls = [i for i, op in enumerate(best.program.main.ops) if op.kind == "call"]
        if calls and attempt(_inline(best, calls[0])):
            best, progress = _inline(best, calls[0]), True
        # 2. ops, in chunks from the end
        chunk = max(1, len(best.program.main.ops) // 2)
        while chunk >= 1:
            start = len(best.program.main.ops) - chunk
            while start >= 0:
                candidate = _cut(best, list(range(start, min(start + chunk, len(best.program.main.ops)))))
                if attempt(candidate):
                    best, progress = candidate, True
                    log(f"  {best.program.op_count()} ops")
                start -= chunk
            chunk //= 2
        # ops skipped: a user reads the op's operand instead
        for index in reversed(range(len(best.program.main.ops))):
            if index < len(best.program.main.ops) and attempt(_bypass(best, index)):
                best, progress = _bypass(best, index), True
        # 3. shapes
        dims = sorted({d for _, t in best.program.main.args for d in t.shape if d > 2}, reverse=True)
        dims += [2] if any(2 in t.shape for _, t in best.program.main.args) else []
        for d in dims:
            for new in (1, 2):
                if new < d and attempt(_resize_dim(best, d, new)):
                    best, progress = _resize_dim(best, d, new), True
                    log(f"  dimension {d} -> {new}")
                    break
        # 4. inputs
        for i in range(len(best.inputs)):
            for fill in (0, 1):
                if np.all(best.inputs[i] == 0) or np.all(best.inputs[i] == fill):
                    break  # zeros are simplest; ones need not replace them
                candidate = _copy(best)
                candidate.inputs[i] = np.full_like(candidate.inputs[i], fill)
                if attempt(candidate):
                    best, progress = candidate, True
                    break
    log(f"reduced to {best.program.op_count()} ops in {checks} checks")
    return best


__all__ = ["reduce_case"]
