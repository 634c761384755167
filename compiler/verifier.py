"""The verifier: structural rules of the IR plus each op's own checks.

Checks, in order, for every op: operand and region counts, attribute kinds
and choices, result types against inference, the op's `verify_`, then that
every operand is defined before its use and visible from the op (dominance
in single-block regions, isolation of IsolatedFromAbove ops), and that
blocks end in a terminator where the parent needs one.
"""

from __future__ import annotations

from fusecc.compiler.diagnostics import Diagnostic, DiagnosticError, Severity
from fusecc.compiler.ir import BlockArgument, Operation, OpResult, VerifyError
from fusecc.compiler.op_definitions import check_operand_count
from fusecc.compiler.traits import IsolatedFromAbove, NoTerminator, Terminator
from fusecc.compiler.types import format_result_types, type_compatible


def check_attributes(op_class: type[Operation], attributes) -> None:
    """Declared attributes have the right kind; required ones are present;
    undeclared names are allowed only with a dialect prefix (`fusion.forbid`)."""
    index = op_class._attr_index
    if not attributes and not op_class._required_attrs:
        return
    for name, value in attributes.items():
        definition = index.get(name)
        if definition is None:
            if "." not in name:
                known = ", ".join(sorted(index)) or "none"
                raise VerifyError(f"unknown attribute '{name}' (known: {known})")
            continue
        if not definition.kind.check(value):
            raise VerifyError(f"attribute '{name}' must be {definition.kind.label}, but is {value}")
        if definition.choices and value.value not in definition.choices:
            choices = ", ".join(f'"{c}"' for c in definition.choices)
            raise VerifyError(f"attribute '{name}' must be one of {choices}, but is {value}")
    for name in op_class._required_attrs:
        if name not in attributes:
            raise VerifyError(f"requires attribute '{name}'")


def verify_op_local(op: Operation) -> None:
    """Checks that look only at the op itself. Raises VerifyError."""
    cls = type(op)
    message = check_operand_count(cls, len(op.operands))
    if message:
        raise VerifyError(message)
    if cls.region_count != len(op.regions) and cls.region_count >= 0:
        raise VerifyError(f"expects {cls.region_count} region{'s' * (cls.region_count != 1)}, but has {len(op.regions)}")
    if cls.result_defs and not any(d.variadic for d in cls.result_defs) and len(op.results) != len(cls.result_defs):
        raise VerifyError(f"expects {len(cls.result_defs)} result{'s' * (len(cls.result_defs) != 1)}, but has {len(op.results)}")
    if not cls.result_defs and op.results:
        raise VerifyError(f"has no results, but {len(op.results)} are declared")
    check_attributes(cls, op.attributes)
    if cls.has_type_inference:
        inferred = cls.infer_result_types([v.type for v in op.operands], op.attributes)
        actual = op.result_types
        if list(inferred) != actual and not (len(inferred) == len(actual) and all(map(type_compatible, inferred, actual))):
            raise VerifyError(
                f"result type {format_result_types(actual)} does not match the inferred type {format_result_types(inferred)}"
            )
    op.verify_()


def _visible(value, user: Operation) -> str | None:
    """Why `value` may not be used by `user`, or None when it may."""
    if isinstance(value, OpResult):
        def_block, def_op = value.op.parent, value.op
    elif isinstance(value, BlockArgument):
        def_block, def_op = value.block, None
    else:
        return "is not defined by an op or a block"
    if def_block is None:
        return "is defined by an op that is not in the IR"
    # Walk out from the user to the block that holds the definition.
    current = user
    while current is not None and current.parent is not def_block:
        parent = current.parent_op
        if parent is not None and parent.has_trait(IsolatedFromAbove):
            return f"is defined outside the isolated '{parent.name}'"
        current = parent
    if current is None:
        return "is not visible here"
    if def_op is not None and (def_op is current or not def_op.is_before_in_block(current)):
        return "is used before its definition"
    return None


def verify(root: Operation) -> None:
    """Verify `root` and everything nested. Raises DiagnosticError for the
    first problem, located at the op that has it."""
    for op in root.walk():
        try:
            verify_op_local(op)
            for index, value in enumerate(op.operands):
                problem = _visible(value, op)
                if problem:
                    raise VerifyError(f"operand {index} {problem}")
            _verify_terminators(op)
        except VerifyError as exc:
            raise DiagnosticError(Diagnostic(Severity.ERROR, op.location, f"'{op.name}' op {exc}")) from None


def _verify_terminators(op: Operation) -> None:
    if op.has_trait(NoTerminator):
        return
    for region in op.regions:
        for block in region.blocks:
            last = block.last_op
            if last is None or not last.has_trait(Terminator):
                raise VerifyError("expects its region's blocks to end with a terminator")
    if op.has_trait(Terminator) and op.parent is not None and op.next_op is not None:
        raise VerifyError("is a terminator but is not the last op of its block")
