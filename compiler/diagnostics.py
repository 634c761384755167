"""Locations, diagnostics and how they are shown to a user.

Every user-facing problem is a `Diagnostic` at a `Location`. The renderer
prints it the way compilers do: `file:line:col: error: message`, the source
line, and a caret under the column. Internal failures become
`InternalCompilerError`, which names the pass that failed.
"""

from __future__ import annotations

import enum
import sys
from dataclasses import dataclass, field
from typing import Callable, Iterable


# --------------------------------------------------------------------------- locations


class Location:
    __slots__ = ()

    def file_line_col(self) -> "FileLineColLoc | None":
        """The first concrete source position this location refers to."""
        return None


@dataclass(frozen=True, slots=True)
class FileLineColLoc(Location):
    file: str
    line: int
    col: int

    def file_line_col(self):
        return self

    def __str__(self) -> str:
        from fusecc.compiler.attributes import quote_string

        return f"loc({quote_string(self.file)}:{self.line}:{self.col})"


@dataclass(frozen=True, slots=True)
class UnknownLoc(Location):
    def __str__(self) -> str:
        return "loc(unknown)"


@dataclass(frozen=True, slots=True)
class NameLoc(Location):
    """A named location, optionally wrapping a child: `loc("name"(child))`."""

    name: str
    child: Location | None = None

    def file_line_col(self):
        return self.child.file_line_col() if self.child else None

    def __str__(self) -> str:
        from fusecc.compiler.attributes import quote_string

        inner = f"({str(self.child)[4:-1]})" if self.child else ""
        return f"loc({quote_string(self.name)}{inner})"


@dataclass(frozen=True, slots=True)
class FusedLoc(Location):
    """Several source locations merged, e.g. the ops of one fusion group."""

    locations: tuple[Location, ...]

    def file_line_col(self):
        for loc in self.locations:
            found = loc.file_line_col()
            if found:
                return found
        return None

    def __str__(self) -> str:
        return "loc(fused[" + ", ".join(str(l)[4:-1] for l in self.locations) + "])"


UNKNOWN_LOC = UnknownLoc()


def fuse_locations(locations: Iterable[Location]) -> Location:
    unique: list[Location] = []
    for loc in locations:
        parts = loc.locations if isinstance(loc, FusedLoc) else (loc,)
        for part in parts:
            if not isinstance(part, UnknownLoc) and part not in unique:
                unique.append(part)
    if not unique:
        return UNKNOWN_LOC
    if len(unique) == 1:
        return unique[0]
    return FusedLoc(tuple(unique))


# --------------------------------------------------------------------------- diagnostics


class Severity(enum.Enum):
    ERROR = "error"
    WARNING = "warning"
    REMARK = "remark"
    NOTE = "note"


@dataclass
class Diagnostic:
    severity: Severity
    location: Location
    message: str
    notes: list["Diagnostic"] = field(default_factory=list)

    def attach_note(self, message: str, location: Location | None = None) -> "Diagnostic":
        self.notes.append(Diagnostic(Severity.NOTE, location or self.location, message))
        return self


class DiagnosticError(Exception):
    """Raised to stop processing after a user-facing error was found."""

    def __init__(self, diagnostic: Diagnostic):
        super().__init__(diagnostic.message)
        self.diagnostic = diagnostic


def error(location: Location, message: str) -> DiagnosticError:
    """Build (not raise) the exception for an error at `location`."""
    return DiagnosticError(Diagnostic(Severity.ERROR, location, message))


class UsageError(Exception):
    """A problem with how fusecc was asked to work (a missing file, a bad
    option, an input of the wrong shape), not with a program's text: the
    tools print it as `tool: error: ...` and exit with 1."""


class InternalCompilerError(Exception):
    """A bug in fusecc, as opposed to a problem in the user's program. When
    the bug shows at a place in the program (IR a pass left invalid, a group
    fusion formed that its lowering cannot lower), `diagnostic` locates it;
    the tools print it before the internal-error line and exit with 2."""

    def __init__(self, where: str, cause: BaseException, diagnostic: Diagnostic | None = None):
        super().__init__(f"internal compiler error in {where}: {type(cause).__name__}: {cause}")
        self.where = where
        self.cause = cause
        self.diagnostic = diagnostic


def located_bug(where: str, exc: DiagnosticError, note: str) -> InternalCompilerError:
    """The internal error for a located diagnostic that is fusecc's fault,
    not the program's: the diagnostic keeps its location and gains `note`."""
    exc.diagnostic.attach_note(note)
    return InternalCompilerError(where, exc, exc.diagnostic)


# --------------------------------------------------------------------------- rendering


class SourceManager:
    """Remembers source texts so that diagnostics can quote their lines."""

    def __init__(self):
        self._files: dict[str, list[str]] = {}

    def add(self, name: str, text: str) -> None:
        self._files[name] = text.split("\n")

    def line(self, name: str, line: int) -> str | None:
        lines = self._files.get(name)
        if lines is None or not 1 <= line <= len(lines):
            return None
        return lines[line - 1]


def location_label(location: Location) -> str:
    """A location without a file position, as text: the names it carries
    (an imported model's node names), else `<unknown>`."""
    if isinstance(location, NameLoc):
        return location.name
    if isinstance(location, FusedLoc):
        return ", ".join(location_label(part) for part in location.locations)
    return "<unknown>"


def render(diagnostic: Diagnostic, sources: SourceManager | None = None) -> str:
    position = diagnostic.location.file_line_col()
    if position is None:
        head = f"{location_label(diagnostic.location)}: {diagnostic.severity.value}: {diagnostic.message}"
        parts = [head]
    else:
        parts = [f"{position.file}:{position.line}:{position.col}: {diagnostic.severity.value}: {diagnostic.message}"]
        text = sources.line(position.file, position.line) if sources else None
        if text is not None:
            parts.append(text.rstrip("\r"))
            # Tabs are kept so the caret lines up under the same column.
            prefix = "".join(ch if ch == "\t" else " " for ch in text[: max(0, position.col - 1)])
            parts.append(prefix + "^")
    for note in diagnostic.notes:
        parts.append(render(note, sources))
    return "\n".join(parts)


class DiagnosticEngine:
    """Where passes report diagnostics.

    By default diagnostics are printed to stderr as they arrive. Tools that
    check diagnostics (`--verify-diagnostics`) install a collecting handler.
    """

    def __init__(self, sources: SourceManager | None = None, stream=None):
        self.sources = sources or SourceManager()
        self.stream = stream
        self.handler: Callable[[Diagnostic], None] = self._print
        self.error_count = 0

    def _print(self, diagnostic: Diagnostic) -> None:
        print(render(diagnostic, self.sources), file=self.stream or sys.stderr)

    def emit(self, diagnostic: Diagnostic) -> None:
        if diagnostic.severity is Severity.ERROR:
            self.error_count += 1
        self.handler(diagnostic)

    def remark(self, location: Location, message: str) -> Diagnostic:
        diagnostic = Diagnostic(Severity.REMARK, location, message)
        self.emit(diagnostic)
        return diagnostic

    def warning(self, location: Location, message: str) -> Diagnostic:
        diagnostic = Diagnostic(Severity.WARNING, location, message)
        self.emit(diagnostic)
        return diagnostic
