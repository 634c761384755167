"""`--verify-diagnostics`: check emitted diagnostics against annotations.

The annotations are MLIR's:

    // expected-error {{message part}}          on the same line
    // expected-error @+1 {{...}}                N lines below (or @-N above)
    // expected-warning @below {{...}}           next line that is not an annotation
    // expected-remark @above {{...}}            previous such line

A diagnostic matches an annotation with the same severity and line whose
text is a substring of the message. Every annotation must be matched and
every error, warning or remark must be expected.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from fusecc.compiler.diagnostics import Diagnostic, FileLineColLoc, Severity

_ANNOTATION = re.compile(r"//\s*expected-(error|warning|remark|note)\s*(@(?:above|below|[+-]\d+|\d+))?\s*\{\{(.*?)\}\}")
_ONLY_ANNOTATION = re.compile(r"^\s*(//\s*expected-(error|warning|remark|note).*)?$")


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
    found = []
    for index, line in enumerate(lines):
        for match in _ANNOTATION.finditer(line):
            severity, where, message = match.groups()
            target = index
            if where == "@below":
                target = index + 1
                while target < len(lines) and _ANNOTATION.search(lines[target]) and _ONLY_ANNOTATION.match(lines[target]):
                    target += 1
            elif where == "@above":
                target = index - 1
                while target >= 0 and _ANNOTATION.search(lines[target]) and _ONLY_ANNOTATION.match(lines[target]):
                    target -= 1
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
        match = None
        for expectation in expectations:
            if (
                not expectation.matched
                and expectation.severity is diagnostic.severity
                and position is not None
                and position.line == expectation.line
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
