"""What only the run can tell about `?` dims: the checks shape inference
leaves (each naming its op and location), and `fusecc run` reporting a
failed one as `file:line:col: error:` with exit 1."""

from __future__ import annotations

import numpy as np
import pytest

from dynamic_programs import PROGRAMS, load

from fusecc.compiler.dims import dim_symbol, runtime_checks
from fusecc.compiler.diagnostics import DiagnosticError
from fusecc.runtime.reference import evaluate
from fusecc.tools.fusecc import main as fusecc_main

CHECKS = PROGRAMS / "checks.ir"


def test_each_undecidable_dim_is_one_located_check():
    _, func = load("checks")
    found = [(str(c.lhs), str(c.rhs), c.op_name, c.location.file_line_col().line) for c in runtime_checks(func)]
    assert found == [
        ("s0", "s5", "tensor.add", 4),
        ("s1", "s6", "tensor.add", 4),
        ("s1", "s2", "tensor.matmul", 5),
        ("Mod(s4, 3)", "0", "tensor.reshape", 6),
        ("s3", "s1", "tensor.concat", 7),
    ]


def test_named_dims_need_no_check():
    _, func = load("encoder")
    assert runtime_checks(func) == []
    names = {str(s) for t in func.function_type.inputs for d in t.shape if not isinstance(d, int) for s in d.free_symbols}
    assert names == {"B", "S"}


def arrays(a=(3, 4), b=(4, 4), c=(6, 16), d=(3, 4)):
    rng = np.random.default_rng(0)
    return [rng.standard_normal(s).astype(np.float32) for s in (a, b, c, d)]


def test_consistent_sizes_run_and_match_numpy():
    module, _ = load("checks")
    a, b, c, d = arrays()
    got = evaluate(module, "checks", [a, b, c, d])
    np.testing.assert_allclose(got[0], a + d, rtol=1e-6)
    np.testing.assert_allclose(got[1], a @ b, rtol=1e-5)
    np.testing.assert_array_equal(got[2], c.reshape(-1, 3))
    assert got[3].shape == (7, 4)


@pytest.mark.parametrize(
    "shapes, message",
    [
        ({"d": (3, 5)}, "'tensor.add' op broadcast dims of axis 1 must be equal (s1 == s6), which fails at run time with s1 = 4, s6 = 5"),
        ({"b": (3, 4)}, "'tensor.matmul' op contracting dimensions of lhs and rhs must be equal (s1 == s2), which fails at run time with s1 = 4, s2 = 3"),
        ({"c": (5, 16)}, "'tensor.reshape' op reshape result dim 0 (16*s4/3) must be a whole number (Mod(s4, 3) == 0), which fails at run time with s4 = 5"),
    ],
)
def test_a_failed_check_names_the_op_and_its_line(shapes, message):
    module, _ = load("checks")
    with pytest.raises(DiagnosticError) as info:
        evaluate(module, "checks", arrays(**shapes))
    assert message in str(info.value)


def test_fusecc_run_reports_a_failed_check_located_with_exit_1(tmp_path, capsys):
    a, b, c, d = arrays(d=(3, 5))
    np.savez(tmp_path / "in.npz", a=a, b=b, c=c, d=d)
    assert fusecc_main(["run", str(CHECKS), "--inputs", str(tmp_path / "in.npz"), "--target", "reference"]) == 1
    err = capsys.readouterr().err
    assert f"{CHECKS}:4:3: error: 'tensor.add' op broadcast dims of axis 1 must be equal" in err
    assert "%sum = tensor.add %a, %d" in err and "Traceback" not in err


def test_tied_dims_must_agree_and_be_at_least_one():
    module, func = load("encoder")
    table = np.zeros((50, 64), np.float32)
    rest = [np.zeros(t.shape, np.float32) for t in func.function_type.inputs[2:]]
    with pytest.raises(DiagnosticError, match=r"dim 'S' is 5 in dim 1 of argument 0 \(ids\) but 4 in dim 1 of argument 1 \(mask\)"):
        evaluate(module, "encoder", [np.zeros((2, 5), np.int64), np.ones((2, 4), np.float32), *rest])
    with pytest.raises(DiagnosticError, match=r"is 0, but a dynamic dim \('B'\) must be at least 1"):
        evaluate(module, "encoder", [np.zeros((0, 5), np.int64), np.ones((0, 5), np.float32), *rest])
    assert dim_symbol("B") in {s for d in func.function_type.inputs[0].shape for s in d.free_symbols}
    assert table.shape == (50, 64)


@pytest.mark.parametrize("target", ["cpu", "cuda-sim"])
def test_compiled_targets_run_a_dynamic_program_or_refuse_it_located(target, tmp_path, capsys):
    """Until every level takes runtime extents, a compiled target either
    agrees with the reference or says, located, what it cannot do yet."""
    sizes = ["--random-inputs", "--dims", "s0=2,s1=3,s2=3,s3=3,s4=3,s5=2,s6=3"]
    assert fusecc_main(["run", str(CHECKS), *sizes, "--target", "reference", "-o", str(tmp_path / "ref.npz")]) == 0
    capsys.readouterr()
    code = fusecc_main(["run", str(CHECKS), *sizes, "--target", target, "-o", str(tmp_path / "out.npz")])
    err = capsys.readouterr().err
    assert "Traceback" not in err and "internal compiler error" not in err, err
    if code == 0:
        expected, got = np.load(tmp_path / "ref.npz"), np.load(tmp_path / "out.npz")
        for key in expected:
            np.testing.assert_allclose(got[key], expected[key], rtol=1e-5, atol=1e-5)
    else:
        assert code == 1 and f"{CHECKS}:" in err and ": error: " in err and "not supported yet" in err, err
