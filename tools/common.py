"""What the command-line tools share: reading input, reporting errors.

The contract with users: a problem in their input is printed as
`file:line:col: error: ...` with the line and a caret, and the tool exits
with 1; a bug in fusecc is printed as an internal error naming the pass or
phase (exit 2). Python tracebacks appear only with FUSECC_DEBUG=1.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from typing import Callable

from fusecc.compiler.diagnostics import DiagnosticEngine, DiagnosticError, InternalCompilerError, SourceManager, UsageError, render
from fusecc.driver.frontend import read_source  # re-exported for the tools

EXIT_USER_ERROR = 1
EXIT_INTERNAL_ERROR = 2


class ArgumentParser(argparse.ArgumentParser):
    """argparse whose mistakes are usage errors like any other (exit 1, the
    tool's `error:` line), not argparse's exit 2; the usage goes first."""

    def error(self, message: str):
        self.print_usage(sys.stderr)
        raise UsageError(message)


def write_stdout(text: str) -> None:
    """Write to standard output; a failed write (a full disk, /dev/full) is a
    user error. A closed pipe (`| head`) stays the quiet exit it is everywhere."""
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        raise
    except OSError as exc:
        # Python would flush the same text again at exit and fail again; point
        # standard output at /dev/null so that the error is reported once.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        raise UsageError(f"could not write to standard output: {exc.strerror or exc}") from None


def write_output(path: str | None, text: str | bytes) -> None:
    if path in (None, "-"):
        write_stdout(text)
        return
    try:
        with open(path, "wb") if isinstance(text, bytes) else open(path, "w", encoding="utf-8") as f:
            f.write(text)
    except OSError as exc:
        raise UsageError(f"could not write '{path}': {exc.strerror}") from None


@contextlib.contextmanager
def phase(name: str):
    """Run a compiler phase (parser, verifier, printer, ...) so that a bug in
    it is reported as an internal error naming it, not as a traceback."""
    try:
        yield
    except (DiagnosticError, UsageError, InternalCompilerError, KeyboardInterrupt, BrokenPipeError):
        raise
    except Exception as exc:
        raise InternalCompilerError(name, exc) from exc


def debug_enabled() -> bool:
    return os.environ.get("FUSECC_DEBUG", "") not in ("", "0")


def guarded_main(tool: str, body: Callable[[DiagnosticEngine], int], sources: SourceManager | None = None) -> int:
    """Run a tool's body, turning every failure into a message and exit code."""
    engine = DiagnosticEngine(sources or SourceManager())
    try:
        return body(engine)
    except DiagnosticError as exc:
        print(render(exc.diagnostic, engine.sources), file=sys.stderr)
        return EXIT_USER_ERROR
    except UsageError as exc:
        print(f"{tool}: error: {exc}", file=sys.stderr)
        return EXIT_USER_ERROR
    except InternalCompilerError as exc:
        if debug_enabled():
            raise
        if exc.diagnostic is not None:
            print(render(exc.diagnostic, engine.sources), file=sys.stderr)
        print(f"{tool}: {exc}", file=sys.stderr)
        print(f"{tool}: note: this is a bug in fusecc; rerun with FUSECC_DEBUG=1 for a traceback", file=sys.stderr)
        return EXIT_INTERNAL_ERROR
    except KeyboardInterrupt:
        print(f"{tool}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except Exception as exc:  # the last line of defence: never a raw traceback
        if debug_enabled():
            raise
        print(f"{tool}: internal compiler error: {type(exc).__name__}: {exc}", file=sys.stderr)
        print(f"{tool}: note: this is a bug in fusecc; rerun with FUSECC_DEBUG=1 for a traceback", file=sys.stderr)
        return EXIT_INTERNAL_ERROR
