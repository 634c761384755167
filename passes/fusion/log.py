"""The fusion log: every decision of one `fuse` run, turned into remarks.

Phases record refusals (with their reason and whether the ops' kinds could
never share a group) and notes (rewrites, duplications); `FusionLog.emit`
names each op as the user wrote it (`value_names`) and says which group it
joined, once the groups are numbered.
"""

from __future__ import annotations

from dataclasses import dataclass

from fusecc.compiler.diagnostics import Location
from fusecc.compiler.ir import Operation, Value
from fusecc.compiler.printer import Printer
from fusecc.compiler.traits import ConstantLike
from fusecc.dialects.fusion import GroupOp
from fusecc.passes.backends.hardware import Hardware
from fusecc.passes.fusion import cost_model as cm


def article(word: str) -> str:
    return "an" if word[:1] in "aeiou" else "a"


def value_names(func: Operation) -> dict[Value, str]:
    """The names the printer gives the function's values (`%x`, `%7`), so that
    remarks name ops the way the user sees them."""
    printer = Printer()
    printer.print_func_func(func, 0)
    return {value: "%" + name for value, name in printer.names.names.items()}


@dataclass
class Refusal:
    op: Operation
    partner: Operation | None
    reason: str
    structural: bool  # the ops' kinds cannot share a group (not a cost decision)
    partner_feeds_op: bool  # dataflow goes partner -> op (else op -> partner)


class FusionLog:
    """Decisions of one pass run, kept until group numbers are known."""

    def __init__(self, hardware: Hardware):
        self.hardware = hardware
        self.names: dict[Value, str] = {}
        self.refusals: list[Refusal] = []
        self._seen: set[tuple] = set()
        # (location, text with {group} and {kind} placeholders, op whose group fills them)
        self.notes: list[tuple[Location, str, Operation | None]] = []
        self.duplicated: dict[Operation, Operation] = {}  # clone -> original
        self.created: set[Operation] = set()  # made by a rewrite; notes explain them

    def name(self, op: Operation | None, at: Location | None = None) -> str:
        """`%7` as the user wrote it, or a description of an op a rewrite made
        (its line, unless that is the line `at` of the remark naming it)."""
        if op is None:
            return "?"
        if op.results and op.results[0] in self.names:
            return self.names[op.results[0]]
        position = op.location.file_line_col()
        here = at.file_line_col() if at is not None else None
        made = " a rewrite made" if op in self.created else ""
        if position is None:
            return f"{article(op.name)} {op.name}{made}"
        if here is not None and (here.file, here.line) == (position.file, position.line):
            return f"the {op.name}{made or ' on this line'}" + (" here" if made else "")
        return f"the {op.name}{made} at line {position.line}"

    def refuse(self, op: Operation, partner: Operation | None, reason: str, structural: bool = False) -> None:
        key = (op, partner, reason)
        if key not in self._seen:
            self._seen.add(key)
            feeds = partner is not None and any(v.defining_op is partner for v in op.operands)
            self.refusals.append(Refusal(op, partner, reason, structural, feeds))

    def note(self, location: Location, text: str, op: Operation | None = None) -> None:
        self.notes.append((location, text, op))

    def emit(self, diagnostics, groups: list[GroupOp]) -> None:
        """Remarks for every decision, in source order."""
        where: dict[Operation, GroupOp] = {}
        for group in groups:
            for op in group.body_ops():
                where[op] = group
        remarks: list[tuple[Location, str]] = []

        def label(group: GroupOp | None) -> str:
            return f"group {group.attr('id')} ({group.attr('kind')})" if group is not None else "no group"

        for location, text, op in self.notes:
            remarks.append((location, text.format(group=label(where.get(op)))))
        involved: dict[Operation, list[str]] = {}  # op -> why it was not fused with each neighbour
        for r in self.refusals:
            subject = f"{self.name(r.op, r.op.location)} is " if r.op in self.created else ""
            remarks.append((r.op.location, _refusal_text(subject, self.name(r.partner, r.op.location), r.reason)))
            involved.setdefault(r.op, []).append(f"{self.name(r.partner, r.op.location)} ({r.reason})")
            if r.partner is not None:
                # the same decision seen from the partner: "it" in the reason is r.op
                reason = r.reason[3:] if r.reason.startswith("it ") else r.reason
                prefix = "which " if r.reason.startswith("it ") else ""
                involved.setdefault(r.partner, []).append(f"{self.name(r.op, r.partner.location)} ({prefix}{reason})")
        for group in groups:
            body = group.body_ops()
            yielded = set(group.yield_op.operands)
            computing = [op for op in body if not op.has_trait(ConstantLike)]
            for op in computing:
                if op in self.duplicated or op in self.created:
                    continue
                if len(computing) == 1:
                    text = f"alone in {label(group)}"
                    reasons = involved.get(op, [])
                    text += ": not fused with " + "; nor with ".join(reasons) if reasons else ": no fusible producer or consumer"
                    remarks.append((op.location, text))
                    continue
                saved = 0
                for r in op.results:
                    inside = sum(1 for u in r.users if u.parent is group.body and u is not group.yield_op)
                    saved += cm.byte_size(r) * ((0 if r in yielded else 1) + inside)
                text = f"fused into {label(group)}"
                if saved:
                    text += f": saves {cm.format_bytes(saved)} of memory traffic"
                remarks.append((op.location, text))
            for clone, original in self.duplicated.items():
                if where.get(clone) is group:
                    remarks.append((original.location, f"duplicated into {label(group)}: recomputing it is cheaper than storing it"))
        for location, text in sorted(remarks, key=lambda item: _sort_key(item[0])):
            diagnostics.remark(location, text)


def _refusal_text(subject: str, partner: str, reason: str) -> str:
    """'not fused with %x: why', or with a subject for an op a rewrite made."""
    return f"{subject}not fused with {partner}: {reason}" if subject else f"not fused with {partner}: {reason}"


def _sort_key(location: Location):
    position = location.file_line_col()
    return (0, position.file, position.line, position.col) if position else (1, "", 0, 0)
