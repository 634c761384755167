"""Dynamic shapes on the CUDA target (docs/dynamic-shapes.md, CUDA): a program
with `?` dims compiles once to CUDA C whose kernels take their extents as
parameters; kernels.json (version 3) gives the grid of each launch, its size
arguments and the memory plan as expressions of the named dims, which the
host evaluates per call. The CPU harness runs the one compiled program,
sanitized, at several sizes (1 and primes) against the reference."""

from __future__ import annotations

import json

import numpy as np
import pytest

from fusecc.compiler import parse_module
from fusecc.passes.backends.cuda.manifest import Manifest, ManifestError
from fusecc.passes.backends.cuda.manifest_dims import evaluate, specialize
from fusecc.runtime.cuda.cpu_harness.sanitizer import run_sanitized
from fusecc.runtime.cuda.execute import ExecutionError, bind_dims, for_call, run_on_cpu
from fusecc.runtime.reference import evaluate as reference
from fusecc.tools.fusecc import main as fusecc_main

# Row reductions (layernorm, softmax over the last axis, a max) in a
# horizontal group writing two intermediates (symbolic arena offsets), an
# elementwise group through a reshape of B x S rows, a transpose, and a
# returned input (a copy launch of B*S elements).
ROWS = """
func.func @main(%x: tensor<?x?x64xf32>, %g: tensor<64xf32>, %b: tensor<64xf32>, %y: tensor<?x?xf32>)
    -> (tensor<?x64xf32>, tensor<?x?xf32>, tensor<?x?xf32>) attributes {fusecc.dims = [["B", "S"], [], [], ["B", "S"]]} {
  %n = tensor.layernorm %x, %g, %b : (tensor<?x?x64xf32>, tensor<64xf32>, tensor<64xf32>) -> tensor<?x?x64xf32>
  %sm = tensor.softmax %n {axis = 2} : (tensor<?x?x64xf32>) -> tensor<?x?x64xf32>
  %r = tensor.reshape %sm : (tensor<?x?x64xf32>) -> tensor<?x64xf32>
  %t = tensor.tanh %r : (tensor<?x64xf32>) -> tensor<?x64xf32>
  %m = tensor.reduce_max %n {axes = [2]} : (tensor<?x?x64xf32>) -> tensor<?x?xf32>
  %s = tensor.add %m, %y : (tensor<?x?xf32>, tensor<?x?xf32>) -> tensor<?x?xf32>
  %tt = tensor.transpose %s {perm = [1, 0]} : (tensor<?x?xf32>) -> tensor<?x?xf32>
  %e = tensor.exp %tt : (tensor<?x?xf32>) -> tensor<?x?xf32>
  func.return %t, %e, %y : tensor<?x64xf32>, tensor<?x?xf32>, tensor<?x?xf32>
}
"""

BIAS_EXP = """
func.func @main(%x: tensor<?x?xf32>, %b: tensor<?xf32>) -> tensor<?x?xf32> attributes {fusecc.dims = [["B", "D"], ["D"]]} {
  %0 = tensor.add %x, %b : (tensor<?x?xf32>, tensor<?xf32>) -> tensor<?x?xf32>
  %1 = tensor.exp %0 : (tensor<?x?xf32>) -> tensor<?x?xf32>
  func.return %1 : tensor<?x?xf32>
}
"""

# Matmuls with `?` batch and rows (K, N static), a bias and GELU fused, a
# residual and a layernorm; attention with `?` B, S and T.
MLP_ATTENTION = """
func.func @main(%x: tensor<?x?x16xf32>, %w: tensor<16x24xf32>, %b: tensor<24xf32>, %w2: tensor<24x16xf32>, %g: tensor<16xf32>, %beta: tensor<16xf32>,
                %q: tensor<?x2x?x16xf32>, %k: tensor<?x2x?x16xf32>, %v: tensor<?x2x?x16xf32>) -> (tensor<?x?x16xf32>, tensor<?x2x?x16xf32>)
    attributes {fusecc.dims = [["B", "S"], [], [], [], [], [], ["B", "S"], ["B", "T"], ["B", "T"]]} {
  %0 = tensor.matmul %x, %w : (tensor<?x?x16xf32>, tensor<16x24xf32>) -> tensor<?x?x24xf32>
  %1 = tensor.add %0, %b : (tensor<?x?x24xf32>, tensor<24xf32>) -> tensor<?x?x24xf32>
  %2 = tensor.gelu %1 : (tensor<?x?x24xf32>) -> tensor<?x?x24xf32>
  %3 = tensor.matmul %2, %w2 : (tensor<?x?x24xf32>, tensor<24x16xf32>) -> tensor<?x?x16xf32>
  %4 = tensor.add %3, %x : (tensor<?x?x16xf32>, tensor<?x?x16xf32>) -> tensor<?x?x16xf32>
  %5 = tensor.layernorm %4, %g, %beta : (tensor<?x?x16xf32>, tensor<16xf32>, tensor<16xf32>) -> tensor<?x?x16xf32>
  %a = tensor.attention %q, %k, %v : (tensor<?x2x?x16xf32>, tensor<?x2x?x16xf32>, tensor<?x2x?x16xf32>) -> tensor<?x2x?x16xf32>
  func.return %5, %a : tensor<?x?x16xf32>, tensor<?x2x?x16xf32>
}
"""

SIZES = [(1, 1), (3, 7), (2, 13)]  # B x S: 1, and primes


def compiled(text: str):
    """(CUDA C, manifest): compiled once, checked by NVRTC's front end for sm_90."""
    from fusecc.driver.cuda_target import compile_program

    return compile_program(parse_module(text, "dynamic.ir"), None, "sm_90")


@pytest.fixture(scope="module")
def rows():
    return compiled(ROWS)


def inputs_at(manifest: Manifest, dims: dict, rng) -> list[np.ndarray]:
    return [rng.standard_normal([evaluate(d, dims) for d in spec.shape]).astype(np.float32) for spec in manifest.inputs]


def test_one_compiled_program_runs_sanitized_at_every_size(rows, cuda_cache_dir):
    source, manifest = rows
    rng = np.random.default_rng(0)
    module = parse_module(ROWS, "dynamic.ir")
    for b, s in SIZES:
        inputs = inputs_at(manifest, {"B": b, "S": s}, rng)
        outputs, findings = run_sanitized(manifest, source, inputs, cache_dir=cuda_cache_dir)
        assert findings == []
        expected = reference(module, "main", inputs)
        assert [outputs[spec.name].shape for spec in manifest.outputs] == [(b * s, 64), (s, b), (b, s)]
        for spec, want in zip(manifest.outputs, expected):
            np.testing.assert_allclose(outputs[spec.name], want, rtol=2e-5, atol=2e-6, err_msg=f"{spec.name} at B={b}, S={s}")


def test_matmuls_and_attention_with_dynamic_rows_run_sanitized_at_every_size(cuda_cache_dir):
    source, manifest = compiled(MLP_ATTENTION)
    grids = {launch.kernel: launch.grid for launch in manifest.launches}
    matmuls = [g for name, g in grids.items() if name.endswith("matmul")]
    assert len(matmuls) == 2 and all(g[1].endswith("//16") or g[1].endswith("//32") or g[1].endswith("//64") for g in matmuls)
    assert all(g[1].startswith("(S + ") and g[2] == "B" for g in matmuls)  # row tiles in y, the batch in z
    (attention,) = [g for name, g in grids.items() if name.endswith("attention")]
    assert attention[0].startswith("(S + ") and attention[1] == "2*B"  # query tiles in x, batch x heads in y
    rng = np.random.default_rng(3)
    module = parse_module(MLP_ATTENTION, "dynamic.ir")
    for b, s, t in [(1, 1, 1), (2, 7, 13), (1, 37, 5)]:
        inputs = inputs_at(manifest, {"B": b, "S": s, "T": t}, rng)
        outputs, findings = run_sanitized(manifest, source, inputs, cache_dir=cuda_cache_dir)
        assert findings == []
        for spec, want in zip(manifest.outputs, reference(module, "main", inputs)):
            np.testing.assert_allclose(outputs[spec.name], want, rtol=2e-5, atol=2e-5, err_msg=f"{spec.name} at B={b}, S={s}, T={t}")


def test_the_dynamic_encoder_block_runs_sanitized_at_two_sizes(cuda_cache_dir):
    """tests/dynamic/programs/encoder.ir: embedding gather, merged QKV, masked
    attention, MLP, layernorms; B and S `?`."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "dynamic" / "programs" / "encoder.ir").read_text()
    source, manifest = compiled(text)
    module = parse_module(text, "encoder.ir")
    rng = np.random.default_rng(4)
    for b, s in [(1, 1), (2, 13)]:
        inputs = []
        for spec in manifest.inputs:
            shape = [evaluate(d, {"B": b, "S": s}) for d in spec.shape]
            if spec.name == "ids":
                inputs.append(rng.integers(0, 50, shape))
            elif spec.name == "mask":
                inputs.append((rng.random(shape) > 0.2).astype(np.float32))
            else:
                inputs.append((rng.standard_normal(shape) * 0.2).astype(np.float32))
        outputs, findings = run_sanitized(manifest, source, inputs, cache_dir=cuda_cache_dir)
        assert findings == []
        (want,) = reference(module, manifest.entry, inputs)
        np.testing.assert_allclose(outputs["result0"], want, rtol=1e-4, atol=1e-4, err_msg=f"B={b}, S={s}")


def test_unsanitized_harness_runs_the_same_manifest(rows, cuda_cache_dir):
    source, manifest = rows
    rng = np.random.default_rng(1)
    inputs = inputs_at(manifest, {"B": 5, "S": 3}, rng)
    outputs = run_on_cpu(manifest, source, inputs, cache_dir=cuda_cache_dir)
    expected = reference(parse_module(ROWS, "dynamic.ir"), "main", inputs)
    for spec, want in zip(manifest.outputs, expected):
        np.testing.assert_allclose(outputs[spec.name], want, rtol=2e-5, atol=2e-6)


def test_kernels_json_lists_the_symbolic_parameters_and_grid():
    source, manifest = compiled(BIAS_EXP)
    document = json.loads(manifest.to_json())
    assert document["version"] == 3
    assert document["inputs"] == [{"name": "x", "shape": ["B", "D"], "dtype": "f32"}, {"name": "b", "shape": ["D"], "dtype": "f32"}]
    assert document["outputs"] == [{"name": "result0", "shape": ["B", "D"], "dtype": "f32"}]
    assert document["dims"] == [{"name": "B", "input": "x", "axis": 0}, {"name": "D", "input": "x", "axis": 1}]
    assert document["arena_bytes"] == 0
    (launch,) = document["launches"]
    assert launch["grid"] == ["(B*D + 255)//256", 1, 1]
    assert launch["block"] == [256, 1, 1]
    sizes = [{"size": n, "dtype": "i64"} for n in ("B", "D", "D", "B", "D")]
    assert launch["args"] == [{"input": "x"}, {"input": "b"}, {"output": "result0"}] + sizes
    # The kernel takes those sizes as parameters, in that order; nothing is baked.
    kernel = launch["kernel"]
    assert f"{kernel}(const float* __restrict__ in0, const float* __restrict__ in1, float* __restrict__ out0, long long in0_d0, long long in0_d1, long long in1_d0, long long out0_d0, long long out0_d1)" in source
    assert "in0[i13 * in0_d1 + i8]" in source or "* in0_d1 +" in source
    assert Manifest.from_json(manifest.to_json()) == manifest


def test_kernels_json_memory_plan_is_expressions_of_the_dims(rows):
    _, manifest = rows
    document = manifest.to_dict()
    assert document["arena_bytes"] == "256*((4*B*S + 255)//256) + 512*B*S"
    offsets = {json.dumps(a["arena"]) for l in document["launches"] for a in l["args"] if "arena" in a}
    assert offsets == {"0", '"256*B*S"', '"512*B*S"'}
    grids = {l["kernel"]: l["grid"][0] for l in document["launches"]}
    assert grids["fusecc_copy_f32"] == "(B*S + 255)//256"
    assert set(grids.values()) == {"(B*S + 255)//256", "(B*S + 31)//32", "(B*S + 3)//4"}
    at = specialize(manifest, {"B": 3, "S": 7})
    assert at.arena_bytes == 512 * 21 + 256 and not at.is_dynamic
    assert sorted(l.grid[0] for l in at.launches) == [1, 1, 1, 1, 6]  # B*S = 21 rows: 4 per block in the elementwise kernel


def test_the_host_binds_and_checks_dims_once_per_call(rows):
    _, manifest = rows
    x, g, b = np.zeros((2, 5, 64), np.float32), np.zeros(64, np.float32), np.zeros(64, np.float32)
    assert bind_dims(manifest, [x, g, b, np.zeros((2, 5), np.float32)]) == {"B": 2, "S": 5}
    assert for_call(manifest, [x, g, b, np.zeros((2, 5), np.float32)]) is for_call(manifest, [x, g, b, np.zeros((2, 5), np.float32)])
    with pytest.raises(ExecutionError, match=r"input 'y' has shape \[2, 4\], expected \['B', 'S'\] = \[2, 5\]"):
        bind_dims(manifest, [x, g, b, np.zeros((2, 4), np.float32)])
    with pytest.raises(ExecutionError, match=r"input 'g' has shape \[65\], expected \[64\]"):
        bind_dims(manifest, [x, np.zeros(65, np.float32), b, np.zeros((2, 5), np.float32)])


def test_runtime_dim_checks_travel_in_kernels_json(cuda_cache_dir):
    text = BIAS_EXP.replace('[["B", "D"], ["D"]]', '[["B", "D"], ["E"]]')
    source, manifest = compiled(text)
    (check,) = manifest.checks
    assert check[:2] in (("D", "E"), ("E", "D")) and "dynamic.ir:3:" in check[2]
    assert Manifest.from_json(manifest.to_json()).checks == manifest.checks
    x = np.ones((2, 3), np.float32)
    with pytest.raises(ExecutionError, match=r"dynamic.ir:3:\d+: error: 'tensor.add' op"):
        run_on_cpu(manifest, source, [x, np.ones(4, np.float32)], cache_dir=cuda_cache_dir)
    out = run_on_cpu(manifest, source, [x, np.ones(3, np.float32)], cache_dir=cuda_cache_dir)
    np.testing.assert_allclose(out["result0"], np.exp(x + 1), rtol=1e-6)


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda d: d["launches"][0].__setitem__("grid", ["(B*Q + 255)//256", 1, 1]), r"names Q, which no input's shape defines"),
        (lambda d: d["launches"][0]["args"].__setitem__(3, {"size": "B ** 2"}), r"not allowed in a shape expression"),
        (lambda d: d.__setitem__("version", 2), r"need version 3"),
        (lambda d: d.__setitem__("dims", [{"name": "B", "input": "b", "axis": 0}]), r"dims: .* disagrees with the inputs' shapes"),
    ],
)
def test_malformed_dynamic_manifests_name_the_field(edit, message):
    _, manifest = compiled(BIAS_EXP)
    document = manifest.to_dict()
    edit(document)
    with pytest.raises(ManifestError, match=message):
        Manifest.from_dict(document)


def test_nvrtc_compiles_the_dynamic_kernels_for_sm_90(rows):
    from fusecc.runtime.cuda.nvrtc import NvrtcUnavailable, compile_cuda, nvrtc_version

    try:
        nvrtc_version()
    except NvrtcUnavailable as exc:
        pytest.skip(f"needs NVRTC: {exc}")
    source, manifest = rows
    ptx = compile_cuda(source, "kernels.cu", arch="sm_90", output="ptx")
    text = ptx.decode() if isinstance(ptx, bytes) else str(ptx)
    for name in manifest.kernel_names:
        assert f".entry {name}(" in text


def test_templates_without_dynamic_sizes_give_a_located_error(tmp_path, capsys):
    program = tmp_path / "mm.ir"  # a `?` N (the right operand's columns): not yet
    program.write_text(
        'func.func @main(%q: tensor<?x16xf32>, %k: tensor<16x?xf32>) -> tensor<?x?xf32> attributes {fusecc.dims = [["S"], ["T"]]} {\n'
        "  %s = tensor.matmul %q, %k : (tensor<?x16xf32>, tensor<16x?xf32>) -> tensor<?x?xf32>\n"
        "  func.return %s : tensor<?x?xf32>\n"
        "}\n"
    )
    assert fusecc_main([str(program), "-o", str(tmp_path / "k.cu")]) == 1
    err = capsys.readouterr().err
    assert f"{program}:2:3: error:" in err and "not supported yet on target cuda" in err and "Traceback" not in err


def test_cuda_sim_runs_a_dynamic_program_from_the_command_line(tmp_path, capsys):
    program = tmp_path / "rows.ir"
    program.write_text(ROWS)
    for dims in ("B=1,S=1", "B=2,S=13"):
        code = fusecc_main(["run", str(program), "--target", "cuda-sim", "--sanitize", "--random-inputs", "--dims", dims, "-o", str(tmp_path / "out.npz"), "-q"])
        assert code == 0, capsys.readouterr().err
        got = np.load(tmp_path / "out.npz")
        b, s = (int(v.split("=")[1]) for v in dims.split(","))
        assert got["result0"].shape == (b * s, 64) and got["result1"].shape == (s, b)


def test_kernels_json_is_written_beside_the_source(tmp_path):
    program = tmp_path / "bias.ir"
    program.write_text(BIAS_EXP)
    assert fusecc_main([str(program), "-o", str(tmp_path / "kernels.cu")]) == 0
    manifest = Manifest.from_json((tmp_path / "kernels.json").read_text())
    assert manifest.is_dynamic and manifest.launches[0].grid[0] == "(B*D + 255)//256"


@pytest.mark.cuda
def test_gpu_runs_one_dynamic_program_at_several_sizes(rows):
    from fusecc.runtime.cuda.runtime import CudaRuntime

    source, manifest = rows
    program = CudaRuntime().prepare(manifest, source)
    rng = np.random.default_rng(2)
    module = parse_module(ROWS, "dynamic.ir")
    for b, s in SIZES + [(3, 7)]:  # a shape seen before reuses its bound arguments
        inputs = inputs_at(manifest, {"B": b, "S": s}, rng)
        outputs = program(inputs)
        for spec, want in zip(manifest.outputs, reference(module, "main", inputs)):
            np.testing.assert_allclose(outputs[spec.name], want, rtol=2e-5, atol=2e-6)


def test_counters_report_runs_a_dynamic_program_at_its_shape_hints(tmp_path, capsys):
    program = tmp_path / "rows.ir"
    program.write_text(BIAS_EXP)
    assert fusecc_main(["report", str(program), "--counters", "--arch", "sm_90", "--shape-hint", "B=3,D=300", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["grid_blocks"] == -(-3 * 300 // 256)  # the grid at the hinted sizes
