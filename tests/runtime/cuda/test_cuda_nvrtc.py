"""NVRTC compiles the fixtures for sm_80 and sm_90 without a GPU; the ptxas
report gives registers, spills, shared memory and barriers per kernel."""

from __future__ import annotations

import re

import pytest

from fusecc.runtime.cuda.nvrtc import NvrtcError, NvrtcOptions, compile_cuda, cuda_include_dirs
from fusecc.runtime.cuda.resources import format_resource_usage, parse_ptxas_report, resource_usage_table

FIXTURE_KERNELS = {
    "elementwise.cu": ["bias_gelu_2d", "silu_tanh_rsqrt", "axpby"],
    "matmul_tiled.cu": ["matmul_tiled"],
    "block_reduce.cu": ["row_sum", "total_sum"],
    "softmax_rows.cu": ["softmax_rows"],
    "half_precision.cu": ["scale_relu_f16_to_bf16", "bf16_plus_one_to_f16"],
}
USES_BARRIERS = {"matmul_tiled", "row_sum", "total_sum", "softmax_rows"}
STATIC_SHARED_BYTES = {"matmul_tiled": 4 * (16 * 16 + 16 * 17), "row_sum": 4 * 32, "total_sum": 4 * 32}


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("name", FIXTURE_KERNELS)
def test_fixture_compiles_to_cubin_without_spills(name, arch, cuda_source):
    if name == "half_precision.cu" and not cuda_include_dirs():
        pytest.skip("CUDA's headers (cuda_fp16.h) are not installed")
    out = compile_cuda(cuda_source(name), name, arch=arch, options=NvrtcOptions(ptxas_verbose=True))
    assert out.code[:4] == b"\x7fELF"
    usage = parse_ptxas_report(out.log)
    assert sorted(usage) == sorted(FIXTURE_KERNELS[name])
    for kernel, u in usage.items():
        assert u.arch == arch
        assert 0 < u.registers <= 255
        assert not u.spills and u.stack_bytes == 0, out.log
        assert (u.barriers > 0) == (kernel in USES_BARRIERS)
        assert u.shared_bytes == STATIC_SHARED_BYTES.get(kernel, 0)


def _function_body(ptx: str, kernel: str) -> str:
    start = ptx.index(f".entry {kernel}(")
    end = ptx.find(".entry", start + 1)
    return ptx[start : end if end > 0 else None]


def test_ptx_for_an_arch_and_the_fmad_option(cuda_source):
    source = cuda_source("elementwise.cu")
    ptx = compile_cuda(source, "elementwise.cu", arch="sm_80", output="ptx").ptx
    assert ".target sm_80" in ptx and ".visible .entry axpby(" in ptx
    # a*x + b*y contracts to an fma by default, and not with fmad off.
    assert "fma.rn.f32" in _function_body(ptx, "axpby")
    exact = compile_cuda(source, "elementwise.cu", arch="sm_80", output="ptx", options=NvrtcOptions(fmad=False)).ptx
    assert "fma.rn.f32" not in _function_body(exact, "axpby") and "add.rn.f32" in _function_body(exact, "axpby")


def test_default_flags_and_fast_math_only_on_request():
    flags = NvrtcOptions().flags("sm_90", "cubin")
    assert {"-arch=sm_90", "-std=c++17", "-default-device", "--fmad=true"} <= set(flags)
    assert "--use_fast_math" not in flags and "-Xptxas=-v" not in flags
    assert "--use_fast_math" in NvrtcOptions(fast_math=True).flags("sm_90", "cubin")
    assert "-arch=compute_80" in NvrtcOptions().flags("sm_80", "ptx")
    with pytest.raises(ValueError, match="sm_NN"):
        NvrtcOptions().flags("hopper", "cubin")


def test_a_broken_kernel_raises_an_error_naming_it_with_the_log():
    broken = 'extern "C" __global__ void broken_kernel(float* y) {\n  y[0] = undefined_name;\n}\n'
    with pytest.raises(NvrtcError) as info:
        compile_cuda(broken, "broken.cu", arch="sm_90")
    message = str(info.value)
    assert message.startswith("NVRTC failed to compile broken.cu (kernels: broken_kernel):")
    assert 'broken.cu(2): error: identifier "undefined_name" is undefined' in message
    assert info.value.kernels == ["broken_kernel"]


CANNED_REPORT = """\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_Z6mangledPf' for 'sm_80'
ptxas info    : Function properties for _Z6helperf
ptxas         .     24 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Function properties for _Z6mangledPf
ptxas         .     40 bytes stack frame, 36 bytes spill stores, 28 bytes spill loads
ptxas info    : Used 255 registers, 12288 bytes smem, 360 bytes cmem[0]
ptxas info    : Compiling entry function 'plain' for 'sm_80'
ptxas info    : Function properties for plain
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 9 registers, used 2 barriers, 360 bytes cmem[0]
"""


def test_parse_a_report_with_spills_and_device_functions():
    usage = parse_ptxas_report(CANNED_REPORT)
    assert list(usage) == ["_Z6mangledPf", "plain"]
    spilling = usage["_Z6mangledPf"]
    assert (spilling.registers, spilling.shared_bytes, spilling.stack_bytes) == (255, 12288, 40)
    assert (spilling.spill_store_bytes, spilling.spill_load_bytes, spilling.barriers) == (36, 28, 0)
    assert spilling.spills
    plain = usage["plain"]
    assert (plain.registers, plain.barriers, plain.shared_bytes, plain.spills) == (9, 2, 0, False)
    table = format_resource_usage(usage)
    assert table.splitlines()[0].split() == ["kernel", "arch", "registers", "smem", "B", "stack", "B", "spill", "st", "B", "spill", "ld", "B", "barriers"]
    assert table.splitlines()[1].split() == ["_Z6mangledPf", "sm_80", "255", "12288", "40", "36", "28", "0"]
    assert "warning: registers spill to local memory in _Z6mangledPf" in table


def test_resource_usage_table_for_a_source(cuda_source):
    table = resource_usage_table(cuda_source("block_reduce.cu"), "block_reduce.cu", "sm_90")
    rows = [line.split() for line in table.splitlines()[1:]]
    assert [r[0] for r in rows] == ["row_sum", "total_sum"]  # in source order
    assert all(r[1] == "sm_90" and int(r[2]) > 0 and r[3] == "128" and r[5:7] == ["0", "0"] for r in rows)
    assert "warning" not in table
    assert re.match(r"kernel\s+arch\s+registers", table)


def test_syntax_only_checks_without_generating_code(cuda_source):
    source = cuda_source("softmax_rows.cu")
    out = compile_cuda(source, "softmax_rows.cu", arch="sm_90", output="ptx", options=NvrtcOptions(syntax_only=True))
    assert out.code == b"" and "-fdevice-syntax-only" in out.flags
    broken = source.replace("__syncthreads();", "__syncthreads(;", 1)
    with pytest.raises(NvrtcError, match=r"softmax_rows\.cu\(\d+\): error"):
        compile_cuda(broken, "softmax_rows.cu", arch="sm_90", output="ptx", options=NvrtcOptions(syntax_only=True))
