"""--verify-diagnostics' matching rules, with warnings, remarks and notes that
no pass emits yet."""

from __future__ import annotations

from fusecc.compiler.diagnostics import UNKNOWN_LOC, Diagnostic, FileLineColLoc, Severity
from fusecc.tools.verify_diagnostics import check, parse_expectations

SOURCE = """\
op one
// expected-remark @below {{fused}}
// expected-warning @below {{slow}}
op two
op three // expected-error {{bad}}
// expected-note @above {{here}}
// expected-error @-3 {{also}}

// expected-error @+2 {{later}}
// expected-error @unknown {{nowhere}}
op four
"""


def at(line: int) -> FileLineColLoc:
    return FileLineColLoc("t.ir", line, 1)


def test_designators_resolve_like_mlir():
    found = [(e.severity.value, e.line, e.text) for e in parse_expectations(SOURCE)]
    assert found == [
        ("remark", 4, "fused"),  # @below skips the annotation line in between
        ("warning", 4, "slow"),
        ("error", 5, "bad"),
        ("note", 4, "here"),  # @above: the last line without annotations (line 5 has one)
        ("error", 4, "also"),
        ("error", 11, "later"),
        ("error", 0, "nowhere"),
    ]
    shifted = parse_expectations(SOURCE, line_offset=10)
    assert [e.line for e in shifted][:3] == [14, 14, 15] and shifted[-1].line == 0


def test_every_diagnostic_and_every_expectation_must_match():
    error = Diagnostic(Severity.ERROR, at(5), "something bad happened")
    error.attach_note("declared here", at(4))
    diagnostics = [
        Diagnostic(Severity.REMARK, at(4), "ops were fused"),
        Diagnostic(Severity.WARNING, at(4), "this is slow"),
        error,
        Diagnostic(Severity.ERROR, at(4), "also broken"),
        Diagnostic(Severity.ERROR, at(11), "later on"),
        Diagnostic(Severity.ERROR, UNKNOWN_LOC, "from nowhere"),
    ]
    assert check(parse_expectations(SOURCE), diagnostics, "t.ir") == []
    error.notes[0].location = at(5)
    assert check(parse_expectations(SOURCE), diagnostics, "t.ir") == ['t.ir:6:1: error: expected note "here" was not produced']


def test_mismatches_are_reported():
    problems = check(parse_expectations("op // expected-warning {{slow}}\n"), [Diagnostic(Severity.ERROR, at(1), "slow")], "t.ir")
    assert problems == [
        "t.ir:1:1: error: unexpected error: slow",
        't.ir:1:4: error: expected warning "slow" was not produced',
    ]
