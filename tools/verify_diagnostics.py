"""`--verify-diagnostics`: check emitted diagnostics against annotations.

The annotations are MLIR's:

    // expected-error {{message part}}          on the same line
    // expected-error @+1 {{...}}                N lines below (or @-N above)
    // expected-warning @below {{...}}           the next line without an annotation
    // expected-remark @above {{...}}            the previous line without an annotation
    // expected-error @unknown {{...}}           a diagnostic without a source location

A diagnostic matches an annotation with the same severity and line whose
text is a substring of the message. Every annotation must be matched and
every error, warning or remark must be expected (notes may go unchecked).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from fusecc.compiler.diagnostics import Diagnostic, FileLineColLoc, Severity

_ANNOTATION = re.compile(r"//\s*expected-(error|warning|remark|note)\s*(@(?:above|below|unknown|[+-]\d+|\d+))?\s*\{\{(.*?)\}\}")
UNKNOWN_LINE = 0


@dataclass
class Expectation:
    severity: Severity
    line: int  # target line, 1-based, in the original file
    text: str
    source_line: int
    column: int
    matched: bool = False


def parse_expectations(text: str, line_offset: int = 0) -> list[Expectation]:
    lines = text.split("\n")
    # As in MLIR, @above/@below skip lines that carry annotations themselves.
    plain = [not _ANNOTATION.search(line) for line in lines]
    found = []
    for index, line in enumerate(lines):
        for match in _ANNOTATION.finditer(line):
            severity, where, message = match.groups()
            target = index
            if where == "@below":
                target = next((i for i in range(index + 1, len(lines)) if plain[i]), len(lines))
            elif where == "@above":
                target = next((i for i in range(index - 1, -1, -1) if plain[i]), -1)
            elif where == "@unknown":
                target = UNKNOWN_LINE - 1 - line_offset
            elif where and where[1] in "+-":
                target = index + int(where[1:])
            elif where:
                target = int(where[1:]) - 1 - line_offset
            found.append(
                Expectation(Severity(severity), target + 1 + line_offset, message, index + 1 + line_offset, match.start() + 1)
            )
    return found


def check(expectations: list[Expectation], diagnostics: list[Diagnostic], filename: str) -> list[str]:
    """Messages for every mismatch; an empty list means the check passed."""
    problems = []
    for diagnostic in _flatten(diagnostics):
        position = diagnostic.location.file_line_col()
        line = UNKNOWN_LINE if position is None else position.line
        match = None
        for expectation in expectations:
            if (
                not expectation.matched
                and expectation.severity is diagnostic.severity
                and line == expectation.line
                and expectation.text in diagnostic.message
            ):
                match = expectation
                break
        if match is not None:
            match.matched = True
        elif diagnostic.severity is not Severity.NOTE:
            where = f"{position.file}:{position.line}:{position.col}" if position else filename
            problems.append(f"{where}: error: unexpected {diagnostic.severity.value}: {diagnostic.message}")
    for expectation in expectations:
        if not expectation.matched:
            problems.append(
                f"{filename}:{expectation.source_line}:{expectation.column}: error: expected "
                f'{expectation.severity.value} "{expectation.text}" was not produced'
            )
    return problems


def _flatten(diagnostics):
    for diagnostic in diagnostics:
        yield diagnostic
        yield from _flatten(diagnostic.notes)


__all__ = ["Expectation", "FileLineColLoc", "check", "parse_expectations"]
