"""The pass infrastructure: registry, pipeline syntax, options, verification
after each pass, internal errors, instrumentation, and fusecc-opt's use of it."""

from __future__ import annotations

import io

import pytest

from fusecc.compiler import pass_manager as PM
from fusecc.compiler.diagnostics import DiagnosticError, InternalCompilerError
from fusecc.compiler.parser import parse_module
from fusecc.tools import opt

TEST_PASSES = {
    "test-break-return": "testing_passes:BreakReturn",
    "test-crash": "testing_passes:Crash",
    "test-record": "testing_passes:RecordFunctions",
    "test-options": "testing_passes:WithOptions",
    "test-complain": "testing_passes:Complain",
}

PROGRAM = """\
func.func @first(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = tensor.exp %x : (tensor<4xf32>) -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}
func.func @second(%x: tensor<4xf32>) -> tensor<4xf32> {
  func.return %x : tensor<4xf32>
}
"""


@pytest.fixture(autouse=True)
def test_passes():
    PM._load_builtin_registry()
    saved = dict(PM.PASS_REGISTRY)
    for name, target in TEST_PASSES.items():
        PM.register_pass(name, target)
    yield
    PM.PASS_REGISTRY.clear()
    PM.PASS_REGISTRY.update(saved)


def run(pipeline: str, text: str = PROGRAM, **kwargs) -> PM.PassContext:
    context = PM.PassContext()
    PM.run_pipeline(PM.parse_pipeline(pipeline), parse_module(text, "p.ir"), context, **kwargs)
    return context


# --------------------------------------------------------------------------- pipeline syntax


@pytest.mark.parametrize(
    "text, printed",
    [
        ("", "builtin.module()"),
        ("test-record", "builtin.module(test-record)"),
        ("test-record, test-options", "builtin.module(test-record,test-options{count=1 flag=false sizes= scale=1.0 mode=fast})"),
        ("builtin.module(func.func(test-record),test-record)", "builtin.module(func.func(test-record),test-record)"),
        ("func.func(test-record)", "builtin.module(func.func(test-record))"),
        ("test-options{count=3 flag sizes=128,64 scale=0.5 mode=exact}", "builtin.module(test-options{count=3 flag=true sizes=128,64 scale=0.5 mode=exact})"),
        ("test-options{count=3,flag=false,sizes=8}", "builtin.module(test-options{count=3 flag=false sizes=8 scale=1.0 mode=fast})"),
    ],
)
def test_pipeline_syntax(text, printed):
    assert str(PM.parse_pipeline(text)) == printed


def test_options_are_typed():
    options = run("test-options{count=3 flag=1 sizes=128,64 scale=0.25 mode=exact}").statistics["options"]
    assert (options.count, options.flag, options.sizes, options.scale, options.mode) == (3, True, (128, 64), 0.25, "exact")


@pytest.mark.parametrize(
    "text, message",
    [
        ("nope", "unknown pass 'nope'; see --list-passes"),
        ("test-options{colour=red}", "pass 'test-options' has no option 'colour' (options: count, flag, mode, scale, sizes)"),
        ("test-options{count=many}", "option 'count' of pass 'test-options' expects int, got 'many'"),
        ("test-options{flag=maybe}", "option 'flag' of pass 'test-options' expects bool"),
        ("test-options{sizes=1,x}", "expects tuple[int, ...], got '1,x'"),
        ("test-options{count=1", "unterminated '{' at column 13"),
        ("func.func(test-record", "expected ')' at column 22"),
        ("test-record)", "unexpected ')' at column 12"),
        ("test-record,,test-record", "expected a pass name at column 13"),
        ("tensor.bogus(test-record)", "'tensor.bogus' is not an operation to nest passes on"),
        ("test-options{=3}", "option '=3' has no name"),
    ],
)
def test_pipeline_errors(text, message):
    with pytest.raises(PM.PipelineError) as info:
        PM.parse_pipeline(text)
    assert message in str(info.value)


def test_registry_imports_lazily_and_lists_passes():
    assert PM.pass_class("test-record").__name__ == "RecordFunctions"
    listing = PM.list_passes(include_test=True)
    assert "test-options" in listing and "options: count=1, flag=false, sizes=, scale=1.0, mode=fast" in listing
    assert "test-options" not in PM.list_passes() and "canonicalize" in PM.list_passes()  # test- passes only when asked


# --------------------------------------------------------------------------- running


def test_function_passes_run_on_every_function():
    assert run("test-record").statistics["seen"] == ["first", "second"]
    assert run("builtin.module(func.func(test-record,test-record))").statistics["seen"] == ["first", "first", "second", "second"]


def test_a_pass_that_breaks_the_ir_is_an_internal_error_naming_it():
    with pytest.raises(InternalCompilerError) as info:
        run("test-record,test-break-return")
    assert info.value.where == "pass 'test-break-return'"
    diagnostic = info.value.diagnostic
    assert "must end with 'func.return'" in diagnostic.message
    assert diagnostic.location.file_line_col().line == 1  # at @first, where the problem is
    assert diagnostic.notes[0].message == "the IR was invalid after pass 'test-break-return'; this is a compiler bug"


def test_verification_can_be_skipped():
    run("test-break-return", verify_each=False)


def test_an_exception_in_a_pass_is_an_internal_error_naming_it():
    with pytest.raises(InternalCompilerError) as info:
        run("test-record,test-crash")
    assert str(info.value) == "internal compiler error in pass 'test-crash': ZeroDivisionError: division by zero inside the pass"


def test_print_ir_before_and_after():
    stream = io.StringIO()
    printing = PM.IRPrinting(before=frozenset({"test-options"}), after_all=True, stream=stream)
    run("func.func(test-record),test-options", instrumentations=[printing])
    headers = [line for line in stream.getvalue().splitlines() if line.startswith("// -----//")]
    assert headers == [
        "// -----// IR Dump After RecordFunctions (test-record) ('func.func' operation: @first) //----- //",
        "// -----// IR Dump After RecordFunctions (test-record) ('func.func' operation: @second) //----- //",
        "// -----// IR Dump Before WithOptions (test-options) ('builtin.module' operation) //----- //",
        "// -----// IR Dump After WithOptions (test-options) ('builtin.module' operation) //----- //",
    ]
    assert "func.func @second(%x: tensor<4xf32>)" in stream.getvalue()


def test_timing_report_has_a_row_per_pass():
    timing = PM.Timing()
    with timing.phase("Parser"):
        pass
    run("test-record,test-options", instrumentations=[timing])
    report = timing.report()
    assert "Execution time report" in report and "Total Execution Time" in report
    for row in ("Parser", "RecordFunctions (test-record)", "WithOptions (test-options)", "Total"):
        assert row in report


# --------------------------------------------------------------------------- through fusecc-opt


def run_opt(args, capsys, tmp_path, text=PROGRAM):
    path = tmp_path / "input.ir"
    path.write_text(text)
    code = opt.main([str(path), *args])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out, err


def test_opt_reports_a_broken_pass_as_a_compiler_bug(capsys, tmp_path):
    code, out, err = run_opt(["-p", "test-break-return"], capsys, tmp_path)
    assert code == 2 and out == ""  # fusecc's bug, not the program's (issue 16)
    assert "input.ir:1:1: error: 'func.func' op function @first must end with 'func.return'" in err
    assert "note: the IR was invalid after pass 'test-break-return'" in err
    assert "fusecc-opt: internal compiler error in pass 'test-break-return'" in err


def test_opt_reports_a_crashing_pass(capsys, tmp_path):
    code, out, err = run_opt(["--pass-pipeline=builtin.module(test-crash)"], capsys, tmp_path)
    assert code == 2
    assert "fusecc-opt: internal compiler error in pass 'test-crash': ZeroDivisionError" in err


def test_opt_bad_pipeline_is_a_usage_error(capsys, tmp_path):
    code, out, err = run_opt(["-p", "test-record{x=1}"], capsys, tmp_path)
    assert code == 1 and err.startswith("fusecc-opt: error: pass 'test-record' has no option 'x'")


def test_opt_instrumentation_flags(capsys, tmp_path):
    code, out, err = run_opt(["-p", "test-record", "--print-ir-after-all", "--timing"], capsys, tmp_path)
    assert code == 0 and out.startswith("module {")
    assert "IR Dump After RecordFunctions (test-record) ('func.func' operation: @first)" in err
    assert "RecordFunctions (test-record)" in err and "Parser" in err and "Verifier" in err and "Output" in err
    code, out, err = run_opt(["-p", "test-record,test-options", "--print-ir-before=test-options"], capsys, tmp_path)
    assert err.count("IR Dump") == 1 and "IR Dump Before WithOptions" in err


def test_opt_list_passes(capsys, tmp_path):
    code, out, err = run_opt(["--list-passes"], capsys, tmp_path)
    assert code == 0 and out.startswith("Available passes:") and "fuse" in out and "test-break-return" not in out
    code, out, err = run_opt(["--list-passes=all"], capsys, tmp_path)
    assert code == 0 and "test-break-return" in out and "test-inject-fault" in out


def test_opt_fails_when_a_pass_reports_an_error(capsys, tmp_path):
    code, out, err = run_opt(["-p", "test-complain"], capsys, tmp_path)
    assert code == 1 and out == ""
    assert "input.ir:1:1: remark: looked at @first" in err and "input.ir:1:1: error: this function is not allowed" in err


def test_opt_verifies_remarks_and_errors_from_passes(capsys, tmp_path):
    text = PROGRAM.replace("func.func @first", "// expected-remark @below {{looked at @first}}\n// expected-error @below {{not allowed}}\nfunc.func @first")
    text = text.replace("func.func @second", "// expected-remark @+2 {{looked at @second}}\n// expected-error @+1 {{not allowed}}\nfunc.func @second")
    code, out, err = run_opt(["-p", "test-complain", "--verify-diagnostics"], capsys, tmp_path, text)
    assert code == 0, err


def test_a_pipeline_run_without_verify_each_is_checked_once_at_the_end():
    # What fusecc.compile does by default: a broken IR still stops as an internal error, naming the pipeline.
    module = parse_module(PROGRAM, "p.ir")
    manager = PM.parse_pipeline("test-record,test-break-return")
    PM.run_pipeline(manager, module, verify_each=False)
    with pytest.raises(InternalCompilerError) as info:
        PM.verify_after_pipeline(manager, module)
    assert info.value.where.startswith("pipeline '") and "test-break-return" in info.value.where
    assert "FUSECC_VERIFY_EACH=1" in info.value.diagnostic.notes[0].message
