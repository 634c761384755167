"""Issue 14.3: one meaning per flag (--target where code runs or which code
generator, --gpu/--arch what it is tuned for), the same in every command;
nonsense combinations and ignored flags are usage errors (exit 1);
mlir-opt's spellings (--mlir-*, pass flags, --verify-each) in fusecc-opt;
unknown pass names and misspelt subcommands are refused with a suggestion."""

from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest

from fusecc.compiler.parser import parse_module
from fusecc.runtime.reference import evaluate
from fusecc.tools import fusecc as driver
from fusecc.tools import opt

ROOT = pathlib.Path(__file__).resolve().parents[2]
MLP = str(ROOT / "examples" / "mlp.ir")

SMALL = """\
func.func @main(%x: tensor<4x32xf32>, %w: tensor<32x16xf32>, %b: tensor<16xf32>) -> tensor<4x16xf32> {
  %0 = tensor.matmul %x, %w : (tensor<4x32xf32>, tensor<32x16xf32>) -> tensor<4x16xf32>
  %1 = tensor.add %0, %b : (tensor<4x16xf32>, tensor<16xf32>) -> tensor<4x16xf32>
  %2 = tensor.softmax %1 {axis = 1} : (tensor<4x16xf32>) -> tensor<4x16xf32>
  func.return %2 : tensor<4x16xf32>
}
"""


def fusecc(argv, capsys) -> tuple[int, str, str]:
    code = driver.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert "Traceback" not in err and "internal compiler error" not in err
    return code, out, err


def fusecc_opt(argv, capsys) -> tuple[int, str, str]:
    code = opt.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert "Traceback" not in err and "internal compiler error" not in err
    return code, out, err


@pytest.mark.parametrize(
    "argv, message",
    [
        ([MLP, "--target", "cpu", "-o", "kernels.cu"], "would hold LLVM IR for the CPU (--emit=llvm)"),  # was an internal error
        ([MLP, "--emit=llvm", "--target", "a100"], "--emit=llvm generates code for the CPU; --target a100 would be ignored"),  # was silently ignored
        ([MLP, "--emit=llvm", "--gpu", "a100"], "--emit=llvm generates code for the CPU; --gpu would be ignored"),
        ([MLP, "--emit=llvm", "--target", "cuda"], "--emit=llvm generates code for the CPU"),
        ([MLP, "--emit=cuda", "--target", "cpu"], "--emit=cuda generates CUDA C for a GPU"),
        ([MLP, "--target", "reference"], "nothing is compiled for it"),
        ([MLP, "--gpu", "a100", "--arch", "sm_90"], "--gpu a100 is sm_80, not --arch sm_90"),
        ([MLP, "--target", "cpu", "--emit=fused", "--gpu", "h200"], "--gpu tunes GPU code; it has no effect with --target cpu"),
        ([MLP, "--emit=llvm", "--resource-usage"], "--resource-usage reports CUDA kernels' registers"),
        ([MLP, "--print-debuginfo"], "--emit=cuda prints no IR"),
        ([MLP, "--target", "tpu"], "unknown target 'tpu' for fusecc; choose one of cpu, cuda, cuda-sim"),
        ([MLP, "--target", "cdua"], "did you mean 'cuda'?"),
        ([MLP, "--gpu", "h100"], "argument --gpu: invalid choice: 'h100'"),
        ([MLP, "--bogus"], "unrecognized arguments: --bogus"),
        (["explain", MLP, "--target", "reference"], "fusecc explain needs --target cpu or cuda"),
        (["report", MLP, "--target", "cpu", "--arch", "sm_80"], "--arch tunes GPU code; it has no effect with --target cpu"),
        (["report", MLP, "--repeat", "3"], "--repeat applies to --measure; add --measure or drop it"),
        (["report", MLP, "--level", "llvm"], "--level chooses the language of --show-source"),
        (["run", MLP, "--target", "cpu", "--gpu", "a100", "--random-inputs"], "--gpu tunes GPU code; it has no effect with --target cpu"),
        (["run", MLP, "--target", "reference", "--arch", "sm_80", "--random-inputs"], "--arch tunes GPU code; it has no effect with --target reference"),
        (["run", MLP, "--target", "cuda", "--gpu", "a100", "--random-inputs"], "--target cuda compiles for the GPU it runs on"),
        (["run", MLP, "--bogus"], "unrecognized arguments: --bogus"),
    ],
)
def test_nonsense_and_ignored_flags_are_usage_errors(argv, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, _, err = fusecc(argv, capsys)
    assert code == 1 and message in err, err
    assert not (tmp_path / "kernels.cu").exists()


def test_gpu_and_arch_name_the_same_thing(tmp_path, capsys):
    for flags, name in ((["--gpu", "a100"], "by_gpu"), (["--arch", "sm_80"], "by_arch"), (["--target", "cuda", "--gpu", "a100"], "both")):
        assert fusecc([MLP, *flags, "-o", tmp_path / f"{name}.cu"], capsys)[0] == 0
    texts = {name: (tmp_path / f"{name}.cu").read_text() for name in ("by_gpu", "by_arch", "both")}
    assert texts["by_gpu"] == texts["by_arch"] == texts["both"]
    assert json.loads((tmp_path / "by_gpu.json").read_text())["arch"] == "sm_80"
    # and a100 is really what was tuned for: h200's tiles differ
    assert fusecc([MLP, "--gpu", "h200", "-o", tmp_path / "h200.cu"], capsys)[0] == 0
    assert json.loads((tmp_path / "h200.json").read_text())["arch"] == "sm_90"


def test_target_cpu_compiles_to_llvm_ir(tmp_path, capsys):
    assert fusecc([MLP, "--target", "cpu", "-o", tmp_path / "mlp.ll"], capsys)[0] == 0
    assert "define " in (tmp_path / "mlp.ll").read_text()


def test_the_old_hardware_spelling_is_an_alias_with_a_warning(capsys):
    code, old, err = fusecc([MLP, "--target", "a100", "--emit=fused"], capsys)
    assert code == 0 and "'--target a100' is deprecated: it means '--target cuda --gpu a100'" in err
    assert fusecc([MLP, "--gpu", "a100", "--emit=fused"], capsys)[1] == old
    code, _, err = fusecc([MLP, "--target", "a100", "--gpu", "h200"], capsys)
    assert code == 1 and "contradicts --gpu h200" in err


def test_explain_and_report_take_the_same_flags(capsys):
    code, out, _ = fusecc(["report", MLP, "--json", "--gpu", "a100"], capsys)
    assert code == 0 and json.loads(out)["target"] == "a100"
    code, out, _ = fusecc(["report", MLP, "--json", "--target", "cpu"], capsys)
    assert code == 0 and json.loads(out)["target"] == "cpu"
    code, out, _ = fusecc(["explain", MLP, "--target", "cpu"], capsys)
    assert code == 0 and out.rstrip().endswith("on cpu")
    code, out, _ = fusecc(["explain", MLP, "--arch", "sm_80"], capsys)
    assert code == 0 and out.rstrip().endswith("on a100")


def test_cuda_sim_runs_the_generated_cuda_c_on_this_cpu(tmp_path, capsys):
    program = tmp_path / "small.ir"
    program.write_text(SMALL)
    rng = np.random.default_rng(0)
    x, w, b = (rng.standard_normal(s).astype(np.float32) for s in ((4, 32), (32, 16), (16,)))
    np.savez(tmp_path / "in.npz", x=x, w=w, b=b)
    code, _, err = fusecc(["run", program, "--inputs", tmp_path / "in.npz", "-o", tmp_path / "out.npz", "--target", "cuda-sim", "--gpu", "a100"], capsys)
    assert code == 0 and "target cuda-sim" in err
    (expected,) = evaluate(parse_module(SMALL), "main", [x, w, b])
    np.testing.assert_allclose(np.load(tmp_path / "out.npz")["result0"], expected, rtol=1e-5, atol=1e-6)


def test_misspelt_subcommands_suggest_the_right_one(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, _, err = fusecc(["rnu", MLP], capsys)
    assert code == 1 and "unknown command 'rnu'; did you mean 'run'?" in err
    code, _, err = fusecc(["explian", MLP], capsys)
    assert code == 1 and "did you mean 'explain'?" in err
    (tmp_path / "rnu").write_text(SMALL)  # a file of that name is a program, not a typo
    assert fusecc(["rnu", "--emit=tensor"], capsys)[0] == 0


def test_version_in_both_tools(capsys):
    from fusecc import __version__

    assert driver.main(["--version"]) == 0
    assert capsys.readouterr().out == f"fusecc {__version__}\n"
    with pytest.raises(SystemExit) as exit_:
        opt.main(["--version"])
    assert exit_.value.code == 0 and capsys.readouterr().out == f"fusecc-opt {__version__}\n"


# --------------------------------------------------------------------------- fusecc-opt


def test_pass_flags_run_in_order_like_a_pipeline(capsys):
    by_flags = fusecc_opt([MLP, "--inline", "--canonicalize", "--cse", "--fuse=only=elementwise"], capsys)
    by_pipeline = fusecc_opt([MLP, "-p", "inline,canonicalize,cse,fuse{only=elementwise}"], capsys)
    assert by_flags[0] == by_pipeline[0] == 0 and by_flags[1] == by_pipeline[1]
    assert "fusion." in by_flags[1]
    _, _, dumps = fusecc_opt([MLP, "--cse", "--canonicalize", "--mlir-print-ir-after-all"], capsys)
    assert [line.split("(")[1].split(")")[0] for line in dumps.splitlines() if "IR Dump After" in line] == ["cse", "canonicalize"]


def test_pass_flags_and_a_pipeline_are_not_mixed(capsys):
    code, _, err = fusecc_opt([MLP, "-p", "cse", "--canonicalize"], capsys)
    assert code == 1 and "not both" in err


@pytest.mark.parametrize(
    "mlir_flag, ours",
    [
        ("--mlir-print-op-generic", "--print-generic"),
        ("--mlir-print-debuginfo", "--print-debuginfo"),
    ],
)
def test_mlir_spellings_of_printing_flags(mlir_flag, ours, capsys):
    assert fusecc_opt([MLP, mlir_flag], capsys)[1] == fusecc_opt([MLP, ours], capsys)[1]


def test_mlir_timing_and_ir_dumps(capsys):
    _, _, err = fusecc_opt([MLP, "--cse", "--mlir-timing"], capsys)
    assert "Execution time report" in err
    _, _, err = fusecc_opt([MLP, "--cse", "--mlir-print-ir-after=cse"], capsys)
    assert "IR Dump After CSE (cse)" in err


def test_verify_each_takes_a_boolean(capsys, monkeypatch):
    from fusecc.compiler import pass_manager

    seen = []
    original = pass_manager.run_pipeline
    monkeypatch.setattr(opt, "run_pipeline", lambda *a, verify_each=True, **k: (seen.append(verify_each), original(*a, verify_each=verify_each, **k))[1])
    for flags in (["--verify-each=false"], ["--no-verify-each"], ["--verify-each"], []):
        assert fusecc_opt([MLP, "--cse", *flags], capsys)[0] == 0
    assert seen == [False, False, True, True]
    code, _, err = fusecc_opt([MLP, "--verify-each=maybe"], capsys)
    assert code == 1 and "expected true or false, not 'maybe'" in err


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--print-ir-after=nosuch", "-p", "cse"], "--print-ir-after=nosuch: unknown pass 'nosuch'"),
        (["--print-ir-before=csee", "-p", "cse"], "did you mean 'cse'?"),
        (["-p", "nosuch"], "unknown pass 'nosuch'"),
        (["--nosuch-pass"], "unrecognized arguments: --nosuch-pass"),
        (["--target", "reference"], "unknown target 'reference' for fusecc-opt"),
        (["--target", "cpu", "--gpu", "a100"], "--gpu tunes GPU code"),
    ],
)
def test_opt_refuses_unknown_names(argv, message, capsys):
    code, _, err = fusecc_opt([MLP, *argv], capsys)
    assert code == 1 and message in err, err


def test_opt_target_cpu_and_gpu_flags_reach_the_passes(capsys):
    cpu = fusecc_opt([MLP, "--target", "cpu", "--inline", "--fuse", "--tile", "--lower-to-loops"], capsys)[1]
    a100 = fusecc_opt([MLP, "--gpu", "a100", "--inline", "--fuse", "--tile", "--lower-to-loops"], capsys)[1]
    old = fusecc_opt([MLP, "--target", "a100", "--inline", "--fuse", "--tile", "--lower-to-loops"], capsys)[1]
    assert '"worker"' in cpu and '"worker"' not in a100 and old == a100


@pytest.mark.parametrize("argv", [[], ["run"], ["explain"], ["report"], ["import"], ["cache", "bogus"], ["cache"], ["run", MLP, "--target"]])
def test_argument_mistakes_are_usage_errors_in_every_command(argv, capsys):
    code, _, err = fusecc(argv, capsys)
    assert code == 1 and "error:" in err and "usage:" in err
