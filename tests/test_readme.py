"""The README's promises: its two opening commands (the second is what
.ci/run runs) and its pass example, which must work as printed."""

from __future__ import annotations

import pathlib
import re
import sys
import types

from fusecc.compiler import pass_manager as PM
from fusecc.compiler.parser import parse_module
from fusecc.compiler.printer import print_op

ROOT = pathlib.Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def code_blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README, re.S)


def test_readme_opens_with_the_two_commands():
    first = code_blocks("sh")[0]
    assert README.startswith("# fusecc\n\n```sh\n")
    assert first.splitlines() == [
        "pip install -e . && fusecc run examples/mlp.ir --random-inputs",
        "pip install -e '.[test]' && python -m pytest -n 2",
    ]
    ci = (ROOT / ".ci" / "run").read_text()
    assert "pip install --quiet -e '.[test]'" in ci and ci.rstrip().endswith("python -m pytest -n 2")


def test_the_pass_example_works_as_printed(monkeypatch):
    (example,) = [block for block in code_blocks("python") if "class StripDebugNames" in block]
    module = types.ModuleType("readme_pass_example")
    monkeypatch.setitem(sys.modules, "readme_pass_example", module)  # dataclasses look the module up
    exec(compile(example, "README.md", "exec"), module.__dict__)
    PM._load_builtin_registry()
    monkeypatch.setitem(PM.PASS_REGISTRY, "strip-debug-names", "readme_pass_example:StripDebugNames")
    program = parse_module((ROOT / "examples" / "mlp.ir").read_text())
    PM.run_pipeline(PM.parse_pipeline("strip-debug-names"), program)
    assert "%y = " not in print_op(program) and "%x: tensor" in print_op(program)
    PM.run_pipeline(PM.parse_pipeline("strip-debug-names{arguments=true}"), program)
    assert "%arg0: tensor<128x768xf32>" in print_op(program)


def test_the_dynamic_shapes_example_compiles_once_for_every_size(tmp_path):
    import numpy as np
    import pytest

    pytest.importorskip("llvmlite")
    import fusecc

    (example,) = [block for block in code_blocks("mlir") if "fusecc.dims" in block]
    path = tmp_path / "dyn.ir"
    path.write_text(example)
    program, reference = fusecc.compile(str(path), target="cpu"), fusecc.compile(str(path), target="reference")
    rng = np.random.default_rng(0)
    w, b = rng.standard_normal((64, 64)).astype(np.float32) / 8, rng.standard_normal(64).astype(np.float32)
    for batch, seq in [(1, 1), (3, 7), (2, 13)]:
        x = rng.standard_normal((batch, seq, 64)).astype(np.float32)
        (got,), (want,) = program(x, w, b).values(), reference(x, w, b).values()
        assert got.shape == (batch, seq, 64)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * float(np.abs(want).max()))
    assert program.stats.compilations == 1
