"""`fuse` end to end: pinned kernel counts, the contract with the lowerings,
and the reference interpreter giving the same numbers before and after."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

from fusecc.compiler.diagnostics import DiagnosticError
from fusecc.passes.backends.hardware import hardware
from fusecc.compiler.parser import parse_module
from fusecc.compiler.pass_manager import PassContext, parse_pipeline, run_pipeline
from fusecc.compiler.printer import print_op
from fusecc.compiler.verifier import verify
from fusecc.dialects.fusion import GroupOp
from fusecc.passes.fusion.contract import contract_problems
from fusecc.passes.fusion.fuse import fuse_module
from fusecc.passes.lowering.matmul import MAX_SPECIALISED_COPIES
from fusecc.runtime.reference import evaluate, random_input

EXAMPLES = pathlib.Path(__file__).resolve().parents[3] / "examples"


def load(name: str):
    module = parse_module((EXAMPLES / name).read_text(), name)
    verify(module)
    return module


def groups_of(module, function: str | None = None) -> list[GroupOp]:
    funcs = [f for f in module.functions() if function is None or f.sym_name == function]
    return [op for f in funcs for op in f.body if isinstance(op, GroupOp)]


def fused(module, target: str = "h200", pipeline: str | None = None):
    run_pipeline(parse_pipeline(pipeline or f"fuse{{target={target}}}"), module, PassContext(target=target))
    return module


# --------------------------------------------------------------------------- pinned counts

PINNED = [
    ("matmul_bias_relu.ir", None, 1, 1),  # matmul + bias + relu
    ("mlp.ir", None, 2, 2),  # matmul + bias + gelu + matmul + bias
    ("attention.ir", "attention", 1, 1),  # the op-by-op attention chain
    ("layernorm4.ir", None, 1, 1),  # four independent LayerNorms
    ("elementwise_chain100.ir", None, 1, 1),  # a 100-op elementwise chain
    ("encoder_block.ir", None, 1, 7),  # BERT post-LN block, attention op by op
    ("encoder_block_ops.ir", None, 1, 7),  # the same with softmax, LayerNorm and GELU op by op
    ("llama_mlp.ir", None, 1, 4),  # RMSNorm + SwiGLU MLP + residual
]


@pytest.mark.parametrize("name, function, low, high", PINNED, ids=[p[0] for p in PINNED])
@pytest.mark.parametrize("target", ["h200", "a100", "cpu"])
def test_pinned_group_counts(name, function, low, high, target):
    module = fused(load(name), target)
    count = len(groups_of(module, function))
    assert low <= count <= high
    assert contract_problems(module) == []


def test_the_pinned_programs_are_the_issue_programs():
    """Guards the pins above against an example quietly shrinking."""
    assert sum(1 for op in load("elementwise_chain100.ir").walk() if op.name.startswith("tensor.")) == 100
    chain = [op.name for op in load("attention.ir").lookup("attention").body]
    assert chain.count("tensor.matmul") == 2 and "tensor.exp" in chain and "tensor.reduce_max" in chain
    assert sum(1 for op in load("layernorm4.ir").walk() if op.name == "tensor.layernorm") == 4
    ops = [op.name for op in load("encoder_block_ops.ir").walk()]
    assert "tensor.layernorm" not in ops and "tensor.softmax" not in ops and "tensor.gelu" not in ops


def test_the_op_by_op_encoder_fuses_like_the_composite_one():
    kinds = lambda name: [g.attr("kind") for g in groups_of(fused(load(name)))]
    assert kinds("encoder_block_ops.ir") == kinds("encoder_block.ir") == [
        "matmul", "attention", "matmul", "reduction", "matmul", "matmul", "reduction"
    ]


def siblings_program(count: int) -> str:
    """`count` projections of one input with biases, as Q/K/V are."""
    t = "tensor<{}xf32>".format
    params = ", ".join(f"%w{i}: {t('64x32')}, %b{i}: {t('32')}" for i in range(count))
    lines = [f"func.func @main(%x: {t('16x64')}, {params}) -> ({', '.join([t('16x32')] * count)}) {{"]
    for i in range(count):
        lines.append(f"  %m{i} = tensor.matmul %x, %w{i} : ({t('16x64')}, {t('64x32')}) -> {t('16x32')}")
        lines.append(f"  %y{i} = tensor.add %m{i}, %b{i} : ({t('16x32')}, {t('32')}) -> {t('16x32')}")
    lines.append(f"  func.return {', '.join(f'%y{i}' for i in range(count))} : {', '.join([t('16x32')] * count)}")
    return "\n".join(lines) + "\n}"


@pytest.mark.parametrize("target", ["h200", "a100", "cpu"])
def test_siblings_merge_only_as_far_as_the_lowering_reads_their_weights_piece_by_piece(target):
    def fused_ops(count):
        module = parse_module(siblings_program(count))
        verify(module)
        result = fuse_module(module, hardware(target))
        assert contract_problems(module) == []
        reasons = [r.reason for log, _ in result.logs for r in log.refusals]
        return [op.name for g in groups_of(module) for op in g.body_ops()], reasons

    merged, _ = fused_ops(3)
    assert merged.count("tensor.matmul") == 1 and merged.count("tensor.concat") == 2  # weights and biases
    apart, reasons = fused_ops(MAX_SPECIALISED_COPIES + 1)
    assert apart.count("tensor.matmul") == MAX_SPECIALISED_COPIES + 1 and "tensor.concat" not in apart
    assert any(f"reads at most {MAX_SPECIALISED_COPIES} concatenated weights piece by piece" in r for r in reasons)


# --------------------------------------------------------------------------- numbers


def assert_same_numbers(before, after):
    for a, b in zip(before, after, strict=True):
        a, b = np.asarray(a), np.asarray(b)
        if a.dtype.kind == "f":
            np.testing.assert_allclose(b.astype(np.float64), a.astype(np.float64), rtol=2e-4, atol=2e-5)
        else:
            np.testing.assert_array_equal(a, b)


def run_all(module, seed=0):
    results = {}
    for func in module.functions():
        rng = np.random.default_rng(seed)
        inputs = [random_input(t, rng) for t in func.function_type.inputs]
        results[func.sym_name] = evaluate(module, func.sym_name, inputs)
    return results


SMALL_EXAMPLES = sorted(p.name for p in EXAMPLES.glob("*.ir"))


@pytest.mark.parametrize("name", SMALL_EXAMPLES)
def test_every_example_computes_the_same_after_fuse(name):
    module = load(name)
    before = run_all(module)
    after = run_all(fused(module, "h200"))
    for function in before:
        assert_same_numbers(before[function], after[function])
    assert contract_problems(module) == []


def test_single_phase_passes_compose_and_keep_the_numbers():
    module = load("encoder_block_ops.ir")
    before = run_all(module)
    fused(module, pipeline="fuse{only=attention},fuse{only=matmul},fuse{only=reduction},fuse{only=elementwise},fuse{only=horizontal}")
    assert_same_numbers(before["encoder_block"], run_all(module)["encoder_block"])
    assert all(g.attr("kind") != "opaque" for g in groups_of(module))
    # `fuse` on the result keeps those groups and wraps nothing more.
    count = len(groups_of(module))
    fused(module)
    assert len(groups_of(module)) == count
    assert contract_problems(module) == []


def test_fuse_is_idempotent():
    module = fused(load("llama_block.ir"))
    once = print_op(module)
    assert print_op(fused(module)) == once


def test_an_unknown_target_is_a_diagnostic():
    with pytest.raises(DiagnosticError, match="unknown hardware 'tpu'"):
        fused(load("mlp.ir"), pipeline="fuse{target=tpu}")
