"""ONNX backend node tests (from the onnx wheel) through the importer.

The default suite runs a slice (the node tests of ops that real encoders and
decoders use most) on the reference and the CPU; the full run, every case of
every supported op, is `slow` and must have no failure (docs/onnx.md is its
report: `python -m fusecc.tools.onnx_conformance --write docs/onnx.md`)."""

from __future__ import annotations

import collections

import pytest

from fusecc.tools.onnx_conformance import KNOWN_SKIPS, load_cases, run_conformance, supported_ops

SLICE = ["softmax", "logsoftmax", "layernormalization", "slice", "gather", "gemm", "reshape", "split", "where", "gelu"]


@pytest.fixture(scope="module")
def slice_cases():
    return load_cases(SLICE)


def passes_per_op(outcomes) -> collections.Counter:
    return collections.Counter(o.op for o in outcomes if o.status == "pass")


@pytest.mark.parametrize("target", ["reference", "cpu"])
def test_a_slice_of_the_onnx_node_tests_passes(slice_cases, target):
    outcomes = run_conformance([target], slice_cases)
    failures = [f"{o.case}: {o.detail}" for o in outcomes if o.status == "fail"]
    assert not failures, "\n".join(failures)
    passed = passes_per_op(outcomes)
    for op in ("Softmax", "LogSoftmax", "LayerNormalization", "Slice", "Gather", "Gemm", "Reshape", "Split", "Where", "Gelu"):
        assert passed[op] >= 2, f"{op}: only {passed[op]} cases passed on {target}"


@pytest.mark.slow
def test_every_onnx_node_test_of_a_supported_op_passes_or_is_explained():
    cases = load_cases()
    names = {case.name for case in cases}
    stale = [key for key in KNOWN_SKIPS if key.split("@")[0] not in names]
    assert not stale, f"KNOWN_SKIPS lists cases that onnx does not have: {stale}"
    outcomes = run_conformance(["reference", "cpu"], cases, supported_ops())
    failures = [f"{o.case} on {o.target}: {o.detail}" for o in outcomes if o.status == "fail"]
    assert not failures, "\n".join(failures)
    for target in ("reference", "cpu"):
        ran = {o.op for o in outcomes if o.target == target and o.status == "pass"}
        tried = {o.op for o in outcomes if o.target == target}
        assert not tried - ran, f"ops with no passing case on {target}: {sorted(tried - ran)}"
