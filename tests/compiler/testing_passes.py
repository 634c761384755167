"""Passes that exist only for tests of the pass infrastructure.

Tests register them by name with `register_pass(name, "testing_passes:Class")`
(this folder is on sys.path under pytest).
"""

from __future__ import annotations

from dataclasses import dataclass

from fusecc.compiler.pass_manager import Pass, PassContext


@dataclass(frozen=True)
class BreakReturn(Pass):
    """Erases every func.return: the IR no longer verifies."""

    name = "test-break-return"
    summary = "erase func.return (breaks the IR)"
    anchor = "func.func"

    def run(self, op, context: PassContext) -> None:
        op.body.last_op.erase()


@dataclass(frozen=True)
class Crash(Pass):
    """A pass with a bug."""

    name = "test-crash"
    summary = "raise an exception"

    def run(self, op, context: PassContext) -> None:
        raise ZeroDivisionError("division by zero inside the pass")


@dataclass(frozen=True)
class RecordFunctions(Pass):
    """Appends the name of each function it runs on to statistics['seen']."""

    name = "test-record"
    summary = "record the functions it runs on"
    anchor = "func.func"

    def run(self, op, context: PassContext) -> None:
        context.statistics.setdefault("seen", []).append(op.attr("sym_name"))


@dataclass(frozen=True)
class WithOptions(Pass):
    """Stores its options in statistics['options']."""

    name = "test-options"
    summary = "a pass with one option of each kind"
    count: int = 1
    flag: bool = False
    sizes: tuple[int, ...] = ()
    scale: float = 1.0
    mode: str = "fast"

    def run(self, op, context: PassContext) -> None:
        context.statistics["options"] = self


@dataclass(frozen=True)
class Complain(Pass):
    """Reports an error and a remark at each function without raising."""

    name = "test-complain"
    summary = "emit diagnostics without stopping"
    anchor = "func.func"

    def run(self, op, context: PassContext) -> None:
        from fusecc.compiler.diagnostics import Diagnostic, Severity

        context.diagnostics.remark(op.location, f"looked at @{op.attr('sym_name')}")
        context.diagnostics.emit(Diagnostic(Severity.ERROR, op.location, "this function is not allowed"))
