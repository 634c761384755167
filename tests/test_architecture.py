"""The layer contract (pyproject's [tool.importlinter], docs/architecture.md)
holds: levels depend one way, lazy imports included.

The source folders are mapped onto `fusecc.*` (pyproject's package-dir),
which import-linter cannot follow in place, so the package is built into a
temporary folder (setuptools' build_py: the same files a wheel holds) and
`lint-imports` runs over that copy. A second copy with deliberate
violations shows the check can fail.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
CONFIG = ROOT / "pyproject.toml"


def lint_imports_command() -> str:
    found = pathlib.Path(sys.executable).with_name("lint-imports")
    assert found.exists(), "import-linter is a test dependency (pip install -e '.[test]')"
    return str(found)


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> pathlib.Path:
    lib = tmp_path_factory.mktemp("built") / "lib"
    subprocess.run(
        [sys.executable, "-c", "import setuptools; setuptools.setup()", "-q", "build_py", "--build-lib", str(lib)],
        cwd=ROOT, check=True, capture_output=True, text=True,
    )
    assert (lib / "fusecc" / "compiler" / "parser.py").exists()
    return lib


def lint(lib: pathlib.Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(lib))
    return subprocess.run(
        [lint_imports_command(), str(CONFIG), "--no-cache"],
        cwd=lib.parent, env=env, capture_output=True, text=True, timeout=300,
    )


def test_every_contract_is_kept(built):
    result = lint(built)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    assert "0 broken" in result.stdout


CYCLES = """
import json
import sys

import grimp

sys.setrecursionlimit(10000)
graph = grimp.build_graph("fusecc", cache_dir=None)
index, low, stack, on_stack, cycles = {}, {}, [], set(), []


def visit(module):  # Tarjan's strongly connected components
    index[module] = low[module] = len(index)
    stack.append(module)
    on_stack.add(module)
    for imported in graph.find_modules_directly_imported_by(module):
        if imported not in index:
            visit(imported)
            low[module] = min(low[module], low[imported])
        elif imported in on_stack:
            low[module] = min(low[module], index[imported])
    if low[module] == index[module]:
        component = set()
        while module not in component:
            component.add(stack.pop())
        on_stack.difference_update(component)
        if len(component) > 1:
            cycles.append(sorted(component))


for module in sorted(graph.modules):
    if module not in index:
        visit(module)
print(json.dumps(cycles))
"""


def import_cycles(lib: pathlib.Path) -> list[list[str]]:
    env = dict(os.environ, PYTHONPATH=str(lib))
    result = subprocess.run([sys.executable, "-c", CYCLES], cwd=lib.parent, env=env, capture_output=True, text=True, timeout=300, check=True)
    return json.loads(result.stdout)


def test_no_two_modules_import_each_other(built, tmp_path):
    """No import cycle anywhere, lazy imports included (the layers contracts
    allow cycles inside a layer; this does not)."""
    assert import_cycles(built) == []
    lib = tmp_path / "lib"
    shutil.copytree(built, lib)
    with open(lib / "fusecc/passes/tiling/shapes.py", "a") as f:
        f.write("\n\ndef _lazy():\n    import fusecc.passes.tiling.contraction_shapes\n")
    assert ["fusecc.passes.tiling.contraction_shapes", "fusecc.passes.tiling.shapes"] in import_cycles(lib)


def test_a_broken_contract_is_reported(built, tmp_path):
    """The positive control: one violation of each contract in a copy."""
    lib = tmp_path / "lib"
    shutil.copytree(built, lib)
    violations = {
        "fusecc/compiler/ir.py": "import fusecc.dialects.tensor",  # the core imports a dialect
        "fusecc/passes/tiling/shapes.py": "import fusecc.runtime.cache",  # a pass imports the runtime
        "fusecc/passes/fusion/cost_model.py": "import fusecc.passes.lowering.matmul",  # fusion above the lowering
        "fusecc/passes/backends/llvm/host.py": "import fusecc.passes.backends.cuda.emit",  # one backend uses the other
        "fusecc/driver/targets.py": "def _lazy():\n    import argparse",  # the command line below the tools, lazily
        "fusecc/passes/tiling/unplaced.py": "LIMIT = 1",  # a tiling module the contract does not place
    }
    for path, line in violations.items():
        with open(lib / path, "a") as f:
            f.write(f"\n\n{line}\n")
    result = lint(lib)
    assert result.returncode != 0
    for reported in (
        "fusecc.compiler.ir -> fusecc.dialects.tensor",
        "fusecc.passes.tiling.shapes -> fusecc.runtime.cache",
        "fusecc.passes.fusion.cost_model -> fusecc.passes.lowering.matmul",
        "fusecc.passes.backends.llvm.host -> fusecc.passes.backends.cuda.emit",
        "fusecc.driver.targets -> argparse",
        "fusecc.passes.tiling.unplaced",
    ):
        assert reported in result.stdout, reported
