"""The CPU matmul on an AVX2 host: tiles, numbers and registers.

`--target cpu` takes the vector width and register count of the host
(`hardware.host_cpu`): AVX-512 hosts get the 8×32 register tile in 32 zmm
registers, AVX2 hosts a 6×16 tile (or 5 or 4 rows where they divide M) in
16 ymm registers. $FUSECC_CPU_FEATURES=-avx512f compiles and runs as on an
AVX2 host; the AVX2 code runs here too (this machine has AVX-512, and
AVX2), so the numbers are checked against the reference, and the
assembly of the microkernel's K loop is checked for stack spills, which
the AVX-512 tile on AVX2 registers has.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

pytest.importorskip("llvmlite")

from test_matmul_kernels import assert_close, build, program_text  # noqa: E402

from fusecc.compiler.parser import parse_module  # noqa: E402
from fusecc.compiler.printer import print_op  # noqa: E402
from fusecc.compiler.pass_manager import PassContext, parse_pipeline, run_pipeline  # noqa: E402
from fusecc.driver.pipelines import pipeline_for_level  # noqa: E402
from fusecc.passes.backends.hardware import CPU, CPU_AVX2, CPU_FEATURES_ENV, hardware, isa_of  # noqa: E402
from fusecc.passes.backends.llvm.emit import emit_llvm  # noqa: E402
from fusecc.passes.tiling.cpu_matmul_tiles import CPU_K_UNROLL, cpu_register_tile  # noqa: E402
from fusecc.runtime.cpu import jit  # noqa: E402
from fusecc.runtime.reference import evaluate  # noqa: E402

AVX2 = "+avx2,+fma,-avx512f"

LABEL = re.compile(r"^(\.LBB\w+):")
JUMP = re.compile(r"^\s+j\w+\s+(\.LBB\w+)")
# a vector register stored to or loaded from the stack frame: a spill or a reload
STACK_VECTOR = re.compile(r"\((%rsp|%rbp)\).*%[xyz]mm\d|%[xyz]mm\d.*\((%rsp|%rbp)\)")
needs_avx2 = pytest.mark.skipif(not {"avx2", "fma"} <= jit.host_isa(), reason="the host has no AVX2 + FMA")


@pytest.fixture
def avx2(monkeypatch):
    monkeypatch.setenv(CPU_FEATURES_ENV, AVX2)


def test_the_feature_string_decides_the_entry():
    assert isa_of("+avx2,+avx512f,+avx512vl,+fma," + "-avx512f") >= {"avx2", "fma"}
    assert not any(name.startswith("avx512") for name in isa_of("+avx2,+avx512f,+avx512vl,-avx512f"))
    assert (CPU.warp_size, CPU.vector_registers) == (16, 32)
    assert (CPU_AVX2.warp_size, CPU_AVX2.vector_registers) == (8, 16)


def test_the_register_tile_fits_the_registers():
    """The accumulators, the loaded vectors of B and a broadcast of A fit
    the registers: 8×2 + 2 + 1 = 19 of 32 zmm; 6×2 + 2 + 1 = 15 of 16 ymm."""
    assert cpu_register_tile(CPU) == (8, 32)
    assert cpu_register_tile(CPU_AVX2) == (6, 16)
    for hw in (CPU, CPU_AVX2):
        rows, columns = cpu_register_tile(hw)
        assert rows * (columns // hw.warp_size) + columns // hw.warp_size + 1 <= hw.vector_registers
    # AVX2 rows that 6 does not divide take 5 or 4 rows if those divide them
    assert [cpu_register_tile(CPU_AVX2, m)[0] for m in (384, 128, 1000, 129)] == [6, 4, 5, 6]
    # AVX-512 keeps 8 rows whatever M is
    assert [cpu_register_tile(CPU, m)[0] for m in (384, 128, 20)] == [8, 8, 8]


def test_the_host_features_choose_the_tile(avx2):
    assert hardware("cpu") is CPU_AVX2
    assert "avx512f" not in jit.host_isa()


def lowered(m: int, k: int, n: int):
    module = parse_module(program_text(m, k, n, False, True))
    run_pipeline(parse_pipeline(pipeline_for_level("loop", target="cpu")), module, PassContext(target="cpu"))
    return module


def k_loop(asm: str) -> list[str]:
    """The K loop: of the innermost loops (a label to the last jump back to
    it, with no loop inside) that issue FMAs, the one with the most. (Not
    merely the shortest: an epilogue's erf loop has a few FMAs, and the
    unrolled K loop is longer.)"""
    lines = asm.splitlines()
    where = {m.group(1): i for i, line in enumerate(lines) if (m := LABEL.match(line))}
    spans = []
    for i, line in enumerate(lines):
        jump = JUMP.match(line)
        if jump and where.get(jump.group(1), i) < i:
            spans.append((where[jump.group(1)], i))
    innermost = [(a, b) for a, b in spans if not any(a <= c and d <= b and (c, d) != (a, b) for c, d in spans)]
    loops = [lines[a : b + 1] for a, b in innermost if any("vfmadd" in line for line in lines[a : b + 1])]
    assert loops, "no loop with FMAs in the assembly"
    return max(loops, key=lambda body: sum("vfmadd" in line for line in body))


def avx2_assembly(module, monkeypatch) -> str:
    monkeypatch.setenv(CPU_FEATURES_ENV, AVX2)
    return jit.assembly(emit_llvm(module, isa=jit.host_isa()).text)


@needs_avx2
@pytest.mark.parametrize("m", [128, 384])
def test_the_avx2_k_loop_keeps_its_tile_in_registers(monkeypatch, m):
    monkeypatch.setenv(CPU_FEATURES_ENV, AVX2)
    asm = avx2_assembly(lowered(m, 384, 1536), monkeypatch)
    loop = k_loop(asm)
    assert not re.search(r"%zmm\d", asm)
    rows = cpu_register_tile(CPU_AVX2, m)[0]
    # CPU_K_UNROLL steps of k per trip, each MR rows × 2 ymm
    assert sum("vfmadd" in line for line in loop) == rows * 2 * CPU_K_UNROLL
    assert [line for line in loop if STACK_VECTOR.search(line)] == []


@needs_avx2
def test_the_avx512_tile_on_avx2_registers_spills(monkeypatch):
    """What the check above catches: the 8×32 tile (32 ymm accumulators)
    lowered for AVX-512 and compiled for AVX2 keeps part of it on the stack."""
    monkeypatch.delenv(CPU_FEATURES_ENV, raising=False)
    if hardware("cpu") is not CPU:
        pytest.skip("the host has no AVX-512: its `cpu` lowering is the AVX2 one already")
    loop = k_loop(avx2_assembly(lowered(128, 384, 1536), monkeypatch))
    assert sum("vfmadd" in line for line in loop) == 32 * CPU_K_UNROLL
    assert len([line for line in loop if STACK_VECTOR.search(line)]) >= 8


@needs_avx2
@pytest.mark.parametrize("weights_constant", [True, False], ids=["constant-weights", "weights-as-arguments"])
@pytest.mark.parametrize("m, k, n", [(1, 17, 3), (7, 129, 17), (129, 33, 100), (128, 384, 1000), (30, 1000, 129)])
def test_avx2_matmul_bias_gelu_matches_the_reference(tmp_path, avx2, m, k, n, weights_constant):
    rng = np.random.default_rng(m * 7919 + k * 31 + n)
    weight = (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    module, reference, program = build(tmp_path, m, k, n, weights_constant, True, weight, bias, 1 + m % 2)
    # 16 columns per register tile (two ymm), no AVX-512 intrinsic in the math
    assert 'upper = [16], mapping = ["vector"]' in print_op(module.lookup("fused_0_matmul"))
    assert "llvm.x86.avx512" not in program.llvm.text
    x = rng.standard_normal((m, k)).astype(np.float32)
    (want,) = evaluate(reference, "main", [x, weight, bias])
    (got,) = program.run([x] if weights_constant else [x, weight, bias], "main")
    assert_close(got, np.asarray(want), k)
