"""Every example, and random programs from the fuzzer, run clean under the
harness's sanitizer on small shapes (the same programs with their sizes
renamed: the kernels the generator writes for them take the same paths);
`fusecc run --target cuda-sim --sanitize` on the command line, a barrier
deliberately removed from generated code among them."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from fusecc.compiler import parse_module, verify
from fusecc.runtime.cuda.cpu_harness.sanitizer import run_sanitized
from fusecc.runtime.cuda.execute import run_on_cpu
from fusecc.tools.fusecc import main as fusecc_main

EXAMPLES = Path(__file__).resolve().parents[4] / "examples"
# Per example, its sizes renamed (heads x head_dim kept consistent: 768 = 12 x 64 -> 128 = 2 x 64).
SMALL = {
    "attention.ir": {256: 32, 8: 2},
    "elementwise_chain100.ir": {1024: 64},
    "encoder_block.ir": {128: 16, 768: 128, 12: 2, 3072: 256},
    "encoder_block_ops.ir": {128: 16, 768: 128, 12: 2, 3072: 256},
    "layernorm4.ir": {512: 16, 768: 96},
    "llama_block.ir": {128: 16, 1024: 128, 16: 2, 2816: 256},
    "llama_mlp.ir": {128: 16, 1024: 64, 2816: 96},
    "matmul_bias_relu.ir": {128: 16, 768: 64, 3072: 128},
    "mlp.ir": {128: 16, 768: 64, 3072: 128},
}


def small(name: str) -> str:
    dims = SMALL[name]
    text = (EXAMPLES / name).read_text()
    return re.sub(r"tensor<([0-9x]+)x(\w+)>", lambda m: "tensor<" + "x".join(str(dims.get(int(d), int(d))) for d in m.group(1).split("x")) + f"x{m.group(2)}>", text)


def compiled(text: str, name: str):
    from fusecc.driver.cuda_target import compile_program
    from fusecc.driver.inputs import random_input_with_shrunk_weights

    module = parse_module(text, name)
    verify(module)
    func = module.lookup("main") or module.functions()[0]
    rng = np.random.default_rng(0)
    inputs = [random_input_with_shrunk_weights(t, rng) for t in func.function_type.inputs]
    source, manifest = compile_program(module, func.sym_name, "sm_90")
    return source, manifest, inputs


def test_every_example_has_a_small_form():
    assert sorted(SMALL) == sorted(p.name for p in EXAMPLES.glob("*.ir"))


@pytest.mark.parametrize("name", sorted(SMALL))
def test_example_runs_clean_under_the_sanitizer(name, cuda_cache_dir):
    source, manifest, inputs = compiled(small(name), name)
    outputs, findings = run_sanitized(manifest, source, inputs, cache_dir=cuda_cache_dir)
    assert findings == [], "\n".join(map(str, findings))
    plain = run_on_cpu(manifest, source, inputs, cache_dir=cuda_cache_dir)
    for spec in manifest.outputs:  # the sanitized run computes what the plain one does, bit for bit
        np.testing.assert_array_equal(outputs[spec.name], plain[spec.name])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_programs_run_clean_under_the_sanitizer(seed, cuda_cache_dir):
    from fusecc.tools.fuzz.generate import generate
    from fusecc.tools.fuzz.program import print_program

    source, manifest, inputs = compiled(print_program(generate(seed).program), f"fuzz-{seed}.ir")
    _, findings = run_sanitized(manifest, source, inputs, cache_dir=cuda_cache_dir)
    assert findings == [], "\n".join(map(str, findings))


def test_an_unoptimised_sanitized_build_computes_the_same_bits(cuda_cache_dir):
    """The fuzzer builds its harness runs at -O0 (half g++'s time): an example
    whose kernels use every template (matmul, attention, reductions) gives
    the -O2 build's outputs bit for bit, with no findings."""
    source, manifest, inputs = compiled(small("encoder_block.ir"), "encoder_block.ir")
    fast, findings = run_sanitized(manifest, source, inputs, cache_dir=cuda_cache_dir, opt_level="-O0")
    assert findings == [], "\n".join(map(str, findings))
    optimised, _ = run_sanitized(manifest, source, inputs, cache_dir=cuda_cache_dir)
    for spec in manifest.outputs:
        np.testing.assert_array_equal(fast[spec.name], optimised[spec.name])


def test_an_unknown_opt_level_is_refused(cuda_cache_dir):
    source, manifest, inputs = compiled(small("layernorm4.ir"), "layernorm4.ir")
    with pytest.raises(ValueError, match="opt_level must be one of"):
        run_sanitized(manifest, source, inputs, cache_dir=cuda_cache_dir, opt_level="-Ofast")


def test_fusecc_run_sanitize_is_clean_on_an_example(tmp_path, capsys):
    program = tmp_path / "layernorm4.ir"
    program.write_text(small("layernorm4.ir"))
    assert fusecc_main(["run", str(program), "--target", "cuda-sim", "--sanitize", "--random-inputs", "-q"]) == 0
    assert "error" not in capsys.readouterr().err


def test_fusecc_run_sanitize_reports_a_removed_barrier(tmp_path, capsys, monkeypatch):
    """The generated layernorm kernels with their barriers deleted: the
    finding names the kernel, a line of kernels.cu, threads and an address."""
    import fusecc.driver.cuda_target as cuda_target

    lower = cuda_target.lower_to_cuda

    def without_barriers(*args, **kwargs):
        cuda = lower(*args, **kwargs)
        assert "__syncthreads();" in cuda.text
        cuda.text = cuda.text.replace("__syncthreads();", ";")  # same lines, no barrier
        return cuda

    monkeypatch.setattr(cuda_target, "lower_to_cuda", without_barriers)
    program = tmp_path / "layernorm4.ir"  # rows of 768: a block per row, its warps' partial sums meet in shared memory
    program.write_text(small("layernorm4.ir").replace("x96x", "x768x").replace("<96x", "<768x"))
    assert fusecc_main(["run", str(program), "--target", "cuda-sim", "--sanitize", "--random-inputs", "-q"]) == 1
    err = capsys.readouterr().err
    assert re.search(r"^kernels\.cu:\d+: error: shared-memory race \(\w+ after \w+\) in kernel \w+: thread \(\d+, 0, 0\) \w+ \w+ \+ \d+ \(4 bytes, address 0x[0-9a-f]+\)", err, re.M), err
    assert "sanitizer finding(s)" in err and "Traceback" not in err


def test_sanitize_needs_the_cuda_sim_target(tmp_path, capsys):
    program = tmp_path / "layernorm4.ir"
    program.write_text(small("layernorm4.ir"))
    assert fusecc_main(["run", str(program), "--target", "cpu", "--sanitize", "--random-inputs"]) == 1
    assert "--sanitize checks the CUDA C on the CPU harness: give --target cuda-sim" in capsys.readouterr().err
