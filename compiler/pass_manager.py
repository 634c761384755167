"""Passes, the pass registry, pipelines and instrumentation.

A pass is a frozen dataclass: its fields are its options
(`tile{block=128x64 k=32}`), `name` is its command-line name and `anchor`
the op it runs on (`builtin.module` or `func.func`). Pipelines use MLIR's
syntax, `builtin.module(func.func(canonicalize,cse),fuse)`, or the short
`canonicalize,cse{x=1},fuse`; a func-anchored pass at module level runs on
every function.

After every pass the IR is verified (the module after a top-level entry,
the function after each pass of a nested `func.func(...)` pipeline); a
failure names the pass. An exception escaping a pass is an internal
compiler error naming the pass.
"""

from __future__ import annotations

import dataclasses
import importlib
import io
import re
import sys
import time
from dataclasses import dataclass
from typing import Any, ClassVar, Iterable

from fusecc.compiler.diagnostics import DiagnosticEngine, DiagnosticError, InternalCompilerError, located_bug
from fusecc.compiler.ir import Operation
from fusecc.compiler.op_definitions import lookup_op_class
from fusecc.compiler.printer import print_op
from fusecc.compiler.verifier import verify


class PipelineError(ValueError):
    """A malformed pipeline string or an unknown pass/option."""


@dataclass
class PassContext:
    """What passes may read besides the IR: where to report, and settings.

    A setting a pass also takes as an option (`target`) follows one rule:
    the pass's option wins, else the context's value (`Pass.option`).
    """

    diagnostics: DiagnosticEngine = dataclasses.field(default_factory=DiagnosticEngine)
    target: str = "cpu"
    explain: bool = False
    allow_tf32: bool = False  # f32 matmuls may run on TF32 tensor cores (--allow-tf32, docs/cuda-tensor-cores.md)
    statistics: dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclass(frozen=True)
class Pass:
    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    anchor: ClassVar[str] = "builtin.module"

    def run(self, op: Operation, context: PassContext) -> None:
        raise NotImplementedError

    def option(self, name: str, context: PassContext):
        """The one rule for options the context also holds: the pass's own
        value wins where it was given (not "" or None), else the context's."""
        value = getattr(self, name)
        return getattr(context, name) if value in ("", None) else value

    def option_text(self) -> str:
        fields = dataclasses.fields(self)
        parts = [f"{f.name.replace('_', '-')}={_format_option(getattr(self, f.name))}" for f in fields]
        return "{" + " ".join(parts) + "}" if parts else ""

    def __str__(self) -> str:
        return self.name + self.option_text()


def _format_option(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ",".join(map(str, value))
    return str(value)


# --------------------------------------------------------------------------- registry

# Pass name -> "module:Class". Modules are imported only when a pass is used.
PASS_REGISTRY: dict[str, str] = {}


def register_pass(name: str, target: str) -> None:
    PASS_REGISTRY[name] = target


def pass_class(name: str) -> type[Pass]:
    _load_builtin_registry()
    target = PASS_REGISTRY.get(name)
    if target is None:
        raise PipelineError(f"unknown pass '{name}'; see --list-passes")
    module_name, _, class_name = target.partition(":")
    return getattr(importlib.import_module(module_name), class_name)


def all_pass_classes() -> list[type[Pass]]:
    _load_builtin_registry()
    return [pass_class(name) for name in sorted(PASS_REGISTRY)]


def _load_builtin_registry() -> None:
    importlib.import_module("fusecc.passes")


def instantiate(name: str, options: dict[str, str]) -> Pass:
    cls = pass_class(name)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    values = {}
    for key, text in options.items():
        field_name = key.replace("-", "_")
        field = fields.get(field_name)
        if field is None:
            known = ", ".join(sorted(k.replace("_", "-") for k in fields)) or "none"
            raise PipelineError(f"pass '{name}' has no option '{key}' (options: {known})")
        values[field_name] = _convert_option(name, key, text, field)
    return cls(**values)


def _convert_option(pass_name: str, key: str, text: str, field: dataclasses.Field):
    kind = field.type if isinstance(field.type, str) else getattr(field.type, "__name__", str(field.type))
    try:
        if kind == "bool":
            if text.lower() not in ("true", "false", "1", "0"):
                raise ValueError
            return text.lower() in ("true", "1")
        if kind == "int":
            return int(text)
        if kind == "float":
            return float(text)
        if kind.startswith("tuple"):
            items = [s for s in text.split(",") if s]
            if kind.startswith("tuple[int"):
                return tuple(int(s) for s in items)
            if kind.startswith("tuple[float"):
                return tuple(float(s) for s in items)
            return tuple(items)
    except ValueError:
        raise PipelineError(f"option '{key}' of pass '{pass_name}' expects {kind}, got '{text}'") from None
    return text


# --------------------------------------------------------------------------- pipelines


@dataclass
class PassManager:
    """Runs passes on ops named `anchor`; entries are passes or nested managers."""

    anchor: str = "builtin.module"
    entries: list[Any] = dataclasses.field(default_factory=list)

    def add(self, entry) -> "PassManager":
        self.entries.append(entry)
        return self

    def nest(self, anchor: str) -> "PassManager":
        child = PassManager(anchor)
        self.entries.append(child)
        return child

    def __str__(self) -> str:
        return f"{self.anchor}({','.join(map(str, self.entries))})"

    def passes(self) -> Iterable[Pass]:
        for entry in self.entries:
            if isinstance(entry, PassManager):
                yield from entry.passes()
            else:
                yield entry


def parse_pipeline(text: str) -> PassManager:
    """Read `builtin.module(func.func(a,b{k=v}),c)` or the short `a,b{k=v},c`."""
    parser = _PipelineParser(text.strip())
    entries = parser.entries()
    parser.expect_end()
    if len(entries) == 1 and isinstance(entries[0], PassManager) and entries[0].anchor == "builtin.module":
        return entries[0]
    return PassManager("builtin.module", entries)


class _PipelineParser:
    def __init__(self, text: str):
        self.text = text
        self.pos = 0

    def fail(self, message: str) -> PipelineError:
        return PipelineError(f"{message} at column {self.pos + 1} of pipeline '{self.text}'")

    def peek(self) -> str:
        while self.pos < len(self.text) and self.text[self.pos].isspace():
            self.pos += 1
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def expect_end(self) -> None:
        if self.peek():
            raise self.fail(f"unexpected '{self.peek()}'")

    def name(self) -> str:
        self.peek()
        start = self.pos
        while self.pos < len(self.text) and (self.text[self.pos].isalnum() or self.text[self.pos] in "-_."):
            self.pos += 1
        if start == self.pos:
            raise self.fail("expected a pass name")
        return self.text[start : self.pos]

    def entries(self) -> list:
        out = []
        if self.peek() in ("", ")"):
            return out
        while True:
            out.append(self.entry())
            if self.peek() != ",":
                return out
            self.pos += 1

    def entry(self):
        name = self.name()
        nxt = self.peek()
        if nxt == "(":
            if lookup_op_class(name) is None:
                raise self.fail(f"'{name}' is not an operation to nest passes on (e.g. builtin.module, func.func)")
            self.pos += 1
            manager = PassManager(name, self.entries())
            if self.peek() != ")":
                raise self.fail("expected ')'")
            self.pos += 1
            return manager
        options = {}
        if nxt == "{":
            end = self.text.find("}", self.pos)
            if end < 0:
                raise self.fail("unterminated '{'")
            self.pos += 1
            for key, value in _split_options(self.text[self.pos : end]):
                if not key:
                    raise self.fail(f"option '={value}' has no name")
                options[key] = value
            self.pos = end + 1
        return instantiate(name, options)


_NEXT_OPTION = re.compile(r",(?=\s*[A-Za-z_][\w-]*\s*=)")


def _split_options(text: str) -> list[tuple[str, str]]:
    """`k=v k2=a,b flag` (MLIR's space-separated form) or `k=v,k2=w`.

    A comma starts a new option only when `name=` follows, so list values
    such as `sizes=128,64` stay whole. A bare name means `name=true`.
    """
    out = []
    for word in text.split():
        for item in _NEXT_OPTION.split(word):
            key, eq, value = item.partition("=")
            out.append((key, value if eq else "true"))
    return out


# --------------------------------------------------------------------------- instrumentation


class Instrumentation:
    def before_pass(self, p: Pass, op: Operation) -> None:
        pass

    def after_pass(self, p: Pass, op: Operation) -> None:
        pass


@dataclass
class IRPrinting(Instrumentation):
    """MLIR's --mlir-print-ir-{before,after}{,-all}."""

    before: frozenset = frozenset()
    after: frozenset = frozenset()
    after_all: bool = False
    before_all: bool = False
    stream: Any = None
    generic: bool = False

    def _dump(self, when: str, p: Pass, op: Operation) -> None:
        # MLIR's header; the op the pass ran on is printed, not the whole module.
        what = f"'{op.name}' operation"
        if "sym_name" in op.attributes:
            what += f": @{op.attributes['sym_name'].value}"
        out = self.stream or sys.stderr
        print(f"// -----// IR Dump {when} {type(p).__name__} ({p.name}) ({what}) //----- //", file=out)
        print(print_op(op, generic=self.generic), file=out)

    def before_pass(self, p, op):
        if self.before_all or p.name in self.before:
            self._dump("Before", p, op)

    def after_pass(self, p, op):
        if self.after_all or p.name in self.after:
            self._dump("After", p, op)


class Timing(Instrumentation):
    """Wall time per pass plus named phases (parse, verify, output)."""

    def __init__(self):
        self.rows: dict[str, float] = {}
        self._started: float = 0.0

    def add(self, label: str, seconds: float) -> None:
        self.rows[label] = self.rows.get(label, 0.0) + seconds

    def phase(self, label: str):
        timing = self

        class _Phase:
            def __enter__(self):
                self.start = time.perf_counter()

            def __exit__(self, *exc):
                timing.add(label, time.perf_counter() - self.start)

        return _Phase()

    def before_pass(self, p, op):
        self._started = time.perf_counter()

    def after_pass(self, p, op):
        self.add(f"{type(p).__name__} ({p.name})", time.perf_counter() - self._started)

    def report(self) -> str:
        total = sum(self.rows.values()) or 1e-12
        bar = "===" + "-" * 73 + "==="
        lines = [bar, "Execution time report".center(79), bar, f"  Total Execution Time: {total:.4f} seconds", "", "  ----Wall Time----  ----Name----"]
        for label, seconds in self.rows.items():
            lines.append(f"  {seconds:8.4f} ({100 * seconds / total:5.1f}%)  {label}")
        lines.append(f"  {total:8.4f} (100.0%)  Total")
        return "\n".join(lines)


# --------------------------------------------------------------------------- running


def run_pipeline(
    manager: PassManager,
    module: Operation,
    context: PassContext | None = None,
    instrumentations: Iterable[Instrumentation] = (),
    verify_each: bool = True,
) -> None:
    """Run `manager` on `module`. Raises DiagnosticError or InternalCompilerError."""
    context = context or PassContext()
    _run_manager(manager, module, context, list(instrumentations), verify_each)


def _run_manager(manager: PassManager, op: Operation, context, instrumentations, verify_each) -> None:
    if op.name != manager.anchor:
        raise PipelineError(f"pipeline anchored on '{manager.anchor}' cannot run on '{op.name}'")
    for entry in manager.entries:
        if isinstance(entry, PassManager):
            for child in _children_named(op, entry.anchor):
                _run_manager(entry, child, context, instrumentations, verify_each)
            continue
        targets = [op] if entry.anchor in (op.name, "any") else _children_named(op, entry.anchor)
        for target in targets:
            _run_pass(entry, target, context, instrumentations)
        if verify_each:
            _verify_after(entry, op)


def verify_after_pipeline(manager: PassManager, module: Operation) -> None:
    """Verify `module` once, after `manager` ran without verify_each: invalid
    IR is then an internal error naming the pipeline, never an output."""
    try:
        verify(module)
    except DiagnosticError as exc:
        where = f"pipeline '{manager}'"
        raise located_bug(where, exc, f"the IR was invalid after the {where} (verify after each pass, FUSECC_VERIFY_EACH=1, to name the pass); this is a compiler bug") from None


def _children_named(op: Operation, name: str) -> list[Operation]:
    return [child for region in op.regions for block in region.blocks for child in block if child.name == name]


def _run_pass(p: Pass, op: Operation, context, instrumentations) -> None:
    for instrumentation in instrumentations:
        instrumentation.before_pass(p, op)
    try:
        p.run(op, context)
    except (DiagnosticError, InternalCompilerError):
        raise
    except (KeyboardInterrupt, SystemExit):
        raise
    except Exception as exc:
        raise InternalCompilerError(f"pass '{p.name}'", exc) from exc
    for instrumentation in instrumentations:
        instrumentation.after_pass(p, op)


def _verify_after(p: Pass, op: Operation) -> None:
    """Verify `op` (the module, or the function a nested pipeline runs on)."""
    try:
        verify(op)
    except DiagnosticError as exc:
        raise located_bug(f"pass '{p.name}'", exc, f"the IR was invalid after pass '{p.name}'; this is a compiler bug") from None
    except Exception as exc:
        raise InternalCompilerError(f"the verifier after pass '{p.name}'", exc) from exc


TEST_PASS_PREFIX = "test-"  # passes that exist for tests (mlir-opt's convention): listed only when asked


def list_passes(include_test: bool = False) -> str:
    out = io.StringIO()
    for cls in all_pass_classes():
        if cls.name.startswith(TEST_PASS_PREFIX) and not include_test:
            continue
        options = ", ".join(f"{f.name.replace('_', '-')}={_format_option(f.default)}" for f in dataclasses.fields(cls))
        out.write(f"  {cls.name:<28} {cls.summary}\n")
        if options:
            out.write(f"  {'':<28}   options: {options}\n")
    return out.getvalue()


__all__ = [
    "IRPrinting",
    "Instrumentation",
    "Pass",
    "PassContext",
    "PassManager",
    "PipelineError",
    "Timing",
    "instantiate",
    "list_passes",
    "parse_pipeline",
    "pass_class",
    "register_pass",
    "run_pipeline",
]
