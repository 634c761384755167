"""Calls between dynamic functions: each call binds the callee's own dims,
and inlining renames the callee's dims to the caller's."""

from __future__ import annotations

import numpy as np
import pytest

from dynamic_programs import load

from fusecc.compiler.pass_manager import PassContext, parse_pipeline, run_pipeline
from fusecc.runtime.reference import evaluate


@pytest.mark.parametrize("rows", [1, 5])
def test_inlining_renames_the_callee_dims_and_keeps_the_numbers(rows):
    module, _ = load("call")
    x = np.random.default_rng(rows).standard_normal((rows, 4)).astype(np.float32)
    expected = evaluate(module, "main", [x])[0]
    np.testing.assert_allclose(expected, np.exp(x) + x, rtol=1e-6)
    run_pipeline(parse_pipeline("inline,canonicalize"), module, PassContext())
    main = module.lookup("main")
    assert [str(op.result.type.shape) for op in main.body if op.name == "tensor.exp"] == ["(N, 4)"]
    np.testing.assert_array_equal(evaluate(module, "main", [x])[0], expected)
